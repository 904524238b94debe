import { describe, expect, test } from "vitest";
import { parseIp } from "../../../src/adapters/ip.js";
import { parseConfig } from "../../../src/adapters/worker/config.js";
import { regionOf } from "../../../src/adapters/worker/regions.js";

const login = {
  name: "login",
  match: { path: "/login", methods: ["POST"] },
  key: "ip",
  rules: { perMinute: { algorithm: "gcra", limit: 5, period: "1m" } },
};
const base = { origin: "https://api.example.com", routes: [login] };

/** The errors of a config that must fail. */
function errorsOf(input: unknown): readonly string[] {
  const result = parseConfig(input);
  if (result.ok) throw new Error("expected the config to be rejected");
  return result.errors;
}

describe("a valid config", () => {
  test("the config reference's example (docs/worker.md) compiles, with every default filled in", () => {
    const result = parseConfig(
      JSON.stringify({
        origin: "https://api.example.com",
        routes: [
          login,
          {
            name: "api",
            match: { path: "/api/*" },
            key: "header:x-api-key",
            mode: "shadow",
            rules: {
              burst: { algorithm: "tokenBucket", capacity: 20, refillRate: 10, interval: "1s" },
              daily: { algorithm: "fixedWindow", limit: 10000, window: "1d" },
            },
          },
        ],
        allow: ["203.0.113.7"],
        deny: ["198.51.100.0/24"],
      }),
    );
    if (!result.ok) throw new Error(result.errors.join("\n"));
    const { config } = result;
    expect(config.origin).toBe("https://api.example.com");
    expect(config.prefix).toBe("edgelimit");
    expect(config.legacyHeaders).toBe(false);
    expect(config.allow.has(parseIp("203.0.113.7")!)).toBe(true);
    expect(config.deny.has(parseIp("198.51.100.9")!)).toBe(true);
    expect(config.deny.has(parseIp("203.0.113.7")!)).toBe(false);
    const [first, second] = config.routes;
    expect(first).toEqual({
      name: "login",
      match: {
        path: { source: "/login", segments: ["login"], rest: false },
        methods: new Set(["POST"]),
      },
      key: { kind: "ip" },
      rules: { perMinute: { algorithm: "gcra", limit: 5, period: "1m" } },
      identifiers: { id: { kind: "ip" } },
      mode: "enforce",
      cost: 1,
    });
    expect(second).toEqual({
      name: "api",
      match: { path: { source: "/api/*", segments: ["api"], rest: true } },
      key: { kind: "header", name: "x-api-key" },
      rules: {
        burst: { algorithm: "tokenBucket", capacity: 20, refillRate: 10, interval: "1s" },
        daily: { algorithm: "fixedWindow", limit: 10000, window: "1d" },
      },
      identifiers: { id: { kind: "header", name: "x-api-key" } },
      mode: "shadow",
      cost: 1,
    });
  });

  test("optional fields: methods are uppercased and GET brings HEAD; durations become ms", () => {
    const result = parseConfig({
      origin: "http://127.0.0.1:8787/",
      prefix: "my-app:v2",
      legacyHeaders: true,
      routes: [{ ...login, match: { methods: ["get", "Post"] }, cost: 3, timeout: "250ms", onError: "deny" }],
    });
    if (!result.ok) throw new Error(result.errors.join("\n"));
    const route = result.config.routes[0]!;
    expect(result.config.origin).toBe("http://127.0.0.1:8787");
    expect(result.config.prefix).toBe("my-app:v2");
    expect(result.config.legacyHeaders).toBe(true);
    expect(route.match).toEqual({ methods: new Set(["GET", "POST", "HEAD"]) });
    expect([route.cost, route.timeout, route.onError]).toEqual([3, 250, "deny"]);
  });

  test("no routes at all is valid: the Worker then only applies allow and deny", () => {
    expect(parseConfig({ origin: "https://a.example", routes: [], deny: ["::/0"] }).ok).toBe(true);
  });
});

