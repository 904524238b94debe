// The interval bucket (lua/algorithms/interval_bucket.lua): a token bucket that gains `refillRate`
// tokens at the end of each `interval`, @upstash/ratelimit's token bucket, which edgelimit/upstash
// keeps. Its state is a key of its own ("tokens:refilled at"); no refund section (never leased). A rule
// that takes runs its one-rule script alone (with overrides on, its variant that reads the stored
// override, which may apply rules that give back: the script adds the cost then); one that gives back,
// the limiter script.
import type { Duration } from "../duration.js";
import {
  ALGORITHM_CONSTANTS,
  INTERVAL_BUCKET_ONE_RULE,
  INTERVAL_BUCKET_ONE_RULE_OVERRIDES,
} from "../generated/scripts.js";
import type { OneRule, ScriptCallOptions } from "../scripts/shared.js";
import type { RuleResult } from "../types.js";
import type { RuleConfig } from "./index.js";
import { type AlgorithmModule, ceilDiv, type KeyedOptions, policyOf, type RuleBase } from "./shared.js";

const { DEBTS } = ALGORITHM_CONSTANTS.intervalBucket;

/** A bucket of `capacity` tokens, `refillRate` more at the end of each `interval` (default 1s). */
export interface IntervalBucketOptions extends KeyedOptions {
  capacity: number;
  refillRate: number;
  interval?: Duration;
  /**
   * Every decision gives its cost back instead of taking it: always admitted, past `capacity` if need
   * be (a credit, which the next refill cuts back to `capacity`). For a Limiter of its own beside the
   * charging one, on the same prefix and rule name: the two share the rule's key.
   */
  givesBack?: boolean;
}

/** An interval bucket: `capacity` (= limit) tokens, `refillRate` more per `interval` ms. */
export interface IntervalBucketRule extends RuleBase {
  readonly algorithm: "intervalBucket";
  readonly capacity: number;
  readonly refillRate: number;
  readonly interval: number;
  readonly givesBack?: true;
}

/**
 * Token bucket refilled at each interval's end: `refillRate` tokens every `interval`, at most
 * `capacity`, the intervals counted from the bucket's first decision.
 *
 * @example
 * intervalBucket({ capacity: 20, refillRate: 5, interval: "10s" })
 */
export const intervalBucket = (options: IntervalBucketOptions): RuleConfig => ({
  algorithm: "intervalBucket",
  ...options,
});

/** When a bucket holding `t` tokens, refilled at `at`, is full again, as the script's full_at. */
function fullAt(rule: IntervalBucketRule, t: number, at: number): number {
  if (t >= rule.capacity) return at + rule.interval;
  return at + ceilDiv(rule.capacity - t, rule.refillRate) * rule.interval;
}

/** The last refill's time from the one-rule script's a (= at + interval - 1 - now). */
const refilledAt = (rule: IntervalBucketRule, a: number, now: number) => now + a - rule.interval + 1;

/**
 * The outcome of a charge of `cost` from the one-rule integer (lua/algorithms/interval_bucket.lua's
 * #one-rule): r >= 0 admitted, odd for a credit left (at or above capacity); r < 0 denied, even for
 * a credit read.
 */
export function intervalBucketOutcome(
  rule: IntervalBucketRule,
  result: number,
  cost: number,
  now: number,
): RuleResult {
  const { capacity } = rule;
  if (result >= 0) {
    if (result % 2 === 1) {
      const left = capacity + (result - 1) / 2;
      return { allowed: true, limit: capacity, remaining: left, resetAt: now, retryAfter: 0 };
    }
    const left = (result / 2) % capacity;
    const at = refilledAt(rule, (result / 2 - left) / capacity, now);
    return {
      allowed: true,
      limit: capacity,
      remaining: left,
      resetAt: fullAt(rule, left, at),
      retryAfter: 0,
    };
  }
  const x = -result - 1;
  if (x % 2 === 1) {
    // a credit above capacity, and a cost above it
    const t = capacity + (x - 1) / 2;
    return {
      allowed: false,
      limit: capacity,
      remaining: t,
      resetAt: now,
      retryAfter: Number.POSITIVE_INFINITY,
    };
  }
  const debt = DEBTS * capacity;
  const span = capacity + debt + 1;
  const low = (x / 2) % span;
  const t = low - debt;
  const at = refilledAt(rule, (x / 2 - low) / span, now);
  return {
    allowed: false,
    limit: capacity,
    remaining: Math.max(0, t),
    resetAt: t >= capacity ? now : fullAt(rule, t, at),
    retryAfter:
      cost > capacity
        ? Number.POSITIVE_INFINITY
        : at + ceilDiv(cost - t, rule.refillRate) * rule.interval - now,
  };
}

