// What every algorithm module shares: the rule's common fields, the module's shape (what the engine
// asks of an algorithm), the bounds and the policy.

import type { Duration } from "../duration.js";
import type { OneRule, ScriptCallOptions } from "../scripts/shared.js";
import type { Script } from "../transport.js";
import type { RuleResult } from "../types.js";
import type { Rule, RuleConfig } from "./index.js";

/** `limit` units per `window`. */
export interface WindowOptions extends KeyedOptions {
  limit: number;
  window: Duration;
}

/** What every rule constructor takes beside its own fields. */
export interface KeyedOptions {
  /**
   * The field of the identifier record that keys this rule (default "id"): with
   * `limit({ user: "u1", org: "acme" })`, a rule `by: "org"` counts acme's requests. A string
   * identifier is `{ id: identifier }`.
   */
  by?: string;
}

/**
 * How a fixed or sliding window counts beside what it admits: @upstash/ratelimit's semantics, which
 * code written against it relies on (edgelimit/upstash keeps them). Off by default: a denied request
 * takes nothing, every decision takes its cost.
 */
export interface CountingOptions {
  /**
   * Count a charge larger than the room left although it is denied (a peek never), as code that
   * charges after the fact and stops at 0 left expects: a fixed window counts every denied charge, a
   * sliding window one that finds room left; beyond its one-rule script, at most 4 limits in all.
   * Counted in the check, so with several rules this one is charged even when another denies; with
   * `overrides` on, a fixed window's one-rule variant counts admissions only.
   */
  overshoot?: boolean;
  /**
   * Every decision gives its cost back instead of taking it: always admitted, `remaining` as after
   * the refund. The count may go below zero, a credit (`remaining` above the limit) until the window
   * ends (a sliding window's fades through the next one, as any count does). For a Limiter of its
   * own beside the charging one, on the same prefix and rule name: the two share the rule's keys.
   */
  givesBack?: boolean;
}

/** The window rule's `counting` (its scripts' third parameter): what CountingOptions asked for. */
export const OVERSHOOT = 1;
export const GIVES_BACK = 2;

/** What every validated rule has, whatever its algorithm. */
export interface RuleBase {
  readonly name: string;
  /**
   * The field of the identifier record that keys the rule, when it is not "id" (the default: a rule
   * without `by` is keyed by the identifier a call gives as a string).
   */
  readonly by?: string;
  /** The limit reported in decisions (burst for GCRA, capacity for a token bucket). */
  readonly limit: number;
  /**
   * The policy as the RateLimit-Policy header states it: `quota` units per `window` ms, the window whole
   * seconds at the rule's real rate (see policyOf), and quota ≥ limit.
   */
  readonly policy: { readonly quota: number; readonly window: number };
}

/** A fixed window, sliding window or sliding log: `limit` units per `window` ms. */
export interface WindowRule extends RuleBase {
  readonly algorithm: "fixedWindow" | "slidingWindow" | "slidingLog";
  readonly window: number;
  /** OVERSHOOT or GIVES_BACK (fixed and sliding windows, from CountingOptions); absent: neither. */
  readonly counting?: number;
}

/** How a module reads its rule's fields while checkRule reports every problem (index.ts). */
export interface Fields {
  /** Whether the config gives `field`. */
  has(field: string): boolean;
  /** `field` as a count (a whole number in 1..MAX_EXACT), or undefined after reporting it. */
  count(field: string): number | undefined;
  /** `field` as a duration in ms, or undefined after reporting it. */
  duration(field: string): number | undefined;
  /** `field` as a boolean (absent: false), or false after reporting it. */
  flag(field: string): boolean;
  /** Reports `count × ms` above MAX_EXACT, as `what`. */
  bounded(count: number | undefined, ms: number | undefined, what: string): void;
  /** Reports a problem with `field`. */
  issue(field: string, message: string): void;
  /** Whether any problem was reported. */
  readonly failed: boolean;
}

