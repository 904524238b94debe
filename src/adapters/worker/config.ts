// The Worker's configuration: one JSON document (the EDGELIMIT_CONFIG var), validated in full before any
// request is served. Every problem is reported at once, each with the path of the field at fault
// (`routes[1].rules.burst.capacity: must be a positive whole number, got 0`), so one deploy fixes all.
// Unknown fields are errors too: a misspelt option must not be silently ignored. What a route hands its
// Limiter (rules, plans, lease, overrides, analytics, a regional pool) is checked by the engine's own
// checks (checkRule, checkPlans, checkLease, checkOverrides, checkAnalytics), their issues reported
// here under the config's paths: one check and one message, in the library and in the Worker alike.
//
// {
//   "origin": "https://api.example.com",      required; scheme + host (+ port), no path
//   "routes": [                                required (may be empty); first match applies
//     { "name": "login",                       required, unique, 1-64 of A-Z a-z 0-9 _ . -
//       "match": {                             optional; absent matches every request
//         "path": "/login",                    "/exact", "/users/:id", "/api/*" (also /api), "/*"
//         "methods": ["POST"] },               optional; any method when absent; GET covers HEAD
//       "key": "ip",                           "ip" (CF-Connecting-IP; IPv6 per /64), "header:NAME",
//                                              "cookie:NAME", "path", "global"
//       "rules": { "perMinute": { "algorithm": "gcra", "limit": 5, "period": "1m" } },
//                                              required, at least one; as the rule constructors take them,
//                                              plus "by": a key as "key" takes them, the identifier that
//                                              rule counts by (the route's "key" when absent)
//       "mode": "enforce",                     or "shadow" (forward, mark EdgeLimit-Shadow, log)
//       "cost": 1,                             units per request
//       "timeout": "1s",                       how long a decision waits for Redis (Limiter default 1000 ms)
//       "onError": "allow",                    or "deny": the decision when Redis fails or times out
//       "concurrency": { "limit": 10, "ttl": "30s" },
//                                              optional: at most 10 requests of one key in flight at once
//       "lease": { "max": 50, "ttl": "1s" },   optional: answer hot identifiers from units held per isolate
//       "plans": { "pro": { "perMinute": { "limit": 1000 } } },
//                                              optional: what each plan changes in the rules; reached only
//                                              through an override (a request never chooses its plan)
//       "overrides": true,                     or { "maxStale": "1s" }: per-key overrides, stored in Redis
//       "settle": { "header": "x-usage" } }    or { "usage": "openai" }: charge what the response says the
//                                              request cost ("cost" is then the reservation); the header
//                                              is removed unless "expose": true
//       "pool": { "max": 100, "ttl": "2s" } }  optional: this route's regional pool instead of regions.pool;
//                                              false keeps the route on home alone
//   ],
//   "regions": { "pool": ..., "databases": ... },  optional: databases near some locations (regions.ts)
//   "adminPath": "/_edgelimit",                where the admin API answers (when EDGELIMIT_ADMIN_TOKEN is set)
//   "allow": ["203.0.113.7", "2001:db8::/32"], never limited (IPs and CIDRs, v4 and v6)
//   "deny": ["198.51.100.0/24"],               refused with 403 on every path; deny wins over allow
//   "prefix": "edgelimit",                     Redis key namespace
//   "legacyHeaders": false,                    also send X-RateLimit-Limit / -Remaining / -Reset
//   "analytics": true                          or { "flushEvery": "5s", "top": 20, "retention": "7d" }:
//                                              each route counts its decisions (the ops page shows them)
// }
import * as v from "valibot";
import {
  checkCost,
  checkPlans,
  checkRule,
  NAME,
  type PlanConfig,
  type Rule,
  type RuleConfig,
} from "../../engine/algorithms/index.js";
import { checkAnalytics, type AnalyticsConfig as EngineAnalytics } from "../../engine/analytics.js";
import { describe, readDuration } from "../../engine/duration.js";
import { PREFIX } from "../../engine/keys.js";
import { checkLease, type LeaseConfig } from "../../engine/leases.js";
import { checkOverrides, type OverridesConfig } from "../../engine/overrides.js";
import type { PoolConfig } from "../../engine/region.js";
import { sha256Hex } from "../../engine/sha256.js";
import { type Issue, MAX_TIMER_MS } from "../../engine/validate.js";
import { parsePathPattern, type RouteMatch } from "../../http/routes.js";
import type { UsageSource } from "../../http/usage.js";
import { IpSet, parseRange } from "../ip.js";
import { checkUsageSource } from "../usage-source.js";
import { type KeySpec, keySpecText, parseKeySpec } from "./identity.js";
import { checkRegions, type RegionsConfig } from "./regions.js";

