// The Lock against a real redis-server behind the REST bridge: reentrancy, owners, leases judged by an
// injected clock, fencing tokens across expiry, renewal, and mutual exclusion under 200 contenders.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Redis } from "@upstash/redis";
import { afterAll, afterEach, beforeAll, describe, expect, inject, it, vi } from "vitest";
import { type Bridge, startBridge } from "../../src/bridge/index.js";
import { type RedisConnection, RedisError, type Reply } from "../../src/bridge/resp.js";
import { Concurrency } from "../../src/engine/concurrency.js";
import { FENCE_MARGIN_MS, Lock, LockLostError, LockUnavailableError } from "../../src/engine/lock.js";
import { type Cluster, startCluster } from "../cluster.js";
import { startCutHop } from "../cut-hop.js";
import { BridgeProcess } from "../faults/support.js";
import { sharedRedis } from "../own-bridge.js";
import { bridgeRedis, manualClock, T0, uniquePrefix } from "../support.js";

const shared = sharedRedis();
let direct: RedisConnection;
beforeAll(() => {
  direct = shared.conn;
});

function lockWith(options: Partial<ConstructorParameters<typeof Lock>[0]> = {}) {
  const clock = manualClock();
  const lock = new Lock({
    redis: bridgeRedis(),
    prefix: uniquePrefix("lock"),
    ttl: 1000,
    clock,
    ...options,
  });
  return { lock, clock };
}

/** PTTL of every key under `prefix`, by key. */
async function ttls(prefix: string): Promise<Record<string, number>> {
  const keys = (await direct.call("KEYS", `${prefix}:*`)) as Buffer[];
  const out: Record<string, number> = {};
  for (const key of keys) out[key.toString()] = Number(await direct.call("PTTL", key));
  return out;
}

describe("acquire and release", () => {
  it("re-enters for the same owner, refuses another, and frees the lock at depth 0", async () => {
    const { lock } = lockWith();
    const a = { owner: "alice" };
    expect(await lock.acquire("job", a)).toEqual({
      acquired: true,
      owner: "alice",
      fence: T0,
      count: 1,
      expiresAt: T0 + 1000,
    });
    expect(await lock.acquire("job", a)).toMatchObject({ acquired: true, fence: T0, count: 2 });
    expect(await lock.acquire("job", a)).toMatchObject({ acquired: true, fence: T0, count: 3 });
    expect(await lock.acquire("job", { owner: "bob" })).toEqual({
      acquired: false,
      owner: "bob",
      fence: 0,
      count: 0,
      expiresAt: T0 + 1000,
    });
    // a wrong owner is told no, and the holder keeps every level
    expect(await lock.release("job", { owner: "bob" })).toEqual({ released: false, count: 0 });
    expect(await lock.release("job", a)).toEqual({ released: true, count: 2 });
    expect(await lock.release("job", a)).toEqual({ released: true, count: 1 });
    expect(await lock.acquire("job", { owner: "bob" })).toMatchObject({ acquired: false });
    expect(await lock.release("job", a)).toEqual({ released: true, count: 0 });
    expect(await lock.release("job", a)).toEqual({ released: false, count: 0 });
    // free: bob takes it, with a larger fence although the clock has not moved
    expect(await lock.acquire("job", { owner: "bob" })).toEqual({
      acquired: true,
      owner: "bob",
      fence: T0 + 1,
      count: 1,
      expiresAt: T0 + 1000,
    });
  });

  it("counts reentrancy 50 levels deep", async () => {
    const { lock } = lockWith();
    for (let depth = 1; depth <= 50; depth++) {
      expect((await lock.acquire("deep", { owner: "o" })).count).toBe(depth);
    }
    for (let depth = 49; depth >= 0; depth--) {
      expect(await lock.release("deep", { owner: "o" })).toEqual({ released: true, count: depth });
    }
    expect((await lock.acquire("deep", { owner: "p" })).acquired).toBe(true);
  });

  it("generates an owner when none is given", async () => {
    const { lock } = lockWith();
    const first = await lock.acquire("anon");
    expect(first.acquired).toBe(true);
    expect(first.owner).toMatch(/^[0-9a-f-]{36}$/);
    expect((await lock.acquire("anon")).acquired).toBe(false);
    expect(await lock.release("anon", { owner: first.owner })).toEqual({ released: true, count: 0 });
  });

  it("keeps locks of different names apart, whatever the names", async () => {
    const { lock } = lockWith();
    const names = [" ", "a", "{a}", "}{", "a:b", "%7b", "\u{1F600}", "x".repeat(10_000), "x".repeat(10_001)];
    for (const name of names) expect((await lock.acquire(name, { owner: "o" })).acquired).toBe(true);
    for (const name of names) expect((await lock.acquire(name, { owner: "p" })).acquired).toBe(false);
    const keys = new Set(names.map((name) => lock.key(name)));
    expect(keys.size).toBe(names.length);
    for (const key of keys) {
      expect(key.length).toBeLessThan(200);
      expect(key.match(/[{}]/g)).toEqual(["{", "}"]); // one hash tag, nothing else that could move it
    }
  });

  it("tells owners apart however long they are (long ones are hashed)", async () => {
    const { lock } = lockWith();
    const long = "o".repeat(10_000);
    expect((await lock.acquire("n", { owner: long })).acquired).toBe(true);
    expect((await lock.acquire("n", { owner: `${long}x` })).acquired).toBe(false);
    expect((await lock.acquire("n", { owner: long })).count).toBe(2);
  });
});

