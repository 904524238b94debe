// The three ways a rule's state is written must agree, whatever the rule, the costs and the clocks:
//   one-rule  the algorithm's one-rule script (where it has one and the cost fits; else the limiter script)
//   general   the limiter script (its check and commit), for the same rule alone
//   leased    the limiter script reserving units beside the cost, which a refund then gives back,
//             at once or at the next call's time
//   settled   a decision of an estimate (a few units above or below the cost, or a peek), settled at
//             once at the cost (lua/settle.lua): given back or charged as a debt where it was counted
// Each path runs the same random history on its own identifier, against a real redis-server behind
// the REST bridge; every decision must be the same (the leased one counting its reserved units as
// remaining), and after every refund the stored states must say the same to every caller at that time
// or later, the first three byte for byte (but a fixed window's harmless overshoot). The settled
// path's may keep the time its decision showed (docs/settle.md): a GCRA TAT at that time (letting no
// caller in where the others would not), a sliding window's newer window left empty, the slot of its
// latest unit a later one; the run then goes on from the others' state. So may the leased path's after a
// GCRA refund at the next call's time: units since earned back are not given back (lua/algorithms/
// gcra.lua), so its TAT stays at the others' or later, read the same but for less than a ms. A GCRA or token bucket rule
// switches now and then to another rate (as a plan or an override does), on every path at once. An
// interval bucket, which no lease holds, reserves nothing; its settled path may store the refills its
// decision read (a peek's estimate leaves its bucket stored, full), and a lagging caller's settle
// gives nothing back (lua/algorithms/interval_bucket.lua): fewer tokens, refilled at the same time.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  algorithmOf,
  compileRule,
  fixedWindow,
  gcra,
  intervalBucket,
  type Rule,
  type RuleConfig,
  slidingWindow,
  tokenBucket,
} from "../../src/engine/algorithms/index.js";
import { RuleKeys } from "../../src/engine/keys.js";
import { RuleScripts, UNKNOWN } from "../../src/engine/scripts/limiter.js";
import { transportFor } from "../../src/engine/transport.js";
import type { Decision } from "../../src/engine/types.js";
import { bridgeRedis, T0, uniquePrefix } from "../support.js";

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;

// Durations of a minute or more, and GCRA emission intervals of 10 s or more, so that no key's real
// expiry (Redis's own clock) falls inside a run; the injected clocks move freely.
const rules: fc.Arbitrary<RuleConfig> = fc.oneof(
  fc
    .record({ limit: fc.integer({ min: 1, max: 12 }), window: fc.integer({ min: MINUTE, max: 3 * HOUR }) })
    .map(fixedWindow),
  fc
    .record({ limit: fc.integer({ min: 1, max: 12 }), window: fc.integer({ min: MINUTE, max: 3 * HOUR }) })
    .map(slidingWindow),
  // a limit at the packed state's bound or above keeps the text state
  fc.record({ limit: fc.constantFrom(2 ** 25 - 1, 2 ** 25), window: fc.constant(HOUR) }).map(slidingWindow),
  fc
    .record({
      limit: fc.integer({ min: 1, max: 12 }),
      interval: fc.integer({ min: 10_000, max: HOUR }), // T, whole ms...
      fraction: fc.integer({ min: 0, max: 11 }), // ...plus a fraction of a ms
      burst: fc.integer({ min: 1, max: 15 }),
    })
    .map(({ limit, interval, fraction, burst }) =>
      gcra({ limit, period: limit * interval + (fraction % limit), burst }),
    ),
  fc
    .record({
      capacity: fc.integer({ min: 1, max: 15 }),
      refillRate: fc.integer({ min: 1, max: 7 }),
      interval: fc.integer({ min: 10_000, max: HOUR }),
    })
    .map(({ capacity, refillRate, interval }) =>
      tokenBucket({ capacity, refillRate, interval: refillRate * interval }),
    ),
  fc
    .record({
      capacity: fc.integer({ min: 1, max: 15 }),
      refillRate: fc.integer({ min: 1, max: 7 }),
      interval: fc.integer({ min: MINUTE, max: HOUR }),
    })
    .map(intervalBucket),
);

