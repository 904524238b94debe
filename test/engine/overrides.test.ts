// Overrides, option and API: the stored format byte for byte (key, line, intent, index, TTL), set()'s
// validation (messages as exact strings, nothing stored after a refusal), list() and page() over the
// index (paginated, cleaned of members whose key is gone), maxStale on cached denials, and the
// changing Limiter dropping its own cached denial and lease of the identifier; end to end (with the
// read path): an upgrade reaching a second Limiter at maxStale, exact counts after set(), the lease bound.

import type { AddressInfo } from "node:net";
import { createServer } from "node:net";
import type { Redis } from "@upstash/redis";
import { describe, expect, inject, it } from "vitest";
import { DenyCache } from "../../src/engine/deny-cache.js";
import { RedisCallError } from "../../src/engine/errors.js";
import { GCRA_ONE_RULE_OVERRIDES } from "../../src/engine/generated/scripts.js";
import { ATTEMPTS } from "../../src/engine/overrides.js";
import { templateOf } from "../../src/engine/scripts/overrides.js";
import type { Decision } from "../../src/engine/types.js";
import {
  fixedWindow,
  gcra,
  Limiter,
  type LimiterOptions,
  type Override,
  slidingWindow,
  tokenBucket,
} from "../../src/index.js";
import { startCutHop } from "../cut-hop.js";
import { bridgeRedis, manualClock, uniquePrefix } from "../support.js";

const DAY = 86_400_000;
/** A real-time start: override keys expire by Redis's own clock (PXAT), so expiresAt must be ahead of it. */
const NOW = Math.floor(Date.now() / 60_000) * 60_000;

const RULES = {
  perMinute: gcra({ limit: 100, period: "1m" }),
  daily: fixedWindow({ limit: 10_000, window: "1d" }),
};
const PLANS = {
  pro: { perMinute: { limit: 1_000 }, daily: { limit: 1_000_000 } },
  enterprise: { perMinute: { limit: 10_000, burst: 20_000 }, daily: { limit: 100_000_000 } },
};

function setup(options: Partial<LimiterOptions> = {}, prefix = uniquePrefix("overrides")) {
  const clock = manualClock(NOW);
  const redis = bridgeRedis();
  const limiter = new Limiter({
    redis,
    prefix,
    rules: RULES,
    plans: PLANS,
    overrides: true,
    clock,
    ...options,
  });
  return { limiter, clock, redis, prefix };
}

const pexpiretime = (redis: Redis, key: string) =>
  redis.eval("return redis.call('PEXPIRETIME', KEYS[1])", [key], []) as Promise<number>;

/** The message `set()` rejects with. */
async function refusal(limiter: Limiter, override: unknown, id = "id"): Promise<string> {
  try {
    await limiter.overrides.set(id, override as Override);
  } catch (error) {
    return (error as Error).message;
  }
  throw new Error("set() accepted it");
}

function construction(overrides: unknown): string {
  try {
    new Limiter({
      redis: { url: "http://127.0.0.1:1", token: "t" },
      rules: RULES,
      overrides: overrides as never,
    });
  } catch (error) {
    return (error as Error).message;
  }
  return "built";
}

describe("the overrides option", () => {
  it("takes true or { maxStale } (default 1s, 0 allowed), naming overrides.maxStale", () => {
    const { limiter } = setup();
    expect(limiter.overrides.enabled).toBe(true);
    expect(limiter.overrides.maxStale).toBe(1000);
    expect(setup({ overrides: { maxStale: "10s" } }).limiter.overrides.maxStale).toBe(10_000);
    expect(setup({ overrides: { maxStale: 0 } }).limiter.overrides.maxStale).toBe(0);
    expect(setup({ overrides: {} }).limiter.overrides.maxStale).toBe(1000);
    expect(construction({ maxStale: "soon" })).toBe(
      'overrides.maxStale: "soon" is not a duration; use milliseconds or a string like "500ms", "10s", "1m", "1h", "1d"',
    );
    expect(construction({ maxStale: -1 })).toBe(
      "overrides.maxStale: must be a positive whole number of milliseconds, got -1",
    );
    expect(construction({ maxStale: "30d" })).toBe(
      'overrides.maxStale: must be at most 2147483647 ms, got "30d"',
    );
    expect(construction({ maxStail: "1s" })).toBe(
      "overrides.maxStail: not an overrides option; it takes maxStale",
    );
    expect(construction("yes")).toBe('overrides: expected true, false or { maxStale }, got "yes"');
    expect(construction(false)).toBe("built");
  });

  it("off: every method rejects saying how to turn it on", async () => {
    const { limiter } = setup({ overrides: undefined });
    expect(limiter.overrides.enabled).toBe(false);
    const message = "overrides: not enabled; pass overrides: true";
    await expect(limiter.overrides.set("id", { plan: "pro" })).rejects.toThrow(message);
    await expect(limiter.overrides.get("id")).rejects.toThrow(message);
    await expect(limiter.overrides.delete("id")).rejects.toThrow(message);
    await expect(limiter.overrides.page()).rejects.toThrow(message);
    await expect(limiter.overrides.list().next()).rejects.toThrow(message);
  });
});