describe("every error names the path of the field at fault", () => {
  test.each([
    [{ ...base, origin: undefined }, ["origin: is required"]],
    [
      { ...base, origin: "api.example.com" },
      ['origin: "api.example.com" is not a URL; use an origin such as "https://api.example.com"'],
    ],
    [{ ...base, origin: "ftp://api.example.com" }, ['origin: must use http or https, got "ftp:"']],
    [{ ...base, origin: "https://user:pw@api.example.com" }, ["origin: must not carry credentials"]],
    [
      { ...base, origin: "https://api.example.com/v1" },
      [
        'origin: must be a scheme and host only ("https://api.example.com"); requests keep their own path and query',
      ],
    ],
    [
      { ...base, origin: 42 },
      ['origin: must be an http(s) origin such as "https://api.example.com", got 42'],
    ],
    [{ origin: base.origin }, ["routes: is required"]],
    [{ ...base, routes: "login" }, ['routes: must be a list of routes, got "login"']],
    [
      { ...base, routes: [null] },
      ["routes[0]: must be a route object such as { name, match, key, rules }, got null"],
    ],
    [
      { ...base, routez: [] },
      [
        "routez: is not a known field; use origin, routes, allow, deny, prefix, legacyHeaders, adminPath, analytics, regions",
      ],
    ],
    [{ ...base, routes: [{ ...login, name: undefined }] }, ["routes[0].name: is required"]],
    [
      { ...base, routes: [{ ...login, name: "log in" }] },
      ['routes[0].name: must be 1-64 characters of A-Z a-z 0-9 _ . -, got "log in"'],
    ],
    [
      { ...base, routes: [login, { ...login }] },
      ['routes[1].name: "login" is already the name of routes[0]'],
    ],
    [
      { ...base, routes: [{ ...login, match: { path: "login" } }] },
      ['routes[0].match.path: "login" must start with "/", e.g. "/login" or "/api/*"'],
    ],
    [
      { ...base, routes: [{ ...login, match: { path: "/api*" } }] },
      ['routes[0].match.path: "/api*": "*" may only be the whole last segment, as in "/api/*"'],
    ],
    [
      { ...base, routes: [{ ...login, match: { methods: [] } }] },
      ["routes[0].match.methods: must list at least one method (leave methods out to match any)"],
    ],
    [
      { ...base, routes: [{ ...login, match: { methods: ["POST", "GE T"] } }] },
      ['routes[0].match.methods[1]: must be an HTTP method such as "POST", got "GE T"'],
    ],
    [
      { ...base, routes: [{ ...login, match: { paths: ["/a"] } }] },
      ["routes[0].match.paths: is not a known field; use path, methods"],
    ],
    [
      { ...base, routes: [{ ...login, key: "ip:v6" }] },
      ['routes[0].key: "ip:v6" is not a key; use "ip", "path", "global", "header:NAME" or "cookie:NAME"'],
    ],
    [
      { ...base, routes: [{ ...login, key: "header:X-Real-IP" }] },
      [
        'routes[0].key: "header:X-Real-IP": a client can send any X-Real-IP it likes; use "ip", which reads CF-Connecting-IP (set by Cloudflare)',
      ],
    ],
    [
      { ...base, routes: [{ ...login, key: "cookie:a b" }] },
      ['routes[0].key: "cookie:a b": the cookie name must be a non-empty HTTP token'],
    ],
    [
      { ...base, routes: [{ ...login, rules: {} }] },
      ['routes[0].rules: give at least one rule, e.g. { "perMinute": { "algorithm": "gcra", ... } }'],
    ],
    [
      { ...base, routes: [{ ...login, rules: [] }] },
      ['routes[0].rules: give at least one rule, e.g. { "perMinute": { "algorithm": "gcra", ... } }'],
    ],
    [
      {
        ...base,
        routes: [
          login,
          {
            ...login,
            name: "api",
            rules: { burst: { algorithm: "tokenBucket", capacity: 0, refillRate: 10, interval: "1s" } },
          },
        ],
      },
      ["routes[1].rules.burst.capacity: must be a positive whole number, got 0"],
    ],
    [
      {
        ...base,
        routes: [{ ...login, rules: { daily: { algorithm: "fixedWindow", limit: 5, window: "1 day" } } }],
      },
      [
        'routes[0].rules.daily.window: "1 day" is not a duration; use milliseconds or a string like "500ms", "10s", "1m", "1h", "1d"',
      ],
    ],
    [
      { ...base, routes: [{ ...login, rules: { "per.minute": { algorithm: "gcra", limit: 5 } } }] },
      [
        'routes[0].rules["per.minute"].period: expected a duration (milliseconds or a string like "10s"), got undefined',
      ],
    ],
    [
      { ...base, routes: [{ ...login, rules: { x: { algorithm: "leakyBucket", limit: 5 } } }] },
      [
        'routes[0].rules.x.algorithm: unknown algorithm "leakyBucket"; use one of gcra, tokenBucket, intervalBucket, fixedWindow, slidingWindow, slidingLog',
      ],
    ],
    [
      {
        ...base,
        routes: [{ ...login, rules: { x: { algorithm: "gcra", limit: 5, period: "1m", window: "1m" } } }],
      },
      ["routes[0].rules.x.window: not an option of gcra; it takes limit, period, burst"],
    ],
    [
      { ...base, routes: [{ ...login, rules: { x: "gcra" } }] },
      ['routes[0].rules.x: expected a rule such as gcra({ limit, period }), got "gcra"'],
    ],
    [
      {
        ...base,
        routes: [{ ...login, rules: { "bad name": { algorithm: "gcra", limit: 5, period: "1m" } } }],
      },
      ['routes[0].rules["bad name"]: rule name "bad name" must be 1-64 characters of A-Z a-z 0-9 _ . -'],
    ],
    [
      { ...base, routes: [{ ...login, mode: "dry-run" }] },
      ['routes[0].mode: must be "enforce" or "shadow", got "dry-run"'],
    ],
    [
      { ...base, routes: [{ ...login, cost: 1.5 }] },
      ["routes[0].cost: must be a positive whole number, got 1.5"],
    ],
    [
      { ...base, routes: [{ ...login, cost: 0 }] },
      ["routes[0].cost: must be a positive whole number, got 0"],
    ],
    [
      { ...base, routes: [{ ...login, timeout: "soon" }] },
      [
        'routes[0].timeout: "soon" is not a duration; use milliseconds or a string like "500ms", "10s", "1m", "1h", "1d"',
      ],
    ],
    [
      { ...base, routes: [{ ...login, timeout: -5 }] },
      ["routes[0].timeout: must be a positive whole number of milliseconds, got -5"],
    ],
    [
      { ...base, routes: [{ ...login, onError: "fail" }] },
      ['routes[0].onError: must be "allow" or "deny", got "fail"'],
    ],
    [
      { ...base, allow: ["203.0.113.7", "10.1.2.3/8"] },
      ['allow[1]: "10.1.2.3/8" has host bits set; did you mean 10.0.0.0/8?'],
    ],
    [
      { ...base, deny: ["2001:db8::/129"] },
      ['deny[0]: "2001:db8::/129": the prefix length must be a whole number from 0 to 128'],
    ],
    [{ ...base, deny: ["localhost"] }, ['deny[0]: "localhost" is not an IP address or CIDR range']],
    [
      { ...base, deny: [42] },
      ['deny[0]: must be an IP address or CIDR range such as "198.51.100.0/24", got 42'],
    ],
    [{ ...base, deny: "1.2.3.4" }, ['deny: must be a list of IP addresses and CIDR ranges, got "1.2.3.4"']],
    [{ ...base, prefix: "" }, ['prefix: must be 1-64 characters of A-Z a-z 0-9 _ . : -, got ""']],
    [{ ...base, legacyHeaders: "yes" }, ['legacyHeaders: must be true or false, got "yes"']],
  ])("%j", (input, expected) => {
    expect(errorsOf(input)).toEqual(expected);
  });

  test("every problem is reported at once, in document order (duplicate names last)", () => {
    expect(
      errorsOf({
        origin: "https://api.example.com",
        routes: [
          {
            ...login,
            rules: { a: { algorithm: "gcra", limit: 0, period: "1m" }, b: { algorithm: "gcra", limit: 1 } },
          },
          { ...login, key: "nope", mode: "x" },
        ],
        deny: ["bad"],
      }),
    ).toEqual([
      "routes[0].rules.a.limit: must be a positive whole number, got 0",
      'routes[0].rules.b.period: expected a duration (milliseconds or a string like "10s"), got undefined',
      'routes[1].key: "nope" is not a key; use "ip", "path", "global", "header:NAME" or "cookie:NAME"',
      'routes[1].mode: must be "enforce" or "shadow", got "x"',
      'deny[0]: "bad" is not an IP address or CIDR range',
      'routes[1].name: "login" is already the name of routes[0]',
    ]);
  });

  test("text that is not JSON, and JSON that is not an object", () => {
    expect(errorsOf("{ origin: 1 }")).toHaveLength(1);
    expect(errorsOf("{ origin: 1 }")[0]).toMatch(/^EDGELIMIT_CONFIG: not valid JSON \(.+\)$/);
    expect(errorsOf("[]")).toEqual([
      "EDGELIMIT_CONFIG: must be a JSON object such as { origin, routes }, got an array",
    ]);
    expect(errorsOf("null")).toEqual([
      "EDGELIMIT_CONFIG: must be a JSON object such as { origin, routes }, got null",
    ]);
  });
});

