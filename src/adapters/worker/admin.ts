// The Worker's admin API: per-key overrides of a route's limits, changed at runtime. A Hono sub-app
// (adminApp) the Worker mounts at the config's adminPath, serving only when the secret
// EDGELIMIT_ADMIN_TOKEN is set (404 for the whole path otherwise), the overrides to
// `Authorization: Bearer <token>` through Hono's bearerAuth (401 otherwise; the token is then an RFC 6750
// bearer token, of A-Z a-z 0-9 - . _ ~ + / and = at its end). Never forwarded to the origin and never
// counted by a route.
//
//   PUT    {admin}/overrides/<route>?key=<value>   body { "plan": "pro" } | { "rules": {...}, "expiresAt": ms }
//                                                  200 with the override as stored
//   GET    {admin}/overrides/<route>?key=<value>   200 with the override, or 404
//   DELETE {admin}/overrides/<route>?key=<value>   204
//   ...?by=<key>&key=<value>, ...?by=<key>         the same, for the identifier a rule's "by" reads
//                                                  (?by=ip&key=203.0.113.7); without by, the route's key.
//                                                  An override changes only rules that count by it.
//   GET    {admin}/overrides/<route>[?after=&limit=]  200 { items: [{ identifier, override }], next }
//
// The ops page and its JSON (analytics on in the config) take the token three ways, so a browser can
// reach them: the bearer header, HTTP Basic (any user, the token as password; the page's 401 asks for
// it) and a session cookie set by the login form (HttpOnly, Secure, SameSite=Strict, Path={admin},
// Max-Age 12 h; its value `<issuedAt>.<expiresAt>.<nonce>.<HMAC under the token>`, never the token).
// Logout stores the session's nonce in Redis until its expiry, so a copy of the cookie opens nothing
// in any isolate afterwards. The overrides stay bearer only.
//
// Wrong tokens are throttled per client address (CF-Connecting-IP, IPv6 per /64), by a Limiter of its
// own: at most WRONG_TOKENS in any minute, by bearer, Basic, a forged cookie or the login form; past
// that every try from the address is a 429 with Retry-After, a right token included (answering it
// would tell a guess from a hit), until the oldest wrong one is a minute old. A right token is never
// counted, and another address is never affected.
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

import type { Context } from "hono";
import { bearerAuth } from "hono/bearer-auth";
import { HTTPException } from "hono/http-exception";
import { Hono } from "hono/tiny";
import { slidingLog } from "../../engine/algorithms/index.js";
import type { BreakerReport } from "../../engine/analytics.js";
import { RedisCallError } from "../../engine/errors.js";
import { Limiter } from "../../engine/limiter.js";
import type { Override, Overrides } from "../../engine/overrides.js";
import type { RestConnection } from "../../engine/rest.js";
import { transportFor } from "../../engine/transport.js";
import type { Decision } from "../../engine/types.js";
import { PROBLEM_JSON } from "../../http/headers.js";
import { clientKey, type IpAddress } from "../ip.js";
import type { AnalyticsConfig, RouteConfig } from "./config.js";
import { clientIp, cookie, identifierOf, type KeySpec, keySpecText, parseKeySpec } from "./identity.js";
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
/** Seconds a session lasts (the cookie's Max-Age, and the expiry signed into its value): 12 h. */
export const SESSION_MAX_AGE = 43_200;
/** Wrong tokens one client address may send in any minute; the next try is a 429. */
export const WRONG_TOKENS = 5;
/** Ms a session's Redis call waits (off the request path of any decision). */
const SESSION_TIMEOUT = 5000;

/** The Worker's Redis beside the config (all optional in tests). */
export interface AdminContext {
  /** The Worker's Redis: wrong tokens are counted and ended sessions kept there. */
  readonly redis?: RestConnection;
  /** The config's key prefix. */
  readonly prefix?: string;
  /** Epoch ms now (default Date.now): a session's issue and expiry are read against it. */
  readonly clock?: () => number;
}

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
  429: "Too Many Requests",
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

const hex = (bytes: ArrayBuffer) =>
  Array.from(new Uint8Array(bytes), (byte) => byte.toString(16).padStart(2, "0")).join("");

async function hmac(token: string, text: string): Promise<string> {
  const encoder = new TextEncoder();
  const key = await crypto.subtle.importKey(
    "raw",
    encoder.encode(token),
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign"],
  );
  return hex(await crypto.subtle.sign("HMAC", key, encoder.encode(text)));
}