/** One route: the requests it matches, who they are counted by, and the rules they are held to. */
export interface RouteConfig {
  /** 1-64 of A-Z a-z 0-9 _ . -; unique. Namespaces the route's counters and names it in logs. */
  readonly name: string;
  readonly match: RouteMatch;
  readonly key: KeySpec;
  /**
   * Validated rule objects, by name (as `compileRule` accepts them). A rule with a `"by"` in the config
   * carries `by`: the field of `identifiers` it is keyed by; the others are keyed by "id", the route's key.
   */
  readonly rules: Readonly<Record<string, RuleConfig>>;
  /**
   * What a request is counted under, by field of the identifier record its Limiter decides on: "id" is
   * the route's `key` (when a rule counts by it), any other field a rule's `"by"`. Each is read once a request.
   */
  readonly identifiers: Readonly<Record<string, KeySpec>>;
  /** "enforce" answers 429 when denied; "shadow" forwards anyway and reports what it would have done. */
  readonly mode: "enforce" | "shadow";
  /** Units each request takes (default 1). */
  readonly cost: number;
  /** Ms a decision waits for Redis (the Limiter's default when absent). */
  readonly timeout?: number;
  /** What a decision is when Redis fails or times out (the Limiter's default, "allow", when absent). */
  readonly onError?: "allow" | "deny";
  /** Leases for hot identifiers (the Limiter's `lease` option; off when absent). */
  readonly lease?: LeaseConfig;
  /** At most `limit` requests per key in flight, each slot held at most `ttl` ms (off when absent). */
  readonly concurrency?: { readonly limit: number; readonly ttl: number };
  /** What each plan changes in the rules (the Limiter's `plans`); none when absent. */
  readonly plans?: Readonly<Record<string, PlanConfig>>;
  /** Per-key overrides stored in Redis (the Limiter's `overrides`, maxStale in ms); off when absent. */
  readonly overrides?: OverridesConfig;
  /** Where the response states the request's real cost; `cost` is then the reservation. Off when absent. */
  readonly settle?: UsageSource;
  /** This route's regional pool (regions.pool when absent), or false: home alone in every region. */
  readonly pool?: PoolConfig | false;
}

/** The whole configuration, validated. */
export interface EdgelimitConfig {
  /** Where requests go: scheme, host and optional port, e.g. "https://api.example.com". */
  readonly origin: string;
  /** Tried in order; the first that matches applies. A request matching none passes unlimited. */
  readonly routes: readonly RouteConfig[];
  /** Clients never limited. */
  readonly allow: IpSet;
  /** Clients refused with 403 before any route applies. */
  readonly deny: IpSet;
  /** Redis key namespace (default "edgelimit"). */
  readonly prefix: string;
  /** Also send X-RateLimit-Limit / -Remaining / -Reset (default false). */
  readonly legacyHeaders: boolean;
  /** Where the admin API answers (default "/_edgelimit"): lowercase, starts with "/", no trailing "/". */
  readonly adminPath: string;
  /** Decision analytics for every route (each Limiter's `analytics`, named by its route); off when absent. */
  readonly analytics?: AnalyticsConfig;
  /** Regional databases and the pool each route keeps in them; absent: every decision goes to home. */
  readonly regions?: RegionsConfig;
}

/**
 * The config's `analytics`: the fields given, durations in ms; one left out is the Limiter's default.
 * Each route's Limiter names its counts by the route.
 */
export type AnalyticsConfig = Partial<Omit<EngineAnalytics, "name">>;

/** The outcome of `parseConfig`: the config, or every problem found, each as "path: message". */
export type ConfigResult =
  | { readonly ok: true; readonly config: EdgelimitConfig }
  | { readonly ok: false; readonly errors: readonly string[] };

const METHOD = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

