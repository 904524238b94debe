// limiter.settle(decision, actual): a real redis-server behind the REST bridge, hand-moved clocks, and
// peeks (cost 0, which consume nothing) before and after to read exactly what a settle gave back or
// charged. Keys' real expiries (Redis's own clock) are far longer than a test runs.
import { Redis } from "@upstash/redis";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import {
  type Decision,
  fixedWindow,
  gcra,
  Limiter,
  RedisCallError,
  type RuleConfig,
  type Settlement,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from "../../src/index.js";
import { Hop } from "../faults/support.js";
import { failOnUnhandledRejections, ownBridge } from "../own-bridge.js";
import { manualClock, T0, uniquePrefix } from "../support.js";

failOnUnhandledRejections();
const bridge = ownBridge();
const MINUTE = 60_000;

type Options = Partial<ConstructorParameters<typeof Limiter>[0]>;

const client = (url = bridge.url) => new Redis({ url, token: inject("bridgeToken"), enableTelemetry: false });

function limiterOf(rules: Record<string, RuleConfig>, options: Options = {}) {
  const clock = manualClock();
  const prefix = uniquePrefix("settle");
  const limiter = new Limiter({
    redis: client(),
    prefix,
    rules,
    clock,
    denyCache: false,
    timeout: 15_000,
    ...options,
  });
  return { limiter, clock, prefix };
}

/** What a peek says now: remaining per rule, and whether a unit would pass. */
async function peek(limiter: Limiter, id: string) {
  const d = await limiter.limit(id, { cost: 0 });
  return { allowed: d.allowed, remaining: d.remaining, retryAfter: d.retryAfter };
}

// Each rule's limit is 10; a unit of gcra and the token bucket earns back in 6 s.
const single: Record<string, RuleConfig> = {
  gcra: gcra({ limit: 10, period: "1m", burst: 10 }),
  tokenBucket: tokenBucket({ capacity: 10, refillRate: 1, interval: "6s" }),
  fixedWindow: fixedWindow({ limit: 10, window: "1m" }),
  slidingWindow: slidingWindow({ limit: 10, window: "1m" }),
  slidingLog: slidingLog({ limit: 10, window: "1m" }),
};

describe.each(Object.keys(single))("%s", (name) => {
  const rules = { r: single[name]! };

  it("below the reservation gives the difference back: 8 reserved, 3 used, 7 left", async () => {
    const { limiter, clock } = limiterOf(rules);
    clock.set(T0 + 1000);
    const d = await limiter.limit("a", { cost: 8 });
    expect(d).toMatchObject({ allowed: true, remaining: 2 });
    expect(await peek(limiter, "a")).toMatchObject({ allowed: true, remaining: 2 });
    const settled = await limiter.settle(d, 3);
    expect(settled).toEqual({ difference: -5, via: "redis" });
    expect(await peek(limiter, "a")).toMatchObject({ allowed: true, remaining: 7 });
    // the 7 are there to take, and no more
    expect((await limiter.limit("a", { cost: 7 })).allowed).toBe(true);
    expect((await limiter.limit("a", { cost: 1 })).allowed).toBe(false);
  });

  it("settled at 0 gives the whole reservation back", async () => {
    const { limiter, clock } = limiterOf(rules);
    clock.set(T0 + 1000);
    const d = await limiter.limit("a", { cost: 10 });
    expect(await peek(limiter, "a")).toMatchObject({ allowed: false, remaining: 0 });
    expect(await limiter.settle(d, 0)).toEqual({ difference: -10, via: "redis" });
    expect(await peek(limiter, "a")).toMatchObject({ allowed: true, remaining: 10 });
  });

  it("at the reservation sends nothing", async () => {
    const { limiter } = limiterOf(rules);
    const d = await limiter.limit("a", { cost: 4 });
    bridge.stats.reset();
    expect(await limiter.settle(d, 4)).toEqual({ difference: 0, via: "none" });
    expect(bridge.stats.requests).toBe(0);
    expect(await peek(limiter, "a")).toMatchObject({ remaining: 6 });
  });

  it("above the reservation charges the extra past the limit: a debt the next decisions wait out", async () => {
    const { limiter, clock } = limiterOf(rules);
    clock.set(T0 + 1000);
    const d = await limiter.limit("a", { cost: 2 });
    expect(await limiter.settle(d, 15)).toEqual({ difference: 13, via: "redis" });
    // 15 counted against a limit of 10: 5 owed
    const waits: Record<string, number> = {
      // d = 15 units; one more fits once d <= 9 units: 6 units earned back, 6 s each
      gcra: 36_000,
      tokenBucket: 36_000,
      // the window ends at T0 + 60 s
      fixedWindow: 59_000,
      // 15 in this window (T0..T0+60 s), then fading through the next: one more fits once
      // 15 * (60 - e) / 60 <= 9, e = 24 s into it
      slidingWindow: 59_000 + 24_000,
      // the 6th oldest of the 15 entries (all stamped T0 + 1 s) leaves the window a minute later
      slidingLog: 60_000,
    };
    const wait = waits[name]!;
    expect(await peek(limiter, "a")).toEqual({ allowed: false, remaining: 0, retryAfter: wait });
    clock.set(T0 + 1000 + wait - 1);
    expect((await limiter.limit("a")).allowed).toBe(false);
    clock.set(T0 + 1000 + wait);
    expect((await limiter.limit("a")).allowed).toBe(true);
  });

  it("a peek reserved nothing: settling it charges the whole actual cost", async () => {
    const { limiter, clock } = limiterOf(rules);
    clock.set(T0 + 1000);
    const d = await limiter.limit("a", { cost: 0 });
    expect(await limiter.settle(d, 4)).toEqual({ difference: 4, via: "redis" });
    expect(await peek(limiter, "a")).toMatchObject({ allowed: true, remaining: 6 });
    const again = await limiter.limit("a", { cost: 0 });
    bridge.stats.reset();
    expect(await limiter.settle(again, 0)).toEqual({ difference: 0, via: "none" });
    expect(bridge.stats.requests).toBe(0);
  });

  it("a second settle of one decision rejects, naming it, and changes nothing", async () => {
    const { limiter, clock } = limiterOf(rules);
    clock.set(T0 + 1000);
    const d = await limiter.limit("user:42", { cost: 8 });
    await limiter.settle(d, 3);
    await expect(limiter.settle(d, 0)).rejects.toThrow(
      `settle: the decision for "user:42" (plan "default", decidedAt ${T0 + 1000}) was already settled; a decision settles at most once`,
    );
    expect(await peek(limiter, "user:42")).toMatchObject({ remaining: 7 });
  });

  it("a debt is capped at three limits' worth past the limit", async () => {
    const { limiter, clock } = limiterOf(rules);
    clock.set(T0 + 1000);
    const d = await limiter.limit("a", { cost: 1 });
    await limiter.settle(d, 1_000_000);
    const caps: Record<string, number> = {
      // 40 units counted at most: 31 earned back before one more fits
      gcra: 186_000,
      tokenBucket: 186_000,
      fixedWindow: 59_000,
      // 40 fading through the next window: 40 * (60 - e) / 60 <= 9, e = 46.5 s
      slidingWindow: 59_000 + 46_500,
      slidingLog: 60_000,
    };
    expect(await peek(limiter, "a")).toEqual({ allowed: false, remaining: 0, retryAfter: caps[name] });
    const key = limiter.keys("a")[0]!;
    if (name === "fixedWindow") expect(await client().get(key)).toBe(40);
    if (name === "slidingLog") expect(await client().zcard(key)).toBe(40);
    if (name === "gcra") expect(await client().pttl(key)).toBeLessThanOrEqual(40 * 6000);
  });
});

describe("where a unit goes back", () => {
  it("a fixed window gives nothing back once the window it counted in has ended", async () => {
    const { limiter, clock, prefix } = limiterOf({ r: fixedWindow({ limit: 10, window: "1m" }) });
    clock.set(T0 + 50_000);
    const d = await limiter.limit("a", { cost: 8 });
    const key = limiter.keys("a")[0]!;
    clock.set(T0 + MINUTE);
    expect(await peek(limiter, "a")).toMatchObject({ remaining: 10 });
    expect(await limiter.settle(d, 3)).toEqual({ difference: -5, via: "redis" });
    expect(await client().get(key)).toBe(8);
    expect(await peek(limiter, "a")).toMatchObject({ remaining: 10 });
    expect(key.startsWith(prefix)).toBe(true);
  });

  it("a fixed window's debt lands in the window of the settle", async () => {
    const { limiter, clock } = limiterOf({ r: fixedWindow({ limit: 10, window: "1m" }) });
    clock.set(T0 + 50_000);
    const d = await limiter.limit("a", { cost: 2 });
    clock.set(T0 + MINUTE + 1000);
    await limiter.settle(d, 5);
    expect(await peek(limiter, "a")).toMatchObject({ remaining: 7 });
  });

  it("a sliding window settled in the next window gives back to the previous count", async () => {
    const { limiter, clock } = limiterOf({ r: slidingWindow({ limit: 10, window: "1m" }) });
    clock.set(T0 + 30_000);
    const d = await limiter.limit("a", { cost: 8 });
    clock.set(T0 + MINUTE);
    // the previous window's 8 weigh fully at the start of the next
    expect(await peek(limiter, "a")).toMatchObject({ remaining: 2 });
    await limiter.settle(d, 3);
    expect(await peek(limiter, "a")).toMatchObject({ remaining: 7 });
    clock.set(T0 + MINUTE + 30_000);
    // 3 * (60 - 30) / 60 = 1.5 counted: 8 whole units left
    expect(await peek(limiter, "a")).toMatchObject({ remaining: 8 });
  });

  it("a sliding window settled once its window has faded out gives nothing back", async () => {
    const { limiter, clock } = limiterOf({ r: slidingWindow({ limit: 10, window: "1m" }) });
    clock.set(T0 + 30_000);
    const d = await limiter.limit("a", { cost: 8 });
    clock.set(T0 + 2 * MINUTE);
    await limiter.limit("a", { cost: 4 });
    await limiter.settle(d, 0);
    expect(await peek(limiter, "a")).toMatchObject({ remaining: 6 });
  });

  it("a sliding window whose caller lagged gives back to the newer window it was counted in", async () => {
    const { limiter, clock } = limiterOf({ r: slidingWindow({ limit: 10, window: "1m" }) });
    clock.set(T0 + MINUTE + 1000);
    await limiter.limit("a", { cost: 1 });
    // a caller 2 s behind, in the window before: counted in the newer one, where the state is
    clock.set(T0 + MINUTE - 1000);
    const lagging = await limiter.limit("a", { cost: 6 });
    clock.set(T0 + MINUTE + 2000);
    expect(await peek(limiter, "a")).toMatchObject({ remaining: 3 });
    await limiter.settle(lagging, 2);
    expect(await peek(limiter, "a")).toMatchObject({ remaining: 7 });
  });

  it.each([
    ["gcra", gcra({ limit: 10, period: "1m", burst: 1 })],
    ["tokenBucket", tokenBucket({ capacity: 1, refillRate: 1, interval: "6s" })],
  ] as const)(
    "%s: given back to idle, the TAT stays at the settle's time for a caller lagging behind it",
    async (_, rule) => {
      const { limiter, clock, prefix } = limiterOf({ r: rule });
      clock.set(T0);
      await limiter.limit("a"); // one unit: busy until T0 + 6 s
      clock.set(T0 + 6001);
      const d = await limiter.limit("a", { cost: 1 }); // idle again: busy until T0 + 12.001 s
      expect(d.allowed).toBe(true);
      expect(await limiter.settle(d, 0)).toEqual({ difference: -1, via: "redis" });
      // idle at the settle's time, as before the decision
      expect(await peek(limiter, "a")).toEqual({ allowed: true, remaining: 1, retryAfter: 0 });
      // the state is kept (not deleted), its TAT at the settle's own time: a caller 3 s behind still
      // waits for the unit taken at T0 (it would be let in were the state gone); beside it, the
      // ledger of what refunds gave back (lua/algorithms/gcra.lua), with its TTL
      const keys = (await client().keys(`${prefix}:*`)).sort();
      expect(keys).toHaveLength(2);
      expect(keys[1]).toBe(`${keys[0]}:given`);
      expect(await client().pttl(keys[1]!)).toBeGreaterThan(0);
      clock.set(T0 + 3001);
      expect(await peek(limiter, "a")).toEqual({ allowed: false, remaining: 0, retryAfter: 3000 });
      // a reset deletes both
      await limiter.reset("a");
      expect(await client().keys(`${prefix}:*`)).toEqual([]);
    },
  );

  it("a sliding log removes the decision's own entries, and later admissions at that stamp still count", async () => {
    const { limiter, clock } = limiterOf({ r: slidingLog({ limit: 10, window: "1m" }) });
    clock.set(T0);
    const a = await limiter.limit("a", { cost: 8 });
    const b = await limiter.limit("a", { cost: 2 });
    const key = limiter.keys("a")[0]!;
    await limiter.settle(a, 3);
    expect(await client().zrange(key, 0, -1)).toEqual([
      `${T0}:1`,
      `${T0}:10`,
      `${T0}:2`,
      `${T0}:3`,
      `${T0}:9`,
    ]);
    // the same millisecond: its members skip the numbers still taken (9, 10)
    const c = await limiter.limit("a", { cost: 5 });
    expect(c).toMatchObject({ allowed: true, remaining: 0 });
    expect(await client().zcard(key)).toBe(10);
    expect((await limiter.limit("a")).allowed).toBe(false);
    await limiter.settle(b, 1);
    expect(await client().zcard(key)).toBe(9);
    expect(await peek(limiter, "a")).toMatchObject({ remaining: 1 });
  });
});

describe("several rules", () => {
  const rules = {
    burst: gcra({ limit: 10, period: "1m", burst: 10 }),
    minute: slidingLog({ limit: 10, window: "1m" }),
    recent: slidingWindow({ limit: 20, window: "1m" }),
    daily: fixedWindow({ limit: 100, window: "1d" }),
  };

  it("settles every rule in one request", async () => {
    const { limiter, clock } = limiterOf(rules);
    clock.set(T0 + 1000);
    const d = await limiter.limit("a", { cost: 8 });
    bridge.stats.reset();
    await limiter.settle(d, 3);
    expect(bridge.stats.requests).toBe(1);
    const after = await limiter.limit("a", { cost: 0 });
    expect(Object.fromEntries(Object.entries(after.rules).map(([rule, r]) => [rule, r.remaining]))).toEqual({
      burst: 7,
      minute: 7,
      recent: 17,
      daily: 97,
    });
    const more = await limiter.limit("a", { cost: 1 });
    await limiter.settle(more, 12);
    const owed = await limiter.limit("a", { cost: 0 });
    expect(Object.fromEntries(Object.entries(owed.rules).map(([rule, r]) => [rule, r.remaining]))).toEqual({
      burst: 0,
      minute: 0,
      recent: 5,
      daily: 85,
    });
  });
});

describe("what cannot be settled", () => {
  const rules = { r: gcra({ limit: 10, period: "1m", burst: 10 }) };

  it("a denied decision rejects, naming it", async () => {
    const { limiter } = limiterOf(rules);
    const denied = await limiter.limit("a", { cost: 11 });
    expect(denied.allowed).toBe(false);
    await expect(limiter.settle(denied, 0)).rejects.toThrow(
      `settle: the decision (plan "default", decidedAt ${T0}) was denied: nothing was reserved, so there is nothing to settle`,
    );
  });

  it("units given back end the identifier's cached denial", async () => {
    const { limiter } = limiterOf(rules, { denyCache: { maxEntries: 10 } });
    const d = await limiter.limit("a", { cost: 10 });
    expect((await limiter.limit("a")).source).toBe("redis");
    expect((await limiter.limit("a")).source).toBe("cache");
    await limiter.settle(d, 2);
    expect(await limiter.limit("a")).toMatchObject({ allowed: true, source: "redis", remaining: 7 });
  });

  it("a cached denial rejects as denied, naming what it knows", async () => {
    const { limiter } = limiterOf(rules, { denyCache: { maxEntries: 10 } });
    await limiter.limit("a", { cost: 10 });
    await limiter.limit("a");
    const cached = await limiter.limit("a");
    expect(cached.source).toBe("cache");
    await expect(limiter.settle(cached, 0)).rejects.toThrow(
      `settle: the decision (plan "default", decidedAt ${T0}) was denied`,
    );
  });

  it("a decision of another Limiter, or a copy, rejects", async () => {
    const { limiter } = limiterOf(rules);
    const other = limiterOf(rules).limiter;
    const d = await other.limit("a");
    await expect(limiter.settle(d, 0)).rejects.toThrow(
      "decision: not one this Limiter made (settle the Decision object its limit() returned, not a copy)",
    );
    const mine = await limiter.limit("a");
    await expect(limiter.settle({ ...mine }, 0)).rejects.toThrow("decision: not one this Limiter made");
    // the copy's rejection left the decision itself to settle
    expect(await limiter.settle(mine, 0)).toEqual({ difference: -1, via: "redis" });
  });

  it.each([
    [-1, "actual: must be a whole number of units, 0 or more, got -1"],
    [1.5, "actual: must be a whole number of units, 0 or more, got 1.5"],
    ["3", 'actual: must be a whole number of units, 0 or more, got "3"'],
    [Number.NaN, "actual: must be a whole number of units, 0 or more, got NaN"],
  ])("actual %j rejects (never a throw), and the decision can still be settled", async (actual, message) => {
    const { limiter } = limiterOf(rules);
    const d = await limiter.limit("a", { cost: 3 });
    let settling: Promise<Settlement> | undefined;
    expect(() => {
      settling = limiter.settle(d, actual as number);
    }).not.toThrow();
    await expect(settling).rejects.toThrow(message);
    expect(await limiter.settle(d, 1)).toEqual({ difference: -2, via: "redis" });
  });

  it("a waitUntil that is not a function rejects", async () => {
    const { limiter } = limiterOf(rules);
    const d = await limiter.limit("a");
    await expect(limiter.settle(d, 0, { waitUntil: 5 as never })).rejects.toThrow(
      "waitUntil: expected a function such as ctx.waitUntil, got 5",
    );
  });
});

describe("off the request path", () => {
  it("with waitUntil, resolves at once and hands the call to it", async () => {
    const { limiter } = limiterOf({ r: fixedWindow({ limit: 10, window: "1m" }) });
    const d = await limiter.limit("a", { cost: 8 });
    const handed: Promise<unknown>[] = [];
    const settled = await limiter.settle(d, 3, { waitUntil: (p) => void handed.push(p) });
    expect(settled).toEqual({ difference: -5, via: "redis", pending: true });
    expect(handed).toHaveLength(1);
    expect(await handed[0]).toEqual({ difference: -5, via: "redis" });
    expect(await peek(limiter, "a")).toMatchObject({ remaining: 7 });
  });
});

describe("decisions that failed open", () => {
  it("settle to nothing: no request, and still at most once", async () => {
    const limiter = new Limiter({
      redis: { url: "http://127.0.0.1:9", token: "x" },
      rules: { r: gcra({ limit: 10, period: "1m" }) },
      timeout: 2000,
      breaker: false,
    });
    const d = await limiter.limit("a", { cost: 5 });
    expect(d.source).toBe("error");
    expect(await limiter.settle(d, 2)).toEqual({ difference: -3, via: "none" });
    await expect(limiter.settle(d, 2)).rejects.toThrow("was already settled");
  });

  it("with onError deny, reject as denied", async () => {
    const limiter = new Limiter({
      redis: { url: "http://127.0.0.1:9", token: "x" },
      rules: { r: gcra({ limit: 10, period: "1m" }) },
      timeout: 2000,
      breaker: false,
      onError: "deny",
    });
    const d = await limiter.limit("a", { cost: 5 });
    await expect(limiter.settle(d, 2)).rejects.toThrow("was denied");
  });
});

describe("through a hop that cuts the connection after forwarding", () => {
  let hop: Hop;
  beforeAll(async () => {
    hop = await Hop.start(inject("bridgeUrl"));
  });
  afterAll(async () => {
    await hop.close();
  });

  it.each(Object.keys(single))(
    "%s: the settle ran once, is not sent again, and cannot be repeated",
    async (name) => {
      const rules = { r: single[name]! };
      const clock = manualClock(T0 + 1000);
      const prefix = uniquePrefix("settle-cut");
      // the client a user writes, @upstash/redis's default retries included
      const user = new Redis({ url: hop.url, token: inject("bridgeToken") });
      const through = new Limiter({ redis: user, prefix, rules, clock, denyCache: false, timeout: 5000 });
      const direct = new Limiter({
        redis: client(inject("bridgeUrl")),
        prefix,
        rules,
        clock,
        denyCache: false,
      });
      const d = await through.limit("victim", { cost: 8 });
      await direct.settle(await direct.limit("warm-up", { cost: 2 }), 1); // the settle script is loaded
      hop.mode = "cut";
      const before = hop.swallowed;
      const settled = await through.settle(d, 3);
      hop.mode = "pass";
      expect(settled).toMatchObject({ difference: -5, via: "redis" });
      expect(settled.error).toBeInstanceOf(RedisCallError);
      expect(hop.swallowed - before).toBe(1);
      // given back once: 5, not 10
      expect((await direct.limit("victim", { cost: 0 })).remaining).toBe(7);
      await expect(through.settle(d, 3)).rejects.toThrow("was already settled");
    },
  );
});

describe("through a hop that holds the settle past its timeout", () => {
  let hop: Hop;
  beforeAll(async () => {
    hop = await Hop.start(inject("bridgeUrl"));
  });
  afterAll(async () => {
    await hop.close();
  });

  it("fails with a timeout, is not sent again, and cannot be repeated", async () => {
    const rules = { r: fixedWindow({ limit: 10, window: "1h" }) };
    const clock = manualClock(T0 + 1000);
    const prefix = uniquePrefix("settle-stall");
    const user = new Redis({ url: hop.url, token: inject("bridgeToken") });
    const through = new Limiter({ redis: user, prefix, rules, clock, denyCache: false, timeout: 300 });
    const direct = new Limiter({
      redis: client(inject("bridgeUrl")),
      prefix,
      rules,
      clock,
      denyCache: false,
    });
    const d = await through.limit("victim", { cost: 8 });
    hop.mode = "stall";
    const settled = await through.settle(d, 3);
    hop.mode = "pass";
    expect(settled).toMatchObject({ difference: -5, via: "redis", error: { kind: "timeout" } });
    await expect(through.settle(d, 3)).rejects.toThrow("was already settled");
    // a decision through the hop afterwards goes through; the held settle was never sent again
    expect((await through.limit("other")).source).toBe("redis");
    expect((await direct.limit("victim", { cost: 0 })).remaining).toBe(2);
  });
});

describe("plans and overrides", () => {
  const rules = {
    r: fixedWindow({ limit: 10, window: "1m" }),
    g: gcra({ limit: 10, period: "1m", burst: 10 }),
  };
  const plans = { pro: { r: { limit: 100, window: "1h" }, g: { limit: 100, burst: 100 } } };

  it("a plan's decision settles under the plan's rules and keys", async () => {
    const { limiter } = limiterOf(rules, { plans });
    const d = await limiter.limit("a", { cost: 50, plan: "pro" });
    expect(d.plan).toBe("pro");
    await limiter.settle(d, 20);
    const after = await limiter.limit("a", { cost: 0, plan: "pro" });
    expect([after.rules.r!.remaining, after.rules.g!.remaining]).toEqual([80, 80]);
    // the base rules' window key was never touched
    expect((await limiter.limit("a", { cost: 0 })).rules.r!.remaining).toBe(10);
  });

  it("a decision under a stored override settles under the rules it applied", async () => {
    const { limiter } = limiterOf(rules, { plans, overrides: true });
    await limiter.overrides.set("a", { plan: "pro" });
    const d = await limiter.limit("a", { cost: 50 });
    expect(d.plan).toBe("pro");
    await limiter.settle(d, 20);
    const after = await limiter.limit("a", { cost: 0 });
    expect([after.rules.r!.remaining, after.rules.g!.remaining]).toEqual([80, 80]);
  });

  it("a custom override's decision settles under its own rules", async () => {
    const { limiter } = limiterOf(rules, { plans, overrides: true });
    await limiter.overrides.set("a", {
      rules: { r: { limit: 30 }, g: { limit: 30, burst: 30 } },
    });
    const d = await limiter.limit("a", { cost: 20 });
    expect(d.plan).toBe("custom");
    await limiter.settle(d, 5);
    const after = await limiter.limit("a", { cost: 0 });
    expect([after.rules.r!.remaining, after.rules.g!.remaining]).toEqual([25, 25]);
  });

  it("a custom override with a plan's window settles in that window's key", async () => {
    const { limiter, clock } = limiterOf(rules, { plans, overrides: true });
    clock.set(T0 + 30 * MINUTE);
    // the pro plan's rules (its hour-long window), with limits of the identifier's own
    await limiter.overrides.set("a", {
      plan: "pro",
      rules: { r: { limit: 40 }, g: { limit: 40, burst: 40 } },
    });
    const d = await limiter.limit("a", { cost: 30 });
    expect(d.plan).toBe("custom");
    // the hour's count is kept in the pro plan's key for that window
    const key = limiter.keys("a", clock.now, "pro")[0]!;
    expect(await client().get(key)).toBe(30);
    await limiter.settle(d, 12);
    expect(await client().get(key)).toBe(12);
    const after = await limiter.limit("a", { cost: 0 });
    expect([after.rules.r!.remaining, after.rules.g!.remaining]).toEqual([28, 28]);
  });

  it.each([
    ["one rule", { r: fixedWindow({ limit: 10, window: "1m" }) }],
    ["two rules", { r: fixedWindow({ limit: 10, window: "1m" }), g: gcra({ limit: 1000, period: "1m" }) }],
  ])(
    "%s: a decision under the base rules settled after a custom override raised the limit gives back from what that admitted",
    async (_, rules) => {
      const { limiter, clock } = limiterOf(rules, { overrides: true });
      clock.set(T0 + 1000);
      const d = await limiter.limit("a", { cost: 5 });
      expect(d).toMatchObject({ plan: "default", allowed: true });
      await limiter.overrides.set("a", { rules: { r: { limit: 1000 } } });
      for (let i = 0; i < 100; i++) expect((await limiter.limit("a")).allowed).toBe(true);
      const key = limiter.keys("a")[0]!;
      expect(await client().get(key)).toBe(105);
      // 5 of the 105 go back: 100 admitted under the override stay counted (not the base limit's 10)
      await limiter.settle(d, 0);
      expect(await client().get(key)).toBe(100);
      expect((await limiter.limit("a", { cost: 0 })).rules.r).toMatchObject({ limit: 1000, remaining: 900 });
    },
  );

  it.each([
    ["fixedWindow", fixedWindow({ limit: 10, window: "1m" }), { limit: 100 }],
    ["gcra", gcra({ limit: 10, period: "1m", burst: 10 }), { limit: 100, burst: 100 }],
    ["slidingWindow", slidingWindow({ limit: 10, window: "1m" }), { limit: 100 }],
  ])(
    "one %s rule with overrides on (its one-rule variant) settles under the plan stored",
    async (_, rule, pro) => {
      const { limiter, clock } = limiterOf({ r: rule }, { plans: { pro: { r: pro } }, overrides: true });
      clock.set(T0 + 1000);
      await limiter.overrides.set("a", { plan: "pro" });
      const d = await limiter.limit("a", { cost: 50 });
      expect(d).toMatchObject({ plan: "pro", remaining: 50 });
      await limiter.settle(d, 20);
      expect(await peek(limiter, "a")).toMatchObject({ remaining: 80 });
    },
  );
});

describe("decisions a lease answered", () => {
  const rules = { r: fixedWindow({ limit: 1000, window: "1h" }) };

  /** Two decisions of 10 from Redis (the second reserving 10 for a lease), then one of 4 from the lease. */
  async function leased() {
    const { limiter, clock, prefix } = limiterOf(rules, { lease: { max: 50, ttl: "1s" } });
    const plain = new Limiter({ redis: client(), prefix, rules, clock, denyCache: false });
    const background: Promise<unknown>[] = [];
    const waitUntil = (p: Promise<unknown>) => void background.push(p);
    const sources: string[] = [];
    let d: Decision | undefined;
    for (const cost of [10, 10, 4]) {
      d = await limiter.limit("hot", { cost, waitUntil });
      sources.push(d.source);
      clock.set(clock.now + 1);
    }
    expect(sources).toEqual(["redis", "redis", "lease"]);
    await Promise.all(background);
    // Redis: 10, then 10 and 10 reserved for the lease, which has handed out 4
    expect((await plain.limit("hot", { cost: 0 })).remaining).toBe(970);
    return { limiter, plain, clock, decision: d! };
  }

  it("below: the difference rejoins the lease, with no request", async () => {
    const { limiter, plain, decision } = await leased();
    bridge.stats.reset();
    expect(await limiter.settle(decision, 1)).toEqual({ difference: -3, via: "lease" });
    expect(bridge.stats.requests).toBe(0);
    // the lease holds 9 now: a decision of 9 is answered from it
    expect((await limiter.limit("hot", { cost: 9 })).source).toBe("lease");
    await limiter.dispose();
    expect((await plain.limit("hot", { cost: 0 })).remaining).toBe(1000 - 10 - 10 - 1 - 9);
  });

  it("below, the lease then given back: the difference goes back to Redis with it", async () => {
    const { limiter, plain, decision } = await leased();
    expect(await limiter.settle(decision, 1)).toEqual({ difference: -3, via: "lease" });
    await limiter.dispose();
    expect((await plain.limit("hot", { cost: 0 })).remaining).toBe(1000 - 21);
  });

  it("above, within what the lease holds: taken from the lease", async () => {
    const { limiter, plain, decision } = await leased();
    expect(await limiter.settle(decision, 8)).toEqual({ difference: 4, via: "lease" });
    await limiter.dispose();
    expect((await plain.limit("hot", { cost: 0 })).remaining).toBe(1000 - 28);
  });

  it("above what the lease holds: one settle call charges it in Redis", async () => {
    const { limiter, plain, decision } = await leased();
    expect(await limiter.settle(decision, 20)).toEqual({ difference: 16, via: "redis" });
    await limiter.dispose();
    expect((await plain.limit("hot", { cost: 0 })).remaining).toBe(1000 - 40);
  });

  it("after the lease expired: given back in Redis, in the window it was counted in", async () => {
    const { limiter, plain, clock, decision } = await leased();
    clock.set(clock.now + 2000);
    expect(await limiter.settle(decision, 1)).toEqual({ difference: -3, via: "redis" });
    await limiter.dispose();
    expect((await plain.limit("hot", { cost: 0 })).remaining).toBe(1000 - 21);
  });
});

describe("decisions from Redis that also reserved units for a lease or a pool", () => {
  // the second decision of 10 reserves beside its cost (a lease, a pool, or both): a copy of home's
  // answer with the held units counted as remaining, which must still settle where home counted it
  const holders: Record<string, () => Options> = {
    lease: () => ({ lease: { max: 50, ttl: "1h" } }),
    region: () => ({ region: { redis: client(), pool: { max: 50, ttl: "1h" } } }),
    both: () => ({
      lease: { max: 50, ttl: "1h" },
      region: { redis: client(), pool: { max: 50, ttl: "1h" } },
    }),
  };
  const algorithms: Record<string, RuleConfig> = {
    gcra: gcra({ limit: 1000, period: "1h", burst: 1000 }),
    tokenBucket: tokenBucket({ capacity: 1000, refillRate: 1000, interval: "1h" }),
    fixedWindow: fixedWindow({ limit: 1000, window: "1h" }),
    slidingWindow: slidingWindow({ limit: 1000, window: "1h" }),
  };
  const cases = Object.keys(algorithms).flatMap((algorithm) =>
    Object.keys(holders).map((holder) => [algorithm, holder] as const),
  );

  it.each(cases)("%s with %s: a settle of 1 gives 9 back at home", async (algorithm, holder) => {
    const rules = { r: algorithms[algorithm]! };
    const { limiter, clock, prefix } = limiterOf(rules, holders[holder]!());
    const plain = new Limiter({ redis: client(), prefix, rules, clock, denyCache: false });
    const background: Promise<unknown>[] = [];
    const waitUntil = (p: Promise<unknown>) => void background.push(p);
    await limiter.limit("hot", { cost: 10, waitUntil });
    clock.set(clock.now + 1);
    const d = await limiter.limit("hot", { cost: 10, waitUntil });
    expect(d.source).toBe("redis");
    // home counted 10, then 10 and 10 more held nearer (a lease's, a pool's), or 10 each (both)
    const held = holder === "both" ? 20 : 10;
    clock.set(clock.now + 1);
    await Promise.all(background);
    expect((await plain.limit("hot", { cost: 0 })).remaining).toBe(980 - held);
    expect(await limiter.settle(d, 1)).toEqual({ difference: -9, via: "redis" });
    expect((await plain.limit("hot", { cost: 0 })).remaining).toBe(989 - held);
    await limiter.dispose();
  });
});