/**
 * A session cookie's value: `<issuedAt>.<expiresAt>.<nonce>.<mac>`, the mac an HMAC-SHA256 under the
 * token of `edgelimit-session.<issuedAt>.<expiresAt>.<nonce>` (hex). It proves the token was given
 * without being it; a new token ends every session, and so do its expiry and logout.
 *
 * @example
 * await sessionValue(env.EDGELIMIT_ADMIN_TOKEN, Date.now()) // "1767225600000.1767268800000.9f2c….5f0c…"
 */
export async function sessionValue(
  token: string,
  issuedAt: number,
  nonce: string = hex(crypto.getRandomValues(new Uint8Array(16)).buffer),
): Promise<string> {
  const body = `${issuedAt}.${issuedAt + SESSION_MAX_AGE * 1000}.${nonce}`;
  return `${body}.${await hmac(token, `edgelimit-session.${body}`)}`;
}

/** What a session cookie's value is at `now`: signed by the token and current, or why not. */
export type SessionCheck =
  | { readonly ok: true; readonly nonce: string; readonly expiresAt: number }
  | { readonly ok: false; readonly why: "forged" | "expired" };

/**
 * Reads a session cookie's value at `now` (epoch ms): its mac compared in constant time, then its
 * expiry. Not whether it was logged out of (that is in Redis).
 *
 * @example
 * await checkSession(cookieValue, env.EDGELIMIT_ADMIN_TOKEN, Date.now()) // { ok: true, nonce, expiresAt }
 */
export async function checkSession(value: string, token: string, now: number): Promise<SessionCheck> {
  const match = /^(\d{1,16})\.(\d{1,16})\.([0-9a-f]{32})\.([0-9a-f]{64})$/.exec(value);
  const body = match ? `${match[1]}.${match[2]}.${match[3]}` : "";
  const signed = await same(match?.[4], await hmac(token, `edgelimit-session.${body}`));
  if (!match || !signed) return { ok: false, why: "forged" };
  const issuedAt = Number(match[1]);
  const expiresAt = Number(match[2]);
  // a value this Worker signed never lasts longer than SESSION_MAX_AGE, nor starts in the future
  if (now < issuedAt || now >= expiresAt || expiresAt - issuedAt > SESSION_MAX_AGE * 1000) {
    return { ok: false, why: "expired" };
  }
  return { ok: true, nonce: match[3]!, expiresAt };
}

/** The Redis key that marks a session logged out of (until the session's own expiry). */
const endedKey = (prefix: string, nonce: string) => `${prefix}:admin:ended:${nonce}`;

// The wrong-token Limiter of each Redis and prefix, per isolate (bounded, as the Worker's setups are).
const throttles = new Map<string, Limiter>();

/** Counts wrong tokens of the request's address, and tells whether it may try at all. */
class Throttle {
  private readonly limiter: Limiter | undefined;
  private readonly id: string;
  /** This request's try, counted before its token was compared (tried). */
  private counted: Decision | undefined;

  /** `ip`: the client's address, as the Worker determines it (clientIp). */
  constructor(context: AdminContext, ip: IpAddress | undefined) {
    // ":admin:" first: a route's identifiers start with its name, which never holds a ":"
    this.id = `:admin:${ip === undefined ? "unknown" : clientKey(ip)}`;
    const { redis, prefix } = context;
    if (redis === undefined || prefix === undefined) return;
    const cacheKey = JSON.stringify([redis.url, redis.token, prefix]);
    let limiter = throttles.get(cacheKey);
    if (limiter === undefined) {
      // Redis down: tries are let through (the page must still show the breaker while Redis is
      // down), each still checked in constant time.
      limiter = new Limiter({
        redis,
        prefix,
        rules: { wrongTokens: slidingLog({ limit: WRONG_TOKENS, window: "1m" }) },
        onError: "allow",
        // the breaker stays the decisions' own: the ops page shows it
        breaker: false,
      });
      if (throttles.size >= 8) throttles.delete(throttles.keys().next().value as string);
      throttles.set(cacheKey, limiter);
    }
    this.limiter = limiter;
  }