describe("stored format", () => {
  it("a plan alone: `=<plan>\\n` in the identifier's hash tag, indexed, no TTL", async () => {
    const { limiter, redis, prefix } = setup();
    await limiter.overrides.set("key_123", { plan: "enterprise" });
    const key = `${prefix}:{=key_123}:override`;
    expect(await redis.get(key)).toBe("=enterprise\n");
    // the same hash tag as every rule key of the identifier: one slot
    for (const ruleKey of limiter.keys("key_123"))
      expect(ruleKey.startsWith(`${prefix}:{=key_123}:`)).toBe(true);
    expect(await redis.pttl(key)).toBe(-1);
    expect(await redis.zrange(`${prefix}:overrides`, 0, -1, { withScores: true })).toEqual(["key_123", 0]);
    expect(await redis.pttl(`${prefix}:overrides`)).toBe(-1);
    expect(await limiter.overrides.get("key_123")).toEqual({ plan: "enterprise" });
    expect(await limiter.overrides.get("key_999")).toBeUndefined();
    // with an expiry, the json follows the line; a value stored with its json (as earlier versions
    // wrote a plan alone) reads the same
    const expiresAt = NOW + DAY;
    await limiter.overrides.set("key_456", { plan: "enterprise", expiresAt });
    expect(await redis.get(`${prefix}:{=key_456}:override`)).toBe(
      `=enterprise\n{"plan":"enterprise","expiresAt":${expiresAt}}`,
    );
    await redis.set(`${prefix}:{=key_789}:override`, '=enterprise\n{"plan":"enterprise"}');
    expect(await limiter.overrides.get("key_789")).toEqual({ plan: "enterprise" });
  });

  it("custom rules: `!` and 4 tokens per rule as the script's ARGV, over the base or the named plan; PXAT = expiresAt", async () => {
    const { limiter, redis, prefix } = setup();
    const expiresAt = NOW + DAY;
    await limiter.overrides.set("key_456", { rules: { perMinute: { limit: 5_000 } }, expiresAt });
    const key = `${prefix}:{=key_456}:override`;
    expect(await redis.get(key)).toBe(
      `!gcra 5000 60000 5000 fixedWindow 10000 86400000 0\n{"rules":{"perMinute":{"limit":5000}},"expiresAt":${expiresAt}}`,
    );
    expect(await pexpiretime(redis, key)).toBe(expiresAt);
    expect(await limiter.overrides.get("key_456")).toEqual({
      rules: { perMinute: { limit: 5000 } },
      expiresAt,
    });

    // plan and rules: the plan's rules with the override's fields over them
    await limiter.overrides.set("key_789", { plan: "pro", rules: { daily: { limit: 5 } } });
    expect(await redis.get(`${prefix}:{=key_789}:override`)).toBe(
      '!gcra 1000 60000 1000 fixedWindow 5 86400000 0\n{"plan":"pro","rules":{"daily":{"limit":5}}}',
    );
    // a set without expiresAt replaces the TTL too: none
    await limiter.overrides.set("key_456", { plan: "pro" });
    expect(await pexpiretime(redis, key)).toBe(-1);
    expect(await redis.zcard(`${prefix}:overrides`)).toBe(2);
  });

  it("a token bucket and a sliding window encode as the script reads them; a same window is no change", async () => {
    const clock = manualClock(NOW);
    const prefix = uniquePrefix("overrides");
    const limiter = new Limiter({
      redis: bridgeRedis(),
      prefix,
      rules: {
        bucket: tokenBucket({ capacity: 20, refillRate: 10, interval: "1s" }),
        sliding: slidingWindow({ limit: 100, window: "1m" }),
      },
      overrides: true,
      clock,
    });
    await limiter.overrides.set("u", {
      rules: { bucket: { capacity: 50 }, sliding: { limit: 7, window: 60_000 } },
    });
    expect(await bridgeRedis().get(`${prefix}:{=u}:override`)).toBe(
      '!gcra 10 1000 50 slidingWindow 7 60000 0\n{"rules":{"bucket":{"capacity":50},"sliding":{"limit":7,"window":60000}}}',
    );
  });

  it("delete removes the key and the index member", async () => {
    const { limiter, redis, prefix } = setup();
    await limiter.overrides.set("gone", { plan: "pro" });
    await limiter.overrides.delete("gone");
    await limiter.overrides.delete("never-set");
    expect(await redis.exists(`${prefix}:{=gone}:override`)).toBe(0);
    expect(await redis.zcard(`${prefix}:overrides`)).toBe(0);
    expect(await limiter.overrides.get("gone")).toBeUndefined();
  });
});

