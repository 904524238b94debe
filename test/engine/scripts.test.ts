// The limiter script's own paths, exactly: the fixed window's one-integer state (its INCRBY shortcut,
// the harmless overshoot, the undo, lagging callers), what each path costs in Redis commands, the
// sliding window's lagging caller, and the dispatcher's reservation.
import { Redis } from "@upstash/redis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectRedis, type RedisConnection, startBridge, startRedisServer } from "../../src/bridge/index.js";
import { SCRIPT } from "../../src/engine/generated/scripts.js";
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
const HOUR = 3_600_000;
/** The hour T0 falls in: windows of an hour start at START and end at END. */
const START = T0 - (T0 % HOUR);
const END = START + HOUR;
const SPAN = 2 ** 51;
/** The fixed window's stored integer for `count` units in the window that starts at `start`. */
const stored = (start: number, window: number, count: number) => (((start / window) % 3) + 1) * SPAN + count;

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

describe("fixedWindow: one integer, one INCRBY", () => {
  it("answers the shortcut's every path exactly, and keeps the count where it belongs", async () => {
    const { limiter, clock, redis } = limiterOf({ r: fixedWindow({ limit: 3, window: "1h" }) });
    const [key] = limiter.keys("id");
    const count = async (start: number) => Number(await redis.get(key!)) - stored(start, HOUR, 0);
    const steps: Step[] = [
      [T0, 1, true, 2, END, 0], // first in the window: INCRBY, SET
      [T0 + 1, 2, true, 0, END, 0], // later: INCRBY
      [T0 + 2, 1, false, 0, END, END - T0 - 2], // full: the overshoot stays
    ];
    expect(await run(limiter, clock, steps)).toEqual(steps);
    expect(await count(START)).toBe(4);
    const more: Step[] = [
      [T0 + 2, 0, false, 0, END, END - T0 - 2], // a peek reads the overshoot as full
      [END, 1, true, 2, END + HOUR, 0], // the next window starts afresh
      [END - 1, 1, true, 1, END + HOUR, 0], // a lagging clock counts in the newer window
      [END + 5, 2, false, 1, END + HOUR, HOUR - 5], // a partial window denied by a large cost: undone
    ];
    expect(await run(limiter, clock, more)).toEqual(more);
    expect(await count(END)).toBe(2);
    const last: Step[] = [
      [END + 5, 1, true, 0, END + HOUR, 0],
      [END + 5, 4, false, 0, END + HOUR, NEVER], // above the limit: never, and nothing written
    ];
    expect(await run(limiter, clock, last)).toEqual(last);
    expect(await count(END)).toBe(3);
    expect(await redis.pttl(key!)).toBeGreaterThan(0);
  });

  it("undoes an overshoot that reaches half the stamp's span, so counts never spill into the stamp", async () => {
    // limit 2^50 needs 1 ms windows; the state is written by hand with an hour to live
    const { limiter, clock, redis } = limiterOf({ r: fixedWindow({ limit: 2 ** 50, window: 1 }) });
    const [key] = limiter.keys("id");
    await redis.set(key!, stored(T0, 1, 2 ** 50), { px: HOUR });
    clock.set(T0);
    expect(await limiter.limit("id", { cost: 2 ** 50 })).toMatchObject({
      allowed: false,
      remaining: 0,
      retryAfter: 1,
    });
    expect(await redis.get(key!)).toBe(stored(T0, 1, 2 ** 50));
  });

  it("starts afresh over a state it cannot read, with one rule or several", async () => {
    const single = limiterOf({ r: fixedWindow({ limit: 3, window: "1h" }) });
    const [one] = single.limiter.keys("id");
    await single.redis.set(one!, "12:34", { px: HOUR });
    single.clock.set(T0);
    expect(await single.limiter.limit("id")).toMatchObject({ allowed: true, remaining: 2, resetAt: END });
    expect(await single.redis.get(one!)).toBe(stored(START, HOUR, 1));

    const { limiter, clock, redis } = limiterOf(
      { r: fixedWindow({ limit: 3, window: "1h" }), g: gcra({ limit: 5, period: "1h" }) },
      bridgeRedis(),
    );
    const [key] = limiter.keys("id");
    await redis.set(key!, "from another version", { px: HOUR });
    clock.set(T0);
    expect((await limiter.limit("id")).rules.r).toMatchObject({ allowed: true, remaining: 2, resetAt: END });
    expect(await redis.get(key!)).toBe(stored(START, HOUR, 1));
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
    two.clock.set(END); // a new window: the commit SETs it
    expect((await two.limiter.limit("id")).rules.f).toMatchObject({ remaining: 1, resetAt: END + HOUR });
    two.clock.set(END - 1); // lagging: counted in the newer window, where the commit INCRBYs
    expect((await two.limiter.limit("id")).rules.f).toMatchObject({ allowed: true, remaining: 0 });
    const [f] = two.limiter.keys("id");
    expect(await redis.get(f!)).toBe(stored(END, HOUR, 2));
    expect((await two.limiter.limit("id")).rules.f).toMatchObject({
      allowed: false,
      retryAfter: END + HOUR - (END - 1),
    });
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
    const rules = limiter.rules.flatMap((rule) => rule.args);
    const call = (cost: number, reserve: number, at = T0) =>
      redis.eval(SCRIPT, keys, [at.toString(16), String(cost), ...rules, String(reserve)]) as Promise<
        number[]
      >;
    const gReset = (units: number) => T0 + units * 36_000;
    expect(await call(1, 10)).toEqual([1, 4, END, 0, 1, 95, gReset(5), 0, 4]); // f: (9 - 1) / 2 = 4
    expect(await call(1, 10)).toEqual([1, 2, END, 0, 1, 93, gReset(7), 0, 1]); // (4 - 1) / 2 = 1
    expect(await call(0, 10)).toEqual([1, 2, END, 0, 1, 93, gReset(7), 0, 0]); // a peek reserves nothing
    expect(await call(3, 10)).toEqual([0, 2, END, END - T0, 1, 93, gReset(7), 0, 0]); // nor a denial
    expect(await call(2, 10)).toEqual([1, 0, END, 0, 1, 91, gReset(9), 0, 0]);
    const single = limiterOf({ t: tokenBucket({ capacity: 10, refillRate: 1, interval: "1h" }) }).limiter;
    const one = (cost: number, reserve: number) =>
      redis.eval(SCRIPT, single.keys("id"), [
        T0.toString(16),
        String(cost),
        ...single.rules[0]!.args,
        String(reserve),
      ]);
    expect(await one(2, 3)).toEqual([1, 5, T0 + 5 * HOUR, 0, 3]); // (10 - 2) / 2 = 4, at most 3
    expect(await one(1, 9)).toEqual([1, 2, T0 + 8 * HOUR, 0, 2]);
  });
});

