import { describe, expect, it } from "vitest";
import {
  clientIp,
  createMiddleware,
  type VercelRateLimitOptions,
} from "../../../src/adapters/vercel/index.js";
import { QUOTA_EXCEEDED } from "../../../src/http/headers.js";
import { fixedWindow, gcra, Limiter, type LimiterOptions } from "../../../src/index.js";
import { bridgeRedis, manualClock, T0, uniquePrefix } from "../../support.js";

// Runs inside edge-runtime (the Vercel edge sandbox), against the real bridge.
// burst: T = 60 s, 3 at once. hourly: 5 per clock hour, whose window ends 2760 s after T0. Keys expire
// in real time by TTLs counted on the test clock (a burst unit's key lives T): these rules keep every key
// a test writes alive for a minute or more, longer than a test may run, so a slow machine cannot expire
// state between two steps.
const POLICY = '"burst";q=3;w=180, "hourly";q=5;w=3600';

function setup(options: Partial<VercelRateLimitOptions> = {}, plans?: LimiterOptions["plans"]) {
  const clock = manualClock();
  const limiter = new Limiter({
    redis: bridgeRedis(),
    prefix: uniquePrefix("vercel"),
    rules: {
      burst: gcra({ limit: 10, period: "10m", burst: 3 }),
      hourly: fixedWindow({ limit: 5, window: "1h" }),
    },
    plans,
    clock,
    timeout: 15_000, // these tests are not about timeouts: a slow machine must not make a decision fail open
  });
  const middleware = createMiddleware({ limiter, ...options });
  const call = (path: string, headers: Record<string, string> = { "x-real-ip": "203.0.113.7" }) =>
    middleware(new Request(`https://app.example${path}`, { headers }));
  return { call, clock, limiter };
}

/** A response's headers as a plain object. */
const headersOf = (response: Response | undefined) => Object.fromEntries(response!.headers);

