// The Worker's regional databases: which one a request's location picks, and the pool each route keeps
// there (the Limiter's `region: { redis, pool }`, the pool checked by the Limiter's own check). Home
// stays UPSTASH_REDIS_REST_URL; a region adds a database near some of Cloudflare's locations, chosen
// from `request.cf` (its colo first, then its continent), with a default for the rest. Checked here,
// reported by config.ts at each field's path.
//
// "regions": {
//   "pool": { "max": 500, "ttl": "5s" },        required: what each route may hold in a region's database
//   "default": "eu",                            optional: the region of a request no match claims;
//                                               absent: such a request goes to home alone
//   "databases": {                              required, at least one, by name (as route names)
//     "eu": { "url": "https://eu.example.com",  the database's REST URL (http or https, no credentials)
//             "tokenSecret": "EDGELIMIT_REGION_EU_TOKEN",   the secret that holds its token
//             "match": { "continent": ["EU"], "colo": ["FRA"] } }   at least one list; a colo wins over a
//                                               continent; optional for the default database
//   }
// }
import { NAME } from "../../engine/algorithms/index.js";
import { describe } from "../../engine/duration.js";
import { checkLease } from "../../engine/leases.js";
import type { PoolConfig } from "../../engine/region.js";
import { type Issue, under } from "../../engine/validate.js";

/** Where a request is, as Cloudflare says in `request.cf`. */
export interface RequestLocation {
  /** "EU", "NA", ... */
  readonly continent?: unknown;
  /** The data center's IATA code: "FRA", "AMS", ... */
  readonly colo?: unknown;
}

/** One regional database. */
export interface RegionDatabase {
  readonly url: string;
  /** The name of the env var (a wrangler secret) that holds the database's token. */
  readonly tokenSecret: string;
  readonly match: { readonly continent?: readonly string[]; readonly colo?: readonly string[] };
}

/** The `regions` block, validated, with the lookup tables it implies. */
export interface RegionsConfig {
  readonly pool: PoolConfig;
  readonly default?: string;
  readonly databases: Readonly<Record<string, RegionDatabase>>;
  /** colo → region name. */
  readonly colos: ReadonlyMap<string, string>;
  /** continent → region name. */
  readonly continents: ReadonlyMap<string, string>;
}

/** Cloudflare's `request.cf.continent` values (T1: the Tor network). */
export const CONTINENTS = ["AF", "AN", "AS", "EU", "NA", "OC", "SA", "T1"] as const;
const COLO = /^[A-Z]{3}$/;
const SECRET = /^[A-Za-z_][A-Za-z0-9_]*$/;

const isObject = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === "object" && !Array.isArray(value);

function unknownFields(value: Record<string, unknown>, fields: readonly string[], at: (string | number)[]) {
  return Object.keys(value)
    .filter((field) => !fields.includes(field))
    .map((field) => ({ path: [...at, field], message: `is not a known field; use ${fields.join(", ")}` }));
}

function checkUrl(value: unknown): string | undefined {
  if (typeof value !== "string")
    return `must be the database's REST URL such as "https://eu1-example.upstash.io", got ${describe(value)}`;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return `${JSON.stringify(value)} is not a URL; use the database's REST URL such as "https://eu1-example.upstash.io"`;
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") {
    return `must use http or https, got ${JSON.stringify(url.protocol)}`;
  }
  if (url.username || url.password)
    return "must not carry credentials: put the token in the tokenSecret's secret";
  return undefined;
}

/**
 * Checks the `regions` block; each issue's path starts inside it (`databases.eu.match.colo[1]`).
 *
 * @example
 * checkRegions({ pool: { max: 500, ttl: "5s" }, databases: { eu: { url, tokenSecret: "EU_TOKEN", match: { continent: ["EU"] } } } });
 */
