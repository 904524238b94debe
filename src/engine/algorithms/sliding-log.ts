// The sliding log (lua/algorithms/sliding_log.lua): exactly `limit` units in any `window` ms, one
// stored entry per unit. It has no refund (never leased) and no one-rule script.
import type { RuleConfig } from "./index.js";
import {
  type AlgorithmModule,
  type WindowOptions,
  type WindowRule,
  windowEncoding,
  windowRule,
} from "./shared.js";

const MAX_LOG_LIMIT = 100_000;

/**
 * Sliding log: exactly `limit` in any `window`; one stored entry per admitted unit (O(limit) memory).
 *
 * @example
 * slidingLog({ limit: 3, window: "30s" })
 */
export const slidingLog = (options: WindowOptions): RuleConfig => ({ algorithm: "slidingLog", ...options });

export const slidingLogAlgorithm: AlgorithmModule<WindowRule> = {
  fields: ["limit", "window"],
  compile: (name, fields) =>
    windowRule(
      "slidingLog",
      name,
      fields,
      (limit, window) => fields.bounded(limit, window, "limit × window"),
      (limit) => {
        if (limit > MAX_LOG_LIMIT) {
          fields.issue(
            "limit",
            `a sliding log stores one entry per unit, so ${limit} is too many (max ${MAX_LOG_LIMIT}); use slidingWindow or gcra`,
          );
        }
      },
    ),
  ...windowEncoding("slidingLog"),
  key: "slidingLog",
  windowed: false,
  leasable: false,
  holdsTat: false,
  countsDenials: false,
  keyWindow: () => 0,
  // the count after it, limit - remaining (sliding logs are never leased, so remaining is Redis's own)
  countOf: (rule, outcome) => rule.limit - outcome.remaining,
  // the settle removes the decision's own entries: those above the count before it
  settleMark: (count, cost) => count - cost,
};
