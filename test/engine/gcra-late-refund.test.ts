// GCRA (and the token bucket, which runs as it) gives back at most what a decision still holds: a
// settle below the cost, or a lease's refund of unused units, moves the TAT back by the units, but by
// no more than the decision's TAT (its resetAt) lies ahead of the settle's time. Units the stream
// already earned back by going idle are not given back twice (that would mint them). A real
// redis-server behind the REST bridge, hand-moved clocks; peeks (cost 0) read what was given back.
import { describe, expect, it } from "vitest";
import { gcra, Limiter, type RuleConfig, tokenBucket } from "../../src/index.js";
import { bridgeRedis, manualClock, T0, uniquePrefix } from "../support.js";

type Options = Partial<ConstructorParameters<typeof Limiter>[0]>;

function limiterOf(rule: RuleConfig, options: Options = {}) {
  const clock = manualClock();
  const prefix = uniquePrefix("late");
  const make = (more: Options = {}) =>
    new Limiter({
      redis: bridgeRedis(),
      prefix,
      rules: { r: rule },
      clock,
      denyCache: false,
      timeout: 15_000,
      ...options,
      ...more,
    });
  return { limiter: make(), make, clock };
}

/** Remaining and whether a unit would pass, by a peek now. */
async function peek(limiter: Limiter, id: string) {
  const d = await limiter.limit(id, { cost: 0 });
  return { allowed: d.allowed, remaining: d.remaining };
}

// One unit per 10 s, a burst of 2, as gcra and as a token bucket.
const slow: [string, RuleConfig][] = [
  ["gcra", gcra({ limit: 1, period: 10_000, burst: 2 })],
  ["tokenBucket", tokenBucket({ capacity: 2, refillRate: 1, interval: 10_000 })],
];

describe.each(slow)("%s, settle", (_, rule) => {
  it("a settle after the stream went idle gives back nothing: the burst stays full", async () => {
    const { limiter, clock } = limiterOf(rule);
    const first = await limiter.limit("id"); // TAT T0 + 10 s
    expect(first.allowed).toBe(true);
    expect(first.resetAt).toBe(T0 + 10_000);
    clock.set(T0 + 20_000); // idle: the first unit is earned back
    expect((await limiter.limit("id")).allowed).toBe(true);
    const third = await limiter.limit("id"); // the burst of 2 full: TAT T0 + 40 s
    expect({ allowed: third.allowed, remaining: third.remaining, resetAt: third.resetAt }).toEqual({
      allowed: true,
      remaining: 0,
      resetAt: T0 + 40_000,
    });
    expect(await limiter.settle(first, 0)).toEqual({ difference: -1, via: "redis" });
    const fourth = await limiter.limit("id");
    expect({ allowed: fourth.allowed, remaining: fourth.remaining, retryAfter: fourth.retryAfter }).toEqual({
      allowed: false,
      remaining: 0,
      retryAfter: 10_000,
    });
  });

  it("a prompt settle gives back the full unit", async () => {
    const { limiter, clock } = limiterOf(rule);
    const first = await limiter.limit("id");
    expect(await peek(limiter, "id")).toEqual({ allowed: true, remaining: 1 });
    clock.set(T0 + 9_999); // the 1 ms it still holds goes back: idle, as had it cost 0
    await limiter.settle(first, 0);
    expect(await peek(limiter, "id")).toEqual({ allowed: true, remaining: 2 });
    expect((await limiter.limit("id")).allowed).toBe(true);
    expect((await limiter.limit("id")).allowed).toBe(true);
    expect((await limiter.limit("id")).allowed).toBe(false);
  });

  it("a settle after another one gives back what its units hold less what the other gave back", async () => {
    const { limiter, clock } = limiterOf(rule);
    const x = await limiter.limit("id"); // TAT T0 + 10 s
    const y = await limiter.limit("id"); // TAT T0 + 20 s
    clock.set(T0 + 5_000);
    await limiter.settle(x, 0); // x still holds 5 s: TAT T0 + 15 s
    clock.set(T0 + 12_000);
    const z = await limiter.limit("id"); // TAT T0 + 25 s
    expect({ allowed: z.allowed, resetAt: z.resetAt }).toEqual({ allowed: true, resetAt: T0 + 25_000 });
    clock.set(T0 + 13_000);
    // y's units held T0 + 20 s, less the 5 s given back since: 2 s go back, not 7 s (which left
    // T0 + 18 s, below the T0 + 22 s of costs 0, 0, 1: one unit more admitted than they allow)
    await limiter.settle(y, 0);
    clock.set(T0 + 18_000);
    expect(await limiter.limit("id", { cost: 0 })).toMatchObject({ remaining: 1, resetAt: T0 + 23_000 });
    expect((await limiter.limit("id")).allowed).toBe(true);
    const denied = await limiter.limit("id");
    expect({ allowed: denied.allowed, retryAfter: denied.retryAfter }).toEqual({
      allowed: false,
      retryAfter: 5_000,
    });
  });

  it("a settle after a later decision's gives back all its units still hold", async () => {
    const five =
      rule.algorithm === "gcra"
        ? gcra({ limit: 1, period: 10_000, burst: 5 })
        : tokenBucket({ capacity: 5, refillRate: 1, interval: 10_000 });
    const { limiter, clock } = limiterOf(five);
    await limiter.limit("id", { cost: 2 }); // TAT T0 + 20 s
    const y = await limiter.limit("id"); // TAT T0 + 30 s
    clock.set(T0 + 1_000);
    const z = await limiter.limit("id", { cost: 2 }); // TAT T0 + 50 s
    clock.set(T0 + 2_000);
    await limiter.settle(z, 0); // all 20 s back: T0 + 30 s
    clock.set(T0 + 15_000);
    // y's units still hold 15 s: its 10 s go back (z's refund came after y in the stream), as had y and
    // z cost 0: T0 + 20 s, 4 of the burst of 5 left at T0 + 15 s (were z's 20 s subtracted, nothing)
    await limiter.settle(y, 0);
    expect(await limiter.limit("id", { cost: 0 })).toMatchObject({ remaining: 4, resetAt: T0 + 20_000 });
  });

  it("partly earned back: gives back only what it still holds, as if it had cost 0", async () => {
    // burst 3: the first takes 2 (TAT T0 + 20 s); at T0 + 15 s 1.5 of them are earned back, and 2 more
    // are taken (TAT T0 + 40 s). Had the first cost 0, the stream would be idle at T0 + 15 s, and the 2
    // would leave TAT at T0 + 35 s: 1 unit left. A settle to 0 gives back the 5 s the first still held.
    const three =
      rule.algorithm === "gcra"
        ? gcra({ limit: 1, period: 10_000, burst: 3 })
        : tokenBucket({ capacity: 3, refillRate: 1, interval: 10_000 });
    const { limiter, clock } = limiterOf(three);
    const first = await limiter.limit("id", { cost: 2 });
    clock.set(T0 + 15_000);
    const second = await limiter.limit("id", { cost: 2 });
    expect({ allowed: second.allowed, remaining: second.remaining }).toEqual({ allowed: true, remaining: 0 });
    await limiter.settle(first, 0);
    const after = await limiter.limit("id", { cost: 0 });
    expect({ remaining: after.remaining, resetAt: after.resetAt }).toEqual({
      remaining: 1,
      resetAt: T0 + 35_000,
    });
  });
});

