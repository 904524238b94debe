import { describe, expect, it } from "vitest";
import { DenyCache } from "../../src/engine/deny-cache.js";
import type { Decision } from "../../src/engine/types.js";

const T0 = 1_700_000_040_000;

function denial(retryAfter: number): Decision {
  const rule = { allowed: false, limit: 1, remaining: 0, resetAt: T0 + retryAfter, retryAfter };
  return { ...rule, rule: "r", source: "redis", plan: "default", decidedAt: T0, rules: { r: rule } };
}

describe("deny cache", () => {
  it("evicts the least recently used: a hit refreshes an entry", () => {
    const cache = new DenyCache(2);
    cache.set("a", 1, T0, denial(60_000));
    cache.set("b", 1, T0, denial(60_000));
    expect(cache.get("a", 1, T0 + 1)?.source).toBe("cache"); // a is now the most recently used
    cache.set("c", 1, T0 + 2, denial(60_000)); // evicts b, not a
    expect(cache.size).toBe(2);
    expect(cache.get("b", 1, T0 + 3)).toBeUndefined();
    expect(cache.get("a", 1, T0 + 3)?.source).toBe("cache");
    expect(cache.get("c", 1, T0 + 3)?.source).toBe("cache");
  });

  it("evicts in insertion order when nothing is read", () => {
    const cache = new DenyCache(2);
    cache.set("a", 1, T0, denial(60_000));
    cache.set("b", 1, T0, denial(60_000));
    cache.set("c", 1, T0, denial(60_000));
    expect(
      [cache.get("a", 1, T0), cache.get("b", 1, T0), cache.get("c", 1, T0)].map((d) => d?.source),
    ).toEqual([undefined, "cache", "cache"]);
  });

  it("a re-denial moves an entry to the back too", () => {
    const cache = new DenyCache(2);
    cache.set("a", 1, T0, denial(60_000));
    cache.set("b", 1, T0, denial(60_000));
    cache.set("a", 1, T0 + 5, denial(60_000));
    cache.set("c", 1, T0 + 6, denial(60_000));
    expect(cache.get("a", 1, T0 + 7)?.retryAfter).toBe(59_998);
    expect(cache.get("b", 1, T0 + 7)).toBeUndefined();
  });

  it("answers until the moment of admission, for the same cost only, with times made relative", () => {
    const cache = new DenyCache(10);
    cache.set("a", 2, T0, denial(1000));
    expect(cache.get("a", 1, T0 + 100)).toBeUndefined();
    expect(cache.get("a", 2, T0 + 400)).toMatchObject({ source: "cache", retryAfter: 600 });
    expect(cache.get("a", 2, T0 + 999)?.rules.r).toMatchObject({ allowed: false, retryAfter: 1 });
    expect(cache.get("a", 2, T0 + 1000)).toBeUndefined();
    expect(cache.size).toBe(0);
  });
});