describe("every error of a rule, and costs no rule can admit", () => {
  test("a rule with several mistakes reports each of them", () => {
    expect(
      errorsOf({
        ...base,
        routes: [
          {
            ...login,
            rules: {
              bad: {
                algorithm: "tokenBucket",
                capacity: 0,
                refillRate: 2 ** 60,
                interval: "1 week",
                extra: 1,
              },
              big: { algorithm: "gcra", limit: 10, period: "1d", burst: 2 ** 24 },
            },
          },
        ],
      }),
    ).toEqual([
      "routes[0].rules.bad.extra: not an option of tokenBucket; it takes capacity, refillRate, interval",
      "routes[0].rules.bad.capacity: must be a positive whole number, got 0",
      "routes[0].rules.bad.refillRate: must be at most 2^50 (1125899906842624) to be counted exactly, got 1152921504606847000",
      'routes[0].rules.bad.interval: "1 week" is not a duration; use milliseconds or a string like "500ms", "10s", "1m", "1h", "1d"',
      "routes[0].rules.big: burst × period is 1449551462400000 ms, too large to count exactly: it must be at most 2^50 (1125899906842624)",
    ]);
  });

  test("a cost above what one of the route's rules can ever hold is an error, naming the rule", () => {
    const rules = {
      burst: { algorithm: "gcra", limit: 10, period: "1s", burst: 20 },
      daily: { algorithm: "fixedWindow", limit: 1000, window: "1d" },
    };
    expect(errorsOf({ ...base, routes: [{ ...login, rules, cost: 21 }] })).toEqual([
      'routes[0].cost: 21 can never be admitted: rule "burst" holds at most 20 (make the cost at most 20, or raise the rule\'s limit)',
    ]);
    expect(parseConfig({ ...base, routes: [{ ...login, rules, cost: 20 }] }).ok).toBe(true);
    // reported beside the other problems, not after they are fixed
    expect(errorsOf({ ...base, routes: [{ ...login, rules, cost: 21, mode: "x" }] })).toEqual([
      'routes[0].mode: must be "enforce" or "shadow", got "x"',
      'routes[0].cost: 21 can never be admitted: rule "burst" holds at most 20 (make the cost at most 20, or raise the rule\'s limit)',
    ]);
  });
});

