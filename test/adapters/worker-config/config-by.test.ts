// A route rule's "by": the key that rule counts by, when not the route's. Checked as a route's "key" is,
// each problem at its rule's path; the parsed route names the record field each rule is keyed by and
// the key each field is read from.
import { describe, expect, test } from "vitest";
import { parseConfig } from "../../../src/adapters/worker/config.js";

const gateway = {
  name: "chat",
  match: { path: "/v1/*" },
  key: "header:x-api-key",
  rules: {
    perKey: { algorithm: "gcra", limit: 100_000, period: "1m" },
    perIp: { algorithm: "gcra", limit: 200_000, period: "1m", by: "ip" },
    global: { algorithm: "fixedWindow", limit: 5_000_000, window: "1m", by: "global" },
  },
};

function errorsOf(input: unknown): readonly string[] {
  const result = parseConfig(input);
  if (result.ok) throw new Error("expected the config to be rejected");
  return result.errors;
}

function routeOf(route: unknown) {
  const result = parseConfig({ origin: "https://api.example.com", routes: [route] });
  if (!result.ok) throw new Error(result.errors.join("\n"));
  return result.config.routes[0]!;
}

describe("a rule's by", () => {
  test("each rule is keyed by a field: the route's key is id, any other key its own text", () => {
    const route = routeOf(gateway);
    expect(route.identifiers).toEqual({
      id: { kind: "header", name: "x-api-key" },
      ip: { kind: "ip" },
      global: { kind: "global" },
    });
    expect(route.rules).toEqual({
      perKey: { algorithm: "gcra", limit: 100_000, period: "1m" },
      perIp: { algorithm: "gcra", limit: 200_000, period: "1m", by: "ip" },
      global: { algorithm: "fixedWindow", limit: 5_000_000, window: "1m", by: "global" },
    });
  });

  test("a by that spells the route's key (any case of a header name) is the route's key", () => {
    const route = routeOf({
      ...gateway,
      rules: { a: { algorithm: "gcra", limit: 5, period: "1s", by: "header:X-API-Key" } },
    });
    expect(route.identifiers).toEqual({ id: { kind: "header", name: "x-api-key" } });
    expect(route.rules).toEqual({ a: { algorithm: "gcra", limit: 5, period: "1s" } });
  });

  test("two rules on one key share its field; a route whose rules all have a by reads no id", () => {
    const route = routeOf({
      name: "api",
      key: "ip",
      rules: {
        a: { algorithm: "gcra", limit: 5, period: "1s", by: "cookie:sid" },
        b: { algorithm: "fixedWindow", limit: 50, window: "1h", by: "cookie:sid" },
        c: { algorithm: "gcra", limit: 9, period: "1s", by: "path" },
      },
    });
    expect(route.identifiers).toEqual({
      "cookie:sid": { kind: "cookie", name: "sid" },
      path: { kind: "path" },
    });
    expect(Object.values(route.rules).map((rule) => (rule as { by?: string }).by)).toEqual([
      "cookie:sid",
      "cookie:sid",
      "path",
    ]);
  });

  test("a cookie name no record field can spell is keyed by its kind and a hash of the key", () => {
    const route = routeOf({
      name: "api",
      key: "ip",
      rules: { a: { algorithm: "gcra", limit: 5, period: "1s", by: "cookie:s!d" } },
    });
    const field = (route.rules.a as { by?: string }).by!;
    expect(field).toMatch(/^cookie\.[0-9a-f]{16}$/);
    expect(route.identifiers).toEqual({ [field]: { kind: "cookie", name: "s!d" } });
  });

  test("every bad by is reported at once, each at its rule's path, beside the rule's other problems", () => {
    const errors = errorsOf({
      origin: "https://api.example.com",
      routes: [
        { name: "a", key: "ip", rules: { perMinute: { algorithm: "gcra", limit: 5, period: "1m" } } },
        { name: "b", key: "ip", rules: { perMinute: { algorithm: "gcra", limit: 5, period: "1m" } } },
        {
          name: "c",
          key: "ip",
          rules: {
            perIp: { algorithm: "gcra", limit: 5, period: "1m", by: "user" },
            perKey: { algorithm: "gcra", limit: 0, period: "1m", by: 7 },
            spoofed: { algorithm: "gcra", limit: 5, period: "1m", by: "header:x-forwarded-for" },
            empty: { algorithm: "gcra", limit: 5, period: "1m", by: "cookie:" },
          },
        },
      ],
    });
    expect(errors).toEqual([
      'routes[2].rules.perIp.by: "user" is not a key; use "ip", "path", "global", "header:NAME" or "cookie:NAME"',
      "routes[2].rules.perKey.limit: must be a positive whole number, got 0",
      'routes[2].rules.perKey.by: must be a key such as "ip", "header:x-api-key" or "global", got 7',
      'routes[2].rules.spoofed.by: "header:x-forwarded-for": a client can send any x-forwarded-for it likes; use "ip", which reads CF-Connecting-IP (set by Cloudflare)',
      'routes[2].rules.empty.by: "cookie:": the cookie name must be a non-empty HTTP token',
    ]);
  });

  test("a route's cost and plans are checked against rules with a by as against any other", () => {
    const errors = errorsOf({
      origin: "https://api.example.com",
      routes: [
        {
          ...gateway,
          cost: 1000,
          rules: { ...gateway.rules, tiny: { algorithm: "gcra", limit: 10, period: "1s", by: "ip" } },
          plans: { pro: { perIp: { limit: 0 } } },
        },
      ],
    });
    expect(errors).toHaveLength(2);
    expect(errors[0]).toMatch(/^routes\[0\]\.cost: 1000 can never be admitted/);
    expect(errors[1]).toBe("routes[0].plans.pro.perIp.limit: must be a positive whole number, got 0");
  });
});
