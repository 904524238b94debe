import { afterEach, beforeEach, describe, expect, inject, test, vi } from "vitest";
import { type CallOptions, call, config as configFor, type Echo, envFor, limitHeaders } from "./support.js";

const QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded";
const QUOTA_TITLE = "Request cannot be satisfied as assigned quota has been exceeded";

// GCRA "2 per hour": one unit every 30 minutes, so every number below is independent of the wall clock.
const twoPerHour = { perHour: { algorithm: "gcra", limit: 2, period: "1h" } };
const onePerHour = { perHour: { algorithm: "gcra", limit: 1, period: "1h" } };

/** A config whose routes wait 15 s for Redis unless they say otherwise: only the Redis trouble tests are
 * about timeouts, and a slow machine must not make another test's decision fail open. */
function config(routes: Record<string, unknown>[], extra?: Record<string, unknown>) {
  return configFor(
    routes.map((route) => ({ timeout: "15s", ...route })),
    extra,
  );
}

const post: CallOptions = { method: "POST" };

async function statuses(env: ReturnType<typeof envFor>, path: string, n: number, options: CallOptions = {}) {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const response = await call(env, path, options);
    await response.arrayBuffer();
    out.push(response.status);
  }
  return out;
}

// The Worker decides by the wall clock: frozen during each test (Date only; timers run), so a slow
// machine cannot move a t= or a Retry-After by a second between two steps.
beforeEach(() => {
  vi.useFakeTimers({ toFake: ["Date"] });
});
afterEach(() => {
  vi.useRealTimers();
  vi.restoreAllMocks();
});

describe("routes and methods", () => {
  const loginRoute = {
    name: "login",
    match: { path: "/login", methods: ["POST"] },
    key: "ip",
    rules: twoPerHour,
  };

  test("a matching request is counted and told so; the third in an hour is refused with a problem", async () => {
    const env = envFor(config([loginRoute]));

    const first = await call(env, "/login", post);
    expect(first.status).toBe(200);
    expect(limitHeaders(first)).toEqual({
      "ratelimit-policy": '"perHour";q=2;w=3600',
      ratelimit: '"perHour";r=1;t=1800',
    });
    const second = await call(env, "/login", post);
    expect(second.status).toBe(200);
    expect(limitHeaders(second)).toEqual({
      "ratelimit-policy": '"perHour";q=2;w=3600',
      ratelimit: '"perHour";r=0;t=3600',
    });

    const third = await call(env, "/login", post);
    expect(third.status).toBe(429);
    expect(third.headers.get("content-type")).toBe("application/problem+json");
    expect(third.headers.get("cache-control")).toBe("no-store");
    expect(limitHeaders(third)).toEqual({
      "ratelimit-policy": '"perHour";q=2;w=3600',
      ratelimit: '"perHour";r=0;t=1800',
      "retry-after": "1800",
    });
    expect(await third.json()).toEqual({
      type: QUOTA_EXCEEDED,
      title: QUOTA_TITLE,
      status: 429,
      detail: 'Quota exceeded for "perHour". Retry after 1800 seconds.',
      "violated-policies": ["perHour"],
      "retry-after": 1800,
    });
  });

  test("other methods and other paths pass unlimited and without rate-limit headers", async () => {
    const env = envFor(config([loginRoute]));
    expect(await statuses(env, "/login", 3, post)).toEqual([200, 200, 429]);

    const get = await call(env, "/login");
    expect(get.status).toBe(200);
    expect(limitHeaders(get)).toEqual({});
    expect(((await get.json()) as Echo).method).toBe("GET");

    expect(await statuses(env, "/elsewhere", 5, post)).toEqual([200, 200, 200, 200, 200]);
    const other = await call(env, "/login/more", post);
    expect(other.status).toBe(200);
    expect(limitHeaders(other)).toEqual({});
  });

  test("spellings of one path count as that path: case, slashes, dot segments, escapes", async () => {
    const env = envFor(
      config([{ ...loginRoute, rules: { perHour: { algorithm: "gcra", limit: 5, period: "1h" } } }]),
    );
    const paths = ["/LOGIN", "//login/", "/x/../login", "/log%69n", "/login?next=/"];
    expect(await Promise.all(paths.map(async (p) => (await call(env, p, post)).status))).toEqual([
      200, 200, 200, 200, 200,
    ]);
    expect((await call(env, "/login", post)).status).toBe(429);
  });

  test("GET in methods also covers HEAD", async () => {
    const env = envFor(
      config([{ name: "page", match: { path: "/page", methods: ["get"] }, key: "ip", rules: onePerHour }]),
    );
    expect((await call(env, "/page", { method: "HEAD" })).status).toBe(200);
    expect((await call(env, "/page")).status).toBe(429);
  });

  test("the first matching route applies, and routes never share counters", async () => {
    const env = envFor(
      config([
        { name: "special", match: { path: "/api/special" }, key: "ip", rules: onePerHour },
        { name: "api", match: { path: "/api/*" }, key: "ip", rules: onePerHour },
      ]),
    );
    expect(await statuses(env, "/api/special", 2)).toEqual([200, 429]);
    // Same client, same rule name, same key value: only the route differs.
    expect(await statuses(env, "/api/other", 2)).toEqual([200, 429]);
    expect(await statuses(env, "/api", 1)).toEqual([429]);
  });

  test("`:name` segments and a route without match", async () => {
    const env = envFor(
      config([
        { name: "user", match: { path: "/users/:id" }, key: "path", rules: onePerHour },
        { name: "rest", key: "global", rules: twoPerHour },
      ]),
    );
    expect(await statuses(env, "/users/1", 2)).toEqual([200, 429]);
    expect(await statuses(env, "/users/2", 2)).toEqual([200, 429]);
    // /users/1/posts is not /users/:id: it falls to the catch-all route.
    expect(await statuses(env, "/users/1/posts", 3)).toEqual([200, 200, 429]);
  });

  test("cost: each request takes that many units", async () => {
    const env = envFor(
      config([
        {
          name: "heavy",
          key: "ip",
          cost: 2,
          rules: { perHour: { algorithm: "gcra", limit: 3, period: "1h" } },
        },
      ]),
    );
    const first = await call(env, "/report");
    expect(first.status).toBe(200);
    expect(first.headers.get("ratelimit")).toBe('"perHour";r=1;t=2400');
    expect((await call(env, "/report")).status).toBe(429);
  });
});

