// The tier at both levels of the lease tree, with no Redis: the isolate tier (units in memory) and the
// regional tier (units in the region's database) against fake home scripts, a scripted upstream and a
// fake pool script, with the clock moved by hand, each driven through its public calls (the isolate
// tier's `decide`, as the Limiter calls it). Exact numbers: every unit is accounted for. One table runs
// the pool script itself (the shared bridge): its sizing against the one the isolate tier uses.
import { describe, expect, it } from "vitest";
import { compileRule, fixedWindow, gcra, type Rule } from "../../src/engine/algorithms/index.js";
import { RedisCallError } from "../../src/engine/errors.js";
import { RuleKeys } from "../../src/engine/keys.js";
import {
  type Applied,
  type Origin,
  type PlanEncoding,
  type Reservation,
  UNKNOWN,
} from "../../src/engine/scripts/limiter.js";
import { type Deposit, type PoolPut, PoolScript, type PoolTake } from "../../src/engine/scripts/pool.js";
import {
  estimate,
  Home,
  type HomeScripts,
  MAX_TRACKED,
  mostRecent,
  topUpSize,
  withHeld,
} from "../../src/engine/tier.js";
import { IsolateTier } from "../../src/engine/tier-isolate.js";
import { type PoolStore, RegionalTier, RegionalTiers } from "../../src/engine/tier-region.js";
import { transportFor } from "../../src/engine/transport.js";
import { carrierOf, type Decision, decidedBy } from "../../src/engine/types.js";
import { bridgeRedis, sharedBridge, uniquePrefix } from "../support.js";

/** The start of a minute: a fixed window of 1m starts here. */
const T0 = 1_700_000_040_000;
const MINUTE = 60_000;

const perMinute = compileRule("perMinute", fixedWindow({ limit: 100, window: "1m" }));
/** The plan's rules: one array, as a Limiter's decisions carry them (a lease compares them by identity). */
const RULES: readonly Rule[] = [perMinute];

function encoding(rules: readonly Rule[], name = "default"): PlanEncoding {
  return {
    name,
    rules,
    keys: new RuleKeys("t", rules),
    carrier: carrierOf(rules),
    args: [],
    one: undefined,
    count: String(rules.length),
  };
}

/** An admission of one fixed-window rule with `remaining` left, decided at `now`. */
function admission(rules: readonly Rule[], remaining: number, now: number, plan = "default"): Decision {
  const rule = rules[0]!;
  const outcome = { allowed: true, limit: rule.limit, remaining, resetAt: T0 + MINUTE, retryAfter: 0 };
  const decision: Decision = {
    ...outcome,
    rule: rule.name,
    source: "redis",
    plan,
    decidedAt: now,
    rules: { [rule.name]: outcome },
  };
  return decidedBy(decision, rules);
}

function denial(rules: readonly Rule[], now: number): Decision {
  const rule = rules[0]!;
  const outcome = {
    allowed: false,
    limit: rule.limit,
    remaining: 0,
    resetAt: T0 + MINUTE,
    retryAfter: T0 + MINUTE - now,
  };
  const decision: Decision = {
    ...outcome,
    rule: rule.name,
    source: "redis",
    plan: "default",
    decidedAt: now,
    rules: { [rule.name]: outcome },
  };
  return decidedBy(decision, rules);
}

interface Refunded {
  identifier: string;
  units: number;
  countedAt: readonly number[];
  now: number;
  applied: Applied;
  origin: Origin;
}

/**
 * Home as a fixed window of `limit` a minute: a reservation takes the cost and at most half of what
 * is left after it (the limiter script's rule); a refund gives units back to the window they name.
 */
function fakeHome(limit = 100) {
  let used = 0;
  let windowStart = T0;
  const reserves: [string, number, number, number][] = [];
  const decides: [string, number, number][] = [];
  const refunds: Refunded[] = [];
  const take = (cost: number, want: number, now: number): Reservation => {
    const start = now - (now % MINUTE);
    if (start !== windowStart) {
      windowStart = start;
      used = 0;
    }
    const left = limit - used;
    if (cost > left) return { decision: denial(RULES, now), reserved: 0, countedAt: [0] };
    const reserved = Math.min(want, Math.floor((left - cost) / 2));
    used += cost + reserved;
    return { decision: admission(RULES, limit - used, now), reserved, countedAt: [start] };
  };
  const scripts = {
    decide(identifier: string, cost: number, now: number, then: (d: Decision | Error) => unknown) {
      decides.push([identifier, cost, now]);
      return Promise.resolve(then(take(cost, 0, now).decision));
    },
    reserve(identifier: string, cost: number, now: number, want: number) {
      reserves.push([identifier, cost, now, want]);
      return Promise.resolve(take(cost, want, now));
    },
    refund(
      identifier: string,
      units: number,
      countedAt: readonly number[],
      now: number,
      applied: Applied,
      origin: Origin,
    ) {
      refunds.push({ identifier, units, countedAt, now, applied, origin });
      if (countedAt[0] === windowStart) used -= units;
      return Promise.resolve(true);
    },
  } as unknown as HomeScripts;
  return { scripts, reserves, decides, refunds, used: () => used };
}

/**
 * The isolate tier's step of the pipeline: its lease's answer, or upstream's with the lease filled.
 * Every test drives the tier through it, as the Limiter does.
 */
