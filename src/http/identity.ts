// Who is asking: the value a route counts requests by. Header and cookie values are credentials more
// often than not (API keys, session ids), so they are hashed before they become part of a Redis key:
// reading the keyspace must not hand out anyone's key.

import type { Identity } from "../engine/keys.js";
import { sha256Hex } from "../engine/sha256.js";
import { formatIp, type IpAddress, isIpv4, networkOf, parseIp } from "./ip.js";
import { canonicalPath, normalizePath } from "./routes.js";

/** What a route counts by, parsed from its `key`. */
export type KeySpec =
  | { readonly kind: "ip" }
  | { readonly kind: "path" }
  | { readonly kind: "global" }
  | { readonly kind: "header"; readonly name: string }
  | { readonly kind: "cookie"; readonly name: string };

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/**
 * Headers that origins and frameworks read as the client's address, and that a client can write
 * itself: never a key, and never passed to the origin as the client wrote them (the proxy rewrites
 * them to CF-Connecting-IP's address, or drops them).
 */
export const CLIENT_IP_HEADERS: readonly string[] = [
  "x-forwarded-for",
  "x-real-ip",
  "forwarded",
  "true-client-ip",
  "cf-connecting-ip",
  "cf-connecting-ipv6",
  "cf-pseudo-ipv4",
  "x-client-ip",
  "client-ip",
  "fastly-client-ip",
  "x-cluster-client-ip",
  "x-forwarded",
  "forwarded-for",
  "x-appengine-user-ip",
];

/**
 * Parses a route's `key`: "ip", "path", "global", "header:NAME" or "cookie:NAME". Throws an Error
 * saying what is wrong.
 *
 * @example
 * parseKeySpec("header:X-API-Key") // { kind: "header", name: "x-api-key" }
 */
export function parseKeySpec(text: string): KeySpec {
  if (text === "ip" || text === "path" || text === "global") return { kind: text };
  const colon = text.indexOf(":");
  const kind = colon === -1 ? text : text.slice(0, colon);
  const name = text.slice(colon + 1);
  if ((kind === "header" || kind === "cookie") && colon !== -1) {
    if (!TOKEN.test(name)) {
      throw new Error(`${JSON.stringify(text)}: the ${kind} name must be a non-empty HTTP token`);
    }
    if (kind === "header" && CLIENT_IP_HEADERS.includes(name.toLowerCase())) {
      throw new Error(
        `${JSON.stringify(text)}: a client can send any ${name} it likes; use "ip", which reads CF-Connecting-IP (set by Cloudflare)`,
      );
    }
    return kind === "header" ? { kind, name: name.toLowerCase() } : { kind, name };
  }
  throw new Error(
    `${JSON.stringify(text)} is not a key; use "ip", "path", "global", "header:NAME" or "cookie:NAME"`,
  );
}

/**
 * A key spec written back as a route's `key` takes it ("ip", "header:x-api-key", "cookie:sid"): one
 * text per spec, header names lowercased, so two spellings of one header are one spec.
 *
 * @example
 * keySpecText(parseKeySpec("header:X-API-Key")) // "header:x-api-key"
 */
export function keySpecText(spec: KeySpec): string {
  return spec.kind === "header" || spec.kind === "cookie" ? `${spec.kind}:${spec.name}` : spec.kind;
}

/** Who a request is counted as: one identifier (the `id` field), or a record of them, one a rule's `by`. */
export type { Identity } from "../engine/keys.js";

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
 * The client's address from CF-Connecting-IP, which Cloudflare sets on every request and a client
 * cannot override. X-Forwarded-For and X-Real-IP are never read: clients write them.
 *
 * @example
 * clientIp(request.headers) // the parsed CF-Connecting-IP, or undefined
 */
export function clientIp(headers: Headers): IpAddress | undefined {
  const value = headers.get("cf-connecting-ip");
  return value === null ? undefined : parseIp(value.trim());
}

/**
 * The identifier of a client address: IPv4 as written canonically (an IPv4-mapped IPv6 address is its
 * IPv4 address), IPv6 by its /64, since one subscriber usually holds a whole /64 and could otherwise
 * take a fresh counter per address.
 *
 * @example
 * clientKey(parseIp("2001:db8::1")!) // "2001:db8::/64"
 */
export function clientKey(ip: IpAddress): string {
  return isIpv4(ip) ? formatIp(ip) : networkOf(ip, 64);
}

/**
 * The identifier a request is counted under for `spec`, or undefined when the request does not carry
 * it (no such header or cookie, no client address). An IPv6 client is counted per /64. The value the
 * key reads is turned into the identifier by {@link identifierOf}, as the admin API turns a value an
 * operator gives, so the two cannot drift.
 *
 * @example
 * identify({ kind: "header", name: "x-api-key" }, request, clientIp(request.headers))
 */
export function identify(
  spec: KeySpec,
  request: Request,
  ip: IpAddress | undefined,
  normalizedPath: string,
): string | undefined {
  switch (spec.kind) {
    case "ip":
      // already parsed from CF-Connecting-IP (clientIp) with the parser identifierOf uses
      return ip && clientKey(ip);
    case "path":
      return pathKey(normalizedPath);
    case "global":
      return "global";
    case "header": {
      const value = request.headers.get(spec.name);
      return value === null ? undefined : identifierOf(spec, value);
    }
    case "cookie": {
      const value = cookieText(request.headers.get("cookie"), spec.name);
      return value === undefined ? undefined : identifierOf(spec, value);
    }
  }
}

/**
 * The identifier of a value a route's key reads (the header's or cookie's value, a client address, a
 * path), or undefined when that value identifies no one (empty, not an IP address, not a path). Header
 * and cookie values are hashed (a cookie's quotes removed first), an IPv6 address is its /64, a path
 * is counted however it is spelt; "global" needs no value.
 *
 * @example
 * identifierOf({ kind: "ip" }, "2001:db8::1") // "2001:db8::/64"
 * identifierOf({ kind: "header", name: "x-api-key" }, "abc") // "sha256:ba7816bf..."
 */
export function identifierOf(spec: KeySpec, value: string): string | undefined {
  switch (spec.kind) {
    case "ip": {
      const ip = parseIp(value.trim());
      return ip && clientKey(ip);
    }
    case "path":
      return value.startsWith("/") ? pathKey(normalizePath(value)) : undefined;
    case "global":
      return "global";
    case "header": {
      const trimmed = value.trim();
      return trimmed ? hashed(trimmed) : undefined;
    }
    case "cookie": {
      const unquoted = unquote(value.trim());
      return unquoted ? hashed(unquoted) : undefined;
    }
  }
}

// One counter per path however it is spelt: /login;x and /login%2F are /login.
const pathKey = (normalizedPath: string) => canonicalPath(normalizedPath);

const unquote = (value: string) =>
  value.length >= 2 && value.startsWith('"') && value.endsWith('"') ? value.slice(1, -1) : value;

/**
 * The value of cookie `name` in a Cookie header (the first, if sent twice), unquoted; undefined if absent.
 *
 * @example
 * cookie("a=1; session=abc", "session") // "abc"
 */
export function cookie(header: string | null, name: string): string | undefined {
  const value = cookieText(header, name);
  return value === undefined ? undefined : unquote(value);
}

// The value of cookie `name` as sent (trimmed, quotes kept), the first if sent twice.
function cookieText(header: string | null, name: string): string | undefined {
  if (!header) return undefined;
  for (const pair of header.split(";")) {
    const eq = pair.indexOf("=");
    if (eq === -1 || pair.slice(0, eq).trim() !== name) continue;
    return pair.slice(eq + 1).trim();
  }
  return undefined;
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
