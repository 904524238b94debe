import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { compileRule } from "../../src/engine/algorithms/index.js";
import {
  enforce,
  policyHeader,
  problemDetails,
  QUOTA_EXCEEDED,
  rateLimitHeaders,
  tooManyInFlight,
  tooManyRequests,
  unauthorized,
} from "../../src/http/headers.js";
import {
  type Decision,
  fixedWindow,
  gcra,
  Limiter,
  type RuleConfig,
  type RuleResult,
  slidingWindow,
  tokenBucket,
} from "../../src/index.js";
import { bridgeRedis, manualClock, T0, uniquePrefix } from "../support.js";

// Expected strings are copied from draft-ietf-httpapi-ratelimit-headers-10 where the draft has an
// example; the section is named beside each.
const NOW = 1_700_000_040_000;

/** A decision whose binding rule is `rule`; the other rules admit with room to spare. */
function decision(rule: string, result: Partial<RuleResult>, others: string[] = []): Decision {
  const binding: RuleResult = {
    allowed: true,
    limit: 100,
    remaining: 0,
    resetAt: NOW,
    retryAfter: 0,
    ...result,
  };
  const rules: Record<string, RuleResult> = { [rule]: binding };
  for (const name of others) {
    rules[name] = { allowed: true, limit: 1000, remaining: 999, resetAt: NOW + 1000, retryAfter: 0 };
  }
  return { ...binding, rule, source: "redis", plan: "default", decidedAt: NOW, rules };
}

describe("RateLimit-Policy", () => {
  it('one policy: "default";q=100;w=10 (§3.2)', () => {
    const rules = [compileRule("default", fixedWindow({ limit: 100, window: "10s" }))];
    expect(policyHeader(rules)).toBe('"default";q=100;w=10');
  });

  it('several policies: "hour";q=1000;w=3600, "day";q=5000;w=86400 (B.3.2)', () => {
    const rules = [
      compileRule("hour", fixedWindow({ limit: 1000, window: "1h" })),
      compileRule("day", fixedWindow({ limit: 5000, window: "1d" })),
    ];
    expect(policyHeader(rules)).toBe('"hour";q=1000;w=3600, "day";q=5000;w=86400');
  });

  it("serializes lists as RFC 9651 does: the draft's §3 and §3.2 examples with ', ' between members", () => {
    // §3 writes `"burst";q=100;w=60,"daily";q=1000;w=86400`: the same List; RFC 9651 §4.1.1 puts
    // a space after each comma when serializing.
    const rules = [
      compileRule("burst", gcra({ limit: 100, period: "1m" })),
      compileRule("daily", fixedWindow({ limit: 1000, window: "1d" })),
    ];
    expect(policyHeader(rules)).toBe('"burst";q=100;w=60, "daily";q=1000;w=86400');
    const perMinuteHour = [
      compileRule("permin", fixedWindow({ limit: 50, window: "1m" })),
      compileRule("perhr", fixedWindow({ limit: 1000, window: "1h" })),
    ];
    expect(policyHeader(perMinuteHour)).toBe('"permin";q=50;w=60, "perhr";q=1000;w=3600');
  });

  it("states gcra and a token bucket at their real rate, with q at least what r can ever show", () => {
    const rules = [
      compileRule("burst", gcra({ limit: 10, period: "1s", burst: 20 })),
      compileRule("bucket", tokenBucket({ capacity: 20, refillRate: 10, interval: "1s" })),
      compileRule("small", gcra({ limit: 10, period: "1s", burst: 3 })),
      compileRule("odd", gcra({ limit: 3, period: "1s", burst: 5 })),
      compileRule("login", gcra({ limit: 5, period: "1m" })),
    ];
    expect(policyHeader(rules)).toBe(
      '"burst";q=20;w=2, "bucket";q=20;w=2, "small";q=10;w=1, "odd";q=6;w=2, "login";q=5;w=60',
    );
  });

  it("scales a window that is not whole seconds to one that is, at the same rate", () => {
    const rules = [
      compileRule("half", fixedWindow({ limit: 10, window: 500 })),
      compileRule("odd", fixedWindow({ limit: 3, window: 1500 })),
    ];
    expect(policyHeader(rules)).toBe('"half";q=20;w=1, "odd";q=4;w=2');
  });

  it("for any rule: q per w is exactly the real rate, and q is at least the rule's limit", () => {
    const duration = fc.integer({ min: 1, max: 10_000_000 });
    const count = fc.integer({ min: 1, max: 100_000 });
    const rule = fc.oneof(
      fc.record({ limit: count, period: duration, burst: count }).map((o) => ({
        config: gcra(o) as RuleConfig,
        units: o.limit,
        ms: o.period,
      })),
      fc.record({ capacity: count, refillRate: count, interval: duration }).map((o) => ({
        config: tokenBucket(o) as RuleConfig,
        units: o.refillRate,
        ms: o.interval,
      })),
      fc.record({ limit: count, window: duration }).map((o) => ({
        config: fixedWindow(o) as RuleConfig,
        units: o.limit,
        ms: o.window,
      })),
    );
    fc.assert(
      fc.property(rule, ({ config, units, ms }) => {
        const compiled = compileRule("r", config);
        const [, q, w] = /;q=(\d+);w=(\d+)$/.exec(policyHeader([compiled]))!.map(Number);
        expect(q! * ms).toBe(w! * units * 1000); // q / w seconds = units / ms ms
        expect(q).toBeGreaterThanOrEqual(compiled.limit);
      }),
      { numRuns: 2000 },
    );
  });

  it('escapes " and \\ in a name, and refuses what an sf-string cannot hold', () => {
    expect(policyHeader([{ name: 'a"b\\c', policy: { quota: 1, window: 1000 } }])).toBe(
      '"a\\"b\\\\c";q=1;w=1',
    );
    expect(() => policyHeader([{ name: "é", policy: { quota: 1, window: 1000 } }])).toThrow(
      /printable ASCII/,
    );
  });
});