function decide(
  tier: IsolateTier,
  identifier: string,
  cost: number,
  now: number,
  waitUntil?: (promise: Promise<unknown>) => void,
): Promise<Decision> {
  const leased = tier.fromLease(identifier, cost, now, waitUntil);
  return (
    leased === undefined ? tier.decide(identifier, cost, now, waitUntil) : Promise.resolve(leased)
  ).then((answer) => {
    if (answer.decision === undefined) throw answer.error;
    return answer.decision;
  });
}

/**
 * An upstream (a regional tier, or home) whose answers the test gives, one a call, in order, and that
 * records what it was asked: [identifier, cost, now, want].
 */
function scriptedUpstream() {
  const asked: [string, number, number, number][] = [];
  const answers: Reservation[] = [];
  const upstream = {
    reserve(identifier: string, cost: number, now: number, want: number) {
      asked.push([identifier, cost, now, want]);
      const reservation = answers.shift();
      if (reservation === undefined) throw new Error(`upstream: no answer given for ${identifier} at ${now}`);
      return Promise.resolve({ decision: reservation.decision, reservation });
    },
  };
  return { upstream, asked, answers };
}

describe("the demand estimate", () => {
  it("counts units seen over the last ttl, the older bucket weighted by its overlap", () => {
    const demand = { start: T0, current: 0, previous: 0 };
    demand.current = 40;
    expect(estimate(demand, T0 + 999, 1000)).toBe(40);
    // a ttl later the 40 are the previous bucket, counted for the part of the ttl still behind now
    expect(estimate(demand, T0 + 1250, 1000)).toBe(30);
    expect(demand).toEqual({ start: T0 + 1000, current: 0, previous: 40 });
    demand.current = 8;
    expect(estimate(demand, T0 + 1750, 1000)).toBe(18);
    // two ttls of silence forget everything
    expect(estimate(demand, T0 + 4000, 1000)).toBe(0);
    expect(demand).toEqual({ start: T0 + 4000, current: 0, previous: 0 });
  });
});