describe("a lost answer", () => {
  it("a retry of the same acquire after its answer was lost is not counted as a second re-entry", async () => {
    const hop = await startCutHop(inject("bridgeUrl"));
    try {
      const lock = new Lock({
        redis: bridgeRedis(hop.url),
        prefix: uniquePrefix("lost"),
        ttl: "10s",
        clock: manualClock(),
      });
      // Redis must know the script already, or the cut request would only have met NOSCRIPT.
      expect((await lock.acquire("warm-up")).acquired).toBe(true);
      hop.cutNext = '"acquire"';
      const hold = await lock.acquire("l", { owner: "o", wait: "5s" });
      expect(hop.cuts).toBe(1);
      expect(hold).toMatchObject({ acquired: true, fence: T0, count: 1 });
      expect(await lock.release("l", { owner: "o" })).toEqual({ released: true, count: 0 });
      expect((await lock.acquire("l", { owner: "p" })).acquired).toBe(true);
    } finally {
      await hop.close();
    }
  });

  it("a release whose answer was lost is tried once more, and counted once", async () => {
    const hop = await startCutHop(inject("bridgeUrl"));
    try {
      const prefix = uniquePrefix("lost-release");
      const lock = new Lock({ redis: bridgeRedis(hop.url), prefix, ttl: "1h", clock: manualClock() });
      await lock.acquire("r", { owner: "o" });
      await lock.acquire("r", { owner: "o" });
      hop.cutNext = '"release"';
      // the first try ran (depth 2 -> 1) and its answer was cut; the second is answered as the first was
      expect(await lock.release("r", { owner: "o" })).toEqual({ released: true, count: 1 });
      expect(hop.cuts).toBe(1);
      expect((await lock.acquire("r", { owner: "p" })).acquired).toBe(false); // still held, at depth 1
      hop.cutNext = '"release"';
      expect(await lock.release("r", { owner: "o" })).toEqual({ released: true, count: 0 });
      expect(hop.cuts).toBe(2);
      expect(await lock.release("r", { owner: "o" })).toEqual({ released: false, count: 0 });
      expect((await lock.acquire("r", { owner: "p" })).acquired).toBe(true);
    } finally {
      await hop.close();
    }
  });

  it("withLock gives back a lock its lost answer may have taken, rather than leave it to the lease", async () => {
    const hop = await startCutHop(inject("bridgeUrl"));
    try {
      const prefix = uniquePrefix("lost-with");
      const lock = new Lock({ redis: bridgeRedis(hop.url), prefix, ttl: "1h" });
      expect((await lock.acquire("warm-up")).acquired).toBe(true);
      hop.cutNext = '"acquire"';
      const attempt = lock.withLock("w", () => "ran");
      await expect(attempt).rejects.toBeInstanceOf(LockUnavailableError);
      expect(hop.cuts).toBe(1);
      // the acquire ran in Redis; the release that followed freed it
      expect((await lock.acquire("w", { owner: "next" })).acquired).toBe(true);
    } finally {
      await hop.close();
    }
  });
});