describe("one rule: its script's variant built for the call's plan", () => {
  it("sends only now and the cost; the table and the rule's parameters are the script's; Redis loads it once", async () => {
    // a rule no other test has, so that Redis has never seen this plan's script
    const limit = 7_000 + Math.floor(Math.random() * 900);
    const rules = { r: gcra({ limit, period: "1h", burst: 3 }) };
    const plans = { pro: { r: { burst: 5 } } };
    const sent: unknown[][] = [];
    const realFetch = globalThis.fetch;
    globalThis.fetch = async (...args: Parameters<typeof fetch>) => {
      sent.push(...(JSON.parse(String(args[1]?.body)) as unknown[][]));
      return realFetch(...args);
    };
    try {
      const { limiter, redis } = setup({ rules, plans });
      await limiter.overrides.set("u", { plan: "pro" });
      sent.length = 0;
      // pro's burst of 5 at one instant, then a denial
      for (let i = 0; i < 6; i++) expect((await limiter.limit("u")).allowed).toBe(i < 5);
      expect((await limiter.limit("v")).remaining).toBe(2);
      // (the first decision's EVALSHA twice when Redis lacked the script: NOSCRIPT, SCRIPT LOAD, again)
      const loads = sent.filter((c) => c[0] === "SCRIPT").length;
      expect(loads).toBeLessThanOrEqual(1);
      const calls = sent.filter((c) => c[0] === "EVALSHA");
      expect(calls).toHaveLength(7 + loads);
      const sha = String(calls[0]![1]);
      // the plan the call names (the base rules here) picks the script; a stored plan is read in it
      expect(new Set(calls.map((c) => c[1]))).toEqual(new Set([sha]));
      for (const c of calls) expect(c.slice(5)).toEqual([NOW.toString(16), "1"]);
      // Redis holds a script by that name: the one built for the plan, not the template
      expect(await redis.scriptExists(sha)).toEqual([1]);
      expect(sha).not.toBe(GCRA_ONE_RULE_OVERRIDES.sha1);
      expect(templateOf(sha)).toBe(GCRA_ONE_RULE_OVERRIDES);
    } finally {
      globalThis.fetch = realFetch;
    }
  });
});

describe("one rule: a stored plan's name of any length", () => {
  it("a plan named with 30 to 64 characters applies as a short one does (its line is looked up whole)", async () => {
    for (const length of [1, 29, 30, 31, 32, 64]) {
      const name = "p".repeat(length);
      for (const rules of [
        { r: fixedWindow({ limit: 10, window: "1h" }) },
        { r: gcra({ limit: 10, period: "1h" }) },
      ]) {
        const { limiter } = setup({ rules, plans: { [name]: { r: { limit: 20 } } } as never });
        await limiter.overrides.set("u", { plan: name });
        const d = await limiter.limit("u");
        expect({ length, plan: d.plan, limit: d.limit }).toEqual({ length, plan: name, limit: 20 });
      }
    }
  });

  it("a custom line written with a leading zero (by hand) applies its limit and counts only admissions", async () => {
    const { limiter, redis, prefix } = setup({
      rules: { r: fixedWindow({ limit: 10, window: "1h" }) },
      plans: { pro: { r: { limit: 20 } } },
    });
    const override = `${prefix}:{=u}:override`;
    // the limit 5 as "05": the count's digits are never compared with these
    await redis.set(override, '!fixedWindow 05 3600000 0\n{"rules":{"r":{"limit":5}}}');
    const allowed = [];
    for (let i = 0; i < 8; i++) allowed.push((await limiter.limit("u")).allowed);
    expect(allowed).toEqual([true, true, true, true, true, false, false, false]);
    const counts = await redis.keys(`${prefix}:{=u}:r:*`);
    expect(counts).toHaveLength(1);
    expect(await redis.get(counts[0]!)).toBe(5);
  });
});