describe("the isolate tier (units in memory)", () => {
  it("sizes a lease by the demand it saw, and answers from it with home's numbers minus what it used", async () => {
    const fake = fakeHome();
    const home = new Home(fake.scripts, encoding(RULES));
    const tier = new IsolateTier({ max: 10, ttl: 1000 }, home, home, () => T0);
    const answers: [string, number][] = [];
    for (let i = 0; i < 5; i++) {
      const d = await decide(tier, "a", 1, T0 + i);
      answers.push([d.source, d.remaining]);
    }
    // 1: seen once, no lease. 2: one unit seen before, a lease of 1 (remaining 97 at home, 98 told).
    // 3: from the lease, which runs dry. 4: three seen, a lease of 3. 5: from it.
    expect(answers).toEqual([
      ["redis", 99],
      ["redis", 98],
      ["lease", 97],
      ["redis", 96],
      ["lease", 95],
    ]);
    // the first wants nothing: home's plain decision (a one-rule script where one serves)
    expect(fake.decides).toEqual([["a", 1, T0]]);
    expect(fake.reserves).toEqual([
      ["a", 1, T0 + 1, 1],
      ["a", 1, T0 + 3, 3],
    ]);
    expect(fake.used()).toBe(7);
    expect(tier.stats).toMatchObject({ reserved: 4, answered: 2 });
    expect(tier.size).toBe(1);
    await tier.dispose();
    // the 2 units left go back to the window they were counted in
    expect(fake.refunds).toEqual([
      {
        identifier: "a",
        units: 2,
        countedAt: [T0],
        now: T0,
        applied: { name: "default", rules: RULES },
        // the reservation of the lease's 3
        origin: { at: T0 + 3, taken: 3 },
      },
    ]);
    expect(fake.used()).toBe(5);
    // disposed, it leases no more: a warm identifier's next decision is home's plain one
    expect(await decide(tier, "a", 1, T0 + 10)).toMatchObject({ source: "redis", remaining: 94 });
    expect(fake.decides).toEqual([
      ["a", 1, T0],
      ["a", 1, T0 + 10],
    ]);
    expect(fake.reserves).toHaveLength(2);
  });

  it("ends a lease with the window its units were counted in, and gives them back to that window", async () => {
    const fake = fakeHome();
    const home = new Home(fake.scripts, encoding(RULES));
    const { upstream, asked, answers } = scriptedUpstream();
    let now = T0 + 55_000;
    const tier = new IsolateTier({ max: 10, ttl: 10_000 }, home, upstream, () => now);
    const waited: Promise<unknown>[] = [];
    const waitUntil = (p: Promise<unknown>) => void waited.push(p);
    answers.push({ decision: admission(RULES, 90, now), reserved: 5, countedAt: [T0] });
    // told home's 90 and the 5 the lease now holds
    expect(await decide(tier, "a", 1, now, waitUntil)).toMatchObject({ source: "redis", remaining: 95 });
    now = T0 + MINUTE - 1; // a ttl would reach past the window's end
    expect(await decide(tier, "a", 1, now, waitUntil)).toMatchObject({ source: "lease", remaining: 94 });
    now = T0 + MINUTE;
    answers.push({ decision: admission(RULES, 98, now), reserved: 0, countedAt: [now] });
    expect(await decide(tier, "a", 1, now, waitUntil)).toMatchObject({ source: "redis", remaining: 98 });
    expect(asked.map(([, , at]) => at)).toEqual([T0 + 55_000, T0 + MINUTE]);
    expect(tier.size).toBe(0);
    await Promise.all(waited);
    expect(fake.refunds).toEqual([
      {
        identifier: "a",
        units: 4,
        countedAt: [T0],
        now: T0 + MINUTE,
        applied: { name: "default", rules: RULES },
        origin: { at: T0 + 55_000, taken: 5 },
      },
    ]);
    expect(tier.stats).toMatchObject({ refunded: 4, refundsFailed: 0 });
  });

  it("gives units back under the rules they were reserved under: an override's, not the plan's", async () => {
    const fake = fakeHome();
    const home = new Home(fake.scripts, encoding(RULES));
    const { upstream, answers } = scriptedUpstream();
    const tier = new IsolateTier({ max: 10, ttl: 1000 }, home, upstream, () => T0 + 10);
    const custom = [compileRule("perMinute", fixedWindow({ limit: 50, window: "1m" }))];
    answers.push({ decision: admission(custom, 40, T0, "custom"), reserved: 6, countedAt: [T0] });
    expect(await decide(tier, "a", 1, T0)).toMatchObject({ plan: "custom", remaining: 46 });
    const leased = await decide(tier, "a", 1, T0 + 1);
    expect(leased).toMatchObject({ source: "lease", plan: "custom", limit: 50, remaining: 45 });
    expect(leased.decidedBy).toBe(custom);
    await tier.takeOut((id) => id === "a", true, T0 + 10);
    await tier.dispose();
    expect(fake.refunds).toHaveLength(1);
    expect(fake.refunds[0]).toMatchObject({ units: 5, countedAt: [T0], now: T0 + 10 });
    expect(fake.refunds[0]!.applied.name).toBe("custom");
    expect(fake.refunds[0]!.applied.rules).toBe(custom);
  });

  it("takes back another plan's expired lease at a decision under this one (no timer with waitUntil)", async () => {
    const fake = fakeHome();
    const all: IsolateTier[] = [];
    let now = T0 + 1000;
    const { upstream, answers } = scriptedUpstream();
    const base = new IsolateTier(
      { max: 10, ttl: 1000 },
      new Home(fake.scripts, encoding(RULES)),
      upstream,
      () => now,
      Number.POSITIVE_INFINITY,
      all,
    );
    const pro = new IsolateTier(
      { max: 10, ttl: 1000 },
      new Home(fake.scripts, encoding(RULES, "pro")),
      upstream,
      () => now,
      Number.POSITIVE_INFINITY,
      all,
    );
    const waited: Promise<unknown>[] = [];
    const waitUntil = (p: Promise<unknown>) => void waited.push(p);
    // "a" under pro: seen once, then a lease of 4
    answers.push({ decision: admission(RULES, 90, now, "pro"), reserved: 0, countedAt: [T0] });
    await decide(pro, "a", 1, now, waitUntil);
    answers.push({ decision: admission(RULES, 85, now, "pro"), reserved: 4, countedAt: [T0] });
    await decide(pro, "a", 1, now, waitUntil);
    expect(pro.size).toBe(1);
    // past its expiry, only base's identifiers are decided: base takes pro's lease back
    now += 1000;
    answers.push({ decision: admission(RULES, 84, now), reserved: 0, countedAt: [T0] });
    await decide(base, "b", 1, now, waitUntil);
    await Promise.all(waited);
    expect(pro.size).toBe(0);
    expect(fake.refunds.map((r) => [r.identifier, r.units, r.applied.name, r.now])).toEqual([
      ["a", 4, "pro", now],
    ]);
  });

  it("a waitUntil that throws loses nothing: the decision stands, the lease's refund still goes", async () => {
    const fake = fakeHome();
    const home = new Home(fake.scripts, encoding(RULES));
    let now = T0 + 1000;
    const tier = new IsolateTier({ max: 10, ttl: 1000 }, home, home, () => now);
    const throwing = () => {
      throw new Error("waitUntil() called after the response");
    };
    const seen: string[] = [];
    for (let i = 0; i < 4; i++) seen.push((await decide(tier, "a", 1, now, throwing)).source);
    // 2: a lease of 1 (top-ups go through waitUntil); 3 from it
    expect(seen).toEqual(["redis", "redis", "lease", "redis"]);
    const held = fake.used() - 4;
    expect(held).toBeGreaterThan(0);
    // its expiry's sweep hands the refund to the throwing waitUntil: it is sent all the same
    now += 1000;
    expect((await decide(tier, "b", 1, now, throwing)).source).toBe("redis");
    await tier.dispose();
    expect(fake.refunds.map((r) => [r.identifier, r.units])).toEqual([["a", held]]);
    expect(fake.used()).toBe(5);
  });

  it("a lease of units a regional pool lent ends with the pool's deposit, however long its ttl", async () => {
    const fake = fakeHome();
    const home = new Home(fake.scripts, encoding(RULES));
    const { upstream, answers } = scriptedUpstream();
    let now = T0 + 1000;
    const tier = new IsolateTier({ max: 10, ttl: 5000 }, home, upstream, () => now);
    const waited: Promise<unknown>[] = [];
    const waitUntil = (p: Promise<unknown>) => void waited.push(p);
    const from = { at: T0 + 500, taken: 4 };
    // the pool's deposit (decided at home at +500) is handed out until +1200
    const pooled = (remaining: number) => ({
      ...admission(RULES, remaining, now),
      source: "region" as const,
    });
    answers.push({ decision: pooled(90), reserved: 0, countedAt: [T0], from, until: T0 + 1200 });
    await decide(tier, "a", 1, now, waitUntil);
    answers.push({ decision: pooled(89), reserved: 4, countedAt: [T0], from, until: T0 + 1200 });
    await decide(tier, "a", 1, now, waitUntil);
    now = T0 + 1199;
    expect(await decide(tier, "a", 1, now, waitUntil)).toMatchObject({ source: "lease" });
    // at the deposit's end the lease is over (its ttl would have run to +6000): its 3 units go back
    now = T0 + 1200;
    answers.push({ decision: admission(RULES, 85, now), reserved: 0, countedAt: [T0] });
    expect(await decide(tier, "a", 1, now, waitUntil)).toMatchObject({ source: "redis" });
    await Promise.all(waited);
    expect(fake.refunds.map((r) => [r.units, r.origin])).toEqual([[3, from]]);
  });

  it("drops the lease on a denial and gives its units back", async () => {
    const fake = fakeHome();
    const home = new Home(fake.scripts, encoding(RULES));
    const { upstream, asked, answers } = scriptedUpstream();
    const tier = new IsolateTier({ max: 10, ttl: 1000 }, home, upstream, () => T0);
    answers.push({ decision: admission(RULES, 90, T0), reserved: 5, countedAt: [T0] });
    await decide(tier, "a", 1, T0);
    expect(await decide(tier, "a", 1, T0 + 1)).toMatchObject({ source: "lease" });
    expect(await decide(tier, "a", 1, T0 + 2)).toMatchObject({ source: "lease" });
    // a cost the lease cannot cover passes on (asking for no units beside: a lease still holds 3), and
    // home denies it
    const d = denial(RULES, T0 + 3);
    answers.push({ decision: d, reserved: 0, countedAt: [0] });
    expect(await decide(tier, "a", 4, T0 + 3)).toBe(d);
    expect(asked.at(-1)).toEqual(["a", 4, T0 + 3, 0]);
    expect(tier.size).toBe(0);
    await tier.dispose();
    expect(fake.refunds.map((r) => [r.units, r.now])).toEqual([[3, T0 + 3]]);
  });

  it("tops a hot lease up from its upstream before it runs dry, off the request path", async () => {
    const fake = fakeHome();
    const home = new Home(fake.scripts, encoding(RULES));
    const { upstream, asked, answers } = scriptedUpstream();
    const T = T0 + 1000;
    const tier = new IsolateTier({ max: 8, ttl: 1000 }, home, upstream, () => T);
    // 15 decisions upstream that spare nothing, then one that reserves the 8 it asks for
    for (let i = 0; i < 15; i++)
      answers.push({ decision: admission(RULES, 75 - i, T + i), reserved: 0, countedAt: [T0] });
    answers.push({ decision: admission(RULES, 60, T + 15), reserved: 8, countedAt: [T0] });
    for (let i = 0; i < 16; i++) expect(await decide(tier, "a", 1, T + i)).toMatchObject({ source: "redis" });
    // each asks for the units seen before it (none for an identifier seen once), at most max
    expect(asked.map(([, , , want]) => want)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 8, 8, 8, 8, 8, 8]);
    const waited: Promise<unknown>[] = [];
    const waitUntil = (p: Promise<unknown>) => void waited.push(p);
    answers.push({ decision: admission(RULES, 50, T + 21), reserved: 5, countedAt: [T0] });
    const remaining: number[] = [];
    for (let i = 16; i <= 21; i++) remaining.push((await decide(tier, "a", 1, T + i, waitUntil)).remaining);
    expect(remaining).toEqual([67, 66, 65, 64, 63, 62]);
    // at 2 units left (a quarter of max; an eighth of 21 seen is more), a decision of cost 1 asks for
    // about a ttl's traffic: min(8, 21) - 2 held - its own 1 = 5
    expect(asked.slice(16)).toEqual([["a", 1, T + 21, 5]]);
    expect(waited).toHaveLength(1);
    await Promise.all(waited);
    // its unit and the 5 join the lease (8 units), told from the top-up's answer: 50 + 8 held
    expect(await decide(tier, "a", 1, T + 22)).toMatchObject({ source: "lease", remaining: 57 });
    expect(tier.stats).toMatchObject({ reserved: 14, answered: 7 });
    expect(fake.reserves).toEqual([]);
  });

  it("charges an answer's difference against its lease, or says where its units were counted", async () => {
    const fake = fakeHome();
    const home = new Home(fake.scripts, encoding(RULES));
    const { upstream, answers } = scriptedUpstream();
    const tier = new IsolateTier({ max: 10, ttl: 1000 }, home, upstream, () => T0);
    answers.push({ decision: admission(RULES, 90, T0), reserved: 5, countedAt: [T0] });
    await decide(tier, "a", 1, T0);
    const answer = tier.fromLease("a", 2, T0 + 1)!; // 3 left
    expect(answer.decision?.source).toBe("lease");
    expect(answer.absorber).toBe(tier);
    expect(tier.charge("a", answer, -1, T0 + 2)).toBe(true); // 4 left
    expect(tier.charge("a", answer, 3, T0 + 3)).toBe(true); // 1 left
    expect(tier.charge("a", answer, 2, T0 + 4)).toBe(false); // more than it holds: home settles it
    expect(answer.held?.countedAt).toEqual([T0]);
    // a lease that is not the identifier's takes nothing
    expect(tier.charge("b", answer, -1, T0 + 4)).toBe(false);
    expect(await decide(tier, "a", 1, T0 + 5)).toMatchObject({ source: "lease" });
    expect(tier.size).toBe(0);
    // nor one that ran dry
    expect(tier.charge("a", answer, -1, T0 + 5)).toBe(false);
    await tier.dispose();
    expect(fake.refunds).toEqual([]);
  });

  it("holds nothing under a sliding log, nor with maxStale 0", async () => {
    const fake = fakeHome();
    const log = compileRule("log", { algorithm: "slidingLog", limit: 100, window: 60_000 });
    const logged = new IsolateTier(
      { max: 10, ttl: 1000 },
      new Home(fake.scripts, encoding([log])),
      new Home(fake.scripts, encoding([log])),
      () => T0,
    );
    const home = new Home(fake.scripts, encoding(RULES));
    const fresh = new IsolateTier({ max: 10, ttl: 1000 }, home, home, () => T0, 0);
    for (const tier of [logged, fresh]) {
      for (let i = 0; i <= 10; i++) await decide(tier, "a", 1, T0 + i);
    }
    // a warm identifier's decisions ask for no units: every one is home's plain decision
    expect(fake.reserves).toEqual([]);
    expect(fake.decides).toHaveLength(22);
  });

  it("a lease under gcra ends a ttl on, whatever its TAT", async () => {
    const fake = fakeHome();
    const rate = compileRule("rate", gcra({ limit: 10, period: "1s" }));
    const home = new Home(fake.scripts, encoding([rate]));
    const { upstream, answers } = scriptedUpstream();
    const tier = new IsolateTier({ max: 10, ttl: 1000 }, home, upstream, () => T0);
    answers.push({ decision: admission([rate], 5, T0), reserved: 3, countedAt: [T0 + 800] });
    await decide(tier, "a", 1, T0);
    expect(await decide(tier, "a", 1, T0 + 999)).toMatchObject({ source: "lease" });
    answers.push({ decision: admission([rate], 9, T0 + 1000), reserved: 0, countedAt: [T0 + 1100] });
    expect(await decide(tier, "a", 1, T0 + 1000)).toMatchObject({ source: "redis" });
  });

  it("a lease filled from a pool gives its units back with the part of the pool's reservation they came with", async () => {
    const fake = fakeHome();
    const home = new Home(fake.scripts, encoding(RULES));
    const { upstream, answers } = scriptedUpstream();
    const tier = new IsolateTier({ max: 5, ttl: 1000 }, home, upstream, () => T0 + 10);
    const fromPool: Decision = { ...admission(RULES, 50, T0), source: "region" };
    const from = { at: T0 - 100, taken: 2 };
    answers.push({ decision: fromPool, reserved: 3, countedAt: [T0], from });
    // a second decision, passed on before the first came back, whose reservation at home crosses it
    answers.push({ decision: admission(RULES, 40, T0 + 5), reserved: 4, countedAt: [T0] });
    await Promise.all([decide(tier, "a", 1, T0), decide(tier, "a", 1, T0 + 5)]);
    // 2 join the pool's 3 (their part: 2 of home's 4), 2 go back
    await tier.dispose();
    expect(fake.refunds.map((refund) => [refund.units, refund.origin])).toEqual([
      [2, { at: T0 + 5, taken: 2 }],
      // the lease counts from the earlier reservation, the pool's
      [5, from],
    ]);
  });
});