describe("leases and fences", () => {
  it("lets a lapsed hold be taken over with a larger fence; the old owner can neither release nor extend", async () => {
    const { lock, clock } = lockWith();
    const old = await lock.acquire("res", { owner: "old" });
    clock.set(T0 + 999);
    expect((await lock.acquire("res", { owner: "new" })).acquired).toBe(false);
    clock.set(T0 + 1000); // the lease ends at T0 + 1000: from then on it is not held
    const taken = await lock.acquire("res", { owner: "new" });
    expect(taken).toEqual({ acquired: true, owner: "new", fence: T0 + 1000, count: 1, expiresAt: T0 + 2000 });
    expect(taken.fence).toBeGreaterThan(old.fence);
    expect(await lock.release("res", { owner: "old" })).toEqual({ released: false, count: 0 });
    expect(await lock.extend("res", { owner: "old" })).toEqual({ extended: false, expiresAt: 0 });
    expect((await lock.acquire("res", { owner: "new" })).count).toBe(2);
  });

  it("a lapsed owner that comes back starts a new hold, with a new fence and depth 1", async () => {
    const { lock, clock } = lockWith();
    await lock.acquire("r", { owner: "o" });
    await lock.acquire("r", { owner: "o" });
    clock.set(T0 + 5000);
    expect(await lock.acquire("r", { owner: "o" })).toMatchObject({
      acquired: true,
      fence: T0 + 5000,
      count: 1,
    });
  });

  it("keeps fences increasing when holders follow each other faster than the clock", async () => {
    const { lock, clock } = lockWith();
    const fences: number[] = [];
    for (let i = 0; i < 5; i++) {
      const hold = await lock.acquire("fast", { owner: `o${i}` });
      fences.push(hold.fence);
      await lock.release("fast", { owner: `o${i}` });
    }
    expect(fences).toEqual([T0, T0 + 1, T0 + 2, T0 + 3, T0 + 4]);
    // the clock catches up: the stored fence still wins while it is ahead
    clock.set(T0 + 2);
    expect((await lock.acquire("fast", { owner: "p" })).fence).toBe(T0 + 5);
  });

  it("keeps fences increasing after the lock's key itself expired", async () => {
    const { lock, clock } = lockWith();
    const first = await lock.acquire("gone", { owner: "a" });
    await lock.release("gone", { owner: "a" });
    // The key lives FENCE_MARGIN_MS past the fence; expire it as Redis would once that time has passed.
    const [key, ttl] = Object.entries(await ttls(lock.prefix))[0]!;
    expect(ttl).toBeGreaterThan(FENCE_MARGIN_MS - 5000);
    expect(ttl).toBeLessThanOrEqual(FENCE_MARGIN_MS);
    clock.set(T0 + FENCE_MARGIN_MS);
    await direct.call("PEXPIRE", key, 1);
    await new Promise((resolve) => setTimeout(resolve, 5));
    expect(await direct.call("EXISTS", key)).toBe(0);
    const next = await lock.acquire("gone", { owner: "b" });
    expect(next.fence).toBe(T0 + FENCE_MARGIN_MS);
    expect(next.fence).toBeGreaterThan(first.fence);
  });

  it("extends in milliseconds, never shortens, and only for the owner", async () => {
    const { lock, clock } = lockWith({ ttl: 250 });
    await lock.acquire("e", { owner: "o" });
    clock.set(T0 + 200);
    expect(await lock.extend("e", { owner: "o", ttl: 120 })).toEqual({
      extended: true,
      expiresAt: T0 + 320,
    });
    expect(await lock.extend("e", { owner: "o", ttl: 1 })).toEqual({ extended: true, expiresAt: T0 + 320 });
    expect(await lock.extend("e", { owner: "x" })).toEqual({ extended: false, expiresAt: 0 });
    clock.set(T0 + 319);
    expect((await lock.acquire("e", { owner: "x" })).acquired).toBe(false);
    expect(await lock.extend("e", { owner: "o" })).toEqual({ extended: true, expiresAt: T0 + 569 });
  });

  it("puts a TTL on every key it writes, in every state", async () => {
    const { lock, clock } = lockWith({ ttl: 1000 });
    const check = async () => {
      const all = await ttls(lock.prefix);
      expect(Object.keys(all).length).toBeGreaterThan(0);
      for (const [key, ttl] of Object.entries(all)) {
        expect({ key, positive: ttl > 0 && ttl <= 1000 + FENCE_MARGIN_MS }).toEqual({ key, positive: true });
      }
    };
    await lock.acquire("t1", { owner: "o" });
    await check();
    await lock.acquire("t1", { owner: "o" });
    await lock.extend("t1", { owner: "o", ttl: 500 });
    await check();
    await lock.release("t1", { owner: "o" });
    await lock.release("t1", { owner: "o" });
    await check();
    clock.set(T0 + 10_000);
    await lock.acquire("t1", { owner: "p" });
    await lock.acquire("t2", { owner: "p" });
    await lock.acquire("t2", { owner: "q" });
    await check();
  });
});

