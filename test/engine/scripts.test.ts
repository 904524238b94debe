// The limiter script's own paths, exactly: the fixed window's key per window (its INCR one-rule script,
// the harmless overshoot, the undo, lagging callers, the grace), what each path costs in Redis commands, the
// sliding window's lagging caller, and the dispatcher's reservation.
import type { Redis } from "@upstash/redis";
import { beforeAll, describe, expect, it } from "vitest";
import type { RedisConnection } from "../../src/bridge/resp.js";
import { ONE_RULE_SCRIPTS, SCRIPTS } from "../../src/engine/generated/scripts.js";
import { RuleKeys } from "../../src/engine/keys.js";
import { limiterArgs } from "../../src/engine/scripts/limiter.js";
import {
  fixedWindow,
  gcra,
  intervalBucket,
  Limiter,
  type RuleConfig,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from "../../src/index.js";
import { privateRedis } from "../own-bridge.js";
import { bridgeRedis, manualClock, T0, uniquePrefix } from "../support.js";

const NEVER = Number.POSITIVE_INFINITY;
const HOUR = 3_600_000;
/** The hour T0 falls in: windows of an hour start at START and end at END. */
const START = T0 - (T0 % HOUR);
const END = START + HOUR;

function limiterOf(
  rules: Record<string, RuleConfig>,
  redis: Redis = bridgeRedis(),
  prefix = uniquePrefix("scr"),
) {
  const clock = manualClock();
  const limiter = new Limiter({ redis, prefix, rules, denyCache: false, clock });
  return { limiter, clock, redis, prefix };
}

type Step = [
  at: number,
  cost: number,
  allowed: boolean,
  remaining: number,
  resetAt: number,
  retryAfter: number,
];

async function run(limiter: Limiter, clock: ReturnType<typeof manualClock>, steps: Step[]) {
  const got: Step[] = [];
  for (const [at, cost] of steps) {
    clock.set(at);
    const d = await limiter.limit("id", { cost });
    got.push([at, cost, d.allowed, d.remaining, d.resetAt, d.retryAfter]);
  }
  return got;
}

describe("fixedWindow: a key per window, one INCR", () => {
  it("answers the one-rule script's every path exactly, and keeps the count in its window's key", async () => {
    const { limiter, clock, redis } = limiterOf({ r: fixedWindow({ limit: 3, window: "1h" }) });
    const [first] = limiter.keys("id", T0);
    const [next] = limiter.keys("id", END);
    expect(first).toBe(`${limiter.prefix}:{=id}:r:fixedWindow:${START / HOUR}`);
    const steps: Step[] = [
      [T0, 1, true, 2, END, 0], // first in the window: INCR, PEXPIRE
      [T0 + 1, 2, true, 0, END, 0], // later: INCRBY
      [T0 + 2, 1, false, 0, END, END - T0 - 2], // full: the overshoot stays
    ];
    expect(await run(limiter, clock, steps)).toEqual(steps);
    expect(await redis.get(first!)).toBe(4);
    const more: Step[] = [
      [T0 + 2, 0, false, 0, END, END - T0 - 2], // a peek reads the overshoot as full
      [END, 1, true, 2, END + HOUR, 0], // the next window starts afresh, in a key of its own
      [END - 1, 1, false, 0, END, 1], // a lagging clock is counted in the window it names, still kept
      [END + 5, 3, false, 2, END + HOUR, HOUR - 5], // a partial window denied by a large cost: undone
      [END + 5, 2, true, 0, END + HOUR, 0],
      [END + 5, 4, false, 0, END + HOUR, NEVER], // above the limit: never, and nothing written
    ];
    expect(await run(limiter, clock, more)).toEqual(more);
    expect(await redis.get(first!)).toBe(5);
    expect(await redis.get(next!)).toBe(3);
  });

  it("keeps a window's key until the window ends plus min(window, 1 minute)", async () => {
    for (const [window, grace] of [
      [HOUR, 60_000],
      [10_000, 10_000],
    ] as const) {
      for (const rules of [
        { r: fixedWindow({ limit: 3, window }) } as Record<string, RuleConfig>,
        { r: fixedWindow({ limit: 3, window }), g: gcra({ limit: 5, period: "1h" }) },
      ]) {
        // the one-rule script and the check (several rules) set the same expiry
        const { limiter, clock, redis } = limiterOf(rules);
        const now = T0 - (T0 % window) + 1234;
        clock.set(now);
        await limiter.limit("id");
        const ttl = now - (now % window) + window + grace - now;
        const pttl = await redis.pttl(limiter.keys("id")[0]!);
        expect(pttl).toBeLessThanOrEqual(ttl);
        expect(pttl).toBeGreaterThan(ttl - 5_000);
      }
    }
  });

  it("starts afresh over a value it cannot read, with one rule or several", async () => {
    const single = limiterOf({ r: fixedWindow({ limit: 3, window: "1h" }) });
    single.clock.set(T0);
    const [one] = single.limiter.keys("id");
    await single.redis.set(one!, "12:34", { px: HOUR });
    expect(await single.limiter.limit("id")).toMatchObject({ allowed: true, remaining: 2, resetAt: END });
    expect(await single.redis.get(one!)).toBe(1);
    await single.redis.set(one!, "12:34", { px: HOUR });
    expect(await single.limiter.limit("id", { cost: 2 })).toMatchObject({ allowed: true, remaining: 1 });
    expect(await single.redis.get(one!)).toBe(2);

    const { limiter, clock, redis } = limiterOf(
      { r: fixedWindow({ limit: 3, window: "1h" }), g: gcra({ limit: 5, period: "1h" }) },
      bridgeRedis(),
    );
    clock.set(T0);
    const [key] = limiter.keys("id");
    await redis.set(key!, "from another version", { px: HOUR });
    expect((await limiter.limit("id")).rules.r).toMatchObject({ allowed: true, remaining: 2, resetAt: END });
    expect(await redis.get(key!)).toBe(1);
  });

  it("reset() deletes the previous, current and next window's keys", async () => {
    const { limiter, clock, redis } = limiterOf({ r: fixedWindow({ limit: 3, window: "1h" }) });
    for (const at of [T0 - HOUR, T0, T0 + HOUR]) {
      clock.set(at);
      await limiter.limit("id");
    }
    const keys = [T0 - HOUR, T0, T0 + HOUR].map((at) => limiter.keys("id", at)[0]!);
    expect(await redis.exists(...keys)).toBe(3);
    clock.set(T0);
    await limiter.reset("id");
    expect(await redis.exists(...keys)).toBe(0);
  });

  it("with several rules, a value INCRBY would refuse reads as a new window, and the commit stays whole", async () => {
    const { limiter, clock, redis } = limiterOf({
      g: gcra({ limit: 5, period: "1h" }),
      r: fixedWindow({ limit: 3, window: "1h" }),
    });
    clock.set(T0);
    const [g, r] = limiter.keys("id");
    let gcraLeft = 5;
    for (const foreign of ["1.5", "1e3", " 3"]) {
      await redis.set(r!, foreign, { px: HOUR });
      const d = await limiter.limit("id");
      expect(d.source).toBe("redis");
      expect(d.rules.r).toMatchObject({ allowed: true, remaining: 2 });
      expect(d.rules.g).toMatchObject({ allowed: true, remaining: --gcraLeft });
      expect(await redis.get(r!)).toBe(1);
    }
    expect(await redis.pttl(g!)).toBeGreaterThan(0);
  });

  it("names a token bucket's key after its algorithm and the state it keeps, GCRA's", () => {
    const { limiter } = limiterOf({
      r: tokenBucket({ capacity: 5, refillRate: 1 }),
      f: fixedWindow({ limit: 1, window: "1h" }),
    });
    const [bucket, window] = limiter.keys("id", T0);
    expect(bucket).toBe(`${limiter.prefix}:{=id}:r:tokenBucket.gcra`);
    expect(window).toBe(`${limiter.prefix}:{=id}:f:fixedWindow:${START / HOUR}`);
  });

  it("with several rules reads a stored overshoot as full and commits all or nothing", async () => {
    const prefix = uniquePrefix("scr");
    const redis = bridgeRedis();
    const one = limiterOf({ f: fixedWindow({ limit: 2, window: "1h" }) }, redis, prefix);
    const two = limiterOf(
      { f: fixedWindow({ limit: 2, window: "1h" }), g: gcra({ limit: 10, period: "1h" }) },
      redis,
      prefix,
    );
    one.clock.set(T0);
    for (let i = 0; i < 3; i++) await one.limiter.limit("id"); // 2 admitted, 1 overshoot
    two.clock.set(T0 + 10);
    const denied = await two.limiter.limit("id");
    expect(denied.rules.f).toMatchObject({ allowed: false, remaining: 0, retryAfter: END - T0 - 10 });
    expect(denied.rules.g).toMatchObject({ allowed: true, remaining: 10 });
    expect(await redis.exists(two.limiter.keys("id")[1]!)).toBe(0);
    two.clock.set(END); // a new window: the commit SETs its key
    expect((await two.limiter.limit("id")).rules.f).toMatchObject({ remaining: 1, resetAt: END + HOUR });
    expect((await two.limiter.limit("id")).rules.f).toMatchObject({ allowed: true, remaining: 0 }); // INCRBY
    expect(await redis.get(two.limiter.keys("id", END)[0]!)).toBe(2);
    two.clock.set(END - 1); // lagging: counted in the window it names, which is full
    const lagging = await two.limiter.limit("id");
    expect(lagging.rules.f).toMatchObject({ allowed: false, remaining: 0, retryAfter: 1 });
    // gcra took 2 of 10 at END; seen from 1 ms earlier, its schedule is 1 ms further ahead: 7 left
    expect(lagging.rules.g).toMatchObject({ allowed: true, remaining: 7 });
    expect(await redis.get(two.limiter.keys("id", T0)[0]!)).toBe(3);
  });
});

describe("the one-rule scripts", () => {
  // A single rule's decision takes its algorithm's one-rule script (one integer, decoded in its algorithm's module);
  // beside a rule that never binds it takes the general path (the dispatcher's table). That both
  // answer the same on random histories is test/engine/paths.property.test.ts's (and, against the
  // model, with plans, overrides and several rules, test/engine/cross-feature.property.test.ts's).
  const cases: [string, RuleConfig][] = [
    ["fixedWindow", fixedWindow({ limit: 7, window: "1h" })],
    ["slidingWindow", slidingWindow({ limit: 7, window: "1h" })],
    ["gcra", gcra({ limit: 7, period: "1h", burst: 5 })], // T = 3,600,000/7 ms: TAT in fractions of a ms
    ["tokenBucket", tokenBucket({ capacity: 5, refillRate: 7, interval: "1h" })],
    ["intervalBucket", intervalBucket({ capacity: 5, refillRate: 7, interval: "1h" })],
  ];
  it("answers one integer where it is taken (the limiter script, 5 per rule, where it is not)", async () => {
    // which script each decision ran and what it answered, read from the requests the Limiter sends
    const answers: [string, unknown][] = [];
    const name = (sha: unknown) =>
      sha === SCRIPTS.limiter.sha1
        ? "limiter"
        : Object.values(ONE_RULE_SCRIPTS).some((s) => s.sha1 === sha)
          ? "one-rule"
          : "other";
    const realFetch = globalThis.fetch;
    globalThis.fetch = async (...args: Parameters<typeof fetch>) => {
      const response = await realFetch(...args);
      const sent = JSON.parse(String(args[1]?.body)) as unknown[][];
      const body = (await response.clone().json()) as { result?: unknown }[];
      if (Array.isArray(body)) {
        for (const [i, b] of body.entries()) answers.push([name(sent[i]?.[1]), b.result]);
      }
      return response;
    };
    const shape = () => answers.map(([script, a]) => [script, Array.isArray(a) ? a.length : typeof a]);
    try {
      const redis = bridgeRedis();
      for (const [, rule] of [
        ...cases,
        ["slidingWindow at 2^25 - 1", slidingWindow({ limit: 2 ** 25 - 1, window: "1h" })] as const,
      ]) {
        const { limiter, clock } = limiterOf({ r: rule }, redis);
        clock.set(T0);
        await limiter.limit("warm-up"); // the script loaded
        answers.length = 0;
        await limiter.limit("id"); // the one-rule script
        await limiter.limit("id", { cost: 2 }); // the one-rule script
        await limiter.limit("id", { cost: 0 }); // a peek: the general path
        expect(shape()).toEqual([
          ["one-rule", "number"],
          ["one-rule", "number"],
          ["limiter", 5],
        ]);
      }
      const { limiter, clock } = limiterOf({ r: slidingWindow({ limit: 2 ** 25, window: "1s" }) }, redis);
      clock.set(T0);
      await limiter.limit("warm-up");
      answers.length = 0;
      await limiter.limit("id"); // a limit of 2^25 keeps a text state: no one-rule script
      expect(shape()).toEqual([["limiter", 5]]);
    } finally {
      globalThis.fetch = realFetch;
    }
  });

  it("agrees with the general path at the sliding window's largest packed limit", async () => {
    const rule = slidingWindow({ limit: 2 ** 25 - 1, window: "1h" });
    const redis = bridgeRedis();
    const shortcut = limiterOf({ r: rule }, redis);
    const general = limiterOf({ r: rule, loose: gcra({ limit: 2 ** 26, period: "1h" }) }, redis);
    for (const [at, cost] of [
      [T0, 2 ** 25 - 2],
      [T0 + 1, 1],
      [T0 + 2, 1],
      [T0 + HOUR, 2 ** 24],
      [T0 + HOUR + 1, 2 ** 24],
    ] as const) {
      shortcut.clock.set(at);
      general.clock.set(at);
      const a = await shortcut.limiter.limit("id", { cost });
      const b = await general.limiter.limit("id", { cost });
      expect(a.rules.r).toEqual(b.rules.r);
    }
    shortcut.clock.set(T0 + 2);
    expect((await shortcut.limiter.limit("id", { cost: 0 })).remaining).toBe(0);
  });
});

describe("slidingWindow: a lagging caller", () => {
  const NEXT = END; // the window after T0's
  it("is told to retry when it will be admitted, its lag included", async () => {
    const { limiter, clock } = limiterOf({ r: slidingWindow({ limit: 10, window: "1h" }) });
    clock.set(START + HOUR / 2);
    expect((await limiter.limit("id", { cost: 10 })).allowed).toBe(true);
    clock.set(NEXT + 360_000); // previous weighs 0.9: 9 + 1 = 10
    expect((await limiter.limit("id")).allowed).toBe(true);
    // 180 s behind, counted in the newer window from its start: previous must fade to 0.8 (NEXT + 720 s)
    clock.set(NEXT - 180_000);
    const lagging = await limiter.limit("id");
    expect(lagging).toMatchObject({ allowed: false, remaining: 0, retryAfter: 900_000 });
    clock.set(NEXT - 180_000 + lagging.retryAfter - 1);
    expect((await limiter.limit("id")).allowed).toBe(false);
    clock.set(NEXT - 180_000 + lagging.retryAfter);
    expect((await limiter.limit("id")).allowed).toBe(true);
  });

  it("weighs the previous window no more than fully, as at the newer window's start", async () => {
    const { limiter, clock } = limiterOf({ r: slidingWindow({ limit: 10, window: "1h" }) });
    clock.set(START + HOUR / 2);
    await limiter.limit("id", { cost: 6 });
    clock.set(NEXT + 200_000); // 6 × (1 - 200/3600) + 2 = 7.67: admitted, 2 left
    expect(await limiter.limit("id", { cost: 2 })).toMatchObject({ allowed: true, remaining: 2 });
    clock.set(NEXT - 100_000); // 6 × 1 + 2 = 8 used; weighing by -100 s would make it 8.17, 1 left
    expect(await limiter.limit("id", { cost: 0 })).toMatchObject({
      allowed: true,
      remaining: 2,
      resetAt: NEXT + 2 * HOUR,
    });
  });
});

describe("reservation (leases)", () => {
  it("takes the cost plus at most half the tightest rule's room after it, under every rule or none", async () => {
    const redis = bridgeRedis();
    const { limiter } = limiterOf({
      f: fixedWindow({ limit: 9, window: "1h" }),
      g: gcra({ limit: 100, period: "1h" }),
    });
    const keys = limiter.keys("id");
    const call = (cost: number, reserve: number, at = T0) =>
      redis.eval(SCRIPTS.limiter.text, keys, limiterArgs(limiter.rules, at, cost, reserve)) as Promise<
        number[]
      >;
    const gReset = (units: number) => T0 + units * 36_000;
    // counted in f's window; g's units hold its TAT (its reset), which caps what a refund gives back
    expect(await call(1, 10)).toEqual([1, 4, END, 0, START, 1, 95, gReset(5), 0, gReset(5), 4]); // f: (9 - 1) / 2 = 4
    expect(await call(1, 10)).toEqual([1, 2, END, 0, START, 1, 93, gReset(7), 0, gReset(7), 1]); // (4 - 1) / 2 = 1
    expect(await call(0, 10)).toEqual([1, 2, END, 0, 0, 1, 93, gReset(7), 0, 0, 0]); // a peek reserves nothing
    expect(await call(3, 10)).toEqual([0, 2, END, END - T0, 0, 1, 93, gReset(7), 0, 0, 0]); // nor a denial
    expect(await call(2, 10)).toEqual([1, 0, END, 0, START, 1, 91, gReset(9), 0, gReset(9), 0]);
    const single = limiterOf({ t: tokenBucket({ capacity: 10, refillRate: 1, interval: "1h" }) }).limiter;
    const one = (cost: number, reserve: number) =>
      redis.eval(SCRIPTS.limiter.text, single.keys("id"), limiterArgs(single.rules, T0, cost, reserve));
    expect(await one(2, 3)).toEqual([1, 5, T0 + 5 * HOUR, 0, T0 + 5 * HOUR, 3]); // (10 - 2) / 2 = 4, at most 3
    expect(await one(1, 9)).toEqual([1, 2, T0 + 8 * HOUR, 0, T0 + 8 * HOUR, 2]);
  });
});

describe("commands per decision (each path, one rule)", () => {
  // INFO commandstats counts every command a script runs, server-wide: a Redis of this file's own.
  const own = privateRedis({ token: "cmds" });
  let conn: RedisConnection;
  let redis: Redis;
  beforeAll(() => {
    ({ conn, redis } = own);
  });

  /** The commands one decision made Redis run, EVALSHA included, by name. */
  async function commands(limiter: Limiter, cost: number): Promise<string> {
    await conn.call("CONFIG", "RESETSTAT");
    await limiter.limit("id", { cost });
    const info = String(await conn.call("INFO", "commandstats"));
    return [...info.matchAll(/^cmdstat_([a-z|]+):calls=(\d+)/gm)]
      .filter(([, name]) => name !== "info" && !name!.startsWith("config"))
      .map(([, name, calls]) => `${name!.toUpperCase()}${calls === "1" ? "" : `×${calls}`}`)
      .sort()
      .join(" ");
  }

  // [rule, [cost, expected commands] per call in order]: first, later, denied (and the rare paths)
  const cases: [string, RuleConfig, [number, string][]][] = [
    [
      "fixedWindow",
      fixedWindow({ limit: 3, window: "1h" }),
      [
        [1, "EVALSHA INCR PEXPIRE"],
        [1, "EVALSHA INCR"],
        [1, "EVALSHA INCR"],
        [1, "EVALSHA INCR"], // full: the overshoot stays, no undo
        [0, "EVALSHA GET"], // peek
        [4, "EVALSHA GET"], // above the limit
      ],
    ],
    [
      "fixedWindow, a partial window denied by a large cost",
      fixedWindow({ limit: 3, window: "1h" }),
      [
        [2, "EVALSHA INCRBY PEXPIRE"],
        [2, "DECRBY EVALSHA INCRBY"],
      ],
    ],
    [
      "slidingWindow",
      slidingWindow({ limit: 2, window: "1h" }),
      [
        [1, "EVALSHA GET SET"],
        [1, "EVALSHA GET INCRBY"], // one integer: a later unit in the window is an INCRBY
        [1, "EVALSHA GET"],
      ],
    ],
    [
      "slidingWindow (limit of 2^25 or more: text state)",
      slidingWindow({ limit: 2 ** 25, window: "1s" }),
      [
        [1, "EVALSHA GET SET"],
        [1, "EVALSHA GET SET"],
        [2 ** 25, "EVALSHA GET"],
      ],
    ],
    [
      "gcra",
      gcra({ limit: 2, period: "1h" }),
      [
        [1, "EVALSHA GET SET"],
        [1, "EVALSHA GET SET"],
        [1, "EVALSHA GET"],
      ],
    ],
    [
      "tokenBucket",
      tokenBucket({ capacity: 2, refillRate: 1, interval: "1h" }),
      [
        [1, "EVALSHA GET SET"],
        [1, "EVALSHA GET SET"],
        [1, "EVALSHA GET"],
      ],
    ],
    [
      "intervalBucket",
      intervalBucket({ capacity: 2, refillRate: 1, interval: "1h" }),
      [
        [1, "EVALSHA GET SET"],
        [1, "EVALSHA GET SET"],
        [1, "EVALSHA GET"],
      ],
    ],
    [
      "slidingLog",
      slidingLog({ limit: 2, window: "1h" }),
      [
        [1, "EVALSHA PEXPIRE ZADD ZCOUNT ZRANGE ZREMRANGEBYSCORE"],
        [1, "EVALSHA PEXPIRE ZADD ZCOUNT ZRANGE ZREMRANGEBYSCORE"],
        [1, "EVALSHA ZCOUNT ZRANGE ZRANGEBYSCORE"],
      ],
    ],
  ];

  it.each(cases)("%s", async (_, rule, calls) => {
    const { limiter, clock } = limiterOf({ r: rule }, redis);
    clock.set(T0);
    // loads the scripts: the one-rule script (where the algorithm has one) and the limiter script
    const warmUp = limiterOf({ w: rule }, redis).limiter;
    await warmUp.limit("warm-up");
    await warmUp.limit("warm-up", { cost: 0 });
    const got: [number, string][] = [];
    for (const [cost] of calls) got.push([cost, await commands(limiter, cost)]);
    expect(got).toEqual(calls);
  });
  // With overrides on, one rule runs its one-rule script's variant (fixedWindowOneRuleOverrides,
  // gcraOneRuleOverrides, slidingWindowOneRuleOverrides, intervalBucketOneRuleOverrides), a sliding log
  // limiterOverrides: the commands
  // of the path as it is with overrides off plus one GET of the override key, stored or not. Each rule's
  // limit is 2 (a token bucket's capacity), and the stored plan or custom line keeps it 2, so the paths
  // line up: first, later, denied.
  const overrideCases: [string, RuleConfig, Record<string, unknown>, string, [number, string][]][] = [
    [
      "fixedWindow",
      fixedWindow({ limit: 2, window: "1h" }),
      { limit: 2 },
      "!fixedWindow 2 3600000 0",
      [
        [1, "EVALSHA MGET SET"], // its own one-rule script: one MGET reads the override and the count
        [1, "EVALSHA INCR MGET"],
        [1, "EVALSHA MGET"], // a denial writes nothing: the count is what was admitted
      ],
    ],
    [
      "slidingWindow",
      slidingWindow({ limit: 2, window: "1h" }),
      { limit: 2 },
      "!slidingWindow 2 3600000 0",
      [
        [1, "EVALSHA GET×2 SET"],
        [1, "EVALSHA GET×2 INCRBY"],
        [1, "EVALSHA GET×2"],
      ],
    ],
    [
      "gcra",
      gcra({ limit: 2, period: "1h" }),
      { limit: 2 },
      "!gcra 2 3600000 2",
      [
        [1, "EVALSHA GET×2 SET"],
        [1, "EVALSHA GET×2 SET"],
        [1, "EVALSHA GET×2"],
      ],
    ],
    [
      "tokenBucket",
      tokenBucket({ capacity: 2, refillRate: 1, interval: "1h" }),
      { capacity: 2 },
      "!gcra 1 3600000 2",
      [
        [1, "EVALSHA GET×2 SET"],
        [1, "EVALSHA GET×2 SET"],
        [1, "EVALSHA GET×2"],
      ],
    ],
    [
      "intervalBucket",
      intervalBucket({ capacity: 2, refillRate: 1, interval: "1h" }),
      { capacity: 2 },
      "!intervalBucket 2 3600000 2",
      [
        [1, "EVALSHA GET×2 SET"],
        [1, "EVALSHA GET×2 SET"],
        [1, "EVALSHA GET×2"],
      ],
    ],
    [
      "slidingLog",
      slidingLog({ limit: 2, window: "1h" }),
      { limit: 2 },
      "!slidingLog 2 3600000 0",
      [
        [1, "EVALSHA GET PEXPIRE ZADD ZCOUNT ZRANGE ZREMRANGEBYSCORE"],
        [1, "EVALSHA GET PEXPIRE ZADD ZCOUNT ZRANGE ZREMRANGEBYSCORE"],
        [1, "EVALSHA GET ZCOUNT ZRANGE ZRANGEBYSCORE"],
      ],
    ],
  ];

  it("overrides on, several rules: the limiter script's commands and one GET, stored or not", async () => {
    const clock = manualClock();
    const make = () =>
      new Limiter({
        redis,
        prefix: uniquePrefix("scr"),
        rules: { f: fixedWindow({ limit: 2, window: "1h" }), g: gcra({ limit: 2, period: "1h" }) },
        denyCache: false,
        clock,
        overrides: true,
      });
    clock.set(T0);
    await make().limit("warm-up");
    for (const line of [undefined, "!fixedWindow 2 3600000 0 gcra 2 3600000 2"]) {
      const limiter = make();
      if (line !== undefined) {
        await redis.set(new RuleKeys(limiter.prefix, limiter.rules).override("id"), `${line}\n{}`);
      }
      const got: string[] = [];
      for (let i = 0; i < 3; i++) got.push(await commands(limiter, 1));
      // first, later, denied
      expect(got).toEqual(["EVALSHA GET×3 SET×2", "EVALSHA GET×3 INCRBY SET", "EVALSHA GET×3"]);
    }
  });

  describe.each(["none stored", "a plan stored", "a custom override stored"])(
    "overrides on, %s",
    (stored) => {
      it.each(overrideCases)("%s", async (_, rule, plan, custom, calls) => {
        const clock = manualClock();
        const make = () =>
          new Limiter({
            redis,
            prefix: uniquePrefix("scr"),
            rules: { r: rule },
            plans: { pro: { r: plan } } as never,
            denyCache: false,
            clock,
            overrides: true,
          });
        const limiter = make();
        clock.set(T0);
        const warmUp = make();
        await warmUp.limit("warm-up");
        const key = new RuleKeys(limiter.prefix, limiter.rules).override("id");
        if (stored === "a plan stored") await redis.set(key, '=pro\n{"plan":"pro"}');
        if (stored === "a custom override stored") await redis.set(key, `${custom}\n{}`);
        const got: [number, string][] = [];
        const plans = new Set<string>();
        for (const [cost] of calls) {
          got.push([cost, await commands(limiter, cost)]);
        }
        for (const d of [await limiter.limit("id", { cost: 0 })]) plans.add(d.plan);
        expect(got).toEqual(calls);
        expect([...plans]).toEqual([
          stored === "none stored" ? "default" : stored === "a plan stored" ? "pro" : "custom",
        ]);
      });
    },
  );
});