/**
 * Where an admission counted its units, as the limiter script answers: the last refill's time, or now
 * for a lagging caller (before it). A settle gives back only while no later refill is stored, which
 * now, for a credit left (its reply does not carry the refill's time), tells as well.
 */
export function intervalBucketCounted(rule: IntervalBucketRule, result: number, now: number): number {
  if (result % 2 === 1) return now;
  const half = result / 2;
  return Math.min(now, refilledAt(rule, (half - (half % rule.capacity)) / rule.capacity, now));
}

/** The one-rule script of a rule that takes: ARGV now (hexadecimal), cost, capacity, interval, p3. */
function intervalBucketOne(rule: IntervalBucketRule, options: ScriptCallOptions): OneRule | undefined {
  if (rule.givesBack) return undefined;
  const call = { ...options, script: INTERVAL_BUCKET_ONE_RULE };
  const tail = [String(rule.capacity), String(rule.interval), String(rule.refillRate * 2)] as const;
  return {
    sha1: INTERVAL_BUCKET_ONE_RULE.sha1,
    options: call,
    takes: (cost) => cost >= 1,
    push(command, cost, now) {
      command.push(now.toString(16), String(cost), tail[0], tail[1], tail[2]);
    },
    decode: (result, cost, now) => intervalBucketOutcome(rule, result, cost, now),
    // where its units were counted: the last refill's time, as the limiter script answers
    counted: (result, now) => intervalBucketCounted(rule, result, now),
  };
}

export const intervalBucketAlgorithm: AlgorithmModule<IntervalBucketRule> = {
  fields: ["capacity", "refillRate", "interval"],
  options: ["givesBack"],
  compile(name, fields) {
    const capacity = fields.count("capacity");
    const refillRate = fields.count("refillRate");
    const interval = fields.has("interval") ? fields.duration("interval") : 1000;
    const givesBack = fields.flag("givesBack");
    // the key's expiry is at most capacity (plus a settle's debt) intervals away
    fields.bounded(capacity, interval, "capacity × interval");
    if (fields.failed) return undefined;
    return {
      name,
      algorithm: "intervalBucket",
      limit: capacity!,
      policy: policyOf(capacity!, refillRate!, interval!),
      capacity: capacity!,
      refillRate: refillRate!,
      interval: interval!,
      ...(givesBack ? { givesBack: true as const } : {}),
    };
  },
  // the third parameter carries givesBack in its lowest bit (refillRate ≤ 2^50: still exact)
  encode: (rule) => [
    "intervalBucket",
    String(rule.capacity),
    String(rule.interval),
    String(rule.refillRate * 2 + (rule.givesBack ? 1 : 0)),
  ],
  config: (capacity, interval, p3) => ({
    algorithm: "intervalBucket",
    capacity,
    interval,
    refillRate: Math.floor(p3 / 2),
    ...(p3 % 2 === 1 ? { givesBack: true } : {}),
  }),
  key: "intervalBucket",
  oneRule: intervalBucketOne,
  oneRuleOverrides: INTERVAL_BUCKET_ONE_RULE_OVERRIDES,
  outcome: intervalBucketOutcome,
  oneRuleCounted: intervalBucketCounted,
  windowed: false,
  leasable: false,
  holdsTat: false,
  countsDenials: false,
  keyWindow: () => 0,
  countOf: () => 0,
  settleMark: () => 0,
};
