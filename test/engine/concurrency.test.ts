// The concurrency limiter against a real redis-server behind the REST bridge: exact slot counts with an
// injected clock, leases that free the slots of holders that never release, and the cap under 256
// concurrent callers on several instances.
import { Redis } from "@upstash/redis";
import { beforeAll, describe, expect, it, vi } from "vitest";
import type { RedisConnection } from "../../src/bridge/resp.js";
import { Concurrency, type ConcurrencyDecision } from "../../src/engine/concurrency.js";
import { sharedRedis } from "../own-bridge.js";
import { bridgeRedis, manualClock, T0, uniquePrefix } from "../support.js";

const shared = sharedRedis();
let direct: RedisConnection;
beforeAll(() => {
  direct = shared.conn;
});

function limiterWith(options: Partial<ConstructorParameters<typeof Concurrency>[0]> = {}) {
  const clock = manualClock();
  const concurrency = new Concurrency({
    redis: bridgeRedis(),
    prefix: uniquePrefix("conc"),
    limit: 3,
    ttl: 1000,
    clock,
    ...options,
  });
  return { concurrency, clock };
}

const pick = ({ allowed, limit, remaining, retryAfter, resetAt, source }: ConcurrencyDecision) => ({
  allowed,
  limit,
  remaining,
  retryAfter,
  resetAt,
  source,
});

describe("slots", () => {
  it("admits `limit` holders, refuses the next until one releases", async () => {
    const { concurrency, clock } = limiterWith();
    const a = await concurrency.acquire("user:1");
    expect(pick(a)).toEqual({
      allowed: true,
      limit: 3,
      remaining: 2,
      retryAfter: 0,
      resetAt: T0 + 1000,
      source: "redis",
    });
    clock.set(T0 + 100);
    const b = await concurrency.acquire("user:1");
    const c = await concurrency.acquire("user:1");
    expect([b.remaining, c.remaining]).toEqual([1, 0]);
    const refused = await concurrency.acquire("user:1");
    // the first lease (taken at T0) runs out at T0 + 1000: 900 ms from now
    expect(pick(refused)).toEqual({
      allowed: false,
      limit: 3,
      remaining: 0,
      retryAfter: 900,
      resetAt: T0 + 1000,
      source: "redis",
    });
    expect(await refused.release()).toBe(false);
    // another identifier has its own slots
    expect((await concurrency.acquire("user:2")).remaining).toBe(2);

    expect(await b.release()).toBe(true);
    expect(await b.release()).toBe(false); // once only
    const d = await concurrency.acquire("user:1");
    expect([d.allowed, d.remaining]).toEqual([true, 0]);
    expect((await concurrency.acquire("user:1")).allowed).toBe(false);
    expect(new Set([a.slotId, b.slotId, c.slotId, d.slotId]).size).toBe(4);
    // leaseId, the old name, still reads the same id
    expect([a.leaseId, b.leaseId, c.leaseId, d.leaseId]).toEqual([a.slotId, b.slotId, c.slotId, d.slotId]);
  });

  it("frees the slots of holders that never release once their ttl has run out", async () => {
    const { concurrency, clock } = limiterWith({ limit: 2 });
    await concurrency.acquire("crashy");
    clock.set(T0 + 400);
    await concurrency.acquire("crashy");
    expect((await concurrency.acquire("crashy")).allowed).toBe(false);
    clock.set(T0 + 999);
    expect((await concurrency.acquire("crashy")).retryAfter).toBe(1);
    clock.set(T0 + 1000); // the first lease is over
    const next = await concurrency.acquire("crashy");
    expect([next.allowed, next.remaining]).toEqual([true, 0]);
    clock.set(T0 + 2400); // and the others
    expect((await concurrency.acquire("crashy")).remaining).toBe(1);
  });

  it("keeps a TTL on its key no longer than the lease", async () => {
    const { concurrency } = limiterWith({ ttl: "5s" });
    const slots = await Promise.all([1, 2, 3].map(() => concurrency.acquire("ttl")));
    await slots[0]!.release();
    const keys = (await direct.call("KEYS", `${concurrency.prefix}:*`)) as Buffer[];
    expect(keys.map(String)).toEqual([concurrency.key("ttl")]);
    const ttl = Number(await direct.call("PTTL", keys[0]!));
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(5000);
    // the last release removes the key altogether
    await Promise.all(slots.slice(1).map((slot) => slot.release()));
    expect(await direct.call("EXISTS", keys[0]!)).toBe(0);
  });

  it("keeps the longer TTL when another instance uses a shorter lease", async () => {
    const prefix = uniquePrefix("conc-ttl");
    const long = new Concurrency({ redis: bridgeRedis(), prefix, limit: 5, ttl: "1h" });
    const short = new Concurrency({ redis: bridgeRedis(), prefix, limit: 5, ttl: "1s" });
    await long.acquire("mixed");
    await short.acquire("mixed");
    expect(Number(await direct.call("PTTL", long.key("mixed")))).toBeGreaterThan(3_500_000);
  });
});