describe("key kinds", () => {
  test("ip: counted per CF-Connecting-IP; X-Forwarded-For and X-Real-IP are ignored", async () => {
    const env = envFor(config([{ name: "ip", key: "ip", rules: onePerHour }]));
    expect(await statuses(env, "/", 2, { ip: "192.0.2.10" })).toEqual([200, 429]);
    // The exhausted client cannot pose as someone else...
    const forged = {
      ip: "192.0.2.10",
      headers: { "X-Forwarded-For": "192.0.2.99", "X-Real-IP": "192.0.2.98" },
    };
    expect(await statuses(env, "/", 1, forged)).toEqual([429]);
    // ...and nobody can spend the exhausted client's quota, or be blamed for it, by naming it.
    const framed = {
      ip: "192.0.2.11",
      headers: { "X-Forwarded-For": "192.0.2.10", "X-Real-IP": "192.0.2.10" },
    };
    expect(await statuses(env, "/", 2, framed)).toEqual([200, 429]);
    expect(await statuses(env, "/", 1, { ip: "192.0.2.12" })).toEqual([200]);
  });

  test("ip: IPv6 clients are counted per /64; an IPv4-mapped address is its IPv4 address", async () => {
    const env = envFor(config([{ name: "ip", key: "ip", rules: twoPerHour }]));
    expect(await statuses(env, "/", 1, { ip: "2001:db8:1:2::1" })).toEqual([200]);
    expect(await statuses(env, "/", 2, { ip: "2001:DB8:1:2:ffff:0:0:9" })).toEqual([200, 429]);
    expect(await statuses(env, "/", 1, { ip: "2001:db8:1:3::1" })).toEqual([200]);
    expect(await statuses(env, "/", 1, { ip: "198.18.0.5" })).toEqual([200]);
    expect(await statuses(env, "/", 2, { ip: "::ffff:198.18.0.5" })).toEqual([200, 429]);
  });

  test("ip: no CF-Connecting-IP (or an unparseable one) is a 401", async () => {
    const env = envFor(config([{ name: "ip", key: "ip", rules: onePerHour }]));
    for (const ip of [null, "not-an-ip"]) {
      const response = await call(env, "/", { ip });
      expect(response.status).toBe(401);
      expect(response.headers.get("content-type")).toBe("application/problem+json");
      expect(await response.json()).toEqual({
        type: "about:blank",
        title: "Unauthorized",
        status: 401,
        detail: "This endpoint is rate limited per client, and the request does not say who the client is.",
      });
    }
  });

  test("header:NAME counts per header value; a missing header is a 401", async () => {
    const env = envFor(config([{ name: "api", key: "header:X-API-Key", rules: onePerHour }]));
    const as = (key: string) => ({ headers: { "x-api-key": key } });
    expect(await statuses(env, "/", 2, as("key-1"))).toEqual([200, 429]);
    expect(await statuses(env, "/", 2, { ...as("key-2"), ip: "192.0.2.50" })).toEqual([200, 429]);
    expect(await statuses(env, "/", 1)).toEqual([401]);
    expect(await statuses(env, "/", 1, as("  "))).toEqual([401]);
  });

  test("cookie:NAME counts per cookie value; a missing cookie is a 401", async () => {
    const env = envFor(config([{ name: "session", key: "cookie:sid", rules: onePerHour }]));
    const as = (cookie: string) => ({ headers: { cookie } });
    expect(await statuses(env, "/", 2, as("theme=dark; sid=abc"))).toEqual([200, 429]);
    expect(await statuses(env, "/", 1, as('sid="abc"'))).toEqual([429]);
    expect(await statuses(env, "/", 1, as("sid=def"))).toEqual([200]);
    expect(await statuses(env, "/", 1, as("sidx=abc"))).toEqual([401]);
    expect(await statuses(env, "/", 1)).toEqual([401]);
  });

  test("path counts per path, whoever asks; global counts everyone together", async () => {
    const env = envFor(
      config([
        { name: "files", match: { path: "/files/*" }, key: "path", rules: onePerHour },
        { name: "all", key: "global", rules: onePerHour },
      ]),
    );
    expect(await statuses(env, "/files/a", 1, { ip: "192.0.2.1" })).toEqual([200]);
    expect(await statuses(env, "/files/a", 1, { ip: "192.0.2.2" })).toEqual([429]);
    expect(await statuses(env, "/files/b", 1, { ip: "192.0.2.2" })).toEqual([200]);
    expect(await statuses(env, "/x", 1, { ip: "192.0.2.1" })).toEqual([200]);
    expect(await statuses(env, "/y", 1, { ip: "192.0.2.2", headers: { "x-api-key": "other" } })).toEqual([
      429,
    ]);
  });
});