describe("vercel createMiddleware", () => {
  it("runs inside edge-runtime", () => {
    expect((globalThis as { EdgeRuntime?: unknown }).EdgeRuntime).toBe("edge-runtime");
  });

  it("continues with the RateLimit headers, then answers 429 problem+json", async () => {
    const { call, clock } = setup();
    for (const value of ['"burst";r=2;t=60', '"burst";r=1;t=120', '"burst";r=0;t=180']) {
      const response = await call("/api/items");
      expect(response!.status).toBe(200);
      expect(response!.body).toBeNull();
      expect(headersOf(response)).toEqual({
        "x-middleware-next": "1",
        "ratelimit-policy": POLICY,
        ratelimit: value,
      });
    }

    const denied = await call("/api/items");
    expect(denied!.status).toBe(429);
    expect(headersOf(denied)).toEqual({
      "cache-control": "no-store",
      "content-type": "application/problem+json",
      "ratelimit-policy": POLICY,
      ratelimit: '"burst";r=0;t=60',
      "retry-after": "60",
    });
    expect(await denied!.json()).toEqual({
      type: QUOTA_EXCEEDED,
      title: "Request cannot be satisfied as assigned quota has been exceeded",
      status: 429,
      detail: 'Quota exceeded for "burst". Retry after 60 seconds.',
      "violated-policies": ["burst"],
      "retry-after": 60,
    });

    clock.set(T0 + 59_999);
    expect((await call("/api/items"))!.status).toBe(429);
    clock.set(T0 + 60_000);
    const later = await call("/api/items");
    expect(later!.status).toBe(200);
    // One unit dripped back and was taken: burst (0 left) still binds over hourly (1 left).
    expect(later!.headers.get("ratelimit")).toBe('"burst";r=0;t=180');
  });

  it("decides under the plan the option names, and states that plan's quota in the headers", async () => {
    const { call } = setup(
      { plan: (request) => request.headers.get("x-plan") ?? undefined },
      { pro: { burst: { burst: 6 }, hourly: { limit: 50 } } },
    );
    const pro = { "x-real-ip": "203.0.113.7", "x-plan": "pro" };
    for (let used = 1; used <= 6; used++) {
      expect(headersOf(await call("/api/items", pro))).toEqual({
        "x-middleware-next": "1",
        "ratelimit-policy": '"burst";q=6;w=360, "hourly";q=50;w=3600',
        ratelimit: `"burst";r=${6 - used};t=${60 * used}`,
      });
    }
    expect((await call("/api/items", pro))!.status).toBe(429);
    const base = await call("/api/items");
    expect(base!.status).toBe(429);
    expect(base!.headers.get("ratelimit-policy")).toBe(POLICY);
    // the 6 units counted under pro leave the base rules' hourly 5 over: it binds, to the hour's end
    expect(base!.headers.get("retry-after")).toBe("2760");
    expect(base!.headers.get("ratelimit")).toBe('"hourly";r=0;t=2760');
  });

  it("limits only the given routes, however the path is spelled", async () => {
    const { call } = setup({ routes: ["/api/*", "/login", "/users/:id"] });
    expect(await call("/about")).toBeUndefined();
    expect(await call("/login/help")).toBeUndefined();
    expect(await call("/users/42/posts")).toBeUndefined();
    expect(await call("/apix")).toBeUndefined();
    // One counter across spellings: the burst of 3 goes on three of them, and the rest are refused.
    expect((await call("/login"))!.headers.get("ratelimit")).toBe('"burst";r=2;t=60');
    expect((await call("/api"))!.headers.get("ratelimit")).toBe('"burst";r=1;t=120');
    expect((await call("/%61pi/users"))!.headers.get("ratelimit")).toBe('"burst";r=0;t=180');
    expect((await call("/API//v1/../users/"))!.status).toBe(429);
    expect((await call("/users/42"))!.status).toBe(429);
    expect((await call("/Login/"))!.status).toBe(429);
    expect(await call("/about")).toBeUndefined();
  });

  it("keeps client IPs apart, and counts one IPv6 /64 as one client", async () => {
    const { call } = setup();
    const remaining = async (ip: string) => (await call("/x", { "x-real-ip": ip }))!.headers.get("ratelimit");
    expect(await remaining("203.0.113.7")).toBe('"burst";r=2;t=60');
    expect(await remaining("203.0.113.8")).toBe('"burst";r=2;t=60');
    expect(await remaining("::ffff:203.0.113.7")).toBe('"burst";r=1;t=120');
    expect(await remaining("2001:db8:0:1::1")).toBe('"burst";r=2;t=60');
    expect(await remaining("2001:db8:0:1:ffff::2")).toBe('"burst";r=1;t=120');
    expect(await remaining("2001:db8:0:2::1")).toBe('"burst";r=2;t=60');
  });

  it("answers 401 problem+json when there is no client IP", async () => {
    const { call } = setup();
    const cases: Record<string, string>[] = [{}, { "x-real-ip": "not-an-ip" }];
    for (const headers of cases) {
      const response = await call("/api/items", headers);
      expect(response!.status).toBe(401);
      expect(response!.headers.get("content-type")).toBe("application/problem+json");
      expect((await response!.json()).title).toBe("Unauthorized");
    }
  });

  it("takes a custom key and cost, and the legacy headers", async () => {
    const { call } = setup({
      key: (request) => request.headers.get("x-api-key") ?? undefined,
      cost: (request) => (request.method === "GET" ? 1 : 3),
      legacyHeaders: true,
    });
    const response = await call("/api/items", { "x-api-key": "k1", "x-real-ip": "203.0.113.7" });
    expect(headersOf(response)).toEqual({
      "x-middleware-next": "1",
      "ratelimit-policy": POLICY,
      ratelimit: '"burst";r=2;t=60',
      "x-ratelimit-limit": "3",
      "x-ratelimit-remaining": "2",
      "x-ratelimit-reset": String((T0 + 60_000) / 1000),
    });
    // Same IP, another key: its own counter.
    expect((await call("/api/items", { "x-api-key": "k2" }))!.headers.get("ratelimit")).toBe(
      '"burst";r=2;t=60',
    );
  });

  it("charges the cost the cost function gives", async () => {
    const { call } = setup({ cost: (request) => Number(new URL(request.url).searchParams.get("units")) });
    expect((await call("/api/bulk?units=3"))!.headers.get("ratelimit")).toBe('"burst";r=0;t=180');
    expect((await call("/api/bulk?units=1"))!.status).toBe(429);
  });
});

describe("clientIp and routes", () => {
  const ip = (value: string) => clientIp(new Request("https://x.test", { headers: { "x-real-ip": value } }));

  it("canonicalizes addresses and groups IPv6 per /64", () => {
    expect(ip("203.0.113.7")).toBe("203.0.113.7");
    expect(ip("::ffff:203.0.113.7")).toBe("203.0.113.7");
    expect(ip("2001:DB8::1")).toBe("2001:db8::/64");
    expect(ip("203.0.113.7:443")).toBeUndefined();
    expect(clientIp(new Request("https://x.test"))).toBeUndefined();
  });

  it("refuses a route pattern it cannot read, naming it", () => {
    const limiter = new Limiter({ redis: bridgeRedis(), rules: { r: gcra({ limit: 1, period: "1s" }) } });
    expect(() => createMiddleware({ limiter, routes: ["/api/*/x"] })).toThrow(
      /^routes\[0\]: .*"\*" may only/,
    );
    expect(() => createMiddleware({ limiter, routes: ["/ok", "api"] })).toThrow(
      /^routes\[1\]: .*must start with/,
    );
  });
});
