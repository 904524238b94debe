// The `region` option: a database near this isolate, and the pool each identifier may have there (the
// regional tier, tier-region.ts).
import { describe } from "./duration.js";
import { checkLease, type LeaseConfig, type LeaseOptions } from "./leases.js";
import { type Issue, issueText } from "./validate.js";

/** What `region` takes: a database near this isolate, and the pool each identifier may have there. */
export interface RegionOptions {
  /** `{ url, token }` of the region's Upstash-compatible REST endpoint, or an @upstash/redis client. */
  redis: unknown;
  /** At most `max` units per identifier in the region's pool, each deposit handed out for at most `ttl`. */
  pool: LeaseOptions;
}

/** A validated `region.pool`. */
export type PoolConfig = LeaseConfig;

/**
 * Validates the `region` option's shape and its pool, or throws naming the field (`region.pool.max:
 * ...`). The database (`region.redis`) is checked where its transport is made.
 *
 * @example
 * regionPool({ redis: { url, token }, pool: { max: 500, ttl: "5s" } }) // { max: 500, ttl: 5000 }
 */
export function regionPool(value: unknown, field = "region"): PoolConfig {
  const issues: Issue[] = [];
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new Error(
      `${field}: expected { redis, pool: { max, ttl } }, e.g. { redis: { url, token }, pool: { max: 500, ttl: "5s" } }, got ${describe(value)}`,
    );
  }
  for (const key of Object.keys(value)) {
    if (key !== "redis" && key !== "pool")
      issues.push({ path: [field, key], message: "not a region option; it takes redis, pool" });
  }
  if (!("redis" in value) || (value as { redis?: unknown }).redis === undefined) {
    issues.push({
      path: [field, "redis"],
      message: "give the region's database: { url, token } or a client",
    });
  }
  const checked = checkLease((value as { pool?: unknown }).pool);
  for (const issue of checked.issues ?? []) issues.push({ ...issue, path: [field, "pool", ...issue.path] });
  if (issues.length > 0 || checked.lease === undefined) throw new Error(issues.map(issueText).join("; "));
  return checked.lease;
}
