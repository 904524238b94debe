// GCRA (lua/algorithms/gcra.lua): `limit` units per `period`, up to `burst` at once. The token bucket
// (./token-bucket.ts) runs as it.
import type { Duration } from "../duration.js";
import { GCRA_ONE_RULE, GCRA_ONE_RULE_OVERRIDES } from "../generated/scripts.js";
import type { OneRule, ScriptCallOptions } from "../scripts/shared.js";
import type { RuleResult } from "../types.js";
import type { RuleConfig } from "./index.js";
import { type AlgorithmModule, ceilDiv, type KeyedOptions, policyOf, type RuleBase } from "./shared.js";

/** `limit` units per `period`, up to `burst` at once (default: `limit`). O(1) memory, exact. */
export interface GcraOptions extends KeyedOptions {
  limit: number;
  period: Duration;
  burst?: number;
}

/** GCRA: `rate` units per `period` ms (the `limit` option), up to `burst` at once (= limit). */
export interface GcraRule extends RuleBase {
  readonly algorithm: "gcra";
  readonly rate: number;
  readonly period: number;
  readonly burst: number;
}

/**
 * GCRA: `limit` per `period`, up to `burst` at once. Exact, O(1) memory.
 *
 * @example
 * gcra({ limit: 10, period: "1s", burst: 20 })
 */
export const gcra = (options: GcraOptions): RuleConfig => ({ algorithm: "gcra", ...options });

/**
 * GCRA's one-rule script (a token bucket's too): ARGV now (hexadecimal), cost, limit, period, burst.
 */
export function gcraOne(rate: number, period: number, burst: number, options: ScriptCallOptions): OneRule {
  const call = { ...options, script: GCRA_ONE_RULE };
  const tail = [String(rate), String(period), String(burst)] as const;
  return {
    sha1: GCRA_ONE_RULE.sha1,
    options: call,
    takes: (cost) => cost >= 1 && cost <= burst,
    push(command, cost, now) {
      command.push(now.toString(16), String(cost), tail[0], tail[1], tail[2]);
    },
    decode: (result, cost, now) => gcraOutcome(rate, period, burst, result, cost, now),
    counted: (result, now) => gcraCounted(rate, result, now),
  };
}

/**
 * GCRA's one-rule integer: d after the cost when admitted, else -(d before) - 1. A cost above the
 * burst (a stored override lowered it) is never admitted.
 */
export function gcraOutcome(
  rate: number,
  period: number,
  burst: number,
  result: number,
  cost: number,
  now: number,
): RuleResult {
  // d: how far TAT lies ahead of now, in 1/rate ms; after the cost when admitted
  const capacity = burst * period;
  const allowed = result >= 0;
  const d = allowed ? result : -result - 1;
  return {
    allowed,
    limit: burst,
    remaining: Math.max(0, Math.floor((capacity - d) / period)),
    resetAt: now + ceilDiv(d, rate),
    retryAfter: allowed
      ? 0
      : cost > burst
        ? Number.POSITIVE_INFINITY
        : ceilDiv(d + cost * period - capacity, rate),
  };
}

/** Where an admission counted its units, from the one-rule integer: the TAT they hold (d after it). */
export function gcraCounted(rate: number, result: number, now: number): number {
  return now + ceilDiv(result, rate);
}

/** What GCRA and the token bucket share: their state is a TAT, leasable, one-rule script. */
export const TAT = {
  windowed: false,
  leasable: true,
  holdsTat: true,
  countsDenials: false,
  keyWindow: () => 0,
  // the time it counted from (its units hold a TAT: a refund gives back none since earned back)
  countOf: (_rule: unknown, _outcome: unknown, decidedAt: number) => decidedAt,
  settleMark: (count: number) => count,
  oneRuleOverrides: GCRA_ONE_RULE_OVERRIDES,
} as const;

export const gcraAlgorithm: AlgorithmModule<GcraRule> = {
  ...TAT,
  fields: ["limit", "period", "burst"],
  compile(name, fields) {
    const limit = fields.count("limit");
    const period = fields.duration("period");
    const burst = fields.has("burst") ? fields.count("burst") : limit;
    fields.bounded(burst, period, "burst × period");
    if (fields.failed) return undefined;
    const policy = policyOf(burst!, limit!, period!);
    return { name, algorithm: "gcra", limit: burst!, policy, rate: limit!, period: period!, burst: burst! };
  },
  encode: (rule) => ["gcra", String(rule.rate), String(rule.period), String(rule.burst)],
  config: (limit, period, burst) => ({ algorithm: "gcra", limit, period, burst }),
  key: "gcra",
  oneRule: (rule, options) => gcraOne(rule.rate, rule.period, rule.burst, options),
  outcome: (rule, result, cost, now) => gcraOutcome(rule.rate, rule.period, rule.burst, result, cost, now),
  oneRuleCounted: (rule, result, now) => gcraCounted(rule.rate, result, now),
};
