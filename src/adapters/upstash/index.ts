/**
 * `edgelimit/upstash`: @upstash/ratelimit's API on edgelimit's engine. Switching is one import:
 * `import { Ratelimit } from "edgelimit/upstash"` in place of `"@upstash/ratelimit"` (docs/upstash.md).
 */

export type { Algorithm } from "./algorithm.js";
export { Analytics, type AnalyticsConfig } from "./analytics.js";
export type { Duration } from "./duration.js";
export * as IpDenyList from "./ip-deny-list.js";
export { MultiRegionRatelimit, type MultiRegionRatelimitConfig } from "./multi.js";
export { Ratelimit, type RatelimitConfig } from "./ratelimit.js";