describe("RateLimit and Retry-After", () => {
  const rules = [compileRule("default", fixedWindow({ limit: 100, window: "1m" }))];

  it('admission: "default";r=50;t=30 (§4.2), and no Retry-After', () => {
    const headers = rateLimitHeaders(decision("default", { remaining: 50, resetAt: NOW + 30_000 }), rules, {
      now: NOW,
    });
    expect(headers).toEqual({ "RateLimit-Policy": '"default";q=100;w=60', RateLimit: '"default";r=50;t=30' });
  });

  it("rounds t up, never down", () => {
    const at = (resetAt: number) =>
      rateLimitHeaders(decision("default", { remaining: 1, resetAt }), rules, { now: NOW }).RateLimit;
    expect(at(NOW + 29_001)).toBe('"default";r=1;t=30');
    expect(at(NOW + 30_000)).toBe('"default";r=1;t=30');
    expect(at(NOW + 1)).toBe('"default";r=1;t=1');
    expect(at(NOW)).toBe('"default";r=1;t=0');
    expect(at(NOW - 5000)).toBe('"default";r=1;t=0'); // a reset already past is "now", not negative
  });

  it('names the binding rule: "day";r=100;t=36000 with both policies listed (B.3.2)', () => {
    const both = [
      compileRule("hour", fixedWindow({ limit: 1000, window: "1h" })),
      compileRule("day", fixedWindow({ limit: 5000, window: "1d" })),
    ];
    const headers = rateLimitHeaders(
      decision("day", { limit: 5000, remaining: 100, resetAt: NOW + 36_000_000 }, ["hour"]),
      both,
      { now: NOW },
    );
    expect(headers).toEqual({
      "RateLimit-Policy": '"hour";q=1000;w=3600, "day";q=5000;w=86400',
      RateLimit: '"day";r=100;t=36000',
    });
  });

  it('denial: "default";r=0;t=5 and Retry-After naming the same moment (B.1.4)', () => {
    const denied = decision("default", {
      allowed: false,
      remaining: 0,
      resetAt: NOW + 60_000,
      retryAfter: 5000,
    });
    expect(rateLimitHeaders(denied, rules, { now: NOW })).toEqual({
      "RateLimit-Policy": '"default";q=100;w=60',
      RateLimit: '"default";r=0;t=5',
      "Retry-After": "5",
    });
  });

  it("Retry-After is ceil(retryAfter / 1000) and never earlier than t", () => {
    const retry = (retryAfter: number) => {
      const headers = rateLimitHeaders(
        decision("default", { allowed: false, resetAt: NOW + 60_000, retryAfter }),
        rules,
        { now: NOW },
      );
      return [headers["Retry-After"], headers.RateLimit];
    };
    expect(retry(100)).toEqual(["1", '"default";r=0;t=1']);
    expect(retry(1000)).toEqual(["1", '"default";r=0;t=1']);
    expect(retry(1001)).toEqual(["2", '"default";r=0;t=2']);
  });

  it("a cost that can never fit: no t, no Retry-After (both optional; no number would be true)", () => {
    const never = decision("default", {
      allowed: false,
      remaining: 40,
      retryAfter: Number.POSITIVE_INFINITY,
    });
    expect(rateLimitHeaders(never, rules, { now: NOW })).toEqual({
      "RateLimit-Policy": '"default";q=100;w=60',
      RateLimit: '"default";r=40',
    });
  });

  it("legacy X-RateLimit-* only when asked, Reset in epoch seconds rounded up", () => {
    const d = decision("default", { remaining: 7, resetAt: NOW + 12_345 });
    expect(rateLimitHeaders(d, rules, { now: NOW })["X-RateLimit-Limit"]).toBeUndefined();
    expect(rateLimitHeaders(d, rules, { now: NOW, legacy: true })).toEqual({
      "RateLimit-Policy": '"default";q=100;w=60',
      RateLimit: '"default";r=7;t=13',
      "X-RateLimit-Limit": "100",
      "X-RateLimit-Remaining": "7",
      "X-RateLimit-Reset": String(Math.ceil((NOW + 12_345) / 1000)),
    });
  });

  it("source error: state unknown, so only the static policy, and Retry-After when failing closed", () => {
    const failed = (allowed: boolean): Decision => ({
      ...decision("default", {
        allowed,
        remaining: allowed ? 100 : 0,
        resetAt: NOW,
        retryAfter: allowed ? 0 : 1000,
      }),
      source: "error",
      error: new Error("timeout"),
    });
    expect(rateLimitHeaders(failed(true), rules, { now: NOW, legacy: true })).toEqual({
      "RateLimit-Policy": '"default";q=100;w=60',
    });
    expect(rateLimitHeaders(failed(false), rules, { now: NOW, legacy: true })).toEqual({
      "RateLimit-Policy": '"default";q=100;w=60',
      "Retry-After": "1",
    });
    expect(problemDetails(failed(false), rules, { now: NOW })).toEqual({
      type: "about:blank",
      title: "Too Many Requests",
      status: 429,
      detail: "The rate limiter could not decide and refuses requests until it can. Retry after 1 second.",
      "retry-after": 1,
    });
  });
});