describe("gcra, a fractional emission interval (3 per second: T = 333⅓ ms)", () => {
  const rule = gcra({ limit: 3, period: 1_000, burst: 3 });

  it("a prompt settle to 0 gives back both units exactly", async () => {
    const { limiter } = limiterOf(rule);
    const first = await limiter.limit("id", { cost: 2 }); // TAT T0 + 666⅔ ms, resetAt T0 + 667
    expect(first.resetAt).toBe(T0 + 667);
    await limiter.settle(first, 0);
    expect(await peek(limiter, "id")).toEqual({ allowed: true, remaining: 3 });
    expect((await limiter.limit("id", { cost: 3 })).allowed).toBe(true);
    expect((await limiter.limit("id")).allowed).toBe(false);
  });

  it("a late settle gives back exactly the 166⅔ ms still held: back to idle, not before", async () => {
    const { limiter, clock } = limiterOf(rule);
    const first = await limiter.limit("id", { cost: 2 });
    clock.set(T0 + 500);
    await limiter.settle(first, 0);
    const after = await limiter.limit("id", { cost: 0 });
    expect({ remaining: after.remaining, resetAt: after.resetAt }).toEqual({
      remaining: 3,
      resetAt: T0 + 500,
    });
    // 3 now, then the fourth waits a whole T: nothing was minted
    expect((await limiter.limit("id", { cost: 3 })).allowed).toBe(true);
    const fourth = await limiter.limit("id");
    expect({ allowed: fourth.allowed, retryAfter: fourth.retryAfter }).toEqual({
      allowed: false,
      retryAfter: 334,
    });
  });
});