describe("shadow mode", () => {
  test("a would-be refusal is forwarded, marked, and logged; nothing is refused", async () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const env = envFor(config([{ name: "trial", key: "ip", mode: "shadow", rules: onePerHour }]));

    const first = await call(env, "/shadowed");
    expect(first.status).toBe(200);
    expect(limitHeaders(first)).toEqual({
      "ratelimit-policy": '"perHour";q=1;w=3600',
      ratelimit: '"perHour";r=0;t=3600',
    });
    expect(warn).not.toHaveBeenCalled();

    const second = await call(env, "/shadowed", { method: "POST", body: "payload" });
    expect(second.status).toBe(200);
    expect(limitHeaders(second)).toEqual({
      "ratelimit-policy": '"perHour";q=1;w=3600',
      ratelimit: '"perHour";r=0;t=3600',
      "edgelimit-shadow": "denied",
    });
    const echo = (await second.json()) as Echo;
    expect([echo.method, echo.url, echo.body]).toEqual(["POST", "/shadowed", "payload"]);
    expect(warn).toHaveBeenCalledTimes(1);
    const line = String(warn.mock.calls[0]![0]);
    // The retry is counted in ms from the first request: an hour less the few ms between the two.
    const retry =
      /^edgelimit shadow: would deny POST \/shadowed \(rule "perHour", retry in (\d+) ms\) \[route "trial"\]$/.exec(
        line,
      );
    expect(retry, line).not.toBeNull();
    expect(3_600_000 - Number(retry![1])).toBeGreaterThanOrEqual(0);
    expect(3_600_000 - Number(retry![1])).toBeLessThan(1000);
  });

  test("a missing key is forwarded too, marked no-key", async () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const env = envFor(
      config([{ name: "trial", key: "header:x-api-key", mode: "shadow", rules: onePerHour }]),
    );
    const response = await call(env, "/status/404");
    expect(response.status).toBe(404);
    expect(await response.text()).toBe("origin says 404");
    expect(limitHeaders(response)).toEqual({ "edgelimit-shadow": "no-key" });
    expect(warn.mock.calls).toEqual([
      ['edgelimit shadow: would answer 401 to GET /status/404 (no key) [route "trial"]'],
    ]);
  });
});

