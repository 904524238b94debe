import type { Rule } from "./algorithms.js";
import type { RuleResult } from "./types.js";

// The one-rule shortcuts of the limiter script (lua/shortcut/*.lua) answer one integer instead of a
// table (a table reply costs Redis about 0.5 µs more per call). What each integer means, and how the
// answer follows from it, mirrors the Lua line for line: the same double arithmetic on the same
// integers, so the results are the ones the algorithm files would have returned.

/** The fixed window's grace: its key outlives the window by min(window, GRACE_MS) (lua/algorithms/fixed_window.lua). */
export const FIXED_WINDOW_GRACE_MS = 60_000;
const PACK = 2 ** 25;

const ceilDiv = (a: number, b: number) => Math.floor((a + b - 1) / b);

/**
 * Whether a call of `rule` alone, for `cost`, takes its algorithm's shortcut: the Limiter sends it
 * only without a reservation, and the script takes it for a cost of 1 up to what the rule can ever
 * admit (a peek and a larger cost go the general way).
 */
export function takesShortcut(rule: Rule, cost: number): boolean {
  if (cost < 1 || cost > rule.limit) return false;
  const algorithm = rule.args[0];
  if (algorithm === "slidingWindow") return rule.limit < PACK;
  return algorithm === "fixedWindow" || algorithm === "gcra";
}

/**
 * The arguments of the fixed window's shortcut (its own layout, fewer than 4): the ms until the
 * window's key expires, then cost and limit when the cost is more than 1.
 */
export function fixedWindowArgs(rule: Rule, cost: number, now: number): string[] {
  const window = Number(rule.args[2]);
  const ends = now - (now % window) + window;
  const ttl = String(ends + Math.min(window, FIXED_WINDOW_GRACE_MS) - now);
  return cost === 1 ? [ttl] : [ttl, String(cost), rule.args[1]];
}

/** What a shortcut's integer says for `rule`, decided at `now` for `cost` (1..limit). */
export function decodeShortcut(rule: Rule, result: number, cost: number, now: number): RuleResult {
  const [algorithm, p1, p2, p3] = rule.args;
  switch (algorithm) {
    case "fixedWindow": {
      // the window's count after adding the cost
      const limit = Number(p1);
      const window = Number(p2);
      const resetAt = now - (now % window) + window;
      if (result <= limit) return { allowed: true, limit, remaining: limit - result, resetAt, retryAfter: 0 };
      return {
        allowed: false,
        limit,
        remaining: Math.max(0, limit - (result - cost)),
        resetAt,
        retryAfter: resetAt - now,
      };
    }
    case "gcra": {
      // d: how far TAT lies ahead of now, in 1/limit ms; after the cost when admitted
      const limit = Number(p1);
      const period = Number(p2);
      const burst = Number(p3);
      const capacity = burst * period;
      const allowed = result >= 0;
      const d = allowed ? result : -result - 1;
      const room = Math.floor((capacity - d) / period);
      return {
        allowed,
        limit: burst,
        remaining: Math.max(0, room),
        resetAt: now + ceilDiv(d, limit),
        retryAfter: allowed ? 0 : ceilDiv(d + cost * period - capacity, limit),
      };
    }
    case "slidingWindow": {
      // ((current * 2^25 + previous) * 2 + newer); current after the cost when admitted
      const limit = Number(p1);
      const window = Number(p2);
      const allowed = result >= 0;
      const packed = allowed ? result : -result - 1;
      const newer = packed % 2;
      const counts = (packed - newer) / 2;
      const current = Math.floor(counts / PACK);
      const previous = counts - current * PACK;
      const start = now - (now % window) + newer * window;
      const elapsed = Math.max(0, now - start);
      const used = previous * (window - elapsed) + current * window;
      const room = Math.floor((limit * window - used) / window);
      if (allowed) return { allowed, limit, remaining: room, resetAt: start + 2 * window, retryAfter: 0 };
      const resetAt = current > 0 ? start + 2 * window : previous > 0 ? start + window : now;
      let retryAfter: number;
      if (current + cost <= limit) {
        // the previous window's weight has to fade (see lua/algorithms/sliding_window.lua)
        const fade = window - Math.floor(((limit - current - cost) * window) / previous);
        retryAfter = Math.max(1, start + fade - now);
      } else {
        const fade = window - Math.floor(((limit - cost) * window) / current);
        retryAfter = start + window - now + fade;
      }
      return { allowed, limit, remaining: Math.max(0, room), resetAt, retryAfter };
    }
    default:
      throw new Error(`no shortcut for ${algorithm}`);
  }
}