describe.each([
  ["gcra", gcra({ limit: 30, period: "1m" })],
  ["tokenBucket", tokenBucket({ capacity: 30, refillRate: 1, interval: "2s" })],
] as [string, RuleConfig][])("%s, a lease's refund", (_, rule) => {
  /**
   * A leasing Limiter decides 4 units (at T0 .. T0 + 3 ms, T = 2 s), the 4th reserving 3 for its
   * lease: TAT T0 + 14 s. A Limiter without a lease (another isolate) shares its state.
   */
  async function leased() {
    const { limiter, make, clock } = limiterOf(rule, { lease: { max: 50, ttl: "1s" } });
    const plain = make({ lease: undefined });
    for (let i = 0; i < 4; i++) {
      await limiter.limit("hot");
      clock.set(clock.now + 1);
    }
    expect((await plain.limit("hot", { cost: 0 })).remaining).toBe(30 - 7);
    /** The leasing Limiter's next call, on another identifier: it gives the expired lease back. */
    const nextCall = async () => {
      const background: Promise<unknown>[] = [];
      await limiter.limit("other", { waitUntil: (p) => void background.push(p) });
      expect(background.length).toBe(1);
      await Promise.all(background);
    };
    return { plain, clock, nextCall };
  }

  it("after its units were earned back: gives nothing back", async () => {
    const { plain, clock, nextCall } = await leased();
    clock.set(T0 + 20_000); // idle: all 7 earned back
    expect((await plain.limit("hot", { cost: 30 })).allowed).toBe(true);
    await nextCall();
    expect(await peek(plain, "hot")).toEqual({ allowed: false, remaining: 0 });
  });

  it("partly earned back: gives back what they still hold, as if never reserved", async () => {
    const { plain, clock, nextCall } = await leased();
    clock.set(T0 + 10_000); // 2 of the 7 still held (TAT T0 + 14 s): 28 left
    expect((await plain.limit("hot", { cost: 28 })).allowed).toBe(true);
    await nextCall();
    // had the 3 never been reserved, the stream would be idle at T0 + 10 s and 30 would pass
    expect(await peek(plain, "hot")).toEqual({ allowed: true, remaining: 2 });
    expect((await plain.limit("hot", { cost: 2 })).allowed).toBe(true);
    expect((await plain.limit("hot")).allowed).toBe(false);
  });
});

describe.each([
  ["gcra", gcra({ limit: 30, period: "1m" })],
  ["tokenBucket", tokenBucket({ capacity: 30, refillRate: 1, interval: "2s" })],
] as [string, RuleConfig][])("%s, a lease's refund after another refund", (_, rule) => {
  it("gives back only what its units still hold, less what the other gave back since it reserved", async () => {
    const { limiter, make, clock } = limiterOf(rule, { lease: { max: 50, ttl: "1s" } });
    const plain = make({ lease: undefined });
    const x = await plain.limit("hot", { cost: 5 }); // T = 2 s: TAT T0 + 10 s
    for (let i = 0; i < 4; i++) {
      await limiter.limit("hot"); // the 4th reserves 3 for the lease at T0 + 3 ms: TAT T0 + 24 s
      clock.set(clock.now + 1);
    }
    expect((await peek(plain, "hot")).remaining).toBe(30 - 12);
    clock.set(T0 + 5_000);
    await plain.settle(x, 0); // x's units hold 5 s: TAT T0 + 19 s
    clock.set(T0 + 17_000); // the lease's 3 units now hold 2 s (1 unit), not the 7 s to T0 + 24 s
    expect(await peek(plain, "hot")).toEqual({ allowed: true, remaining: 29 });
    expect((await plain.limit("hot", { cost: 29 })).allowed).toBe(true);
    const background: Promise<unknown>[] = [];
    await limiter.limit("other", { waitUntil: (p) => void background.push(p) }); // the expired lease goes back
    expect(background.length).toBe(1);
    await Promise.all(background);
    // had the 3 never been reserved, 30 would have passed at T0 + 17 s: 1 more, not 3
    expect(await peek(plain, "hot")).toEqual({ allowed: true, remaining: 1 });
    expect((await plain.limit("hot")).allowed).toBe(true);
    expect((await plain.limit("hot")).allowed).toBe(false);
  });

  it("a rollback right after its reservation gives back all it took, whatever refunds came before", async () => {
    const { limiter, make, clock } = limiterOf(rule, { lease: { max: 50, ttl: "1s" } });
    const plain = make({ lease: undefined });
    const x = await plain.limit("hot", { cost: 20 }); // TAT T0 + 40 s
    clock.set(T0 + 1_000);
    await plain.settle(x, 0); // 39 s back, more than the lease will hold: TAT T0 + 1 s
    for (let i = 0; i < 4; i++) {
      await limiter.limit("hot"); // the 4th reserves 3: TAT T0 + 15 s
      clock.set(clock.now + 1);
    }
    expect((await peek(plain, "hot")).remaining).toBe(30 - 7);
    await limiter.dispose(); // the 3 unused go back at once, all of them
    expect((await peek(plain, "hot")).remaining).toBe(30 - 4);
  });
});

