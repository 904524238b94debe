import { describe, expect, it } from "vitest";
import { checkCost, checkRule, compileRule, maxCost } from "../../src/engine/algorithms/index.js";
import { transportFor } from "../../src/engine/transport.js";
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

// Each case: a sequence of requests at explicit times, and the exact answer for each.
// [at (ms after T0), cost, allowed, remaining, resetAt (ms after T0), retryAfter (ms)]
type Step = [
  at: number,
  cost: number,
  allowed: boolean,
  remaining: number,
  resetAt: number,
  retryAfter: number,
];
const NEVER = Number.POSITIVE_INFINITY;

const cases: { name: string; rule: RuleConfig; steps: Step[] }[] = [
  {
    // T = 100 ms, burst 3: three at once, then one every 100 ms
    name: "gcra: burst, then the emission interval",
    rule: gcra({ limit: 10, period: "1s", burst: 3 }),
    steps: [
      [0, 1, true, 2, 100, 0],
      [0, 1, true, 1, 200, 0],
      [0, 1, true, 0, 300, 0],
      [0, 1, false, 0, 300, 100],
      [50, 1, false, 0, 300, 50],
      [100, 1, true, 0, 400, 0],
      [100, 4, false, 0, 400, NEVER],
      [1000, 0, true, 3, 1000, 0], // peek after idling: full, nothing consumed
      [1000, 2, true, 1, 1200, 0],
      [1000, 2, false, 1, 1200, 100],
    ],
  },
  {
    // T = 1000/3 ms is not a whole number of ms: TAT is kept exactly (A + B/3 ms)
    name: "gcra: fractional emission interval stays exact",
    rule: gcra({ limit: 3, period: 1000, burst: 1 }),
    steps: [
      [0, 1, true, 0, 334, 0],
      [333, 1, false, 0, 334, 1],
      [334, 1, true, 0, 668, 0],
      [667, 1, false, 0, 668, 1],
      [668, 1, true, 0, 1002, 0],
    ],
  },
  {
    // 1 token per second, fractions carried: 0.5 + 0.5 makes a token
    name: "tokenBucket: continuous refill carries fractions",
    rule: tokenBucket({ capacity: 5, refillRate: 1, interval: "1s" }),
    steps: [
      [0, 5, true, 0, 5000, 0],
      [0, 1, false, 0, 5000, 1000],
      [500, 1, false, 0, 5000, 500],
      [1500, 1, true, 0, 6000, 0],
      [2000, 1, true, 0, 7000, 0],
      [2500, 1, false, 0, 7000, 500],
      [2500, 6, false, 0, 7000, NEVER],
      [4500, 0, true, 2, 7000, 0],
    ],
  },
  {
    name: "tokenBucket: a lagging clock refills nothing",
    rule: tokenBucket({ capacity: 2, refillRate: 1, interval: "1s" }),
    steps: [
      [2000, 2, true, 0, 4000, 0],
      [1000, 1, false, 0, 4000, 2000], // 1 s behind: no refill, and the wait counts from the stored time
      [3000, 1, true, 0, 5000, 0],
    ],
  },
  {
    name: "fixedWindow: counts per aligned window",
    rule: fixedWindow({ limit: 3, window: "1s" }),
    steps: [
      [100, 2, true, 1, 1000, 0],
      [200, 1, true, 0, 1000, 0],
      [300, 1, false, 0, 1000, 700],
      [999, 1, false, 0, 1000, 1],
      [1000, 1, true, 2, 2000, 0],
      [999, 1, false, 0, 1000, 1], // a lagging clock is counted in the window it names (kept a while)
      [1500, 4, false, 2, 2000, NEVER],
    ],
  },
  {
    name: "slidingWindow: the previous window fades linearly",
    rule: slidingWindow({ limit: 10, window: "1s" }),
    steps: [
      [500, 10, true, 0, 2000, 0],
      [600, 1, false, 0, 2000, 500], // next window, once 10 × (1 - e/1000) + 1 <= 10: e = 100
      [1099, 1, false, 0, 2000, 1],
      [1100, 1, true, 0, 3000, 0],
      [1500, 1, true, 3, 3000, 0], // 10 × 0.5 + 2 = 7 used
      [1500, 3, true, 0, 3000, 0],
      [1500, 1, false, 0, 3000, 100], // previous weight must fall to 0.4: e = 600
      [1600, 1, true, 0, 3000, 0],
      [1600, 11, false, 0, 3000, NEVER],
    ],
  },
  {
    name: "slidingLog: exact window edges, many events in one millisecond",
    rule: slidingLog({ limit: 3, window: "1s" }),
    steps: [
      [0, 1, true, 2, 1000, 0],
      [100, 1, true, 1, 1100, 0],
      [100, 1, true, 0, 1100, 0],
      [200, 1, false, 0, 1100, 800],
      [999, 1, false, 0, 1100, 1],
      [1000, 1, true, 0, 2000, 0], // the entry at 0 left the window at exactly 1000
      [1000, 2, false, 0, 2000, 100],
      [1099, 2, false, 0, 2000, 1],
      [1100, 2, true, 0, 2100, 0],
      [1100, 4, false, 0, 2100, NEVER],
      [500, 1, false, 0, 2100, 1500], // a lagging clock cannot expire entries early
    ],
  },
  // At the bounds (every count and count × duration at most 2^50), every answer is still exact.
  {
    // (a refill this fast expires the key within 1 ms of real time, so only these two steps are stable)
    name: "tokenBucket at the largest refillRate: a full bucket resets now, not 1 ms later",
    rule: tokenBucket({ capacity: 1, refillRate: 2 ** 50, interval: 1 }),
    steps: [
      [0, 0, true, 1, 0, 0],
      [0, 1, true, 0, 1, 0],
    ],
  },
  // Hour-long periods and windows: the keys' TTLs (real time) outlive the test by far.
  {
    // T = 3,600,000 / 2^28 ms; d and next_d reach 2^28 × 3,600,000 (about 2^49.8) in 1/limit ms
    name: "gcra near the largest burst × period",
    rule: gcra({ limit: 2 ** 28, period: "1h", burst: 2 ** 28 }),
    steps: [
      [0, 2 ** 28 - 1, true, 1, 3_600_000, 0],
      [0, 1, true, 0, 3_600_000, 0],
      [0, 1, false, 0, 3_600_000, 1],
      [1_800_000, 0, true, 2 ** 27, 3_600_000, 0],
    ],
  },
  {
    // T0 is 14 minutes past an hour: the window ends 46 minutes later
    name: "fixedWindow near the largest limit × window",
    rule: fixedWindow({ limit: 2 ** 28, window: "1h" }),
    steps: [
      [0, 1, true, 2 ** 28 - 1, 2_760_000, 0],
      [0, 2 ** 28 - 1, true, 0, 2_760_000, 0],
      [0, 1, false, 0, 2_760_000, 2_760_000],
    ],
  },
  {
    name: "slidingWindow near the largest limit × window",
    rule: slidingWindow({ limit: 2 ** 28, window: "1h" }),
    steps: [
      [0, 1, true, 2 ** 28 - 1, 6_360_000, 0],
      [0, 2 ** 28 - 1, true, 0, 6_360_000, 0],
      [4_560_000, 0, true, 2 ** 27, 6_360_000, 0], // half-way through the next window
    ],
  },
];

