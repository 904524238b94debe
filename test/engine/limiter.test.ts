import { createServer, type IncomingMessage, type Server } from "node:http";
import net, { type AddressInfo } from "node:net";
import { Redis } from "@upstash/redis";
import { describe, expect, it } from "vitest";
import {
  type Decision,
  fixedWindow,
  gcra,
  Limiter,
  type RuleConfig,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from "../../src/index.js";
import { failOnUnhandledRejections, ownBridge, privateRedis } from "../own-bridge.js";
import { bridgeRedis, manualClock, T0, uniquePrefix } from "../support.js";

failOnUnhandledRejections();
const bridge = ownBridge();

// Keys expire in real time by TTLs counted on the test clock (a gcra unit's key lives T): a test that
// reads state again in a later step uses rules whose keys outlive the test (20 s at most), so a loaded
// machine cannot expire it in between. Limiters wait 15 s before failing open, except where the test is
// about timeouts.

/** A limiter on the counting bridge, with a hand-moved clock. */
function counted(
  rules: Record<string, RuleConfig>,
  options: Partial<ConstructorParameters<typeof Limiter>[0]> = {},
) {
  const clock = manualClock();
  const limiter = new Limiter({
    redis: bridgeRedis(bridge.url),
    prefix: uniquePrefix("lim"),
    rules,
    clock,
    timeout: 15_000,
    ...options,
  });
  return { limiter, clock };
}

describe("one round trip", () => {
  it("sends the 50 decisions issued together as one HTTP request", async () => {
    const { limiter } = counted({ r: gcra({ limit: 10, period: "1s" }) }, { denyCache: false });
    await limiter.limit("warm-up"); // the first decision on a Redis may have to load the script
    bridge.stats.reset();
    const decisions = await Promise.all(Array.from({ length: 50 }, (_, i) => limiter.limit(`user-${i}`)));
    expect(bridge.stats.requests).toBe(1);
    expect(decisions.every((d) => d.allowed && d.remaining === 9 && d.source === "redis")).toBe(true);
  });

  it("checks three rules with one request and one script call", async () => {
    const { limiter } = counted(
      {
        burst: gcra({ limit: 10, period: "1s", burst: 5 }),
        minute: slidingLog({ limit: 30, window: "1m" }),
        daily: fixedWindow({ limit: 1000, window: "1d" }),
      },
      { denyCache: false },
    );
    await limiter.limit("warm-up"); // the first decision on a Redis may have to load the script
    bridge.stats.reset();
    const d = await limiter.limit("three");
    expect(bridge.stats.requests).toBe(1);
    expect(bridge.stats.commands).toBe(1);
    expect(d.rules).toEqual({
      burst: { allowed: true, limit: 5, remaining: 4, resetAt: T0 + 100, retryAfter: 0 },
      minute: { allowed: true, limit: 30, remaining: 29, resetAt: T0 + 60_000, retryAfter: 0 },
      daily: {
        allowed: true,
        limit: 1000,
        remaining: 999,
        resetAt: T0 - (T0 % 86_400_000) + 86_400_000,
        retryAfter: 0,
      },
    });
    expect(d.rule).toBe("burst");
  });
});

describe("batchWindow", () => {
  it("collects decisions issued in separate macrotasks within the window into one request", async () => {
    const { limiter } = counted(
      { r: gcra({ limit: 10, period: "1s" }) },
      { denyCache: false, batchWindow: 100 },
    );
    await limiter.limit("warm-up");
    bridge.stats.reset();
    const decisions: Promise<Decision>[] = [];
    for (let i = 0; i < 5; i++) {
      decisions.push(limiter.limit(`separate-${i}`));
      await new Promise((resolve) => setImmediate(resolve)); // a new macrotask: a 0 window would flush here
    }
    expect((await Promise.all(decisions)).every((d) => d.source === "redis" && d.allowed)).toBe(true);
    expect(bridge.stats.requests).toBe(1);
  });

  it("without a window, decisions in separate macrotasks go out separately", async () => {
    const { limiter } = counted({ r: gcra({ limit: 10, period: "1s" }) }, { denyCache: false });
    await limiter.limit("warm-up");
    bridge.stats.reset();
    const decisions: Promise<Decision>[] = [];
    for (let i = 0; i < 5; i++) {
      decisions.push(limiter.limit(`separate-${i}`));
      await new Promise((resolve) => setImmediate(resolve));
    }
    await Promise.all(decisions);
    expect(bridge.stats.requests).toBe(5);
  });
});

describe("several rules", () => {
  it("denies all-or-nothing: a denial consumes from no rule", async () => {
    const { limiter } = counted(
      { wide: fixedWindow({ limit: 5, window: "1m" }), narrow: fixedWindow({ limit: 2, window: "1m" }) },
      { denyCache: false },
    );
    await limiter.limit("a");
    await limiter.limit("a");
    const denied = await limiter.limit("a");
    expect(denied.allowed).toBe(false);
    expect(denied.rule).toBe("narrow");
    expect(denied.rules.wide).toMatchObject({ allowed: true, remaining: 3, retryAfter: 0 });
    expect(denied.rules.narrow).toMatchObject({ allowed: false, remaining: 0 });
    expect((await limiter.limit("a", { cost: 0 })).rules.wide!.remaining).toBe(3);
  });

  it("reports the denial with the latest retry as binding", async () => {
    const { limiter, clock } = counted(
      { minute: fixedWindow({ limit: 1, window: "1m" }), hour: fixedWindow({ limit: 1, window: "1h" }) },
      { denyCache: false },
    );
    await limiter.limit("b");
    clock.set(T0 + 200);
    const d = await limiter.limit("b");
    // T0 is 14 minutes past an hour: the hour's window ends 2760 s after T0.
    expect(d).toMatchObject({
      allowed: false,
      rule: "hour",
      retryAfter: 2_759_800,
      resetAt: T0 + 2_760_000,
      limit: 1,
    });
    expect(d.rules.minute!.retryAfter).toBe(59_800);
  });

  it("names the rule with least remaining when admitted", async () => {
    const { limiter } = counted(
      { big: fixedWindow({ limit: 100, window: "1m" }), small: fixedWindow({ limit: 3, window: "1m" }) },
      { denyCache: false },
    );
    expect(await limiter.limit("c")).toMatchObject({ allowed: true, rule: "small", remaining: 2, limit: 3 });
  });
});

describe("peek, cost and reset", () => {
  it("peeks with cost 0 without consuming or writing", async () => {
    const redis = bridgeRedis();
    const { limiter } = counted({ r: fixedWindow({ limit: 3, window: "1m" }) }, { denyCache: false });
    const fresh = await limiter.limit("p", { cost: 0 });
    expect(fresh).toMatchObject({ allowed: true, remaining: 3, retryAfter: 0, resetAt: T0 });
    expect(await redis.exists(...limiter.keys("p"))).toBe(0);
    await limiter.limit("p", { cost: 3 });
    const spent = await limiter.limit("p", { cost: 0 });
    expect(spent).toMatchObject({ allowed: false, remaining: 0, retryAfter: 60_000 });
    expect((await limiter.limit("p", { cost: 0 })).remaining).toBe(0);
  });

  it("takes cost units at once, and never admits a cost above the limit", async () => {
    const { limiter } = counted({ r: tokenBucket({ capacity: 10, refillRate: 1, interval: "1m" }) });
    expect(await limiter.limit("k", { cost: 4 })).toMatchObject({ allowed: true, remaining: 6 });
    expect(await limiter.limit("k", { cost: 11 })).toMatchObject({
      allowed: false,
      remaining: 6,
      retryAfter: Number.POSITIVE_INFINITY,
    });
    expect(await limiter.limit("k", { cost: 6 })).toMatchObject({ allowed: true, remaining: 0 });
  });

  it("reset forgets an identifier in every rule and in the deny cache", async () => {
    const redis = bridgeRedis();
    const { limiter } = counted({
      a: gcra({ limit: 1, period: "1h" }),
      b: slidingLog({ limit: 1, window: "1h" }),
    });
    await limiter.limit("r");
    expect((await limiter.limit("r")).allowed).toBe(false);
    expect((await limiter.limit("r")).source).toBe("cache");
    await limiter.limit("other");
    await limiter.reset("r");
    expect(await redis.exists(...limiter.keys("r"))).toBe(0);
    expect(await redis.exists(...limiter.keys("other"))).toBe(2);
    expect(await limiter.limit("r")).toMatchObject({ allowed: true, source: "redis", remaining: 0 });
  });
});

describe("script cache", () => {
  // SCRIPT FLUSH would disturb other test files counting requests, so these run on a Redis of their own.
  const own = privateRedis({ token: "flush" });
  const make = () => {
    const redis = new Redis({ url: own.bridge.url, token: "flush", enableTelemetry: false });
    const limiter = new Limiter({
      redis,
      rules: { r: fixedWindow({ limit: 5, window: "1m" }) },
      denyCache: false,
      clock: manualClock(),
      timeout: 15_000,
    });
    return { redis, limiter };
  };

  it("recovers from SCRIPT FLUSH by loading the script again, then uses EVALSHA as before", async () => {
    const { redis, limiter } = make();
    await limiter.limit("f");
    await redis.scriptFlush();
    own.bridge.stats.reset();
    expect(await limiter.limit("f")).toMatchObject({ allowed: true, remaining: 3, source: "redis" });
    expect(own.bridge.stats.requests).toBe(2); // EVALSHA → NOSCRIPT, then SCRIPT LOAD + EVALSHA
    own.bridge.stats.reset();
    expect(await limiter.limit("f")).toMatchObject({ allowed: true, remaining: 2, source: "redis" });
    expect(own.bridge.stats.requests).toBe(1);
  });

  it("recovers every decision of a batch after a flush, in one more request", async () => {
    const { redis, limiter } = make();
    await redis.scriptFlush();
    own.bridge.stats.reset();
    const all = await Promise.all(Array.from({ length: 20 }, (_, i) => limiter.limit(`batch-${i % 4}`)));
    expect(own.bridge.stats.requests).toBe(2);
    // 20 EVALSHA meet NOSCRIPT; then one SCRIPT LOAD rides ahead of the 20 again: the text is sent once
    expect(own.bridge.stats.commands).toBe(20 + 1 + 20);
    expect(all.every((d) => d.source === "redis")).toBe(true);
    expect(all.filter((d) => d.allowed)).toHaveLength(20);
  });
});

describe("deny cache", () => {
  it("answers a repeat offender with no request, exactly until it could be admitted", async () => {
    const { limiter, clock } = counted({ r: fixedWindow({ limit: 2, window: "1m" }) });
    await limiter.limit("d", { cost: 2 });
    bridge.stats.reset();
    const denied = await limiter.limit("d");
    expect(denied).toMatchObject({ allowed: false, source: "redis", retryAfter: 60_000 });
    expect(bridge.stats.requests).toBe(1);

    bridge.stats.reset();
    clock.set(T0 + 24_000);
    const hit = await limiter.limit("d");
    expect(hit).toMatchObject({
      allowed: false,
      source: "cache",
      retryAfter: 36_000,
      rule: "r",
      remaining: 0,
    });
    expect(Object.keys(hit)).toEqual(Object.keys(denied));
    clock.set(T0 + 59_999);
    expect(await limiter.limit("d")).toMatchObject({ source: "cache", retryAfter: 1 });
    expect(bridge.stats.requests).toBe(0);

    clock.set(T0 + 60_000);
    expect(await limiter.limit("d")).toMatchObject({ allowed: true, source: "redis" });
    expect(bridge.stats.requests).toBe(1);
  });

  it("answers only the cost it cached: Redis decides another cost, and how long it must wait", async () => {
    const { limiter } = counted({ r: gcra({ limit: 10, period: "10m", burst: 3 }) }); // T = 60 s
    await limiter.limit("e", { cost: 3 });
    expect(await limiter.limit("e", { cost: 2 })).toMatchObject({
      allowed: false,
      source: "redis",
      retryAfter: 120_000,
    });
    expect(await limiter.limit("e", { cost: 2 })).toMatchObject({
      allowed: false,
      source: "cache",
      retryAfter: 120_000,
    });
    expect(await limiter.limit("e", { cost: 3 })).toMatchObject({
      allowed: false,
      source: "redis",
      retryAfter: 180_000,
    });
    expect(await limiter.limit("e", { cost: 4 })).toMatchObject({
      allowed: false,
      source: "redis",
      retryAfter: Number.POSITIVE_INFINITY,
    });
    expect(await limiter.limit("e", { cost: 0 })).toMatchObject({
      allowed: false,
      source: "redis",
      retryAfter: 60_000,
    });
    expect(await limiter.limit("e", { cost: 1 })).toMatchObject({
      allowed: false,
      source: "cache",
      retryAfter: 60_000,
    });
  });

  it("holds at most maxEntries, evicting the least recently used", async () => {
    const { limiter } = counted(
      { r: fixedWindow({ limit: 1, window: "1h" }) },
      { denyCache: { maxEntries: 3 } },
    );
    const ids = ["u0", "u1", "u2", "u3", "u4"];
    for (const id of ids) await limiter.limit(id);
    for (const id of ids) expect((await limiter.limit(id)).source).toBe("redis"); // fills the cache
    bridge.stats.reset();
    const sources = [];
    for (const id of ids) sources.push((await limiter.limit(id)).source);
    // u2, u3, u4 were cached; u0 and u1 were evicted and, asked again, evict u2 and u3 in turn
    expect(sources).toEqual(["redis", "redis", "redis", "redis", "redis"]);
    bridge.stats.reset();
    const again = [];
    for (const id of ["u2", "u3", "u4"]) again.push((await limiter.limit(id)).source);
    expect(again).toEqual(["cache", "cache", "cache"]);
    expect(bridge.stats.requests).toBe(0);
  });

  it("belongs to its limiter: another limiter with the same rules asks Redis", async () => {
    const prefix = uniquePrefix("own");
    const clock = manualClock();
    const make = () =>
      new Limiter({
        redis: bridgeRedis(bridge.url),
        prefix,
        rules: { r: gcra({ limit: 1, period: "1m" }) },
        clock,
        timeout: 15_000,
      });
    const first = make();
    await first.limit("s");
    await first.limit("s");
    bridge.stats.reset();
    expect((await first.limit("s")).source).toBe("cache");
    expect(bridge.stats.requests).toBe(0);
    expect(await make().limit("s")).toMatchObject({ allowed: false, source: "redis" });
    expect(bridge.stats.requests).toBe(1);
  });
});

describe("large costs", () => {
  it("admits a sliding-log cost of thousands of units beside another rule, and charges both", async () => {
    const redis = bridgeRedis();
    const { limiter } = counted(
      { a: fixedWindow({ limit: 20_000, window: "1m" }), log: slidingLog({ limit: 100_000, window: "1m" }) },
      { denyCache: false },
    );
    expect(await limiter.limit("big", { cost: 5000 })).toMatchObject({ allowed: true, source: "redis" });
    const after = await limiter.limit("big", { cost: 0 });
    expect(after.rules.a!.remaining).toBe(15_000);
    expect(after.rules.log!.remaining).toBe(95_000);
    expect(await redis.zcard(limiter.keys("big")[1]!)).toBe(5000);
  });
});

describe("changing a rule's algorithm", () => {
  it("starts the rule afresh instead of misreading the old state", async () => {
    const prefix = uniquePrefix("swap");
    const clock = manualClock();
    const swaps = [
      fixedWindow({ limit: 2, window: "1h" }),
      slidingWindow({ limit: 2, window: "1h" }),
      slidingLog({ limit: 2, window: "1h" }),
      gcra({ limit: 2, period: "1h" }),
      tokenBucket({ capacity: 2, refillRate: 1, interval: "1h" }),
    ];
    for (const rule of swaps) {
      const limiter = new Limiter({
        redis: bridgeRedis(),
        prefix,
        rules: { r: rule },
        denyCache: false,
        clock,
        timeout: 15_000,
      });
      expect(await limiter.limit("same", { cost: 2 })).toMatchObject({
        allowed: true,
        source: "redis",
        remaining: 0,
      });
      expect(await limiter.limit("same")).toMatchObject({ allowed: false, source: "redis" });
    }
  });
});

describe("exact admission under concurrency", () => {
  const exact: Record<string, RuleConfig> = {
    gcra: gcra({ limit: 50, period: "1h" }),
    tokenBucket: tokenBucket({ capacity: 50, refillRate: 1, interval: "1h" }),
    fixedWindow: fixedWindow({ limit: 50, window: "1h" }),
    slidingWindow: slidingWindow({ limit: 50, window: "1h" }),
    slidingLog: slidingLog({ limit: 50, window: "1h" }),
  };
  it.each(Object.entries(exact))(
    "%s admits exactly 50 of 200 concurrent calls from 4 isolates",
    async (_, rule) => {
      const prefix = uniquePrefix("conc");
      const clock = manualClock(T0 + 1234);
      // four clients, as four isolates would have: four pipelines racing on one key
      const limiters = Array.from(
        { length: 4 },
        () =>
          new Limiter({
            redis: bridgeRedis(),
            prefix,
            rules: { r: rule },
            denyCache: false,
            clock,
            timeout: 15_000,
          }),
      );
      const decisions = await Promise.all(
        Array.from({ length: 200 }, (_, i) => limiters[i % 4]!.limit("hot")),
      );
      expect(decisions.filter((d) => d.allowed)).toHaveLength(50);
      expect(decisions.filter((d) => d.source !== "redis")).toHaveLength(0);
      const remaining = decisions
        .filter((d) => d.allowed)
        .map((d) => d.remaining)
        .sort((a, b) => a - b);
      expect(remaining).toEqual(Array.from({ length: 50 }, (_, i) => i));
    },
  );
});

describe("keys", () => {
  it("gives every key a TTL after a mixed workload", async () => {
    const redis = bridgeRedis();
    const prefix = uniquePrefix("ttl");
    const clock = manualClock();
    const limiter = new Limiter({
      redis,
      prefix,
      rules: {
        // Every key written lives 24 s or more (a gcra unit, a token, what is left of the minute after
        // 27.3 s), longer than the test may run: the 35 keys are all still there when it counts them.
        g: gcra({ limit: 5, period: "2m" }),
        t: tokenBucket({ capacity: 5, refillRate: 1, interval: "24s" }),
        f: fixedWindow({ limit: 5, window: "1m" }),
        s: slidingWindow({ limit: 5, window: "1m" }),
        l: slidingLog({ limit: 5, window: "1m" }),
      },
      clock,
      timeout: 15_000,
    });
    for (let i = 0; i < 40; i++) {
      clock.set(T0 + i * 700);
      await limiter.limit(`id-${i % 7}`, { cost: i % 3 });
    }
    const keys: string[] = [];
    let cursor = "0";
    do {
      const [next, found] = await redis.scan(cursor, { match: `${prefix}:*`, count: 1000 });
      keys.push(...found);
      cursor = String(next);
    } while (cursor !== "0");
    expect(keys.length).toBe(35);
    const ttls = await Promise.all(keys.map((key) => redis.pttl(key)));
    expect(ttls.filter((ttl) => ttl <= 0)).toEqual([]);
    expect(Math.max(...ttls)).toBeLessThanOrEqual(120_000); // a sliding window needs two windows at most
  });

  it("keeps identifiers apart, however alike, and keys under 512 bytes", async () => {
    const { limiter } = counted({ r: fixedWindow({ limit: 1, window: "1h" }) }, { denyCache: false });
    const ids = [
      "a",
      "a}",
      "{a}",
      "}a{",
      " ",
      "=a",
      "#a",
      "a:r",
      "%0061",
      "\u0000",
      "\u{1F600}",
      "\uD800",
      "\uFFFD",
      "x".repeat(10_000),
      `${"x".repeat(9_999)}y`,
    ];
    const first = await Promise.all(ids.map((id) => limiter.limit(id)));
    expect(first.every((d) => d.allowed)).toBe(true);
    const second = await Promise.all(ids.map((id) => limiter.limit(id)));
    expect(second.every((d) => !d.allowed)).toBe(true);
    // the longest keys: a 64-character prefix and rule names, the longest algorithm suffixes, and a
    // fixed window of 1 ms (its window index has as many digits as the clock)
    const longest = new Limiter({
      redis: bridgeRedis(),
      prefix: "p".repeat(64),
      rules: {
        ["f".repeat(64)]: fixedWindow({ limit: 1, window: 1 }),
        ["t".repeat(64)]: tokenBucket({ capacity: 1, refillRate: 1 }),
      },
    });
    for (const id of ids) {
      for (const key of [...limiter.keys(id), ...longest.keys(id)]) {
        expect(new TextEncoder().encode(key).length).toBeLessThan(512);
      }
    }
  });
});

describe("validation", () => {
  const redis = new Redis({ url: "http://127.0.0.1:1", token: "t" });
  const bad: [string, Record<string, unknown>, RegExp][] = [
    ["empty rules", { rules: {} }, /rules: give at least one rule/],
    [
      "negative limit",
      { rules: { burst: gcra({ limit: -1, period: "1s" }) } },
      /rules\.burst\.limit: must be a positive whole number, got -1/,
    ],
    [
      "NaN capacity",
      { rules: { b: tokenBucket({ capacity: Number.NaN, refillRate: 1 }) } },
      /rules\.b\.capacity/,
    ],
    [
      "infinite limit",
      { rules: { w: fixedWindow({ limit: Number.POSITIVE_INFINITY, window: "1s" }) } },
      /rules\.w\.limit/,
    ],
    ["fractional limit", { rules: { w: slidingWindow({ limit: 1.5, window: "1s" }) } }, /rules\.w\.limit/],
    [
      "bad duration",
      { rules: { daily: fixedWindow({ limit: 1, window: "1 day" as "1d" }) } },
      /rules\.daily\.window: "1 day" is not a duration/,
    ],
    [
      "zero duration",
      { rules: { g: gcra({ limit: 1, period: 0 }) } },
      /rules\.g\.period: must be a positive/,
    ],
    [
      "unknown algorithm",
      { rules: { x: { algorithm: "leakyBucket", limit: 1 } } },
      /rules\.x\.algorithm: unknown algorithm "leakyBucket"/,
    ],
    [
      "unknown field",
      { rules: { x: { algorithm: "gcra", limit: 1, period: "1s", brust: 2 } } },
      /rules\.x\.brust: not an option of gcra/,
    ],
    ["bad rule name", { rules: { "a b": gcra({ limit: 1, period: "1s" }) } }, /rule name "a b"/],
    [
      "huge log",
      { rules: { l: slidingLog({ limit: 1_000_000, window: "1m" }) } },
      /rules\.l\.limit: a sliding log/,
    ],
    [
      "a timeout past what a timer holds",
      { rules: { g: gcra({ limit: 1, period: "1s" }) }, timeout: 2 ** 31 },
      /timeout: must be .* up to 2147483647/,
    ],
    [
      "an infinite batch window",
      { rules: { g: gcra({ limit: 1, period: "1s" }) }, batchWindow: Number.POSITIVE_INFINITY },
      /batchWindow: must be/,
    ],
    [
      "bad timeout",
      { rules: { g: gcra({ limit: 1, period: "1s" }) }, timeout: -5 },
      /timeout: must be a positive/,
    ],
    [
      "bad onError",
      { rules: { g: gcra({ limit: 1, period: "1s" }) }, onError: "open" },
      /onError: must be "allow" or "deny"/,
    ],
    ["bad prefix", { rules: { g: gcra({ limit: 1, period: "1s" }) }, prefix: "a{b}" }, /prefix: must be/],
    [
      "bad cache",
      { rules: { g: gcra({ limit: 1, period: "1s" }) }, denyCache: { maxEntries: 0 } },
      /denyCache\.maxEntries/,
    ],
    [
      "unknown option",
      { rules: { g: gcra({ limit: 1, period: "1s" }) }, timout: 5 },
      /timout: not a Limiter option/,
    ],
  ];
  it.each(bad)("rejects %s, naming the field", (_, options, message) => {
    expect(() => new Limiter({ redis, ...options } as never)).toThrow(message);
  });
  it("rejects a client that is not an @upstash/redis client", () => {
    expect(() => new Limiter({ redis: {}, rules: { g: gcra({ limit: 1, period: "1s" }) } })).toThrow(
      /redis: expected an @upstash\/redis client/,
    );
  });
  it("rejects a bad identifier or cost at the call", () => {
    const limiter = new Limiter({ redis, rules: { g: gcra({ limit: 1, period: "1s" }) } });
    expect(() => limiter.limit(42 as unknown as string)).toThrow(/identifier: expected a string/);
    expect(() => limiter.limit("a", { cost: -1 })).toThrow(/cost: must be a whole number/);
    expect(() => limiter.limit("a", { cost: 1.5 })).toThrow(/cost/);
  });
});

/** An HTTP server that answers however a test wants, and tells when a request was abandoned. */
async function fakeRedisServer(
  answer: (req: IncomingMessage, res: import("node:http").ServerResponse) => void,
) {
  const abandoned: Promise<void>[] = [];
  let requests = 0;
  const server: Server = createServer((req, res) => {
    requests += 1;
    abandoned.push(
      new Promise((resolve) => res.on("close", () => (res.writableFinished ? undefined : resolve()))),
    );
    answer(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    abandoned,
    get requests() {
      return requests;
    },
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

describe("timeouts and errors", () => {
  const rules = { r: fixedWindow({ limit: 5, window: "1m" }) };

  it("stops waiting at the timeout, fails open, and aborts the request", async () => {
    const stall = await fakeRedisServer(() => {}); // never answers
    try {
      const limiter = new Limiter({ redis: new Redis({ url: stall.url, token: "t" }), rules, timeout: 100 });
      const decisions = await Promise.all([limiter.limit("x"), limiter.limit("y")]);
      for (const d of decisions) {
        expect(d).toMatchObject({ allowed: true, source: "error", remaining: 5, retryAfter: 0, rule: "r" });
        expect(d.error?.message).toMatch(/did not answer within 100 ms/);
      }
      expect(stall.requests).toBe(1);
      // the request is aborted once nobody waits on it: this resolves when its connection closes (a
      // request left running would hold this test until vitest's own timeout fails it)
      await stall.abandoned[0];
    } finally {
      await stall.close();
    }
  });

  it("fails closed when onError is deny", async () => {
    const stall = await fakeRedisServer(() => {});
    try {
      const limiter = new Limiter({
        redis: new Redis({ url: stall.url, token: "t" }),
        rules,
        timeout: 50,
        onError: "deny",
      });
      expect(await limiter.limit("x")).toMatchObject({
        allowed: false,
        source: "error",
        remaining: 0,
        retryAfter: 1000,
      });
    } finally {
      await stall.close();
    }
  });

  it("follows onError at once on a 5xx answer", async () => {
    const broken = await fakeRedisServer((_, res) => {
      res.writeHead(502, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: "bad gateway" }));
    });
    try {
      const limiter = new Limiter({
        redis: new Redis({ url: broken.url, token: "t" }),
        rules,
        timeout: 5000,
        onError: "deny",
      });
      const d = await limiter.limit("x");
      expect(d).toMatchObject({ allowed: false, source: "error" });
      expect(d.error).toMatchObject({ kind: "unreachable", status: 502 }); // a gateway without its upstream
      // what the endpoint said, and not the request body, which holds identifiers
      expect(d.error?.message).toMatch(/answered HTTP 502: bad gateway$/);
    } finally {
      await broken.close();
    }
  });

  it("follows onError when nothing listens, and the client's retries are cut off", async () => {
    const gone = await fakeRedisServer(() => {});
    await gone.close();
    const limiter = new Limiter({ redis: new Redis({ url: gone.url, token: "t" }), rules, timeout: 150 });
    expect(await limiter.limit("x")).toMatchObject({ allowed: true, source: "error" });
  });

  it("follows onError on a Redis error inside the script", async () => {
    const redis = bridgeRedis();
    const limiter = new Limiter({
      redis,
      prefix: uniquePrefix("err"),
      rules,
      onError: "deny",
      timeout: 15_000,
    });
    const [key] = limiter.keys("wrong");
    await redis.hset(key!, { not: "a string" });
    const d = await limiter.limit("wrong");
    expect(d).toMatchObject({ allowed: false, source: "error" });
    expect(d.error?.message).toMatch(/WRONGTYPE/);
  });
});

describe("decidedAt", () => {
  it("says what the clock read for every source: redis, cache, lease, error", async () => {
    const { limiter, clock } = counted(
      { r: fixedWindow({ limit: 2, window: "10s" }) },
      { lease: { max: 4, ttl: "5s" } },
    );
    clock.set(T0 + 1_250.75);
    const first = await limiter.limit("a");
    expect([first.source, first.decidedAt]).toEqual(["redis", T0 + 1_250]);
    clock.set(T0 + 1_300);
    const second = await limiter.limit("a");
    expect(second.decidedAt).toBe(T0 + 1_300);
    clock.set(T0 + 1_400);
    const denied = await limiter.limit("a");
    expect([denied.allowed, denied.source, denied.decidedAt]).toEqual([false, "redis", T0 + 1_400]);
    clock.set(T0 + 1_500);
    const cached = await limiter.limit("a");
    expect([cached.source, cached.decidedAt, cached.retryAfter]).toEqual(["cache", T0 + 1_500, 8_500]);
    await limiter.dispose();

    const { limiter: leasing, clock: leaseClock } = counted(
      { r: gcra({ limit: 100, period: "1s" }) },
      { lease: { max: 10, ttl: "5s" } },
    );
    const sources = new Map<string, number[]>();
    for (let i = 0; i < 40; i++) {
      leaseClock.set(T0 + 10 * i);
      const d = await leasing.limit("hot");
      sources.set(d.source, [...(sources.get(d.source) ?? []), d.decidedAt - (T0 + 10 * i)]);
    }
    expect(sources.get("lease")?.length).toBeGreaterThan(0);
    for (const offsets of sources.values()) expect(new Set(offsets)).toEqual(new Set([0]));
    await leasing.dispose();

    const { limiter: failing, clock: failClock } = counted(
      { r: gcra({ limit: 1, period: "1s" }) },
      { redis: { url: "http://127.0.0.1:1", token: "t" }, timeout: 500 },
    );
    failClock.set(T0 + 42);
    const failed = await failing.limit("x");
    expect([failed.source, failed.decidedAt]).toEqual(["error", T0 + 42]);
  });
});

/**
 * A TCP hop to `target` that, while holding, keeps what comes back from it; `release()` writes it on to
 * the client at once, where it waits unread until the client's event loop next polls for I/O.
 */
async function holdingHop(target: string) {
  const { hostname, port } = new URL(target);
  const held: [net.Socket, Buffer][] = [];
  const sockets = new Set<net.Socket>();
  let holding = false;
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(port), hostname);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on("error", () => {});
      socket.once("close", () => {
        sockets.delete(socket);
        client.destroy();
        upstream.destroy();
      });
    }
    client.on("data", (chunk) => upstream.write(chunk));
    upstream.on("data", (chunk) => {
      if (holding) held.push([client, chunk]);
      else client.write(chunk);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    hold() {
      holding = true;
    },
    held: () => held.length,
    release() {
      holding = false;
      for (const [client, chunk] of held.splice(0)) client.write(chunk);
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

describe("a caller that keeps the event loop busy", () => {
  it("does not turn another decision's reply, arrived meanwhile, into a timeout", async () => {
    // One caller awaits cached denials in a loop (no I/O: it never yields to the event loop) for longer
    // than the timeout, while another decision's reply waits unread in its socket. The timer fires late,
    // with the reply waiting: the decision is Redis's answer, not onError's. The reply is held at a hop
    // until it has come back, then handed to the socket just before the loop starts: the bridge runs in
    // this process, so it could not answer while the loop runs, and on a busy machine its answer after
    // the loop may take longer than the grace a late timer gives.
    const hop = await holdingHop(bridge.url);
    const timeout = 1000;
    try {
      const limiter = new Limiter({
        redis: bridgeRedis(hop.url),
        prefix: uniquePrefix("busy"),
        rules: { r: fixedWindow({ limit: 1, window: "1m" }) },
        timeout,
        // a clock that stands still: on the real one, a run across a minute's end saw the spinner's
        // cached denial expire with its window, and the spinner ask Redis (the timeout runs on real time)
        clock: manualClock(),
      });
      // until the spinner's denial is cached (on a busy machine one of these calls may time out)
      for (let i = 0; i < 10 && (await limiter.limit("spinner")).source !== "cache"; i++);
      expect((await limiter.limit("spinner")).source).toBe("cache");
      let rounds = 0;
      for (let attempt = 0; rounds < 3 && attempt < 10; attempt++) {
        hop.hold();
        const started = performance.now();
        const other = limiter.limit(`other-${attempt}`);
        // (awaited in setImmediate's phase: the loop's next turn runs the timers before it reads I/O)
        while (hop.held() === 0 && performance.now() - started < timeout) {
          await new Promise((resolve) => setImmediate(resolve));
        }
        if (hop.held() === 0 || performance.now() - started >= timeout) {
          // the machine took longer than the timeout to answer: no reply could be waiting; again
          hop.release();
          await other;
          continue;
        }
        // the reply came back within the timeout: hand it to the socket, then keep the loop busy past it
        hop.release();
        const end = started + timeout + 200;
        let spins = 0;
        while (performance.now() < end) {
          const cached = await limiter.limit("spinner");
          expect(cached.source).toBe("cache");
          spins++;
        }
        const decision = await other;
        expect([decision.source, decision.allowed, spins > 0]).toEqual(["redis", true, true]);
        rounds++;
      }
      expect(rounds).toBe(3);
    } finally {
      await hop.close();
    }
  });
});
