import { type Duration, describe, toMs } from "./duration.js";

/** `limit` units per `period`, up to `burst` at once (default: `limit`). O(1) memory, exact. */
export interface GcraOptions {
  limit: number;
  period: Duration;
  burst?: number;
}
/** A bucket of `capacity` tokens refilled continuously at `refillRate` tokens per `interval` (default 1s). */
export interface TokenBucketOptions {
  capacity: number;
  refillRate: number;
  interval?: Duration;
}
/** `limit` units per `window`. */
export interface WindowOptions {
  limit: number;
  window: Duration;
}

/** A rule as configured: what the constructors return, and what a JSON config holds. */
export type RuleConfig =
  | ({ algorithm: "gcra" } & GcraOptions)
  | ({ algorithm: "tokenBucket" } & TokenBucketOptions)
  | ({ algorithm: "fixedWindow" } & WindowOptions)
  | ({ algorithm: "slidingWindow" } & WindowOptions)
  | ({ algorithm: "slidingLog" } & WindowOptions);

export type Algorithm = RuleConfig["algorithm"];

/** A validated rule, ready to send. */
export interface Rule {
  readonly name: string;
  readonly algorithm: Algorithm;
  /** The limit reported in decisions (burst for GCRA, capacity for a token bucket). */
  readonly limit: number;
  /** The policy as the RateLimit-Policy header states it: `quota` units per `window` ms. */
  readonly policy: { readonly quota: number; readonly window: number };
  /** The algorithm's name and integer parameters, as the script reads them (4 ARGV slots). */
  readonly args: readonly [string, string, string, string];
}

/**
 * GCRA: `limit` per `period`, up to `burst` at once. Exact, O(1) memory.
 *
 * @example
 * gcra({ limit: 10, period: "1s", burst: 20 })
 */
export const gcra = (options: GcraOptions): RuleConfig => ({ algorithm: "gcra", ...options });

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

/**
 * Fixed window: `limit` per `window`, windows aligned to the epoch.
 *
 * @example
 * fixedWindow({ limit: 1000, window: "1d" })
 */
export const fixedWindow = (options: WindowOptions): RuleConfig => ({ algorithm: "fixedWindow", ...options });

/**
 * Sliding window estimated from two counters: O(1) memory, exact for even traffic (see README for the bound).
 *
 * @example
 * slidingWindow({ limit: 100, window: "1m" })
 */
export const slidingWindow = (options: WindowOptions): RuleConfig => ({
  algorithm: "slidingWindow",
  ...options,
});

/**
 * Sliding log: exactly `limit` in any `window`; one stored entry per admitted unit (O(limit) memory).
 *
 * @example
 * slidingLog({ limit: 3, window: "30s" })
 */
export const slidingLog = (options: WindowOptions): RuleConfig => ({ algorithm: "slidingLog", ...options });

// Integers in the scripts stay exact below 2^53; keep every product they form well under it.
const MAX_PRODUCT = 2 ** 50;
const MAX_LOG_LIMIT = 100_000;
/** What a rule name (and a Worker route name) may be: it becomes part of Redis keys. */
export const NAME = /^[A-Za-z0-9_.-]{1,64}$/;

const FIELDS: Record<Algorithm, readonly string[]> = {
  gcra: ["limit", "period", "burst"],
  tokenBucket: ["capacity", "refillRate", "interval"],
  fixedWindow: ["limit", "window"],
  slidingWindow: ["limit", "window"],
  slidingLog: ["limit", "window"],
};

/**
 * Validates one rule and turns it into what the script reads. Throws an Error naming the rule and field.
 *
 * @example
 * compileRule("daily", fixedWindow({ limit: 1000, window: "1d" })).args // ["fixedWindow", "1000", "86400000", "0"]
 */
export function compileRule(name: string, config: RuleConfig): Rule {
  if (!NAME.test(name)) {
    throw new Error(`rules: rule name ${describe(name)} must be 1-64 characters of A-Z a-z 0-9 _ . -`);
  }
  const at = `rules.${name}`;
  if (config === null || typeof config !== "object") {
    throw new Error(`${at}: expected a rule such as gcra({ limit, period }), got ${describe(config)}`);
  }
  const algorithm = (config as { algorithm?: unknown }).algorithm;
  if (typeof algorithm !== "string" || !Object.hasOwn(FIELDS, algorithm)) {
    throw new Error(
      `${at}.algorithm: unknown algorithm ${describe(algorithm)}; use one of ${Object.keys(FIELDS).join(", ")}`,
    );
  }
  const known = FIELDS[algorithm as Algorithm];
  for (const field of Object.keys(config)) {
    if (field !== "algorithm" && !known.includes(field)) {
      throw new Error(`${at}.${field}: not an option of ${algorithm}; it takes ${known.join(", ")}`);
    }
  }
  const c = config as unknown as Record<string, unknown>;
  const make = (limit: number, quota: number, window: number, params: number[]): Rule => ({
    name,
    algorithm: algorithm as Algorithm,
    limit,
    policy: { quota, window },
    args: [algorithm, String(params[0] ?? 0), String(params[1] ?? 0), String(params[2] ?? 0)],
  });
  switch (algorithm as Algorithm) {
    case "gcra": {
      const limit = count(c.limit, `${at}.limit`);
      const period = toMs(c.period, `${at}.period`);
      const burst = c.burst === undefined ? limit : count(c.burst, `${at}.burst`);
      bound(burst * period, `${at}: burst × period`);
      bound(limit * period, `${at}: limit × period`);
      return make(burst, limit, period, [limit, period, burst]);
    }
    case "tokenBucket": {
      const capacity = count(c.capacity, `${at}.capacity`);
      const refillRate = count(c.refillRate, `${at}.refillRate`);
      const interval = c.interval === undefined ? 1000 : toMs(c.interval, `${at}.interval`);
      bound(capacity * interval, `${at}: capacity × interval`);
      return make(capacity, capacity, Math.ceil((capacity * interval) / refillRate), [
        capacity,
        refillRate,
        interval,
      ]);
    }
    default: {
      const limit = count(c.limit, `${at}.limit`);
      const window = toMs(c.window, `${at}.window`);
      bound(limit * window, `${at}: limit × window`);
      if (algorithm === "slidingLog" && limit > MAX_LOG_LIMIT) {
        throw new Error(
          `${at}.limit: a sliding log stores one entry per unit, so ${limit} is too many (max ${MAX_LOG_LIMIT}); use slidingWindow or gcra`,
        );
      }
      return make(limit, limit, window, [limit, window]);
    }
  }
}

function count(value: unknown, field: string): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value <= 0) {
    throw new Error(`${field}: must be a positive whole number, got ${describe(value)}`);
  }
  return value;
}

function bound(product: number, what: string): void {
  if (product > MAX_PRODUCT) throw new Error(`${what} is too large to count exactly (must stay below 2^50)`);
}
