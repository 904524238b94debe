// A Decision carries the rules it was decided by, whatever answered it (Redis, the deny cache, a lease,
// a regional pool, onError), so turning it into headers never looks anything up again: under a custom
// override the cached denial and the leased admission state the override's quota, rulesOf() never
// throws, and the Hono middleware never answers 500. Against the test bridge's real Redis.
import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import { rateLimit } from "../../src/adapters/hono/index.js";
import { enforce, problemDetails, rateLimitHeaders, tooManyRequests } from "../../src/http/index.js";
import { type Decision, fixedWindow, gcra, Limiter, type LimiterOptions } from "../../src/index.js";
import { bridgeRedis, manualClock, T0, uniquePrefix } from "../support.js";

const RULES = { hourly: gcra({ limit: 3, period: "1h", burst: 3 }) };
const CUSTOM = { rules: { hourly: { limit: 6, burst: 6 } } };
const BASE = '"hourly";q=3;w=3600';
const OVERRIDDEN = '"hourly";q=6;w=3600';
const PRO = '"hourly";q=10;w=3600';

function setup(options: Partial<LimiterOptions> = {}) {
  const clock = manualClock();
  const limiter = new Limiter({
    redis: bridgeRedis(),
    prefix: uniquePrefix("decided-by"),
    rules: RULES,
    plans: { pro: { hourly: { limit: 10, burst: 10 } } },
    overrides: true,
    clock,
    timeout: 15_000, // not about timeouts: a slow machine must not make a decision fail open
    ...options,
  });
  return { limiter, clock };
}

/** Every public function that turns `d` into an answer: none throws, and each states `policy`. */
function answers(limiter: Limiter, d: Decision, policy: string, base = BASE) {
  expect(limiter.rulesOf(d)).toBe(d.decidedBy);
  expect(rateLimitHeaders(d)["RateLimit-Policy"]).toBe(policy);
  // an explicit rules argument still works, and wins
  expect(rateLimitHeaders(d, limiter.rules)["RateLimit-Policy"]).toBe(base);
  const { refusal, headers } = enforce(d);
  if (d.allowed) {
    expect(refusal).toBeUndefined();
    expect(headers["RateLimit-Policy"]).toBe(policy);
  } else {
    expect(refusal!.status).toBe(429);
    expect(refusal!.headers.get("RateLimit-Policy")).toBe(policy);
    expect(tooManyRequests(d).headers.get("RateLimit-Policy")).toBe(policy);
    expect(problemDetails(d)["violated-policies"]).toEqual(["hourly"]);
  }
  // not enumerable: JSON and deep equality see the decision as before
  expect(Object.keys(d)).not.toContain("decidedBy");
}

