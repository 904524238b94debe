// Regional pools against real redis-servers: one home database (the global setup's redis-server,
// behind a bridge of this file's own) and three regional databases, each a redis-server of its own
// behind a bridge. Limiter instances stand for isolates: each has its own clients, so its own
// transports and breakers. Clocks are moved by hand.
import { Redis } from "@upstash/redis";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { type Bridge, type RedisServer, startBridge, startRedisServer } from "../../src/bridge/index.js";
import type { RedisCallError } from "../../src/engine/errors.js";
import { SCRIPTS } from "../../src/engine/generated/scripts.js";
import { transportFor } from "../../src/engine/transport.js";
import {
  type Decision,
  fixedWindow,
  gcra,
  type Identity,
  Limiter,
  type RuleConfig,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from "../../src/index.js";
import { startCutHop } from "../cut-hop.js";
import { Hop, RedisProcess } from "../faults/support.js";
import { failOnUnhandledRejections, ownBridge } from "../own-bridge.js";
import { manualClock, T0, uniquePrefix } from "../support.js";

failOnUnhandledRejections();
const home = ownBridge();
const token = inject("bridgeToken");
const regions: { server: RedisServer; bridge: Bridge }[] = [];

beforeAll(async () => {
  for (let i = 0; i < 3; i++) {
    const server = await startRedisServer();
    const bridge = await startBridge({ redisUrl: server.url, port: 0, token });
    regions.push({ server, bridge });
  }
});
afterAll(async () => {
  for (const { server, bridge } of regions) {
    await bridge.close();
    await server.stop();
  }
});

const client = (url: string) => new Redis({ url, token, enableTelemetry: false });

/** Background work (deposits, top-ups, refunds) handed to waitUntil, awaited by the test when it says. */
function background() {
  const work: Promise<unknown>[] = [];
  return {
    waitUntil: (promise: Promise<unknown>) => {
      work.push(promise);
    },
    async drain() {
      while (work.length > 0) await Promise.all(work.splice(0));
    },
  };
}

interface Fleet {
  limiters: Limiter[][];
  ideal: Limiter;
}

const POOL_MAX = 20;
const LEASE_MAX = 5;

/** 3 regions × 4 instances with pools and leases, and a Limiter without either for the ideal count. */
function fleet(rule: RuleConfig, clock: () => number, prefix: string): Fleet {
  const rules = { r: rule };
  const limiters = regions.map(({ bridge }) =>
    Array.from(
      { length: 4 },
      () =>
        new Limiter({
          redis: client(home.url),
          region: { redis: client(bridge.url), pool: { max: POOL_MAX, ttl: "1s" } },
          rules,
          prefix,
          clock,
          lease: { max: LEASE_MAX, ttl: "500ms" },
          timeout: Number.POSITIVE_INFINITY,
          breaker: false,
        }),
    ),
  );
  const ideal = new Limiter({
    redis: client(home.url),
    rules,
    prefix,
    clock,
    timeout: Number.POSITIVE_INFINITY,
    breaker: false,
  });
  return { limiters, ideal };
}

describe("never over the limit: 3 regions × 4 instances, pools and leases", () => {
  // 12 decisions every STEP ms (one per instance, at once), 240/s, against rules admitting 60/s.
  const STEP = 50;
  const STEPS = 300;
  const cases: [string, RuleConfig, (admittedAt: number[], now: number) => number][] = [
    [
      "gcra",
      gcra({ limit: 600, period: "10s" }),
      // at most burst + elapsed / T since the first decision
      (_, now) => 600 + Math.floor(((now - T0) * 600) / 10_000),
    ],
    [
      "token bucket",
      tokenBucket({ capacity: 300, refillRate: 60, interval: "1s" }),
      (_, now) => 300 + Math.floor(((now - T0) * 60) / 1000),
    ],
    [
      "fixed window",
      fixedWindow({ limit: 300, window: "5s" }),
      // at most the limit in each window
      (admittedAt, now) => 300 + admittedAt.filter((t) => t < now - (now % 5000)).length,
    ],
    [
      "sliding window",
      slidingWindow({ limit: 300, window: "5s" }),
      // at most the limit in each fixed window the estimate counts in
      (admittedAt, now) => 300 + admittedAt.filter((t) => t < now - (now % 5000)).length,
    ],
  ];
  for (const [name, rule, most] of cases) {
    it(name, async () => {
      const clock = manualClock();
      const prefix = uniquePrefix("region");
      const { limiters, ideal } = fleet(rule, clock, prefix);
      const work = background();
      const admittedAt: number[] = [];
      let admittedIdeal = 0;
      let worstOver = Number.NEGATIVE_INFINITY;
      let worstGap = 0;
      const sources = new Map<string, number>();
      // The clock never falls behind real time: Redis expires pools, leases and windows by TTLs in real
      // ms, so a clock moved by hand more slowly than real time (a busy machine: 300 ms a step) saw
      // state vanish that by its own reading still held, and the fixed window admitted over its limit.
      const started = performance.now();
      // Half the burst taken at once first, by both: the state then holds seconds of debt, so its
      // key's TTL (real ms) outlives any pause of a busy machine while the hand-moved clock stands still.
      const half =
        rule.algorithm === "gcra" ? rule.limit / 2 : rule.algorithm === "tokenBucket" ? rule.capacity / 2 : 0;
      if (half > 0) {
        expect((await limiters[0]![0]!.limit("hot", { cost: half })).allowed).toBe(true);
        expect((await ideal.limit("ideal", { cost: half })).allowed).toBe(true);
        for (let i = 0; i < half; i++) admittedAt.push(clock.now);
        admittedIdeal += half;
      }
      for (let step = 0; step < STEPS; step++) {
        const decisions = await Promise.all(
          limiters.flat().map((limiter) => limiter.limit("hot", { waitUntil: work.waitUntil })),
        );
        // the same number at once: one pipeline, which Redis runs in order (one at a time, they were
        // 3,600 sequential round trips a case, minutes on a busy machine)
        for (const e of await Promise.all(decisions.map(() => ideal.limit("ideal")))) {
          if (e.allowed) admittedIdeal += 1;
        }
        for (const d of decisions) {
          sources.set(d.source, (sources.get(d.source) ?? 0) + 1);
          if (d.allowed) admittedAt.push(clock.now);
        }
        worstOver = Math.max(worstOver, admittedAt.length - most(admittedAt, clock.now));
        worstGap = Math.max(worstGap, admittedIdeal - admittedAt.length);
        await work.drain();
        clock.set(Math.max(clock.now + STEP, T0 + Math.ceil(performance.now() - started)));
      }
      expect(sources.get("error")).toBeUndefined();
      expect(worstOver).toBeLessThanOrEqual(0);
      // under-admission: at most the units held in pools (3 regions) and leases (12 instances)
      expect(worstGap).toBeLessThanOrEqual(3 * POOL_MAX + 12 * LEASE_MAX);
      // the pools answered a good share, themselves or through the leases they filled
      expect(sources.get("region") ?? 0).toBeGreaterThan(0);
      expect((sources.get("region") ?? 0) + (sources.get("lease") ?? 0)).toBeGreaterThan(STEPS / 2);
      if (process.env.REGION_REPORT) {
        console.log(name, { admitted: admittedAt.length, admittedIdeal, worstOver, worstGap, sources });
      }
      for (const limiter of limiters.flat()) await limiter.dispose();
    }, 120_000);
  }
});

describe("the pool script (lua/pool.lua): a table of calls at explicit times", () => {
  it("deposits, takes, caps at max, expires, hands leftovers out once, and one reservation at a time", async () => {
    const redis = new Redis({
      url: regions[0]!.bridge.url,
      token,
      enableTelemetry: false,
      automaticDeserialization: false,
    });
    const key = `${uniquePrefix("lua")}:{=id}:pool.default`;
    // ttl 5000 ms, max 20; one rule; snapshot: home's remaining 90, resetAt T0 + 60 000
    const s = `90 ${T0 + 60_000}`;
    const call = (at: number, ...args: (string | number)[]) =>
      redis.eval(
        SCRIPTS.pool.text,
        [key],
        [(T0 + at).toString(16), args[0]!, "5000", "20", ...args.slice(1).map(String)],
      );
    // a deposit's reservation: home counted it at the deposit's time, all its units for the pool
    const put = (at: number, units: number, ends: number, w: string, h = 90) =>
      call(at, "put", units, T0 + ends, w, s, h, `${T0 + at} ${units}`);
    const take = (at: number, cost: number, extra = 0) => call(at, "take", cost, extra);
    const table: [string, () => Promise<unknown>, unknown][] = [
      ["a first ask: no demand yet, nothing held", () => take(0, 1), [0, 0, 0, "", 0, 0]],
      ["a deposit of 10 (handed out until +5000)", () => put(50, 10, 5000, "0"), [10, 0, "", 0, 0, 0]],
      [
        "a take of 3 and 2 for a lease, lent with 2 of the reservation's 10, handed out until +5000",
        () => take(100, 3, 2),
        [1, 5, 0, s, 2, "0", T0 + 50, 2, T0 + 5000],
      ],
      [
        "a deposit past max: 17 more, 2 back; the 20 count from the earlier reservation",
        () => put(200, 17, 5200, "0"),
        [20, 0, "", 2, 0, 0],
      ],
      ["a take the pool covers: 19 left", () => take(300, 1), [1, 19, 0, s, 0, "0", T0 + 50, 0, T0 + 5200]],
      [
        "past its expiry: a miss, the 19 taken out for a refund, as reserved at +50 (8 of its 10 left)",
        () => take(5300, 1),
        [0, 6, 19, "0", T0 + 50, 8],
      ],
      [
        "the 19 are out: a second asker gets none; one reservation at a time: want 0",
        () => take(5300, 1),
        [0, 0, 0, "", 0, 0],
      ],
      ["a free for another reservation leaves the marker", () => call(5300, "free", T0 + 1), 0],
      ["still one at a time", () => take(5301, 1), [0, 0, 0, "", 0, 0]],
      ["the reservation came back empty: free", () => call(5301, "free", T0 + 5300), 0],
      ["another isolate may ask now", () => take(5302, 1), [0, 9, 0, "", 0, 0]],
      ["a deposit counted in another window", () => put(5400, 4, 9000, "5000"), [4, 0, "", 0, 0, 0]],
      [
        "a deposit of a later window takes the 4 out, with their reservation",
        () => put(5500, 3, 9000, "6000"),
        [3, 4, "5000", 0, T0 + 5400, 4],
      ],
      [
        "a peek: answered, nothing taken",
        () => take(5600, 0),
        [1, 3, 0, s, 0, "6000", T0 + 5500, 0, T0 + 9000],
      ],
    ];
    for (const [what, run, expected] of table) expect([what, await run()]).toEqual([what, expected]);
    // low (at most an eighth of the demand) and home had plenty at the last deposit: a take asks its
    // caller for a top-up to a ttl's demand (at most max, less the units held and the top-up's own),
    // and the next take does not (one at a time)
    expect(await put(5700, 20, 9000, "6000", 1000)).toEqual([20, 0, "", 3, 0, 0]);
    for (let i = 0; i < 16; i++) await take(5800, 1);
    expect(await take(5800, 1)).toEqual([1, 3, 16, s, 0, "6000", T0 + 5500, 0, T0 + 9000]);
    expect(await take(5800, 1)).toEqual([1, 2, 0, s, 0, "6000", T0 + 5500, 0, T0 + 9000]);
    expect(await redis.pttl(key)).toBeGreaterThan(14_000);
    // drain (dispose): every unit out, before its expiry, with its windows; then nothing left
    expect(await call(5900, "drain")).toEqual([0, 0, 2, "6000", T0 + 5500, 3]);
    expect(await call(5900, "drain")).toEqual([0, 0, 0, "6000", T0 + 5500, 3]);
    expect(await take(5900, 1)).toEqual([0, 0, 0, "", 0, 0]);
    // an earlier reservation's deposit beside units of a later one: they count from the earlier
    expect(await put(6000, 4, 9000, "6000")).toEqual([4, 0, "", 0, 0, 0]);
    expect(await put(6100, 2, 9000, "6000")).toEqual([6, 0, "", 0, 0, 0]);
    expect(await call(6200, "put", 1, T0 + 9000, "6000", s, 90, `${T0 + 10} 1`)).toEqual([7, 0, "", 0, 0, 0]);
    expect(await call(6300, "drain")).toEqual([0, 0, 7, "6000", T0 + 10, 1]);
    // a reservation is read only beside the windows it names (a script that kept none wrote w since)
    expect(await put(6400, 2, 9000, "6000")).toEqual([2, 0, "", 0, 0, 0]);
    await redis.hset(key, { w: "7000" });
    expect(await call(6500, "drain")).toEqual([0, 0, 2, "7000", 0, 0]);
    expect(await redis.pttl(key)).toBeGreaterThan(14_000);
  });
});

/** One isolate of region 0 with overrides on: a fixed window of `limit` a minute, a plan "pro" of 1000. */
const withOverrides = (limit: number, clock: () => number, name: string) =>
  new Limiter({
    redis: client(home.url),
    region: { redis: client(regions[0]!.bridge.url), pool: { max: POOL_MAX, ttl: "1s" } },
    rules: { r: fixedWindow({ limit, window: "1m" }) },
    plans: { pro: { r: { limit: 1000 } } },
    overrides: true,
    prefix: uniquePrefix(name),
    clock,
    timeout: Number.POSITIVE_INFINITY,
    breaker: false,
  });

describe("what home holds once the pools expire", () => {
  it("exactly what was admitted: every isolate takes back the expired pools it deposited into", async () => {
    const clock = manualClock(T0 + 1000);
    const prefix = uniquePrefix("home");
    const { limiters } = fleet(fixedWindow({ limit: 5000, window: "1m" }), clock, prefix);
    const work = background();
    let admitted = 0;
    for (let step = 0; step < 40; step++) {
      const decisions = await Promise.all(
        limiters.flat().map((limiter) => limiter.limit("warm", { waitUntil: work.waitUntil })),
      );
      admitted += decisions.filter((d) => d.allowed).length;
      await work.drain();
      clock.set(clock.now + 20);
    }
    expect(admitted).toBe(40 * 12);
    const homeRedis = client(home.url);
    const key = limiters[0]![0]!.keys("warm")[0]!;
    const held = Number(await homeRedis.get(key)) - admitted;
    expect(held).toBeGreaterThan(0);
    // past every pool's and lease's expiry: the next decision of each isolate, whatever its
    // identifier, gives back what it holds or deposited
    clock.set(clock.now + 1000);
    for (const limiter of limiters.flat()) await limiter.limit("other", { waitUntil: work.waitUntil });
    await work.drain();
    expect(Number(await homeRedis.get(key))).toBe(admitted);
    const regional = limiters.flat().reduce((sum, l) => sum + l.region!.stats.refunded, 0);
    expect(regional).toBeGreaterThan(0);
  });

  it("exactly what was admitted for an identifier whose override applies another plan: the pool's share goes back", async () => {
    // home applies the override's plan, so what it reserved for this plan's pool is not the pool's:
    // every miss gives it back, however often the pool asks
    const clock = manualClock(T0 + 1000);
    const limiter = withOverrides(10, clock, "elsewhere");
    await limiter.overrides.set("vip", { plan: "pro" });
    const work = background();
    for (let i = 0; i < 30; i++) {
      const d = await limiter.limit("vip", { waitUntil: work.waitUntil });
      expect(d).toMatchObject({ allowed: true, plan: "pro" });
      await work.drain();
      clock.set(clock.now + 10);
    }
    expect(Number(await client(home.url).get(limiter.keys("vip")[0]!))).toBe(30);
    expect(limiter.region!.stats).toMatchObject({ lost: 0, deposited: 0 });
    expect(limiter.region!.stats.refunded).toBeGreaterThan(0);
    await limiter.dispose();
  });

  it("an override set by this Limiter takes its region's pool of the identifier out: the next decision is home's", async () => {
    const clock = manualClock(T0 + 1000);
    const limiter = withOverrides(100, clock, "set-drains");
    const work = background();
    // 1: cold; 2: reserves for the pool; 3: the pool answers (and is topped up)
    const sources: string[] = [];
    for (let i = 0; i < 3; i++) {
      sources.push((await limiter.limit("u", { waitUntil: work.waitUntil })).source);
      await work.drain();
      clock.set(clock.now + 10);
    }
    expect(sources).toEqual(["redis", "redis", "region"]);
    expect(Number(await client(home.url).get(limiter.keys("u")[0]!))).toBeGreaterThan(3);
    await limiter.overrides.set("u", { plan: "pro" });
    // the pool's units went back home: home counts exactly the 3 admitted
    expect(Number(await client(home.url).get(limiter.keys("u")[0]!))).toBe(3);
    const next = await limiter.limit("u", { waitUntil: work.waitUntil });
    expect(next).toMatchObject({ source: "redis", plan: "pro", allowed: true });
    await work.drain();
    // what home reserved for this plan's pool under pro's rules went back too
    expect(Number(await client(home.url).get(limiter.keys("u")[0]!))).toBe(4);
    await limiter.dispose();
  });

  it("without waitUntil, a timer takes the leftovers back (Node)", async () => {
    const prefix = uniquePrefix("timer");
    let now = Date.now();
    const rules = { r: gcra({ limit: 1000, period: "1h" }) };
    const limiter = new Limiter({
      redis: client(home.url),
      region: { redis: client(regions[1]!.bridge.url), pool: { max: 50, ttl: "100ms" } },
      rules,
      prefix,
      clock: () => now,
    });
    const ideal = new Limiter({ redis: client(home.url), rules, prefix, clock: () => now });
    for (let i = 0; i < 10; i++) {
      await limiter.limit("t");
      await ideal.limit("ideal");
      // the deposit is on its way in the background
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    now += 200;
    await new Promise((resolve) => setTimeout(resolve, 300));
    const [a, b] = [await ideal.limit("t", { cost: 0 }), await ideal.limit("ideal", { cost: 0 })];
    expect(limiter.region!.stats.refunded).toBeGreaterThan(0);
    expect(a.remaining).toBe(b.remaining);
    await limiter.dispose();
  });
});

describe("a pool answers with one round trip to its region", () => {
  it("headers: home's remaining as of the last deposit plus the pool's units, exact in one isolate", async () => {
    const clock = manualClock();
    const limiter = new Limiter({
      redis: client(home.url),
      region: { redis: client(regions[0]!.bridge.url), pool: { max: 500, ttl: "5s" } },
      rules: { r: fixedWindow({ limit: 100, window: "1m" }) },
      prefix: uniquePrefix("hdr"),
      clock,
    });
    const work = background();
    const seen: Pick<Decision, "source" | "remaining">[] = [];
    for (let i = 0; i < 8; i++) {
      const d = await limiter.limit("id", { waitUntil: work.waitUntil });
      seen.push({ source: d.source, remaining: d.remaining });
      await work.drain();
      clock.set(clock.now + 10);
    }
    // 1: cold, no demand yet. 2: demand 1, reserves 1 for the pool. 3 on: the pool, topped up in the
    // background whenever a take leaves it low (3: 2 units, 4: 2, 6: 4).
    expect(seen).toEqual([
      { source: "redis", remaining: 99 },
      { source: "redis", remaining: 98 },
      { source: "region", remaining: 97 },
      { source: "region", remaining: 96 },
      { source: "region", remaining: 95 },
      { source: "region", remaining: 94 },
      { source: "region", remaining: 93 },
      { source: "region", remaining: 92 },
    ]);
    expect(limiter.region!.stats).toMatchObject({ hits: 6, deposited: 1 + 2 + 2 + 4 });
  });

  it("fills this isolate's lease from the pool; one isolate's headers stay exact", async () => {
    const clock = manualClock();
    const limiter = new Limiter({
      redis: client(home.url),
      region: { redis: client(regions[1]!.bridge.url), pool: { max: 100, ttl: "5s" } },
      rules: { r: fixedWindow({ limit: 1000, window: "1m" }) },
      lease: { max: 10, ttl: "1s" },
      prefix: uniquePrefix("fill"),
      clock,
    });
    const work = background();
    const sources = new Map<string, number>();
    for (let n = 1; n <= 200; n++) {
      const d = await limiter.limit("l", { waitUntil: work.waitUntil });
      sources.set(d.source, (sources.get(d.source) ?? 0) + 1);
      expect([d.allowed, d.remaining]).toEqual([true, 1000 - n]);
      await work.drain();
      clock.set(clock.now + 10);
    }
    if (process.env.REGION_REPORT) console.log(sources, limiter.region!.stats);
    // after the first few, home is asked only by background top-ups (the pool's, and the lease's when
    // the pool cannot cover it), and the pool fills the lease
    expect(sources.get("redis")).toBeLessThanOrEqual(4);
    expect(sources.get("lease")).toBeGreaterThan(180);
    expect(sources.get("region")).toBeGreaterThan(0);
  });

  it("settles a decision the pool answered at home, in the window its units were counted in", async () => {
    const clock = manualClock();
    const homeRedis = client(home.url);
    const limiter = new Limiter({
      redis: client(home.url),
      region: { redis: client(regions[2]!.bridge.url), pool: { max: 100, ttl: "5s" } },
      rules: { r: fixedWindow({ limit: 1000, window: "1m" }) },
      prefix: uniquePrefix("settle"),
      clock,
    });
    const work = background();
    let last: Decision | undefined;
    for (let i = 0; i < 6; i++) {
      last = await limiter.limit("s", { cost: 2, waitUntil: work.waitUntil });
      await work.drain();
      clock.set(clock.now + 10);
    }
    expect(last!.source).toBe("region");
    const key = limiter.keys("s")[0]!;
    const before = Number(await homeRedis.get(key));
    expect(await limiter.settle(last!, 0)).toEqual({ difference: -2, via: "redis" });
    expect(Number(await homeRedis.get(key))).toBe(before - 2);
    // a second settle of the same decision is refused
    await expect(limiter.settle(last!, 0)).rejects.toThrow(/already settled/);
  });

  it("a sliding log is never pooled: its decisions go home, and the region is not asked", async () => {
    const regional = client(regions[0]!.bridge.url);
    const prefix = uniquePrefix("log");
    const limiter = new Limiter({
      redis: client(home.url),
      region: { redis: regional, pool: { max: 50, ttl: "1s" } },
      rules: { r: slidingLog({ limit: 100, window: "1m" }) },
      prefix,
      clock: manualClock(),
    });
    const sources = new Set<string>();
    for (let i = 0; i < 10; i++) sources.add((await limiter.limit("l")).source);
    expect(sources).toEqual(new Set(["redis"]));
    expect(await regional.keys(`${prefix}:*`)).toEqual([]);
    expect(limiter.region!.stats).toMatchObject({ hits: 0, misses: 0 });
  });

  it("a reservation that brings nothing lets another isolate of the region ask at once", async () => {
    const prefix = uniquePrefix("free");
    const clock = manualClock();
    const regional = client(regions[2]!.bridge.url);
    const make = () =>
      new Limiter({
        redis: client(home.url),
        region: { redis: regional, pool: { max: 100, ttl: "5s" } },
        rules: { r: fixedWindow({ limit: 4, window: "1m" }) },
        prefix,
        clock,
      });
    const [a, b] = [make(), make()];
    const work = background();
    const step = async (limiter: Limiter) => {
      const d = await limiter.limit("f", { waitUntil: work.waitUntil });
      await work.drain();
      clock.set(clock.now + 10);
      return [d.source, d.remaining];
    };
    // cold; then 1 reserved for the pool (home: 3 used); the pool; then a reservation of up to 3 that
    // home's half rule makes 0 (1 left, the cost takes it)
    expect([await step(a), await step(a), await step(b), await step(a)]).toEqual([
      ["redis", 3],
      ["redis", 2],
      ["region", 1],
      ["redis", 0],
    ]);
    const key = `${prefix}:{=f}:pool.default`;
    expect(await regional.hget(key, "u")).toBe(0);
    // the pool no longer says someone is reserving: the next miss may ask for units again
    expect(await regional.hget(key, "a")).toBeNull();
  });

  it("every pool key has a TTL, of at most 3 pool ttls", async () => {
    const prefix = uniquePrefix("ttl");
    const clock = manualClock();
    const regional = client(regions[1]!.bridge.url);
    const limiter = new Limiter({
      redis: client(home.url),
      region: { redis: regional, pool: { max: 50, ttl: "2s" } },
      rules: { a: gcra({ limit: 1000, period: "1m" }), b: fixedWindow({ limit: 1000, window: "1m" }) },
      plans: { pro: { a: { limit: 2000 } } },
      prefix,
      clock,
    });
    const work = background();
    for (let i = 0; i < 30; i++) {
      for (const id of ["x", "y", "z"]) {
        await limiter.limit(`${id}${i % 3}`, { waitUntil: work.waitUntil, plan: i % 2 ? "pro" : undefined });
      }
      await work.drain();
      clock.set(clock.now + 20);
    }
    const keys = await regional.keys(`${prefix}:*`);
    expect(keys.length).toBe(9 * 2);
    for (const key of keys) {
      expect(key).toMatch(/:pool\.(default|pro)$/);
      const ttl = await regional.pttl(key);
      expect(ttl).toBeGreaterThan(0);
      expect(ttl).toBeLessThanOrEqual(6000);
    }
  });

  it("a pool of a fixed window ends with its window; its leftovers go back to that window at home", async () => {
    const prefix = uniquePrefix("win");
    const clock = manualClock(T0 + 9_000);
    const homeRedis = client(home.url);
    const make = () =>
      new Limiter({
        redis: client(home.url),
        region: { redis: client(regions[2]!.bridge.url), pool: { max: 40, ttl: "5s" } },
        rules: { r: fixedWindow({ limit: 1000, window: "10s" }) },
        prefix,
        clock,
      });
    const [a, b] = [make(), make()];
    const work = background();
    let admitted = 0;
    for (let i = 0; i < 20; i++) {
      if ((await a.limit("w", { waitUntil: work.waitUntil })).allowed) admitted += 1;
      await work.drain();
      clock.set(clock.now + 10);
    }
    const window = a.keys("w")[0]!;
    const before = Number(await homeRedis.get(window));
    const held = before - admitted;
    expect(held).toBeGreaterThan(0);
    // the window ends at T0 + 10 000: the pool's units are no longer handed out
    clock.set(T0 + 10_000);
    const next = await b.limit("w", { waitUntil: work.waitUntil });
    expect(next.source).toBe("redis");
    await work.drain();
    expect(b.region!.stats.refunded).toBe(held);
    expect(Number(await homeRedis.get(window))).toBe(admitted);
  });

  it("refunds restore what they should: a gcra state equals one that admitted the same units", async () => {
    const prefix = uniquePrefix("ref");
    const clock = manualClock();
    const rules = { r: gcra({ limit: 100, period: "100s" }) };
    const make = (i: number) =>
      new Limiter({
        redis: client(home.url),
        region: { redis: client(regions[i % 3]!.bridge.url), pool: { max: 30, ttl: "1s" } },
        rules,
        prefix,
        clock,
      });
    const ideal = new Limiter({ redis: client(home.url), rules, prefix, clock });
    const limiters = [make(0), make(0), make(1)];
    const work = background();
    for (let i = 0; i < 40; i++) {
      const d = await limiters[i % 3]!.limit("g", { waitUntil: work.waitUntil });
      expect(d.allowed).toBe(true);
      await ideal.limit("ideal");
      await work.drain();
      clock.set(clock.now + 10);
    }
    // past every pool's expiry (and two ttls, so the region's demand is 0 and nothing is reserved
    // again): the next decision in each region takes the leftovers out and refunds them
    clock.set(clock.now + 2000);
    await limiters[1]!.limit("g", { waitUntil: work.waitUntil });
    await limiters[2]!.limit("g", { waitUntil: work.waitUntil });
    await ideal.limit("ideal", { cost: 2 });
    await work.drain();
    const refunded = limiters.reduce((sum, l) => sum + l.region!.stats.refunded, 0);
    expect(refunded).toBeGreaterThan(0);
    const peek = await ideal.limit("g", { cost: 0 });
    const peekIdeal = await ideal.limit("ideal", { cost: 0 });
    expect(peek.remaining).toBe(peekIdeal.remaining);
    expect(peek.resetAt).toBe(peekIdeal.resetAt);
  });
});

describe("reset", () => {
  /** A Limiter with a pool in region 0 and one without (home's view), under `rules`, at T0. */
  function pooled(rules: Record<string, RuleConfig>) {
    const clock = manualClock();
    const prefix = uniquePrefix("reset");
    const options = { redis: client(home.url), rules, prefix, clock, denyCache: false as const };
    const limiter = new Limiter({
      ...options,
      region: { redis: client(regions[0]!.bridge.url), pool: { max: 20, ttl: "10s" } },
    });
    return { limiter, ideal: new Limiter(options), clock };
  }

  /**
   * Decides 3 for each at T0, then 1 at T0 + 1 ms, which reserves 3 for its pool (the region's
   * demand): 7 taken at home, 3 of them in the pool.
   */
  async function fill(limiter: Limiter, clock: { set(now: number): void }, subjects: Identity[]) {
    const work = background();
    clock.set(T0);
    for (const who of subjects) await limiter.limit(who, { cost: 3, waitUntil: work.waitUntil });
    clock.set(T0 + 1);
    for (const who of subjects) await limiter.limit(who, { waitUntil: work.waitUntil });
    await work.drain();
  }

  it("of an identifier deletes its pool: its next decision goes home, to a fresh state", async () => {
    const { limiter, ideal, clock } = pooled({ r: gcra({ limit: 60, period: "1m" }) });
    await fill(limiter, clock, ["a"]);
    expect((await ideal.limit("a", { cost: 0 })).remaining).toBe(53);
    expect((await limiter.limit("a")).source).toBe("region");
    await limiter.reset("a");
    expect((await ideal.limit("a", { cost: 0 })).remaining).toBe(60);
    const next = await limiter.limit("a");
    expect({ source: next.source, remaining: next.remaining }).toEqual({ source: "redis", remaining: 59 });
  });

  it("of one field drains the pools of every subject holding it: their other rules get the units back", async () => {
    const rules = {
      perUser: gcra({ limit: 60, period: "1m", by: "user" }),
      perOrg: fixedWindow({ limit: 1000, window: "1h", by: "org" }),
    };
    const { limiter, ideal, clock } = pooled(rules);
    const subjects = [
      { user: "u1", org: "acme" },
      { user: "u2", org: "acme" },
      // a tag holding the glob's own characters is matched as itself
      { user: "u3", org: "a*c[m]e?" },
    ];
    await fill(limiter, clock, subjects);
    const remaining = async (who: Record<string, string>) => {
      const d = await ideal.limit(who, { cost: 0 });
      return [d.rules.perUser!.remaining, d.rules.perOrg!.remaining];
    };
    expect(await remaining(subjects[0]!)).toEqual([53, 1000 - 14]);
    expect(await remaining(subjects[2]!)).toEqual([53, 1000 - 7]);
    await limiter.reset({ org: "acme" });
    // acme's state is gone; u1 and u2 have their 3 pooled units back; u3 (another org) keeps its pool
    expect(await remaining(subjects[0]!)).toEqual([56, 1000]);
    expect(await remaining(subjects[1]!)).toEqual([56, 1000]);
    expect(await remaining(subjects[2]!)).toEqual([53, 1000 - 7]);
    expect(limiter.region!.stats.refunded).toBe(6);
    expect((await limiter.limit(subjects[0]!)).source).toBe("redis");
    expect((await limiter.limit(subjects[2]!)).source).toBe("region");
  });

  it("waits for a deposit on its way: one reserved at home before the DEL never fills the pool after it", async () => {
    const hop = await startCutHop(regions[0]!.bridge.url);
    const clock = manualClock();
    const prefix = uniquePrefix("reset-deposit");
    const rules = { r: gcra({ limit: 60, period: "1m" }) };
    const options = { redis: client(home.url), rules, prefix, clock, denyCache: false as const };
    const limiter = new Limiter({
      ...options,
      region: { redis: client(hop.url), pool: { max: 20, ttl: "10s" } },
    });
    const ideal = new Limiter(options);
    try {
      const work = background();
      await limiter.limit("a", { cost: 3, waitUntil: work.waitUntil });
      await work.drain();
      // the next miss reserves 3 for the pool at home (7 taken); its deposit is held on its way
      hop.holdNext = '"put"';
      clock.set(T0 + 1);
      expect((await limiter.limit("a", { waitUntil: work.waitUntil })).source).toBe("redis");
      await hop.held;
      expect((await ideal.limit("a", { cost: 0 })).remaining).toBe(53);
      const resetting = limiter.reset("a");
      // the reset's DEL in the region, had it not waited for the deposit, is let through first
      await Promise.race([resetting, new Promise((resolve) => setTimeout(resolve, 200))]);
      hop.release();
      await resetting;
      await work.drain();
      // the deposit landed before the pools were deleted: its units went with them, and the next
      // decision goes home, to the fresh state (not to a pool of 3 units the DEL erased)
      expect((await ideal.limit("a", { cost: 0 })).remaining).toBe(60);
      const next = await limiter.limit("a");
      expect({ source: next.source, remaining: next.remaining }).toEqual({ source: "redis", remaining: 59 });
      expect(hop.seen.slice(-3, -1)).toEqual(["EVALSHA", "DEL"]);
    } finally {
      await limiter.dispose();
      await hop.close();
    }
  });
});

describe("the region option", () => {
  const base = {
    redis: { url: "http://127.0.0.1:1", token: "t" },
    rules: { r: gcra({ limit: 1, period: "1s" }) },
  };
  const cases: [unknown, string][] = [
    [
      { pool: { max: 10, ttl: "1s" } },
      "region.redis: give the region's database: { url, token } or a client",
    ],
    [{ redis: { url: "nope", token: "t" }, pool: { max: 10, ttl: "1s" } }, "region.redis.url: "],
    [
      { redis: base.redis, pool: { max: 0, ttl: "1s" } },
      "region.pool.max: must be a whole number of units from 1 to 100000, got 0",
    ],
    [{ redis: base.redis, pool: { max: 10, ttl: "soon" } }, "region.pool.ttl: "],
    [{ redis: base.redis }, "region.pool: expected { max, ttl }"],
    [
      { redis: base.redis, pool: { max: 10, ttl: "1s" }, size: 3 },
      "region.size: not a region option; it takes redis, pool",
    ],
    ["eu", "region: expected { redis, pool: { max, ttl } }"],
  ];
  for (const [region, message] of cases) {
    it(`refuses ${JSON.stringify(region)} naming the field`, () => {
      expect(() => new Limiter({ ...base, region: region as never })).toThrow(message);
    });
  }
});

describe("failures", () => {
  it("home stalled: the region answers from its pool, without waiting, until it runs out; then onError", async () => {
    const hop = await Hop.start(home.url);
    const clock = manualClock();
    const limiter = new Limiter({
      redis: client(hop.url),
      region: { redis: client(regions[0]!.bridge.url), pool: { max: 10, ttl: "10s" } },
      rules: { r: gcra({ limit: 1000, period: "1m" }) },
      prefix: uniquePrefix("stall"),
      clock,
      timeout: 300,
    });
    const work = background();
    try {
      for (let i = 0; i < 12; i++) {
        await limiter.limit("s", { waitUntil: work.waitUntil });
        await work.drain();
        clock.set(clock.now + 10);
      }
      const held = Number(
        await client(regions[0]!.bridge.url).hget(
          limiter.keys("s")[0]!.replace(/:r:gcra$/, ":pool.default"),
          "u",
        ),
      );
      expect(held).toBeGreaterThan(0);
      hop.mode = "stall";
      const sources: string[] = [];
      for (let i = 0; i < held; i++) {
        const started = performance.now();
        const d = await limiter.limit("s", { waitUntil: work.waitUntil });
        sources.push(d.source);
        expect(d.allowed).toBe(true);
        expect(performance.now() - started).toBeLessThan(250);
      }
      expect(sources).toEqual(new Array(held).fill("region"));
      const after = await limiter.limit("s", { waitUntil: work.waitUntil });
      expect(after.source).toBe("error");
      expect((after.error as RedisCallError).kind).toBe("timeout");
    } finally {
      hop.mode = "pass";
      hop.dropAll();
      await work.drain();
      await hop.close();
    }
  }, 30_000);

  it("region down: decisions go home directly, and once the region's breaker opens, without trying it", async () => {
    const redis = await RedisProcess.start();
    const bridge = await startBridge({ redisUrl: redis.url, port: 0, token });
    const regional = client(bridge.url);
    const clock = manualClock();
    const limiter = new Limiter({
      redis: client(home.url),
      region: { redis: regional, pool: { max: 10, ttl: "10s" } },
      rules: { r: fixedWindow({ limit: 50, window: "1m" }) },
      prefix: uniquePrefix("down"),
      clock,
      timeout: 2000,
      denyCache: false,
    });
    const work = background();
    try {
      for (let i = 0; i < 10; i++) {
        await limiter.limit("d", { waitUntil: work.waitUntil });
        await work.drain();
      }
      await redis.kill();
      const sources: string[] = [];
      let allowed = 0;
      for (let i = 0; i < 60; i++) {
        const d = await limiter.limit("d", { waitUntil: work.waitUntil });
        sources.push(d.source);
        if (d.allowed) allowed += 1;
        await work.drain();
      }
      expect(new Set(sources)).toEqual(new Set(["redis"]));
      // 50 in the window: 10 before, and what the dead pool held is lost (consumed at home, never more)
      const held = limiter.region!.stats.deposited - limiter.region!.stats.hits;
      expect(allowed).toBe(50 - 10 - held);
      expect(limiter.region!.stats.errors).toBe(60);
      expect(transportFor(regional).stats.refused).toBeGreaterThanOrEqual(50);
    } finally {
      await bridge.close();
      await redis.stop();
    }
  }, 30_000);
});
