// The Cloudflare Worker: a reverse proxy in front of one origin that rate limits the routes its config
// names. Configured by one JSON document (the EDGELIMIT_CONFIG var) and two secrets
// (UPSTASH_REDIS_REST_URL, UPSTASH_REDIS_REST_TOKEN), plus one secret per regional database (its
// tokenSecret). The config's fields are documented in config.ts and regions.ts.
//
// request ─▶ config (parsed once per isolate) ─▶ deny list (403) ─▶ under adminPath: the admin
//            sub-app (admin.ts) ─▶ first matching route
//         ─▶ allow list / no route: straight to the origin
//         ─▶ route: identity ─▶ region (request.cf) ─▶ the route's rateLimit middleware for that
//            region (429 / 401 / headers) ─▶ origin
import type { Context, MiddlewareHandler } from "hono";
import { Hono } from "hono/tiny";
import { Concurrency } from "../../engine/concurrency.js";
import { Limiter, type LimiterOptions } from "../../engine/limiter.js";
import type { RestConnection } from "../../engine/rest.js";
import { failureLog } from "../../http/error-log.js";
import { PROBLEM_JSON } from "../../http/headers.js";
import {
  compileRoutes,
  formMethods,
  METHOD_OVERRIDES,
  normalizePath,
  type RouteTable,
  requestedMethods,
} from "../../http/routes.js";
import { usageLog } from "../../http/usage.js";
import { type ConcurrencyVariables, concurrencyLimit } from "../hono/concurrency.js";
import { type RateLimitVariables, rateLimit } from "../hono/index.js";
import type { IpAddress } from "../ip.js";
import { type AdminApp, type AdminRoute, adminApp, underAdmin } from "./admin.js";
import { type EdgelimitConfig, parseConfig, type RouteConfig } from "./config.js";
import { clientIp, identify, type KeySpec } from "./identity.js";
import { forward } from "./proxy.js";
import { type RegionsConfig, type RequestLocation, regionOf } from "./regions.js";

/** The Worker's bindings. */
export interface Env {
  /** The config: a JSON string (or the same document as a wrangler [vars] table). */
  EDGELIMIT_CONFIG?: unknown;
  UPSTASH_REDIS_REST_URL?: string;
  UPSTASH_REDIS_REST_TOKEN?: string;
  /** Turns the admin API on (under the config's adminPath): the bearer token it asks for. */
  EDGELIMIT_ADMIN_TOKEN?: string;
  /** The regional databases' tokens, each under the name its `tokenSecret` gives. */
  readonly [secret: string]: unknown;
}

interface LimitedRoute extends AdminRoute {
  /**
   * The route's rateLimit middleware for a region (`undefined`: home alone), each over a Limiter built
   * once per isolate.
   */
  readonly limit: (region: string | undefined) => MiddlewareHandler<AppEnv>;
}

type Setup =
  | {
      readonly ok: true;
      readonly config: EdgelimitConfig;
      readonly routes: readonly LimitedRoute[];
      /** The routes compiled for matching, once with the setup. */
      readonly table: RouteTable<LimitedRoute>;
      /** The admin API and the ops page: a sub-app the requests under adminPath are handed to. */
      readonly admin: AdminApp;
    }
  | { readonly ok: false; readonly errors: readonly string[] };

type AppEnv = {
  Bindings: Env;
  Variables: {
    config: EdgelimitConfig;
    ip: IpAddress | undefined;
    path: string;
    /** The origin's answer, already on its way (shadow routes ask the origin and Redis at once). */
    upstream: Promise<Response> | undefined;
  } & RateLimitVariables &
    ConcurrencyVariables;
};

// Parsed configs and the Limiters built from them, per isolate. Keyed by everything they are built
// from, so a test (or a `wrangler dev` reload) that changes the env gets a fresh setup, and a steady
// deployment parses its config once. Bounded: envs are few, but nothing here may grow without limit.
const setups = new Map<string, Setup>();
/** Redis failures of every route in this isolate: the first logged in full, then one summary per 60 s. */
const failures = failureLog({ interval: 60_000 });
/** Responses of settle routes without a usable cost, and failed settles: one line, then one per 60 s. */
const unsettled = usageLog({ interval: 60_000 });
const MAX_SETUPS = 8;