  /**
   * Counts one try before its token is compared, so that tries sent at once are each counted (a peek
   * first would let them all through): the seconds to wait when the address has used up its wrong
   * tries, else undefined. A try that was not a wrong one then goes back (`notWrong`).
   */
  async tried(): Promise<number | undefined> {
    if (this.limiter === undefined) return undefined;
    const counted = await this.limiter.limit(this.id);
    if (!counted.allowed) return Math.max(1, Math.ceil(counted.retryAfter / 1000));
    this.counted = counted;
    return undefined;
  }

  /** The try was right (or was right once: an expired session): it goes back. */
  async notWrong(): Promise<void> {
    const counted = this.counted;
    this.counted = undefined;
    if (counted !== undefined) await this.limiter!.settle(counted, 0);
  }
}

/** The throttle's refusal: a problem, or the login form for the page. */
function tooMany(seconds: number): Response {
  return problem(429, `authorization: too many wrong tokens from this address; try again in ${seconds} s`, {
    "Retry-After": String(seconds),
  });
}

/**
 * Whether a request to the ops page or its JSON carries the token (bearer, Basic or a live session
 * cookie): "ok", "none" (nothing was right), or the seconds its address must wait. A wrong token or a
 * forged cookie is counted; an expired or logged-out cookie is not (it was right once).
 */
async function pageAuthorized(
  request: Request,
  token: string,
  context: AdminContext,
  throttle: Throttle,
): Promise<"ok" | "none" | number> {
  const header = request.headers.get("authorization");
  const session = cookie(request.headers.get("cookie"), SESSION_COOKIE);
  const bearerGiven = /^bearer[ \t]+[^ \t]/i.test(header ?? "");
  const password = basicPassword(header);
  if (!bearerGiven && password === undefined && session === undefined) return "none";
  const wait = await throttle.tried();
  if (wait !== undefined) return wait;
  const now = (context.clock ?? Date.now)();
  const [bearer, basic, read] = await Promise.all([
    authorized(header, token),
    same(password, token),
    session === undefined ? undefined : checkSession(session, token, now),
  ]);
  const ok = bearer || basic || (read?.ok === true && !(await ended(context, read.nonce)));
  const wrong = bearerGiven || password !== undefined || (read?.ok === false && read.why === "forged");
  if (ok || !wrong) await throttle.notWrong();
  return ok ? "ok" : "none";
}

/** Whether the session was logged out of; a Redis that cannot tell ends it too (fail closed). */
async function ended(context: AdminContext, nonce: string): Promise<boolean> {
  if (context.redis === undefined || context.prefix === undefined) return false;
  const replies = await transportFor(context.redis).pipeline([["GET", endedKey(context.prefix, nonce)]], {
    timeout: SESSION_TIMEOUT,
  });
  if (replies instanceof RedisCallError || replies[0]?.error !== undefined) {
    console.error("edgelimit: ops page: Redis did not say whether a session was logged out of; refused");
    return true;
  }
  return replies[0]?.result !== null;
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
    // the kind (timeout, unreachable, redis, ...) says why, and never holds a secret
    return problem(503, `redis: the override store failed (${error.kind}); try again`);
  }
  return problem(400, (error as Error).message);
}

/** What the admin sub-app is built from: the Worker's setup, and its Redis beside it. */
export interface AdminOptions extends AdminContext {
  /** EDGELIMIT_ADMIN_TOKEN; unset or empty: nothing is served under the admin path. */
  readonly token: string | undefined;
  /** The config's adminPath, lowercase (links and the cookie's Path name it). */
  readonly adminPath: string;
  readonly routes: readonly AdminRoute[];
  /** The config's analytics (its retention bounds `minutes`). */
  readonly analytics?: AnalyticsConfig | undefined;
}

type AdminEnv = { Variables: { throttle: Throttle; wait: number | undefined } };
/** The admin sub-app ({@link adminApp}). */
export type AdminApp = Hono<AdminEnv>;

const UNAUTHORIZED = 'authorization: send "Authorization: Bearer <EDGELIMIT_ADMIN_TOKEN>"';
const BEARER_CHALLENGE = 'Bearer realm="edgelimit"';
// RFC 6750's b64token: what a bearer token may hold (Hono's bearerAuth reads no other).
const B64TOKEN = /^[A-Za-z0-9._~+/-]+=*$/;

