import { Redis } from "@upstash/redis";
import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import {
  type RateLimitEvent,
  type RateLimitOptions,
  type RateLimitVariables,
  rateLimit,
} from "../../../src/adapters/hono/index.js";
import { QUOTA_EXCEEDED } from "../../../src/http/headers.js";
import { fixedWindow, gcra, Limiter, type LimiterOptions } from "../../../src/index.js";
import { bridgeRedis, manualClock, T0, uniquePrefix } from "../../support.js";

// burst: T = 60 s, 3 at once. hourly: 5 per clock hour; T0 is 14 min past an hour, so its window
// ends 2760 s after T0. Keys expire in real time by TTLs counted on the test clock (a burst unit's key
// lives T): these rules keep every key a test writes alive for a minute or more, longer than a test may
// run, so a slow machine cannot expire state between two steps.
const RULES = {
  burst: gcra({ limit: 10, period: "10m", burst: 3 }),
  hourly: fixedWindow({ limit: 5, window: "1h" }),
};
const POLICY = '"burst";q=3;w=180, "hourly";q=5;w=3600';
const TITLE = "Request cannot be satisfied as assigned quota has been exceeded";

/** An app with one limited route, a real Limiter on the bridge, and a hand-moved clock. */
function setup(options: Partial<RateLimitOptions> = {}, limiterOptions: Partial<LimiterOptions> = {}) {
  const clock = manualClock();
  const limiter = new Limiter({
    redis: bridgeRedis(),
    prefix: uniquePrefix("hono"),
    rules: RULES,
    clock,
    timeout: 15_000, // these tests are not about timeouts: a slow machine must not make a decision fail open
    ...limiterOptions,
  });
  const events: RateLimitEvent[] = [];
  const app = new Hono<{ Variables: RateLimitVariables }>();
  app.use(
    "/api/*",
    rateLimit({
      limiter,
      key: (c) => c.req.header("x-user"),
      cost: (c) => Number(c.req.header("x-cost") ?? 1),
      log: (event) => events.push(event),
      ...options,
    }),
  );
  app.get("/api/json", (c) =>
    c.json({ remaining: c.get("rateLimit").remaining, rule: c.get("rateLimit").rule }),
  );
  // A handler's own Response replaces c.res wholesale; a redirect's headers are even immutable.
  app.get("/api/raw", () => new Response("raw", { headers: { "x-handler": "yes" } }));
  app.get("/api/redirect", () => Response.redirect("https://example.com/elsewhere", 302));
  app.get("/open", (c) => c.text("not limited"));
  const get = (path: string, headers: Record<string, string> = { "x-user": "alice" }) =>
    app.request(path, { headers });
  return { app, clock, limiter, events, get };
}

/** The headers of a response, minus the ones that only say what the body is. */
function rateHeaders(response: Response): Record<string, string> {
  const all = Object.fromEntries(response.headers);
  delete all["content-type"];
  delete all["content-length"];
  return all;
}

