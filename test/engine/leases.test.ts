// Leases against a real redis-server behind the REST bridge, with hand-moved clocks. Several Limiter
// instances, each on its own client, stand for several isolates.
import { Redis } from "@upstash/redis";
import { describe, expect, inject, it, vi } from "vitest";
import type { Decision } from "../../src/engine/types.js";
import {
  fixedWindow,
  gcra,
  Limiter,
  type RuleConfig,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from "../../src/index.js";
import { failOnUnhandledRejections, ownBridge, privateRedis } from "../own-bridge.js";
import { manualClock, T0, uniquePrefix } from "../support.js";

failOnUnhandledRejections();
// A bridge of this file's own, so that its request count is this file's alone.
const bridge = ownBridge();

/** A client as a user builds it: one per isolate. */
const client = () => new Redis({ url: bridge.url, token: inject("bridgeToken"), enableTelemetry: false });

type Options = Partial<ConstructorParameters<typeof Limiter>[0]>;

/** `n` Limiters (isolates) sharing one prefix and one hand-moved clock. */
function isolates(n: number, rules: Record<string, RuleConfig>, options: Options = {}) {
  const clock = manualClock();
  const prefix = uniquePrefix("lease");
  const limiters = Array.from(
    { length: n },
    () =>
      new Limiter({
        redis: client(),
        prefix,
        rules,
        clock,
        denyCache: false,
        lease: { max: 50, ttl: "1s" },
        ...options,
      }),
  );
  // What Redis holds, seen by a Limiter without a lease (a peek consumes nothing).
  const plain = new Limiter({ redis: client(), prefix, rules, clock, denyCache: false });
  return { limiters, plain, clock, prefix };
}

/** One decision, then its background work (top-ups, refunds) awaited, as a runtime does with waitUntil. */
async function settled(limiter: Limiter, id: string, cost = 1): Promise<Decision> {
  const background: Promise<unknown>[] = [];
  const decision = await limiter.limit(id, { cost, waitUntil: (p) => void background.push(p) });
  await Promise.all(background);
  return decision;
}

async function everyKeyHasATtl(prefix: string): Promise<number> {
  const redis = client();
  const keys = await redis.keys(`${prefix}:*`);
  for (const key of keys) expect([key, await redis.pttl(key)]).toEqual([key, expect.any(Number)]);
  const ttls = await Promise.all(keys.map((key) => redis.pttl(key)));
  expect(ttls.filter((ttl) => ttl <= 0)).toEqual([]);
  return keys.length;
}

describe("the lease option", () => {
  const rules = { r: gcra({ limit: 10, period: "1s" }) };
  it.each([
    [{ max: 0, ttl: "1s" }, "lease.max: must be a whole number of units from 1 to 100000, got 0"],
    [{ max: 1.5, ttl: "1s" }, "lease.max: must be a whole number of units from 1 to 100000, got 1.5"],
    [{ max: 10, ttl: "soon" }, 'lease.ttl: "soon" is not a duration'],
    [{ max: 10, ttl: 0 }, "lease.ttl: must be a positive whole number of milliseconds, got 0"],
    [{ max: 10, ttl: "1s", size: 3 }, "lease.size: not a lease option; it takes max, ttl"],
    [{ max: 10 }, "lease.ttl: expected a duration"],
    ["50", 'lease: expected { max, ttl }, e.g. { max: 50, ttl: "1s" }, got "50"'],
  ])("refuses %j", (lease, message) => {
    expect(() => new Limiter({ redis: client(), rules, lease: lease as never })).toThrow(message);
  });

  it("is off by default: every decision goes to Redis", async () => {
    const { plain } = isolates(0, rules);
    const sources = new Set<string>();
    for (let i = 0; i < 5; i++) sources.add((await plain.limit("hot")).source);
    expect([...sources]).toEqual(["redis"]);
  });

  it("refuses a waitUntil that is not a function", () => {
    const { limiters } = isolates(1, rules);
    expect(() => limiters[0]!.limit("a", { waitUntil: 5 as never })).toThrow(
      "waitUntil: expected a function such as ctx.waitUntil, got 5",
    );
  });

  it("refuses a waitUntil that is not a function before a cached denial answers", async () => {
    const { limiters } = isolates(
      1,
      { r: fixedWindow({ limit: 1, window: "1h" }) },
      { denyCache: { maxEntries: 100 } },
    );
    const limiter = limiters[0]!;
    expect((await limiter.limit("d")).allowed).toBe(true);
    expect(await limiter.limit("d")).toMatchObject({ allowed: false, source: "redis" });
    expect(await limiter.limit("d")).toMatchObject({ allowed: false, source: "cache" });
    expect(() => limiter.limit("d", { waitUntil: 5 as never })).toThrow(
      "waitUntil: expected a function such as ctx.waitUntil, got 5",
    );
  });
});

describe("answering from a lease", () => {
  it("starts at 0 for an identifier seen once, grows with the rate, and answers hot decisions locally", async () => {
    const { limiters, plain, clock } = isolates(1, { r: fixedWindow({ limit: 100_000, window: "1h" }) });
    const [limiter] = limiters;
    const sources: string[] = [];
    for (let i = 0; i < 6; i++) {
      sources.push((await settled(limiter!, "hot")).source);
      clock.set(clock.now + 1);
    }
    // 1st: seen once, no lease. 2nd: 1 unit seen over the last ttl, so 1 reserved (answers the 3rd).
    // 4th: 3 seen, 3 reserved (5th, 6th, 7th).
    expect(sources).toEqual(["redis", "redis", "lease", "redis", "lease", "lease"]);
    // The 6th left 1 unit, a top-up's threshold at this rate: one decision of cost 1 reserved 3 more
    // (5 seen over the last ttl, 1 held). Redis holds the 6 used, the 1 left and the 4 of the top-up.
    expect((await plain.limit("hot", { cost: 0 })).remaining).toBe(100_000 - 11);
  });

  it("answers 1,000 hot decisions with 33 HTTP requests (max 50, 1 decision per ms, ttl 1s)", async () => {
    const { limiters } = isolates(1, { r: fixedWindow({ limit: 100_000, window: "1h" }) });
    const [limiter] = limiters;
    await limiter!.limit("warm-up"); // the script load, if this Redis has not seen it yet
    const clock = limiter!.clock as ReturnType<typeof manualClock>;
    bridge.stats.reset();
    const sources: Record<string, number> = {};
    for (let i = 0; i < 1000; i++) {
      const d = await settled(limiter!, "hot");
      sources[d.source] = (sources[d.source] ?? 0) + 1;
      clock.set(clock.now + 1);
    }
    // Redis decides the 1st, 2nd (reserving 1) and 4th (reserving 3); from then on the lease is topped
    // up in the background whenever it is down to its threshold (at most 12 units), 30 times in all.
    expect(sources).toEqual({ redis: 3, lease: 997 });
    expect(bridge.stats.requests).toBe(33);
  });

  it("reports what Redis said minus what this isolate used since: the same headers as without a lease", async () => {
    for (const rule of [
      fixedWindow({ limit: 40, window: "1m" }),
      gcra({ limit: 40, period: "1m" }),
      tokenBucket({ capacity: 40, refillRate: 1, interval: "1m" }),
      slidingWindow({ limit: 40, window: "1m" }),
    ]) {
      const { limiters, plain } = isolates(1, { r: rule });
      const seen: [boolean, number, number][] = [];
      const expected: [boolean, number, number][] = [];
      const sources = new Set<string>();
      for (let i = 0; i < 45; i++) {
        const d = await limiters[0]!.limit("a");
        const p = await plain.limit("b");
        sources.add(d.source);
        seen.push([d.allowed, d.remaining, d.retryAfter]);
        expected.push([p.allowed, p.remaining, p.retryAfter]);
      }
      expect(seen).toEqual(expected);
      expect(sources).toEqual(new Set(["redis", "lease"]));
    }
  });

  it("takes cost units from the lease, and goes to Redis when the lease holds fewer", async () => {
    const { limiters, plain, clock } = isolates(1, { r: fixedWindow({ limit: 1000, window: "1h" }) });
    const [limiter] = limiters;
    for (let i = 0; i < 10; i++) {
      await settled(limiter!, "c", 5);
      clock.set(clock.now + 10);
    }
    // Redis decided the 1st, 2nd (reserving 5), 4th (15 seen: reserving 15) and 8th (35 seen:
    // reserving 35); the 9th and 10th came from that lease, which still holds 25.
    const before = (await plain.limit("c", { cost: 0 })).remaining;
    expect(before).toBe(1000 - 50 - 25);
    // 20 from the lease leave 5, under a top-up's threshold: one decision of cost 1 reserves 44 more
    const d = await settled(limiter!, "c", 20);
    expect(d.source).toBe("lease");
    expect((await plain.limit("c", { cost: 0 })).remaining).toBe(before - 45);
    const e = await settled(limiter!, "c", 60); // the lease holds 5 + 45 = 50: Redis decides
    expect(e.source).toBe("redis");
    expect((await plain.limit("c", { cost: 0 })).remaining).toBe(before - 45 - 60);
    const peek = await settled(limiter!, "c", 0); // a peek with units held: answered here
    expect([peek.source, peek.allowed]).toEqual(["lease", true]);
  });

  it("never leases under a sliding log rule", async () => {
    const { limiters } = isolates(1, { r: slidingLog({ limit: 100, window: "1m" }) });
    const sources = new Set<string>();
    for (let i = 0; i < 20; i++) sources.add((await limiters[0]!.limit("log")).source);
    expect([...sources]).toEqual(["redis"]);
  });

  it("never awaits: a lease answer is settled in the same tick", async () => {
    const { limiters, clock } = isolates(1, { r: fixedWindow({ limit: 1000, window: "1h" }) });
    for (let i = 0; i < 4; i++) {
      await limiters[0]!.limit("sync");
      clock.set(clock.now + 1);
    }
    let settled: Decision | undefined;
    limiters[0]!.limit("sync").then((d) => {
      settled = d;
    });
    await Promise.resolve();
    expect(settled?.source).toBe("lease");
  });
});

describe("reserving", () => {
  it("reserves under every rule at once, never more than half of what the tightest rule has left", async () => {
    const { limiters, plain, clock } = isolates(1, {
      wide: fixedWindow({ limit: 1000, window: "1h" }),
      tight: fixedWindow({ limit: 9, window: "1h" }),
    });
    const [limiter] = limiters;
    const state = async () => {
      const peek = await plain.limit("m", { cost: 0 });
      return [peek.rules.wide!.remaining, peek.rules.tight!.remaining];
    };
    for (let i = 0; i < 2; i++) {
      await limiter!.limit("m");
      clock.set(clock.now + 1);
    }
    // 2nd decision: 1 seen, 1 reserved (tight had 7 left after it: half is 3)
    expect(await state()).toEqual([1000 - 3, 9 - 3]);
    for (let i = 0; i < 2; i++) {
      await limiter!.limit("m");
      clock.set(clock.now + 1);
    }
    // 3rd from the lease; 4th to Redis with 3 seen, but tight had 5 left after it: 2 reserved, under both
    expect(await state()).toEqual([1000 - 6, 9 - 6]);
  });

  it("the last units of a quota are decided in Redis", async () => {
    const { limiters, clock } = isolates(1, { r: fixedWindow({ limit: 100, window: "1h" }) });
    const sources: string[] = [];
    for (let i = 0; i < 110; i++) {
      const d = await limiters[0]!.limit("end");
      if (d.allowed) sources.push(d.source);
      clock.set(clock.now + 1);
    }
    expect(sources.length).toBe(100);
    // with 1 or 2 left nothing more is reserved: the last two admissions came from Redis
    expect(sources.slice(-2)).toEqual(["redis", "redis"]);
  });
});

describe("refunds", () => {
  const exact: [string, RuleConfig][] = [
    ["gcra", gcra({ limit: 30, period: "1m" })],
    ["tokenBucket", tokenBucket({ capacity: 30, refillRate: 1, interval: "1m" })],
    ["fixedWindow", fixedWindow({ limit: 30, window: "1m" })],
    ["slidingWindow", slidingWindow({ limit: 30, window: "1m" })],
  ];

  it.each(exact)(
    "%s: dispose gives back exactly the unused units, and every key keeps a TTL",
    async (_, rule) => {
      const { limiters, plain, clock, prefix } = isolates(1, { r: rule });
      const [limiter] = limiters;
      for (let i = 0; i < 4; i++) {
        await limiter!.limit("u");
        clock.set(clock.now + 1);
      }
      // 4 used; the 4th reserved 3, none used yet
      expect((await plain.limit("u", { cost: 0 })).remaining).toBe(30 - 7);
      await limiter!.dispose();
      expect((await plain.limit("u", { cost: 0 })).remaining).toBe(30 - 4);
      // the state (GCRA's also the ledger of what its refund gave back)
      expect(await everyKeyHasATtl(prefix)).toBe(
        rule.algorithm === "gcra" || rule.algorithm === "tokenBucket" ? 2 : 1,
      );
      // Symbol.asyncDispose is dispose() (for `await using`): nothing left to give back
      await (limiter as unknown as Record<symbol, () => Promise<void>>)[Symbol.asyncDispose]!();
      expect((await plain.limit("u", { cost: 0 })).remaining).toBe(30 - 4);
      // disposed: decides in Redis from now on, with no new lease
      expect((await limiter!.limit("u")).source).toBe("redis");
      expect((await limiter!.limit("u")).source).toBe("redis");
    },
  );

  it("a reservation that comes back after dispose() is given back at once", async () => {
    const { limiters, plain, clock } = isolates(1, { r: fixedWindow({ limit: 1000, window: "1h" }) });
    const [limiter] = limiters;
    for (let i = 0; i < 3; i++) {
      await limiter!.limit("late");
      clock.set(clock.now + 1);
    }
    const fourth = limiter!.limit("late"); // reserves 3, on its way
    await limiter!.dispose();
    expect((await fourth).allowed).toBe(true);
    await vi.waitFor(async () => expect((await plain.limit("late", { cost: 0 })).remaining).toBe(1000 - 4));
  });

  it("an expired lease is refunded by the next call, through its waitUntil", async () => {
    const { limiters, plain, clock } = isolates(1, { r: gcra({ limit: 30, period: "1h" }) });
    const [limiter] = limiters;
    for (let i = 0; i < 4; i++) {
      await limiter!.limit("x");
      clock.set(clock.now + 1);
    }
    expect((await plain.limit("x", { cost: 0 })).remaining).toBe(30 - 7);
    clock.set(clock.now + 1000);
    const background: Promise<unknown>[] = [];
    const d = await limiter!.limit("other", { waitUntil: (p) => void background.push(p) });
    expect(d.source).toBe("redis");
    expect(background.length).toBe(1);
    await Promise.all(background);
    expect((await plain.limit("x", { cost: 0 })).remaining).toBe(30 - 4);
  });

  it("with no waitUntil, a timer gives expired leases back", async () => {
    const { limiters, plain, clock } = isolates(
      1,
      { r: tokenBucket({ capacity: 30, refillRate: 1, interval: "1h" }) },
      { lease: { max: 50, ttl: 20 } },
    );
    const [limiter] = limiters;
    for (let i = 0; i < 4; i++) await limiter!.limit("t");
    expect((await plain.limit("t", { cost: 0 })).remaining).toBe(30 - 7);
    clock.set(clock.now + 20);
    await vi.waitFor(async () => expect((await plain.limit("t", { cost: 0 })).remaining).toBe(30 - 4));
  });

  it("a denial drops the lease and gives its units back", async () => {
    const { limiters, plain, clock } = isolates(1, { r: fixedWindow({ limit: 20, window: "1h" }) });
    const [limiter] = limiters;
    for (let i = 0; i < 4; i++) {
      await limiter!.limit("d");
      clock.set(clock.now + 1);
    }
    expect((await plain.limit("d", { cost: 0 })).remaining).toBe(20 - 7);
    const background: Promise<unknown>[] = [];
    const denied = await limiter!.limit("d", { cost: 20, waitUntil: (p) => void background.push(p) });
    expect([denied.allowed, denied.source]).toEqual([false, "redis"]);
    await Promise.all(background);
    expect((await plain.limit("d", { cost: 0 })).remaining).toBe(20 - 4);
    expect((await limiter!.limit("d")).source).toBe("redis");
  });

  it("reset drops the lease: the next decision sees the full limit", async () => {
    const { limiters, plain, clock } = isolates(1, { r: fixedWindow({ limit: 20, window: "1h" }) });
    const [limiter] = limiters;
    for (let i = 0; i < 4; i++) {
      await limiter!.limit("r");
      clock.set(clock.now + 1);
    }
    await limiter!.reset("r");
    const d = await limiter!.limit("r");
    expect([d.source, d.remaining]).toEqual(["redis", 19]);
    // the lease it started is given back when it ends: Redis counts the one decision since the reset
    await limiter!.dispose();
    expect((await plain.limit("r", { cost: 0 })).remaining).toBe(19);
  });

  it("reset while a top-up is on its way: the top-up lands first, and its units go with the reset", async () => {
    const { limiters, plain, clock } = isolates(1, { r: fixedWindow({ limit: 100_000, window: "1h" }) });
    const [limiter] = limiters;
    for (let i = 0; i < 5; i++) {
      await settled(limiter!, "t");
      clock.set(clock.now + 1);
    }
    // the 6th, from the lease, leaves 1 unit: a top-up of 4 (its own unit and 3 reserved) goes out
    const background: Promise<unknown>[] = [];
    const sixth = await limiter!.limit("t", { waitUntil: (p) => void background.push(p) });
    expect([sixth.source, background.length]).toEqual(["lease", 1]);
    await limiter!.reset("t");
    // the reset waited for the top-up before its DEL: Redis counts nothing
    expect((await plain.limit("t", { cost: 0 })).remaining).toBe(100_000);
    await Promise.all(background);
    // the next decision is home's, on fresh state (a lease holding the top-up's units would answer it)
    const next = await settled(limiter!, "t");
    expect([next.source, next.remaining]).toEqual(["redis", 100_000 - 1]);
    await limiter!.dispose();
    expect((await plain.limit("t", { cost: 0 })).remaining).toBe(100_000 - 1);
  });

  it("a fixed-window lease ends with its window, and nothing is given back to the next window", async () => {
    const { limiters, plain, clock } = isolates(1, { r: fixedWindow({ limit: 30, window: "1m" }) });
    const [limiter] = limiters;
    clock.set(T0 + 60_000 - 10); // 10 ms before the window ends
    for (let i = 0; i < 4; i++) {
      await limiter!.limit("w");
      clock.set(clock.now + 1);
    }
    clock.set(T0 + 60_000);
    const d = await limiter!.limit("w");
    expect([d.source, d.remaining]).toEqual(["redis", 29]);
    await limiter!.dispose();
    expect((await plain.limit("w", { cost: 0 })).remaining).toBe(29);
  });
});

describe("several isolates", () => {
  const exact: [string, RuleConfig][] = [
    ["gcra", gcra({ limit: 200, period: "1h" })],
    ["tokenBucket", tokenBucket({ capacity: 200, refillRate: 1, interval: "1h" })],
    ["fixedWindow", fixedWindow({ limit: 200, window: "1h" })],
    ["slidingLog", slidingLog({ limit: 200, window: "1h" })],
  ];

  it.each(exact)(
    "%s: 4 isolates never admit more than the limit; after the refunds the rest is admitted, exactly the limit",
    async (_, rule) => {
      const { limiters, plain, clock, prefix } = isolates(4, { r: rule });
      let admitted = 0;
      let fromLeases = 0;
      for (let round = 0; round < 150; round++) {
        const decisions = await Promise.all(limiters.map((limiter) => limiter.limit("shared")));
        for (const d of decisions) {
          if (d.allowed) admitted += 1;
          if (d.source === "lease") fromLeases += 1;
        }
        clock.set(clock.now + 1);
      }
      expect(admitted).toBeLessThanOrEqual(200);
      if (rule.algorithm !== "slidingLog") expect(fromLeases).toBeGreaterThan(0);
      await Promise.all(limiters.map((limiter) => limiter.dispose()));
      while ((await plain.limit("shared")).allowed) admitted += 1;
      expect(admitted).toBe(200);
      // the state, and for gcra and the token bucket the ledger of what the leases' refunds gave back
      // (topped up while home had twice what a top-up takes, they held units when disposed)
      const ledger = rule.algorithm === "gcra" || rule.algorithm === "tokenBucket" ? 1 : 0;
      expect(await everyKeyHasATtl(prefix)).toBe(1 + ledger);
    },
  );
});

describe("a decision that reserves nothing", () => {
  // INFO commandstats counts every command a script runs, server-wide: a Redis of this file's own.
  const own = privateRedis({ token: "lease-plain" });

  /** The commands one decision made Redis run, by name (EVALSHA included). */
  async function commands(limiter: Limiter, id: string): Promise<string> {
    await own.conn.call("CONFIG", "RESETSTAT");
    await limiter.limit(id);
    const info = String(await own.conn.call("INFO", "commandstats"));
    return [...info.matchAll(/^cmdstat_([a-z|]+):calls=(\d+)/gm)]
      .filter(([, name]) => name !== "info" && !name!.startsWith("config"))
      .map(([, name, calls]) => `${name!.toUpperCase()}${calls === "1" ? "" : `×${calls}`}`)
      .sort()
      .join(" ");
  }

  it("takes the one-rule script, as without a lease (a fixed window's INCR, not the limiter script's GET and SET)", async () => {
    const rules = { r: fixedWindow({ limit: 100, window: "1h" }) };
    const prefix = uniquePrefix("lease-plain");
    const make = (lease: Options["lease"]) =>
      new Limiter({ redis: own.redis, prefix, rules, clock: manualClock(), denyCache: false, lease });
    const plain = make(false);
    const leased = make({ max: 50, ttl: "1s" });
    // warm the scripts up: a first EVALSHA may be answered NOSCRIPT and sent again
    await plain.limit("warm-up");
    await leased.limit("warm-up");
    // a cold identifier wants no units: its first decision is a plain one, in both
    expect(await commands(plain, "cold-a")).toBe("EVALSHA INCR PEXPIRE");
    expect(await commands(leased, "cold-b")).toBe("EVALSHA INCR PEXPIRE");
    await leased.dispose();
  });
});
