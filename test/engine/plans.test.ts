// Plans: validation (messages as exact strings), exact admitted counts when an identifier moves from the
// base rules to a plan (fixed window, sliding window, gcra burst, token bucket capacity, gcra rate),
// the call's plan over the base rules, d.plan from every source, keys and reset under plans, and what
// each decision costs Redis with plans configured (INFO commandstats of a redis-server of this file's own).
import type { Redis } from "@upstash/redis";
import { beforeAll, describe, expect, it } from "vitest";
import type { RedisConnection } from "../../src/bridge/resp.js";
import {
  fixedWindow,
  gcra,
  Limiter,
  type LimiterOptions,
  type PlanConfig,
  type RuleConfig,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from "../../src/index.js";
import { privateRedis } from "../own-bridge.js";
import { bridgeRedis, manualClock, T0, uniquePrefix } from "../support.js";

const HOUR = 3_600_000;

function limiterOf(
  rules: Record<string, RuleConfig>,
  plans: Record<string, PlanConfig>,
  options: Partial<LimiterOptions> = {},
) {
  const clock = manualClock();
  const redis = bridgeRedis();
  const limiter = new Limiter({
    redis,
    prefix: uniquePrefix("plans"),
    rules,
    plans,
    denyCache: false,
    clock,
    ...options,
  });
  return { limiter, clock, redis };
}

/** How many of `calls` decisions of cost 1, all at the clock's now, are admitted. */
async function admitted(limiter: Limiter, calls: number, plan?: string, id = "id"): Promise<number> {
  let count = 0;
  for (let i = 0; i < calls; i++) if ((await limiter.limit(id, { plan })).allowed) count++;
  return count;
}

const RULES = {
  perMinute: gcra({ limit: 100, period: "1m" }),
  daily: fixedWindow({ limit: 10_000, window: "1d" }),
};

/** The message `new Limiter()` throws for these plans over RULES. */
function refusal(plans: unknown, rules: Record<string, RuleConfig> = RULES): string {
  try {
    new Limiter({ redis: { url: "http://127.0.0.1:1", token: "t" }, rules, plans: plans as never });
  } catch (error) {
    return (error as Error).message;
  }
  return "accepted";
}

describe("validation", () => {
  it("names the plan, rule and field of every problem", () => {
    expect(refusal({ pro: { perMinuet: { limit: 1000 } } })).toBe(
      "plans.pro.perMinuet: not a rule; the rules are perMinute, daily",
    );
    expect(refusal({ pro: { perMinute: { limit: 0 } } })).toBe(
      "plans.pro.perMinute.limit: must be a positive whole number, got 0",
    );
    expect(refusal({ pro: { perMinute: { limit: 1.5, period: "soon" } } })).toBe(
      'plans.pro.perMinute.limit: must be a positive whole number, got 1.5; plans.pro.perMinute.period: "soon" is not a duration; use milliseconds or a string like "500ms", "10s", "1m", "1h", "1d"',
    );
    expect(refusal({ pro: { daily: { capacity: 5 } } })).toBe(
      "plans.pro.daily.capacity: not an option of fixedWindow; it takes limit, window, overshoot, givesBack",
    );
    expect(refusal({ pro: { daily: { algorithm: "slidingWindow" } } })).toBe(
      "plans.pro.daily.algorithm: a plan cannot change a rule's algorithm",
    );
    expect(refusal({ pro: { perMinute: { limit: 2 ** 40, period: "1d" } } })).toBe(
      "plans.pro.perMinute: burst × period is 94997804639846400000 ms, too large to count exactly: it must be at most 2^50 (1125899906842624)",
    );
    expect(refusal({ pro: { perMinute: 5 } })).toBe(
      "plans.pro.perMinute: expected the fields of gcra it changes, e.g. { limit: 1000 }, got 5",
    );
    expect(refusal({ pro: "gold" })).toBe(
      'plans.pro: expected the rules it changes, e.g. { perMinute: { limit: 1000 } }, got "gold"',
    );
    expect(refusal([])).toBe(
      "plans: expected plans by name, e.g. { pro: { perMinute: { limit: 1000 } } }, got an array",
    );
  });

  it('reserves "default" and "custom", and checks plan names as rule names', () => {
    expect(refusal({ default: {}, custom: {} })).toBe(
      'plans.default: "default" is reserved (a decision\'s plan says "default" for the base rules and "custom" for an override); name the plan otherwise; plans.custom: "custom" is reserved (a decision\'s plan says "default" for the base rules and "custom" for an override); name the plan otherwise',
    );
    expect(refusal({ "pro plan": {} })).toBe(
      'plans: plan name "pro plan" must be 1-64 characters of A-Z a-z 0-9 _ . -',
    );
  });

  it("keeps a sliding window's limit on its base rule's side of 2^25, where the stored format changes", () => {
    const rules = { r: slidingWindow({ limit: 100, window: "1s" }) };
    expect(refusal({ big: { r: { limit: 2 ** 25 } } }, rules)).toBe(
      "plans.big.r.limit: 33554432 must stay below 33554432 like the base rule's 100: a sliding window stores counts in another format there, and the usage counted under one plan would not carry to the other",
    );
    expect(refusal({ ok: { r: { limit: 2 ** 25 - 1 } } }, rules)).toBe("accepted");
  });

  it("merges configs: a plan's limit on a gcra without burst is also its burst; an explicit burst stays", () => {
    const { limiter } = limiterOf(
      { a: gcra({ limit: 100, period: "1m" }), b: gcra({ limit: 100, period: "1m", burst: 200 }) },
      { pro: { a: { limit: 1000 }, b: { limit: 1000 } } },
    );
    expect(limiter.rulesOf("pro").map((rule) => rule.limit)).toEqual([1000, 200]);
    expect(limiter.rulesOf("pro")).toMatchObject([
      { name: "a", rate: 1000, burst: 1000, period: 60_000 },
      { name: "b", rate: 1000, burst: 200, period: 60_000 },
    ]);
    expect(limiter.rulesOf()).toBe(limiter.rules);
    expect(limiter.rulesOf("default")).toBe(limiter.rules);
  });

  it("throws a RangeError naming plan for a plan the Limiter does not have, before any request", () => {
    const { limiter } = limiterOf(RULES, { pro: {}, enterprise: {} });
    expect(() => limiter.limit("id", { plan: "gold" })).toThrow(
      new RangeError('plan: unknown plan "gold"; the plans are pro, enterprise'),
    );
    expect(() => limiter.rulesOf("gold")).toThrow(RangeError);
    const { limiter: plain } = limiterOf(RULES, {});
    expect(() => plain.limit("id", { plan: "pro" })).toThrow(
      new RangeError('plan: unknown plan "pro"; this Limiter has no plans'),
    );
  });
});

describe("counted usage carries across a change of plan, exactly", () => {
  it("fixed window 10/1h, then pro 100: 10 of 15, then exactly 90 of 100 (denials leave no count)", async () => {
    const { limiter, clock, redis } = limiterOf(
      { r: fixedWindow({ limit: 10, window: "1h" }) },
      { pro: { r: { limit: 100 } } },
    );
    clock.set(T0);
    expect(await admitted(limiter, 15)).toBe(10);
    const [key] = limiter.keys("id");
    expect(key).toBe(limiter.keys("id", T0, "pro")[0]);
    expect(await redis.get(key!)).toBe(10);
    expect(await admitted(limiter, 100, "pro")).toBe(90);
    expect(await redis.get(key!)).toBe(100);
    // and back: the base rule reads the 100 as full
    expect(await admitted(limiter, 3)).toBe(0);
    expect(await redis.get(key!)).toBe(100);
  });

  it("fixed window, cost above 1: a denial's units are not kept either", async () => {
    const { limiter, clock } = limiterOf(
      { r: fixedWindow({ limit: 10, window: "1h" }) },
      { pro: { r: { limit: 100 } } },
    );
    clock.set(T0);
    expect((await limiter.limit("id", { cost: 8 })).allowed).toBe(true);
    for (let i = 0; i < 5; i++) expect((await limiter.limit("id", { cost: 3 })).allowed).toBe(false);
    expect(await limiter.limit("id", { cost: 92, plan: "pro" })).toMatchObject({
      allowed: true,
      remaining: 0,
      plan: "pro",
    });
  });

  it("sliding window 10/1m, then pro 20: 10, then exactly 10", async () => {
    const { limiter, clock } = limiterOf(
      { r: slidingWindow({ limit: 10, window: "1m" }) },
      { pro: { r: { limit: 20 } } },
    );
    clock.set(T0 + 1000);
    expect(await admitted(limiter, 15)).toBe(10);
    expect(await admitted(limiter, 30, "pro")).toBe(10);
    expect((await limiter.limit("id", { plan: "pro", cost: 0 })).remaining).toBe(0);
  });

  it("gcra 100/1m, then a plan with burst 300 at the same rate: 100, then exactly 200 more", async () => {
    const { limiter, clock } = limiterOf(
      { r: gcra({ limit: 100, period: "1m" }) },
      { burst: { r: { burst: 300 } } },
    );
    clock.set(T0);
    expect(await admitted(limiter, 120)).toBe(100);
    expect(await admitted(limiter, 250, "burst")).toBe(200);
    // a second later, 100/min has earned back 1 unit (and 2/3 of the next): 1 under either plan
    clock.set(T0 + 1000);
    expect(await admitted(limiter, 5)).toBe(0); // the base burst of 100 is still far exceeded
    expect(await admitted(limiter, 5, "burst")).toBe(1);
  });

  it("token bucket capacity 10, then pro capacity 30 at the same refill: 10, then exactly 20", async () => {
    const { limiter, clock } = limiterOf(
      { r: tokenBucket({ capacity: 10, refillRate: 1, interval: "1s" }) },
      { pro: { r: { capacity: 30 } } },
    );
    clock.set(T0);
    expect(await admitted(limiter, 15)).toBe(10);
    expect(await admitted(limiter, 40, "pro")).toBe(20);
    clock.set(T0 + 3000); // 3 tokens refilled
    expect(await admitted(limiter, 10, "pro")).toBe(3);
  });

  it("gcra 100/1m with 100 used, then pro 1000/1m at the same instant: exactly 900", async () => {
    const { limiter, clock } = limiterOf(
      { perMinute: gcra({ limit: 100, period: "1m" }) },
      { pro: { perMinute: { limit: 1000 } } },
    );
    clock.set(T0);
    expect(await admitted(limiter, 100)).toBe(100);
    expect(await admitted(limiter, 1000, "pro")).toBe(900);
  });

  it("a plan that changes a window counts in a key of its own, from 0; the base key is unchanged", async () => {
    const { limiter, clock, redis } = limiterOf(
      { f: fixedWindow({ limit: 5, window: "1h" }), s: slidingWindow({ limit: 5, window: "1m" }) },
      { long: { f: { window: "2h", limit: 20 }, s: { window: "10m", limit: 20 } } },
    );
    clock.set(T0);
    const base = limiter.keys("id");
    const long = limiter.keys("id", T0, "long");
    expect(base).toEqual([
      `${limiter.prefix}:{=id}:f:fixedWindow:${Math.floor(T0 / HOUR)}`,
      `${limiter.prefix}:{=id}:s:slidingWindow`,
    ]);
    expect(long).toEqual([
      `${limiter.prefix}:{=id}:f:fixedWindow.7200000:${Math.floor(T0 / (2 * HOUR))}`,
      `${limiter.prefix}:{=id}:s:slidingWindow.600000`,
    ]);
    expect(await admitted(limiter, 8)).toBe(5);
    expect(await admitted(limiter, 25, "long")).toBe(20);
    expect(await redis.get(base[0]!)).toBe(5);
    expect(await redis.get(long[0]!)).toBe(20);
    // reset deletes every plan's keys
    await limiter.reset("id");
    expect(await redis.exists(...base, ...long)).toBe(0);
    expect(await admitted(limiter, 8)).toBe(5);
  });

  it("a sliding log keeps its entries across a plan: a shorter window sees those inside it", async () => {
    const { limiter, clock } = limiterOf(
      { r: slidingLog({ limit: 5, window: "1m" }) },
      { pro: { r: { limit: 10 } }, short: { r: { window: "10s" } } },
    );
    expect(limiter.keys("id", T0, "short")).toEqual(limiter.keys("id", T0));
    clock.set(T0);
    expect(await admitted(limiter, 3)).toBe(3);
    clock.set(T0 + 20_000);
    expect(await admitted(limiter, 3)).toBe(2);
    expect(await admitted(limiter, 10, "pro")).toBe(5);
    // 10 s back from T0 + 25 s sees only the 7 admitted at T0 + 20 s; from T0 + 31 s, none
    clock.set(T0 + 25_000);
    expect((await limiter.limit("id", { plan: "short", cost: 0 })).remaining).toBe(0);
    clock.set(T0 + 31_000);
    expect(await admitted(limiter, 6, "short")).toBe(5);
  });
});

describe("the call's plan", () => {
  it("decides by its own rules over the base rules, and says so in d.plan and the limits", async () => {
    // (a daily fixed window holds at most 2^50 / 86,400,000 ≈ 13 million: see the bound in algorithms/shared.ts)
    const { limiter, clock } = limiterOf(RULES, {
      pro: { perMinute: { limit: 1_000 }, daily: { limit: 1_000_000 } },
      enterprise: { perMinute: { limit: 10_000, burst: 20_000 }, daily: { limit: 10_000_000 } },
    });
    clock.set(T0);
    const base = await limiter.limit("key_123");
    expect([base.plan, base.rules.perMinute!.limit, base.rules.daily!.limit]).toEqual([
      "default",
      100,
      10_000,
    ]);
    const pro = await limiter.limit("key_123", { plan: "pro" });
    expect([pro.plan, pro.rules.perMinute!.limit, pro.rules.daily!.limit]).toEqual(["pro", 1_000, 1_000_000]);
    expect(pro.rules.daily!.remaining).toBe(1_000_000 - 2);
    const enterprise = await limiter.limit("key_123", { plan: "enterprise" });
    expect(enterprise).toMatchObject({ plan: "enterprise", rule: "perMinute", limit: 20_000 });
    expect(enterprise.rules.daily).toMatchObject({ limit: 10_000_000, remaining: 10_000_000 - 3 });
    expect(limiter.rulesOf("enterprise").map((rule) => rule.policy)).toEqual([
      { quota: 20_000, window: 120_000 },
      { quota: 10_000_000, window: 86_400_000 },
    ]);
  });

  it("says which plan applied from every source: redis, cache, lease, error", async () => {
    const rules = { r: gcra({ limit: 100, period: "1m" }) };
    const plans = { pro: { r: { limit: 1000 } } };
    // cache: a denial under one plan answers only calls under that plan (pro: a burst of 5, same rate)
    const { limiter: cached, clock } = limiterOf(
      { r: gcra({ limit: 2, period: "1m" }) },
      { pro: { r: { burst: 5 } } },
      {
        denyCache: { maxEntries: 10 },
      },
    );
    clock.set(T0);
    await admitted(cached, 2);
    expect(await cached.limit("id")).toMatchObject({ allowed: false, source: "redis", plan: "default" });
    expect(await cached.limit("id")).toMatchObject({ allowed: false, source: "cache", plan: "default" });
    expect(await cached.limit("id", { plan: "pro" })).toMatchObject({
      allowed: true,
      source: "redis",
      plan: "pro",
    });
    expect(await cached.limit("id")).toMatchObject({ allowed: false, source: "cache", plan: "default" });
    expect(await admitted(cached, 5, "pro")).toBe(2);
    expect(await cached.limit("id", { plan: "pro" })).toMatchObject({ source: "cache", plan: "pro" });

    // lease: a lease is per identifier and plan
    const { limiter: leasing, clock: leaseClock } = limiterOf(rules, plans, {
      lease: { max: 10, ttl: "5s" },
    });
    const seen: string[] = [];
    for (let i = 0; i < 8; i++) {
      leaseClock.set(T0 + i);
      const d = await leasing.limit("hot", { plan: "pro" });
      seen.push(`${d.source}:${d.plan}:${d.limit}`);
    }
    expect(seen).toContain("lease:pro:1000");
    expect(seen.every((s) => s.endsWith(":pro:1000"))).toBe(true);
    // the pro lease holds units: a call under the base rules goes to Redis all the same
    expect(await leasing.limit("hot")).toMatchObject({ source: "redis", plan: "default", limit: 100 });
    await leasing.dispose();

    // error: the plan's rules, failing open
    const failing = new Limiter({
      redis: { url: "http://127.0.0.1:1", token: "t" },
      rules,
      plans,
      timeout: 500,
      breaker: false,
    });
    const failed = await failing.limit("x", { plan: "pro" });
    expect(failed).toMatchObject({
      source: "error",
      plan: "pro",
      allowed: true,
      limit: 1000,
      remaining: 1000,
    });
  });
});

describe("leases under a plan", () => {
  it("reserve and give back under the plan's own rules and keys: the count stays exact", async () => {
    const { limiter, clock, redis } = limiterOf(
      { r: fixedWindow({ limit: 1000, window: "1h" }) },
      { long: { r: { window: "2h", limit: 2000 } } },
      { lease: { max: 10, ttl: "5s" } },
    );
    const sources: string[] = [];
    for (let i = 0; i < 8; i++) {
      clock.set(T0 + i);
      const d = await limiter.limit("hot", { plan: "long" });
      sources.push(d.source);
      expect([d.plan, d.limit, d.remaining]).toEqual(["long", 2000, 2000 - 1 - i]);
    }
    expect(sources.filter((source) => source === "lease").length).toBeGreaterThan(2);
    await limiter.dispose();
    const [long] = limiter.keys("hot", T0, "long");
    expect(await redis.get(long!)).toBe(8);
    expect(await redis.exists(limiter.keys("hot", T0)[0]!)).toBe(0);
  });
});

describe("commands per decision with plans configured", () => {
  // INFO commandstats counts every command a script runs, server-wide: a Redis of this file's own.
  const own = privateRedis({ token: "cmds" });
  let conn: RedisConnection;
  let redis: Redis;
  beforeAll(() => {
    ({ conn, redis } = own);
  });

  async function commands(limiter: Limiter, cost: number, plan: string): Promise<string> {
    await conn.call("CONFIG", "RESETSTAT");
    await limiter.limit("id", { cost, plan });
    const info = String(await conn.call("INFO", "commandstats"));
    return [...info.matchAll(/^cmdstat_([a-z|]+):calls=(\d+)/gm)]
      .filter(([, name]) => name !== "info" && !name!.startsWith("config"))
      .map(([, name, calls]) => `${name!.toUpperCase()}${calls === "1" ? "" : `×${calls}`}`)
      .sort()
      .join(" ");
  }

  // [rule, plans, [cost, plan, expected commands] per call in order]
  const cases: [string, RuleConfig, Record<string, PlanConfig>, [number, string, string][]][] = [
    [
      // the limiter script, not the one-rule INCR: a denial leaves no count
      "fixedWindow",
      fixedWindow({ limit: 2, window: "1h" }),
      { pro: { r: { limit: 3 } } },
      [
        [1, "default", "EVALSHA GET SET"],
        [1, "default", "EVALSHA GET INCRBY"],
        [1, "default", "EVALSHA GET"],
        [1, "pro", "EVALSHA GET INCRBY"],
        [1, "pro", "EVALSHA GET"],
      ],
    ],
    [
      "slidingWindow",
      slidingWindow({ limit: 2, window: "1h" }),
      { pro: { r: { limit: 3 } } },
      [
        [1, "default", "EVALSHA GET SET"],
        [1, "default", "EVALSHA GET INCRBY"],
        [1, "default", "EVALSHA GET"],
        [1, "pro", "EVALSHA GET INCRBY"],
        [1, "pro", "EVALSHA GET"],
      ],
    ],
    [
      "gcra",
      gcra({ limit: 2, period: "1h" }),
      { pro: { r: { burst: 3 } } },
      [
        [1, "default", "EVALSHA GET SET"],
        [1, "default", "EVALSHA GET SET"],
        [1, "default", "EVALSHA GET"],
        [1, "pro", "EVALSHA GET SET"],
        [1, "pro", "EVALSHA GET"],
      ],
    ],
  ];

  it.each(cases)("%s", async (_, rule, plans, calls) => {
    const clock = manualClock();
    const limiter = new Limiter({
      redis,
      prefix: uniquePrefix("pc"),
      rules: { r: rule },
      plans,
      denyCache: false,
      clock,
    });
    // loads the scripts
    const warmUp = new Limiter({ redis, prefix: uniquePrefix("pw"), rules: { w: rule }, clock });
    await warmUp.limit("warm-up");
    await warmUp.limit("warm-up", { cost: 0 });
    const got: [number, string, string][] = [];
    for (const [cost, plan] of calls) got.push([cost, plan, await commands(limiter, cost, plan)]);
    expect(got).toEqual(calls);
  });
});

describe("the issue's own example", () => {
  it("builds, and counts a daily fixed window of 100,000,000 exactly", async () => {
    const { limiter, clock } = limiterOf(
      { perMinute: gcra({ limit: 100, period: "1m" }), daily: fixedWindow({ limit: 10_000, window: "1d" }) },
      {
        pro: { perMinute: { limit: 1_000 }, daily: { limit: 1_000_000 } },
        enterprise: { perMinute: { limit: 10_000, burst: 20_000 }, daily: { limit: 100_000_000 } },
      },
    );
    clock.set(T0);
    const big = await limiter.limit("key_123", { plan: "enterprise", cost: 20_000 });
    expect([big.allowed, big.plan, big.rules.daily!.remaining]).toEqual([true, "enterprise", 99_980_000]);
    const pro = await limiter.limit("key_123", { plan: "pro" });
    expect([pro.allowed, pro.plan]).toEqual([false, "pro"]);
    expect(pro.rules.daily!.remaining).toBe(980_000);
  });
});