/** A pool's miss: `reserve` for it at home, `units` taken out (counted at `countedAt`) for a refund. */
function miss(
  reserve: number,
  units = 0,
  countedAt: readonly number[] = [0],
  origin: Origin = UNKNOWN,
): PoolTake {
  return { hit: false, pooled: 0, reserve, snapshot: [], units, countedAt, origin };
}

/** A pool script whose replies the test gives, one a call, and that records what it was asked. */
function fakePool() {
  const calls: unknown[][] = [];
  const takes: (PoolTake | Error)[] = [];
  const puts: (PoolPut | Error)[] = [];
  const pool: PoolStore = {
    take(key: string, cost: number, now: number, rules: number, extra?: number) {
      calls.push(["take", key, cost, now, rules, extra ?? 0]);
      return Promise.resolve(takes.shift() ?? miss(0));
    },
    drain(key: string, now: number) {
      calls.push(["drain", key, now]);
      return Promise.resolve(miss(0));
    },
    put(key: string, deposit: Deposit, now: number) {
      calls.push(["put", key, deposit, now]);
      return Promise.resolve(
        puts.shift() ?? {
          units: deposit.units,
          leftover: 0,
          leftoverCountedAt: [0],
          leftoverOrigin: UNKNOWN,
          excess: 0,
        },
      );
    },
    free(key: string, asked: number) {
      calls.push(["free", key, asked]);
      return Promise.resolve(true);
    },
  };
  return { pool, calls, takes, puts };
}