describe("allow and deny lists", () => {
  const lists = {
    allow: ["203.0.113.7", "2001:db8:a11::/48"],
    deny: ["198.51.100.0/24", "2001:db8:bad::/48", "192.0.2.128/25"],
  };
  const forbidden = {
    type: "about:blank",
    title: "Forbidden",
    status: 403,
    detail: "Requests from this address are not accepted.",
  };

  test("denied addresses get a 403 problem, on any path, IPv4, IPv6 and IPv4-mapped", async () => {
    const env = envFor(config([{ name: "ip", key: "ip", rules: onePerHour }], lists));
    for (const ip of [
      "198.51.100.0",
      "198.51.100.255",
      "::ffff:198.51.100.7",
      "2001:db8:bad:ffff::1",
      "192.0.2.200",
    ]) {
      const response = await call(env, "/anything", { ip });
      expect(response.status, ip).toBe(403);
      expect(response.headers.get("content-type")).toBe("application/problem+json");
      expect(await response.json()).toEqual(forbidden);
    }
    // Just outside each range: not denied (and counted as usual).
    for (const ip of ["198.51.101.0", "198.51.99.255", "2001:db8:bae::1", "192.0.2.127"]) {
      expect((await call(env, "/anything", { ip })).status, ip).toBe(200);
    }
  });

  test("allowed addresses are never limited and get no rate-limit headers", async () => {
    const env = envFor(config([{ name: "ip", key: "ip", rules: onePerHour }], lists));
    for (const ip of ["203.0.113.7", "::ffff:203.0.113.7", "2001:db8:a11:5::1"]) {
      const responses = await Promise.all([1, 2, 3].map(() => call(env, "/", { ip })));
      expect(responses.map((r) => r.status)).toEqual([200, 200, 200]);
      expect(responses.map(limitHeaders)).toEqual([{}, {}, {}]);
    }
    expect(await statuses(env, "/", 2, { ip: "203.0.113.8" })).toEqual([200, 429]);
  });
});

describe("headers", () => {
  test("legacy X-RateLimit-* fields, and one policy item per rule", async () => {
    const env = envFor(
      config(
        [
          {
            name: "api",
            key: "ip",
            rules: {
              burst: { algorithm: "gcra", limit: 2, period: "1h" },
              daily: { algorithm: "slidingLog", limit: 100, window: "1d" },
            },
          },
        ],
        { legacyHeaders: true },
      ),
    );
    const response = await call(env, "/");
    expect(response.status).toBe(200);
    const headers = limitHeaders(response);
    const reset = Number(headers["x-ratelimit-reset"]);
    expect(reset - Math.ceil(Date.now() / 1000)).toBeGreaterThanOrEqual(1799);
    expect(reset - Math.ceil(Date.now() / 1000)).toBeLessThanOrEqual(1800);
    expect({ ...headers, "x-ratelimit-reset": "checked" }).toEqual({
      "ratelimit-policy": '"burst";q=2;w=3600, "daily";q=100;w=86400',
      ratelimit: '"burst";r=1;t=1800',
      "x-ratelimit-limit": "2",
      "x-ratelimit-remaining": "1",
      "x-ratelimit-reset": "checked",
    });
  });
});