describe.each([
  ["gcra", gcra({ limit: 30, period: "1m" })],
  ["tokenBucket", tokenBucket({ capacity: 30, refillRate: 1, interval: "2s" })],
] as [string, RuleConfig][])("%s, a regional pool's refund after another refund", (_, rule) => {
  // The region's database is the shared one (a pool key is never a rule's key): isolates with
  // `region` share a pool, the plain Limiter stands for home alone. T = 2 s.
  const region = () => ({ region: { redis: bridgeRedis(), pool: { max: 50, ttl: "1s" } } });

  /** Runs `call` with a waitUntil and awaits everything it handed over (deposits, refunds). */
  async function settled(call: (waitUntil: (p: Promise<unknown>) => void) => Promise<unknown>) {
    const background: Promise<unknown>[] = [];
    await call((p) => void background.push(p));
    while (background.length > 0) await Promise.all(background.splice(0));
  }

  /**
   * x takes 5 at home (TAT T0 + 10 s); an isolate with a pool decides 6, then 1 at T0 + 1 ms, which
   * reserves 6 for the pool (the region's demand): TAT T0 + 36 s. At T0 + 5 s x settles to 0 (5 s
   * back: T0 + 31 s).
   */
  async function pooled(lease?: { max: number; ttl: string }) {
    const { make, clock } = limiterOf(rule);
    const plain = make();
    const depositor = make(region());
    const x = await plain.limit("hot", { cost: 5 });
    await settled((waitUntil) => depositor.limit("hot", { cost: 6, waitUntil }));
    clock.set(T0 + 1);
    await settled((waitUntil) => depositor.limit("hot", { waitUntil }));
    expect(await peek(plain, "hot")).toEqual({ allowed: true, remaining: 30 - 18 });
    const leasing = make({ ...region(), lease });
    return { plain, depositor, leasing, clock, settleX: () => plain.settle(x, 0) };
  }

  it("gives back only what the pool's units still hold, less what the other gave back since", async () => {
    const { plain, depositor, clock, settleX } = await pooled();
    clock.set(T0 + 5_000);
    await settleX();
    clock.set(T0 + 29_000); // the 6 pooled units now hold 2 s (1 unit), not the 7 s to T0 + 36 s
    expect(await peek(plain, "hot")).toEqual({ allowed: true, remaining: 29 });
    expect((await plain.limit("hot", { cost: 29 })).allowed).toBe(true);
    // the depositing isolate's next call takes the expired pool's 6 out and gives them back
    await settled((waitUntil) => depositor.limit("other", { waitUntil }));
    // had the 6 never been reserved, 30 would have passed at T0 + 29 s: 1 more, not 6
    expect(await peek(plain, "hot")).toEqual({ allowed: true, remaining: 1 });
    expect((await plain.limit("hot")).allowed).toBe(true);
    expect((await plain.limit("hot")).allowed).toBe(false);
  });

  it("a lease filled from the pool and the pool's leftover give back, between them, what their units hold", async () => {
    const { plain, depositor, leasing, clock, settleX } = await pooled({ max: 50, ttl: "1s" });
    clock.set(T0 + 2);
    // the pool answers 2 (4 left); then 1, and 2 more for the lease (1 left)
    const first = await leasing.limit("hot", { cost: 2 });
    clock.set(T0 + 3);
    await settled((waitUntil) => leasing.limit("hot", { waitUntil }));
    expect({ source: first.source, remaining: first.remaining }).toEqual({ source: "region", remaining: 16 });
    clock.set(T0 + 5_000);
    await settleX();
    clock.set(T0 + 27_000); // 3 of the 6 went to decisions: TAT T0 + 31 s holds 2 units; as never reserved, 0
    expect(await peek(plain, "hot")).toEqual({ allowed: true, remaining: 28 });
    expect((await plain.limit("hot", { cost: 28 })).allowed).toBe(true);
    await settled((waitUntil) => depositor.limit("other", { waitUntil })); // the pool's 1 goes back
    await settled((waitUntil) => leasing.limit("another", { waitUntil })); // the lease's 2 go back
    // had the 3 unused never been reserved, 30 would have passed at T0 + 27 s: 2 more, not 3
    expect(await peek(plain, "hot")).toEqual({ allowed: true, remaining: 2 });
    expect((await plain.limit("hot", { cost: 2 })).allowed).toBe(true);
    expect((await plain.limit("hot")).allowed).toBe(false);
  });
});
