// A route's "settle" in the Worker's config: where the response states what the request cost.
import { describe, expect, test } from "vitest";
import { parseConfig } from "../../../src/adapters/worker/config.js";

const route = (extra: Record<string, unknown>) => ({
  origin: "https://api.example.com",
  routes: [
    {
      name: "chat",
      match: { path: "/v1/*" },
      key: "header:authorization",
      rules: { tokens: { algorithm: "gcra", limit: 100000, period: "1m" } },
      cost: 1000,
      ...extra,
    },
  ],
});

function errorsOf(input: unknown): readonly string[] {
  const result = parseConfig(input);
  if (result.ok) throw new Error("expected the config to be rejected");
  return result.errors;
}

describe("a route's settle", () => {
  test("a header (exposed or not) or the OpenAI usage, kept as given; cost is the reservation", () => {
    for (const settle of [{ header: "x-usage" }, { header: "X-Usage", expose: true }, { usage: "openai" }]) {
      const result = parseConfig(JSON.stringify(route({ settle })));
      if (!result.ok) throw new Error(result.errors.join("\n"));
      expect(result.config.routes[0]).toMatchObject({ cost: 1000, settle });
    }
    const none = parseConfig(route({}));
    expect(none.ok && "settle" in none.config.routes[0]!).toBe(false);
  });

  test.each([
    [
      "x-usage",
      'routes[0].settle: must be an object such as { "header": "x-usage" } or { "usage": "openai" }, got "x-usage"',
    ],
    [
      {},
      'routes[0].settle: must give exactly one of header and usage: an object such as { "header": "x-usage" } or { "usage": "openai" }',
    ],
    [
      { header: "x-usage", usage: "openai" },
      'routes[0].settle: must give exactly one of header and usage: an object such as { "header": "x-usage" } or { "usage": "openai" }',
    ],
    [
      { header: "x usage:" },
      `routes[0].settle.header: must be a header name such as "x-usage" (letters, digits and !#$%&'*+.^_\`|~-), got "x usage:"`,
    ],
    [
      { header: 7 },
      `routes[0].settle.header: must be a header name such as "x-usage" (letters, digits and !#$%&'*+.^_\`|~-), got 7`,
    ],
    [{ usage: "anthropic" }, 'routes[0].settle.usage: must be "openai", got "anthropic"'],
    [{ header: "x-usage", expose: "yes" }, 'routes[0].settle.expose: must be true or false, got "yes"'],
    [{ usage: "openai", expose: true }, "routes[0].settle.expose: applies only with header"],
    [
      { header: "x-usage", from: "origin" },
      "routes[0].settle.from: is not a known field; use header (and expose) or usage",
    ],
  ])("%j: %s", (settle, message) => {
    expect(errorsOf(route({ settle }))).toEqual([message]);
  });

  test("reported beside the route's other problems", () => {
    expect(errorsOf(route({ settle: { usage: "x" }, cost: 0 }))).toEqual([
      "routes[0].cost: must be a positive whole number, got 0",
      'routes[0].settle.usage: must be "openai", got "x"',
    ]);
  });
});