/**
 * The admin API and the ops page, as a Hono app whose paths start at the admin path: `/`, `/analytics`,
 * `/login`, `/logout` (the ops page: bearer, Basic or a session), `/overrides/<route>` (Hono's
 * bearerAuth). The Worker mounts it: a request whose normalized path is under adminPath is handed to
 * {@link underAdmin}'s request, its path from there on.
 *
 * @example
 * const api = adminApp({ token: env.EDGELIMIT_ADMIN_TOKEN, adminPath: "/_edgelimit", routes });
 * return api.fetch(underAdmin(request, "/_edgelimit"));
 */
export function adminApp(options: AdminOptions): AdminApp {
  const { token, adminPath, routes, analytics } = options;
  const api = new Hono<AdminEnv>();
  api.use(async (c, next) => {
    if (!token) return problem(404, "path: nothing is served here");
    if (new URL(c.req.url).searchParams.has("token")) {
      return problem(
        400,
        `token: never put the token in a URL (URLs are logged and kept in history); send "Authorization: Bearer <token>", use HTTP Basic, or log in at ${adminPath}/`,
      );
    }
    c.set("throttle", new Throttle(options, clientIp(c.req.raw.headers)));
    return next();
  });
  if (!token) return api;
  if (!B64TOKEN.test(token)) {
    api.use(async () => {
      console.error(
        "edgelimit: admin API: EDGELIMIT_ADMIN_TOKEN is not a bearer token (A-Z a-z 0-9 - . _ ~ + /, = at its end); nothing is served",
      );
      return problem(503, "EDGELIMIT_ADMIN_TOKEN: not a bearer token; set one of A-Z a-z 0-9 - . _ ~ + /");
    });
    return api;
  }

  // the ops page and its JSON: the token by bearer, Basic or a session cookie (pageAuthorized)
  api.all("/", (c) => page(c.req.raw, token, adminPath, routes, options, c.get("throttle")));
  api.all("/analytics", (c) =>
    analyticsJson(c.req.raw, token, routes, analytics, options, c.get("throttle")),
  );
  api.all("/login", (c) => login(c.req.raw, token, adminPath, options, c.get("throttle")));
  api.all("/logout", (c) => logout(c.req.raw, token, adminPath, options));

  // everything else: the bearer alone, each wrong one counted; a throttled address is refused first,
  // the right token included (answering it would tell a guess from a hit)
  const refused = (c: Context<AdminEnv>) => {
    const wait = c.get("wait");
    return wait === undefined ? problem(401, UNAUTHORIZED) : tooMany(wait);
  };
  api.use(
    bearerAuth({
      realm: "edgelimit",
      verifyToken: async (given, c: Context<AdminEnv>) => {
        const throttle = c.get("throttle");
        const wait = await throttle.tried();
        c.set("wait", wait);
        if (wait !== undefined) return false;
        const right = await same(given, token);
        if (right) await throttle.notWrong();
        return right;
      },
      noAuthenticationHeader: { message: () => problem(401, UNAUTHORIZED) },
      // not "Bearer <b64token>": another scheme is simply unauthorized; a bearer of other characters
      // can never be the token, but is a wrong try all the same
      invalidAuthenticationHeader: {
        wwwAuthenticateHeader: BEARER_CHALLENGE,
        message: async (c: Context<AdminEnv>) => {
          if (/^bearer[ \t]+[^ \t]/i.test(c.req.header("authorization") ?? "")) {
            c.set("wait", await c.get("throttle").tried());
          }
          return refused(c);
        },
      },
      invalidToken: { wwwAuthenticateHeader: BEARER_CHALLENGE, message: refused },
    }),
  );
  api.all("/overrides", () => problem(404, `route: required, as in ${adminPath}/overrides/<route>`));
  api.all("/overrides/:route", (c) => overrides(c.req.raw, c.req.param("route"), routes));
  api.all("*", () => problem(404, `path: not found; use ${adminPath}/overrides/<route>?key=<value>`));
  // bearerAuth's refusals are thrown; anything else is the Worker's to answer
  api.onError((error) => {
    if (error instanceof HTTPException) return error.getResponse();
    throw error;
  });
  return api;
}

/**
 * `request` as the admin sub-app sees it: its path from the admin path on (`/`, `/overrides/api`),
 * each segment as sent (the admin path itself is matched lowercased, as every request path is, by
 * the caller), the query kept.
 *
 * @example
 * underAdmin(new Request("https://w.example/_EdgeLimit/overrides/api?key=a"), "/_edgelimit").url
 * // "https://w.example/overrides/api?key=a"
 */
