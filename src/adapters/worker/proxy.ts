// Forwarding to the origin. The origin's answer comes back as it is (status, end-to-end headers, streamed
// body): the limiter's only business with it is adding its own headers afterwards.
//
// Hygiene, both ways (RFC 9110 §7.6.1): hop-by-hop fields describe one connection and end there:
// Connection and every field it names, Keep-Alive, Proxy-*, TE, Trailer, Transfer-Encoding and Upgrade
// (kept for a WebSocket upgrade, which is proxied). The forwarding fields are the Worker's to write,
// never the client's: X-Forwarded-For (and X-Real-IP) is the client address from CF-Connecting-IP
// (Cloudflare sets it; a client cannot), X-Forwarded-Proto and X-Forwarded-Host are the scheme and host the client asked for,
// and a client-written Forwarded is dropped, so an origin that trusts these fields cannot be lied to.
// The same goes for every other client-IP field an origin may read (True-Client-IP, X-Client-IP,
// CF-Connecting-IPv6, ...: CLIENT_IP_HEADERS): one the client sent reaches the origin rewritten to the
// real address, or not at all. A client's Connection cannot name these fields (nor Cloudflare's CF-*)
// to strip them: hop-by-hop is the client's say over its own fields, not over the ones written for it;
// nor the fields a decision read (ForwardOptions.keep), which the origin must be sent as counted.

import { formatIp, isIpv4 } from "../ip.js";
import { CLIENT_IP_HEADERS, clientIp } from "./identity.js";

const HOP_BY_HOP = ["connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade"];

/**
 * Removes the hop-by-hop fields from `headers` (in place): Connection and those it names, Keep-Alive,
 * Proxy-*, TE, Trailer, Transfer-Encoding and Upgrade, unless `keepUpgrade`. A field for which
 * `unnameable` is true stays even when Connection names it.
 *
 * @example
 * dropHopByHop(headers, isWebSocketUpgrade(request))
 */
export function dropHopByHop(
  headers: Headers,
  keepUpgrade = false,
  unnameable: (name: string) => boolean = () => false,
): void {
  const named = (headers.get("connection") ?? "")
    .split(",")
    .map((name) => name.trim().toLowerCase())
    .filter((name) => name !== "" && !unnameable(name));
  for (const name of [...named, ...HOP_BY_HOP]) {
    if (keepUpgrade && name === "upgrade") continue;
    headers.delete(name);
  }
  for (const name of [...headers.keys()]) {
    if (name.toLowerCase().startsWith("proxy-")) headers.delete(name);
  }
}

/** Fields the Worker (or Cloudflare) writes for the client, which its Connection header cannot strip. */
function isWrittenForClient(name: string): boolean {
  return (
    CLIENT_IP_HEADERS.includes(name) ||
    name.startsWith("x-forwarded-") ||
    name.startsWith("cf-") ||
    name === "cdn-loop"
  );
}

/** Options of {@link forward}. */
export interface ForwardOptions {
  /** Request fields never passed on, e.g. the field the origin states a cost in: only it may write it. */
  readonly drop?: Iterable<string>;
  /**
   * Request fields the decision read (lowercase: a route's key header, Cookie, a method override): a
   * client's Connection cannot strip them on the way, so the origin is sent what was counted.
   */
  readonly keep?: ReadonlySet<string>;
}

/** Whether `request` asks to become a WebSocket (`Upgrade: websocket`): the one upgrade proxied. */
export function isWebSocketUpgrade(request: Request): boolean {
  return request.headers.get("upgrade")?.trim().toLowerCase() === "websocket";
}

/**
 * Sends `request` to `origin` with the same method, path, query, end-to-end headers and (streamed) body.
 * Host is the origin's own (a virtual host there must see its name, not the Worker's); the client's
 * address, scheme and host travel as X-Forwarded-For (X-Real-IP, CF-Connecting-IP), -Proto and -Host,
 * replacing any the client wrote, as does every other client-IP field it sent; redirects are handed
 * back to the client, never followed here.
 *
 * @example
 * return forward(c.req.raw, "https://api.example.com");
 */
export async function forward(
  request: Request,
  origin: string,
  options: ForwardOptions = {},
): Promise<Response> {
  const url = new URL(request.url);
  const webSocket = isWebSocketUpgrade(request);
  const headers = new Headers(request.headers);
  const keep = options.keep;
  dropHopByHop(headers, webSocket, (name) => isWrittenForClient(name) || keep?.has(name) === true);
  headers.delete("host");
  for (const name of options.drop ?? []) headers.delete(name);
  const ip = clientIp(request.headers);
  const address = ip === undefined ? undefined : formatIp(ip);
  for (const name of CLIENT_IP_HEADERS) {
    // Always written (X-Real-IP too: origins behind nginx read the client from it, and Cloudflare
    // writes a same-zone subrequest's CF-Connecting-IP from it); the others only replace what the
    // client sent, and the IPv6 one only holds an IPv6 address.
    const always = name === "x-forwarded-for" || name === "x-real-ip" || name === "cf-connecting-ip";
    const fits = name === "cf-connecting-ipv6" ? ip !== undefined && !isIpv4(ip) : name !== "cf-pseudo-ipv4";
    if (address !== undefined && name !== "forwarded" && fits && (always || headers.has(name))) {
      headers.set(name, address);
    } else headers.delete(name);
  }
  headers.set("x-forwarded-host", url.host);
  headers.set("x-forwarded-proto", url.protocol.slice(0, -1));
  const hasBody = request.method !== "GET" && request.method !== "HEAD";
  const response = await fetch(origin + url.pathname + url.search, {
    method: request.method,
    headers,
    body: hasBody ? request.body : null,
    redirect: "manual",
  });
  // A 101 carries the WebSocket itself: it goes back untouched.
  if (response.status === 101) return response;
  const answer = new Headers(response.headers);
  dropHopByHop(answer);
  return new Response(response.body, {
    status: response.status,
    statusText: response.statusText,
    headers: answer,
  });
}