type Message = (issue: v.BaseIssue<unknown>) => string;
const got = (issue: v.BaseIssue<unknown>) => `, got ${describe(issue.input)}`;

// One message for every way a strict object can be wrong: not an object, a field missing, a field unknown.
const objectMessage =
  (what: string, fields: readonly string[]): Message =>
  (issue) => {
    if (!issue.path) return `must be ${what}${got(issue)}`;
    if (issue.expected === "never") return `is not a known field; use ${fields.join(", ")}`;
    return "is required";
  };

/**
 * A strict object of `entries`. `renamed` maps a field's old name to the refusal that names its new one:
 * an old config says what to change rather than that a field is unknown.
 */
function strict<const E extends v.ObjectEntries>(
  what: string,
  entries: E,
  renamed: Readonly<Record<string, string>> = {},
) {
  const message = objectMessage(what, Object.keys(entries));
  const old = Object.fromEntries(
    Object.entries(renamed).map(([field, refusal]) => [
      field,
      v.optional(v.custom<never>(() => false, refusal)),
    ]),
  );
  // valibot takes an array for an object; a list where one object belongs is a mistake worth naming.
  return v.pipe(
    v.custom<unknown>((input) => !Array.isArray(input), message),
    v.strictObject({ ...old, ...entries } as E, message),
  );
}

/** Runs a parser that throws an Error saying what is wrong, and reports that as an issue here. */
function parsed<I, O>(parse: (input: I) => O) {
  return v.rawTransform<I, O>(({ dataset, addIssue, NEVER }) => {
    try {
      return parse(dataset.value);
    } catch (error) {
      addIssue({ message: (error as Error).message });
      return NEVER;
    }
  });
}

// Valibot's path to `keys` inside `input`, each step with the value found there.
function pathIn(input: unknown, keys: readonly (string | number)[]): v.IssuePathItem[] {
  const path: v.IssuePathItem[] = [];
  let at = input;
  for (const key of keys) {
    const value = at !== null && typeof at === "object" ? (at as Record<string, unknown>)[key] : undefined;
    path.push({ type: "unknown", origin: "value", input: at, key, value });
    at = value;
  }
  return path;
}

/** Runs an engine check that reports issues, and reports each here at its path inside the value checked. */
function checked<I, O>(check: (input: I) => { value: O } | { issues: readonly Issue[] }) {
  return v.rawTransform<I, O>(({ dataset, addIssue, NEVER }) => {
    const result = check(dataset.value);
    if ("value" in result) return result.value;
    for (const { path, message } of result.issues) {
      const items = pathIn(dataset.value, path);
      addIssue({
        message,
        path: items.length > 0 ? (items as [v.IssuePathItem, ...v.IssuePathItem[]]) : undefined,
      });
    }
    return NEVER;
  });
}

const text = (what: string) => v.string((issue) => `must be ${what}${got(issue)}`);

const positiveWhole = v.pipe(
  v.number((issue) => `must be a positive whole number${got(issue)}`),
  v.integer((issue) => `must be a positive whole number${got(issue)}`),
  v.minValue(1, (issue) => `must be a positive whole number${got(issue)}`),
);

const duration = v.pipe(
  v.union(
    [v.number(), v.string()],
    (issue) => `must be a duration such as 500, "500ms" or "2s"${got(issue)}`,
  ),
  checked<number | string, number>((value) => {
    const read = readDuration(value);
    return "ms" in read ? { value: read.ms } : { issues: [{ path: [], message: read.message }] };
  }),
);

// A duration a timer waits out (a timeout, a slot's ttl): at most what setTimeout holds.
const timerDuration = v.pipe(
  duration,
  v.maxValue(MAX_TIMER_MS, (issue) => `must be at most ${MAX_TIMER_MS} ms (about 24.8 days)${got(issue)}`),
);

const origin = v.pipe(
  text('an http(s) origin such as "https://api.example.com"'),
  parsed((value: string) => {
    let url: URL;
    try {
      url = new URL(value);
    } catch {
      throw new Error(
        `${JSON.stringify(value)} is not a URL; use an origin such as "https://api.example.com"`,
      );
    }
    if (url.protocol !== "https:" && url.protocol !== "http:") {
      throw new Error(`must use http or https, got ${JSON.stringify(url.protocol)}`);
    }
    if (url.username || url.password) throw new Error("must not carry credentials");
    if (url.pathname !== "/" || url.search || url.hash) {
      throw new Error(
        `must be a scheme and host only (${JSON.stringify(url.origin)}); requests keep their own path and query`,
      );
    }
    return url.origin;
  }),
);