describe("under load", () => {
  it("256 concurrent callers on 4 instances: exactly `limit` admitted at once, never more in flight", async () => {
    const prefix = uniquePrefix("conc-load");
    const limit = 10;
    const instances = Array.from(
      { length: 4 },
      // A generous timeout: this is about the cap, and a machine this busy can take over 1 s to answer
      // (an acquire that times out follows onError "allow" and is not counted against the cap).
      () => new Concurrency({ redis: bridgeRedis(), prefix, limit, ttl: "30s", timeout: 15_000 }),
    );
    // Phase 1: every caller holds what it got until all have an answer: exactly `limit` get a slot.
    const first = await Promise.all(
      Array.from({ length: 256 }, (_, i) => instances[i % instances.length]!.acquire("api-key")),
    );
    expect(first.filter((slot) => slot.allowed).length).toBe(limit);
    expect(first.filter((slot) => slot.source !== "redis").length).toBe(0);
    await Promise.all(first.map((slot) => slot.release()));

    // Phase 2: churn. Each caller tries 5 times, holding a slot for a few ms when it gets one.
    let inFlight = 0;
    let maxInFlight = 0;
    let admitted = 0;
    let refused = 0;
    const errors: string[] = [];
    await Promise.all(
      Array.from({ length: 256 }, async (_, i) => {
        const concurrency = instances[i % instances.length]!;
        for (let round = 0; round < 5; round++) {
          const slot = await concurrency.acquire("api-key");
          if (slot.source !== "redis") errors.push(slot.error?.message ?? "?");
          if (!slot.allowed) {
            refused += 1;
            expect(slot.retryAfter).toBeGreaterThan(0);
            await new Promise((resolve) => setTimeout(resolve, 1 + Math.random() * 5));
            continue;
          }
          admitted += 1;
          inFlight += 1;
          maxInFlight = Math.max(maxInFlight, inFlight);
          await new Promise((resolve) => setTimeout(resolve, Math.random() * 4));
          inFlight -= 1;
          await slot.release();
        }
      }),
    );
    expect(errors).toEqual([]);
    expect(maxInFlight).toBeLessThanOrEqual(limit);
    expect(maxInFlight).toBe(limit); // the cap was reached, so the check above tested something
    expect(admitted + refused).toBe(256 * 5);
    expect(admitted).toBeGreaterThan(limit);
    // everything was given back
    expect(await direct.call("EXISTS", instances[0]!.key("api-key"))).toBe(0);
  }, 120_000);
});

describe("when Redis fails", () => {
  const dead = () => new Redis({ url: "http://127.0.0.1:1", token: "x", enableTelemetry: false });

  it("follows onError: allow (default) lets the request in, deny refuses it", async () => {
    const open = new Concurrency({ redis: dead(), limit: 1, ttl: "10s", clock: () => T0 });
    const allowed = await open.acquire("k");
    expect(pick(allowed)).toEqual({
      allowed: true,
      limit: 1,
      remaining: 1,
      retryAfter: 0,
      resetAt: T0,
      source: "error",
    });
    expect(allowed.error?.message).toMatch(/no answer from Redis/);
    expect(await allowed.release()).toBe(false); // tried, failed quietly

    const closed = new Concurrency({
      redis: dead(),
      limit: 1,
      ttl: "10s",
      onError: "deny",
      clock: () => T0,
    });
    const denied = await closed.acquire("k");
    expect(pick(denied)).toMatchObject({ allowed: false, remaining: 0, retryAfter: 1000, source: "error" });
  });
});

describe("bad input", () => {
  const redis = bridgeRedis();
  it.each([0, -1, 1.5, Number.NaN, "10", 1_000_001])("refuses a limit of %s", (limit) => {
    expect(() => new Concurrency({ redis, limit: limit as number, ttl: 1000 })).toThrow(/^limit: /);
  });
  it.each([0, -1, Number.NaN, 2 ** 31, "0s", "later", undefined])("refuses a ttl of %s", (ttl) => {
    expect(() => new Concurrency({ redis, limit: 1, ttl: ttl as number })).toThrow(/^ttl: /);
  });
  it("still reads `lease`, the old name of `ttl`, warning once per process", async () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    try {
      const { concurrency } = limiterWith({ ttl: undefined, lease: "2s" } as never);
      expect(concurrency.ttl).toBe(2000);
      expect((concurrency as unknown as { lease: number }).lease).toBe(2000);
      expect(await concurrency.acquire("old")).toMatchObject({ allowed: true, resetAt: T0 + 2000 });
      expect(() => new Concurrency({ redis, limit: 1, ttl: 1, lease: 1 } as never)).toThrow(
        /^ttl: given twice, as ttl and as lease \(its old name\): keep ttl only$/,
      );
      expect(warn.mock.calls).toEqual([
        [
          "edgelimit: Concurrency: the option `lease` is now `ttl` (the same duration); rename it, the old name will go",
        ],
      ]);
    } finally {
      warn.mockRestore();
    }
  });
  it("names the other fields", async () => {
    expect(() => new Concurrency({ redis: null, limit: 1, ttl: 1 })).toThrow(/^redis: /);
    expect(() => new Concurrency({ redis, limit: 1, ttl: 1, onError: "maybe" as "allow" })).toThrow(
      /^onError: /,
    );
    expect(() => new Concurrency({ redis, limit: 1, ttl: 1, timeout: -5 })).toThrow(/^timeout: /);
    expect(() => new Concurrency({ redis, limit: 1, ttl: 1, rules: {} } as never)).toThrow(/^rules: not a/);
    const concurrency = new Concurrency({ redis, limit: 1, ttl: 1 });
    await expect(concurrency.acquire(42 as unknown as string)).rejects.toThrow(/^identifier: /);
    await expect(concurrency.acquire("")).rejects.toThrow(/^identifier: must not be empty/);
  });
  it.each([-1, Number.NaN, Number.POSITIVE_INFINITY, "1700000040000"])(
    "refuses a clock that returns %s, naming it, before any call to Redis",
    async (now) => {
      const concurrency = new Concurrency({ redis, limit: 1, ttl: 1, clock: () => now as number });
      await expect(concurrency.acquire("k")).rejects.toThrow(
        /^clock: returned .*, expected epoch milliseconds \(0 or more\)$/,
      );
    },
  );
});
