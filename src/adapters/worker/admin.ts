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
// The ops page and its JSON (analytics on in the config) take the token three ways, so a browser can
// reach them: the bearer header, HTTP Basic (any user, the token as password; the page's 401 asks for
// it) and a session cookie set by the login form (HttpOnly, Secure, SameSite=Strict, Path={admin}; its
// value an HMAC of a fixed text under the token, never the token). The overrides stay bearer only.
//
//   GET    {admin}/                                 the ops page (HTML); without the token a 401 that asks
//                                                  for Basic, the login form as its body
//   GET    {admin}/analytics?minutes=60             200 { routes: { <route>: report + shadowDenied }, breaker }
//   GET    {admin}/login                            the login form (no Basic challenge)
//   POST   {admin}/login                            form field token: 303 to {admin}/ with the cookie set
//   POST   {admin}/logout                           303 to {admin}/login with the cookie cleared
//
// A token is never taken from a URL: any request under the admin path with ?token= is a 400.
//
// `<value>` is what the route's key reads from a request (the API key, the cookie's value, the client
// address, the path): it becomes the identifier exactly as a request's does (identifierOf), so an
// operator never handles hashes. Every refusal is a problem+json whose detail starts with the field at
// fault; nothing is stored on any refusal. Every answer is `Cache-Control: no-store`.
import type { BreakerReport } from "../../engine/analytics.js";
import { RedisCallError } from "../../engine/errors.js";
import type { Limiter } from "../../engine/limiter.js";
import type { Override, Overrides } from "../../engine/overrides.js";
import type { AnalyticsConfig, RouteConfig } from "../../http/config.js";
import { PROBLEM_JSON } from "../../http/headers.js";
import { cookie, identifierOf } from "../../http/identity.js";
import { loginPage, type OpsRoute, opsPage, type RouteReport, STYLE } from "./ops-page.js";

/** The largest override body accepted, in bytes: a plan name, or a few rules' fields, fit many times over. */
export const MAX_BODY = 4096;
/** The most overrides one list page holds, and how many it holds when `limit` is not given. */
const MAX_PAGE = 1000;
const DEFAULT_PAGE = 100;

/** The most minutes `{admin}/analytics?minutes=` reads back (a day), and how many when not given. */
export const MAX_MINUTES = 1440;
const DEFAULT_MINUTES = 60;
/** The ops page's session cookie. */
export const SESSION_COOKIE = "edgelimit_session";

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
    headers: {
      "Content-Type": "application/json",
      "Cache-Control": "no-store",
      "X-Content-Type-Options": "nosniff",
    },
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
  return same(match?.[1]?.trim(), secret);
}

/** Whether `given` is `secret`, compared by SHA-256 digests in constant time; undefined is never. */
async function same(given: string | undefined, secret: string): Promise<boolean> {
  const encoder = new TextEncoder();
  const [a, b] = await Promise.all([
    crypto.subtle.digest("SHA-256", encoder.encode(given ?? "")),
    crypto.subtle.digest("SHA-256", encoder.encode(secret)),
  ]);
  const x = new Uint8Array(a);
  const y = new Uint8Array(b);
  let diff = given === undefined ? 1 : 0;
  for (let i = 0; i < x.length; i++) diff |= x[i]! ^ y[i]!;
  return diff === 0;
}

/** The password of `Authorization: Basic <base64(user:password)>` (UTF-8), or undefined. */
function basicPassword(header: string | null): string | undefined {
  const match = /^basic[ \t]+([A-Za-z0-9+/]+=*)[ \t]*$/i.exec(header ?? "");
  if (!match) return undefined;
  try {
    const bytes = Uint8Array.from(atob(match[1]!), (char) => char.charCodeAt(0));
    const text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
    const colon = text.indexOf(":");
    return colon === -1 ? undefined : text.slice(colon + 1);
  } catch {
    return undefined;
  }
}

/**
 * The session cookie's value for `token`: HMAC-SHA256 of "edgelimit-session" under the token, in hex.
 * It proves the token was given without being it; a new token ends every session.
 *
 * @example
 * await sessionValue(env.EDGELIMIT_ADMIN_TOKEN) // "5f0c…" (64 hex digits)
 */
export async function sessionValue(token: string): Promise<string> {
  const encoder = new TextEncoder();
  const key = await crypto.subtle.importKey(
    "raw",
    encoder.encode(token),
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign"],
  );
  const mac = new Uint8Array(await crypto.subtle.sign("HMAC", key, encoder.encode("edgelimit-session")));
  return Array.from(mac, (byte) => byte.toString(16).padStart(2, "0")).join("");
}

