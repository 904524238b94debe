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
} from "./algorithms.js";
export { type Duration, toMs } from "./duration.js";
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
} from "./headers.js";
export { hashed } from "./identity.js";
export { Limiter, type LimiterOptions, type LimitOptions } from "./limiter.js";
export type { Decision, RuleResult } from "./types.js";