const ipRanges = v.array(
  v.pipe(
    text('an IP address or CIDR range such as "198.51.100.0/24"'),
    parsed((value: string) => {
      parseRange(value);
      return value;
    }),
  ),
  (issue) => `must be a list of IP addresses and CIDR ranges${got(issue)}`,
);

const match = strict("an object such as { path, methods }", {
  path: v.optional(v.pipe(text('a path pattern such as "/login" or "/api/*"'), parsed(parsePathPattern))),
  methods: v.optional(
    v.pipe(
      v.array(
        v.pipe(
          text('an HTTP method such as "POST"'),
          v.regex(METHOD, (issue) => `must be an HTTP method such as "POST"${got(issue)}`),
          v.toUpperCase(),
        ),
        (issue) => `must be a list of HTTP methods such as ["POST"]${got(issue)}`,
      ),
      v.minLength(1, "must list at least one method (leave methods out to match any)"),
      v.transform((methods) => {
        const set = new Set(methods);
        if (set.has("GET")) set.add("HEAD");
        return set as ReadonlySet<string>;
      }),
    ),
  ),
});

/** A rule as the config gives it: the engine's fields, and the key it counts by when not the route's. */
type ConfigRule = RuleConfig & { readonly by?: KeySpec };

/** A rule's fields for the engine's checks: all but the Worker's own `by` (a key, checked here). */
function engineFields(rule: unknown): RuleConfig {
  if (rule === null || typeof rule !== "object" || Array.isArray(rule)) return rule as RuleConfig;
  const { by: _by, ...fields } = rule as Record<string, unknown>;
  return fields as unknown as RuleConfig;
}

// A rule's "by": any key a route's "key" takes, as that key's own check says.
function byIssue(by: unknown): string | undefined {
  if (typeof by !== "string")
    return `must be a key such as "ip", "header:x-api-key" or "global", got ${describe(by)}`;
  try {
    parseKeySpec(by);
    return undefined;
  } catch (error) {
    return (error as Error).message;
  }
}

const rules = v.pipe(
  v.record(v.string(), v.unknown(), (issue) => `must be an object of named rules${got(issue)}`),
  checked<Record<string, unknown>, Record<string, ConfigRule>>((record) => {
    const entries = Object.entries(record);
    if (entries.length === 0) {
      return {
        issues: [
          { path: [], message: 'give at least one rule, e.g. { "perMinute": { "algorithm": "gcra", ... } }' },
        ],
      };
    }
    // checkRule's paths start at rules.<name> (a bad name's at rules alone); here each goes under the
    // rule's own entry of this route's rules.
    const issues = entries.flatMap(([name, rule]) => {
      const found = (checkRule(name, engineFields(rule)).issues ?? []).map((issue) => ({
        path: [name, ...issue.path.slice(2)],
        message: issue.message,
      }));
      const by = (rule as { by?: unknown } | null)?.by;
      const bad = by === undefined ? undefined : byIssue(by);
      return bad === undefined ? found : [...found, { path: [name, "by"], message: bad }];
    });
    if (issues.length > 0) return { issues };
    const value = Object.fromEntries(
      entries.map(([name, rule]) => {
        const { by } = rule as { by?: string };
        const fields = engineFields(rule);
        return [name, by === undefined ? fields : { ...fields, by: parseKeySpec(by) }];
      }),
    );
    return { value: value as Record<string, ConfigRule> };
  }),
);

// The Limiter's own check of `lease`, its issues under the route's lease field.
const lease = v.pipe(
  v.unknown(),
  checked<unknown, LeaseConfig>((value) => {
    const result = checkLease(value);
    return result.issues === undefined ? { value: result.lease } : { issues: result.issues };
  }),
);

// Plans are checked against the route's rules in routePlans (below); here only their shape.
const plansMessage: Message = (issue) =>
  `must be plans by name, e.g. { "pro": { "perMinute": { "limit": 1000 } } }${got(issue)}`;