/** Whether a request to the ops page or its JSON carries the token: bearer, Basic or the session cookie. */
async function pageAuthorized(request: Request, token: string): Promise<boolean> {
  const header = request.headers.get("authorization");
  const session = cookie(request.headers.get("cookie"), SESSION_COOKIE);
  const [bearer, basic, cookieOk] = await Promise.all([
    authorized(header, token),
    same(basicPassword(header), token),
    session === undefined ? false : sessionValue(token).then((value) => same(session, value)),
  ]);
  return bearer || basic || cookieOk;
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
  analytics?: AnalyticsConfig,
): Promise<Response> {
  if (!token) return problem(404, "path: nothing is served here");
  const url = new URL(request.url);
  if (url.searchParams.has("token")) {
    return problem(
      400,
      `token: never put the token in a URL (URLs are logged and kept in history); send "Authorization: Bearer <token>", use HTTP Basic, or log in at ${adminPath}/`,
    );
  }
  // The route name as sent (the admin path itself is matched lowercased, as every request path is).
  const segments = url.pathname.split("/").filter((segment) => segment !== "");
  const rest = segments.slice(adminPath.split("/").length - 1).map((segment) => {
    try {
      return decodeURIComponent(segment);
    } catch {
      return segment;
    }
  });
  if (rest.length === 0) return page(request, token, adminPath, routes);
  if (rest.length === 1 && rest[0] === "analytics") return analyticsJson(request, token, routes, analytics);
  if (rest.length === 1 && rest[0] === "login") return login(request, token, adminPath);
  if (rest.length === 1 && rest[0] === "logout") return logout(request, adminPath);
  if (!(await authorized(request.headers.get("authorization"), token))) {
    return problem(401, 'authorization: send "Authorization: Bearer <EDGELIMIT_ADMIN_TOKEN>"', {
      "WWW-Authenticate": 'Bearer realm="edgelimit"',
    });
  }
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

// ------------------------------------------------------------------------------------------ ops page

const STYLE_HASH = crypto.subtle
  .digest("SHA-256", new TextEncoder().encode(STYLE))
  .then((digest) => btoa(String.fromCharCode(...new Uint8Array(digest))));

/** An HTML answer: nothing runs (no script is allowed at all), nothing loads, nothing frames it. */
async function html(body: string, status = 200, headers: Record<string, string> = {}): Promise<Response> {
  const policy = [
    "default-src 'none'",
    `style-src 'sha256-${await STYLE_HASH}'`,
    "img-src data:",
    "form-action 'self'",
    "frame-ancestors 'none'",
    "base-uri 'none'",
  ].join("; ");
  return new Response(body, {
    status,
    headers: {
      "Content-Type": "text/html; charset=utf-8",
      "Content-Security-Policy": policy,
      "X-Content-Type-Options": "nosniff",
      "X-Frame-Options": "DENY",
      "Referrer-Policy": "no-referrer",
      "Cache-Control": "no-store",
      ...headers,
    },
  });
}

const BASIC_CHALLENGE = { "WWW-Authenticate": 'Basic realm="edgelimit"' };

/**
 * The routes' reports of the `minutes` whole minutes up to now (the current one included), each with
 * this isolate's counts flushed first (report() does), or why there is none.
 */
async function reports(
  routes: readonly AdminRoute[],
  minutes: number,
): Promise<{ shown: OpsRoute[]; from: number; to: number }> {
  const to = Date.now();
  const from = (Math.floor(to / 60_000) - (minutes - 1)) * 60_000;
  const shown = await Promise.all(
    routes.map(async (route): Promise<OpsRoute> => {
      if (!route.limiter.analytics.enabled) {
        return { route, report: { error: 'analytics are off: add "analytics": true to the config' } };
      }
      try {
        const report = await route.limiter.analytics.report({ from, to });
        const shadowDenied = route.mode === "shadow" ? report.decisions.denied : 0;
        return { route, report: { ...report, shadowDenied } };
      } catch (error) {
        console.error(`edgelimit: ops page: route "${route.name}": no report: ${(error as Error).message}`);
        // the kind (timeout, unreachable, breaker-open, ...) says why, and never holds a secret
        const kind = error instanceof RedisCallError ? error.kind : "error";
        return {
          route,
          report: { error: `Redis did not answer for this route's report (${kind}); reload to try again` },
        };
      }
    }),
  );
  return { shown, from, to };
}

// This isolate's breaker, read without a request, so it shows while Redis is down: every route shares
// the Worker's one Redis, so one breaker. Undefined only when no route is configured.
function breakerOf(routes: readonly AdminRoute[]): BreakerReport | undefined {
  return routes[0]?.limiter.analytics.breaker();
}

async function page(
  request: Request,
  token: string,
  adminPath: string,
  routes: readonly AdminRoute[],
): Promise<Response> {
  const method = request.method.toUpperCase();
  if (method !== "GET" && method !== "HEAD") {
    return problem(405, `method: ${quoted(request.method)} is not served here; use GET`, {
      Allow: "GET, HEAD",
    });
  }
  if (!(await pageAuthorized(request, token))) return html(loginPage(adminPath), 401, BASIC_CHALLENGE);
  const { shown, from, to } = await reports(routes, DEFAULT_MINUTES);
  return html(opsPage({ adminPath, routes: shown, breaker: breakerOf(routes), from, to }));
}

async function analyticsJson(
  request: Request,
  token: string,
  routes: readonly AdminRoute[],
  analytics: AnalyticsConfig | undefined,
): Promise<Response> {
  if (request.method.toUpperCase() !== "GET") {
    return problem(405, `method: ${quoted(request.method)} is not served here; use GET`, { Allow: "GET" });
  }
  if (!(await pageAuthorized(request, token))) {
    return problem(401, 'authorization: send "Authorization: Bearer <EDGELIMIT_ADMIN_TOKEN>" or HTTP Basic', {
      "WWW-Authenticate": 'Bearer realm="edgelimit", Basic realm="edgelimit"',
    });
  }
  const text = new URL(request.url).searchParams.get("minutes");
  let minutes = DEFAULT_MINUTES;
  // A report reaches back at most the counts' retention (when the config sets one shorter than a day).
  const most = Math.min(MAX_MINUTES, Math.floor((analytics?.retention ?? Number.POSITIVE_INFINITY) / 60_000));
  if (text !== null) {
    minutes = /^\d{1,5}$/.test(text) ? Number(text) : 0;
    if (minutes < 1 || minutes > most) {
      const why = most < MAX_MINUTES ? " (the analytics retention)" : "";
      return problem(400, `minutes: must be a whole number from 1 to ${most}${why}, got ${quoted(text)}`);
    }
  }
  const { shown } = await reports(routes, minutes);
  const out: Record<string, RouteReport | { error: string }> = {};
  for (const { route, report } of shown) out[route.name] = report;
  return json({ routes: out, breaker: breakerOf(routes) ?? null });
}

/** The form's POST: the right token sets the session cookie and goes to the page; a wrong one, the form again. */
async function login(request: Request, token: string, adminPath: string): Promise<Response> {
  const method = request.method.toUpperCase();
  // The form itself, without the page's Basic challenge (which a browser answers with its own prompt).
  if (method === "GET" || method === "HEAD") return html(loginPage(adminPath));
  if (method !== "POST") {
    return problem(405, `method: ${quoted(request.method)} is not served here; use GET or POST`, {
      Allow: "GET, HEAD, POST",
    });
  }
  const text = await readBody(request);
  if (text instanceof Response) return text;
  const given = new URLSearchParams(text).get("token") ?? undefined;
  if (!(await same(given, token))) return html(loginPage(adminPath, "That is not the admin token."), 401);
  return new Response(null, {
    status: 303,
    headers: {
      Location: `${adminPath}/`,
      "Set-Cookie": `${SESSION_COOKIE}=${await sessionValue(token)}; HttpOnly; Secure; SameSite=Strict; Path=${adminPath}`,
      "Cache-Control": "no-store",
    },
  });
}

async function logout(request: Request, adminPath: string): Promise<Response> {
  if (request.method.toUpperCase() !== "POST") {
    return problem(405, `method: ${quoted(request.method)} is not served here; use POST`, { Allow: "POST" });
  }
  return new Response(null, {
    status: 303,
    headers: {
      Location: `${adminPath}/login`,
      "Set-Cookie": `${SESSION_COOKIE}=; HttpOnly; Secure; SameSite=Strict; Path=${adminPath}; Max-Age=0`,
      "Cache-Control": "no-store",
    },
  });
}
