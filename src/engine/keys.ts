import { describe } from "./duration.js";
import { sha256Hex } from "./sha256.js";

// Keys look like `<prefix>:{<tag>}:<rule>:<algorithm>` (a fixed window adds `:<window index>`, a token
// bucket says `tokenBucket.gcra`: see Limiter). The tag is the Redis Cluster hash tag shared by every key of
// one identifier, so a multi-rule script never crosses slots. It is built so that distinct identifiers
// never share it:
//   "=" + the identifier with every UTF-16 code unit outside printable ASCII, and "%", "{", "}", escaped
//         as %XXXX: one-to-one, readable for ordinary ids (user:42, 203.0.113.7), never containing "}";
//   "#" + SHA-256 of that escaped form, when it would be longer than MAX_PLAIN: 10 kB identifiers
//         still give short keys. The leading "=" / "#" keeps the two forms apart, and makes the tag
//         non-empty (an empty "{}" would not be a hash tag at all).
const MAX_PLAIN = 128;
/** What a key prefix may be: no braces, which would move the hash tag. */
export const PREFIX = /^[A-Za-z0-9_.:-]{1,64}$/;

/** Validates a key prefix, or throws naming the field. */
export function checkPrefix(prefix: unknown): string {
  if (typeof prefix !== "string" || !PREFIX.test(prefix)) {
    throw new Error(`prefix: must be 1-64 characters of A-Z a-z 0-9 _ . : - (got ${JSON.stringify(prefix)})`);
  }
  return prefix;
}

/**
 * The hash-tagged part of every key of `identifier`.
 *
 * @example
 * keyTag("user:42") // "{=user:42}"
 */
export function keyTag(identifier: string): string {
  let escaped = "";
  let plainFrom = 0;
  for (let i = 0; i < identifier.length; i++) {
    const code = identifier.charCodeAt(i);
    if (code > 0x20 && code < 0x7f && code !== 0x25 && code !== 0x7b && code !== 0x7d) continue;
    escaped += identifier.slice(plainFrom, i) + "%" + code.toString(16).padStart(4, "0");
    plainFrom = i + 1;
  }
  escaped = plainFrom === 0 ? identifier : escaped + identifier.slice(plainFrom);
  return escaped.length <= MAX_PLAIN ? `{=${escaped}}` : `{#${sha256Hex(escaped)}}`;
}

/**
 * Validates the identifier of a `limit()` or `reset()` call: a non-empty string. An empty one is
 * refused rather than counted, since every caller whose id came out empty (a missing header read as
 * "", an unset variable) would otherwise share one bucket. Throws a TypeError or RangeError naming it.
 *
 * @example
 * checkIdentifier("user:42") // "user:42"
 */
export function checkIdentifier(identifier: unknown): string {
  if (typeof identifier !== "string") {
    throw new TypeError(`identifier: expected a string, got ${describe(identifier)}`);
  }
  if (identifier === "") {
    throw new RangeError(
      "identifier: must not be empty (an empty id would put every such caller in one bucket); answer the request yourself, e.g. with a 401, when it carries no id",
    );
  }
  return identifier;
}