describe("rule and lease problems, each at its own path", () => {
  const withRules = (rules: unknown) => ({ ...base, routes: [{ ...login, rules }] });
  const withLease = (lease: unknown) => ({ ...base, routes: [{ ...login, lease }] });
  const notDuration = 'is not a duration; use milliseconds or a string like "500ms", "10s", "1m", "1h", "1d"';

  test.each([
    [
      withRules({ x: { algorithm: "gcra", limit: 5, period: "1m", "per.minute": 1, "": 2 } }),
      [
        'routes[0].rules.x["per.minute"]: not an option of gcra; it takes limit, period, burst',
        'routes[0].rules.x[""]: not an option of gcra; it takes limit, period, burst',
      ],
    ],
    [
      withRules({ "per.day": { algorithm: "slidingWindow", limit: 2 ** 41, window: 1000 } }),
      [
        'routes[0].rules["per.day"]: limit × window is 2199023255552000 ms, too large to count exactly: it must be at most 2^50 (1125899906842624)',
      ],
    ],
    [
      withRules({ "bad name": { algorithm: "gcra", limit: 0, period: "1m" } }),
      [
        'routes[0].rules["bad name"]: rule name "bad name" must be 1-64 characters of A-Z a-z 0-9 _ . -',
        'routes[0].rules["bad name"].limit: must be a positive whole number, got 0',
      ],
    ],
    [
      withRules({ log: { algorithm: "slidingLog", limit: 1_000_000, window: "1m" } }),
      [
        "routes[0].rules.log.limit: a sliding log stores one entry per unit, so 1000000 is too many (max 100000); use slidingWindow or gcra",
      ],
    ],
    [
      withLease({ max: 0, ttl: "1s" }),
      ["routes[0].lease.max: must be a whole number of units from 1 to 100000, got 0"],
    ],
    [withLease("50"), ['routes[0].lease: expected { max, ttl }, e.g. { max: 50, ttl: "1s" }, got "50"']],
    [
      withLease({ max: 0, ttl: "soon", size: 3 }),
      [
        "routes[0].lease.size: not a lease option; it takes max, ttl",
        "routes[0].lease.max: must be a whole number of units from 1 to 100000, got 0",
        `routes[0].lease.ttl: "soon" ${notDuration}`,
      ],
    ],
    [
      withLease({ max: 10, ttl: 2 ** 31 }),
      ["routes[0].lease.ttl: must be at most 2147483647 ms, got 2147483648"],
    ],
    [
      { ...base, routes: [{ ...login, concurrency: { limit: 1, ttl: "soon" } }] },
      [`routes[0].concurrency.ttl: "soon" ${notDuration}`],
    ],
    // a slot's longest hold was once "lease" (the word a route's units held per isolate keep)
    [
      { ...base, routes: [{ ...login, concurrency: { limit: 1, lease: "30s" } }] },
      [
        'routes[0].concurrency.lease: renamed: use "ttl", the longest a slot is held (e.g. "ttl": "30s")',
        "routes[0].concurrency.ttl: is required",
      ],
    ],
    [
      { ...base, routes: [{ ...login, concurrency: { limit: 1, ttl: "30s", lease: "30s" } }] },
      ['routes[0].concurrency.lease: renamed: use "ttl", the longest a slot is held (e.g. "ttl": "30s")'],
    ],
  ])("%j", (input, expected) => {
    expect(errorsOf(input)).toEqual(expected);
  });

  test("a valid lease comes back in milliseconds", () => {
    const result = parseConfig(withLease({ max: 50, ttl: "1.5s" }));
    expect(result.ok && result.config.routes[0]!.lease).toEqual({ max: 50, ttl: 1500 });
  });
});