function setupFor(env: Env): Setup {
  const raw = env.EDGELIMIT_CONFIG;
  const url = env.UPSTASH_REDIS_REST_URL;
  const token = env.UPSTASH_REDIS_REST_TOKEN;
  const rawText = typeof raw === "string" ? raw : JSON.stringify(raw ?? null);
  // every string binding: the regional tokens' names are only known once the config is parsed
  const strings = Object.entries(env)
    .filter(([, value]) => typeof value === "string")
    .sort(([a], [b]) => (a < b ? -1 : 1));
  const cacheKey = JSON.stringify([rawText, url ?? null, token ?? null, strings]);
  let setup = setups.get(cacheKey);
  if (setup === undefined) {
    setup = buildSetup(raw, url, token, env);
    if (setups.size >= MAX_SETUPS) setups.delete(setups.keys().next().value as string);
    setups.set(cacheKey, setup);
  }
  return setup;
}

function buildSetup(raw: unknown, url: string | undefined, token: string | undefined, env: Env): Setup {
  const errors: string[] = [];
  if (raw === undefined || raw === "") {
    errors.push("EDGELIMIT_CONFIG is not set: put the JSON config under [vars] in wrangler.toml");
  }
  // Name the variable, never its value: these messages are logged.
  if (!url) {
    errors.push("UPSTASH_REDIS_REST_URL is not set: npx wrangler secret put UPSTASH_REDIS_REST_URL");
  } else if (!/^https?:\/\/[^\s]+$/.test(url)) {
    errors.push("UPSTASH_REDIS_REST_URL is not an http(s) URL");
  }
  if (!token) {
    errors.push("UPSTASH_REDIS_REST_TOKEN is not set: npx wrangler secret put UPSTASH_REDIS_REST_TOKEN");
  }
  const parsed = raw === undefined || raw === "" ? undefined : parseConfig(raw);
  if (parsed && !parsed.ok) errors.push(...parsed.errors);
  const regional = parsed?.ok ? regionalConnections(parsed.config.regions, env, errors) : new Map();
  if (errors.length > 0 || !parsed?.ok) return { ok: false, errors };
  const { config } = parsed;
  try {
    // the Upstash REST protocol, spoken by the engine itself: no Redis client library in the bundle
    const redis: RestConnection = { url: url!, token: token! };
    const routes = config.routes.map((route) => limitedRoute(route, config, redis, regional));
    const admin = adminApp({
      token: typeof env.EDGELIMIT_ADMIN_TOKEN === "string" ? env.EDGELIMIT_ADMIN_TOKEN : undefined,
      adminPath: config.adminPath,
      routes,
      analytics: config.analytics,
      // its Redis: wrong tokens are counted per address there, and ended sessions kept
      redis,
      prefix: config.prefix,
    });
    return { ok: true, config, routes, table: compileRoutes(routes), admin };
  } catch (error) {
    return { ok: false, errors: [`edgelimit could not start: ${(error as Error).message}`] };
  }
}

/**
 * One connection per regional database (one transport and breaker each, shared by every route), its
 * token read from the secret its tokenSecret names; a missing secret is reported by name.
 */
function regionalConnections(
  regions: RegionsConfig | undefined,
  env: Env,
  errors: string[],
): Map<string, RestConnection> {
  const connections = new Map<string, RestConnection>();
  for (const [name, { url, tokenSecret }] of Object.entries(regions?.databases ?? {})) {
    const token = env[tokenSecret];
    if (typeof token !== "string" || token === "") {
      errors.push(
        `${tokenSecret} is not set (regions.databases.${name}.tokenSecret): npx wrangler secret put ${tokenSecret}`,
      );
    } else connections.set(name, { url, token });
  }
  return connections;
}

