// The `region` option: a database near this isolate, and the pool each identifier may have there (the
// regional tier, tier-region.ts).
import { describe } from "./duration.js";
import { checkLease } from "./leases.js";
import type { TierConfig } from "./tier.js";
import { type Issue, issueText } from "./validate.js";

/** What `region` takes: a database near this isolate, and the pool each identifier may have there. */
export interface RegionOptions {
  /** `{ url, token }` of the region's Upstash-compatible REST endpoint, or an @upstash/redis client. */
  redis: unknown;
  /** At most `max` units per identifier in the region's pool, each deposit handed out for at most `ttl`. */
  pool: PoolOptions;
}

/**
 * What `region.pool` takes: at most `max` units per identifier in the region's pool, each deposit handed
 * out for at most `ttl` (the shape `lease` takes, and checked alike, but units of a region, not of this
 * Limiter).
 */
export interface PoolOptions {
  /** Most units the region's pool may hold for one identifier (1 to 100,000). */
  max: number;
  /** How long a deposit may be handed out before the unused units go back home: ms or "500ms", "1s", ... */
  ttl: number | string;
}

/** A validated `region.pool`, ttl in ms. */
export type PoolConfig = TierConfig;

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