describe("set() validation: the field named, nothing stored", () => {
  const cases: [unknown, string][] = [
    [{ plan: "gold" }, 'plan: unknown plan "gold"; the plans are pro, enterprise'],
    [{ plan: "custom" }, 'plan: unknown plan "custom"; the plans are pro, enterprise'],
    [{ plan: 3 }, "plan: unknown plan 3; the plans are pro, enterprise"],
    [{ rules: { perMinuet: { limit: 5 } } }, "rules.perMinuet: not a rule; the rules are perMinute, daily"],
    [{ rules: { perMinute: { limit: 0 } } }, "rules.perMinute.limit: must be a positive whole number, got 0"],
    [
      { rules: { perMinute: { limt: 5 } } },
      "rules.perMinute.limt: not an option of gcra; it takes limit, period, burst",
    ],
    [
      { rules: { perMinute: { algorithm: "fixedWindow" } } },
      "rules.perMinute.algorithm: an override cannot change a rule's algorithm",
    ],
    [
      { rules: { daily: { window: "1h" } } },
      "rules.daily.window: an override cannot change a window; give the identifier a plan with that window",
    ],
    [
      { rules: { daily: 5 } },
      "rules.daily: expected the fields of fixedWindow it changes, e.g. { limit: 1000 }, got 5",
    ],
    [
      { rules: [] },
      "rules: expected the rules it changes, e.g. { perMinute: { limit: 1000 } }, got an array",
    ],
    [{ plan: "pro", expiresAt: NOW }, `expiresAt: must be a whole epoch ms after now (${NOW}), got ${NOW}`],
    [
      { plan: "pro", expiresAt: NOW + 0.5 },
      `expiresAt: must be a whole epoch ms after now (${NOW}), got ${NOW + 0.5}`,
    ],
    [
      { plan: "pro", expiresAt: "tomorrow" },
      `expiresAt: must be a whole epoch ms after now (${NOW}), got "tomorrow"`,
    ],
    [{ plan: "pro", until: 5 }, "until: not an override field; it takes plan, rules, expiresAt"],
    [{}, 'plan: give plan, rules or both, e.g. { plan: "pro" }'],
    [
      { plan: "gold", rules: { perMinute: { limit: 0 } }, foo: 1 },
      'foo: not an override field; it takes plan, rules, expiresAt; plan: unknown plan "gold"; the plans are pro, enterprise',
    ],
    [null, 'override: expected { plan } or { rules } (and expiresAt), e.g. { plan: "pro" }, got null'],
  ];
  it.each(cases)("%j", async (override, message) => {
    const { limiter, redis, prefix } = setup();
    expect(await refusal(limiter, override)).toBe(message);
    expect(await redis.exists(`${prefix}:{=id}:override`)).toBe(0);
    expect(await redis.zcard(`${prefix}:overrides`)).toBe(0);
  });

  // JSON.parse makes "__proto__" an own key; merged into a rule it became the rule's prototype and
  // its burst was read through it (a burst raised to 50 past the unknown-field check).
  const REFUSED = "refused: __proto__, constructor and prototype are never field names";
  it.each([
    ['{"rules":{"perMinute":{"__proto__":{"burst":50}}}}', `rules.perMinute.__proto__: ${REFUSED}`],
    ['{"plan":"pro","__proto__":{"plan":"enterprise"}}', `__proto__: ${REFUSED}`],
    ['{"rules":{"__proto__":{"perMinute":{"limit":5}}}}', `rules.__proto__: ${REFUSED}`],
    ['{"rules":{"perMinute":{"limit":5,"constructor":1}}}', `rules.perMinute.constructor: ${REFUSED}`],
    ['{"plan":"pro","x":[{"a":{"prototype":{}}}]}', `x[0].a.prototype: ${REFUSED}`],
  ])("hostile field names in parsed JSON, at any depth: %s", async (json, message) => {
    const { limiter, redis, prefix } = setup();
    expect(await refusal(limiter, JSON.parse(json))).toBe(message);
    expect(await redis.exists(`${prefix}:{=id}:override`)).toBe(0);
    expect(await redis.zcard(`${prefix}:overrides`)).toBe(0);
  });

  it("an object whose prototype a literal's __proto__ set is refused, naming its path", async () => {
    const { limiter, redis, prefix } = setup();
    const fields = { __proto__: { burst: 50 } };
    expect(await refusal(limiter, { rules: { perMinute: fields } })).toBe(
      "rules.perMinute: must be a plain object (its prototype was set)",
    );
    expect(await refusal(limiter, Object.create({ plan: "pro" }))).toBe(
      "override: must be a plain object (its prototype was set)",
    );
    expect(await redis.zcard(`${prefix}:overrides`)).toBe(0);
  });

  it("accepts a window given unchanged, and plan default (the base rules, whatever a call names)", async () => {
    const { limiter, redis, prefix } = setup();
    await limiter.overrides.set("a", { rules: { daily: { window: "1d" } } });
    await limiter.overrides.set("b", { plan: "default" });
    expect(await redis.get(`${prefix}:{=a}:override`)).toBe(
      '!gcra 100 60000 100 fixedWindow 10000 86400000 0\n{"rules":{"daily":{"window":"1d"}}}',
    );
    expect(await redis.get(`${prefix}:{=b}:override`)).toBe("=default\n");
  });

  it("a Limiter without plans says so; an empty identifier is refused", async () => {
    const limiter = new Limiter({
      redis: bridgeRedis(),
      rules: RULES,
      overrides: true,
      prefix: uniquePrefix("o"),
    });
    expect(await refusal(limiter, { plan: "pro" })).toBe(
      'plan: unknown plan "pro"; this Limiter has no plans',
    );
    expect(await refusal(limiter, { plan: "pro" }, "")).toMatch(/^identifier: must not be empty/);
  });
});