function limitedRoute(
  route: RouteConfig,
  config: EdgelimitConfig,
  redis: RestConnection,
  regional: ReadonlyMap<string, RestConnection>,
): LimitedRoute {
  // In the Worker a plan is reached only through an override: a request never chooses its plan.
  const options: LimiterOptions = {
    redis,
    prefix: config.prefix,
    rules: route.rules,
    ...(route.timeout === undefined ? {} : { timeout: route.timeout }),
    ...(route.onError === undefined ? {} : { onError: route.onError }),
    ...(route.lease === undefined ? {} : { lease: route.lease }),
    ...(route.plans === undefined ? {} : { plans: route.plans }),
    ...(route.overrides === undefined ? {} : { overrides: route.overrides }),
    // Each route's counts under its own name; flushed through the decision's waitUntil (rateLimit passes it).
    ...(config.analytics === undefined ? {} : { analytics: { ...config.analytics, name: route.name } }),
  };
  const limiter = new Limiter(options);
  // Counters are namespaced by route (route names hold no ":"), so two routes never share a count.
  const identifier = (spec: KeySpec, c: Context<AppEnv>) => {
    const id = identify(spec, c.req.raw, c.get("ip"), c.get("path"));
    return id === undefined ? undefined : `${route.name}:${id}`;
  };
  // the route's key: its slots in flight, and its rules unless they count by keys of their own
  const key = (c: Context<AppEnv>) => identifier(route.key, c);
  // Every key the rules count by, each read once, into one record decided in one call; a field left
  // undefined (no such header) is a missing key, as the route's own is.
  const fields = Object.entries(route.identifiers);
  const identity =
    fields.length === 1 && fields[0]![0] === "id"
      ? key
      : (c: Context<AppEnv>) =>
          Object.fromEntries(fields.map(([field, spec]) => [field, identifier(spec, c)]));
  const middleware = (limiter: Limiter) =>
    rateLimit<AppEnv>({
      limiter,
      key: identity,
      cost: () => route.cost,
      mode: route.mode,
      legacyHeaders: config.legacyHeaders,
      log: (event) => console.warn(`${event.message} [route "${route.name}"]`),
      failures,
      // the origin's response states the real cost: the route's cost is the reservation
      ...(route.settle === undefined ? {} : { settle: route.settle, usageLog: unsettled }),
    });
  const home = middleware(limiter);
  // One Limiter per region, built with the setup (once per isolate): home holds the truth, the
  // region's database the pool. The admin API reads and writes overrides at home (`limiter`).
  const pool = route.pool ?? config.regions?.pool;
  const byRegion = new Map<string, MiddlewareHandler<AppEnv>>();
  if (pool !== undefined && pool !== false) {
    for (const [name, nearby] of regional) {
      byRegion.set(name, middleware(new Limiter({ ...options, region: { redis: nearby, pool } })));
    }
  }
  const rateLimited = (region: string | undefined) =>
    (region === undefined ? undefined : byRegion.get(region)) ?? home;
  if (route.concurrency === undefined) return { ...route, limiter, limit: rateLimited };
  // Rate rules first (a request refused by them takes no slot), then a slot held until the response
  // body has been streamed to the client or the client went away.
  const inFlight = concurrencyLimit<AppEnv>({
    concurrency: new Concurrency({
      redis,
      prefix: config.prefix,
      limit: route.concurrency.limit,
      ttl: route.concurrency.ttl,
      ...(route.timeout === undefined ? {} : { timeout: route.timeout }),
      ...(route.onError === undefined ? {} : { onError: route.onError }),
    }),
    key,
    mode: route.mode,
    log: (event) => console.warn(`${event.message} [route "${route.name}"]`),
  });
  const limit = (region: string | undefined): MiddlewareHandler<AppEnv> => {
    const limited = rateLimited(region);
    return (c, next) =>
      limited(c, async () => {
        const refusal = await inFlight(c, next);
        if (refusal) c.res = refusal;
      });
  };
  return { ...route, limiter, limit };
}

// The origin's answer; a network failure on the way there (DNS, refused, reset) is a 502, not a crash.
async function origin(c: Context<AppEnv>): Promise<Response> {
  try {
    return await (c.get("upstream") ?? toOrigin(c.req.raw, c.get("config")));
  } catch (error) {
    console.error(
      `edgelimit: ${c.req.method} ${c.req.path}: the origin did not answer: ${(error as Error).message}`,
    );
    return problem(502, "Bad Gateway", "The origin could not be reached.");
  }
}

/**
 * Forwards `request` to the config's origin, without the fields any route reads a cost from: only the
 * origin may write those, so an origin that echoes request headers cannot be made to state a client's.
 */
function toOrigin(request: Request, config: EdgelimitConfig): Promise<Response> {
  const drop = config.routes.flatMap(({ settle }) => (settle && "header" in settle ? [settle.header] : []));
  return forward(request, config.origin, { drop, keep: readFields(config) });
}