const plans = v.pipe(
  v.custom<unknown>((input) => !Array.isArray(input), plansMessage),
  v.record(v.string(), v.unknown(), plansMessage),
);

// The Limiter's own checks of `overrides` and `analytics`, their issues under the config's fields.
const overrides = v.pipe(
  v.unknown(),
  checked<unknown, OverridesConfig | undefined>((value) => {
    const result = checkOverrides(value);
    return result.issues === undefined ? { value: result.overrides } : { issues: result.issues };
  }),
);

// Each route's counts go under the route's name, so the block takes no name of its own. The fields
// given come back in ms; those left out stay out (each Limiter fills in its defaults).
const analytics = v.pipe(
  v.unknown(),
  checked<unknown, AnalyticsConfig | undefined>((value) => {
    const result = checkAnalytics(value, { named: false });
    if (result.issues !== undefined) return { issues: result.issues };
    if (result.analytics === undefined) return { value: undefined };
    const given = value === true ? [] : Object.keys(value as object);
    const { analytics } = result;
    return {
      value: Object.fromEntries(given.map((field) => [field, analytics[field as keyof AnalyticsConfig]])),
    };
  }),
);

// The response's statement of what a request cost: a header or the OpenAI usage.
const settle = v.pipe(
  v.unknown(),
  checked<unknown, UsageSource>((value) => {
    const issues = checkUsageSource(value);
    return issues.length > 0 ? { issues } : { value: value as UsageSource };
  }),
);

// The regions block and a route's own pool: checked in regions.ts, reported at their paths here.
const regions = v.pipe(
  v.unknown(),
  checked<unknown, RegionsConfig>((value) => {
    const result = checkRegions(value);
    return result.issues === undefined ? { value: result.regions } : { issues: result.issues };
  }),
);
const routePool = v.pipe(
  v.unknown(),
  checked<unknown, PoolConfig | false>((value) => {
    if (value === false) return { value };
    const result = checkLease(value);
    return result.issues === undefined ? { value: result.lease } : { issues: result.issues };
  }),
);

// Lowercase (request paths are compared lowercased), segments of URL-safe characters, no "." or "..".
const ADMIN_PATH = /^(\/(?!\.\.?(?:\/|$))[a-z0-9_.~-]+)+$/;

const route = strict("a route object such as { name, match, key, rules }", {
  name: v.pipe(
    text("a route name"),
    v.regex(NAME, (issue) => `must be 1-64 characters of A-Z a-z 0-9 _ . -${got(issue)}`),
  ),
  match: v.optional(match, {}),
  key: v.pipe(text('a key such as "ip" or "header:x-api-key"'), parsed(parseKeySpec)),
  rules,
  mode: v.optional(
    v.picklist(["enforce", "shadow"], (issue) => `must be "enforce" or "shadow"${got(issue)}`),
    "enforce",
  ),
  cost: v.optional(positiveWhole, 1),
  timeout: v.optional(timerDuration),
  onError: v.optional(v.picklist(["allow", "deny"], (issue) => `must be "allow" or "deny"${got(issue)}`)),
  lease: v.optional(lease),
  concurrency: v.optional(
    strict(
      'an object such as { "limit": 10, "ttl": "30s" }',
      {
        limit: v.pipe(
          positiveWhole,
          v.maxValue(1_000_000, (issue) => `must be at most 1000000${got(issue)}`),
        ),
        ttl: timerDuration,
      },
      // "lease" means units held per isolate on a route (its "lease"); a slot's longest hold is a ttl
      { lease: 'renamed: use "ttl", the longest a slot is held (e.g. "ttl": "30s")' },
    ),
  ),
  plans: v.optional(plans),
  overrides: v.optional(overrides),
  settle: v.optional(settle),
  pool: v.optional(routePool),
});