/**
 * What the engine knows of an algorithm: everything but its Lua (lua/algorithms/<file>.lua). Each
 * module in this directory is one; index.ts registers them by name.
 */
export interface AlgorithmModule<R extends Rule = Rule> {
  /** The fields its constructor takes. */
  readonly fields: readonly string[];
  /**
   * Options it takes beside its fields, left out of the fields an unknown one's message lists (the
   * windows' CountingOptions, for code written against @upstash/ratelimit).
   */
  readonly options?: readonly string[];
  /** The rule from its config's fields, or undefined once a problem was reported through `fields`. */
  compile(name: string, fields: Fields): R | undefined;
  /**
   * The rule as the limiter, refund and settle scripts read it: the algorithm the script runs (its
   * `algorithms.<name>`) and three integer parameters.
   */
  encode(rule: R): [string, string, string, string];
  /** The config of a rule of this algorithm with the three parameters `encode` gives. */
  config(p1: number, p2: number, p3: number): RuleConfig;
  /** The algorithm's part of the rule's key (keys.ts). */
  readonly key: string;
  /** Counted per window (fixed and sliding window): a rule's window is part of what its count means. */
  readonly windowed: boolean;
  /** Whether leases may hold its units: it has a refund. */
  readonly leasable: boolean;
  /** Whether its count is a TAT (gcra, token bucket): where units were counted is the TAT they hold. */
  readonly holdsTat: boolean;
  /**
   * Whether its one-rule script counts a denial too (a plain INCR): a count above the limit reads as
   * the limit, and plans and overrides, which change the limit, keep off that script.
   */
  readonly countsDenials: boolean;
  /** A key per window of this many ms (fixed window), else 0. */
  keyWindow(rule: R): number;
  /**
   * What a settle needs of an admitted decision beside where its units were counted (its reply says
   * that): the time gcra and the token bucket counted from, a sliding log's count after it; else 0.
   */
  countOf(rule: R, outcome: RuleResult, decidedAt: number): number;
  /** What the settle script reads as the rule's mark, from `countOf` and the decision's cost. */
  settleMark(count: number, cost: number): number;
  /** When usage counted under a limit of `from` does not carry to a limit of `to`: why. */
  carries?(from: number, to: number): string | undefined;
  /** Its one-rule script for `rule` (one rule, no reservation), when it has one that fits. */
  oneRule?(rule: R, options: ScriptCallOptions): OneRule | undefined;
  /** The one-rule script's variant that also reads a stored override. */
  readonly oneRuleOverrides?: Script;
  /** The outcome of `rule` from its one-rule script's integer, for `cost` at `now`. */
  outcome?(rule: R, result: number, cost: number, now: number): RuleResult;
  /** Where an admission counted its units, from its one-rule script's integer at `now`. */
  oneRuleCounted?(rule: R, result: number, now: number): number;
}

// Bounds. The scripts compute in Lua doubles, exact below 2^53 (9007199254740992). Every configured
// count, and every product of a count and a duration, stays at or below MAX_EXACT = 2^50, so that each
// intermediate the scripts form stays below 2^53 with room for the clock (now ≈ 2^41 ms today):
//   gcra         capacity = burst×period; d ≤ capacity + limit (in 1/limit ms); next_d = d + cost×period ≤
//                2×capacity + limit; ceil_div(next_d, limit) adds limit - 1: all ≤ 2^52 (cost ≤ burst)
//   tokenBucket  runs as gcra with burst×period = capacity×interval and limit = refillRate: as above
//   fixedWindow  a count ≤ limit and times now + at most 2×window: nothing multiplies them
//   windows      (sliding) limit×window; the sliding estimate previous×(window - elapsed) + current×window ≤
//                2×limit×window ≤ 2^51; stamps and resets are now + at most 2×window
//   slidingLog   one entry per unit: limit ≤ MAX_LOG_LIMIT
// A clock that lags the stored state by more than about 2^51/limit ms (gcra) makes only the retryAfter
// of a request that is denied anyway inexact, by a millisecond at most: admissions stay exact.
/** The largest count, and the largest count × duration product (in ms), a rule may have: 2^50. */
export const MAX_EXACT = 2 ** 50;