describe("the origin's answer passes through unchanged", () => {
  const everything = [
    { name: "all", key: "ip", rules: { perHour: { algorithm: "gcra", limit: 100, period: "1h" } } },
  ];

  test("method, path, query, headers and body reach the origin; Host is the origin's", async () => {
    const env = envFor(config(everything));
    const response = await call(env, "/echo/a%20b?x=1&y=two", {
      method: "PUT",
      body: "hello origin",
      headers: { "X-Custom": "kept", "Content-Type": "text/plain" },
    });
    expect(response.status).toBe(200);
    expect(response.headers.get("x-origin")).toBe("echo");
    const echo = (await response.json()) as Echo;
    expect(echo.method).toBe("PUT");
    expect(echo.url).toBe("/echo/a%20b?x=1&y=two");
    expect(echo.body).toBe("hello origin");
    expect(echo.headers["x-custom"]).toBe("kept");
    expect(echo.headers["content-type"]).toBe("text/plain");
    expect(echo.headers.host).toBe(new URL(inject("originUrl")).host);
    expect(echo.headers["x-forwarded-host"]).toBe("edge.example");
    expect(echo.headers["x-forwarded-proto"]).toBe("https");
  });

  test("origin errors keep their status, headers and body, plus the rate-limit headers", async () => {
    const env = envFor(config(everything));
    for (const status of [500, 404, 503]) {
      const response = await call(env, `/status/${status}`);
      expect(response.status).toBe(status);
      expect(response.headers.get("x-origin-status")).toBe(String(status));
      expect(response.headers.get("content-type")).toBe("text/plain");
      expect(response.headers.get("ratelimit-policy")).toBe('"perHour";q=100;w=3600');
      expect(await response.text()).toBe(`origin says ${status}`);
    }
  });

  test("redirects are handed back, not followed; every Set-Cookie survives", async () => {
    const env = envFor(config(everything));
    const redirect = await call(env, "/redirect");
    expect(redirect.status).toBe(302);
    expect(redirect.headers.get("location")).toBe("/elsewhere");
    expect(await redirect.text()).toBe("moved");
    const cookies = await call(env, "/cookies");
    expect(cookies.headers.getSetCookie()).toEqual(["a=1; Path=/", "b=2; Path=/"]);
  });

  test("a large body arrives byte for byte", async () => {
    const env = envFor(config(everything));
    const bytes = 5 * 1024 * 1024 + 7;
    const response = await call(env, `/big?bytes=${bytes}`);
    expect(response.status).toBe(200);
    const body = new Uint8Array(await response.arrayBuffer());
    expect(body.length).toBe(bytes);
    let wrong = 0;
    for (let i = 0; i < body.length; i++) if (body[i] !== i % 251) wrong++;
    expect(wrong).toBe(0);
  });

  test("the body is streamed: the first bytes arrive before the origin has finished", async () => {
    const env = envFor(config(everything));
    const gate = crypto.randomUUID();
    // The origin holds the rest of this body until the gate opens; a proxy that buffered would hang here.
    const response = await call(env, `/gate/${gate}`);
    const reader = response.body!.getReader();
    const decoder = new TextDecoder();
    const first = await reader.read();
    expect(decoder.decode(first.value)).toBe("first;");
    const open = await fetch(`${inject("originUrl")}/open/${gate}`);
    expect(open.status).toBe(204);
    let rest = "";
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) {
      rest += decoder.decode(chunk.value, { stream: true });
    }
    expect(rest).toBe("rest");
  });

  test("an origin that cannot be reached is a 502 problem", async () => {
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    const env = envFor({ ...config(everything), origin: "http://127.0.0.1:1" });
    const response = await call(env, "/");
    expect(response.status).toBe(502);
    expect(await response.json()).toEqual({
      type: "about:blank",
      title: "Bad Gateway",
      status: 502,
      detail: "The origin could not be reached.",
    });
    expect(error).toHaveBeenCalledTimes(1);
    expect(String(error.mock.calls[0]![0])).toMatch(/^edgelimit: GET \/: the origin did not answer: /);
  });
});