describe("bad input", () => {
  const redis = bridgeRedis();
  it.each([0, -1, Number.NaN, 2 ** 31, Number.POSITIVE_INFINITY, 1.5, "0s", "soon", null])(
    "refuses a ttl of %s, naming the field",
    async (ttl) => {
      expect(() => new Lock({ redis, ttl: ttl as number })).toThrow(/^ttl: /);
      const lock = new Lock({ redis });
      await expect(lock.acquire("n", { ttl: ttl as number })).rejects.toThrow(/^ttl: /);
      await expect(lock.extend("n", { owner: "o", ttl: ttl as number })).rejects.toThrow(/^ttl: /);
      await expect(lock.withLock("n", () => {}, { ttl: ttl as number })).rejects.toThrow(/^ttl: /);
    },
  );

  it("accepts the largest ttl a timer can hold", () => {
    expect(new Lock({ redis, ttl: 2 ** 31 - 1 }).ttl).toBe(2 ** 31 - 1);
    expect(new Lock({ redis }).ttl).toBe(30_000);
    expect(new Lock({ redis, ttl: "2.5s" }).ttl).toBe(2500);
  });

  it("still reads `lease`, the old name of `ttl`, everywhere, warning once per process", async () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    try {
      const { lock, clock } = lockWith({ ttl: undefined, lease: 400 } as never);
      expect(lock.ttl).toBe(400);
      expect((lock as unknown as { lease: number }).lease).toBe(400);
      const old = (options: object) => options as never;
      expect(await lock.acquire("old", old({ owner: "o", lease: "2s" }))).toMatchObject({
        acquired: true,
        expiresAt: T0 + 2000,
      });
      clock.set(T0 + 1000);
      expect(await lock.extend("old", old({ owner: "o", lease: 1500 }))).toEqual({
        extended: true,
        expiresAt: T0 + 2500,
      });
      expect(await lock.withLock("old2", (_signal, fence) => fence, old({ lease: 100, renew: false }))).toBe(
        T0 + 1000,
      );
      expect(() => new Lock({ redis, ttl: 1, lease: 1 } as never)).toThrow(
        /^ttl: given twice, as ttl and as lease \(its old name\): keep ttl only$/,
      );
      await expect(lock.acquire("old", old({ ttl: 1, lease: 1 }))).rejects.toThrow(/^ttl: given twice/);
      expect(warn.mock.calls).toEqual([
        [
          "edgelimit: Lock: the option `lease` is now `ttl` (the same duration); rename it, the old name will go",
        ],
      ]);
    } finally {
      warn.mockRestore();
    }
  });

  it("names the field of every other mistake", async () => {
    expect(() => new Lock({ redis: {} })).toThrow(/^redis: /);
    expect(() => new Lock({ redis, prefix: "a{b}" })).toThrow(/^prefix: /);
    expect(() => new Lock({ redis, timeout: 0 })).toThrow(/^timeout: /);
    expect(() => new Lock({ redis, clock: 5 as unknown as () => number })).toThrow(/^clock: /);
    expect(() => new Lock({ redis, leese: 5 } as never)).toThrow(/^leese: not a Lock option/);
    const lock = new Lock({ redis });
    await expect(lock.acquire(5 as unknown as string)).rejects.toThrow(/^name: /);
    await expect(lock.acquire("n", { owner: 5 as unknown as string })).rejects.toThrow(/^owner: /);
    await expect(lock.acquire("")).rejects.toThrow(/^name: must not be empty/);
    await expect(lock.acquire("n", { owner: "" })).rejects.toThrow(/^owner: must not be empty/);
    await expect(lock.release("n", { owner: "" })).rejects.toThrow(/^owner: must not be empty/);
    await expect(lock.withLock("n", () => {}, { owner: "" })).rejects.toThrow(/^owner: /);
    await expect(lock.acquire("n", { wait: -1 })).rejects.toThrow(/^wait: /);
    await expect(lock.release("n", {} as { owner: string })).rejects.toThrow(/^owner: /);
    await expect(lock.withLock("n", 5 as never)).rejects.toThrow(/^fn: /);
    await expect(lock.withLock("n", () => {}, { renew: "yes" as never })).rejects.toThrow(/^renew: /);
  });

  it.each([-1, Number.NaN, Number.POSITIVE_INFINITY, "1700000040000"])(
    "refuses a clock that returns %s, naming it",
    async (now) => {
      const lock = new Lock({ redis, clock: () => now as number });
      const broken = /^clock: returned .*, expected epoch milliseconds \(0 or more\)$/;
      await expect(lock.acquire("n")).rejects.toThrow(broken);
      await expect(lock.withLock("n", () => {})).rejects.toThrow(broken);
    },
  );

  it("floors a clock that returns fractions of a ms", async () => {
    const { lock, clock } = lockWith();
    clock.set(T0 + 0.9);
    expect(await lock.acquire("frac", { owner: "o" })).toMatchObject({ fence: T0, expiresAt: T0 + 1000 });
  });
});

