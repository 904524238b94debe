// The Worker's admin API: per-key overrides of a route's limits, changed at runtime. Served under the
// config's adminPath, only when the secret EDGELIMIT_ADMIN_TOKEN is set (404 for the whole path
// otherwise), to `Authorization: Bearer <token>` (401 otherwise). Never forwarded to the origin and
// never counted by a route.
//
//   PUT    {admin}/overrides/<route>?key=<value>   body { "plan": "pro" } | { "rules": {...}, "expiresAt": ms }
//                                                  200 with the override as stored
//   GET    {admin}/overrides/<route>?key=<value>   200 with the override, or 404
//   DELETE {admin}/overrides/<route>?key=<value>   204
//   GET    {admin}/overrides/<route>[?after=&limit=]  200 { items: [{ identifier, override }], next }
//
// `<value>` is what the route's key reads from a request (the API key, the cookie's value, the client
// address, the path): it becomes the identifier exactly as a request's does (identifierOf), so an
// operator never handles hashes. Every refusal is a problem+json whose detail starts with the field at
// fault; nothing is stored on any refusal. Every answer is `Cache-Control: no-store`.
import { RedisCallError } from "../../engine/errors.js";
import type { Limiter } from "../../engine/limiter.js";
import type { Override, Overrides } from "../../engine/overrides.js";
import type { RouteConfig } from "../../http/config.js";
import { PROBLEM_JSON } from "../../http/headers.js";
import { identifierOf } from "../../http/identity.js";

/** The largest override body accepted, in bytes: a plan name, or a few rules' fields, fit many times over. */
export const MAX_BODY = 4096;
/** The most overrides one list page holds, and how many it holds when `limit` is not given. */
const MAX_PAGE = 1000;
const DEFAULT_PAGE = 100;

/** A route as the admin API sees it: its config and its Limiter. */
export interface AdminRoute extends RouteConfig {
  readonly limiter: Limiter;
}

const TITLES: Record<number, string> = {
  400: "Bad Request",
  401: "Unauthorized",
  404: "Not Found",
  405: "Method Not Allowed",
  409: "Conflict",
  413: "Content Too Large",
  503: "Service Unavailable",
};

/** A problem+json answer; `detail` starts with the field at fault. JSON.stringify escapes what it quotes. */
function problem(status: number, detail: string, headers: Record<string, string> = {}): Response {
  const title = TITLES[status] ?? "Error";
  return new Response(JSON.stringify({ type: "about:blank", title, status, detail }), {
    status,
    headers: { "Content-Type": PROBLEM_JSON, "Cache-Control": "no-store", ...headers },
  });
}

function json(body: unknown): Response {
  return new Response(JSON.stringify(body), {
    headers: { "Content-Type": "application/json", "Cache-Control": "no-store" },
  });
}

// A value from the request, quoted for a message (the answer's JSON escapes it again).
const quoted = (value: string) => JSON.stringify(value.length > 100 ? `${value.slice(0, 100)}...` : value);

/**
 * Whether `header` is `Bearer <secret>`. Both tokens are compared by their SHA-256 digests, byte by byte
 * with no early exit, so the time taken says nothing about how much of the token was right, nor about
 * the secret's length.
 *
 * @example
 * await authorized(request.headers.get("authorization"), env.EDGELIMIT_ADMIN_TOKEN)
 */
export async function authorized(header: string | null, secret: string): Promise<boolean> {
  const match = /^bearer[ \t]+([^ \t].*)$/i.exec(header ?? "");
  const given = match?.[1]?.trim() ?? "";
  const encoder = new TextEncoder();
  const [a, b] = await Promise.all([
    crypto.subtle.digest("SHA-256", encoder.encode(given)),
    crypto.subtle.digest("SHA-256", encoder.encode(secret)),
  ]);
  const x = new Uint8Array(a);
  const y = new Uint8Array(b);
  let diff = match ? 0 : 1;
  for (let i = 0; i < x.length; i++) diff |= x[i]! ^ y[i]!;
  return diff === 0;
}

/** The request's body as text, or the refusal: over MAX_BODY bytes (declared or streamed), or not UTF-8. */
async function readBody(request: Request): Promise<string | Response> {
  const tooLarge = () => problem(413, `body: must be at most ${MAX_BODY} bytes`);
  const length = request.headers.get("content-length");
  if (length !== null && !(/^\d+$/.test(length) && Number(length) <= MAX_BODY)) return tooLarge();
  if (request.body === null) return "";
  // Read up to the limit only: a body streamed without Content-Length is cut off there.
  const reader = request.body.getReader();
  const bytes = new Uint8Array(MAX_BODY);
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    if (size + value.byteLength > MAX_BODY) {
      await reader.cancel().catch(() => {});
      return tooLarge();
    }
    bytes.set(value, size);
    size += value.byteLength;
  }
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes.subarray(0, size));
  } catch {
    return problem(400, "body: not valid UTF-8");
  }
}

