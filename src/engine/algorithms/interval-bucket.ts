// The interval bucket (lua/algorithms/interval_bucket.lua): a token bucket that gains `refillRate`
// tokens at the end of each `interval`, @upstash/ratelimit's token bucket, which edgelimit/upstash
// keeps. Its state is a key of its own ("tokens:refilled at"); no one-rule script, no refund section
// (never leased): every decision is one EVALSHA of the limiter script.
import type { Duration } from "../duration.js";
import type { RuleConfig } from "./index.js";
import { type AlgorithmModule, type KeyedOptions, policyOf, type RuleBase } from "./shared.js";

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
  windowed: false,
  leasable: false,
  holdsTat: false,
  countsDenials: false,
  keyWindow: () => 0,
  countOf: () => 0,
  settleMark: () => 0,
};