describe("the regional tier (units in the region's database)", () => {
  const KEY = "t:{=a}:pool.default";

  it("passes a pool's reservation on with what it takes out, lends, or cannot keep", async () => {
    const { fake, pool, tier } = regional();
    const T = T0 + 1000;
    const snapshot = [{ remaining: 40, resetAt: T0 + MINUTE }];
    const lent = { at: T0 + 10, taken: 2 };
    pool.takes.push({
      hit: true,
      pooled: 3,
      reserve: 0,
      snapshot,
      units: 2,
      countedAt: [T0],
      origin: lent,
    });
    expect((await tier.reserve("a", 1, T, 2)).reservation!.from).toEqual(lent);
    // a miss: home reserves 6 for the pool at T; the deposit finds 3 of another window (reserved at
    // T0 - 5) and keeps 4 of the 6 (max)
    pool.takes.push(miss(6));
    const old = { at: T0 - 5, taken: 4 };
    pool.puts.push({
      leftover: 3,
      leftoverCountedAt: [T0 - MINUTE],
      leftoverOrigin: old,
      excess: 2,
    });
    const waited: Promise<unknown>[] = [];
    await tier.reserve("a", 1, T, 0, (p) => void waited.push(p));
    await Promise.all(waited);
    expect((pool.calls[2]![2] as Deposit).origin).toEqual({ at: T, taken: 6 });
    // past its expiry, a miss takes out 5 reserved at T0 + 10, 1 of them its own
    pool.takes.push(miss(0, 5, [T0], { at: T0 + 10, taken: 1 }));
    await tier.reserve("a", 1, T + 6000, 0, (p) => void waited.push(p));
    await Promise.all(waited);
    expect(fake.refunds.map((refund) => [refund.units, refund.origin])).toEqual([
      [3, old],
      [2, { at: T, taken: 2 }],
      [5, { at: T0 + 10, taken: 1 }],
    ]);
  });

  function regional(now = T0 + 1000, config = { max: 20, ttl: 5000 }) {
    const fake = fakeHome();
    const pool = fakePool();
    const home = new Home(fake.scripts, encoding(RULES));
    const clock = { now };
    const tier = new RegionalTier(pool.pool, config, home, new RegionalTiers(), () => clock.now);
    return { fake, pool, tier, clock };
  }

  it("answers from the pool: home's remaining as of the deposit plus what the pool holds, and the lease's share", async () => {
    const { fake, pool, tier } = regional();
    const T = T0 + 1000;
    pool.takes.push({
      hit: true,
      pooled: 7,
      reserve: 0,
      snapshot: [{ remaining: 40, resetAt: T0 + MINUTE }],
      units: 2,
      countedAt: [T0],
      origin: UNKNOWN,
    });
    const answer = (await tier.reserve("a", 1, T, 3)).reservation!;
    expect(answer.decision).toEqual({
      allowed: true,
      limit: 100,
      remaining: 47,
      resetAt: T0 + MINUTE,
      retryAfter: 0,
      rule: "perMinute",
      source: "region",
      plan: "default",
      decidedAt: T,
      rules: { perMinute: { allowed: true, limit: 100, remaining: 47, resetAt: T0 + MINUTE, retryAfter: 0 } },
    });
    expect(answer.decision.decidedBy).toEqual(RULES);
    expect(answer.reserved).toBe(2);
    expect(answer.countedAt).toEqual([T0]);
    expect(answer.from).toEqual(UNKNOWN);
    expect(pool.calls).toEqual([["take", KEY, 1, T, 1, 3]]);
    expect(fake.reserves).toEqual([]);
    expect(tier.stats).toMatchObject({ hits: 1, misses: 0 });
  });

  it("on a miss passes on home, reserving the pool's want beside the lease's, and deposits the pool's share", async () => {
    const { fake, pool, tier } = regional();
    const T = T0 + 1000;
    pool.takes.push(miss(6));
    const waited: Promise<unknown>[] = [];
    const answer = (await tier.reserve("a", 1, T, 3, (p) => void waited.push(p))).reservation!;
    // home took 1 + 9 (half of 99 is more): 90 left; 6 go to the pool, 3 up to the lease
    expect(fake.reserves).toEqual([["a", 1, T, 9]]);
    expect(answer.reserved).toBe(3);
    expect(answer.decision).toMatchObject({ source: "redis", remaining: 96 });
    await Promise.all(waited);
    expect(pool.calls[1]).toEqual([
      "put",
      KEY,
      {
        units: 6,
        expiresAt: T + 5000,
        countedAt: [T0],
        snapshot: [{ remaining: 90, resetAt: T0 + MINUTE }],
        // the pool's part of home's reservation: a refund of its units is bounded by them
        origin: { at: T, taken: 6 },
      },
      T,
    ]);
    expect(tier.stats).toMatchObject({ misses: 1, deposited: 6 });
  });

  it("clamps a deposit's expiry to the window its units were counted in", async () => {
    const T = T0 + 58_000;
    const { pool, tier } = regional(T);
    pool.takes.push(miss(4));
    const waited: Promise<unknown>[] = [];
    await tier.reserve("a", 1, T, 0, (p) => void waited.push(p));
    await Promise.all(waited);
    expect((pool.calls[1]![2] as Deposit).expiresAt).toBe(T0 + MINUTE);
  });

  it("refunds a pool's expired leftovers at home, in the windows they were counted in", async () => {
    const { fake, pool, tier } = regional();
    const T = T0 + 1000;
    pool.takes.push(miss(0, 4, [T0 - MINUTE]));
    const waited: Promise<unknown>[] = [];
    const answer = (await tier.reserve("a", 1, T, 0, (p) => void waited.push(p))).reservation!;
    // nothing to reserve for anyone: home's plain decision
    expect(fake.decides).toEqual([["a", 1, T]]);
    expect(answer).toMatchObject({ reserved: 0, decision: { source: "redis", remaining: 99 } });
    await Promise.all(waited);
    expect(fake.refunds.map((r) => [r.identifier, r.units, r.countedAt, r.now, r.applied.name])).toEqual([
      ["a", 4, [T0 - MINUTE], T, "default"],
    ]);
    expect(tier.stats).toMatchObject({ refunded: 4, refundsFailed: 0 });
  });

  it("passes on home as without a region when the region's database fails", async () => {
    const { fake, pool, tier } = regional();
    const T = T0 + 1000;
    pool.takes.push(new RedisCallError("timeout", "timed out"));
    pool.takes.push(new RedisCallError("timeout", "timed out"));
    await tier.reserve("a", 1, T, 0);
    await tier.reserve("a", 1, T, 5);
    expect(fake.decides).toEqual([["a", 1, T]]);
    expect(fake.reserves).toEqual([["a", 1, T, 5]]);
    expect(tier.stats).toMatchObject({ errors: 2, misses: 0, hits: 0 });
  });

  it("lets another isolate ask when home had nothing for the pool", async () => {
    const { fake, pool, tier } = regional();
    const T = T0 + 1000;
    const waited: Promise<unknown>[] = [];
    // 99 used: home denies a cost of 2
    await fake.scripts.reserve("b", 99, T, 0);
    pool.takes.push(miss(6));
    const answer = (await tier.reserve("a", 2, T, 0, (p) => void waited.push(p))).reservation!;
    expect(answer.decision.allowed).toBe(false);
    await Promise.all(waited);
    expect(pool.calls.slice(1)).toEqual([["free", KEY, T]]);
    expect(tier.stats.deposited).toBe(0);
  });

  it("tops a low pool up from home in the background, and takes back what it deposited once expired", async () => {
    const { fake, pool, tier, clock } = regional();
    const T = T0 + 1000;
    pool.takes.push({
      hit: true,
      pooled: 1,
      reserve: 5,
      snapshot: [{ remaining: 40, resetAt: T0 + MINUTE }],
      units: 0,
      countedAt: [T0],
      origin: UNKNOWN,
    });
    const waited: Promise<unknown>[] = [];
    const waitUntil = (p: Promise<unknown>) => void waited.push(p);
    await tier.reserve("a", 1, T, 0, waitUntil);
    await Promise.all(waited);
    // a decision of cost 1 reserving 5 more, all 6 for the pool
    expect(fake.reserves).toEqual([["a", 1, T, 5]]);
    expect((pool.calls[1]![2] as Deposit).units).toBe(6);
    expect(tier.stats).toMatchObject({ hits: 1, deposited: 6 });
    // at the deposit's expiry the next decision first asks the pool for nothing, taking its leftovers out
    clock.now = T + 5000;
    pool.takes.push(miss(0, 3, [T0]));
    await tier.reserve("a", 1, T + 5000, 0, waitUntil);
    await Promise.all(waited);
    expect(pool.calls[2]).toEqual(["take", KEY, 0, T + 5000, 1, 0]);
    expect(fake.refunds.map((r) => [r.units, r.countedAt, r.now])).toEqual([[3, [T0], T + 5000]]);
    expect(tier.stats.refunded).toBe(3);
  });

  it("gives back units home reserved under an override's rules (not this plan's to pool), however often the pool asks", async () => {
    const pool = fakePool();
    const custom = [compileRule("perMinute", fixedWindow({ limit: 50, window: "1m" }))];
    // home's refunds recorded, its reservations all under the custom rules
    const { scripts: recording, refunds } = fakeHome();
    const scripts = {
      ...recording,
      reserve: (_id: string, _cost: number, now: number, want: number) =>
        Promise.resolve({
          decision: admission(custom, 30, now, "custom"),
          reserved: want,
          countedAt: [T0],
        }),
    } as unknown as HomeScripts;
    const T = T0 + 1000;
    const home = new Home(scripts, encoding(RULES));
    const tier = new RegionalTier(pool.pool, { max: 20, ttl: 5000 }, home, new RegionalTiers(), () => T);
    const waited: Promise<unknown>[] = [];
    for (let i = 0; i < 3; i++) {
      pool.takes.push(miss(4));
      const answer = (await tier.reserve("a", 1, T, 2, (p) => void waited.push(p))).reservation!;
      await Promise.all(waited);
      expect(answer.reserved).toBe(2);
      expect(answer.decision).toMatchObject({ plan: "custom", remaining: 30 });
    }
    // each miss's 4 units for the pool went back under the custom rules, counted where home counted them
    expect(refunds.map((r) => [r.identifier, r.units, r.countedAt, r.applied.name, r.applied.rules])).toEqual(
      Array.from({ length: 3 }, () => ["a", 4, [T0], "custom", custom]),
    );
    expect(refunds.map((r) => r.origin)).toEqual(Array.from({ length: 3 }, () => ({ at: T, taken: 4 })));
    expect(tier.stats).toMatchObject({ lost: 0, deposited: 0, refunded: 12 });
    expect(pool.calls.filter((c) => c[0] === "free")).toEqual(
      Array.from({ length: 3 }, () => ["free", KEY, T]),
    );
  });

  it("disposed while home answers: the pool's share goes back instead of into a pool nobody would take back", async () => {
    const fake = fakeHome();
    const pool = fakePool();
    let answer: () => void = () => {};
    const scripts = {
      ...fake.scripts,
      reserve: (id: string, cost: number, now: number, want: number) =>
        new Promise((resolve) => {
          answer = () => resolve(fake.scripts.reserve(id, cost, now, want));
        }),
    } as unknown as HomeScripts;
    const T = T0 + 1000;
    const tier = new RegionalTier(
      pool.pool,
      { max: 20, ttl: 5000 },
      new Home(scripts, encoding(RULES)),
      new RegionalTiers(),
      () => T,
    );
    const waited: Promise<unknown>[] = [];
    pool.takes.push(miss(6));
    const decided = tier.reserve("a", 1, T, 0, (p) => void waited.push(p));
    await tier.dispose();
    answer();
    expect((await decided).decision).toMatchObject({ allowed: true });
    await Promise.all(waited);
    expect(pool.calls.map((call) => call[0])).toEqual(["take"]);
    expect(fake.refunds.map((r) => [r.units, r.countedAt])).toEqual([[6, [T0]]]);
    expect(fake.used()).toBe(1);
  });

  it("takes back another plan's expired deposits at a decision under this one", async () => {
    const fake = fakeHome();
    const pool = fakePool();
    const tiers = new RegionalTiers();
    const T = T0 + 1000;
    const base = new RegionalTier(
      pool.pool,
      { max: 20, ttl: 5000 },
      new Home(fake.scripts, encoding(RULES)),
      tiers,
      () => T,
    );
    const pro = new RegionalTier(
      pool.pool,
      { max: 20, ttl: 5000 },
      new Home(fake.scripts, encoding(RULES, "pro")),
      tiers,
      () => T,
    );
    const waited: Promise<unknown>[] = [];
    const waitUntil = (p: Promise<unknown>) => void waited.push(p);
    pool.takes.push(miss(6));
    await base.reserve("a", 1, T, 0, waitUntil);
    await Promise.all(waited);
    pool.takes.push(miss(0, 2, [T0]));
    await pro.reserve("b", 1, T + 5000, 0, waitUntil);
    await Promise.all(waited);
    expect(pool.calls.filter((call) => call[0] === "take").map((call) => call.slice(1, 4))).toEqual([
      [KEY, 1, T],
      [KEY, 0, T + 5000],
      ["t:{=b}:pool.pro", 1, T + 5000],
    ]);
    expect(fake.refunds.map((r) => [r.identifier, r.units, r.applied.name])).toEqual([["a", 2, "default"]]);
    expect(tiers.stats).toMatchObject({ misses: 2, deposited: 6, refunded: 2 });
  });

  it("on dispose drains every pool it deposited into", async () => {
    const { pool, tier } = regional();
    const T = T0 + 1000;
    pool.takes.push(miss(6));
    await tier.reserve("a", 1, T, 0, () => {});
    await tier.dispose();
    expect(pool.calls.map((call) => call[0])).toEqual(["take", "put", "drain"]);
  });
});

