// The three ways a rule's state is written must agree, whatever the rule, the costs and the clocks:
//   one-rule  the algorithm's one-rule script (where it has one and the cost fits; else the limiter script)
//   general   the limiter script (its check and commit), for the same rule alone
//   leased    the limiter script reserving units beside the cost, which a refund then gives back,
//             at once or at the next call's time
//   settled   a decision of an estimate (a few units above or below the cost, or a peek), settled at
//             once at the cost (lua/settle.lua): given back or charged as a debt where it was counted
// Each path runs the same random history on its own identifier, against a real redis-server behind
// the REST bridge; every decision must be the same (the leased one counting its reserved units as
// remaining), and after every refund the stored states must say the same. A GCRA or token bucket rule
// switches now and then to another rate (as a plan or an override does), on every path at once.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  compileRule,
  fixedWindow,
  gcra,
  type Rule,
  type RuleConfig,
  slidingWindow,
  tokenBucket,
} from "../../src/engine/algorithms.js";
import { RuleKeys } from "../../src/engine/keys.js";
import { countedOf, RuleScripts } from "../../src/engine/script.js";
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
  if (rule.algorithm === "tokenBucket") return rule.interval;
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
    default:
      return String(stored);
  }
}

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
          let owed: { units: number; windowStarts: readonly number[] } | undefined;
          for (const [at, step] of history.entries()) {
            now = Math.max(0, now + Math.round((step.move * unit) / 1000));
            if (rule.algorithm === "gcra" || rule.algorithm === "tokenBucket") {
              // Redis expires a state at its TAT by its own clock: keep the calls clear of a TAT just
              // ahead, whose key could expire between two paths' calls
              const tat = tatOf(await redis.get(keys.of(one, now)[0]!));
              if (tat !== undefined && tat >= now && tat - now < 5000) now = tat + 1;
            }
            if (owed) {
              // the leased path's refund, at this call's time
              expect(await scripts.refund(leased, owed.units, owed.windowStarts, now)).toBe(true);
              owed = undefined;
              await expectSameState(now);
            }
            if (switches && step.switchRate) {
              // after the refunds owed under the old rate: all three states then mean the same
              if ((await redis.get(keys.of(one, now)[0]!)) !== null) reached.rateChanges++;
              [rule, scripts] = rule === first ? [second, secondScripts] : [first, firstScripts];
            }
            const [a, b, c] = await Promise.all([
              scripts.decide(one, step.cost, now),
              scripts.reserve(general, step.cost, now, 0),
              scripts.reserve(leased, step.cost, now, step.reserve),
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
            const estimate = a.allowed ? Math.max(0, step.cost + step.estimateOff) : step.cost;
            let d = await scripts.decide(settled, estimate, now);
            if (d instanceof Error) throw d;
            if (d.allowed && estimate !== step.cost) {
              const counted = countedOf(d);
              expect(counted).toBeDefined();
              const reply = await scripts.settle(settled, counted!, estimate, step.cost, now);
              expect(reply.ok).toBe(true);
              if (estimate > step.cost) reached.settledBelow++;
              else reached.settledAbove++;
            } else if (!d.allowed && a.allowed) {
              // an estimate above what is left: the cost itself
              d = await scripts.decide(settled, step.cost, now);
              if (d instanceof Error) throw d;
            }
            expect({ ...context, allowed: d.allowed }).toEqual({ ...context, allowed: a.allowed });
            if (!a.allowed) reached.denied++;
            if (c.windowStarts[0]! > now) reached.countedInNewerWindow++;
            if (c.reserved > 0) reached.refunds++;
            if (
              c.decision.allowed &&
              step.cost > 0 &&
              (rule.algorithm === "fixedWindow" || rule.algorithm === "slidingWindow")
            ) {
              // the window the units were counted in: now's, or (a lagging caller) the newer stored one,
              // the next (the packed state) or any later one (the text state)
              const start = now - (now % rule.window);
              const counted = c.windowStarts[0]!;
              expect((counted - start) % rule.window).toBe(0);
              if (rule.algorithm === "fixedWindow") expect(counted).toBe(start);
              else if (rule.limit < 2 ** 25) expect([start, start + rule.window]).toContain(counted);
              else expect(counted).toBeGreaterThanOrEqual(start);
            } else if (c.decision.allowed && step.cost > 0) {
              expect(c.windowStarts).toEqual([0]);
            }
            if (c.reserved > 0) {
              if (step.refundAtOnce) {
                expect(await scripts.refund(leased, c.reserved, c.windowStarts, now)).toBe(true);
                await expectSameState(now);
              } else {
                owed = { units: c.reserved, windowStarts: c.windowStarts };
              }
            } else {
              await expectSameState(now);
            }
          }
          if (owed) {
            expect(await scripts.refund(leased, owed.units, owed.windowStarts, now)).toBe(true);
            await expectSameState(now);
          }

          async function expectSameState(at: number) {
            const [a, b, c, d] = await Promise.all(
              [one, general, leased, settled].map((id) => redis.get(keys.of(id, at)[0]!)),
            );
            const said = [a, b, c, d].map((stored) => meaning(rule, stored, at));
            expect({ at, rule: config, one: said[0], leased: said[2], settled: said[3] }).toEqual({
              at,
              rule: config,
              one: said[1],
              leased: said[1],
              settled: said[1],
            });
          }
        },
      ),
      { numRuns: 80, seed: Number(process.env.PROPERTY_SEED ?? 20261124) },
    );
    expect(reached.denied).toBeGreaterThan(40);
    expect(reached.countedInNewerWindow).toBeGreaterThan(0);
    expect(reached.refunds).toBeGreaterThan(40);
    expect(reached.rateChanges).toBeGreaterThan(10);
    expect(reached.settledBelow).toBeGreaterThan(40);
    expect(reached.settledAbove).toBeGreaterThan(40);
  }, 60_000);
});