describe.each(cases)("$name", ({ rule, steps }) => {
  it("answers every step exactly", async () => {
    const clock = manualClock();
    const redis = bridgeRedis();
    const limiter = new Limiter({
      redis,
      prefix: uniquePrefix("alg"),
      rules: { r: rule },
      denyCache: false,
      clock,
    });
    // Keys expire in real time, by TTLs counted on this test's clock (100 ms for a gcra unit here): on
    // a loaded machine the next step could find its state gone. State that has run out on the test's
    // clock reads as no state at all, so keeping it longer changes no answer, and takes the wall clock
    // out of the test. The PEXPIREs go in the decision's own pipeline, right behind its script (sent
    // later, they came too late on a busy machine); the same steps on another identifier first load
    // every script they use, so no NOSCRIPT sends a script again in a pipeline of its own.
    const transport = transportFor(redis);
    const step = (id: string, at: number, cost: number) => {
      clock.set(T0 + at);
      const decision = limiter.limit(id, { cost });
      const kept = limiter
        .keys(id)
        .map((key) => transport.call(["PEXPIRE", key, 60_000], { timeout: 15_000 }));
      return Promise.all([decision, ...kept]).then(([d]) => d);
    };
    for (const [at, cost] of steps) await step("warm-up", at, cost);
    const got: Step[] = [];
    for (const [at, cost] of steps) {
      const requests = transport.stats.requests;
      const d = await step("id", at, cost);
      expect(d.source).toBe("redis");
      expect(transport.stats.requests - requests).toBe(1); // the script and its PEXPIREs: one pipeline
      got.push([at, cost, d.allowed, d.remaining, d.resetAt - T0, d.retryAfter]);
    }
    expect(got).toEqual(steps);
  });
});