describe("commands per decision (each path, one rule)", () => {
  // INFO commandstats counts every command a script runs: a Redis of this file's own.
  let conn: RedisConnection;
  let redis: Redis;
  let stop: () => Promise<void>;
  beforeAll(async () => {
    const server = await startRedisServer();
    const bridge = await startBridge({ redisUrl: server.url, port: 0, token: "cmds" });
    conn = await connectRedis(server.url);
    redis = new Redis({ url: bridge.url, token: "cmds", enableTelemetry: false });
    stop = async () => {
      await conn.close();
      await bridge.close();
      await server.stop();
    };
  });
  afterAll(() => stop());

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
        [1, "EVALSHA INCRBY SET"],
        [1, "EVALSHA INCRBY"],
        [1, "EVALSHA INCRBY"],
        [1, "EVALSHA INCRBY"], // full: the overshoot stays, no undo
        [0, "EVALSHA GET"], // peek
        [4, "EVALSHA GET"], // above the limit
      ],
    ],
    [
      "fixedWindow, a partial window denied by a large cost",
      fixedWindow({ limit: 3, window: "1h" }),
      [
        [2, "EVALSHA INCRBY SET"],
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
    await limiterOf({ w: rule }, redis).limiter.limit("warm-up"); // loads the script
    const got: [number, string][] = [];
    for (const [cost] of calls) got.push([cost, await commands(limiter, cost)]);
    expect(got).toEqual(calls);
  });
});