export const ceilDiv = (a: number, b: number) => Math.floor((a + b - 1) / b);
// RFC 9651 §3.3.1: an sf-integer has at most 15 digits.
const MAX_SF_INTEGER = 999_999_999_999_999;

/**
 * A window algorithm's rule (`limit` per `window`): its fields checked (`bound` the products its
 * state forms, `extra` its own checks), its policy `limit` per `window`.
 */
export function windowRule<A extends WindowRule["algorithm"]>(
  algorithm: A,
  name: string,
  fields: Fields,
  bound: (limit: number | undefined, window: number | undefined) => void,
  extra?: (limit: number) => void,
): WindowRule | undefined {
  const limit = fields.count("limit");
  const window = fields.duration("window");
  bound(limit, window);
  if (extra !== undefined && limit !== undefined) extra(limit);
  if (fields.failed) return undefined;
  return { name, algorithm, limit: limit!, policy: policyOf(limit!, limit!, window!), window: window! };
}

/**
 * A fixed or sliding window's CountingOptions on its checked `rule`: `counting` set when one is asked
 * for (both at once is refused: a rule that gives back denies nothing to count).
 */
export function withCounting(rule: WindowRule | undefined, fields: Fields): WindowRule | undefined {
  const overshoot = fields.flag("overshoot");
  const givesBack = fields.flag("givesBack");
  if (overshoot && givesBack) {
    fields.issue("givesBack", "a rule that gives back denies nothing: leave out overshoot, or givesBack");
  }
  if (rule === undefined || fields.failed) return undefined;
  if (!overshoot && !givesBack) return rule;
  return { ...rule, counting: givesBack ? GIVES_BACK : OVERSHOOT };
}

/** What a window algorithm encodes and reads back: limit, window, and its counting (0: none). */
export const windowEncoding = <A extends WindowRule["algorithm"]>(algorithm: A) => ({
  encode: (rule: WindowRule): [string, string, string, string] => [
    algorithm,
    String(rule.limit),
    String(rule.window),
    String(rule.counting ?? 0),
  ],
  config: (limit: number, window: number, counting?: number): RuleConfig =>
    counting === OVERSHOOT
      ? ({ algorithm, limit, window, overshoot: true } as RuleConfig)
      : counting === GIVES_BACK
        ? ({ algorithm, limit, window, givesBack: true } as RuleConfig)
        : { algorithm, limit, window },
});

/**
 * The RateLimit-Policy of a rule that admits `units` per `ms` on average and holds at most `most` at
 * once: q per w seconds at exactly that rate (the draft allows whole seconds only), with the smallest
 * q ≥ `most`, so that RateLimit's r never exceeds q. gcra 10 per second with a burst of 20: q=20;w=2;
 * 10 per 500 ms: q=20;w=1; 1000 per day: q=1000;w=86400. Should q not fit the header's 15 digits,
 * q is `most` and w is rounded up instead (a lower rate, never a higher one).
 */
export function policyOf(most: number, units: number, ms: number): RuleBase["policy"] {
  // units per ms = a per b seconds, a/b in lowest terms; then q = k·a, w = k·b with the least k.
  const perSecond = BigInt(units) * 1000n;
  const g = gcd(perSecond, BigInt(ms));
  const a = perSecond / g;
  const b = BigInt(ms) / g;
  const k = (BigInt(most) + a - 1n) / a;
  if (k * a <= BigInt(MAX_SF_INTEGER) && k * b <= BigInt(MAX_SF_INTEGER)) {
    return { quota: Number(k * a), window: Number(k * b) * 1000 };
  }
  return { quota: most, window: Math.ceil((most * ms) / units / 1000) * 1000 };
}

function gcd(a: bigint, b: bigint): bigint {
  while (b !== 0n) [a, b] = [b, a % b];
  return a;
}