describe("Redis trouble follows the route's onError", () => {
  // Port 1 refuses every connection. The Redis client retries a refused request, so each decision ends
  // at the route's timeout: keep it short.
  const down = { UPSTASH_REDIS_REST_URL: "http://127.0.0.1:1" };

  test('onError "deny" refuses with an about:blank 429', async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const env = envFor(
      config([{ name: "strict", key: "ip", onError: "deny", timeout: "100ms", rules: onePerHour }]),
      down,
    );
    const response = await call(env, "/");
    expect(response.status).toBe(429);
    expect(limitHeaders(response)).toEqual({
      "ratelimit-policy": '"perHour";q=1;w=3600',
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

  test('onError "allow" (the default) forwards', async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const env = envFor(config([{ name: "lenient", key: "ip", timeout: 100, rules: onePerHour }]), down);
    const response = await call(env, "/");
    expect(response.status).toBe(200);
    expect(limitHeaders(response)).toEqual({ "ratelimit-policy": '"perHour";q=1;w=3600' });
  });
});

describe("a bad config answers 500 and says why in the log only", () => {
  async function misconfigured(env: ReturnType<typeof envFor>) {
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    error.mockClear();
    const response = await call(env, "/login", post);
    expect(response.status).toBe(500);
    const body = await response.text();
    expect(body).toBe("edgelimit is misconfigured");
    expect(body).not.toContain(inject("bridgeToken"));
    expect(error).toHaveBeenCalledTimes(1);
    const logged = String(error.mock.calls[0]![0]);
    expect(logged).not.toContain(inject("bridgeToken"));
    return logged;
  }

  test("an invalid field is named by its path", async () => {
    const logged = await misconfigured(
      envFor(
        config([
          { name: "login", key: "ip", rules: { perMinute: { algorithm: "gcra", limit: 0, period: "1m" } } },
          { name: "api", key: "header:x-forwarded-for", rules: onePerHour },
        ]),
      ),
    );
    expect(logged).toBe(
      "edgelimit is misconfigured:\n" +
        "  routes[0].rules.perMinute.limit: must be a positive whole number, got 0\n" +
        '  routes[1].key: "header:x-forwarded-for": a client can send any x-forwarded-for it likes; use "ip", which reads CF-Connecting-IP (set by Cloudflare)',
    );
  });

  test("JSON that does not parse", async () => {
    const logged = await misconfigured(envFor("{ not json"));
    expect(logged.startsWith("edgelimit is misconfigured:\n  EDGELIMIT_CONFIG: not valid JSON (")).toBe(true);
  });

  test("a missing secret or var is named, its value never shown", async () => {
    const logged = await misconfigured(
      envFor(config([]), { UPSTASH_REDIS_REST_URL: undefined, EDGELIMIT_CONFIG: undefined }),
    );
    expect(logged).toBe(
      "edgelimit is misconfigured:\n" +
        "  EDGELIMIT_CONFIG is not set: put the JSON config under [vars] in wrangler.toml\n" +
        "  UPSTASH_REDIS_REST_URL is not set: npx wrangler secret put UPSTASH_REDIS_REST_URL",
    );
    const noToken = await misconfigured(envFor(config([]), { UPSTASH_REDIS_REST_TOKEN: "" }));
    expect(noToken).toBe(
      "edgelimit is misconfigured:\n" +
        "  UPSTASH_REDIS_REST_TOKEN is not set: npx wrangler secret put UPSTASH_REDIS_REST_TOKEN",
    );
  });

  test("the same bad config keeps answering 500 on every request, logging each time", async () => {
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    const env = envFor({ origin: "https://api.example.com" });
    expect(await statuses(env, "/", 3)).toEqual([500, 500, 500]);
    expect(error.mock.calls.map((args) => args[0])).toEqual(
      Array(3).fill("edgelimit is misconfigured:\n  routes: is required"),
    );
  });
});