export function underAdmin(request: Request, adminPath: string): Request {
  const url = new URL(request.url);
  const segments = url.pathname.split("/").filter((segment) => segment !== "");
  const rest = segments.slice(adminPath.split("/").length - 1).map((segment) => {
    try {
      return decodeURIComponent(segment);
    } catch {
      return segment;
    }
  });
  url.pathname = `/${rest.map(encodeURIComponent).join("/")}`;
  return new Request(url, request);
}

/** One override request, past the bearer: `<route>` by name, `?key=` the value its key reads. */
async function overrides(request: Request, name: string, routes: readonly AdminRoute[]): Promise<Response> {
  const url = new URL(request.url);
  const names = routes.map((route) => route.name).join(", ");
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
  const by = keyedBy(route, url.searchParams.get("by"));
  if (by instanceof Response) return by;
  if (key === null && method === "GET") return list(store, route, url.searchParams, by.field);
  if (key === null && by.spec.kind !== "global") {
    return problem(400, `key: required, e.g. ?key=<the value this ${by.what} reads from a request>`);
  }
  const id = identifierOf(by.spec, key ?? "");
  if (id === undefined) return problem(400, `key: ${keyProblem(by.spec)}, got ${quoted(key ?? "")}`);
  // the identifier a request's is (index.ts): the route's key is the record's "id", a bare string
  const value = `${route.name}:${id}`;
  const identifier = by.field === "id" ? value : { [by.field]: value };
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
    const other = otherRule(route, by, override);
    if (other !== undefined) return other;
    await store.set(identifier, override);
    return json(override);
  } catch (error) {
    return failure(error);
  }
}

/** Which of the route's identifiers an override is for: the field its rules count by, and its key. */
interface KeyedBy {
  readonly field: string;
  readonly spec: KeySpec;
  /** How a message names it: "route's key" or `rule key "ip"`. */
  readonly what: string;
}

// `?by=`: a key as a rule's "by" gives it, one some rule of the route counts by; absent, the route's key.
function keyedBy(route: AdminRoute, by: string | null): KeyedBy | Response {
  const counted = Object.values(route.identifiers).map(keySpecText);
  const texts = [...new Set(counted)].map((text) => JSON.stringify(text)).join(", ");
  let spec: KeySpec = route.key;
  if (by !== null) {
    // parseKeySpec quotes what it refuses: a long one is refused here, unquoted
    if (by.length > 200) return problem(400, "by: not a key (longer than 200 characters)");
    try {
      spec = parseKeySpec(by);
    } catch (error) {
      return problem(400, `by: ${(error as Error).message}`);
    }
  }
  const text = keySpecText(spec);
  const field = Object.entries(route.identifiers).find(([, other]) => keySpecText(other) === text)?.[0];
  if (field === undefined) {
    return problem(
      400,
      `by: no rule of ${quoted(route.name)} counts by ${quoted(text)}; its rules count by ${texts}`,
    );
  }
  return { field, spec, what: by === null ? "route's key" : `key ${JSON.stringify(text)}` };
}

// An override of one identifier changes only the rules counted by it: a rule counted by another would
// have one limit for one client and another for the rest of the identifiers it shares.
function otherRule(route: AdminRoute, by: KeyedBy, override: Override): Response | undefined {
  const rules = (override as { rules?: unknown }).rules;
  if (rules === null || typeof rules !== "object" || Array.isArray(rules)) return undefined;
  for (const name of Object.keys(rules)) {
    // an unknown rule is set()'s to name ("toString" or "__proto__" included: own rules only)
    if (!Object.hasOwn(route.rules, name)) continue;
    const rule = route.rules[name] as { by?: string };
    const field = rule.by ?? "id";
    if (field === by.field) continue;
    const spec = keySpecText(route.identifiers[field]!);
    const usage = field === "id" ? "leave by out" : `use ?by=${spec}`;
    return problem(
      400,
      `rules.${name}: counts by ${JSON.stringify(spec)}, not by ${JSON.stringify(keySpecText(by.spec))}; to change it, ${usage}`,
    );
  }
  return undefined;
}