interface Step {
  /** How far the clock moves, in thousandths of the rule's scale (negative: a lagging caller). */
  move: number;
  /** 0 peeks; above the limit is denied forever. */
  cost: number;
  /** Units the leased path asks to reserve beside the cost. */
  reserve: number;
  /** Whether the leased path gives them back at once, or at the next call's time. */
  refundAtOnce: boolean;
  /** Whether a GCRA or token bucket rule switches rate before this step (to the other one, or back). */
  switchRate: boolean;
  /** How far the settled path's estimate is from the cost (an estimate of 0 peeks). */
  estimateOff: number;
}

const steps: fc.Arbitrary<Step[]> = fc.array(
  fc.record({
    // thousandths of the scale: mostly on, sometimes back (a lagging caller), now and then not at all
    move: fc.oneof(
      { weight: 3, arbitrary: fc.integer({ min: 1, max: 600 }) },
      { weight: 2, arbitrary: fc.integer({ min: -400, max: -1 }) },
      { weight: 1, arbitrary: fc.constant(0) },
    ),
    cost: fc.oneof(
      { weight: 6, arbitrary: fc.integer({ min: 1, max: 3 }) },
      { weight: 1, arbitrary: fc.constant(0) },
      { weight: 1, arbitrary: fc.integer({ min: 1, max: 20 }) },
    ),
    reserve: fc.integer({ min: 0, max: 6 }),
    refundAtOnce: fc.boolean(),
    switchRate: fc.integer({ min: 0, max: 5 }).map((n) => n === 0),
    estimateOff: fc.integer({ min: -3, max: 3 }),
  }),
  { minLength: 1, maxLength: 24 },
);

/** The time scale a rule's history moves by: its window, or its period (a token bucket's interval). */
function scale(rule: Rule): number {
  if (rule.algorithm === "gcra") return rule.period;
  if (rule.algorithm === "tokenBucket" || rule.algorithm === "intervalBucket") return rule.interval;
  return rule.window;
}

/** The other rate a GCRA or token bucket rule switches to: the same algorithm, its own parameters. */
const otherRates = fc.record({
  limit: fc.integer({ min: 1, max: 12 }),
  interval: fc.integer({ min: 10_000, max: HOUR }),
  burst: fc.integer({ min: 1, max: 15 }),
});

function otherRule(rule: Rule, other: { limit: number; interval: number; burst: number }): Rule {
  const { limit, interval, burst } = other;
  if (rule.algorithm === "tokenBucket")
    return compileRule("r", tokenBucket({ capacity: burst, refillRate: limit, interval: limit * interval }));
  return compileRule("r", gcra({ limit, period: limit * interval, burst }));
}

/** What a state says, in a form that is equal when two states mean the same at `now`. */
function meaning(rule: Rule, stored: unknown, now: number): unknown {
  switch (rule.algorithm) {
    case "fixedWindow":
      // a one-rule denial of a full window leaves its harmless overshoot
      return Math.min(Number(stored ?? 0), rule.limit);
    case "gcra":
    case "tokenBucket": {
      // how far TAT lies ahead of now, in 1/rate ms: 0 when idle, whether or not the key is still there
      if (stored === null || stored === undefined) return 0;
      const [rate, period, burst] =
        rule.algorithm === "gcra"
          ? [rule.rate, rule.period, rule.burst]
          : [rule.refillRate, rule.interval, rule.capacity];
      const [a, b, l, p] = String(stored).split(":").map(Number);
      if (l === undefined || (l === rate && p === period)) return Math.max(0, (a! - now) * rate + b!);
      // written under another rate: the units it counted (lua/algorithms/gcra.lua)
      const old = (a! - now) * l + b!;
      return old > 0 ? Math.min(Math.ceil(old / p!), burst) * period : 0;
    }
    case "slidingWindow":
      return slidingMeaning(rule.window, stored, now);
    case "intervalBucket": {
      // its tokens and last refill as a caller at now reads them (the refills since added)
      if (stored === null || stored === undefined) return "new";
      let [tokens, at] = String(stored).split(":").map(Number) as [number, number];
      if (now >= at + rule.interval) {
        const refills = Math.floor((now - at) / rule.interval);
        tokens = Math.min(rule.capacity, tokens + refills * rule.refillRate);
        at += refills * rule.interval;
      }
      return `${tokens}:${at}`;
    }
    default:
      return String(stored);
  }
}

