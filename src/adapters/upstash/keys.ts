// Where the entry keeps its state, beside @upstash/ratelimit's on the same database and prefix.
//
// The peer writes `<prefix>:<identifier>` (a token bucket's hash) and `<prefix>:<identifier>:<window>`
// (a window's counter). The entry's Limiter writes under a prefix of its own, "el-upstash." followed by
// the peer's prefix made of the characters a Limiter prefix may hold: so none of its keys starts with
// "<prefix>:" and no identifier of the peer's can name one of them (no WRONGTYPE, no shared count).
// The peer's shared keys (analytics, deny lists, the dynamic limit) are read and written where the
// peer and the Upstash console keep them, in the peer's formats.

/** The peer's default prefix. */
export const DEFAULT_PREFIX = "@upstash/ratelimit";

const PLAIN = /^[A-Za-z0-9.-]$/;
const MAX_PREFIX = 64;

/**
 * The Limiter prefix of the peer's `prefix`: "el-upstash." and the prefix with every character
 * outside A-Z a-z 0-9 . - written as _XXXX (one to one), or "el-upstash-h." and a 128-bit hash of
 * the prefix when that is too long for a Limiter prefix (a prefix is configuration, not input).
 *
 * @example
 * limiterPrefix("@upstash/ratelimit") // "el-upstash._0040upstash_002fratelimit"
 */
export function limiterPrefix(prefix: string): string {
  let escaped = "";
  for (const char of prefix) {
    escaped += PLAIN.test(char) ? char : `_${char.codePointAt(0)!.toString(16).padStart(4, "0")}`;
  }
  const plain = `el-upstash.${escaped}`;
  if (plain.length <= MAX_PREFIX) return plain;
  return `el-upstash-h.${fnv1a(prefix, 0x811c9dc5)}${fnv1a(prefix, 0x050c5d1f)}${fnv1a(prefix, 0x2f4a7c15)}${fnv1a(prefix, 0x6b43a9b5)}`;
}

/** FNV-1a over UTF-16 code units from `seed`: 8 hex digits. */
function fnv1a(text: string, seed: number): string {
  let hash = seed >>> 0;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash.toString(16).padStart(8, "0");
}

/** The peer's key of its global dynamic limit. */
export const dynamicLimitKey = (prefix: string) => `${prefix}:dynamic:global`;
/** The peer's set of every denied value (identifiers, IPs, user agents, countries). */
export const allDenyListsKey = (prefix: string) => `${prefix}:denyList:all`;
/** The peer's set of the IPs from the public ipsum list. */
export const ipDenyListKey = (prefix: string) => `${prefix}:denyList:ipDenyList`;
/** The peer's flag of the IP list's freshness: "valid" with a TTL, "disabled", or absent (stale). */
export const ipDenyListStatusKey = (prefix: string) => `${prefix}:ipDenyListStatus`;
/** The peer's analytics table of one hour, as the Upstash console reads it. */
export const eventsKey = (prefix: string, hour: number) => `${prefix}:events:${hour}`;
