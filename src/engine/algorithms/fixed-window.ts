// The fixed window (lua/algorithms/fixed_window.lua): `limit` units per window of `window` ms, windows
// aligned to the epoch, a key per window.
import {
  ALGORITHM_CONSTANTS,
  FIXED_WINDOW_ONE_RULE,
  FIXED_WINDOW_ONE_RULE_OVERRIDES,
} from "../generated/scripts.js";
import type { OneRule, ScriptCallOptions } from "../scripts/shared.js";
import type { RuleResult } from "../types.js";
import type { RuleConfig } from "./index.js";
import {
  type AlgorithmModule,
  type CountingOptions,
  GIVES_BACK,
  OVERSHOOT,
  type WindowOptions,
  type WindowRule,
  windowEncoding,
  windowRule,
  withCounting,
} from "./shared.js";

/** A fixed window's key outlives its window by min(window, GRACE) ms (lua/algorithms/fixed_window.lua). */
const GRACE = ALGORITHM_CONSTANTS.fixedWindow.GRACE;

/** Ms from `now` until the key of now's window expires: the window's end plus its grace. */
export function expiresIn(window: number, now: number): number {
  return now - (now % window) + window + Math.min(window, GRACE) - now;
}

/**
 * Fixed window: `limit` per `window`, windows aligned to the epoch. `overshoot` and `givesBack`
 * (CountingOptions) keep @upstash/ratelimit's counting where code relies on it.
 *
 * @example
 * fixedWindow({ limit: 1000, window: "1d" })
 */
export const fixedWindow = (options: WindowOptions & CountingOptions): RuleConfig => ({
  algorithm: "fixedWindow",
  ...options,
});

/**
 * The fixed window's one-rule script: ARGV ms until the key expires, then cost and limit for a cost
 * above 1 (no limit with `overshoot`: a denied charge then stays counted).
 */
function fixedWindowOne(
  limit: number,
  window: number,
  overshoot: boolean,
  options: ScriptCallOptions,
): OneRule {
  const limitArg = String(limit);
  return {
    sha1: FIXED_WINDOW_ONE_RULE.sha1,
    options: { ...options, script: FIXED_WINDOW_ONE_RULE },
    takes: (cost) => cost >= 1 && cost <= limit,
    push(command, cost, now) {
      command.push(String(expiresIn(window, now)));
      if (cost === 1) return;
      command.push(String(cost));
      if (!overshoot) command.push(limitArg);
    },
    decode: (count, cost, now) => fixedWindowOutcome(limit, window, count, cost, now),
    // the window of the decision's time: the one its key names
    counted: (_, now) => now - (now % window),
  };
}

/**
 * The fixed window's outcome from its one-rule count (the window's count after adding the cost:
 * admitted iff count <= limit). A cost above the limit (an override lowered it) is never admitted.
 */
function fixedWindowOutcome(
  limit: number,
  window: number,
  count: number,
  cost: number,
  now: number,
): RuleResult {
  const ends = now - (now % window) + window;
  if (count <= limit) return { allowed: true, limit, remaining: limit - count, resetAt: ends, retryAfter: 0 };
  const before = count - cost;
  const never = cost > limit;
  return {
    allowed: false,
    limit,
    remaining: Math.max(0, limit - before),
    resetAt: never && before <= 0 ? now : ends,
    retryAfter: never ? Number.POSITIVE_INFINITY : ends - now,
  };
}

export const fixedWindowAlgorithm: AlgorithmModule<WindowRule> = {
  fields: ["limit", "window"],
  options: ["overshoot", "givesBack"],
  // it only counts and adds times: its limit and window are bounded each on its own
  compile: (name, fields) =>
    withCounting(
      windowRule("fixedWindow", name, fields, (_, window) => fields.bounded(1, window, "window")),
      fields,
    ),
  ...windowEncoding("fixedWindow"),
  key: "fixedWindow",
  windowed: true,
  leasable: true,
  holdsTat: false,
  countsDenials: true,
  keyWindow: (rule) => rule.window,
  countOf: () => 0,
  settleMark: () => 0,
  // a rule that gives back takes the limiter script (its check answers a refund)
  oneRule: (rule, options) =>
    rule.counting === GIVES_BACK
      ? undefined
      : fixedWindowOne(rule.limit, rule.window, rule.counting === OVERSHOOT, options),
  oneRuleOverrides: FIXED_WINDOW_ONE_RULE_OVERRIDES,
  outcome: (rule, count, cost, now) => fixedWindowOutcome(rule.limit, rule.window, count, cost, now),
  oneRuleCounted: (rule, _, now) => now - (now % rule.window),
};