describe("problem details (RFC 9457, the draft's §5.1 quota-exceeded type)", () => {
  const rules = [
    compileRule("daily", fixedWindow({ limit: 1000, window: "1d" })),
    compileRule("bandwidth", fixedWindow({ limit: 100, window: "1m" })),
    compileRule("burst", gcra({ limit: 10, period: "1s" })),
  ];

  it("carries the draft's type, title and violated-policies, in rule order", () => {
    const d: Decision = {
      ...decision("bandwidth", { allowed: false, retryAfter: 3000 }),
      rules: {
        burst: { allowed: true, limit: 10, remaining: 9, resetAt: NOW + 100, retryAfter: 0 },
        bandwidth: { allowed: false, limit: 100, remaining: 0, resetAt: NOW + 3000, retryAfter: 3000 },
        daily: { allowed: false, limit: 1000, remaining: 0, resetAt: NOW + 2000, retryAfter: 2000 },
      },
    };
    expect(problemDetails(d, rules, { now: NOW })).toEqual({
      type: "https://iana.org/assignments/http-problem-types#quota-exceeded",
      title: "Request cannot be satisfied as assigned quota has been exceeded",
      status: 429,
      detail: 'Quota exceeded for "daily", "bandwidth". Retry after 3 seconds.',
      "violated-policies": ["daily", "bandwidth"],
      "retry-after": 3,
    });
    expect(QUOTA_EXCEEDED).toBe("https://iana.org/assignments/http-problem-types#quota-exceeded");
  });

  it("says so when retrying cannot help, and has no retry-after then", () => {
    const never = decision("burst", { allowed: false, retryAfter: Number.POSITIVE_INFINITY });
    expect(problemDetails(never, rules, { now: NOW })).toEqual({
      type: QUOTA_EXCEEDED,
      title: "Request cannot be satisfied as assigned quota has been exceeded",
      status: 429,
      detail: 'This request needs more quota than "burst" can ever grant; retrying will not help.',
      "violated-policies": ["burst"],
    });
  });

  it("refuses to describe an admission", () => {
    expect(() => problemDetails(decision("burst", {}), rules)).toThrow(TypeError);
  });
});

