// The token bucket: `capacity` tokens refilled continuously at `refillRate` per `interval`. It runs as
// GCRA (lua/algorithms/gcra.lua) with limit = refillRate, period = interval, burst = capacity.
import type { Duration } from "../duration.js";
import { gcraCounted, gcraOne, gcraOutcome, TAT } from "./gcra.js";
import type { RuleConfig } from "./index.js";
import { type AlgorithmModule, type KeyedOptions, policyOf, type RuleBase } from "./shared.js";

/** A bucket of `capacity` tokens refilled continuously at `refillRate` tokens per `interval` (default 1s). */
export interface TokenBucketOptions extends KeyedOptions {
  capacity: number;
  refillRate: number;
  interval?: Duration;
}

/** A token bucket of `capacity` tokens (= limit), refilled at `refillRate` per `interval` ms. */
export interface TokenBucketRule extends RuleBase {
  readonly algorithm: "tokenBucket";
  readonly capacity: number;
  readonly refillRate: number;
  readonly interval: number;
}

/**
 * Token bucket with continuous refill: `refillRate` tokens per `interval`, at most `capacity`.
 *
 * @example
 * tokenBucket({ capacity: 20, refillRate: 10, interval: "1s" })
 */
export const tokenBucket = (options: TokenBucketOptions): RuleConfig => ({
  algorithm: "tokenBucket",
  ...options,
});

export const tokenBucketAlgorithm: AlgorithmModule<TokenBucketRule> = {
  ...TAT,
  fields: ["capacity", "refillRate", "interval"],
  compile(name, fields) {
    const capacity = fields.count("capacity");
    const refillRate = fields.count("refillRate");
    const interval = fields.has("interval") ? fields.duration("interval") : 1000;
    fields.bounded(capacity, interval, "capacity × interval");
    if (fields.failed) return undefined;
    const policy = policyOf(capacity!, refillRate!, interval!);
    return {
      name,
      algorithm: "tokenBucket",
      limit: capacity!,
      policy,
      capacity: capacity!,
      refillRate: refillRate!,
      interval: interval!,
    };
  },
  encode: (rule) => ["gcra", String(rule.refillRate), String(rule.interval), String(rule.capacity)],
  config: (refillRate, interval, capacity) => ({ algorithm: "tokenBucket", refillRate, interval, capacity }),
  // its state is GCRA's, and its key says so: a token bucket's state of an earlier format is never read
  key: "tokenBucket.gcra",
  oneRule: (rule, options) => gcraOne(rule.refillRate, rule.interval, rule.capacity, options),
  outcome: (rule, result, cost, now) =>
    gcraOutcome(rule.refillRate, rule.interval, rule.capacity, result, cost, now),
  oneRuleCounted: (rule, result, now) => gcraCounted(rule.refillRate, result, now),
};