describe("mutual exclusion", () => {
  it("200 contenders on 8 Lock instances: one holder at a time, fences rising in order", async () => {
    const prefix = uniquePrefix("mutex");
    // A generous timeout: a release abandoned on a busy machine would leave the lock to its lease.
    const locks = Array.from(
      { length: 8 },
      () => new Lock({ redis: bridgeRedis(), prefix, ttl: "10s", timeout: 15_000 }),
    );
    const intervals: { start: number; end: number; fence: number }[] = [];
    let holders = 0;
    let maxHolders = 0;
    const contenders = Array.from({ length: 200 }, async (_, i) => {
      const lock = locks[i % locks.length]!;
      const owner = `c${i}`;
      const hold = await lock.acquire("the-one", { owner, wait: "120s" });
      if (!hold.acquired) throw new Error(`${owner} gave up: ${hold.error?.message ?? "timed out"}`);
      const start = performance.now();
      holders += 1;
      maxHolders = Math.max(maxHolders, holders);
      await new Promise((resolve) => setTimeout(resolve, 1));
      holders -= 1;
      const end = performance.now();
      intervals.push({ start, end, fence: hold.fence });
      const released = await lock.release("the-one", { owner });
      if (!released.released) throw new Error(`${owner} could not release: ${released.error?.message}`);
    });
    await Promise.all(contenders);
    expect(intervals.length).toBe(200);
    expect(maxHolders).toBe(1);
    intervals.sort((a, b) => a.start - b.start);
    let overlaps = 0;
    let fenceOutOfOrder = 0;
    for (let i = 1; i < intervals.length; i++) {
      if (intervals[i]!.start < intervals[i - 1]!.end) overlaps++;
      if (intervals[i]!.fence <= intervals[i - 1]!.fence) fenceOutOfOrder++;
    }
    expect({ overlaps, fenceOutOfOrder }).toEqual({ overlaps: 0, fenceOutOfOrder: 0 });
  }, 180_000);
});