export function checkRegions(
  value: unknown,
): { readonly regions: RegionsConfig; readonly issues?: undefined } | { readonly issues: readonly Issue[] } {
  if (!isObject(value)) {
    return {
      issues: [
        {
          path: [],
          message: `must be an object such as { "pool": { ... }, "databases": { ... } }, got ${describe(value)}`,
        },
      ],
    };
  }
  const issues: Issue[] = unknownFields(value, ["pool", "default", "databases"], []);
  // the Limiter's own check of its region.pool
  const pool = value.pool === undefined ? undefined : checkLease(value.pool);
  if (pool === undefined)
    issues.push({ path: ["pool"], message: 'is required, e.g. { "max": 500, "ttl": "5s" }' });
  else issues.push(...under(["pool"], pool.issues ?? []));

  const fallback = value.default;
  const databases: Record<string, RegionDatabase> = {};
  const colos = new Map<string, string>();
  const continents = new Map<string, string>();
  const raw = value.databases;
  if (!isObject(raw) || Object.keys(raw).length === 0) {
    issues.push({
      path: ["databases"],
      message: `must name at least one regional database, e.g. { "eu": { "url": ..., "tokenSecret": ..., "match": { "continent": ["EU"] } } }${isObject(raw) ? "" : `, got ${describe(raw)}`}`,
    });
  } else {
    for (const [name, database] of Object.entries(raw)) {
      const at = ["databases", name];
      if (!NAME.test(name)) {
        issues.push({ path: at, message: "a region's name must be 1-64 characters of A-Z a-z 0-9 _ . -" });
        continue;
      }
      if (!isObject(database)) {
        issues.push({
          path: at,
          message: `must be an object such as { "url", "tokenSecret", "match" }, got ${describe(database)}`,
        });
        continue;
      }
      const before = issues.length;
      issues.push(...unknownFields(database, ["url", "tokenSecret", "match"], at));
      const urlProblem = checkUrl(database.url);
      if (database.url === undefined) issues.push({ path: [...at, "url"], message: "is required" });
      else if (urlProblem) issues.push({ path: [...at, "url"], message: urlProblem });
      const secret = database.tokenSecret;
      if (secret === undefined) issues.push({ path: [...at, "tokenSecret"], message: "is required" });
      else if (typeof secret !== "string" || !SECRET.test(secret)) {
        issues.push({
          path: [...at, "tokenSecret"],
          message: `must be the name of the secret that holds the token, such as "EDGELIMIT_REGION_EU_TOKEN", got ${describe(secret)}`,
        });
      }
      // the default database may claim no place of its own: it answers every request no match claims
      const match =
        database.match === undefined && fallback === name
          ? {}
          : matchOf(database.match, name, [...at, "match"], colos, continents, issues);
      if (issues.length === before && match !== undefined) {
        databases[name] = { url: database.url as string, tokenSecret: secret as string, match };
      }
    }
  }

  if (fallback !== undefined) {
    const names = isObject(raw) ? Object.keys(raw) : [];
    if (typeof fallback !== "string" || !names.includes(fallback)) {
      issues.push({
        path: ["default"],
        message: `must name one of the databases (${names.map((n) => JSON.stringify(n)).join(", ") || "none"}), got ${describe(fallback)}`,
      });
    }
  }
  if (issues.length > 0 || pool === undefined || pool.issues) return { issues };
  return {
    regions: {
      pool: pool.lease,
      ...(fallback === undefined ? {} : { default: fallback as string }),
      databases,
      colos,
      continents,
    },
  };
}

// A database's match: at least one of continent / colo, each a non-empty list, no place claimed twice.
function matchOf(
  value: unknown,
  name: string,
  at: (string | number)[],
  colos: Map<string, string>,
  continents: Map<string, string>,
  issues: Issue[],
): RegionDatabase["match"] | undefined {
  if (value === undefined) {
    issues.push({
      path: at,
      message:
        'is required (unless this database is the regions\' "default"), e.g. { "continent": ["EU"] } or { "colo": ["FRA", "AMS"] }',
    });
    return undefined;
  }
  if (!isObject(value)) {
    issues.push({
      path: at,
      message: `must be { "continent": [...] }, { "colo": [...] } or both, got ${describe(value)}`,
    });
    return undefined;
  }
  const before = issues.length;
  issues.push(...unknownFields(value, ["continent", "colo"], at));
  if (value.continent === undefined && value.colo === undefined) {
    issues.push({ path: at, message: 'must list "continent", "colo" or both' });
  }
  const lists: { continent?: string[]; colo?: string[] } = {};
  for (const field of ["continent", "colo"] as const) {
    const list = value[field];
    if (list === undefined) continue;
    const example = field === "continent" ? '["EU", "AF"]' : '["FRA", "AMS"]';
    if (!Array.isArray(list) || list.length === 0) {
      issues.push({
        path: [...at, field],
        message: `must be a non-empty list such as ${example}, got ${describe(list)}`,
      });
      continue;
    }
    const claimed = field === "continent" ? continents : colos;
    lists[field] = [];
    list.forEach((entry, i) => {
      const code = typeof entry === "string" ? entry.toUpperCase() : entry;
      const valid =
        typeof code === "string" &&
        (field === "continent" ? (CONTINENTS as readonly string[]).includes(code) : COLO.test(code));
      if (!valid) {
        const what =
          field === "continent"
            ? `one of ${CONTINENTS.join(", ")} (request.cf.continent)`
            : 'a data center\'s three-letter code such as "FRA" (request.cf.colo)';
        issues.push({ path: [...at, field, i], message: `must be ${what}, got ${describe(entry)}` });
        return;
      }
      const owner = claimed.get(code as string);
      if (owner !== undefined) {
        const where = owner === name ? "earlier in this list" : `by databases.${owner}`;
        issues.push({
          path: [...at, field, i],
          message: `${JSON.stringify(code)} is already claimed ${where}`,
        });
        return;
      }
      claimed.set(code as string, name);
      lists[field]!.push(code as string);
    });
  }
  return issues.length === before ? lists : undefined;
}

/**
 * The region a request belongs to: the database that claims its colo, else its continent, else the
 * default; `undefined` sends it to home alone.
 *
 * @example
 * regionOf(config.regions, request.cf); // "eu" for { continent: "EU", colo: "FRA" }
 */
export function regionOf(regions: RegionsConfig, location: RequestLocation | undefined): string | undefined {
  const colo = location?.colo;
  const continent = location?.continent;
  return (
    (typeof colo === "string" ? regions.colos.get(colo.toUpperCase()) : undefined) ??
    (typeof continent === "string" ? regions.continents.get(continent.toUpperCase()) : undefined) ??
    regions.default
  );
}
