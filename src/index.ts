/**
 * `edgelimit`: the Limiter, its rules and what a decision says. HTTP helpers are in `edgelimit/http`,
 * the lock and the concurrency limiter in `edgelimit/lock`, the middlewares in `edgelimit/hono` and
 * `edgelimit/vercel`, the local REST server in `edgelimit/bridge`.
 */

export {
  type CountingOptions,
  fixedWindow,
  type GcraOptions,
  type GcraRule,
  gcra,
  type IntervalBucketOptions,
  type IntervalBucketRule,
  intervalBucket,
  type KeyedOptions,
  type PlanConfig,
  type Rule,
  type RuleConfig,
  type RulePlan,
  slidingLog,
  slidingWindow,
  type TokenBucketOptions,
  type TokenBucketRule,
  tokenBucket,
  type WindowOptions,
  type WindowRule,
} from "./engine/algorithms/index.js";
export type { RuleBase } from "./engine/algorithms/shared.js";
export type {
  Analytics,
  AnalyticsOptions,
  AnalyticsReport,
  BreakerReport,
  DecisionSource,
  ReportRange,
} from "./engine/analytics.js";
export type { BreakerOptions, BreakerState } from "./engine/breaker.js";
export type { Duration } from "./engine/duration.js";
export { RedisCallError, type RedisErrorKind } from "./engine/errors.js";
export type { Identity } from "./engine/keys.js";
export type { LeaseOptions, WaitUntil } from "./engine/leases.js";
export { Limiter, type LimiterOptions, type LimitOptions, type SettleOptions } from "./engine/limiter.js";
export type {
  Override,
  OverrideEntry,
  Overrides,
  OverridesOptions,
  OverridesPage,
} from "./engine/overrides.js";
export type { PoolOptions, RegionOptions } from "./engine/region.js";
export type { Decision, RuleResult, Settlement } from "./engine/types.js";
