import { ipAddress } from "@vercel/functions/headers";
import { next } from "@vercel/functions/middleware";
import type { Limiter } from "../../engine/limiter.js";
import { failureLog } from "../../http/error-log.js";
import { enforce, unauthorized } from "../../http/headers.js";
import { identityOf } from "../../http/identity.js";
import { compileRoutes, normalizePath, parsePathPattern } from "../../http/routes.js";
import { clientKey, parseIp } from "../ip.js";

/** Options of {@link createMiddleware}. Only `limiter` is required. */
export interface VercelRateLimitOptions {
  limiter: Limiter;
  /**
   * Who is asking (default: the client IP Vercel's edge puts in x-real-ip, an IPv6 client counted per
   * /64): one identifier, or a record of them, one field per rule's `by` (`{ user, ip: clientIp(request),
   * global: "all" }`), decided in one call, all or nothing. `undefined`, `""`, or a record with a field
   * `undefined` or `""` answers 401 (see `onMissingKey`).
   */
  key?: (
    request: Request,
  ) =>
    | string
    | Readonly<Record<string, string | undefined>>
    | undefined
    | Promise<string | Readonly<Record<string, string | undefined>> | undefined>;
  /**
   * The paths to limit (default: every path the middleware runs for); others pass untouched.
   * "/login" (that path), "/users/:id" (any one segment there), "/api/*" (/api and all below it).
   * Paths are compared normalized (case, "//", "/./", "%69"...): every spelling of a route is limited.
   */
  routes?: readonly string[];
  /** Units this request takes (default 1); 0 only reads the state. */
  cost?: (request: Request) => number | Promise<number>;
  /**
   * The Limiter plan this request is decided under (e.g. from a verified token); `undefined`: the base
   * rules. The headers state the quota of the plan that applied.
   */
  plan?: (request: Request) => string | undefined | Promise<string | undefined>;
  /** Also send X-RateLimit-Limit / -Remaining / -Reset (default false). */
  legacyHeaders?: boolean;
  /** The response when `key` gives undefined or "" (default: a 401 problem+json). */
  onMissingKey?: (request: Request) => Response | Promise<Response>;
}

/**
 * Vercel edge middleware (Next.js `middleware.ts`, or Vercel Routing Middleware). A request over the
 * limit gets a 429 application/problem+json with Retry-After; one under it continues to the route, with
 * RateLimit-Policy and RateLimit added to the route's response (`x-middleware-next`, as
 * `NextResponse.next()` does). Paths outside `routes` resolve to undefined: continue, nothing added.
 * There is no background work: the one Redis round trip is the decision the response waits for.
 *
 * @example
 * // middleware.ts
 * import { Redis } from "@upstash/redis";
 * import { gcra, Limiter } from "edgelimit";
 * import { createMiddleware } from "edgelimit/vercel";
 *
 * const rules = { burst: gcra({ limit: 10, period: "1s" }) };
 * const limiter = new Limiter({ redis: Redis.fromEnv(), rules });
 * export default createMiddleware({ limiter, routes: ["/api/*"] });
 * export const config = { matcher: "/api/:path*" };
 */
export function createMiddleware(
  options: VercelRateLimitOptions,
): (request: Request) => Promise<Response | undefined> {
  const {
    limiter,
    key = clientIp,
    routes,
    cost = () => 1,
    plan,
    legacyHeaders = false,
    onMissingKey = () => unauthorized(),
  } = options;
  const limited = routes === undefined ? () => true : routeMatcher(routes);
  // Redis failures: the first logged in full, then at most one summary line per 60 s.
  const failures = failureLog({ interval: 60_000 });
  return async function rateLimitMiddleware(request) {
    const { pathname } = new URL(request.url);
    if (!limited(pathname)) return undefined;
    const id = identityOf(await key(request));
    if (id === undefined) return onMissingKey(request);
    const decision = await limiter.limit(id, {
      cost: await cost(request),
      plan: plan && (await plan(request)),
      waitUntil: vercelWaitUntil(),
    });
    const failure = failures.record(decision, `${request.method} ${pathname}`);
    if (failure) console.warn(failure);
    const { refusal, headers } = enforce(decision, { legacy: legacyHeaders });
    return refusal ?? next({ headers });
  };
}

/**
 * The default key: the client IP from x-real-ip, canonical (so ::ffff:203.0.113.7 and 203.0.113.7 are
 * one client), and an IPv6 client's /64 (one subscriber usually holds a whole /64 and could otherwise
 * take a fresh counter per address). Undefined when the header is missing or not an IP (`next dev`).
 *
 * @example
 * clientIp(new Request("https://x.test", { headers: { "x-real-ip": "2001:db8::1" } })) // "2001:db8::/64"
 */
export function clientIp(request: Request): string | undefined {
  const text = ipAddress(request);
  const address = text === undefined ? undefined : parseIp(text.trim());
  return address && clientKey(address);
}

/**
 * Vercel's `waitUntil` for this request (what `waitUntil` of @vercel/functions calls), so that lease
 * refunds finish after the response; undefined outside a Vercel request (then a timer sends them).
 */
function vercelWaitUntil(): ((promise: Promise<unknown>) => void) | undefined {
  const holder = globalThis as { [key: symbol]: { get?: () => { waitUntil?: unknown } } | undefined };
  const context = holder[Symbol.for("@vercel/request-context")]?.get?.();
  const waitUntil = context?.waitUntil;
  return typeof waitUntil === "function" ? (promise) => waitUntil.call(context, promise) : undefined;
}

/** A predicate over URL paths, from the Worker's own route patterns (`routes.ts`), so both agree. */
function routeMatcher(routes: readonly string[]): (pathname: string) => boolean {
  const patterns = routes.map((route, i) => {
    try {
      return parsePathPattern(route);
    } catch (error) {
      throw new Error(`routes[${i}]: ${(error as Error).message}`);
    }
  });
  // compiled once: a request's path is read once, not once a pattern
  const table = compileRoutes(patterns.map((path) => ({ match: { path } })));
  return (pathname) => table.match(["GET"], normalizePath(pathname)).length > 0;
}