const schema = strict("a JSON object such as { origin, routes }", {
  origin,
  routes: v.array(route, (issue) => `must be a list of routes${got(issue)}`),
  allow: v.optional(ipRanges, []),
  deny: v.optional(ipRanges, []),
  prefix: v.optional(
    v.pipe(
      text("a key prefix"),
      v.regex(PREFIX, (issue) => `must be 1-64 characters of A-Z a-z 0-9 _ . : -${got(issue)}`),
    ),
    "edgelimit",
  ),
  legacyHeaders: v.optional(
    v.boolean((issue) => `must be true or false${got(issue)}`),
    false,
  ),
  adminPath: v.optional(
    v.pipe(
      text('a path such as "/_edgelimit"'),
      v.regex(
        ADMIN_PATH,
        (issue) =>
          `must be a lowercase path such as "/_edgelimit" (a-z 0-9 _ . ~ - segments, no trailing "/")${got(issue)}`,
      ),
    ),
    "/_edgelimit",
  ),
  analytics: v.optional(analytics),
  regions: v.optional(regions),
});

/** Renders an issue path as `routes[1].rules.burst.capacity` (brackets for keys that are not names). */
function pathText(path: readonly v.IssuePathItem[] | undefined): string {
  let out = "";
  for (const item of path ?? []) {
    const key = item.key;
    if (typeof key === "number") out += `[${key}]`;
    else if (typeof key === "string" && /^[A-Za-z_$][\w$]*$/.test(key)) out += out ? `.${key}` : key;
    else out += `[${JSON.stringify(key)}]`;
  }
  return out;
}

/**
 * Validates a configuration (the parsed JSON, or the JSON text itself) and compiles it.
 * Never throws: problems come back as `{ ok: false, errors }`, each "path: message".
 *
 * @example
 * const result = parseConfig(env.EDGELIMIT_CONFIG);
 * if (!result.ok) console.error(result.errors.join("\n"));
 */
export function parseConfig(input: unknown): ConfigResult {
  let value = input;
  if (typeof input === "string") {
    try {
      value = JSON.parse(input);
    } catch (error) {
      return { ok: false, errors: [`EDGELIMIT_CONFIG: not valid JSON (${(error as Error).message})`] };
    }
  }
  const result = v.safeParse(schema, value);
  const errors = result.success
    ? []
    : result.issues.map((issue) => {
        const at = pathText(issue.path);
        // A field present but undefined (possible from JS, not JSON) reads like one left out.
        const message = issue.kind === "schema" && issue.input === undefined ? "is required" : issue.message;
        return `${at || "EDGELIMIT_CONFIG"}: ${message}`;
      });
  errors.push(
    ...duplicateNames(value),
    ...impossibleCosts(value),
    ...routePlans(value),
    ...poolsWithoutRegions(value),
  );
  if (!result.success || errors.length > 0) return { ok: false, errors };
  const { analytics, ...output } = result.output;
  return {
    ok: true,
    config: {
      ...output,
      // off (false) is the same as leaving it out
      ...(analytics === undefined ? {} : { analytics }),
      routes: output.routes.map(({ overrides, ...route }) => ({
        ...route,
        ...keyedRules(route.key, route.rules),
        ...(overrides === undefined ? {} : { overrides }),
      })) as RouteConfig[],
      allow: IpSet.from(output.allow),
      deny: IpSet.from(output.deny),
    },
  };
}

// An identifier record's field: 1-64 of these (the engine's rule `by`).
const FIELD = /^[A-Za-z0-9_.:-]{1,64}$/;

/**
 * The field a key is read into: "id" for the route's own key (so a route whose rules all count by it
 * keeps the keys it always had), else the key as written ("ip", "header:x-api-key"), or, for a header or
 * cookie name no field can spell, its kind and a hash of its name ("cookie.<16 hex>", never a key's text).
 */
function fieldOf(spec: KeySpec, routeKey: KeySpec): string {
  const text = keySpecText(spec);
  if (text === keySpecText(routeKey)) return "id";
  if (FIELD.test(text)) return text;
  return `${spec.kind}.${sha256Hex(text).slice(0, 16)}`;
}

/** The route's rules, each keyed by its field, and the key each field is read from. */
function keyedRules(
  routeKey: KeySpec,
  rules: Readonly<Record<string, ConfigRule>>,
): Pick<RouteConfig, "rules" | "identifiers"> {
  const identifiers: Record<string, KeySpec> = {};
  const keyed: Record<string, RuleConfig> = {};
  for (const [name, { by, ...rule }] of Object.entries(rules)) {
    const spec = by ?? routeKey;
    const field = fieldOf(spec, routeKey);
    identifiers[field] = spec;
    keyed[name] = (field === "id" ? rule : { ...rule, by: field }) as RuleConfig;
  }
  return { rules: keyed, identifiers };
}