describe("hono rateLimit (enforce)", () => {
  it("sets RateLimit-Policy and the binding rule's RateLimit, then a 429 with problem+json", async () => {
    const { get, clock } = setup();
    const expected = ['"burst";r=2;t=60', '"burst";r=1;t=120', '"burst";r=0;t=180'];
    for (const rateLimitValue of expected) {
      const response = await get("/api/json");
      expect(response.status).toBe(200);
      expect(rateHeaders(response)).toEqual({ "ratelimit-policy": POLICY, ratelimit: rateLimitValue });
    }

    const denied = await get("/api/json");
    expect(denied.status).toBe(429);
    expect(Object.fromEntries(denied.headers)).toEqual({
      "cache-control": "no-store",
      "content-type": "application/problem+json",
      "ratelimit-policy": POLICY,
      ratelimit: '"burst";r=0;t=60',
      "retry-after": "60",
    });
    expect(await denied.json()).toEqual({
      type: QUOTA_EXCEEDED,
      title: TITLE,
      status: 429,
      detail: 'Quota exceeded for "burst". Retry after 60 seconds.',
      "violated-policies": ["burst"],
      "retry-after": 60,
    });

    // Ten minutes later the burst is back; the hourly rule (2 left) now binds, its window 2160 s from here.
    clock.set(T0 + 600_000);
    const again = await get("/api/json");
    expect(again.status).toBe(200);
    expect(again.headers.get("ratelimit")).toBe('"hourly";r=1;t=2160');
    expect(await again.json()).toEqual({ remaining: 1, rule: "hourly" });
    expect((await get("/api/json")).headers.get("ratelimit")).toBe('"hourly";r=0;t=2160');

    const hourly = await get("/api/json");
    expect(hourly.status).toBe(429);
    expect(hourly.headers.get("retry-after")).toBe("2160");
    expect(hourly.headers.get("ratelimit")).toBe('"hourly";r=0;t=2160');
    expect((await hourly.json())["violated-policies"]).toEqual(["hourly"]);
  });

  it("puts the headers on a handler's own Response, even one with immutable headers", async () => {
    const { get } = setup();
    const raw = await get("/api/raw");
    expect(await raw.text()).toBe("raw");
    expect(raw.headers.get("x-handler")).toBe("yes");
    expect(raw.headers.get("ratelimit")).toBe('"burst";r=2;t=60');
    expect(raw.headers.get("ratelimit-policy")).toBe(POLICY);

    const redirect = await get("/api/redirect");
    expect(redirect.status).toBe(302);
    expect(redirect.headers.get("location")).toBe("https://example.com/elsewhere");
    expect(redirect.headers.get("ratelimit")).toBe('"burst";r=1;t=120');
  });

  it("leaves routes outside its path alone", async () => {
    const { get } = setup();
    const response = await get("/open");
    expect(await response.text()).toBe("not limited");
    expect(response.headers.get("ratelimit")).toBeNull();
  });

  it("keeps identities apart", async () => {
    const { get } = setup();
    for (let i = 0; i < 3; i++) await get("/api/json", { "x-user": "alice" });
    expect((await get("/api/json", { "x-user": "alice" })).status).toBe(429);
    const bob = await get("/api/json", { "x-user": "bob" });
    expect(bob.status).toBe(200);
    expect(bob.headers.get("ratelimit")).toBe('"burst";r=2;t=60');
  });

  it("answers 401 problem+json when key gives undefined, and consumes nothing", async () => {
    const { get, limiter } = setup();
    const response = await get("/api/json", {});
    expect(response.status).toBe(401);
    expect(response.headers.get("content-type")).toBe("application/problem+json");
    expect(response.headers.get("ratelimit")).toBeNull();
    expect(await response.json()).toEqual({
      type: "about:blank",
      title: "Unauthorized",
      status: 401,
      detail: "This endpoint is rate limited per client, and the request does not say who the client is.",
    });
    expect(await limiter.limit("alice", { cost: 0 })).toMatchObject({ source: "redis", remaining: 3 });
  });

  it("lets onMissingKey answer instead", async () => {
    const { get } = setup({ onMissingKey: (c) => c.text("who are you?", 400) });
    const response = await get("/api/json", {});
    expect(response.status).toBe(400);
    expect(await response.text()).toBe("who are you?");
  });

  it("charges cost units, and says when a cost can never fit", async () => {
    const { get } = setup();
    // Cost 0 reads the state: full, nothing to wait for, nothing consumed.
    const peek = await get("/api/json", { "x-user": "alice", "x-cost": "0" });
    expect(peek.status).toBe(200);
    expect(peek.headers.get("ratelimit")).toBe('"burst";r=3;t=0');

    const heavy = await get("/api/json", { "x-user": "alice", "x-cost": "3" });
    expect(heavy.status).toBe(200);
    expect(heavy.headers.get("ratelimit")).toBe('"burst";r=0;t=180');

    const tooBig = await get("/api/json", { "x-user": "bob", "x-cost": "4" });
    expect(tooBig.status).toBe(429);
    expect(tooBig.headers.get("retry-after")).toBeNull();
    expect(tooBig.headers.get("ratelimit")).toBe('"burst";r=3');
    expect(await tooBig.json()).toEqual({
      type: QUOTA_EXCEEDED,
      title: TITLE,
      status: 429,
      detail: 'This request needs more quota than "burst" can ever grant; retrying will not help.',
      "violated-policies": ["burst"],
    });
  });

  it("adds the X-RateLimit-* trio when legacyHeaders is set", async () => {
    const { get } = setup({ legacyHeaders: true });
    const response = await get("/api/json");
    expect(rateHeaders(response)).toEqual({
      "ratelimit-policy": POLICY,
      ratelimit: '"burst";r=2;t=60',
      "x-ratelimit-limit": "3",
      "x-ratelimit-remaining": "2",
      "x-ratelimit-reset": String((T0 + 60_000) / 1000),
    });
  });
});