describe("plans, overrides and adminPath", () => {
  const api = {
    name: "api",
    key: "header:x-api-key",
    rules: {
      perMinute: { algorithm: "gcra", limit: 100, period: "1m" },
      daily: { algorithm: "fixedWindow", limit: 10000, window: "1d" },
    },
  };
  const withApi = (fields: Record<string, unknown>, top: Record<string, unknown> = {}) => ({
    ...base,
    routes: [{ ...api, ...fields }],
    ...top,
  });

  test("plans and overrides come back as the Limiter takes them; adminPath defaults to /_edgelimit", () => {
    const plans = { pro: { perMinute: { limit: 1000 }, daily: { limit: 1000000 } } };
    const result = parseConfig(withApi({ plans, overrides: true }));
    if (!result.ok) throw new Error(result.errors.join("\n"));
    expect(result.config.adminPath).toBe("/_edgelimit");
    expect(result.config.routes[0]).toMatchObject({ plans, overrides: { maxStale: 1000 } });

    const timed = parseConfig(
      withApi({ overrides: { maxStale: "2.5s" } }, { adminPath: "/ops/edge-limits" }),
    );
    if (!timed.ok) throw new Error(timed.errors.join("\n"));
    expect(timed.config.adminPath).toBe("/ops/edge-limits");
    expect(timed.config.routes[0]!.overrides).toEqual({ maxStale: 2500 });
    expect(timed.config.routes[0]!.plans).toBeUndefined();

    const off = parseConfig(withApi({ overrides: false }));
    expect(off.ok && "overrides" in off.config.routes[0]!).toBe(false);
    const bare = parseConfig(base);
    expect(bare.ok && Object.keys(bare.config.routes[0]!)).toEqual([
      "name",
      "match",
      "key",
      "rules",
      "mode",
      "cost",
      "identifiers",
    ]);
  });

  test.each([
    [
      withApi({ plans: { pro: { perMinute: { limit: 0 } } } }),
      ["routes[0].plans.pro.perMinute.limit: must be a positive whole number, got 0"],
    ],
    [
      withApi({ plans: { pro: { perHour: { limit: 5 } } } }),
      ["routes[0].plans.pro.perHour: not a rule; the rules are perMinute, daily"],
    ],
    [
      withApi({ plans: { pro: { perMinute: { limit: 5, colour: "red" } } } }),
      ["routes[0].plans.pro.perMinute.colour: not an option of gcra; it takes limit, period, burst"],
    ],
    [
      withApi({ plans: { default: { perMinute: { limit: 5 } } } }),
      [
        'routes[0].plans.default: "default" is reserved (a decision\'s plan says "default" for the base rules and "custom" for an override); name the plan otherwise',
      ],
    ],
    [
      withApi({ plans: { "gold plan": {} } }),
      ['routes[0].plans: plan name "gold plan" must be 1-64 characters of A-Z a-z 0-9 _ . -'],
    ],
    [
      withApi({ plans: [] }),
      [
        'routes[0].plans: must be plans by name, e.g. { "pro": { "perMinute": { "limit": 1000 } } }, got an array',
      ],
    ],
    [
      withApi({ cost: 60, plans: { low: { perMinute: { limit: 50 } } } }),
      [
        'routes[0].plans.low: 60 can never be admitted: rule "perMinute" holds at most 50 (make the cost at most 50, or raise the rule\'s limit)',
      ],
    ],
    [withApi({ overrides: "yes" }), ['routes[0].overrides: expected true, false or { maxStale }, got "yes"']],
    [
      withApi({ overrides: { maxAge: "1s" } }),
      ["routes[0].overrides.maxAge: not an overrides option; it takes maxStale"],
    ],
    [
      withApi({ overrides: { maxStale: "soon" } }),
      [
        'routes[0].overrides.maxStale: "soon" is not a duration; use milliseconds or a string like "500ms", "10s", "1m", "1h", "1d"',
      ],
    ],
    ...["_edgelimit", "/_edgelimit/", "/Admin", "/a//b", "/a/../b", "/", "/a b"].map((adminPath) => [
      withApi({}, { adminPath }),
      [
        `adminPath: must be a lowercase path such as "/_edgelimit" (a-z 0-9 _ . ~ - segments, no trailing "/"), got ${JSON.stringify(adminPath)}`,
      ],
    ]),
  ])("%j", (input, expected) => {
    expect(errorsOf(input)).toEqual(expected);
  });

  test("a plan over a broken rule reports the rule once, not again per plan", () => {
    const broken = { perMinute: { algorithm: "gcra", limit: 0, period: "1m" } };
    expect(errorsOf(withApi({ rules: broken, plans: { pro: { perMinute: { limit: 5 } } } }))).toEqual([
      "routes[0].rules.perMinute.limit: must be a positive whole number, got 0",
    ]);
  });
});