describe("many units in the same millisecond", () => {
  it("slidingLog keeps one member per unit", async () => {
    const redis = bridgeRedis();
    const clock = manualClock();
    const limiter = new Limiter({
      redis,
      prefix: uniquePrefix("log"),
      rules: { r: slidingLog({ limit: 500, window: "1m" }) },
      denyCache: false,
      clock,
    });
    for (let i = 0; i < 10; i++) await limiter.limit("same-ms", { cost: 7 });
    await Promise.all(Array.from({ length: 30 }, () => limiter.limit("same-ms")));
    const [key] = limiter.keys("same-ms");
    expect(await redis.zcard(key!)).toBe(100);
    expect((await limiter.limit("same-ms", { cost: 0 })).remaining).toBe(400);
  });
});

describe("bounds: every count, and every count × duration, at most 2^50", () => {
  const build = (rule: RuleConfig) =>
    new Limiter({ redis: bridgeRedis(), rules: { r: rule }, denyCache: false });
  const cases: [RuleConfig, RegExp][] = [
    [
      tokenBucket({ capacity: 10, refillRate: 2 ** 60 }),
      /^rules\.r\.refillRate: must be at most 2\^50 \(1125899906842624\)/,
    ],
    [tokenBucket({ capacity: 10, refillRate: 2 ** 50 + 1 }), /^rules\.r\.refillRate: must be at most 2\^50/],
    [
      tokenBucket({ capacity: 2 ** 41, refillRate: 1, interval: "1s" }),
      /^rules\.r: capacity × interval is .* at most 2\^50/,
    ],
    [gcra({ limit: 2 ** 51, period: 1, burst: 1 }), /^rules\.r\.limit: must be at most 2\^50/],
    [gcra({ limit: 1, period: 1, burst: 2 ** 51 }), /^rules\.r\.burst: must be at most 2\^50/],
    [gcra({ limit: 10, period: "1d", burst: 2 ** 24 }), /^rules\.r: burst × period is .* at most 2\^50/],
    [slidingWindow({ limit: 2 ** 41, window: 1000 }), /^rules\.r: limit × window is .* at most 2\^50/],
    [fixedWindow({ limit: 1, window: 2 ** 51 }), /^rules\.r: window is .* at most 2\^50/],
    [slidingWindow({ limit: 2 ** 53, window: 1 }), /^rules\.r\.limit: must be at most 2\^50/],
    [slidingLog({ limit: 1, window: 2 ** 51 }), /^rules\.r: limit × window is .* at most 2\^50/],
  ];
  it.each(cases)("%o is refused, naming the field and the bound", (rule, message) => {
    expect(() => build(rule)).toThrow(message);
  });

  it("accepts each bound itself", () => {
    expect(() =>
      build(tokenBucket({ capacity: 2 ** 40, refillRate: 2 ** 50, interval: 1024 })),
    ).not.toThrow();
    expect(() => build(gcra({ limit: 2 ** 50, period: 1, burst: 2 ** 50 }))).not.toThrow();
    expect(() => build(fixedWindow({ limit: 2 ** 25, window: 2 ** 25 }))).not.toThrow();
  });
});

