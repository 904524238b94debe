// Who is asking, as the middlewares read it: the identity a `key` function answered, and an identifier
// for a secret. Header and cookie values are credentials more often than not (API keys, session ids),
// so they are hashed before they become part of a Redis key: reading the keyspace must not hand out
// anyone's key.

import type { Identity } from "../engine/keys.js";
import { sha256Hex } from "../engine/sha256.js";

/** What a middleware's `key` may answer: an identity, a field of it left undefined when not found. */
export type KeyAnswer = string | Readonly<Record<string, string | undefined>> | undefined;

/**
 * The identity a `key` answered, or undefined when it names no one: undefined, "", an empty record, or a
 * record with a field undefined or "" (a header sent empty is no key: never one bucket shared by every
 * such caller, whichever rule it is for).
 *
 * @example
 * identityOf({ key: "k1", ip: undefined }) // undefined
 * identityOf({ key: "k1", ip: "203.0.113.7" }) // { key: "k1", ip: "203.0.113.7" }
 */
export function identityOf(answer: KeyAnswer): Identity | undefined {
  if (answer === undefined || answer === "") return undefined;
  if (typeof answer === "string") return answer;
  const values = Object.values(answer);
  if (values.length === 0 || values.some((value) => value === undefined || value === "")) return undefined;
  return answer as Readonly<Record<string, string>>;
}

/**
 * An identifier for a secret (API key, session id): its SHA-256, so the secret never appears in a Redis
 * key name. Distinct strings never share an input to the hash: the string's exact UTF-16 code units are
 * hashed, as WTF-8 (UTF-8 that also encodes a lone surrogate, as 3 bytes, instead of replacing it with
 * U+FFFD as TextEncoder does). For every well-formed string that is its UTF-8, so the hash is the usual
 * SHA-256 of the text.
 *
 * @example
 * limiter.limit(hashed(apiKey))
 */
export function hashed(value: string): string {
  return `sha256:${sha256Hex(wtf8(value))}`;
}

/**
 * The WTF-8 bytes of a string, one char per byte: one-to-one on sequences of UTF-16 code units. A
 * surrogate pair is one code point (4 bytes); any other surrogate is encoded on its own (3 bytes).
 *
 * @example
 * wtf8("é") // "\xc3\xa9"
 */
export function wtf8(value: string): string {
  let bytes = "";
  for (let i = 0; i < value.length; i++) {
    let code = value.charCodeAt(i);
    if (code < 0x80) {
      bytes += value[i];
      continue;
    }
    if (code < 0x800) {
      bytes += String.fromCharCode(0xc0 | (code >> 6), 0x80 | (code & 0x3f));
      continue;
    }
    const next = value.charCodeAt(i + 1);
    if (code >= 0xd800 && code <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
      code = 0x10000 + ((code - 0xd800) << 10) + (next - 0xdc00);
      i++;
      bytes += String.fromCharCode(
        0xf0 | (code >> 18),
        0x80 | ((code >> 12) & 0x3f),
        0x80 | ((code >> 6) & 0x3f),
        0x80 | (code & 0x3f),
      );
      continue;
    }
    bytes += String.fromCharCode(0xe0 | (code >> 12), 0x80 | ((code >> 6) & 0x3f), 0x80 | (code & 0x3f));
  }
  return bytes;
}