// What a key's value must be for its kind of key.
function keyProblem(spec: KeySpec): string {
  switch (spec.kind) {
    case "ip":
      return "not an IP address";
    case "path":
      return 'must be a path starting with "/"';
    case "header":
    case "cookie":
      return `must be the value of ${spec.kind} ${spec.name}, not empty`;
    case "global":
      return "not needed: this key counts every request together";
  }
}

async function list(
  store: Overrides,
  route: AdminRoute,
  params: URLSearchParams,
  field: string,
): Promise<Response> {
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
      by: field,
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
  context: AdminContext,
  throttle: Throttle,
): Promise<Response> {
  const method = request.method.toUpperCase();
  if (method !== "GET" && method !== "HEAD") {
    return problem(405, `method: ${quoted(request.method)} is not served here; use GET`, {
      Allow: "GET, HEAD",
    });
  }
  const access = await pageAuthorized(request, token, context, throttle);
  if (typeof access === "number") {
    const message = `Too many wrong tokens from this address; try again in ${access} s.`;
    return html(loginPage(adminPath, message), 429, { "Retry-After": String(access) });
  }
  if (access === "none") return html(loginPage(adminPath), 401, BASIC_CHALLENGE);
  const { shown, from, to } = await reports(routes, DEFAULT_MINUTES);
  return html(opsPage({ adminPath, routes: shown, breaker: breakerOf(routes), from, to }));
}

async function analyticsJson(
  request: Request,
  token: string,
  routes: readonly AdminRoute[],
  analytics: AnalyticsConfig | undefined,
  context: AdminContext,
  throttle: Throttle,
): Promise<Response> {
  if (request.method.toUpperCase() !== "GET") {
    return problem(405, `method: ${quoted(request.method)} is not served here; use GET`, { Allow: "GET" });
  }
  const access = await pageAuthorized(request, token, context, throttle);
  if (typeof access === "number") return tooMany(access);
  if (access === "none") {
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
async function login(
  request: Request,
  token: string,
  adminPath: string,
  context: AdminContext,
  throttle: Throttle,
): Promise<Response> {
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
  const wait = await throttle.tried();
  if (wait !== undefined) {
    const message = `Too many wrong tokens from this address; try again in ${wait} s.`;
    return html(loginPage(adminPath, message), 429, { "Retry-After": String(wait) });
  }
  if (!(await same(given, token))) return html(loginPage(adminPath, "That is not the admin token."), 401);
  await throttle.notWrong();
  const value = await sessionValue(token, (context.clock ?? Date.now)());
  return new Response(null, {
    status: 303,
    headers: {
      Location: `${adminPath}/`,
      "Set-Cookie": `${SESSION_COOKIE}=${value}; HttpOnly; Secure; SameSite=Strict; Path=${adminPath}; Max-Age=${SESSION_MAX_AGE}`,
      "Cache-Control": "no-store",
    },
  });
}

/**
 * Ends the session for good: its nonce is stored in Redis until the session's own expiry, so the same
 * cookie (a copy of it included) opens nothing in any isolate. A cookie that is no live session only
 * goes from the browser. Redis not answering: a 503, the session not ended.
 */
async function logout(
  request: Request,
  token: string,
  adminPath: string,
  context: AdminContext,
): Promise<Response> {
  if (request.method.toUpperCase() !== "POST") {
    return problem(405, `method: ${quoted(request.method)} is not served here; use POST`, { Allow: "POST" });
  }
  const session = cookie(request.headers.get("cookie"), SESSION_COOKIE);
  const read =
    session === undefined ? undefined : await checkSession(session, token, (context.clock ?? Date.now)());
  if (read?.ok && context.redis !== undefined && context.prefix !== undefined) {
    const key = endedKey(context.prefix, read.nonce);
    const set = ["SET", key, "1", "PXAT", String(read.expiresAt)];
    // SET of the same value and expiry: idempotent, so sent again once if Redis did not answer
    let replies = await transportFor(context.redis).pipeline([set], { timeout: SESSION_TIMEOUT });
    if (replies instanceof RedisCallError && (replies.kind === "timeout" || replies.kind === "unreachable")) {
      replies = await transportFor(context.redis).pipeline([set], { timeout: SESSION_TIMEOUT });
    }
    if (replies instanceof RedisCallError || replies[0]?.error !== undefined) {
      console.error("edgelimit: ops page: Redis did not store a logout; the session goes on");
      return problem(503, "redis: the session could not be ended; try again");
    }
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
