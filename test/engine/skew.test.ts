// Fair under clock skew: callers whose clocks disagree share one identifier, each with its own
// injected clock, against a real redis-server behind the REST bridge. Part 4's scenarios (clocks
// ±500 ms apart) admit at least 90 % of the ideal and nothing over the limit in the callers' time
// (docs/algorithms.md, "Clock skew"); a lagging caller never takes a unit a caller ahead of it could
// not, and never moves a stored time back; a state written before the sliding window kept slots reads
// as it did.
import type { Redis } from "@upstash/redis";
import { describe, expect, it } from "vitest";
import {
  ACCURACY_POLICY,
  bucketOf,
  CALLERS,
  FAMILY,
  ideal,
  type OurAlgo,
  overLimit,
  SIM_T0,
  schedule,
} from "../../bench/scenarios.js";
import {
  fixedWindow,
  gcra,
  Limiter,
  type RuleConfig,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from "../../src/index.js";
import { bridgeRedis, manualClock, T0, uniquePrefix } from "../support.js";

const NEVER = Number.POSITIVE_INFINITY;

/** Part 4's rules: `limit` per `window`; buckets of capacity `limit` refilled in tenths of the window. */
function ruleOf(algo: OurAlgo): RuleConfig {
  const p = ACCURACY_POLICY;
  const b = bucketOf(p);
  if (algo === "tokenBucket") return tokenBucket(b);
  if (algo === "gcra") return gcra({ limit: b.refillRate, period: b.interval, burst: b.capacity });
  return { fixedWindow, slidingWindow, slidingLog }[algo]({ limit: p.limit, window: p.window });
}

/**
 * Part 4's scenario as bench/accuracy.ts runs it: one Limiter (deny cache on), 64 callers at a time,
 * half of the callers' clocks 500 ms fast and half 500 ms slow. Returns every decision and the caller
 * clock each was made with.
 */
async function runScenario(algo: OurAlgo, shape: string, redis: Redis) {
  let now = SIM_T0;
  const limiter = new Limiter({
    redis,
    prefix: uniquePrefix(`skew-${algo}`),
    rules: { r: ruleOf(algo) },
    clock: () => now,
  });
  const events = schedule(shape, ACCURACY_POLICY, 60_000);
  const allowed: boolean[] = [];
  const clocks: number[] = [];
  for (let i = 0; i < events.length; i += CALLERS) {
    const pending = events.slice(i, i + CALLERS).map((e) => {
      now = SIM_T0 + e.t + (e.caller % 2 ? -500 : 500);
      clocks.push(now);
      return limiter.limit("caller-group");
    });
    for (const d of await Promise.all(pending)) allowed.push(d.allowed);
  }
  const want = ideal(
    FAMILY[algo]!,
    ACCURACY_POLICY,
    events.map((e) => e.t),
  );
  return {
    admitted: allowed.filter(Boolean).length,
    ideal: want.filter(Boolean).length,
    over: overLimit(
      algo,
      ACCURACY_POLICY,
      clocks.filter((_, i) => allowed[i]),
    ),
  };
}

describe("part 4's scenarios, clocks ±500 ms apart", () => {
  // [algorithm, shape, admitted, ideal]: exact (the schedule is seeded, the decisions deterministic)
  const cases: [OurAlgo, string, number, number][] = [
    ["fixedWindow", "steady 2×, skew ±500 ms", 610, 600],
    ["fixedWindow", "edge bursts, skew ±500 ms", 600, 600],
    ["slidingWindow", "steady 2×, skew ±500 ms", 603, 600],
    ["slidingWindow", "edge bursts, skew ±500 ms", 484, 500],
    ["slidingLog", "steady 2×, skew ±500 ms", 600, 600],
    ["slidingLog", "edge bursts, skew ±500 ms", 500, 500],
    ["tokenBucket", "steady 2×, skew ±500 ms", 689, 699],
    ["tokenBucket", "edge bursts, skew ±500 ms", 504, 504],
    ["gcra", "steady 2×, skew ±500 ms", 689, 699],
    ["gcra", "edge bursts, skew ±500 ms", 504, 504],
    // 47 boundaries, each burst half on either side, fast and slow clocks alternating within it
    ["fixedWindow", "edge bursts ×8, skew ±500 ms", 4800, 4800],
    ["slidingWindow", "edge bursts ×8, skew ±500 ms", 4462, 4674],
    ["slidingLog", "edge bursts ×8, skew ±500 ms", 4642, 4674],
    ["tokenBucket", "edge bursts ×8, skew ±500 ms", 4704, 4704],
    ["gcra", "edge bursts ×8, skew ±500 ms", 4704, 4704],
  ];
  const redis = bridgeRedis();
  it.each(cases)(
    "%s, %s: admits %i (ideal %i), ≥ 90 %, none over the limit",
    async (algo, shape, n, best) => {
      const got = await runScenario(algo, shape, redis);
      expect(got).toEqual({ admitted: n, ideal: best, over: 0 });
      expect(got.admitted / got.ideal).toBeGreaterThanOrEqual(0.9);
    },
  );
});

describe("overLimit: the check in the callers' time can fail", () => {
  const p = { limit: 3, window: 10_000 };
  it("counts what a window holds past the limit, each algorithm by its own promise", () => {
    // a fixed window: four in the window [10 s, 20 s) of the callers' clocks
    expect(overLimit("fixedWindow", p, [10_000, 12_000, 19_999, 15_000])).toBe(1);
    expect(overLimit("fixedWindow", p, [10_000, 12_000, 20_000, 9_999])).toBe(0);
    // a sliding log: the fourth at 9,999 is still within 10 s of the first (10,000 ms later, it is not)
    expect(overLimit("slidingLog", p, [0, 1, 2, 9_999])).toBe(1);
    expect(overLimit("slidingLog", p, [0, 1, 2, 10_000])).toBe(0);
    // a lagging caller's stamp is the newest time admitted: 5,000 counts at 9,000, so 10,000 is over
    expect(overLimit("slidingLog", p, [9_000, 9_000, 5_000, 10_000])).toBe(1);
    // a sliding window: 3 at 9,999 weigh 3 × (10,000 − 1)/10,000 at 10,001, and one more is over
    expect(overLimit("slidingWindow", p, [9_999, 9_999, 9_999, 10_001])).toBe(1);
    // ...but 3 at 5,000 have faded out by 15,001 (spread over [0, 5,000])
    expect(overLimit("slidingWindow", p, [5_000, 5_000, 5_000, 15_001, 15_001, 15_001])).toBe(0);
    // a lagging caller is counted at the newest window's start, where the previous weighs fully
    expect(overLimit("slidingWindow", p, [5_000, 5_000, 15_001, 9_000])).toBe(1);
    // buckets (capacity 3, refilled 3 per 10 s): a fourth unit needs 3,334 ms
    expect(overLimit("gcra", p, [0, 0, 0, 3_333])).toBe(1);
    expect(overLimit("tokenBucket", p, [0, 0, 0, 3_334])).toBe(0);
    // a slow clock's unit counts at its own time: three at 5,000 then one at 4,000 is four in [4,000, 5,000]
    expect(overLimit("gcra", p, [5_000, 5_000, 5_000, 4_000])).toBe(1);
  });
});

// A caller whose clock runs behind another's, on the same identifier: every step names the caller.
// [caller, at (ms after T0), cost, allowed, remaining, retryAfter]
type Step = [
  caller: "ahead" | "behind",
  at: number,
  cost: number,
  allowed: boolean,
  remaining: number,
  retryAfter: number,
];

/** `general`: beside a rule that never decides, so every call takes the limiter script, not the one-rule one. */
async function runSteps(rule: RuleConfig, steps: Step[], general = false) {
  const redis = bridgeRedis();
  const prefix = uniquePrefix("lag");
  const clocks = { ahead: manualClock(), behind: manualClock() };
  const rules: Record<string, RuleConfig> = general
    ? { r: rule, wide: fixedWindow({ limit: 1_000, window: "1h" }) }
    : { r: rule };
  const limiters = {
    ahead: new Limiter({ redis, prefix, rules, denyCache: false, clock: clocks.ahead }),
    behind: new Limiter({ redis, prefix, rules, denyCache: false, clock: clocks.behind }),
  };
  const got: Step[] = [];
  const stored: unknown[] = [];
  for (const [caller, at, cost] of steps) {
    clocks[caller].set(T0 + at);
    const d = await limiters[caller].limit("id", { cost });
    got.push([caller, at, cost, d.allowed, d.remaining, d.retryAfter]);
    const key = limiters.ahead.keys("id", T0 + at)[0]!;
    stored.push(
      rule.algorithm === "slidingLog"
        ? await redis.zrange(key, 0, -1, { withScores: true })
        : await redis.get<string>(key),
    );
  }
  return { got, stored, redis, limiter: limiters.ahead };
}

describe("a caller whose clock lags", () => {
  it("slidingWindow: is decided at the newest window's start, and moves nothing back", async () => {
    const steps: Step[] = [
      ["ahead", 10_200, 5, true, 5, 0], // the window [10 s, 20 s), in its second 64th
      // 500 ms behind, in [0, 10 s): counted in the newer window, from its start. Admitted, it marks
      // the state: clocks disagree, so each window's units spread up to the 64th of its latest
      ["behind", 9_700, 1, true, 4, 0],
      // 6 + 5 > 10: the next window, once 6 × (1 − e/313) + 5 <= 10 (313 = 2 × 10,000/64): e = 53
      ["behind", 9_800, 5, false, 4, 10_253],
      ["ahead", 10_300, 4, true, 0, 0],
      // 10 × 213/313 = 6.8 used (clocks that always agreed: 10 × 9,900/10,000, and 0 left, below)
      ["ahead", 20_100, 1, true, 2, 0],
      // behind, in [10 s, 20 s): weighs it fully from [20 s, 30 s)'s start: 10 + 1 used; it fades to
      // 8 by 63 ms into [20 s, 30 s)
      ["behind", 19_800, 1, false, 0, 263],
      ["behind", 20_063, 1, true, 0, 0], // 10 × 250/313 + 1 + 1 <= 10
      ["ahead", 20_300, 1, true, 6, 0], // 10 × 13/313 + 3 = 3.4 used
    ];
    const { got, stored } = await runSteps(slidingWindow({ limit: 10, window: "10s" }), steps);
    expect(got).toEqual(steps);
    // its denials wrote nothing: the state is the one stored before
    expect(stored[2]).toBe(stored[1]);
    expect(stored[5]).toBe(stored[4]);
  });

  it("slidingWindow: with clocks that agree, spreads each window's units over the whole window", async () => {
    const steps: Step[] = [
      ["ahead", 10_200, 10, true, 0, 0],
      ["behind", 9_700, 1, false, 0, 11_300], // denied: it marks nothing
      // 10 × 9,900/10,000 used: one more once 10 × (1 − e/10,000) + 1 <= 10, e = 1,000
      ["ahead", 20_100, 1, false, 0, 900],
      ["ahead", 21_000, 1, true, 0, 0],
    ];
    const { got } = await runSteps(slidingWindow({ limit: 10, window: "10s" }), steps);
    expect(got).toEqual(steps);
  });

  it.each([
    ["the one-rule script", false],
    ["the limiter script", true],
  ])(
    "slidingWindow, through %s: refuses a late unit that would spread a window's units over the next",
    async (_, general) => {
      const steps: Step[] = [
        ["ahead", 10_200, 5, true, 5, 0], // [10 s, 20 s), its 64th number 1 (156.25 ms each)
        ["behind", 9_700, 1, true, 4, 0], // lagging, admitted: clocks disagree
        // the latest unit moves from the 2nd 64th (ending at 313 ms) to the 3rd (469): 6 × 156 ≤ 4 × 10,000
        ["ahead", 10_400, 1, true, 3, 0],
        // the 58th (ending at 9,063 ms) would take 7 × 8,594 > 3 × 10,000 from the next window: refused,
        // until the next window, where 7 units spread over 469 ms weigh 7 at its start
        ["ahead", 19_000, 1, false, 0, 1_000],
        ["behind", 18_600, 1, false, 0, 1_400],
        ["ahead", 20_000, 3, true, 0, 0],
        // 7 × (469 − 235)/469 + 4 = 7.5 used
        ["ahead", 20_235, 1, true, 2, 0],
      ];
      const { got, stored } = await runSteps(slidingWindow({ limit: 10, window: "10s" }), steps, general);
      expect(got).toEqual(steps);
      expect(stored[3]).toBe(stored[2]); // refused: nothing written
      expect(stored[4]).toBe(stored[2]);
    },
  );

  it("slidingWindow: with clocks that agree, takes a late unit (its window weighs over the whole next one)", async () => {
    const steps: Step[] = [
      ["ahead", 10_200, 5, true, 5, 0],
      ["ahead", 19_000, 1, true, 4, 0],
    ];
    const { got } = await runSteps(slidingWindow({ limit: 10, window: "10s" }), steps);
    expect(got).toEqual(steps);
  });

  it("slidingLog: stamps its entries no earlier than the newest, and cannot expire one early", async () => {
    const steps: Step[] = [
      ["ahead", 10_200, 3, true, 0, 0],
      ["behind", 9_700, 1, false, 0, 10_500], // the entries at 10,200 leave at 20,200
      ["behind", 20_199, 1, false, 0, 1],
      ["ahead", 20_200, 1, true, 2, 0],
      ["behind", 19_800, 2, true, 0, 0], // stamped 20,200, the newest, not 19,800
      ["ahead", 30_199, 1, false, 0, 1],
    ];
    const { got, stored } = await runSteps(slidingLog({ limit: 3, window: "10s" }), steps);
    expect(got).toEqual(steps);
    expect(stored[1]).toEqual(stored[0]);
    expect((stored[4] as unknown[]).filter((_, i) => i % 2 === 1)).toEqual([
      T0 + 20_200,
      T0 + 20_200,
      T0 + 20_200,
    ]);
  });

  it("tokenBucket and gcra: see the bucket as it was at their own time, so take only what was there", async () => {
    // capacity 2, one token a second; TAT as stored is A:B:limit:period
    const steps: Step[] = [
      ["ahead", 1_000, 2, true, 0, 0], // TAT 3,000
      ["behind", 500, 1, false, 0, 1_500], // 2,500 ms ahead of its clock: one more needs 1,500
      ["behind", 2_000, 1, true, 0, 0], // TAT 4,000
      ["ahead", 2_500, 1, false, 0, 500], // the token the caller behind took is gone for it too
      ["ahead", 3_000, 1, true, 0, 0],
    ];
    for (const rule of [
      tokenBucket({ capacity: 2, refillRate: 1, interval: "1s" }),
      gcra({ limit: 1, period: "1s", burst: 2 }),
    ]) {
      const { got, stored } = await runSteps(rule, steps);
      expect(got).toEqual(steps);
      const tat = stored.map((s) => Number(String(s).split(":")[0]) - T0);
      expect(tat).toEqual([3_000, 3_000, 4_000, 4_000, 5_000]);
    }
  });

  it("fixedWindow: is counted in the window its clock names, which holds at most the limit", async () => {
    const steps: Step[] = [
      ["ahead", 10_200, 3, true, 0, 0],
      ["behind", 9_700, 3, true, 0, 0], // [0, 10 s) of its clock had nothing
      ["behind", 9_800, 1, false, 0, 200],
      ["behind", 10_100, 1, false, 0, 9_900], // [10 s, 20 s) is full, whoever filled it
    ];
    const { got } = await runSteps(fixedWindow({ limit: 3, window: "10s" }), steps);
    expect(got).toEqual(steps);
  });
});

describe("slidingWindow: a state stored before slots (a deploy mid-window)", () => {
  it("reads as it did, as clocks that agreed so far", async () => {
    const redis = bridgeRedis();
    const clock = manualClock();
    const limiter = new Limiter({
      redis,
      prefix: uniquePrefix("slots"),
      rules: { r: slidingWindow({ limit: 10, window: "10s" }) },
      denyCache: false,
      clock,
    });
    const [key] = limiter.keys("id", T0);
    // the layout before slots: (window index mod 4 + 1) × 2^50 + current × 2^25 + previous
    const index = Math.floor(T0 / 10_000);
    await redis.set(key!, String(((index % 4) + 1) * 2 ** 50 + 4 * 2 ** 25), { px: 60_000 });
    clock.set(T0 + 1_000);
    expect(await limiter.limit("id")).toMatchObject({ allowed: true, remaining: 5 });
    // the next window, half way: 5 × 0.5 + 1 used, as before slots (where they came is not known)
    clock.set(T0 + 15_000);
    expect(await limiter.limit("id")).toMatchObject({ allowed: true, remaining: 6 });
    clock.set(T0 + 15_000);
    expect(await limiter.limit("id", { cost: 6 })).toMatchObject({ allowed: true, remaining: 0 });
    expect(await limiter.limit("id")).toMatchObject({ allowed: false, retryAfter: 1_000 }); // 5 × (1 − e/10,000) + 7 + 1 <= 10: e = 6,000
  });

  it("keeps no slots at a limit of 2^18 or more, and decides as before them", async () => {
    const { limiter, clock } = (() => {
      const clock = manualClock();
      const limiter = new Limiter({
        redis: bridgeRedis(),
        prefix: uniquePrefix("big"),
        rules: { r: slidingWindow({ limit: 2 ** 18, window: "10s" }) },
        denyCache: false,
        clock,
      });
      return { limiter, clock };
    })();
    clock.set(T0 + 1_000);
    expect((await limiter.limit("id", { cost: 2 ** 18 })).allowed).toBe(true);
    // at 10 s + 5 s: 2^18 × 0.5 used, whatever part of [0, 10 s) the units came in
    clock.set(T0 + 15_000);
    expect(await limiter.limit("id", { cost: 0 })).toMatchObject({ remaining: 2 ** 17 });
    expect(await limiter.limit("id", { cost: 2 ** 17 + 1 })).toMatchObject({ allowed: false, retryAfter: 1 });
    expect(await limiter.limit("id", { cost: 2 ** 18 + 1 })).toMatchObject({ retryAfter: NEVER });
  });
});