describe("list() and page()", () => {
  it("pages 250 identifiers 100 at a time, in order, with no KEYS or SCAN", async () => {
    const { limiter } = setup();
    const ids = Array.from({ length: 250 }, (_, i) => `user:${String(i).padStart(3, "0")}`);
    await Promise.all(ids.map((id, i) => limiter.overrides.set(id, { plan: i % 2 ? "pro" : "enterprise" })));
    const listed: string[] = [];
    for await (const { identifier, override } of limiter.overrides.list({ pageSize: 100 })) {
      listed.push(identifier);
      expect(override).toEqual({ plan: Number(identifier.slice(5)) % 2 ? "pro" : "enterprise" });
    }
    expect(listed).toEqual(ids);

    const first = await limiter.overrides.page({ limit: 100 });
    expect(first.items.map((item) => item.identifier)).toEqual(ids.slice(0, 100));
    expect(first.next).toBe("user:099");
    const second = await limiter.overrides.page({ after: first.next, limit: 100 });
    expect(second.items.map((item) => item.identifier)).toEqual(ids.slice(100, 200));
    const third = await limiter.overrides.page({ after: second.next, limit: 100 });
    expect(third.items.map((item) => item.identifier)).toEqual(ids.slice(200));
    expect(third.next).toBeUndefined();
    await expect(limiter.overrides.page({ limit: 1001 })).rejects.toThrow(
      "limit: must be a whole number from 1 to 1000, got 1001",
    );
  });

  it("within: only identifiers with that prefix", async () => {
    const { limiter } = setup();
    for (const id of ["api:a", "api:b", "apj:c", "ap", "web:a", "api;"])
      await limiter.overrides.set(id, { plan: "pro" });
    const page = await limiter.overrides.page({ within: "api:" });
    expect(page.items.map((item) => item.identifier)).toEqual(["api:a", "api:b"]);
    const after = await limiter.overrides.page({ within: "api:", after: "api:a" });
    expect(after.items.map((item) => item.identifier)).toEqual(["api:b"]);
  });

  it("skips and un-indexes members whose key expired or was deleted behind its back", async () => {
    const { limiter, redis, prefix } = setup();
    for (const id of ["a", "b", "c", "d"])
      await limiter.overrides.set(id, { plan: "pro", expiresAt: NOW + DAY });
    // b's expiresAt has passed (moved into the past: Redis expires it), d's key was lost alone
    await redis.pexpireat(`${prefix}:{=b}:override`, Date.now() - 1000);
    await redis.del(`${prefix}:{=d}:override`);
    const listed: string[] = [];
    for await (const { identifier } of limiter.overrides.list({ pageSize: 2 })) listed.push(identifier);
    expect(listed).toEqual(["a", "c"]);
    expect(await redis.zrange(`${prefix}:overrides`, 0, -1)).toEqual(["a", "c"]);
  });
});

function denial(retryAfter: number, at: number): Decision {
  const rule = { allowed: false, limit: 1, remaining: 0, resetAt: at + retryAfter, retryAfter };
  return { ...rule, rule: "r", source: "redis", plan: "default", decidedAt: at, rules: { r: rule } };
}

describe("maxStale", () => {
  it("a cached denial is trusted at most maxStale, with the true retryAfter; 0 caches nothing", () => {
    const cache = new DenyCache(10, 1000);
    cache.set("a", 1, NOW, denial(60_000, NOW));
    expect(cache.get("a", 1, NOW + 999)?.retryAfter).toBe(60_000 - 999);
    expect(cache.get("a", 1, NOW + 1000)).toBeUndefined();
    cache.set("b", 1, NOW, denial(500, NOW)); // admitted again before maxStale: until then only
    expect(cache.get("b", 1, NOW + 499)?.source).toBe("cache");
    expect(cache.get("b", 1, NOW + 500)).toBeUndefined();
    const never = new DenyCache(10, 0);
    never.set("a", 1, NOW, denial(60_000, NOW));
    expect(never.size).toBe(0);
  });

  it("a Limiter's denial comes from its cache until maxStale, then from Redis", async () => {
    const { limiter, clock } = setup({
      rules: { daily: fixedWindow({ limit: 1, window: "1d" }) },
      plans: undefined,
    });
    expect((await limiter.limit("x")).allowed).toBe(true);
    const denied = await limiter.limit("x");
    expect([denied.allowed, denied.source]).toEqual([false, "redis"]);
    clock.set(NOW + 999);
    expect((await limiter.limit("x")).source).toBe("cache");
    clock.set(NOW + 1000);
    const asked = await limiter.limit("x");
    expect([asked.allowed, asked.source]).toEqual([false, "redis"]);
    // without overrides the same denial holds from cache until the window's end
    const plain = setup({
      rules: { daily: fixedWindow({ limit: 1, window: "1d" }) },
      plans: undefined,
      overrides: false,
    });
    await plain.limiter.limit("x");
    await plain.limiter.limit("x");
    plain.clock.set(NOW + 60_000);
    expect((await plain.limiter.limit("x")).source).toBe("cache");
  });
});

