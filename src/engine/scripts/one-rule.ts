// The one-rule scripts (one rule, no reservation, a cost the rule can admit): straight-line Lua
// answering one integer, decoded here per algorithm.
import type { Rule } from "../algorithms.js";
import {
  ALGORITHM_CONSTANTS,
  FIXED_WINDOW_ONE_RULE,
  GCRA_ONE_RULE,
  SLIDING_WINDOW_ONE_RULE,
} from "../generated/scripts.js";
import type { CallOptions, CallResult, Script } from "../transport.js";
import { type Decision, decidedBy, type RuleResult } from "../types.js";
import { type OneRule, type PlanEncoding, type ScriptCallOptions, unexpected } from "./shared.js";

/** A fixed window's key outlives its window by min(window, GRACE) ms (lua/algorithms/fixed_window.lua). */
export const GRACE = ALGORITHM_CONSTANTS.fixedWindow.GRACE;
/** The sliding window's packed state holds counts below PACK (lua/algorithms/sliding_window.lua). */
export const PACK = ALGORITHM_CONSTANTS.slidingWindow.PACK;
/** Below a limit of SMALL, the state also keeps where in each window its latest unit came (SLOTS a
 * window, both windows' in one number under SLOT), used once callers' clocks have disagreed. */
const { SMALL, SLOTS, SLOT } = ALGORITHM_CONSTANTS.slidingWindow;

const ceilDiv = (a: number, b: number) => Math.floor((a + b - 1) / b);

/** The fixed window's: ARGV ms until the key expires, then cost and limit for a cost above 1. */
function fixedWindowOne(limit: number, window: number, options: CallOptions): OneRule {
  const limitArg = String(limit);
  return {
    sha1: options.script!.sha1,
    options,
    takes: (cost) => cost >= 1 && cost <= limit,
    push(command, cost, now) {
      const ends = now - (now % window) + window;
      command.push(String(ends + Math.min(window, GRACE) - now));
      if (cost !== 1) command.push(String(cost), limitArg);
    },
    decode: (count, cost, now) => fixedWindowOutcome(limit, window, count, cost, now),
  };
}

/**
 * The fixed window's outcome from its one-rule count (the window's count after adding the cost:
 * admitted iff count <= limit). A cost above the limit (an override lowered it) is never admitted.
 */
