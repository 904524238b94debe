/**
 * `edgelimit/http`: a Decision as an HTTP answer (RateLimit, RateLimit-Policy and Retry-After headers,
 * a 429 application/problem+json), and the helpers the middlewares are built from. Web Standards only.
 */

export { type FailureLog, type FailureLogOptions, failureLog } from "./error-log.js";
export {
  type Enforcement,
  type EnforceOptions,
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
  tooManyInFlight,
  tooManyRequests,
  unauthorized,
} from "./headers.js";
export { hashed } from "./identity.js";
export {
  openaiUsage,
  type UsageLog,
  type UsageLogOptions,
  type UsageSource,
  usageFromHeader,
  usageLog,
} from "./usage.js";