describe("what maxStale costs Redis", () => {
  // a denied identifier hammered at 100 calls/s for 3 s (injected clock): the requests that reach Redis
  // (each call waits for the one before: 3000 of them took over 20 s on a busy machine, 300 say the same)
  it.each([
    [{ maxStale: 0 }, 300],
    [true, 3],
    [{ maxStale: "10s" }, 1],
    [false, 1],
  ])("overrides %j: %i of 300 denials asked Redis", async (overrides, asked) => {
    const rules = { daily: fixedWindow({ limit: 1, window: "1d" }) };
    const { limiter, clock } = setup({ rules, plans: undefined, overrides: overrides as never });
    await limiter.limit("hammer");
    let redis = 0;
    for (let t = 10; t <= 3000; t += 10) {
      clock.set(NOW + t);
      const d = await limiter.limit("hammer");
      expect(d.allowed).toBe(false);
      if (d.source === "redis") redis++;
    }
    expect(redis).toBe(asked);
  });
});

describe("the Limiter that changes an override", () => {
  it("drops its own cached denial of the identifier at once (set and delete); the override applies at once", async () => {
    const { limiter } = setup({
      rules: { daily: fixedWindow({ limit: 1, window: "1d" }) },
      plans: undefined,
    });
    await limiter.limit("x");
    await limiter.limit("x");
    expect((await limiter.limit("x")).source).toBe("cache");
    await limiter.overrides.set("x", { rules: { daily: { limit: 5 } } });
    const after: string[] = [];
    for (let i = 0; i < 6; i++) {
      const d = await limiter.limit("x");
      after.push(`${d.allowed} ${d.source} ${d.plan} ${d.limit}`);
    }
    // 1 counted before; exactly 4 more under the override, then its denial is cached like any other
    expect(after).toEqual([
      "true redis custom 5",
      "true redis custom 5",
      "true redis custom 5",
      "true redis custom 5",
      "false redis custom 5",
      "false cache custom 5",
    ]);
    await limiter.overrides.delete("x");
    const back = await limiter.limit("x");
    expect([back.allowed, back.source, back.plan, back.limit]).toEqual([false, "redis", "default", 1]);
  });

  it("a denial decided before its set() and answered after it is not cached", async () => {
    const { limiter } = setup({
      rules: { daily: fixedWindow({ limit: 1, window: "1d" }) },
      plans: undefined,
    });
    await limiter.limit("x");
    // the next decision is run by Redis (denied: 1 of 1), and its answer held until set() resolved
    const real = globalThis.fetch;
    let decided!: () => void;
    let release!: () => void;
    const atRedis = new Promise<void>((resolve) => (decided = resolve));
    const held = new Promise<void>((resolve) => (release = resolve));
    let armed = true;
    globalThis.fetch = (async (input: RequestInfo | URL, init?: RequestInit) => {
      const response = await real(input, init);
      if (armed && typeof init?.body === "string" && init.body.includes("EVALSHA")) {
        armed = false;
        decided();
        await held;
      }
      return response;
    }) as typeof fetch;
    try {
      const before = limiter.limit("x");
      await atRedis;
      await limiter.overrides.set("x", { rules: { daily: { limit: 5 } } });
      release();
      expect(await before).toMatchObject({ allowed: false, source: "redis", plan: "default" });
    } finally {
      globalThis.fetch = real;
    }
    // its denial was not cached: the next decision is Redis's, under the override
    expect(await limiter.limit("x")).toMatchObject({ allowed: true, source: "redis", plan: "custom" });
  });

  it("drops its lease of the identifier and gives the unused units back", async () => {
    const rules = { r: fixedWindow({ limit: 1000, window: "1h" }) };
    const { limiter, clock, prefix } = setup({ rules, plans: undefined, lease: { max: 50, ttl: "1s" } });
    for (let i = 0; i < 4; i++) {
      await limiter.limit("hot");
      clock.set(clock.now + 1);
    }
    expect((await limiter.limit("hot")).source).toBe("lease");
    await limiter.overrides.set("hot", { plan: "default" });
    expect((await limiter.limit("hot")).source).toBe("redis");
    await limiter.dispose(); // awaits the refunds
    const plain = new Limiter({ redis: bridgeRedis(), prefix, rules, clock, denyCache: false });
    // 6 decisions admitted, every leased unit back
    expect((await plain.limit("hot", { cost: 0 })).remaining).toBe(1000 - 6);
  });
});