describe("hono rateLimit under a plan", () => {
  // pro: a burst of 6 at the same rate (1 per minute), 50 an hour
  const PLANS = { pro: { burst: { burst: 6 }, hourly: { limit: 50 } } };
  const PRO_POLICY = '"burst";q=6;w=360, "hourly";q=50;w=3600';

  it("decides under the plan the option names, and states that plan's quota in the headers", async () => {
    const { get } = setup({ plan: (c) => c.req.header("x-plan") }, { plans: PLANS });
    for (let used = 1; used <= 6; used++) {
      const response = await get("/api/json", { "x-user": "alice", "x-plan": "pro" });
      expect(response.status).toBe(200);
      expect(rateHeaders(response)).toEqual({
        "ratelimit-policy": PRO_POLICY,
        ratelimit: `"burst";r=${6 - used};t=${60 * used}`,
      });
    }
    const denied = await get("/api/json", { "x-user": "alice", "x-plan": "pro" });
    expect(denied.status).toBe(429);
    expect(denied.headers.get("ratelimit-policy")).toBe(PRO_POLICY);
    expect(denied.headers.get("ratelimit")).toBe('"burst";r=0;t=60');
    expect(denied.headers.get("retry-after")).toBe("60");

    // the same user without a plan: the base rules, over the units already counted
    const base = await get("/api/json", { "x-user": "alice" });
    expect(base.status).toBe(429);
    expect(base.headers.get("ratelimit-policy")).toBe(POLICY);
    // the 6 units counted under pro leave the base rules' hourly 5 over: it binds, to the hour's end
    expect(base.headers.get("retry-after")).toBe("2760");
    expect(base.headers.get("ratelimit")).toBe('"hourly";r=0;t=2760');
    const other = await get("/api/json", { "x-user": "bob" });
    expect(rateHeaders(other)).toEqual({ "ratelimit-policy": POLICY, ratelimit: '"burst";r=2;t=60' });
  });

  it("puts the plan that applied in c.get('rateLimit').plan", async () => {
    const { app, limiter } = setup({ plan: async () => "pro" }, { plans: PLANS });
    app.get("/api/plan", (c) => c.text(c.get("rateLimit").plan));
    const response = await app.request("/api/plan", { headers: { "x-user": "carol" } });
    expect(await response.text()).toBe("pro");
    expect((await limiter.limit("carol", { cost: 0, plan: "pro" })).remaining).toBe(5);
  });
});

describe("hono rateLimit (shadow)", () => {
  it("serves what it would refuse, marks it EdgeLimit-Shadow: denied, and logs it", async () => {
    const { get, events } = setup({ mode: "shadow" });
    for (let i = 0; i < 3; i++) expect((await get("/api/json")).headers.get("edgelimit-shadow")).toBeNull();
    expect(events).toEqual([]);

    const shadowed = await get("/api/json");
    expect(shadowed.status).toBe(200);
    expect(rateHeaders(shadowed)).toEqual({
      "ratelimit-policy": POLICY,
      ratelimit: '"burst";r=0;t=60',
      "edgelimit-shadow": "denied",
    });
    expect(await shadowed.json()).toEqual({ remaining: 0, rule: "burst" });
    expect(events).toEqual([
      {
        kind: "shadow-denied",
        key: "alice",
        method: "GET",
        path: "/api/json",
        message: 'edgelimit shadow: would deny GET /api/json (rule "burst", retry in 60000 ms)',
        decision: expect.objectContaining({
          allowed: false,
          rule: "burst",
          retryAfter: 60_000,
          source: "redis",
        }),
      },
    ]);
  });

  it("serves a request without a key too, marked EdgeLimit-Shadow: no-key", async () => {
    const { get, events } = setup({ mode: "shadow" });
    const response = await get("/api/raw", {});
    expect(response.status).toBe(200);
    expect(await response.text()).toBe("raw");
    expect(rateHeaders(response)).toEqual({ "x-handler": "yes", "edgelimit-shadow": "no-key" });
    expect(events).toEqual([
      {
        kind: "shadow-no-key",
        method: "GET",
        path: "/api/raw",
        message: "edgelimit shadow: would answer 401 to GET /api/raw (no key)",
      },
    ]);
  });

  it("logs with console.warn by default", async () => {
    const { app } = setup({ mode: "shadow", log: undefined });
    const warnings: unknown[][] = [];
    const original = console.warn;
    console.warn = (...args: unknown[]) => warnings.push(args);
    try {
      for (let i = 0; i < 4; i++) await app.request("/api/json", { headers: { "x-user": "carol" } });
    } finally {
      console.warn = original;
    }
    expect(warnings).toEqual([
      ['edgelimit shadow: would deny GET /api/json (rule "burst", retry in 60000 ms)'],
    ]);
  });
});

describe("hono rateLimit when Redis fails", () => {
  // Nothing listens on port 9: every request fails at once, and the Limiter's onError decides.
  const unreachable = { redis: new Redis({ url: "http://127.0.0.1:9", token: "x", retry: false }) };

  it('onError "allow": serves the request with only the policy header, and logs the failure', async () => {
    const { get, events } = setup({}, { ...unreachable, onError: "allow" });
    const response = await get("/api/json");
    expect(response.status).toBe(200);
    expect(rateHeaders(response)).toEqual({ "ratelimit-policy": POLICY });
    expect(events.map((event) => [event.kind, "decision" in event && event.decision.source])).toEqual([
      ["error", "error"],
    ]);
    expect(events[0]!.message).toMatch(/^edgelimit: no decision from Redis for GET \/api\/json, allowed/);
  });

  it('onError "deny": 429 about:blank with Retry-After, not a quota-exceeded claim', async () => {
    const { get } = setup({}, { ...unreachable, onError: "deny" });
    const response = await get("/api/json");
    expect(response.status).toBe(429);
    expect(rateHeaders(response)).toEqual({
      "cache-control": "no-store",
      "ratelimit-policy": POLICY,
      "retry-after": "1",
    });
    expect(await response.json()).toEqual({
      type: "about:blank",
      title: "Too Many Requests",
      status: 429,
      detail: "The rate limiter could not decide and refuses requests until it can. Retry after 1 second.",
      "retry-after": 1,
    });
  });
});