describe("analytics", () => {
  const configOf = (analytics: unknown) => {
    const result = parseConfig({ ...base, analytics });
    if (!result.ok) throw new Error(result.errors.join("\n"));
    return result.config;
  };

  test("true is the Limiter's defaults; an object's durations come back in ms; false is off", () => {
    expect(configOf(true).analytics).toEqual({});
    expect(configOf({ flushEvery: "5s", top: 20, retention: "7d" }).analytics).toEqual({
      flushEvery: 5000,
      top: 20,
      retention: 7 * 86_400_000,
    });
    expect(configOf({ top: 1 }).analytics).toEqual({ top: 1 });
    expect("analytics" in configOf(false)).toBe(false);
    expect("analytics" in configOf(undefined)).toBe(false);
  });

  test.each([
    ["yes", 'analytics: expected true, false or { flushEvery, top, retention }, got "yes"'],
    [[], "analytics: expected true, false or { flushEvery, top, retention }, got an array"],
    [{ flush: "5s" }, "analytics.flush: not an analytics option; it takes flushEvery, top, retention"],
    // each route's counts go under the route's own name
    [{ name: "api" }, "analytics.name: not an analytics option; it takes flushEvery, top, retention"],
    [
      { flushEvery: "soon" },
      'analytics.flushEvery: "soon" is not a duration; use milliseconds or a string like "500ms", "10s", "1m", "1h", "1d"',
    ],
    [{ flushEvery: "500ms" }, 'analytics.flushEvery: must be from 1s to 1h, got "500ms"'],
    [{ retention: "1m" }, 'analytics.retention: must be from 1h to 90d, got "1m"'],
    [{ top: 0 }, "analytics.top: must be a whole number from 1 to 100, got 0"],
    [{ top: 2.5 }, "analytics.top: must be a whole number from 1 to 100, got 2.5"],
    [{ top: "20" }, 'analytics.top: must be a whole number from 1 to 100, got "20"'],
  ])("%j is refused, naming the field", (analytics, expected) => {
    expect(errorsOf({ ...base, analytics })).toEqual([expected]);
  });

  test("every problem of the object at once", () => {
    expect(errorsOf({ ...base, analytics: { top: 101, retention: 0, extra: 1 } })).toEqual([
      "analytics.extra: not an analytics option; it takes flushEvery, top, retention",
      "analytics.retention: must be a positive whole number of milliseconds, got 0",
      "analytics.top: must be a whole number from 1 to 100, got 101",
    ]);
  });
});