describe("withLock", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  // Renewals and the hold's end are timers: the tests move fake timers (real I/O still goes to Redis)
  // and the Lock's clock together, so every renewal lands at an exact moment.
  it("holds the lock past several ttls, renewing at a third of it, then releases it", async () => {
    const prefix = uniquePrefix("renew");
    const clock = manualClock();
    const ttl = 900;
    const lock = new Lock({ redis: bridgeRedis(), prefix, ttl, clock });
    const rival = new Lock({ redis: bridgeRedis(), prefix, ttl, clock });
    const extend = vi.spyOn(lock, "extend");
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    try {
      // each step: [the renewal's new end, the end the rival is refused until, signal aborted]
      const steps: [number, number, boolean][] = [];
      const fence = await lock.withLock("long", async (signal, fence) => {
        for (let step = 1; step <= 12; step++) {
          clock.set(T0 + step * 300);
          await vi.advanceTimersByTimeAsync(300); // the renewal timer fires: one extend
          const renewed = await extend.mock.results.at(-1)!.value;
          const rivalTry = await rival.acquire("long", { owner: "rival" });
          steps.push([renewed.expiresAt, rivalTry.acquired ? 0 : rivalTry.expiresAt, signal.aborted]);
        }
        return fence;
      });
      expect(fence).toBe(T0);
      expect(extend).toHaveBeenCalledTimes(12);
      // four ttls held: every renewal pushes the end to now + ttl, and the rival never gets in
      expect(steps).toEqual(
        Array.from({ length: 12 }, (_, i) => [T0 + (i + 1) * 300 + ttl, T0 + (i + 1) * 300 + ttl, false]),
      );
      // released: the rival takes it at once, with the next fence
      expect(await rival.acquire("long", { owner: "rival" })).toMatchObject({
        acquired: true,
        fence: T0 + 3600,
      });
    } finally {
      vi.useRealTimers();
    }
  });

  // The hold's end is timed by a timer, which can fire a little before the clock reaches it (the safe
  // side). So the tests below hold the clock and move it by hand: after the abort, the lock is still the
  // holder's one ms before its hold ends and free at the end, exactly.
  it("without renewal the hold runs out: signal aborts and a rival gets in", async () => {
    const clock = manualClock();
    const lock = new Lock({ redis: bridgeRedis(), prefix: uniquePrefix("norenew"), ttl: 200, clock });
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    const result = await lock.withLock(
      "short",
      async (signal, fence) => {
        await vi.advanceTimersByTimeAsync(199);
        const before = signal.aborted;
        await vi.advanceTimersByTimeAsync(1);
        vi.useRealTimers();
        expect([before, signal.aborted]).toEqual([false, true]);
        clock.set(T0 + 199);
        const early = await lock.acquire("short", { owner: "rival" });
        clock.set(T0 + 200);
        const rival = await lock.acquire("short", { owner: "rival" });
        return {
          lost: signal.reason instanceof LockLostError,
          why: (signal.reason as Error).message,
          early: [early.acquired, early.expiresAt],
          rival: [rival.acquired, rival.fence],
          fence,
        };
      },
      { renew: false },
    );
    expect(result).toEqual({
      lost: true,
      why: 'lock "short": the hold ran out before it could be renewed',
      early: [false, T0 + 200],
      rival: [true, T0 + 200],
      fence: T0,
    });
  });

  it("aborts signal when a renewal finds another owner holding the lock", async () => {
    const prefix = uniquePrefix("stolen");
    const clock = manualClock();
    const lock = new Lock({ redis: bridgeRedis(), prefix, ttl: 3000, clock });
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    try {
      let stolenFence = 0;
      const reason = await lock.withLock("x", async (signal, fence) => {
        clock.set(T0 + 3000); // by the shared clock the hold has run out: a rival takes over
        const rival = await lock.acquire("x", { owner: "rival" });
        expect(rival).toMatchObject({ acquired: true, fence: T0 + 3000 });
        expect(fence).toBe(T0);
        stolenFence = rival.fence;
        await vi.advanceTimersByTimeAsync(999);
        expect(signal.aborted).toBe(false);
        await vi.advanceTimersByTimeAsync(1); // the renewal, at a third of the ttl, finds the rival
        // Its request is real I/O, answered whenever the machine gets to it: wait for it, running at
        // this same fake instant any timer it sets on its way (a batch's), rather than listening for
        // an abort that may already have happened or may wait on a timer no one advances.
        while (!signal.aborted) {
          await new Promise((resolve) => setImmediate(resolve));
          await vi.advanceTimersByTimeAsync(0);
        }
        return signal.reason as Error;
      });
      expect(reason).toBeInstanceOf(LockLostError);
      expect(reason.message).toBe('lock "x": another owner holds it now (the hold had run out)');
      // the final release did not take the rival's lock away
      expect(await lock.acquire("x", { owner: "rival" })).toMatchObject({ count: 2, fence: stolenFence });
    } finally {
      vi.useRealTimers();
    }
  });

  it("aborts signal when renewals fail because the bridge is gone", async () => {
    const bridge: Bridge = await startBridge({
      redisUrl: inject("redisUrl"),
      port: 0,
      token: inject("bridgeToken"),
    });
    const prefix = uniquePrefix("cut");
    const clock = manualClock();
    // A timeout well past the ttl: the acquire before the cut may be slow on a busy machine, and the
    // abort never waits for a renewal in flight (after the cut each is refused at once anyway).
    const lock = new Lock({ redis: bridgeRedis(bridge.url), prefix, ttl: 600, timeout: 2000, clock });
    const watcher = new Lock({ redis: bridgeRedis(), prefix, ttl: 600, clock });
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    const outcome = await lock.withLock("cut", async (signal, fence) => {
      await bridge.close();
      await vi.advanceTimersByTimeAsync(599); // renewals are tried, and fail
      const before = signal.aborted;
      await vi.advanceTimersByTimeAsync(1);
      vi.useRealTimers();
      expect([before, signal.aborted]).toEqual([false, true]);
      // no renewal got through: the lock is the holder's until its hold ends, and free from then on;
      // the watcher, on the shared bridge, gets it with a newer fence
      clock.set(T0 + 599);
      const early = await watcher.acquire("cut", { owner: "watcher" });
      clock.set(T0 + 600);
      const hold = await watcher.acquire("cut", { owner: "watcher" });
      return {
        lost: signal.reason instanceof LockLostError,
        why: (signal.reason as Error).message,
        early: [early.acquired, early.expiresAt],
        free: hold.acquired,
        fences: [fence, hold.fence],
      };
    });
    expect(outcome).toEqual({
      lost: true,
      why: 'lock "cut": the hold ran out before it could be renewed',
      early: [false, T0 + 600],
      free: true,
      fences: [T0, T0 + 600],
    });
  });

  it("re-enters a hold of the same owner, and leaves it held afterwards", async () => {
    const { lock } = lockWith({ ttl: "1h" });
    const outer = await lock.acquire("nest", { owner: "o" });
    const inner = await lock.withLock("nest", async (_signal, fence) => fence, { owner: "o" });
    expect(inner).toBe(outer.fence);
    expect((await lock.acquire("nest", { owner: "p" })).acquired).toBe(false); // still held by o
    expect(await lock.release("nest", { owner: "o" })).toEqual({ released: true, count: 0 });
  });

  it("aborts signal when the bridge process is stopped (SIGSTOP) mid-hold", async () => {
    const bridge = await BridgeProcess.start(inject("redisUrl"), inject("bridgeToken"));
    try {
      const prefix = uniquePrefix("sigstop");
      // The acquire before the stop may be slow on a busy machine; a renewal after it hangs until its
      // timeout, and the abort does not wait for it.
      const lock = new Lock({ redis: bridgeRedis(bridge.url), prefix, ttl: 900, timeout: 2000 });
      const outcome = await lock.withLock("frozen", async (signal) => {
        bridge.signal("SIGSTOP"); // renewals now get no answer at all
        await new Promise((resolve) => signal.addEventListener("abort", resolve));
        return { lost: signal.reason instanceof LockLostError, why: (signal.reason as Error).message };
      });
      expect(outcome.lost).toBe(true);
      expect(outcome.why).toMatch(/the hold ran out before it could be renewed/);
    } finally {
      bridge.signal("SIGCONT");
      await bridge.stop();
    }
  }, 30_000);

  it("rejects with LockUnavailableError when the lock is held, and runs nothing", async () => {
    const { lock } = lockWith();
    await lock.acquire("busy", { owner: "holder" });
    let ran = false;
    const attempt = lock.withLock("busy", () => {
      ran = true;
    });
    await expect(attempt).rejects.toBeInstanceOf(LockUnavailableError);
    expect(ran).toBe(false);
  });

  it("releases when fn throws, and hands the run to waitUntil", async () => {
    const { lock } = lockWith();
    const kept: Promise<unknown>[] = [];
    const run = lock.withLock(
      "boom",
      () => {
        throw new Error("boom");
      },
      { waitUntil: (p) => kept.push(p) },
    );
    expect(kept.length).toBe(1);
    await expect(run).rejects.toThrow("boom");
    await Promise.all(kept);
    expect((await lock.acquire("boom", { owner: "next" })).acquired).toBe(true);
  });

  it("waits for a holder to finish (acquire with wait polls with backoff)", async () => {
    const prefix = uniquePrefix("wait");
    const a = new Lock({ redis: bridgeRedis(), prefix, ttl: "10s" });
    const b = new Lock({ redis: bridgeRedis(), prefix, ttl: "10s" });
    await a.acquire("w", { owner: "a" });
    const waiting = b.acquire("w", { owner: "b", wait: "5s" });
    setTimeout(() => void a.release("w", { owner: "a" }), 100);
    expect(await waiting).toMatchObject({ acquired: true, owner: "b" });
    // and one that gives up
    expect(await a.acquire("w", { owner: "a", wait: 50 })).toMatchObject({ acquired: false });
  });
});

