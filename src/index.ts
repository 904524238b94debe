export {
  type Algorithm,
  compileRule,
  fixedWindow,
  type GcraOptions,
  gcra,
  type Rule,
  type RuleConfig,
  slidingLog,
  slidingWindow,
  type TokenBucketOptions,
  tokenBucket,
  type WindowOptions,
} from "./engine/algorithms.js";
export { BREAKER_DEFAULTS, type BreakerOptions } from "./engine/breaker.js";
export { type Duration, toMs } from "./engine/duration.js";
export { RedisCallError, type RedisErrorKind } from "./engine/errors.js";
export { Limiter, type LimiterOptions, type LimitOptions } from "./engine/limiter.js";
export type { Decision, RuleResult } from "./engine/types.js";
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