/**
 * A sliding window's state as stored: where its window lies from now's (0 now's, 1 a later one, 3 the
 * one before, 2 older: none), its counts, whether callers' clocks disagreed, and its slots.
 */
interface SlidingState {
  at: number;
  current: number;
  previous: number;
  skewed: boolean;
  latest: number;
  earlier: number;
}

/** Reads a sliding window's state in any of lua/algorithms/sliding_window.lua's layouts. */
function slidingState(window: number, stored: unknown, now: number): SlidingState | undefined {
  if (stored === null || stored === undefined) return undefined;
  const text = String(stored);
  let stamp: number;
  const state = { at: 0, current: 0, previous: 0, skewed: false, latest: 0, earlier: 0 };
  const parts = text.split(":");
  if (parts.length === 3) {
    const [s, c, p] = parts.map(Number) as [number, number, number];
    // (a text state's window may lie any number ahead of a lagging caller's: the next, for this)
    const ahead = Math.min(1, Math.max(-2, s / window - Math.floor(now / window)));
    [stamp, state.current, state.previous] = [(Math.floor(now / window) + ahead + 4) % 4, c, p];
  } else {
    const value = Number(text);
    if (value >= 6 * 2 ** 50) {
      state.skewed = value >= 7 * 2 ** 50;
      const rest = value - (state.skewed ? 7 : 6) * 2 ** 50;
      stamp = Math.floor(rest / 2 ** 48);
      const low = rest % 2 ** 48;
      const slots = Math.floor(low / 2 ** 36);
      [state.latest, state.earlier] = [Math.floor(slots / 64), slots % 64];
      state.current = Math.floor((low % 2 ** 36) / 2 ** 18);
      state.previous = low % 2 ** 18;
    } else {
      stamp = Math.floor(value / 2 ** 50) - 1;
      const low = value % 2 ** 50;
      state.current = Math.floor(low / 2 ** 25);
      state.previous = low % 2 ** 25;
    }
  }
  state.at = (((stamp - (Math.floor(now / window) % 4)) % 4) + 4) % 4;
  return state;
}

/** A sliding window's state as a caller at `now` reads it: a state of the window before now's as now's. */
function slidingNow(window: number, stored: unknown, now: number): SlidingState | undefined {
  const state = slidingState(window, stored, now);
  if (state === undefined || state.at === 2) return undefined;
  if (state.at === 3) {
    const { current, latest } = state;
    Object.assign(state, { at: 0, current: 0, previous: current, latest: 0, earlier: latest });
  }
  return state;
}

/**
 * What a sliding window's state means to a caller at `now`: where its window lies from now's (0
 * now's, 1 the next: a lagging caller's), its two counts, and whether callers' clocks disagreed. A
 * state of the window before now's reads as now's window with its count as the previous one: the
 * same to every caller at now or later (a settle that gives back every unit a decision counted in a
 * new window leaves that window stored, with nothing counted in it). Two windows back or more, or
 * without units (and clocks that agreed), it reads as none. The slots are compared apart (below).
 */
function slidingMeaning(window: number, stored: unknown, now: number): string {
  const state = slidingNow(window, stored, now);
  if (state === undefined) return "none";
  const { at, current, previous, skewed } = state;
  if (current === 0 && previous === 0 && !skewed) return "none";
  return `${at}:${current}:${previous}${skewed ? ":skewed" : ""}`;
}