describe("mostRecent (what a tier tracks, at most MAX_TRACKED)", () => {
  it("keeps the most recently seen and hands back the least recently seen past the cap", () => {
    const tracked = new Map<string, number>();
    for (let i = 0; i < MAX_TRACKED; i++) expect(mostRecent(tracked, `k${i}`, i)).toBeUndefined();
    // k0 seen again: k1 is now the least recently seen
    expect(mostRecent(tracked, "k0", -1)).toBeUndefined();
    expect(mostRecent(tracked, "new", 7)).toEqual(["k1", 1]);
    expect(tracked.size).toBe(MAX_TRACKED);
    expect(tracked.get("k0")).toBe(-1);
    expect([...tracked.keys()].slice(-2)).toEqual(["k0", "new"]);
  });
});

describe("withHeld", () => {
  it("adds the units held to every rule's remaining and keeps the rules that decided", () => {
    const d = admission(RULES, 10, T0);
    const held = withHeld(d, 5);
    expect(held.remaining).toBe(15);
    expect(held.rules.perMinute!.remaining).toBe(15);
    expect(held.decidedBy).toBe(d.decidedBy);
    expect(withHeld(d, 0)).toBe(d);
  });
});

describe("a tier's top-up, in the isolate and in the region's pool (lua/pool.lua)", () => {
  const TTL = 1000;
  // [what it shows, units seen in the older bucket, in the current one, ms into the current one, max,
  // units held after a take of 1, home's least remaining as last seen, the top-up both ask for]
  const cases: [string, number, number, number, number, number, number, number][] = [
    ["demand 8.5 counts as 8: low is 1, so 2 held asks for none", 17, 0, 500, 50, 2, 100, 0],
    ["demand 8.5, 1 held: up to 8 held", 17, 0, 500, 50, 1, 100, 6],
    ["home had twice what the top-up takes (35)", 0, 40, 0, 50, 5, 70, 34],
    ["home had one unit less", 0, 40, 0, 50, 5, 69, 0],
    ["above low (5)", 0, 40, 0, 50, 6, 1000, 0],
    ["a slow identifier: 1 beside the own unit", 0, 2, 0, 50, 0, 100, 1],
    ["demand 1: nothing beside the own unit", 0, 1, 0, 50, 0, 100, 0],
    ["at most max held: low is a quarter of max", 0, 200, 0, 50, 12, 100, 37],
  ];

  it.each(cases)("%s", async (_, previous, current, into, max, held, homeLeft, expected) => {
    const start = T0;
    const now = start + into;
    const config = { max, ttl: TTL };
    // the isolate tier's sizing, at the demand it estimates before the decision
    const demand = estimate({ start, current, previous }, now, TTL);
    expect(topUpSize(config, demand, held, homeLeft)).toBe(expected);
    // the pool's: the same demand in its buckets, held + 1 before the take, home's answer as deposited
    const { url, token } = sharedBridge();
    const pool = new PoolScript(transportFor({ url, token }), config, {
      timeout: 5000,
      batchWindow: 0,
      breaker: false,
    });
    const key = `${uniquePrefix("tier")}:{a}:pool.default`;
    await bridgeRedis().hset(key, {
      u: held + 1,
      e: now + TTL,
      w: String(T0),
      s: `${homeLeft} ${T0 + MINUTE}`,
      h: homeLeft,
      ds: start,
      dc: current,
      dp: previous,
    });
    const answer = await pool.take(key, 1, now, 1);
    expect(answer).toMatchObject({ hit: true, pooled: held, reserve: expected });
  });
});