describe("end to end: set() reaching decisions", () => {
  const rules = { daily: fixedWindow({ limit: 10, window: "1d" }) };
  const plans = { pro: { daily: { limit: 100 } } };

  it("an upgrade reaches a second Limiter whose denial was cached, at maxStale", async () => {
    const prefix = uniquePrefix("overrides");
    const b = setup({ rules, plans }, prefix);
    const a = new Limiter({ redis: bridgeRedis(), prefix, rules, plans, overrides: true, clock: b.clock });
    let admitted = 0;
    for (let i = 0; i < 15; i++) if ((await b.limiter.limit("k")).allowed) admitted++;
    expect(admitted).toBe(10);
    expect((await b.limiter.limit("k")).source).toBe("cache");
    await a.overrides.set("k", { plan: "pro" });
    b.clock.set(NOW + 999);
    const stale = await b.limiter.limit("k");
    expect([stale.allowed, stale.source, stale.plan]).toEqual([false, "cache", "default"]);
    b.clock.set(NOW + 1000);
    const fresh = await b.limiter.limit("k");
    expect([fresh.allowed, fresh.source, fresh.plan, fresh.limit]).toEqual([true, "redis", "pro", 100]);
    admitted = 1;
    for (let i = 0; i < 100; i++) if ((await b.limiter.limit("k")).allowed) admitted++;
    expect(admitted).toBe(90); // the 10 counted under the base rules carry
  });

  it("exact counts after set(): custom values, a plan beating the call's, expiry of the override", async () => {
    const { limiter, clock } = setup({
      rules: { perMinute: gcra({ limit: 10, period: "1m" }) },
      plans: { pro: { perMinute: { limit: 20 } }, enterprise: { perMinute: { limit: 30 } } },
      denyCache: false,
    });
    const count = async (calls: number, plan?: string) => {
      const seen = new Set<string>();
      let n = 0;
      for (let i = 0; i < calls; i++) {
        const d = await limiter.limit("g", { plan });
        seen.add(d.plan);
        if (d.allowed) n++;
      }
      return [n, [...seen].join(",")];
    };
    expect(await count(15)).toEqual([10, "default"]);
    await limiter.overrides.set("g", { rules: { perMinute: { limit: 50 } } });
    expect(await count(60, "pro")).toEqual([40, "custom"]); // the override beats the call's plan
    await limiter.overrides.set("g", { plan: "enterprise", expiresAt: NOW + DAY });
    expect(await count(5, "pro")).toEqual([0, "enterprise"]); // 50 used of 30: full
    await limiter.overrides.delete("g");
    expect(await count(5, "pro")).toEqual([0, "pro"]); // the call's plan again: 50 used of 20, full
    clock.set(NOW + 60_000); // a minute on: pro's 20 again
    expect(await count(25, "pro")).toEqual([20, "pro"]);
  });

  it("a lease is held at most maxStale; across a downgrade it admits at most what it held, and counts stay exact", async () => {
    const prefix = uniquePrefix("overrides");
    const rules = { r: fixedWindow({ limit: 1000, window: "1h" }) };
    const a = setup({ rules, plans: undefined, lease: { max: 50, ttl: "10s" } }, prefix);
    const b = new Limiter({ redis: bridgeRedis(), prefix, rules, overrides: true, clock: a.clock });
    const plain = new Limiter({ redis: bridgeRedis(), prefix, rules, clock: a.clock, denyCache: false });
    for (let i = 0; i < 4; i++) {
      await a.limiter.limit("hot");
      a.clock.set(a.clock.now + 1);
    }
    const held = 1000 - 4 - (await plain.limit("hot", { cost: 0 })).remaining;
    expect(held).toBeGreaterThan(0);
    expect(held).toBeLessThanOrEqual(50);
    // downgrade below what is counted: Redis refuses at once; only the held units may still be admitted
    await b.overrides.set("hot", { rules: { r: { limit: 2 } } });
    let fromLease = 0;
    for (let i = 0; i < 100; i++) {
      const d = await a.limiter.limit("hot");
      if (d.source === "lease") fromLease++;
      else expect([d.allowed, ["redis", "cache"].includes(d.source)]).toEqual([false, true]);
    }
    expect(fromLease).toBeGreaterThan(0);
    expect(fromLease).toBeLessThanOrEqual(held);
    await a.limiter.dispose();
    expect((await plain.limit("hot", { cost: 0 })).remaining).toBe(1000 - 4 - fromLease);

    // lease ttl 10 s, maxStale 1 s: a lease taken now ends 1 s later
    await b.overrides.delete("hot");
    const c = new Limiter({
      redis: bridgeRedis(),
      prefix,
      rules,
      overrides: true,
      clock: a.clock,
      lease: { max: 50, ttl: "10s" },
    });
    const start = a.clock.now;
    for (let i = 0; i < 4; i++) {
      await c.limit("warm");
      a.clock.set(a.clock.now + 1);
    }
    expect((await c.limit("warm")).source).toBe("lease");
    a.clock.set(start + 999);
    expect((await c.limit("warm")).source).toBe("lease");
    a.clock.set(start + 1000 + 4);
    expect((await c.limit("warm")).source).toBe("redis");
    await c.dispose();
  });
});

