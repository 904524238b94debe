// The sliding window (lua/algorithms/sliding_window.lua): `limit` units per `window` ms, estimated
// from two counters.
import {
  ALGORITHM_CONSTANTS,
  SLIDING_WINDOW_ONE_RULE,
  SLIDING_WINDOW_ONE_RULE_OVERRIDES,
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

/**
 * The packed state holds counts below PACK (lua/algorithms/sliding_window.lua): a packed integer below
 * it, a text above.
 */
export const PACK = ALGORITHM_CONSTANTS.slidingWindow.PACK;
/** Below a limit of SMALL, the state also keeps where in each window its latest unit came (SLOTS a
 * window, both windows' in one number under SLOT), used once callers' clocks have disagreed. */
const { SMALL, SLOTS, SLOT } = ALGORITHM_CONSTANTS.slidingWindow;

/**
 * Sliding window estimated from two counters: O(1) memory, exact for even traffic (docs/algorithms.md gives the bound).
 *
 * @example
 * slidingWindow({ limit: 100, window: "1m" })
 */
export const slidingWindow = (options: WindowOptions & CountingOptions): RuleConfig => ({
  algorithm: "slidingWindow",
  ...options,
});

/**
 * The sliding window's (limit below PACK): ARGV now (hexadecimal), cost, limit, window, and "1" with
 * `overshoot` (a denied charge is counted).
 */
function slidingWindowOne(
  limit: number,
  window: number,
  overshoot: boolean,
  options: ScriptCallOptions,
): OneRule {
  const tail = [String(limit), String(window)] as const;
  return {
    sha1: SLIDING_WINDOW_ONE_RULE.sha1,
    options: { ...options, script: SLIDING_WINDOW_ONE_RULE },
    takes: (cost) => cost >= 1 && cost <= limit,
    push(command, cost, now) {
      command.push(now.toString(16), String(cost), tail[0], tail[1]);
      if (overshoot) command.push("1");
    },
    decode: (result, cost, now) => slidingWindowOutcome(limit, window, result, cost, now),
    counted: (result, now) => slidingWindowCounted(window, result, now),
  };
}

/**
 * The sliding window's one-rule integer, n when admitted and -n - 1 when denied, with
 * n = counts * 4 + newer * 2 + slotted (lua/algorithms/sliding_window.lua): its counts (current after
 * the cost when admitted) and, slotted, where in each window its latest unit came and whether callers'
 * clocks have disagreed; and whether a lagging caller was counted in the next window. A cost above the limit (a stored override lowered it) is
 * never admitted.
 */
function slidingWindowOutcome(
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

/**
 * Where an admission counted its units, from the one-rule integer: the window of `now`, or the next one
 * for a lagging caller (its `newer` bit).
 */
function slidingWindowCounted(window: number, result: number, now: number): number {
  return now - (now % window) + (Math.floor(result / 2) % 2) * window;
}

/** Ms from a window's start to the end of `slot`, one of SLOTS equal parts (rounded up). */
function slotSpan(slot: number, window: number): number {
  return Math.floor(((slot + 1) * window + SLOTS - 1) / SLOTS);
}

export const slidingWindowAlgorithm: AlgorithmModule<WindowRule> = {
  fields: ["limit", "window"],
  options: ["overshoot", "givesBack"],
  compile: (name, fields) =>
    withCounting(
      windowRule("slidingWindow", name, fields, (limit, window) =>
        fields.bounded(limit, window, "limit × window"),
      ),
      fields,
    ),
  ...windowEncoding("slidingWindow"),
  key: "slidingWindow",
  windowed: true,
  leasable: true,
  holdsTat: false,
  countsDenials: false,
  keyWindow: () => 0,
  countOf: () => 0,
  settleMark: () => 0,
  // its state changes format at PACK: a plan stays on its base rule's side, so that counts carry
  carries: (from, to) =>
    from < PACK === to < PACK
      ? undefined
      : `${to} must stay ${from < PACK ? `below ${PACK}` : `at ${PACK} or above`} like the base rule's ${from}: a sliding window stores counts in another format there, and the usage counted under one plan would not carry to the other`,
  // a larger limit keeps a text state, which the one-rule script does not read
  // (and a rule that gives back takes the limiter script: its check answers a refund)
  oneRule: (rule, options) =>
    rule.limit < PACK && rule.counting !== GIVES_BACK
      ? slidingWindowOne(rule.limit, rule.window, rule.counting === OVERSHOOT, options)
      : undefined,
  oneRuleOverrides: SLIDING_WINDOW_ONE_RULE_OVERRIDES,
  outcome: (rule, result, cost, now) => slidingWindowOutcome(rule.limit, rule.window, result, cost, now),
  oneRuleCounted: (rule, result, now) => slidingWindowCounted(rule.window, result, now),
};
