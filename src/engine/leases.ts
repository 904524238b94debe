// The `lease` option: how many units the isolate tier (tier-isolate.ts) may hold per identifier, and
// for how long. `region.pool` takes the same shape (region.ts).
import { describe, readDuration } from "./duration.js";
import type { TierConfig } from "./tier.js";
import { type Issue, issueText, MAX_TIMER_MS } from "./validate.js";

export type { WaitUntil } from "./tier.js";

/** What `lease` takes: at most `max` units held per identifier, each for at most `ttl`. */
export interface LeaseOptions {
  /** Most units this Limiter may hold for one identifier (1 to 100,000). */
  max: number;
  /** How long units may be held before the unused ones are given back: ms or "500ms", "1s", ... */
  ttl: number | string;
}

/** A validated `lease` option. */
export type LeaseConfig = TierConfig;

const MAX_UNITS = 100_000;

/**
 * Validates the `lease` option, or throws naming the field (every problem, separated by "; ").
 *
 * @example
 * leaseConfig({ max: 50, ttl: "1s" }) // { max: 50, ttl: 1000 }
 */
export function leaseConfig(value: unknown, field = "lease"): LeaseConfig {
  const checked = checkLease(value);
  if (checked.issues === undefined) return checked.lease;
  throw new Error(
    checked.issues.map((issue) => issueText({ ...issue, path: [field, ...issue.path] })).join("; "),
  );
}

/**
 * Validates the `lease` option and reports every problem: the config, or the issues, each with its path
 * inside the option (`["max"]`, `["ttl"]`, or `[]` for a value that is not an object).
 *
 * @example
 * checkLease({ max: 0, ttl: "1s" }).issues
 * // [{ path: ["max"], message: "must be a whole number of units from 1 to 100000, got 0" }]
 */
export function checkLease(
  value: unknown,
):
  | { readonly lease: LeaseConfig; readonly issues?: undefined }
  | { readonly lease?: undefined; readonly issues: readonly Issue[] } {
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    return {
      issues: [
        { path: [], message: `expected { max, ttl }, e.g. { max: 50, ttl: "1s" }, got ${describe(value)}` },
      ],
    };
  }
  const issues: Issue[] = [];
  for (const key of Object.keys(value)) {
    if (key !== "max" && key !== "ttl")
      issues.push({ path: [key], message: "not a lease option; it takes max, ttl" });
  }
  const { max, ttl } = value as { max?: unknown; ttl?: unknown };
  if (typeof max !== "number" || !Number.isInteger(max) || max < 1 || max > MAX_UNITS) {
    issues.push({
      path: ["max"],
      message: `must be a whole number of units from 1 to ${MAX_UNITS}, got ${describe(max)}`,
    });
  }
  const read = readDuration(ttl);
  if ("message" in read) issues.push({ path: ["ttl"], message: read.message });
  else if (read.ms > MAX_TIMER_MS) {
    issues.push({ path: ["ttl"], message: `must be at most ${MAX_TIMER_MS} ms, got ${describe(ttl)}` });
  }
  if (issues.length > 0 || !("ms" in read)) return { issues };
  return { lease: { max: max as number, ttl: read.ms } };
}
