/**
 * `edgelimit/http`: a Decision as an HTTP answer (RateLimit, RateLimit-Policy and Retry-After headers,
 * a 429 application/problem+json), and the helpers the middlewares are built from: a client's identity,
 * a request's real cost read from its response, and the Worker's route matching (paths as the Worker
 * and the Vercel middleware read them, every method a request may be taken for). Web Standards only.
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
export { hashed, identityOf, type KeyAnswer } from "./identity.js";
export {
  canonicalPath,
  compileRoutes,
  findRoute,
  formMethods,
  matchesPath,
  normalizePath,
  type PathPattern,
  parsePathPattern,
  type RouteMatch,
  type RouteTable,
  requestedMethods,
} from "./routes.js";
export {
  bodyUsageRefusal,
  openaiUsage,
  type UsageLog,
  type UsageLogOptions,
  type UsageSource,
  usageFromHeader,
  usageLog,
} from "./usage.js";