describe("responses", () => {
  const rules = [compileRule("burst", gcra({ limit: 10, period: "1s", burst: 20 }))];

  it("tooManyRequests: 429, problem+json, the rate-limit headers, Retry-After, no-store", async () => {
    const d = decision("burst", {
      allowed: false,
      limit: 20,
      remaining: 0,
      resetAt: NOW + 2000,
      retryAfter: 100,
    });
    const response = tooManyRequests(d, rules, { now: NOW, legacy: true });
    expect(response.status).toBe(429);
    expect(Object.fromEntries(response.headers)).toEqual({
      "cache-control": "no-store",
      "content-type": "application/problem+json",
      ratelimit: '"burst";r=0;t=1',
      "ratelimit-policy": '"burst";q=20;w=2',
      "retry-after": "1",
      "x-ratelimit-limit": "20",
      "x-ratelimit-remaining": "0",
      "x-ratelimit-reset": String(Math.ceil((NOW + 100) / 1000)),
    });
    expect(await response.json()).toEqual({
      type: QUOTA_EXCEEDED,
      title: "Request cannot be satisfied as assigned quota has been exceeded",
      status: 429,
      detail: 'Quota exceeded for "burst". Retry after 1 second.',
      "violated-policies": ["burst"],
      "retry-after": 1,
    });
  });

  it("tooManyInFlight: 429, problem+json naming the limit, Retry-After rounded up, no RateLimit", async () => {
    const full = tooManyInFlight({
      allowed: false,
      rule: "concurrency",
      retryAfter: 29_001,
      source: "redis",
    });
    expect(full.status).toBe(429);
    expect(Object.fromEntries(full.headers)).toEqual({
      "cache-control": "no-store",
      "content-type": "application/problem+json",
      "retry-after": "30",
    });
    expect(await full.json()).toEqual({
      type: QUOTA_EXCEEDED,
      title: "Request cannot be satisfied as assigned quota has been exceeded",
      status: 429,
      detail: 'Quota exceeded for "concurrency". Retry after 30 seconds.',
      "violated-policies": ["concurrency"],
      "retry-after": 30,
    });
    // Redis did not answer and onError is "deny": no quota was exceeded
    const unknown = tooManyInFlight({
      allowed: false,
      rule: "concurrency",
      retryAfter: 1000,
      source: "error",
    });
    expect(Object.fromEntries(unknown.headers)).toEqual({
      "cache-control": "no-store",
      "content-type": "application/problem+json",
      "retry-after": "1",
    });
    expect(await unknown.json()).toEqual({
      type: "about:blank",
      title: "Too Many Requests",
      status: 429,
      detail: "The rate limiter could not decide and refuses requests until it can. Retry after 1 second.",
      "retry-after": 1,
    });
    expect(() =>
      tooManyInFlight({ allowed: true, rule: "concurrency", retryAfter: 0, source: "redis" }),
    ).toThrow(TypeError);
  });

  it("unauthorized: 401 problem+json, with the challenge when given", async () => {
    const plain = unauthorized();
    expect(plain.status).toBe(401);
    expect(plain.headers.get("content-type")).toBe("application/problem+json");
    expect(plain.headers.get("www-authenticate")).toBeNull();
    expect(await plain.json()).toEqual({
      type: "about:blank",
      title: "Unauthorized",
      status: 401,
      detail: "This endpoint is rate limited per client, and the request does not say who the client is.",
    });
    const bearer = unauthorized({ challenge: 'Bearer realm="api"', detail: "Log in first." });
    expect(bearer.headers.get("www-authenticate")).toBe('Bearer realm="api"');
    expect((await bearer.json()).detail).toBe("Log in first.");
  });
});

