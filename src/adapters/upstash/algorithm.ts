// The peer's algorithms as edgelimit rules. The static factories of Ratelimit return one of these:
// what rule to build at a given limit (a dynamic limit builds it again), and the peer's semantics the
// rule keeps: a window counts a charge that overshoots its room, although the call is denied
// (`overshoot`), a token bucket refills at each interval's end (intervalBucket), and a negative rate
// is a refund in one EVALSHA (`givesBack`, on a rule of the same name, so the same keys).

import { fixedWindow, intervalBucket, type RuleConfig, slidingWindow } from "../../index.js";
import { type Duration, durationMs } from "./duration.js";

/** What a static factory describes: the rule and the peer's semantics it keeps. */
export interface AlgorithmSpec {
  readonly name: "fixedWindow" | "slidingWindow" | "tokenBucket" | "cachedFixedWindow";
  /** The configured limit (`tokens`, or a token bucket's `maxTokens`). */
  readonly limit: number;
  /** The window, or a token bucket's interval, in ms. */
  readonly window: number;
  /** The rule this algorithm decides by at `limit` (the configured one, or a dynamic limit). */
  rule(limit: number): RuleConfig;
  /** The rule that gives units back at `limit` (a negative rate: one EVALSHA). */
  refundRule(limit: number): RuleConfig;
}

/**
 * An algorithm as `Ratelimit.fixedWindow(...)` and its siblings return it, for the `limiter` option.
 * The type parameter is the peer's context type, kept so that code naming `Algorithm<...>` compiles.
 */
// biome-ignore lint/correctness/noUnusedVariables: the peer's signature, kept for code that names it
export type Algorithm<TContext = unknown> = () => AlgorithmSpec;

function count(value: unknown, field: string): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value <= 0) {
    throw new Error(`${field}: must be a positive whole number, got ${String(value)}`);
  }
  return value;
}

/** A fixed window of `tokens` per `window`, epoch-aligned, on edgelimit's fixedWindow. */
export function fixedWindowSpec(tokens: number, window: Duration): Algorithm {
  const limit = count(tokens, "tokens");
  const ms = durationMs(window, "window");
  const spec: AlgorithmSpec = {
    name: "fixedWindow",
    limit,
    window: ms,
    rule: (at) => fixedWindow({ limit: at, window: ms, overshoot: true }),
    refundRule: (at) => fixedWindow({ limit: at, window: ms, givesBack: true }),
  };
  return () => spec;
}

/** `tokens` per moving `window`, estimated from two counters, on edgelimit's slidingWindow. */
export function slidingWindowSpec(tokens: number, window: Duration): Algorithm {
  const limit = count(tokens, "tokens");
  const ms = durationMs(window, "window");
  const spec: AlgorithmSpec = {
    name: "slidingWindow",
    limit,
    window: ms,
    rule: (at) => slidingWindow({ limit: at, window: ms, overshoot: true }),
    refundRule: (at) => slidingWindow({ limit: at, window: ms, givesBack: true }),
  };
  return () => spec;
}

/**
 * A bucket of `maxTokens`, `refillRate` more at each `interval`'s end, on edgelimit's intervalBucket:
 * the peer's refill, and its refunds past `maxTokens` (a credit until the next refill).
 */
export function tokenBucketSpec(refillRate: number, interval: Duration, maxTokens: number): Algorithm {
  const rate = count(refillRate, "refillRate");
  const limit = count(maxTokens, "maxTokens");
  const ms = durationMs(interval, "interval");
  const spec: AlgorithmSpec = {
    name: "tokenBucket",
    limit,
    window: ms,
    rule: (at) => intervalBucket({ capacity: at, refillRate: rate, interval: ms }),
    refundRule: (at) => intervalBucket({ capacity: at, refillRate: rate, interval: ms, givesBack: true }),
  };
  return () => spec;
}

/**
 * The peer's cachedFixedWindow: a fixed window answered in the isolate where it can be. On edgelimit
 * that is the fixed window with its deny cache (a cached denial: no request) and a lease (units
 * already counted in Redis, handed out here with no request).
 */
export function cachedFixedWindowSpec(tokens: number, window: Duration): Algorithm {
  const limit = count(tokens, "tokens");
  const ms = durationMs(window, "window");
  const spec: AlgorithmSpec = {
    name: "cachedFixedWindow",
    limit,
    window: ms,
    rule: (at) => fixedWindow({ limit: at, window: ms, overshoot: true }),
    refundRule: (at) => fixedWindow({ limit: at, window: ms, givesBack: true }),
  };
  return () => spec;
}