describe("regions", () => {
  const databases = {
    eu: {
      url: "https://eu.example.com",
      tokenSecret: "EDGELIMIT_REGION_EU_TOKEN",
      match: { continent: ["EU", "AF"] },
    },
    ap: {
      url: "https://ap.example.com",
      tokenSecret: "EDGELIMIT_REGION_AP_TOKEN",
      match: { colo: ["sin", "NRT"] },
    },
    us: { url: "http://127.0.0.1:8079", tokenSecret: "US_TOKEN" },
  };
  const regions = { pool: { max: 500, ttl: "5s" }, default: "us", databases };

  test("databases, their matches and the pool compile; codes are uppercased; a route's pool replaces it", () => {
    const result = parseConfig({
      ...base,
      routes: [
        login,
        { ...login, name: "api", pool: { max: 20, ttl: 250 } },
        { ...login, name: "far", pool: false },
      ],
      regions,
    });
    if (!result.ok) throw new Error(result.errors.join("\n"));
    const { config } = result;
    expect(config.regions).toEqual({
      pool: { max: 500, ttl: 5000 },
      default: "us",
      databases: {
        eu: {
          url: "https://eu.example.com",
          tokenSecret: "EDGELIMIT_REGION_EU_TOKEN",
          match: { continent: ["EU", "AF"] },
        },
        ap: {
          url: "https://ap.example.com",
          tokenSecret: "EDGELIMIT_REGION_AP_TOKEN",
          match: { colo: ["SIN", "NRT"] },
        },
        us: { url: "http://127.0.0.1:8079", tokenSecret: "US_TOKEN", match: {} },
      },
      colos: new Map([
        ["SIN", "ap"],
        ["NRT", "ap"],
      ]),
      continents: new Map([
        ["EU", "eu"],
        ["AF", "eu"],
      ]),
    });
    expect(config.routes.map((route) => route.pool)).toEqual([undefined, { max: 20, ttl: 250 }, false]);
  });

  test("a request's region: its colo first, then its continent, then the default (or home alone)", () => {
    const result = parseConfig({ ...base, regions });
    if (!result.ok) throw new Error(result.errors.join("\n"));
    const table = result.config.regions!;
    expect(regionOf(table, { continent: "EU", colo: "FRA" })).toBe("eu");
    expect(regionOf(table, { continent: "AS", colo: "SIN" })).toBe("ap");
    // a colo claimed by one region wins over its continent claimed by another
    expect(regionOf(table, { continent: "EU", colo: "NRT" })).toBe("ap");
    expect(regionOf(table, { continent: "NA", colo: "IAD" })).toBe("us");
    expect(regionOf(table, { continent: "eu", colo: "sin" })).toBe("ap");
    expect(regionOf(table, undefined)).toBe("us");
    expect(regionOf(table, { continent: 7, colo: null })).toBe("us");
    const noDefault = parseConfig({
      ...base,
      regions: { pool: regions.pool, databases: { eu: databases.eu } },
    });
    if (!noDefault.ok) throw new Error(noDefault.errors.join("\n"));
    expect(regionOf(noDefault.config.regions!, { continent: "NA", colo: "IAD" })).toBeUndefined();
    expect(regionOf(noDefault.config.regions!, { continent: "EU", colo: "AMS" })).toBe("eu");
  });

  test("every mistake is reported at once, at its field", () => {
    expect(
      errorsOf({
        ...base,
        routes: [{ ...login, pool: { max: 0, ttl: "5 weeks", size: 3 } }],
        regions: {
          pool: { max: 100_001 },
          default: "mars",
          extra: true,
          databases: {
            eu: { url: "ftp://eu.example.com", tokenSecret: "EU-TOKEN", match: { continent: ["EU", "XX"] } },
            de: {
              url: "https://user:pw@de.example.com",
              tokenSecret: "DE",
              match: { colo: ["FRA", "FR", "FRA"] },
            },
            nl: { tokenSecret: "NL", match: { continent: ["eu"], colo: [] } },
            us: { url: "https://us.example.com", tokenSecret: 42 },
            "bad name": { url: "https://x.example.com", tokenSecret: "X", match: { colo: ["X"] } },
            fr: { url: "not a url", tokenSecret: "FR", match: { city: ["Paris"] }, token: "secret" },
          },
        },
      }),
    ).toEqual([
      "routes[0].pool.size: not a lease option; it takes max, ttl",
      "routes[0].pool.max: must be a whole number of units from 1 to 100000, got 0",
      'routes[0].pool.ttl: "5 weeks" is not a duration; use milliseconds or a string like "500ms", "10s", "1m", "1h", "1d"',
      "regions.extra: is not a known field; use pool, default, databases",
      "regions.pool.max: must be a whole number of units from 1 to 100000, got 100001",
      'regions.pool.ttl: expected a duration (milliseconds or a string like "10s"), got undefined',
      'regions.databases.eu.url: must use http or https, got "ftp:"',
      'regions.databases.eu.tokenSecret: must be the name of the secret that holds the token, such as "EDGELIMIT_REGION_EU_TOKEN", got "EU-TOKEN"',
      'regions.databases.eu.match.continent[1]: must be one of AF, AN, AS, EU, NA, OC, SA, T1 (request.cf.continent), got "XX"',
      "regions.databases.de.url: must not carry credentials: put the token in the tokenSecret's secret",
      'regions.databases.de.match.colo[1]: must be a data center\'s three-letter code such as "FRA" (request.cf.colo), got "FR"',
      'regions.databases.de.match.colo[2]: "FRA" is already claimed earlier in this list',
      "regions.databases.nl.url: is required",
      'regions.databases.nl.match.continent[0]: "EU" is already claimed by databases.eu',
      'regions.databases.nl.match.colo: must be a non-empty list such as ["FRA", "AMS"], got an array',
      'regions.databases.us.tokenSecret: must be the name of the secret that holds the token, such as "EDGELIMIT_REGION_EU_TOKEN", got 42',
      `regions.databases.us.match: is required (unless this database is the regions' "default"), e.g. { "continent": ["EU"] } or { "colo": ["FRA", "AMS"] }`,
      'regions.databases["bad name"]: a region\'s name must be 1-64 characters of A-Z a-z 0-9 _ . -',
      "regions.databases.fr.token: is not a known field; use url, tokenSecret, match",
      'regions.databases.fr.url: "not a url" is not a URL; use the database\'s REST URL such as "https://eu1-example.upstash.io"',
      "regions.databases.fr.match.city: is not a known field; use continent, colo",
      'regions.databases.fr.match: must list "continent", "colo" or both',
      'regions.default: must name one of the databases ("eu", "de", "nl", "us", "bad name", "fr"), got "mars"',
    ]);
  });

  test("a block of the wrong shape, no databases, and a route's pool without regions", () => {
    expect(errorsOf({ ...base, regions: [] })).toEqual([
      'regions: must be an object such as { "pool": { ... }, "databases": { ... } }, got an array',
    ]);
    expect(errorsOf({ ...base, regions: { pool: { max: 1, ttl: "25d" }, databases: {} } })).toEqual([
      'regions.pool.ttl: must be at most 2147483647 ms, got "25d"',
      'regions.databases: must name at least one regional database, e.g. { "eu": { "url": ..., "tokenSecret": ..., "match": { "continent": ["EU"] } } }',
    ]);
    expect(errorsOf({ ...base, routes: [{ ...login, pool: { max: 5, ttl: "1s" } }] })).toEqual([
      'routes[0].pool: there are no regions to keep it in; add a top-level "regions" block or leave pool out',
    ]);
    expect(errorsOf({ ...base, routes: [{ ...login, pool: true }], regions })).toEqual([
      'routes[0].pool: expected { max, ttl }, e.g. { max: 50, ttl: "1s" }, got true',
    ]);
  });
});
