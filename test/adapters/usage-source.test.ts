import { describe, expect, test } from "vitest";
import { checkUsageSource } from "../../src/adapters/usage-source.js";

describe("checkUsageSource", () => {
  test("a header or the openai usage", () => {
    expect(checkUsageSource({ header: "x-usage" })).toEqual([]);
    expect(checkUsageSource({ header: "X-Usage", expose: true })).toEqual([]);
    expect(checkUsageSource({ usage: "openai" })).toEqual([]);
  });

  test("each problem at its field", () => {
    expect(checkUsageSource("x-usage")).toEqual([
      {
        path: [],
        message: 'must be an object such as { "header": "x-usage" } or { "usage": "openai" }, got "x-usage"',
      },
    ]);
    expect(checkUsageSource({})).toEqual([
      {
        path: [],
        message:
          'must give exactly one of header and usage: an object such as { "header": "x-usage" } or { "usage": "openai" }',
      },
    ]);
    expect(checkUsageSource({ header: "x-usage", usage: "openai" }).map((i) => i.path)).toEqual([[]]);
    expect(checkUsageSource({ header: "x usage" })).toEqual([
      {
        path: ["header"],
        message: `must be a header name such as "x-usage" (letters, digits and !#$%&'*+.^_\`|~-), got "x usage"`,
      },
    ]);
    expect(checkUsageSource({ header: "" }).map((i) => i.path)).toEqual([["header"]]);
    expect(checkUsageSource({ usage: "anthropic" })).toEqual([
      { path: ["usage"], message: 'must be "openai", got "anthropic"' },
    ]);
    expect(checkUsageSource({ header: "x-usage", expose: "yes" })).toEqual([
      { path: ["expose"], message: 'must be true or false, got "yes"' },
    ]);
    expect(checkUsageSource({ usage: "openai", expose: true })).toEqual([
      { path: ["expose"], message: "applies only with header" },
    ]);
    expect(checkUsageSource({ header: "x-usage", exposed: true })).toEqual([
      { path: ["exposed"], message: "is not a known field; use header (and expose) or usage" },
    ]);
  });
});