// Two routes of one name would share counters; reported from the raw input, so it shows up alongside
// every other problem rather than only after they are fixed.
function duplicateNames(value: unknown): string[] {
  const routes = (value as { routes?: unknown } | null)?.routes;
  if (!Array.isArray(routes)) return [];
  const seen = new Map<string, number>();
  const errors: string[] = [];
  routes.forEach((route, i) => {
    const name = (route as { name?: unknown } | null)?.name;
    if (typeof name !== "string") return;
    const first = seen.get(name);
    if (first === undefined) seen.set(name, i);
    else errors.push(`routes[${i}].name: ${JSON.stringify(name)} is already the name of routes[${first}]`);
  });
  return errors;
}

// A route whose cost is more than one of its rules can ever hold would answer every request with a 429.
// Checked from the raw input too, for rules that are themselves valid, so it is reported alongside the rest.
function impossibleCosts(value: unknown): string[] {
  const routes = (value as { routes?: unknown } | null)?.routes;
  if (!Array.isArray(routes)) return [];
  const errors: string[] = [];
  routes.forEach((route, i) => {
    const { cost, rules } = (route ?? {}) as { cost?: unknown; rules?: unknown };
    if (typeof cost !== "number" || !Number.isInteger(cost) || cost < 1) return;
    if (rules === null || typeof rules !== "object" || Array.isArray(rules)) return;
    const compiled = Object.entries(rules)
      .map(([name, rule]) => checkRule(name, engineFields(rule)).rule)
      .filter((rule): rule is Rule => rule !== undefined);
    try {
      checkCost(compiled, cost, `routes[${i}].cost`);
    } catch (error) {
      errors.push((error as Error).message);
    }
  });
  return errors;
}

// The Limiter's own check of each route's plans against its rules (run only when those rules are
// valid: a plan over a broken rule would repeat that rule's problem), its issues under routes[i], and
// each plan's cost checked as the route's is.
function routePlans(value: unknown): string[] {
  const routes = (value as { routes?: unknown } | null)?.routes;
  if (!Array.isArray(routes)) return [];
  const errors: string[] = [];
  routes.forEach((route, i) => {
    const { cost = 1, rules, plans } = (route ?? {}) as { cost?: unknown; rules?: unknown; plans?: unknown };
    if (plans === null || typeof plans !== "object" || Array.isArray(plans)) return;
    if (rules === null || typeof rules !== "object" || Array.isArray(rules)) return;
    const entries = Object.entries(rules).map(([name, rule]) => [name, engineFields(rule)] as const);
    if (entries.length === 0 || entries.some(([name, rule]) => checkRule(name, rule).issues)) return;
    const checked = checkPlans(Object.fromEntries(entries), plans);
    if (checked.issues !== undefined) {
      for (const { path, message } of checked.issues) errors.push(`${routeField(i, path)}: ${message}`);
      return;
    }
    if (typeof cost !== "number" || !Number.isInteger(cost) || cost < 1) return;
    for (const [plan, compiled] of checked.plans) {
      try {
        checkCost(compiled, cost, routeField(i, ["plans", plan]));
      } catch (error) {
        errors.push((error as Error).message);
      }
    }
  });
  return errors;
}

// A route's own pool means nothing without regional databases to keep it in.
function poolsWithoutRegions(value: unknown): string[] {
  const { routes, regions } = (value ?? {}) as { routes?: unknown; regions?: unknown };
  if (!Array.isArray(routes) || regions !== undefined) return [];
  return routes.flatMap((route, i) =>
    (route as { pool?: unknown } | null)?.pool === undefined
      ? []
      : [
          `routes[${i}].pool: there are no regions to keep it in; add a top-level "regions" block or leave pool out`,
        ],
  );
}

// `routes[1].plans.pro.perMinute.limit` for a path inside routes[i].
function routeField(i: number, path: readonly (string | number)[]): string {
  const inside = pathText(pathIn(undefined, path));
  return `routes[${i}]${inside === "" || inside.startsWith("[") ? "" : "."}${inside}`;
}
