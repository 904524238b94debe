import type { Rule } from "./algorithms/index.js";

/** The outcome of one rule for one decision. */
export interface RuleResult {
  allowed: boolean;
  /** The rule's limit (capacity for a token bucket, burst for GCRA). */
  limit: number;
  /** Units left after this decision (whole units, never negative). */
  remaining: number;
  /** Epoch ms at which the rule is back at its full limit. */
  resetAt: number;
  /** Ms until this request's cost could be admitted; 0 when allowed; `Infinity` when never. */
  retryAfter: number;
}

/** The outcome of `Limiter.limit()`. */
export interface Decision extends RuleResult {
  /** The binding rule: the one that denied (latest retry), else the one with least remaining. */
  rule: string;
  /**
   * Where the answer came from: Redis (home), the in-isolate deny cache, a lease held here, the
   * region's pool (one round trip to the region's database only), or `onError`.
   */
  source: "redis" | "cache" | "lease" | "region" | "error";
  /** The rules that applied: "default" (the Limiter's own rules), or the name of the plan the call gave. */
  plan: string;
  /**
   * Epoch ms the decision was made at, by the limiter's clock: what `resetAt` and `retryAfter` count
   * from, and what the headers' `t` and `Retry-After` are computed against.
   */
  decidedAt: number;
  /** Every rule's own outcome, by rule name. */
  rules: Record<string, RuleResult>;
  /**
   * Set when `source` is `"error"`: what went wrong, a `RedisCallError` whose `kind` is "timeout",
   * "unreachable", "unauthorized", "http", "redis" or "breaker-open".
   */
  error?: Error;
  /**
   * The rules this decision was decided by, in rule order: its plan's, or a custom override's own.
   * What its RateLimit-Policy states (`rateLimitHeaders(decision)` reads it). Set on every decision a
   * Limiter returns, whatever its source; not enumerable, so JSON, logs and deep equality skip it (a
   * spread copy of a decision drops it too: keep the Decision a Limiter returned).
   */
  readonly decidedBy?: readonly Rule[];
}

/**
 * A prototype carrying `rules` as `decidedBy` (read-only, not enumerable): a decision built on it
 * (`{ __proto__: carrier, ... }`) carries them with no defineProperty, which costs several times more.
 * Built once per plan, and per stored override's custom rules. Its chain ends in Object.prototype, so
 * the decision's `constructor` is Object's: JSON, logs and deep equality see a plain object.
 */
export function carrierOf(rules: readonly Rule[]): object {
  return Object.create(Object.prototype, { decidedBy: { value: rules, enumerable: false } });
}

/** The descriptor of every `decidedBy` (its value set each time): read-only, not enumerable. */
const decidedByProperty: PropertyDescriptor = { value: undefined, enumerable: false, configurable: true };

/** `decision`, carrying `rules` as the rules it was decided by (its `decidedBy`). */
export function decidedBy<D extends Decision>(decision: D, rules: readonly Rule[]): D {
  decidedByProperty.value = rules;
  Object.defineProperty(decision, "decidedBy", decidedByProperty);
  decidedByProperty.value = undefined;
  return decision;
}

/** What `Limiter.settle()` did. */
export interface Settlement {
  /** The actual cost minus the units the decision took: below 0 given back, above 0 charged as a debt. */
  difference: number;
  /**
   * "redis": one settle call to Redis; "lease": the lease held here took it, with no call; "none":
   * nothing to do (the actual cost was the reservation, or the decision failed open: `source: "error"`).
   */
  via: "redis" | "lease" | "none";
  /** True when the call was handed to `waitUntil` and is still on its way. */
  pending?: boolean;
  /**
   * Set when the settle call failed (a `RedisCallError`): it may or may not have reached Redis, and
   * is never sent again; the reservation stands where it did not.
   */
  error?: Error;
}