describe("enforce", () => {
  const rules = [compileRule("burst", gcra({ limit: 10, period: "1s", burst: 20 }))];
  const denied = decision("burst", {
    allowed: false,
    limit: 20,
    remaining: 0,
    resetAt: NOW + 2000,
    retryAfter: 100,
  });

  it("enforce mode: a denial is the 429, an admission is headers to add", () => {
    const refused = enforce(denied, rules, { now: NOW });
    expect(refused.refusal?.status).toBe(429);
    expect(refused.refusal?.headers.get("retry-after")).toBe("1");
    expect(refused.headers).toEqual({});
    const served = enforce(decision("burst", { limit: 20, remaining: 19, resetAt: NOW + 100 }), rules, {
      now: NOW,
    });
    expect(served).toEqual({
      refusal: undefined,
      headers: { "RateLimit-Policy": '"burst";q=20;w=2', RateLimit: '"burst";r=19;t=1' },
      shadowDenied: false,
    });
  });

  it("shadow mode: a denial is served, marked, and without Retry-After", () => {
    expect(enforce(denied, rules, { now: NOW, mode: "shadow" })).toEqual({
      refusal: undefined,
      headers: {
        "RateLimit-Policy": '"burst";q=20;w=2',
        RateLimit: '"burst";r=0;t=1',
        "EdgeLimit-Shadow": "denied",
      },
      shadowDenied: true,
    });
  });
});

describe("sf-integers stay within the 15 digits RFC 9651 allows", () => {
  it("clamps a remaining, quota or t past 15 digits to 999999999999999", () => {
    // 2^50 is a rule's largest limit, and 16 digits long
    const rules = [compileRule("huge", gcra({ limit: 2 ** 50, period: 1, burst: 2 ** 50 }))];
    const d = decision("huge", { limit: 2 ** 50, remaining: 2 ** 50, resetAt: NOW + 2 ** 60 });
    expect(rateLimitHeaders(d, rules, { now: NOW, legacy: true })).toEqual({
      "RateLimit-Policy": '"huge";q=999999999999999;w=1',
      RateLimit: '"huge";r=999999999999999;t=999999999999999',
      "X-RateLimit-Limit": "1125899906842624",
      "X-RateLimit-Remaining": "1125899906842624",
      "X-RateLimit-Reset": String(Math.ceil((NOW + 2 ** 60) / 1000)),
    });
  });
});

describe("r never exceeds q, against the real script", () => {
  it("holds on every decision of a burst, a drain and a refill, for every algorithm", async () => {
    const clock = manualClock();
    const limiter = new Limiter({
      redis: bridgeRedis(),
      prefix: uniquePrefix("rq"),
      rules: {
        burst: gcra({ limit: 10, period: "1s", burst: 20 }),
        odd: gcra({ limit: 3, period: "1s", burst: 5 }),
        bucket: tokenBucket({ capacity: 7, refillRate: 2, interval: "1s" }),
        half: slidingWindow({ limit: 10, window: 500 }),
      },
      denyCache: false,
      clock,
      timeout: 15_000, // not a test of timeouts: a slow machine must not make a decision fail open
    });
    const quota = new Map(
      [...policyHeader(limiter.rules).matchAll(/"(\w+)";q=(\d+);w=(\d+)/g)].map((m) => [m[1], Number(m[2])]),
    );
    expect(Object.fromEntries(quota)).toEqual({ burst: 20, odd: 6, bucket: 8, half: 20 });
    let checked = 0;
    for (let step = 0; step < 60; step++) {
      clock.set(T0 + step * 97);
      for (const id of ["a", "b"]) {
        const d = await limiter.limit(id, { cost: step % 3 });
        for (const [name, rule] of Object.entries(d.rules)) {
          expect(rule.remaining).toBeLessThanOrEqual(quota.get(name)!);
          checked++;
        }
        const r = Number(
          /;r=(\d+)/.exec(rateLimitHeaders(d, limiter.rules, { now: clock.now }).RateLimit!)![1],
        );
        expect(r).toBeLessThanOrEqual(quota.get(d.rule)!);
      }
    }
    expect(checked).toBe(480);
  });
});