describe("writes off the request path: a slow or lossy Redis", () => {
  const rules = { daily: fixedWindow({ limit: 10, window: "1d" }) };
  const plans = { pro: { daily: { limit: 100 } } };
  /** A Limiter with overrides on whose every request goes through `hop`. */
  const through = (hop: { url: string }, prefix: string, options: Partial<LimiterOptions> = {}) =>
    new Limiter({
      redis: { url: hop.url, token: inject("bridgeToken") },
      prefix,
      rules,
      plans,
      overrides: true,
      clock: manualClock(NOW),
      ...options,
    });

  it("an answer 1.5 s late fails a decision (timeout 1 s) but not set(), get() or delete() (5 s)", async () => {
    const hop = await startCutHop(inject("bridgeUrl"));
    try {
      const prefix = uniquePrefix("slow");
      const limiter = through(hop, prefix, { timeout: 1000 });
      hop.delay = 1500;
      const decision = await limiter.limit("k");
      expect([decision.source, decision.allowed, (decision.error as RedisCallError).kind]).toEqual([
        "error",
        true,
        "timeout",
      ]);
      const before = hop.requests;
      await limiter.overrides.set("k", { plan: "pro" });
      expect(await limiter.overrides.get("k")).toEqual({ plan: "pro" });
      expect(hop.requests - before).toBe(2); // one request each, none sent again
      const redis = bridgeRedis();
      // a plan alone is stored as its line
      expect(await redis.get(`${prefix}:{=k}:override`)).toBe("=pro\n");
      await limiter.overrides.delete("k");
      expect(await redis.exists(`${prefix}:{=k}:override`)).toBe(0);
      expect(await redis.zcard(`${prefix}:overrides`)).toBe(0);
      await limiter.dispose();
    } finally {
      await hop.close();
    }
  }, 20_000);

  it("a lost answer (the write ran): set() and delete() are sent again and land exactly once", async () => {
    const hop = await startCutHop(inject("bridgeUrl"));
    try {
      const prefix = uniquePrefix("lost");
      const limiter = through(hop, prefix);
      const redis = bridgeRedis();
      hop.cutNext = '"ZADD"';
      await limiter.overrides.set("k", { rules: { daily: { limit: 7 } }, expiresAt: NOW + DAY });
      expect([hop.cuts, hop.requests]).toEqual([1, 2]);
      const key = `${prefix}:{=k}:override`;
      expect(await redis.get(key)).toBe(
        `!fixedWindow 7 86400000 0\n{"rules":{"daily":{"limit":7}},"expiresAt":${NOW + DAY}}`,
      );
      expect(await pexpiretime(redis, key)).toBe(NOW + DAY);
      expect(await redis.zrange(`${prefix}:overrides`, 0, -1)).toEqual(["k"]);
      hop.cutNext = '"DEL"';
      await limiter.overrides.delete("k");
      expect([hop.cuts, hop.requests]).toEqual([2, 4]);
      expect(await redis.exists(key)).toBe(0);
      expect(await redis.zcard(`${prefix}:overrides`)).toBe(0);
    } finally {
      await hop.close();
    }
  });

  it(`an unreachable Redis: ${ATTEMPTS} attempts, then the failure; a refusal by Redis is not sent again`, async () => {
    let connections = 0;
    const server = createServer((socket) => {
      connections += 1;
      socket.destroy();
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      const limiter = new Limiter({ redis: { url, token: "t" }, rules, overrides: true, prefix: "p" });
      const error = await limiter.overrides.set("k", { rules: { daily: { limit: 5 } } }).catch((e) => e);
      expect([error instanceof RedisCallError, error.kind, connections]).toEqual([true, "unreachable", 3]);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
    const hop = await startCutHop(inject("bridgeUrl"));
    try {
      const prefix = uniquePrefix("wrongtype");
      await bridgeRedis().set(`${prefix}:overrides`, "not a zset");
      const limiter = new Limiter({
        redis: { url: hop.url, token: inject("bridgeToken") },
        prefix,
        rules,
        overrides: true,
      });
      const error = await limiter.overrides.set("k", { rules: { daily: { limit: 5 } } }).catch((e) => e);
      expect([error.kind, hop.requests]).toEqual(["redis", 1]);
      expect(error.message).toMatch(/^edgelimit: Redis answered an error: WRONGTYPE/);
    } finally {
      await hop.close();
    }
  });
});
