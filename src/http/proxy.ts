// Forwarding to the origin. The origin's answer comes back as it is (status, end-to-end headers, streamed
// body): the limiter's only business with it is adding its own headers afterwards.
//
// Hygiene, both ways (RFC 9110 §7.6.1): hop-by-hop fields describe one connection and end there:
// Connection and every field it names, Keep-Alive, Proxy-*, TE, Trailer, Transfer-Encoding and Upgrade
// (kept for a WebSocket upgrade, which is proxied). The forwarding fields are the Worker's to write,
// never the client's: X-Forwarded-For (and X-Real-IP) is the client address from CF-Connecting-IP
// (Cloudflare sets it; a client cannot), X-Forwarded-Proto and X-Forwarded-Host are the scheme and host the client asked for,
// and a client-written Forwarded is dropped, so an origin that trusts these fields cannot be lied to.

import { clientIp } from "./identity.js";
import { formatIp } from "./ip.js";

const HOP_BY_HOP = ["connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade"];

/**
 * Removes the hop-by-hop fields from `headers` (in place): Connection and those it names, Keep-Alive,
 * Proxy-*, TE, Trailer, Transfer-Encoding and Upgrade, unless `keepUpgrade`.
 *
 * @example
 * dropHopByHop(headers, isWebSocketUpgrade(request))
 */
export function dropHopByHop(headers: Headers, keepUpgrade = false): void {
  const named = (headers.get("connection") ?? "")
    .split(",")
    .map((name) => name.trim().toLowerCase())
    .filter((name) => name !== "");
  for (const name of [...named, ...HOP_BY_HOP]) {
    if (keepUpgrade && name === "upgrade") continue;
    headers.delete(name);
  }
  for (const name of [...headers.keys()]) {
    if (name.toLowerCase().startsWith("proxy-")) headers.delete(name);
  }
}

/** Whether `request` asks to become a WebSocket (`Upgrade: websocket`): the one upgrade proxied. */
export function isWebSocketUpgrade(request: Request): boolean {
  return request.headers.get("upgrade")?.trim().toLowerCase() === "websocket";
}

/**
 * Sends `request` to `origin` with the same method, path, query, end-to-end headers and (streamed) body.
 * Host is the origin's own (a virtual host there must see its name, not the Worker's); the client's
 * address, scheme and host travel as X-Forwarded-For, -Proto and -Host, replacing any the client wrote;
 * redirects are handed back to the client, never followed here.
 *
 * @example
 * return forward(c.req.raw, "https://api.example.com");
 */
export async function forward(request: Request, origin: string): Promise<Response> {
  const url = new URL(request.url);
  const webSocket = isWebSocketUpgrade(request);
  const headers = new Headers(request.headers);
  dropHopByHop(headers, webSocket);
  headers.delete("host");
  headers.delete("forwarded");
  // X-Real-IP too: origins behind nginx read the client from it, and a client can write it.
  const ip = clientIp(request.headers);
  for (const name of ["x-forwarded-for", "x-real-ip"]) {
    if (ip === undefined) headers.delete(name);
    else headers.set(name, formatIp(ip));
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