export function fixedWindowOutcome(
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

/** GCRA's (a token bucket's too): ARGV now (hexadecimal), cost, limit, period, burst. */
function gcraOne(rate: number, period: number, burst: number, options: CallOptions): OneRule {
  const tail = [String(rate), String(period), String(burst)] as const;
  return {
    sha1: options.script!.sha1,
    options,
    takes: (cost) => cost >= 1 && cost <= burst,
    push(command, cost, now) {
      command.push(now.toString(16), String(cost), tail[0], tail[1], tail[2]);
    },
    decode: (result, cost, now) => gcraOutcome(rate, period, burst, result, cost, now),
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

/** The sliding window's (limit below PACK): ARGV now (hexadecimal), cost, limit, window. */
function slidingWindowOne(limit: number, window: number, options: CallOptions): OneRule {
  const tail = [String(limit), String(window)] as const;
  return {
    sha1: options.script!.sha1,
    options,
    takes: (cost) => cost >= 1 && cost <= limit,
    push(command, cost, now) {
      command.push(now.toString(16), String(cost), tail[0], tail[1]);
    },
    decode: (result, cost, now) => slidingWindowOutcome(limit, window, result, cost, now),
  };
}

/**
 * The sliding window's one-rule integer, n when admitted and -n - 1 when denied, with
 * n = counts * 4 + newer * 2 + slotted (lua/algorithms/sliding_window.lua): its counts (current after
 * the cost when admitted) and, slotted, where in each window its latest unit came and whether callers'
 * clocks have disagreed; and whether a lagging caller was counted in the next window. A cost above the limit (a stored override lowered it) is
 * never admitted.
 */
export function slidingWindowOutcome(
  limit: number,
  window: number,
  result: number,
  cost: number,
  now: number,
): RuleResult {
  const allowed = result >= 0;
  const n = allowed ? result : -result - 1;
  const slotted = n % 2;
  const newer = Math.floor(n / 2) % 2;
  let counts = Math.floor(n / 4);
  let skewed = 0;
  let slots = 0;
  let current: number;
  if (slotted === 1) {
    skewed = counts % 2;
    counts = (counts - skewed) / 2;
    slots = Math.floor(counts / SLOT);
    counts -= slots * SLOT;
    current = Math.floor(counts / SMALL);
  } else {
    current = Math.floor(counts / PACK);
  }
  const previous = counts - current * (slotted === 1 ? SMALL : PACK);
  // once callers' clocks disagreed, each window's units spread up to the slot of its latest one
  const spreadOf = (slot: number) => (skewed === 1 ? slotSpan(slot, window) : window);
  const start = now - (now % window) + newer * window;
  const elapsed = Math.max(0, now - start);
  const spread = spreadOf(slots % SLOTS);
  const weight = Math.max(0, spread - elapsed);
  let room = Math.floor((limit * spread - previous * weight - current * spread) / spread);
  if (allowed) return { allowed, limit, remaining: room, resetAt: start + 2 * window, retryAfter: 0 };
  // a unit that would spread this window's units later than the room it leaves covers (lua's `late`)
  const latest = Math.floor(slots / SLOTS);
  const slot = Math.floor(((now - start) * SLOTS) / window);
  const late =
    skewed === 1 &&
    current > 0 &&
    now > start &&
    slot > latest &&
    current * (slotSpan(slot, window) - slotSpan(latest, window)) > (limit - current) * window;
  if (late) room = Math.min(room, 0);
  const resetAt = current > 0 ? start + 2 * window : previous > 0 ? start + window : now;
  let retryAfter: number;
  if (cost > limit) {
    retryAfter = Number.POSITIVE_INFINITY;
  } else if (current + cost <= limit && !late) {
    // the previous window's weight has to fade (see the check in lua/algorithms/sliding_window.lua)
    const fade = spread - Math.floor(((limit - current - cost) * spread) / previous);
    retryAfter = Math.max(1, start + fade - now);
  } else {
    const own = spreadOf(latest);
    const fade = Math.max(0, own - Math.floor(((limit - cost) * own) / current));
    retryAfter = start + window - now + fade;
  }
  return { allowed, limit, remaining: Math.max(0, room), resetAt, retryAfter };
}

/** Ms from a window's start to the end of `slot`, one of SLOTS equal parts (rounded up). */
function slotSpan(slot: number, window: number): number {
  return Math.floor(((slot + 1) * window + SLOTS - 1) / SLOTS);
}

/** The one-rule script of `rule`, when its algorithm has one that fits it. */
export function oneRuleOf(rule: Rule, options: ScriptCallOptions): OneRule | undefined {
  const call = (script: Script): CallOptions => ({ ...options, script });
  switch (rule.algorithm) {
    case "fixedWindow":
      return fixedWindowOne(rule.limit, rule.window, call(FIXED_WINDOW_ONE_RULE));
    case "gcra":
      return gcraOne(rule.rate, rule.period, rule.burst, call(GCRA_ONE_RULE));
    case "tokenBucket":
      return gcraOne(rule.refillRate, rule.interval, rule.capacity, call(GCRA_ONE_RULE));
    case "slidingWindow":
      // the packed state holds counts below PACK: a larger limit keeps a text state, which the
      // one-rule script does not read
      return rule.limit < PACK
        ? slidingWindowOne(rule.limit, rule.window, call(SLIDING_WINDOW_ONE_RULE))
        : undefined;
    default:
      return undefined;
  }
}

/** The Decision of a one-rule script's reply. */
export function oneRuleDecision(
  plan: PlanEncoding,
  one: OneRule,
  reply: CallResult,
  cost: number,
  now: number,
): Decision | Error {
  if (!reply.ok) return reply.error;
  const result = reply.result;
  if (typeof result !== "number" || !Number.isInteger(result)) return unexpected(result);
  const outcome = one.decode(result, cost, now);
  const name = plan.rules[0]!.name;
  const rules: Record<string, RuleResult> = {};
  rules[name] = outcome;
  const decision: Decision = {
    allowed: outcome.allowed,
    limit: outcome.limit,
    remaining: outcome.remaining,
    resetAt: outcome.resetAt,
    retryAfter: outcome.retryAfter,
    rule: name,
    source: "redis",
    plan: plan.name,
    decidedAt: now,
    rules,
  };
  return decidedBy(decision, plan.rules);
}