describe("on a 3-node Redis Cluster", () => {
  // Three redis-server nodes sharing the slots, and an HTTP front speaking the REST pipeline protocol
  // that routes each command as a cluster client does: to any node, then where MOVED points (SCRIPT
  // LOAD to every node). The real Lock and Concurrency run through it unchanged.
  let cluster: Cluster;
  let front: Server;
  let frontUrl: string;

  async function route(command: string[]): Promise<Reply> {
    if (command[0]?.toUpperCase() === "SCRIPT") {
      const replies = await Promise.all(cluster.nodes.map((node) => node.conn.send([command])));
      return replies[0]![0]!;
    }
    return cluster.call(command);
  }

  const json = (reply: Reply): unknown => {
    if (Buffer.isBuffer(reply)) return reply.toString("utf8");
    if (typeof reply === "bigint") return Number(reply);
    if (Array.isArray(reply)) return reply.map(json);
    return reply;
  };

  beforeAll(async () => {
    cluster = await startCluster();
    front = createServer(async (request, response) => {
      const chunks: Buffer[] = [];
      for await (const chunk of request) chunks.push(chunk as Buffer);
      const commands = JSON.parse(Buffer.concat(chunks).toString("utf8")) as unknown[][];
      const replies = [];
      for (const command of commands) {
        const reply = await route(command.map(String));
        replies.push(reply instanceof RedisError ? { error: reply.message } : { result: json(reply) });
      }
      response.writeHead(200, { "Content-Type": "application/json" });
      response.end(JSON.stringify(replies));
    });
    await new Promise<void>((resolve) => front.listen(0, "127.0.0.1", resolve));
    frontUrl = `http://127.0.0.1:${(front.address() as AddressInfo).port}`;
  }, 30_000);

  afterAll(async () => {
    front?.closeAllConnections();
    await new Promise((resolve) => front?.close(resolve));
    await cluster?.stop();
  });

  const clusterRedis = () => new Redis({ url: frontUrl, token: "cluster", enableTelemetry: false });

  it("locks names on every node: reentrancy, refusal, takeover with a larger fence, a TTL on every key", async () => {
    const clock = manualClock();
    const lock = new Lock({ redis: clusterRedis(), prefix: "cl", ttl: 1000, clock });
    const names = ["a", "b", "c", "d", "e", "f", " ", "{x}", "n".repeat(5000)];
    const slots = await Promise.all(
      names.map((name) => cluster.nodes[0]!.conn.call("CLUSTER", "KEYSLOT", lock.key(name))),
    );
    expect(new Set(slots.map((slot) => Math.floor(Number(slot) / 5461))).size).toBe(3); // all three nodes
    for (const name of names) {
      expect(await lock.acquire(name, { owner: "o" })).toMatchObject({ acquired: true, fence: T0, count: 1 });
      expect(await lock.acquire(name, { owner: "o" })).toMatchObject({ acquired: true, count: 2 });
      expect(await lock.acquire(name, { owner: "p" })).toMatchObject({
        acquired: false,
        expiresAt: T0 + 1000,
      });
      expect(await lock.release(name, { owner: "p" })).toEqual({ released: false, count: 0 });
    }
    clock.set(T0 + 1000);
    for (const name of names) {
      expect(await lock.acquire(name, { owner: "p" })).toMatchObject({ acquired: true, fence: T0 + 1000 });
    }
    for (const node of cluster.nodes) {
      const keys = (await node.conn.call("KEYS", "cl:*")) as Buffer[];
      for (const key of keys) expect(Number(await node.conn.call("PTTL", key))).toBeGreaterThan(0);
    }
  });

  it("runs withLock and the concurrency cap through the cluster", async () => {
    const clock = manualClock();
    const lock = new Lock({ redis: clusterRedis(), prefix: "cl2", ttl: 900, clock });
    const extend = vi.spyOn(lock, "extend");
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    const ends: number[] = [];
    try {
      await lock.withLock("job", async (signal) => {
        // past two ttls, renewing every 300 ms: the rival is refused until each renewal's end
        for (let step = 1; step <= 7; step++) {
          clock.set(T0 + step * 300);
          await vi.advanceTimersByTimeAsync(300);
          await extend.mock.results.at(-1)!.value;
          const rival = await lock.acquire("job", { owner: "rival" });
          ends.push(signal.aborted || rival.acquired ? 0 : rival.expiresAt);
        }
      });
    } finally {
      vi.useRealTimers();
    }
    expect(ends).toEqual([1, 2, 3, 4, 5, 6, 7].map((step) => T0 + step * 300 + 900));

    const instances = [0, 1, 2].map(
      () => new Concurrency({ redis: clusterRedis(), prefix: "cl3", limit: 4, ttl: "30s", timeout: 15_000 }),
    );
    for (const id of ["a", "b", "c"]) {
      const slots = await Promise.all(Array.from({ length: 30 }, (_, i) => instances[i % 3]!.acquire(id)));
      expect(slots.filter((slot) => slot.allowed).length).toBe(4);
      expect(slots.every((slot) => slot.source === "redis")).toBe(true);
      await Promise.all(slots.map((slot) => slot.release()));
    }
  });
});