const fieldsRead = new WeakMap<EdgelimitConfig, ReadonlySet<string>>();

/**
 * The request fields a decision under `config` may read: every route's key headers (Cookie for a
 * cookie key), Authorization, Content-Type and the method overrides. A client's Connection cannot
 * strip them on the way to the origin (a key counted here, then stripped, would let the origin fall
 * back to another, uncounted one).
 */
function readFields(config: EdgelimitConfig): ReadonlySet<string> {
  let fields = fieldsRead.get(config);
  if (fields === undefined) {
    const read = new Set(["cookie", "authorization", "content-type", ...METHOD_OVERRIDES]);
    for (const route of config.routes) {
      for (const spec of [route.key, ...Object.values(route.identifiers)]) {
        if (spec.kind === "header") read.add(spec.name);
      }
    }
    fields = read;
    fieldsRead.set(config, fields);
  }
  return fields;
}

function problem(status: number, title: string, detail: string): Response {
  return new Response(JSON.stringify({ type: "about:blank", title, status, detail }), {
    status,
    headers: { "Content-Type": PROBLEM_JSON, "Cache-Control": "no-store" },
  });
}

const app = new Hono<AppEnv>();

app.use(async (c, next) => {
  const setup = setupFor(c.env ?? {});
  if (!setup.ok) {
    // Every request, not once per isolate: whoever tails the logs after a bad deploy must see why.
    console.error(`edgelimit is misconfigured:\n  ${setup.errors.join("\n  ")}`);
    return c.text("edgelimit is misconfigured", 500);
  }
  const { config, table } = setup;
  const ip = clientIp(c.req.raw.headers);
  // Deny wins over allow: an address in both is refused.
  if (ip && config.deny.has(ip)) {
    return problem(403, "Forbidden", "Requests from this address are not accepted.");
  }
  const path = normalizePath(new URL(c.req.url).pathname);
  const adminPath = config.adminPath;
  // the admin sub-app, mounted at the admin path (matched normalized, as every route is)
  if (path === adminPath || path.startsWith(`${adminPath}/`)) {
    return setup.admin.fetch(underAdmin(c.req.raw, adminPath));
  }
  c.set("config", config);
  c.set("ip", ip);
  c.set("path", path);
  // A method override (X-HTTP-Method-Override: DELETE, _method=delete) counts as the method it asks
  // for: a request naming several is counted by the route of each, in turn.
  const methods = requestedMethods(c.req.raw, table.methods);
  // a POST form's _method is read only where it could add a route: a method-limited one on this path
  if (c.req.method === "POST" && table.match([...table.methods], path).some(({ match }) => match.methods)) {
    for (const method of await formMethods(c.req.raw, table.methods)) {
      if (!methods.includes(method)) methods.push(method);
    }
  }
  const [route, ...others] = table.match(methods, path);
  if (route === undefined || (ip && config.allow.has(ip))) return next();
  if (route.mode === "shadow" && others.every((other) => other.mode === "shadow")) {
    // The decision changes nothing about the response but its headers: ask Redis and the origin at once.
    const upstream = toOrigin(c.req.raw, config);
    upstream.catch(() => {}); // awaited by the handler; this only stops an "unhandled rejection" report
    c.set("upstream", upstream);
  }
  const region = config.regions && regionOf(config.regions, (c.req.raw as { cf?: RequestLocation }).cf);
  const inner = others.reduceRight<() => Promise<void>>(
    (then, other) => async () => {
      const refusal = await other.limit(region)(c, then);
      if (refusal) c.res = refusal;
    },
    next,
  );
  return route.limit(region)(c, inner);
});

app.all("*", (c) => origin(c));

app.onError((error, c) => {
  console.error(`edgelimit: ${c.req.method} ${c.req.path} failed: ${error.stack ?? error.message}`);
  return problem(500, "Internal Server Error", "edgelimit failed to handle this request.");
});

/**
 * The Worker: `export default` of the module wrangler.toml points at.
 *
 * @example
 * // wrangler.toml: main = "src/adapters/worker/index.ts"; [vars] EDGELIMIT_CONFIG = '{"origin": "...", "routes": [...]}'
 * const response = await worker.fetch(request, env, ctx);
 */
export default app;