/**
 * A GCRA state's TAT as stored, in 1/L ms of the rate L it was written under, with that rate; no state
 * is a TAT before every other.
 */
function tatUnits(stored: unknown): { tat: number; rate: string } {
  if (stored === null || stored === undefined) return { tat: Number.NEGATIVE_INFINITY, rate: "" };
  const [a, b, l, p] = String(stored).split(":");
  return { tat: Number(a) * Number(l ?? 1) + Number(b), rate: `${l}:${p}` };
}

const gcd = (a: number, b: number): number => (b === 0 ? a : gcd(b, a % b));

/** GCRA's TAT (epoch ms, rounded down) as stored, or undefined. */
function tatOf(stored: unknown): number | undefined {
  return stored === null || stored === undefined ? undefined : Number(String(stored).split(":")[0]);
}

describe("the one-rule, general and leased paths", () => {
  it("decide the same and store the same, over random rules, costs, clocks and refunds", async () => {
    const redis = bridgeRedis();
    const transport = transportFor(redis);
    const options = { timeout: 15_000, batchWindow: 0, breaker: false };
    let runs = 0;
    // what the histories reached, so that a generator gone tame fails the test
    const reached = {
      denied: 0,
      countedInNewerWindow: 0,
      refunds: 0,
      rateChanges: 0,
      settledBelow: 0,
      settledAbove: 0,
      settledKeptTime: 0,
      leasedKeptTime: 0,
    };
    await fc.assert(
      fc.asyncProperty(
        rules,
        fc.integer({ min: 0, max: 999 }),
        steps,
        otherRates,
        async (config, offset, history, other) => {
          const first = compileRule("r", config);
          const keys = new RuleKeys(uniquePrefix("prop"), [first]);
          const firstScripts = new RuleScripts([first], keys, transport, options);
          const switches = first.algorithm === "gcra" || first.algorithm === "tokenBucket";
          // the other rate's rule has the same name and algorithm, so the same keys
          const second = switches ? otherRule(first, other) : first;
          const secondScripts = switches ? new RuleScripts([second], keys, transport, options) : firstScripts;
          let rule = first;
          let scripts = firstScripts;
          const [one, general, leased, settled] = ["one", "general", "leased", "settled"].map(
            (path) => `${path}-${runs}`,
          ) as [string, string, string, string];
          runs++;
          const unit = scale(rule);
          let now = T0 + Math.floor((unit * offset) / 1000);
          let owed: { units: number; countedAt: readonly number[] } | undefined;
          let latest = now;
          // a settle below the cost by a lagging caller, which an interval bucket gives nothing back
          let settledLagging = false;
          for (const [at, step] of history.entries()) {
            now = Math.max(0, now + Math.round((step.move * unit) / 1000));
            const lagging = now < latest;
            latest = Math.max(latest, now);
            if (rule.algorithm === "gcra" || rule.algorithm === "tokenBucket") {
              // Redis expires a state at its TAT by its own clock: keep the calls clear of a TAT just
              // ahead, whose key could expire between two paths' calls
              const tat = tatOf(await redis.get(keys.of(one, now)[0]!));
              if (tat !== undefined && tat >= now && tat - now < 5000) now = tat + 1;
            }
            if (rule.algorithm === "intervalBucket") {
              // Redis expires a bucket when it reads full, by its own clock: a key just short of that
              // could expire between two paths' calls. Past that time, all four go, as they would by then
              const key = keys.of(one, now)[0]!;
              const [stored, ttl] = await Promise.all([redis.get(key), redis.pttl(key)]);
              if (stored !== null && ttl >= 0 && ttl < 5000) {
                const [tokens, refilled] = String(stored).split(":").map(Number) as [number, number];
                const { capacity, refillRate, interval } = rule;
                const full =
                  tokens >= capacity
                    ? refilled + interval
                    : refilled + Math.ceil((capacity - tokens) / refillRate) * interval;
                now = Math.max(now, full);
                await Promise.all(
                  [one, general, leased, settled].map((id) => redis.del(keys.of(id, now)[0]!)),
                );
              }
            }
            if (owed) {
              // the leased path's refund, at this call's time
              expect(await refund(owed.units, owed.countedAt)).toBe(true);
              owed = undefined;
              await expectSameState(now, true);
            }
            if (switches && step.switchRate) {
              // after the refunds owed under the old rate: all three states then mean the same
              if ((await redis.get(keys.of(one, now)[0]!)) !== null) reached.rateChanges++;
              [rule, scripts] = rule === first ? [second, secondScripts] : [first, firstScripts];
            }
            // (a rule no lease may hold, an interval bucket's, reserves nothing: the engine asks none)
            const reserve = algorithmOf(rule).leasable ? step.reserve : 0;
            const [a, b, c] = await Promise.all([
              scripts.decide(one, step.cost, now, (d) => d),
              scripts.reserve(general, step.cost, now, 0),
              scripts.reserve(leased, step.cost, now, reserve),
            ]);
            if (a instanceof Error) throw a;
            if (b instanceof Error) throw b;
            if (c instanceof Error) throw c;
            const context = { at, now, cost: step.cost, rule: config, switched: rule !== first };
            expect({ ...context, ...a.rules.r }).toEqual({ ...context, ...b.decision.rules.r });
            expect(b.reserved).toBe(0);
            expect(c.reserved).toBeLessThanOrEqual(step.reserve);
            const asIfUnreserved = {
              ...c.decision.rules.r,
              remaining: c.decision.rules.r!.remaining + c.reserved,
            };
            if (c.reserved > 0) delete (asIfUnreserved as Partial<Decision>).resetAt;
            const expected: Partial<Decision> = { ...a.rules.r };
            if (c.reserved > 0) delete expected.resetAt;
            expect({ ...context, ...asIfUnreserved }).toEqual({ ...context, ...expected });
            // the settled path: an estimate that the cost fits under, settled at once at the cost
            // (a sliding window admitting a lagging caller remembers that clocks disagreed, and a settle
            // gives back units, not that fact: a peek's estimate is then left out, as the others store nothing)
            const peekLagging = rule.algorithm === "slidingWindow" && step.cost === 0 && lagging;
            const estimate =
              a.allowed && !peekLagging ? Math.max(0, step.cost + step.estimateOff) : step.cost;
            let d = await scripts.decide(settled, estimate, now, (d) => d);
            if (d instanceof Error) throw d;
            if (d.allowed && estimate !== step.cost) {
              settledLagging = lagging && estimate > step.cost;
              const reply = await scripts.settle(settled, scripts.counted(d), estimate, step.cost, now);
              expect(reply.ok).toBe(true);
              if (estimate > step.cost) reached.settledBelow++;
              else reached.settledAbove++;
            } else if (!d.allowed && a.allowed) {
              // an estimate above what is left: the cost itself
              d = await scripts.decide(settled, step.cost, now, (d) => d);
              if (d instanceof Error) throw d;
            }
            expect({ ...context, allowed: d.allowed }).toEqual({ ...context, allowed: a.allowed });
            if (!a.allowed) reached.denied++;
            const windowed = rule.algorithm === "fixedWindow" || rule.algorithm === "slidingWindow";
            if (windowed && c.countedAt[0]! > now) reached.countedInNewerWindow++;
            if (c.reserved > 0) reached.refunds++;
            if (
              c.decision.allowed &&
              step.cost > 0 &&
              (rule.algorithm === "fixedWindow" || rule.algorithm === "slidingWindow")
            ) {
              // the window the units were counted in: now's, or (a lagging caller) the newer stored one,
              // the next (the packed state) or any later one (the text state)
              const start = now - (now % rule.window);
              const counted = c.countedAt[0]!;
              expect((counted - start) % rule.window).toBe(0);
              if (rule.algorithm === "fixedWindow") expect(counted).toBe(start);
              else if (rule.limit < 2 ** 25) expect([start, start + rule.window]).toContain(counted);
              else expect(counted).toBeGreaterThanOrEqual(start);
            } else if (c.decision.allowed && step.cost > 0 && rule.algorithm === "intervalBucket") {
              // counted at the last refill (within an interval before now), or a lagging caller's now
              const counted = c.countedAt[0]!;
              expect(counted).toBeLessThanOrEqual(now);
              if (!lagging) expect(counted).toBeGreaterThan(now - rule.interval);
            } else if (c.decision.allowed && step.cost > 0) {
              // GCRA's units hold its TAT, rounded up: the reset (what a refund may give back is capped by it)
              expect(c.countedAt).toEqual([c.decision.rules.r!.resetAt]);
            }
            if (c.reserved > 0) {
              if (step.refundAtOnce) {
                expect(await refund(c.reserved, c.countedAt)).toBe(true);
                await expectSameState(now);
              } else {
                owed = { units: c.reserved, countedAt: c.countedAt };
              }
            } else {
              await expectSameState(now);
            }
          }
          if (owed) {
            expect(await refund(owed.units, owed.countedAt)).toBe(true);
            await expectSameState(now, true);
          }

          /**
           * The leased path's refund at `now`, its origin UNKNOWN: bounded by the TAT the units hold
           * alone, which gives back exactly what the general path never took. With the reservation's
           * time, gcra also counts its ledger's refunds from that ms on, a refund made in the same ms
           * just before the reservation included, and may give back a few ms less (lua/algorithms/gcra.lua).
           */
          function refund(units: number, countedAt: readonly number[]): Promise<boolean> {
            return scripts.refund(leased, units, countedAt, now, scripts.base, UNKNOWN);
          }

          /** Makes `id`'s state the general path's, to go on from it. */
          async function resync(id: string, at: number, b: unknown) {
            const key = keys.of(id, at)[0]!;
            if (b === null) await redis.del(key);
            else
              await redis.set(key, String(b), {
                px: Math.max(1, await redis.pttl(keys.of(general, at)[0]!)),
              });
          }

          async function expectSameState(at: number, lateRefund = false) {
            const [a, b, c, d] = await Promise.all(
              [one, general, leased, settled].map((id) => redis.get(keys.of(id, at)[0]!)),
            );
            // (where the general path stored nothing, a peek, the settled path's bucket was new: its
            // lagging settle is none, it gives back, below)
            if (rule.algorithm === "intervalBucket" && d !== b && settledLagging && b !== null) {
              // a lagging caller's settle gives nothing back (lua/algorithms/interval_bucket.lua): the
              // settled path holds fewer tokens, refilled at the same time, and lets no caller in where
              // the others would not
              const [others, own] = [b, d].map((x) => String(x).split(":").map(Number)) as number[][];
              const context = { at, rule: config, general: b, settled: d };
              expect({ ...context, refilled: own![1] }).toEqual({ ...context, refilled: others![1] });
              expect(own![0], JSON.stringify(context)).toBeLessThan(others![0]!);
              settledLagging = false;
              reached.settledKeptTime++;
              await resync(settled, at, b);
              return expectSameState(at);
            }
            if (rule.algorithm === "intervalBucket" && b === null && d !== null) {
              settledLagging = false;
              // a peek stores nothing; an estimate of it, admitted and given back, leaves the bucket it
              // took from full, refilled from the decision's time on: it reads the same, and keeps that time
              const [tokens] = String(d).split(":").map(Number);
              expect(tokens, JSON.stringify({ at, rule: config, settled: d })).toBeGreaterThanOrEqual(
                rule.capacity,
              );
              reached.settledKeptTime++;
              await resync(settled, at, b);
              return expectSameState(at);
            }
            const said = [a, b, c, d].map((stored) => meaning(rule, stored, at));
            if (lateRefund && c !== b && (rule.algorithm === "gcra" || rule.algorithm === "tokenBucket")) {
              // a GCRA refund after its units were partly earned back gives back what they still held,
              // rounded down to a ms: the others' TAT or later, read the same but for less than a ms
              const [rate, period] =
                rule.algorithm === "gcra" ? [rule.rate, rule.period] : [rule.refillRate, rule.interval];
              const context = { at, rule: config, general: b, leased: c };
              const [others, own] = [tatUnits(b), tatUnits(c)];
              if (own.rate === others.rate)
                expect(own.tat, JSON.stringify(context)).toBeGreaterThanOrEqual(others.tat);
              const [theirs, ours] = [said[1] as number, said[2] as number];
              expect(ours, JSON.stringify(context)).toBeGreaterThanOrEqual(theirs);
              expect(ours, JSON.stringify(context)).toBeLessThanOrEqual(
                Math.max(theirs, rate - gcd(rate, period)),
              );
              reached.leasedKeptTime++;
              await resync(leased, at, b);
              return expectSameState(at);
            }
            expect({ at, rule: config, one: said[0], leased: said[2], settled: said[3] }).toEqual({
              at,
              rule: config,
              one: said[1],
              leased: said[1],
              settled: said[1],
            });
            if (rule.algorithm === "fixedWindow") return;
            // Stored, beyond what a caller at `at` or later reads: the one-rule, general and leased
            // paths write the same; the settled one may differ only as a settle's own clock leaves it
            const context = { at, rule: config, general: b, settled: d };
            expect({ ...context, one: a, leased: c }).toEqual({ ...context, one: b, leased: b });
            if (d === b) return;
            if (rule.algorithm === "intervalBucket") {
              // the settled path's decision stored the refills it read, which the others' peeks did not
            } else if (rule.algorithm === "slidingWindow") {
              // Every unit of a decision counted in a new window given back: that window stays stored,
              // empty (a caller lagging behind it is then decided as at its start, as after any
              // decision counted there: docs/algorithms.md, "Clock skew"). And units given back leave
              // the slot where the decision came as the latest: the same or a later one, which
              // weighs the count longer once clocks disagree, never shorter.
              const [others, own] = [slidingNow(rule.window, b, at), slidingNow(rule.window, d, at)];
              const stored = slidingState(rule.window, d, at);
              if (stored?.at !== 0 || stored.current !== 0) {
                expect({ ...context, latest: own?.latest, earlier: own?.earlier }).toEqual({
                  ...context,
                  latest: Math.max(own?.latest ?? 0, others?.latest ?? 0),
                  earlier: Math.max(own?.earlier ?? 0, others?.earlier ?? 0),
                });
                expect({ ...context, own: { ...own, latest: 0, earlier: 0 } }).toEqual({
                  ...context,
                  own: { ...others, latest: 0, earlier: 0 },
                });
              }
            } else {
              // a TAT given back stops at the settle's own time, never before it: the settled path's
              // TAT is the others' or later, so it lets no caller, lagging or not, in where they would not
              const [others, own] = [tatUnits(b), tatUnits(d)];
              if (own.rate === others.rate)
                expect(own.tat, JSON.stringify(context)).toBeGreaterThanOrEqual(others.tat);
            }
            reached.settledKeptTime++;
            // then on from the others' state, so that every later decision can be compared exactly
            await resync(settled, at, b);
          }
        },
      ),
      { numRuns: 96, seed: Number(process.env.PROPERTY_SEED ?? 20261124) },
    );
    expect(reached.denied).toBeGreaterThan(40);
    expect(reached.countedInNewerWindow).toBeGreaterThan(0);
    expect(reached.refunds).toBeGreaterThan(40);
    expect(reached.rateChanges).toBeGreaterThan(4);
    expect(reached.settledBelow).toBeGreaterThan(40);
    expect(reached.settledAbove).toBeGreaterThan(40);
    expect(reached.settledKeptTime).toBeGreaterThan(0);
    expect(reached.leasedKeptTime).toBeGreaterThan(0);
  }, 60_000);
});