/** The override a PUT body describes, or the refusal naming the field. */
function overrideOf(text: string): Override | Response {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return problem(400, `body: not valid JSON; send an object such as { "plan": "pro" }`);
  }
  if (body === null || typeof body !== "object" || Array.isArray(body)) {
    return problem(400, `body: must be a JSON object such as { "plan": "pro" }`);
  }
  // its fields are checked by set(), which names each one at fault and stores nothing then
  return body as Override;
}

/** What set(), get(), delete() and page() throw: Redis trouble is a 503, anything else names its field. */
function failure(error: unknown): Response {
  if (error instanceof RedisCallError) {
    console.error(`edgelimit: admin API: Redis failed: ${error.message}`);
    return problem(503, "redis: the override store did not answer; try again");
  }
  return problem(400, (error as Error).message);
}

/**
 * Answers one request under the admin path (`normalizedPath` is it, or starts with it and "/").
 *
 * @example
 * if (path === adminPath || path.startsWith(`${adminPath}/`)) return admin(request, token, adminPath, routes);
 */
export async function admin(
  request: Request,
  token: string | undefined,
  adminPath: string,
  routes: readonly AdminRoute[],
): Promise<Response> {
  if (!token) return problem(404, "path: nothing is served here");
  if (!(await authorized(request.headers.get("authorization"), token))) {
    return problem(401, 'authorization: send "Authorization: Bearer <EDGELIMIT_ADMIN_TOKEN>"', {
      "WWW-Authenticate": 'Bearer realm="edgelimit"',
    });
  }
  const url = new URL(request.url);
  // The route name as sent (the admin path itself is matched lowercased, as every request path is).
  const segments = url.pathname.split("/").filter((segment) => segment !== "");
  const rest = segments.slice(adminPath.split("/").length - 1).map((segment) => {
    try {
      return decodeURIComponent(segment);
    } catch {
      return segment;
    }
  });
  if (rest[0] !== "overrides" || rest.length > 2) {
    return problem(404, `path: not found; use ${adminPath}/overrides/<route>?key=<value>`);
  }
  const name = rest[1];
  const names = routes.map((route) => route.name).join(", ");
  if (name === undefined) return problem(404, `route: required, as in ${adminPath}/overrides/<route>`);
  const route = routes.find((candidate) => candidate.name === name);
  if (route === undefined) {
    return problem(404, `route: no route is named ${quoted(name)}; the routes are ${names || "none"}`);
  }
  if (route.overrides === undefined) {
    return problem(409, `route: ${quoted(name)} takes no overrides; add "overrides": true to it`);
  }
  const store = route.limiter.overrides;
  const method = request.method.toUpperCase();
  const key = url.searchParams.get("key");
  if (method !== "GET" && method !== "PUT" && method !== "DELETE") {
    return problem(405, `method: ${quoted(request.method)} is not served here; use GET, PUT or DELETE`, {
      Allow: "GET, PUT, DELETE",
    });
  }
  if (key === null && method === "GET") return list(store, route, url.searchParams);
  if (key === null && route.key.kind !== "global") {
    return problem(400, `key: required, e.g. ?key=<the value this route's key reads from a request>`);
  }
  const id = identifierOf(route.key, key ?? "");
  if (id === undefined) return problem(400, `key: ${keyProblem(route)}, got ${quoted(key ?? "")}`);
  const identifier = `${route.name}:${id}`;
  try {
    if (method === "DELETE") {
      await store.delete(identifier);
      return new Response(null, { status: 204, headers: { "Cache-Control": "no-store" } });
    }
    if (method === "GET") {
      const override = await store.get(identifier);
      return override === undefined ? problem(404, "key: no override") : json(override);
    }
    const text = await readBody(request);
    if (text instanceof Response) return text;
    const override = overrideOf(text);
    if (override instanceof Response) return override;
    await store.set(identifier, override);
    return json(override);
  } catch (error) {
    return failure(error);
  }
}

// What a key's value must be for the route's kind of key.
function keyProblem(route: AdminRoute): string {
  switch (route.key.kind) {
    case "ip":
      return "not an IP address";
    case "path":
      return 'must be a path starting with "/"';
    case "header":
    case "cookie":
      return `must be the value of ${route.key.kind} ${route.key.name}, not empty`;
    case "global":
      return "not needed: this route counts every request together";
  }
}

async function list(store: Overrides, route: AdminRoute, params: URLSearchParams): Promise<Response> {
  const after = params.get("after") ?? undefined;
  const limitText = params.get("limit");
  let limit = DEFAULT_PAGE;
  if (limitText !== null) {
    limit = /^\d{1,7}$/.test(limitText) ? Number(limitText) : 0;
    if (limit < 1 || limit > MAX_PAGE) {
      return problem(400, `limit: must be a whole number from 1 to ${MAX_PAGE}, got ${quoted(limitText)}`);
    }
  }
  try {
    const page = await store.page({
      within: `${route.name}:`,
      limit,
      ...(after === undefined ? {} : { after }),
    });
    return json({ items: page.items, next: page.next ?? null });
  } catch (error) {
    return failure(error);
  }
}