describe("a decision carries its rules", () => {
  it("under a custom override: redis, then the deny cache, each stating the override's quota", async () => {
    const { limiter, clock } = setup();
    clock.set(T0);
    await limiter.overrides.set("u1", CUSTOM);
    const sources: string[] = [];
    for (let i = 0; i < 8; i++) {
      clock.set(T0 + i);
      const d = await limiter.limit("u1");
      sources.push(`${d.source}:${d.allowed ? "ok" : "no"}:${d.plan}`);
      answers(limiter, d, OVERRIDDEN);
    }
    expect(sources).toEqual([...Array(6).fill("redis:ok:custom"), "redis:no:custom", "cache:no:custom"]);
    // another identifier decides by the base rules; a plan's by the plan's, from the cache too
    answers(limiter, await limiter.limit("u2"), BASE);
    for (let i = 0; i < 12; i++) await limiter.limit("u3", { plan: "pro" });
    const cached = await limiter.limit("u3", { plan: "pro" });
    expect(cached).toMatchObject({ source: "cache", plan: "pro" });
    answers(limiter, cached, PRO);
    await limiter.dispose();
  });

  it("from a lease under a custom override: plan custom and the override's quota", async () => {
    const { limiter, clock } = setup({ lease: { max: 5, ttl: "10s" } });
    clock.set(T0);
    await limiter.overrides.set("hot", { rules: { hourly: { limit: 60, burst: 60 } } });
    const bySource: Record<string, number> = {};
    for (let i = 0; i < 30; i++) {
      clock.set(T0 + i);
      const d = await limiter.limit("hot");
      bySource[d.source] = (bySource[d.source] ?? 0) + 1;
      expect(d).toMatchObject({ allowed: true, plan: "custom", limit: 60 });
      answers(limiter, d, '"hourly";q=60;w=3600');
      if (d.source === "lease") await limiter.settle(d, 2); // settled against the lease's own rules
    }
    expect(bySource.lease).toBeGreaterThan(0);
    await limiter.dispose();
  });

  it("from a regional pool, and from onError", async () => {
    const { limiter, clock } = setup({
      overrides: false,
      plans: undefined,
      rules: { hourly: gcra({ limit: 100, period: "1h", burst: 100 }) },
      region: { redis: bridgeRedis(), pool: { max: 10, ttl: "10s" } },
    });
    const work: Promise<unknown>[] = [];
    const waitUntil = (p: Promise<unknown>) => void work.push(p);
    const sources = new Set<string>();
    const policy = '"hourly";q=100;w=3600';
    for (let i = 0; i < 20; i++) {
      clock.set(T0 + i);
      const d = await limiter.limit("r", { waitUntil });
      await Promise.all(work.splice(0));
      sources.add(d.source);
      answers(limiter, d, policy, policy);
    }
    expect(sources).toContain("region");
    await limiter.dispose();

    const failing = new Limiter({
      redis: { url: "http://127.0.0.1:9", token: "t" },
      rules: { daily: fixedWindow({ limit: 5, window: "1d" }) },
      onError: "deny",
      timeout: 2000,
    });
    const d = await failing.limit("x");
    expect(d.source).toBe("error");
    expect(failing.rulesOf(d)).toBe(failing.rules);
    expect(rateLimitHeaders(d)).toEqual({ "RateLimit-Policy": '"daily";q=5;w=86400', "Retry-After": "1" });
    expect(tooManyRequests(d).status).toBe(429);
  });

  it("a copy made with a spread falls back to its plan's rules: never a throw", async () => {
    const { limiter, clock } = setup();
    clock.set(T0);
    await limiter.overrides.set("c", CUSTOM);
    const copy = { ...(await limiter.limit("c")) };
    expect(copy.plan).toBe("custom");
    expect(copy.decidedBy).toBeUndefined();
    expect(limiter.rulesOf(copy)).toBe(limiter.rules);
    expect(limiter.rulesOf({ ...copy, plan: "pro" })).toBe(limiter.rulesOf("pro"));
    // without rules, the headers leave RateLimit-Policy out rather than state a wrong one
    expect(rateLimitHeaders(copy)["RateLimit-Policy"]).toBeUndefined();
  });
});

describe("the Hono middleware under a custom override", () => {
  it("6 × 200, then 429s stating the override's quota, never a 500 (IPv4 and IPv6 keys)", async () => {
    const { limiter, clock } = setup();
    const app = new Hono();
    app.use("*", rateLimit({ limiter, key: (c) => c.req.header("x-client") }));
    app.get("/api", (c) => c.text("ok"));
    for (const client of ["203.0.113.7", "2001:db8::1"]) {
      clock.set(T0);
      await limiter.overrides.set(client, CUSTOM);
      const seen: string[] = [];
      for (let i = 0; i < 9; i++) {
        clock.set(T0 + i);
        const response = await app.request("/api", { headers: { "x-client": client } });
        seen.push(`${response.status} ${response.headers.get("ratelimit-policy")}`);
      }
      expect(seen).toEqual([...Array(6).fill(`200 ${OVERRIDDEN}`), ...Array(3).fill(`429 ${OVERRIDDEN}`)]);
    }
    await limiter.dispose();
  });
});

describe("a lease's units go back under the rules they were reserved under", () => {
  it("a fixed window under a custom override of 16: 16 units admitted in its window, not 19", async () => {
    const { limiter, clock } = setup({
      rules: { r: fixedWindow({ limit: 6, window: "1h" }) },
      plans: undefined,
      lease: { max: 4, ttl: "1m" },
      denyCache: false,
    });
    const work: Promise<unknown>[] = [];
    const waitUntil = (promise: Promise<unknown>) => void work.push(promise);
    clock.set(T0);
    await limiter.overrides.set("w", { rules: { r: { limit: 16 } } });
    let admitted = 0;
    const limit = async (cost: number) => {
      const d = await limiter.limit("w", { cost, waitUntil });
      while (work.length > 0) await Promise.all(work.splice(0));
      if (d.allowed) admitted += cost;
      return d;
    };
    for (let i = 0; i < 3; i++) await limit(1);
    await limit(8);
    clock.set(T0 + 2000); // past maxStale (1 s): the lease's unused units go back, under the override
    const last: Decision[] = [];
    for (let i = 0; i < 8; i++) last.push(await limit(1));
    expect(admitted).toBe(16);
    expect(last.map((d) => d.allowed)).toEqual([true, true, true, true, true, false, false, false]);
    await limiter.dispose();
  });
});
