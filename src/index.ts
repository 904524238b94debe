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
export { Limiter, type LimiterOptions, type LimitOptions } from "./limiter.js";
export type { Decision, RuleResult } from "./types.js";
