export {
  type Algorithm,
  checkCost,
  compileRule,
  fixedWindow,
  type GcraOptions,
  gcra,
  maxCost,
  type Rule,
  type RuleConfig,
  slidingLog,
  slidingWindow,
  type TokenBucketOptions,
  tokenBucket,
  type WindowOptions,
} from "./engine/algorithms.js";
export { BREAKER_DEFAULTS, type BreakerOptions } from "./engine/breaker.js";
export {
  Concurrency,
  type ConcurrencyDecision,
  type ConcurrencyOptions,
} from "./engine/concurrency.js";
export { type Duration, toMs } from "./engine/duration.js";
export { RedisCallError, type RedisErrorKind } from "./engine/errors.js";
export type { LeaseOptions, WaitUntil } from "./engine/leases.js";
export { Limiter, type LimiterOptions, type LimitOptions } from "./engine/limiter.js";
export {
  type AcquireOptions,
  type ExtendResult,
  Lock,
  LockLostError,
  type LockOptions,
  type LockResult,
  LockUnavailableError,
  type ReleaseResult,
  type WithLockOptions,
} from "./engine/lock.js";
export type { Decision, RuleResult } from "./engine/types.js";
export { type FailureLog, type FailureLogOptions, failureLog } from "./http/error-log.js";
export {
  type Enforcement,
  enforce,
  type HeaderOptions,
  type PolicyRule,
  PROBLEM_JSON,
  type ProblemDetails,
  policyHeader,
  problemDetails,
  QUOTA_EXCEEDED,
  rateLimitHeaders,
  SHADOW_HEADER,
  tooManyRequests,
  unauthorized,
} from "./http/headers.js";
export { hashed } from "./http/identity.js";