describe("costs no rule can admit", () => {
  const limiter = new Limiter({
    redis: bridgeRedis(),
    rules: {
      burst: gcra({ limit: 10, period: "1s", burst: 20 }),
      bucket: tokenBucket({ capacity: 50, refillRate: 5 }),
      daily: fixedWindow({ limit: 1000, window: "1d" }),
    },
  });

  it("maxCost is the smallest limit (burst, capacity), and checkCost refuses more, naming the rule", () => {
    expect(maxCost(limiter.rules)).toBe(20);
    expect(() => checkCost(limiter.rules, 20, "cost")).not.toThrow();
    expect(() => checkCost(limiter.rules, 21, "cost")).toThrow(RangeError);
    expect(() => checkCost(limiter.rules, 21, "cost")).toThrow(
      'cost: 21 can never be admitted: rule "burst" holds at most 20 (make the cost at most 20, or raise the rule\'s limit)',
    );
  });

  it("at the call, such a cost is a denial that says never (retryAfter Infinity), and consumes nothing", async () => {
    const d = await limiter.limit(`big-${uniquePrefix("c")}`, { cost: 21 });
    expect([d.allowed, d.rule, d.retryAfter, d.remaining]).toEqual([false, "burst", NEVER, 20]);
  });
});

describe("rule problems as issues: a path and a message", () => {
  const notDuration =
    '"1 day" is not a duration; use milliseconds or a string like "500ms", "10s", "1m", "1h", "1d"';
  const messageOf = (run: () => unknown) => {
    try {
      run();
    } catch (error) {
      return (error as Error).message;
    }
    throw new Error("expected a throw");
  };

  it("names each field by its path, a rule-wide bound by the rule's, and a bad name by rules", () => {
    expect(
      checkRule("daily", { algorithm: "fixedWindow", limit: 0, window: "1 day" } as never).issues,
    ).toEqual([
      { path: ["rules", "daily", "limit"], message: "must be a positive whole number, got 0" },
      { path: ["rules", "daily", "window"], message: notDuration },
    ]);
    expect(checkRule("r", gcra({ limit: 10, period: "1d", burst: 2 ** 24 })).issues).toEqual([
      {
        path: ["rules", "r"],
        message:
          "burst × period is 1449551462400000 ms, too large to count exactly: it must be at most 2^50 (1125899906842624)",
      },
    ]);
    expect(checkRule("x", { algorithm: "gcra", limit: 1, period: "1s", brust: 2 } as never).issues).toEqual([
      { path: ["rules", "x", "brust"], message: "not an option of gcra; it takes limit, period, burst" },
    ]);
    expect(checkRule("a b", "gcra" as never).issues).toEqual([
      { path: ["rules"], message: 'rule name "a b" must be 1-64 characters of A-Z a-z 0-9 _ . -' },
      { path: ["rules", "a b"], message: 'expected a rule such as gcra({ limit, period }), got "gcra"' },
    ]);
    const checked = checkRule("daily", fixedWindow({ limit: 1000, window: "1d" }));
    expect([checked.issues, checked.rule?.limit]).toEqual([undefined, 1000]);
  });

  it("compileRule throws every issue as path: message, joined by '; '", () => {
    expect(
      messageOf(() => compileRule("daily", { algorithm: "fixedWindow", limit: 0, window: "1 day" } as never)),
    ).toBe(`rules.daily.limit: must be a positive whole number, got 0; rules.daily.window: ${notDuration}`);
    expect(messageOf(() => compileRule("per.day", slidingWindow({ limit: 2 ** 41, window: 1000 })))).toBe(
      "rules.per.day: limit × window is 2199023255552000 ms, too large to count exactly: it must be at most 2^50 (1125899906842624)",
    );
    expect(messageOf(() => compileRule("a b", gcra({ limit: 0, period: "1s" })))).toBe(
      'rules: rule name "a b" must be 1-64 characters of A-Z a-z 0-9 _ . -; rules.a b.limit: must be a positive whole number, got 0',
    );
  });
});
