// What a Worker route counts requests by: its `key` ("ip", "path", "global", "header:NAME",
// "cookie:NAME"), parsed once from the config, and the identifier a request (or a value an operator
// gives the admin API) gets under it. Header and cookie values are hashed (edgelimit/http's `hashed`).

import { hashed } from "../../http/identity.js";
import { canonicalPath, normalizePath } from "../../http/routes.js";
import { clientKey, type IpAddress, parseIp } from "../ip.js";

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
      if (!trimmed) return undefined;
      return hashed(CREDENTIALS.includes(spec.name) ? oneSpelling(trimmed) : trimmed);
    }
    case "cookie": {
      const unquoted = unquote(value.trim());
      return unquoted ? hashed(unquoted) : undefined;
    }
  }
}

/** Headers of "<scheme> <credentials>" (RFC 9110 §11.4): the scheme is case-insensitive, then 1 or more spaces. */
const CREDENTIALS = ["authorization", "proxy-authorization"];

/**
 * One spelling of a credential however it is sent, so that "bearer  K" is counted as "Bearer K": the
 * scheme with a capital first letter and the rest small (as "Bearer" and "Basic" are written), one
 * space, the credentials as sent.
 */
function oneSpelling(value: string): string {
  const parts = /^([!#$%&'*+.^_`|~0-9A-Za-z-]+)[ \t]+(.*)$/.exec(value);
  if (!parts) return value;
  const scheme = parts[1]!;
  return `${scheme[0]!.toUpperCase()}${scheme.slice(1).toLowerCase()} ${parts[2]}`;
}

// One counter per path however it is spelt: /login;x and /login%2F are /login.
const pathKey = (normalizedPath: string) => canonicalPath(normalizedPath);

const unquote = (value: string) =>
  value.length >= 2 && value.startsWith('"') && value.endsWith('"') ? value.slice(1, -1) : value;

/**
 * The value of cookie `name` in a Cookie header, unquoted; undefined if absent, or if sent twice with
 * two values (origins read either one: Django the last, others the first).
 *
 * @example
 * cookie("a=1; session=abc", "session") // "abc"
 */
export function cookie(header: string | null, name: string): string | undefined {
  const value = cookieText(header, name);
  return value === undefined ? undefined : unquote(value);
}

// The value of cookie `name` as sent (trimmed, quotes kept); undefined if sent twice with two values,
// so that a request naming no one key counts as one with none (a 401), whichever its origin reads.
function cookieText(header: string | null, name: string): string | undefined {
  if (!header) return undefined;
  let found: string | undefined;
  for (const pair of header.split(";")) {
    const eq = pair.indexOf("=");
    if (eq === -1 || pair.slice(0, eq).trim() !== name) continue;
    const value = pair.slice(eq + 1).trim();
    if (found !== undefined && found !== value) return undefined;
    found = value;
  }
  return found;
}
