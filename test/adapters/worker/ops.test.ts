// The ops page and its JSON inside workerd: the three ways in (bearer, HTTP Basic, the login form's
// cookie), the ways refused (a wrong token, a token in a URL, the overrides API by Basic or cookie), the
// headers that keep the page inert (CSP with no script, nosniff, no-store), and `minutes` checked.
import { describe, expect, inject, test, vi } from "vitest";
import { checkSession, sessionValue } from "../../../src/adapters/worker/admin.js";
import { escapeHtml, opsPage } from "../../../src/adapters/worker/ops-page.js";
import { call, config, envFor } from "./support.js";

const TOKEN = "ops-test-token-0123456789";
const perMinute = { perMinute: { algorithm: "gcra", limit: 3, period: "1m" } };
const routes = [
  { name: "api", match: { path: "/api/*" }, key: "header:x-api-key", rules: perMinute },
  { name: "pages", key: "path", mode: "shadow", rules: perMinute },
];
const env = (token: string | null = TOKEN, extra: Record<string, unknown> = {}) =>
  envFor(config(routes, extra), token === null ? {} : { EDGELIMIT_ADMIN_TOKEN: token });
const sha256 = async (text: string) =>
  `sha256:${Array.from(new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text))), (b) => b.toString(16).padStart(2, "0")).join("")}`;
const basic = (user: string, password: string) =>
  `Basic ${btoa(String.fromCharCode(...new TextEncoder().encode(`${user}:${password}`)))}`;

async function hmacHex(token: string, text: string): Promise<string> {
  const encoder = new TextEncoder();
  const key = await crypto.subtle.importKey(
    "raw",
    encoder.encode(token),
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign"],
  );
  const mac = new Uint8Array(await crypto.subtle.sign("HMAC", key, encoder.encode(text)));
  return Array.from(mac, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** One command to the test bridge's Redis, its result. */
async function redis(command: string[]): Promise<unknown> {
  const response = await fetch(inject("bridgeUrl"), {
    method: "POST",
    headers: { Authorization: `Bearer ${inject("bridgeToken")}` },
    body: JSON.stringify(command),
  });
  return ((await response.json()) as { result: unknown }).result;
}

async function problemOf(response: Response, status: number) {
  expect(response.status).toBe(status);
  expect(response.headers.get("content-type")).toBe("application/problem+json");
  return ((await response.json()) as { detail: string }).detail;
}

/** The headers every HTML answer carries. */
function expectInert(response: Response) {
  const csp = response.headers.get("content-security-policy") ?? "";
  expect(csp).toMatch(
    /^default-src 'none'; style-src 'sha256-[A-Za-z0-9+/]{43}='; img-src data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'$/,
  );
  expect(response.headers.get("content-type")).toBe("text/html; charset=utf-8");
  expect(response.headers.get("x-content-type-options")).toBe("nosniff");
  expect(response.headers.get("cache-control")).toBe("no-store");
}

describe("the ops page's ways in", () => {
  test("without the secret the page, its JSON and the login are 404s", async () => {
    for (const path of ["/_edgelimit", "/_edgelimit/", "/_edgelimit/analytics", "/_edgelimit/login"]) {
      expect(await problemOf(await call(env(null), path), 404)).toBe("path: nothing is served here");
    }
  });

  test("no token: a 401 that asks for Basic, with the login form as its body and nothing able to run", async () => {
    for (const path of ["/_edgelimit", "/_edgelimit/"]) {
      const response = await call(env(), path);
      expect(response.status).toBe(401);
      expect(response.headers.get("www-authenticate")).toBe('Basic realm="edgelimit"');
      expectInert(response);
      const body = await response.text();
      expect(body).toContain('<form method="post" action="/_edgelimit/login">');
      expect(body).toContain('name="token" autocomplete="current-password"');
      expect(body).not.toMatch(/<script/i);
      expect(body).not.toContain('data-route="api"');
    }
  });

  test("bearer, or Basic with any user and the token as password, is served the page", async () => {
    const e = env();
    for (const authorization of [`Bearer ${TOKEN}`, basic("admin", TOKEN), basic("", TOKEN)]) {
      const response = await call(e, "/_edgelimit/", { headers: { Authorization: authorization } });
      expect(response.status, authorization).toBe(200);
      expectInert(response);
      const body = await response.text();
      expect(body).toContain('<section class="route" data-route="api">');
      expect(body).toContain('<section class="route" data-route="pages">');
      expect(body).not.toMatch(/<script/i);
    }
  });

  test("a wrong token, by any way, is refused", async () => {
    const e = env();
    const wrong = [
      `Bearer ${TOKEN}x`,
      basic("admin", `${TOKEN}x`),
      basic("admin", TOKEN.slice(0, -1)),
      basic(TOKEN, ""),
      `Basic ${TOKEN}`,
      "Basic !!!",
      TOKEN,
    ];
    // an address of its own for each: wrong tokens from one address are throttled (tested below)
    for (const [i, authorization] of wrong.entries()) {
      const ip = `198.51.100.${i}`;
      const page = await call(e, "/_edgelimit/", { headers: { Authorization: authorization }, ip });
      expect(page.status).toBe(401);
      expect(await page.text()).not.toContain("data-route");
      const data = await call(e, "/_edgelimit/analytics", { headers: { Authorization: authorization }, ip });
      expect(await problemOf(data, 401)).toBe(
        'authorization: send "Authorization: Bearer <EDGELIMIT_ADMIN_TOKEN>" or HTTP Basic',
      );
      expect(data.headers.get("www-authenticate")).toBe('Bearer realm="edgelimit", Basic realm="edgelimit"');
    }
    const forged = await call(e, "/_edgelimit/", { headers: { Cookie: `edgelimit_session=${TOKEN}` } });
    expect(forged.status).toBe(401);
  });

  test("GET {admin}/login is the form, without a Basic challenge", async () => {
    const response = await call(env(), "/_edgelimit/login");
    expect(response.status).toBe(200);
    expect(response.headers.get("www-authenticate")).toBeNull();
    expectInert(response);
    expect(await response.text()).toContain('<form method="post" action="/_edgelimit/login">');
  });

  test("the login form sets an HttpOnly, Secure, SameSite=Strict cookie for 12 h that is not the token; logout ends it for good", async () => {
    const e = env();
    const wrong = await call(e, "/_edgelimit/login", {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ token: "nope" }).toString(),
    });
    expect(wrong.status).toBe(401);
    expect(wrong.headers.get("set-cookie")).toBeNull();
    expectInert(wrong);
    expect(await wrong.text()).toContain("That is not the admin token.");

    const right = await call(e, "/_edgelimit/login", {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ token: TOKEN }).toString(),
      redirect: "manual",
    });
    expect(right.status).toBe(303);
    expect(right.headers.get("location")).toBe("/_edgelimit/");
    const setCookie = right.headers.get("set-cookie") ?? "";
    const match =
      /^edgelimit_session=((\d+)\.(\d+)\.[0-9a-f]{32})\.([0-9a-f]{64}); HttpOnly; Secure; SameSite=Strict; Path=\/_edgelimit; Max-Age=43200$/.exec(
        setCookie,
      );
    expect(match, setCookie).not.toBeNull();
    expect(setCookie).not.toContain(TOKEN);
    const [, body, issuedAt, expiresAt, mac] = match!;
    expect(Number(expiresAt) - Number(issuedAt)).toBe(43_200_000);
    expect(Math.abs(Number(issuedAt) - Date.now())).toBeLessThan(60_000);
    // HMAC-SHA256 of "edgelimit-session.<issuedAt>.<expiresAt>.<nonce>" under the token, computed here
    expect(mac).toBe(await hmacHex(TOKEN, `edgelimit-session.${body}`));

    const cookie = `other=1; edgelimit_session=${body}.${mac}`;
    const page = await call(e, "/_edgelimit/", { headers: { Cookie: cookie } });
    expect(page.status).toBe(200);
    expect(await page.text()).toContain('data-route="api"');
    const data = await call(e, "/_edgelimit/analytics", { headers: { Cookie: cookie } });
    expect(data.status).toBe(200);
    // the overrides stay bearer only: neither the cookie nor Basic reaches them
    const overrides = await call(e, "/_edgelimit/overrides/api", { headers: { Cookie: cookie } });
    expect(overrides.status).toBe(401);
    const byBasic = await call(e, "/_edgelimit/overrides/api", {
      headers: { Authorization: basic("a", TOKEN) },
    });
    expect(byBasic.status).toBe(401);

    // a session of another token is no session
    const other = await call(env("another-token-0123456789"), "/_edgelimit/", {
      headers: { Cookie: cookie },
    });
    expect(other.status).toBe(401);

    const out = await call(e, "/_edgelimit/logout", {
      method: "POST",
      headers: { Cookie: cookie },
      redirect: "manual",
    });
    expect(out.status).toBe(303);
    expect(out.headers.get("location")).toBe("/_edgelimit/login");
    expect(out.headers.get("set-cookie")).toBe(
      "edgelimit_session=; HttpOnly; Secure; SameSite=Strict; Path=/_edgelimit; Max-Age=0",
    );
    // the cookie captured before logout opens nothing after it: the page, the JSON, in any isolate
    // (the end is in Redis until the session would have expired anyway)
    expect((await call(e, "/_edgelimit/", { headers: { Cookie: cookie } })).status).toBe(401);
    expect((await call(e, "/_edgelimit/analytics", { headers: { Cookie: cookie } })).status).toBe(401);
    const prefix = JSON.parse(e.EDGELIMIT_CONFIG as string).prefix;
    const ended = `${prefix}:admin:ended:${body!.split(".")[2]}`;
    expect(await redis(["GET", ended])).toBe("1");
    expect(await redis(["PEXPIRETIME", ended])).toBe(Number(expiresAt));
    // another session (a second login) goes on
    const again = await call(e, "/_edgelimit/login", {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ token: TOKEN }).toString(),
      redirect: "manual",
    });
    const second = /^edgelimit_session=([^;]+);/.exec(again.headers.get("set-cookie") ?? "")![1];
    expect(second).not.toBe(`${body}.${mac}`);
    const page2 = await call(e, "/_edgelimit/", { headers: { Cookie: `edgelimit_session=${second}` } });
    expect(page2.status).toBe(200);
    await page2.arrayBuffer();
  });

  test("a session ends at its signed expiry; a value not signed by the token, or stretched, is none", async () => {
    const e = env();
    const open = async (value: string) => {
      const response = await call(e, "/_edgelimit/", { headers: { Cookie: `edgelimit_session=${value}` } });
      await response.arrayBuffer();
      return response.status;
    };
    const now = Date.now();
    const nonce = "0123456789abcdef0123456789abcdef";
    expect(await open(await sessionValue(TOKEN, now - 60_000, nonce))).toBe(200);
    // issued 12 h and 1 s ago, signed with the token: expired
    expect(await open(await sessionValue(TOKEN, now - 43_201_000, nonce))).toBe(401);
    // signed for 10 years: never issued by the Worker, refused
    const body = `${now}.${now + 315_360_000_000}.${nonce}`;
    expect(await open(`${body}.${await hmacHex(TOKEN, `edgelimit-session.${body}`)}`)).toBe(401);
    // the clock moved instead of waited: valid until the last ms before its expiry, not at it
    const value = await sessionValue(TOKEN, 1_000_000, nonce);
    const check = (at: number) => checkSession(value, TOKEN, at);
    expect(await check(1_000_000)).toEqual({ ok: true, nonce, expiresAt: 1_000_000 + 43_200_000 });
    expect(await check(1_000_000 + 43_199_999)).toEqual({ ok: true, nonce, expiresAt: 44_200_000 });
    expect(await check(1_000_000 + 43_200_000)).toEqual({ ok: false, why: "expired" });
    expect(await check(999_999)).toEqual({ ok: false, why: "expired" }); // issued in the future
    expect(await checkSession(value, `${TOKEN}x`, 1_000_001)).toEqual({ ok: false, why: "forged" });
    const tampered = value.replace(/^1000000\./, "1000001.");
    expect(await checkSession(tampered, TOKEN, 1_000_002)).toEqual({ ok: false, why: "forged" });
    expect(await checkSession("", TOKEN, 1_000_002)).toEqual({ ok: false, why: "forged" });
  });

  test("Redis down: a session cookie is refused (nobody can say it was not logged out of), and logout is a 503", async () => {
    const e = envFor(config(routes), {
      EDGELIMIT_ADMIN_TOKEN: TOKEN,
      UPSTASH_REDIS_REST_URL: "http://127.0.0.1:9",
      UPSTASH_REDIS_REST_TOKEN: "ops-session-redis-down",
    });
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    const cookie = `edgelimit_session=${await sessionValue(TOKEN, Date.now())}`;
    const page = await call(e, "/_edgelimit/", { headers: { Cookie: cookie } });
    expect(page.status).toBe(401);
    expect(await page.text()).not.toContain("data-route");
    const out = await call(e, "/_edgelimit/logout", { method: "POST", headers: { Cookie: cookie } });
    expect(await problemOf(out, 503)).toBe("redis: the session could not be ended; try again");
    expect(out.headers.get("set-cookie")).toBeNull();
    // bearer still opens the page (the wrong-token count cannot be read: tries are let through)
    const bearer = await call(e, "/_edgelimit/", { headers: { Authorization: `Bearer ${TOKEN}` } });
    expect(bearer.status).toBe(200);
    await bearer.arrayBuffer();
    error.mockRestore();
  });

  test("wrong tokens from one address: 429 with Retry-After after 5 in a minute, by bearer, Basic, cookie or form alike", async () => {
    const e = env();
    const ip = "203.0.113.50";
    const form = (token: string, from = ip) =>
      call(e, "/_edgelimit/login", {
        method: "POST",
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ token }).toString(),
        redirect: "manual",
        ip: from,
      });
    const page = (authorization: string, from = ip) =>
      call(e, "/_edgelimit/", { headers: { Authorization: authorization }, ip: from });
    const forged = `edgelimit_session=${"1".repeat(13)}.${"2".repeat(13)}.${"a".repeat(32)}.${"b".repeat(64)}`;
    const tries = [
      () => page(`Bearer ${TOKEN}x`),
      () => page(basic("a", "nope")),
      () => form("nope"),
      () => call(e, "/_edgelimit/analytics", { headers: { Cookie: forged }, ip }),
      () => call(e, "/_edgelimit/analytics", { headers: { Authorization: "Bearer x" }, ip }),
    ];
    const statuses: number[] = [];
    for (const attempt of tries) {
      const response = await attempt();
      await response.arrayBuffer();
      statuses.push(response.status);
      // a right token after each is served and not counted
      const right = await page(`Bearer ${TOKEN}`);
      await right.arrayBuffer();
      statuses.push(right.status);
    }
    // the fifth wrong one used the address's tries up: past it every try, a right token included, is
    // a 429 (answering a right token then would tell a guess from a hit)
    expect(statuses).toEqual([401, 200, 401, 200, 401, 200, 401, 200, 401, 429]);
    const refused = [
      await page(`Bearer ${TOKEN}x`),
      await page(`Bearer ${TOKEN}`),
      await page(basic("a", TOKEN)),
      await form(TOKEN),
      await call(e, "/_edgelimit/analytics", { headers: { Authorization: `Bearer ${TOKEN}` }, ip }),
    ];
    for (const response of refused) {
      expect(response.status).toBe(429);
      const seconds = Number(response.headers.get("retry-after"));
      expect(seconds).toBeGreaterThanOrEqual(50);
      expect(seconds).toBeLessThanOrEqual(60);
      const text = await response.text();
      expect(text).toContain(`try again in ${seconds} s`);
      expect(text).not.toContain("data-route");
    }
    expect(refused[3]!.headers.get("set-cookie")).toBeNull();
    // another address is not affected, by its own wrong token nor by this one's
    const other = "203.0.113.51";
    expect((await page(`Bearer ${TOKEN}x`, other)).status).toBe(401);
    const served = await page(`Bearer ${TOKEN}`, other);
    expect(served.status).toBe(200);
    await served.arrayBuffer();
    expect((await form(TOKEN, other)).status).toBe(303);
    // a request with no token at all is no try: the login form, not a 429
    const bare = await call(e, "/_edgelimit/", { ip });
    expect(bare.status).toBe(401);
    await bare.arrayBuffer();
  });

  test("the cookie's path follows adminPath", async () => {
    const response = await call(env(TOKEN, { adminPath: "/ops/edge" }), "/ops/edge/login", {
      method: "POST",
      body: new URLSearchParams({ token: TOKEN }).toString(),
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      redirect: "manual",
    });
    expect(response.headers.get("location")).toBe("/ops/edge/");
    expect(response.headers.get("set-cookie")).toMatch(/; Path=\/ops\/edge; Max-Age=43200$/);
  });

  test("a token in a URL is refused, even the right one, by every path under adminPath", async () => {
    const e = env();
    for (const path of [
      `/_edgelimit/?token=${TOKEN}`,
      `/_edgelimit/analytics?token=${TOKEN}`,
      `/_edgelimit/overrides/api?token=${TOKEN}`,
      `/_edgelimit/login?token=${TOKEN}`,
    ]) {
      const detail = await problemOf(
        await call(e, path, { headers: { Authorization: `Bearer ${TOKEN}` } }),
        400,
      );
      expect(detail).toMatch(/^token: never put the token in a URL/);
      expect(detail).not.toContain(TOKEN);
    }
  });

  test("methods: the page is GET, login and logout POST", async () => {
    const e = env();
    const auth = { Authorization: `Bearer ${TOKEN}` };
    const cases: [string, string, number, string][] = [
      ["POST", "/_edgelimit/", 405, "GET, HEAD"],
      ["DELETE", "/_edgelimit/analytics", 405, "GET"],
      ["PUT", "/_edgelimit/login", 405, "GET, HEAD, POST"],
      ["GET", "/_edgelimit/logout", 405, "POST"],
    ];
    for (const [method, path, status, allow] of cases) {
      const response = await call(e, path, { method, headers: auth });
      expect(response.status, `${method} ${path}`).toBe(status);
      expect(response.headers.get("allow")).toBe(allow);
      await response.arrayBuffer();
    }
  });
});

describe("the JSON", () => {
  test("minutes: 1 to 1440, a clear 400 naming it otherwise", async () => {
    const e = env();
    const auth = { Authorization: `Bearer ${TOKEN}` };
    for (const minutes of ["0", "1441", "-5", "1.5", "x", "", "99999999"]) {
      const detail = await problemOf(
        await call(e, `/_edgelimit/analytics?minutes=${minutes}`, { headers: auth }),
        400,
      );
      expect(detail).toBe(`minutes: must be a whole number from 1 to 1440, got ${JSON.stringify(minutes)}`);
    }
    for (const minutes of ["1", "60", "1440"]) {
      const response = await call(e, `/_edgelimit/analytics?minutes=${minutes}`, { headers: auth });
      expect(response.status).toBe(200);
      expect(response.headers.get("content-type")).toBe("application/json");
      expect(response.headers.get("x-content-type-options")).toBe("nosniff");
      expect(response.headers.get("cache-control")).toBe("no-store");
      const body = (await response.json()) as { routes: Record<string, unknown> };
      expect(Object.keys(body.routes)).toEqual(["api", "pages"]);
    }
  });

  test("with analytics off each route says how to turn them on; the breaker is still read", async () => {
    const response = await call(env(), "/_edgelimit/analytics", {
      headers: { Authorization: `Bearer ${TOKEN}` },
    });
    expect(await response.json()).toEqual({
      routes: {
        api: { error: 'analytics are off: add "analytics": true to the config' },
        pages: { error: 'analytics are off: add "analytics": true to the config' },
      },
      breaker: { enabled: true, state: "closed", opened: 0 },
    });
  });
});

describe("escaping", () => {
  test("escapeHtml leaves no markup and no way out of a quoted attribute", () => {
    expect(escapeHtml(`<img src=x onerror=alert(1)>"'&`)).toBe(
      "&lt;img src=x onerror=alert(1)&gt;&quot;&#39;&amp;",
    );
  });
});

describe("the breaker's line", () => {
  test("shows each state the breaker reads, and an unknown one only with no route", () => {
    const line = (breaker: { state: string; opened?: number } | undefined) =>
      /<p class="breaker".*?<\/p>/.exec(
        opsPage({ adminPath: "/_edgelimit", routes: [], breaker, from: 0, to: 60_000 }),
      )![0];
    expect(line({ state: "half-open", opened: 2 })).toBe(
      '<p class="breaker" data-breaker="half-open">Redis circuit breaker: <b class="state-half-open">half-open</b> <span class="muted" data-opened="2">(opened 2 times in this isolate)</span></p>',
    );
    expect(line({ state: "closed", opened: 0 })).toContain('data-breaker="closed"');
    expect(line({ state: "open", opened: 1 })).toContain("(opened 1 time in this isolate)");
    expect(line(undefined)).toBe(
      '<p class="breaker" data-breaker="unknown">Redis circuit breaker: <b class="state-unknown">unknown</b></p>',
    );
  });
});

describe("with analytics on", () => {
  const on = { analytics: { flushEvery: "1s", top: 5, retention: "2h" } };
  const auth = { Authorization: `Bearer ${TOKEN}` };

  test("the JSON and the page show each route's exact counts, flushed by the request that asks", async () => {
    const e = env(TOKEN, on);
    const statuses: number[] = [];
    for (let i = 0; i < 5; i++) {
      const response = await call(e, "/api/x", { headers: { "X-API-Key": "k1" } });
      await response.arrayBuffer();
      statuses.push(response.status);
    }
    expect(statuses).toEqual([200, 200, 200, 429, 429]);
    for (let i = 0; i < 4; i++) await (await call(e, "/p/a")).arrayBuffer();

    const response = await call(e, "/_edgelimit/analytics?minutes=5", { headers: auth });
    expect(response.status).toBe(200);
    const body = (await response.json()) as {
      routes: Record<
        string,
        { decisions: { allowed: number; denied: number }; shadowDenied: number } & Record<string, unknown>
      >;
      breaker: { state: string };
    };
    expect(body.breaker).toMatchObject({ state: "closed" });
    const { api, pages } = body.routes;
    expect(api).toMatchObject({
      decisions: { allowed: 3, denied: 2, bySource: { redis: 4, cache: 1, lease: 0, error: 0 } },
      denials: { perMinute: 2 },
      nearLimit: 1,
      top: [{ identifier: `api:${await sha256("k1")}`, denied: 2, allowed: 3 }],
      shadowDenied: 0,
    });
    expect(api!.minutes).toHaveLength(5);
    expect(pages).toMatchObject({
      decisions: { allowed: 3, denied: 1 },
      shadowDenied: 1,
      top: [{ identifier: "pages:/p/a" }],
    });

    const page = await call(e, "/_edgelimit/", { headers: auth });
    const html = await page.text();
    expect(html).toContain('data-allowed="3" data-denied="2" data-shadow-denied="0" data-near-limit="1"');
    expect(html).toContain('data-allowed="3" data-denied="1" data-shadow-denied="1" data-near-limit="1"');
    expect(html).toContain(`<tr data-identifier="${await sha256("k1")}" data-denied="2" data-allowed="3">`);
    expect(html).not.toContain("k1");
    expect(html.match(/<g data-at=/g)).toHaveLength(120);
  });

  test("each route's counts are flushed through the request's ctx.waitUntil, once flushEvery has passed", async () => {
    // The Limiter's clock is Date.now: faked (Date only), so flushEvery passes without a wait.
    vi.useFakeTimers({ toFake: ["Date"] });
    try {
      // ahead of every real time other tests used (one flusher per Redis per isolate, shared with them)
      const start = (Math.floor(Date.now() / 60_000) + 2) * 60_000 + 10_000;
      vi.setSystemTime(start);
      const document = config(routes, on);
      const e = envFor(document, { EDGELIMIT_ADMIN_TOKEN: TOKEN });
      const key = `${document.prefix}:analytics:{api}:${Math.floor(start / 60_000)}`;
      const stored = async () => {
        const response = await fetch(inject("bridgeUrl"), {
          method: "POST",
          headers: { Authorization: `Bearer ${inject("bridgeToken")}` },
          body: JSON.stringify(["HGETALL", key]),
        });
        const pairs = ((await response.json()) as { result: string[] }).result;
        return Object.fromEntries(pairs.flatMap((v, i) => (i % 2 === 0 ? [[v, Number(pairs[i + 1])]] : [])));
      };
      const request = async () => (await call(e, "/api/x", { headers: { "X-API-Key": "k" } })).arrayBuffer();
      // the first decision flushes what the shared flusher holds, or starts its clock
      await request();
      const first = await stored();
      expect([{}, { allowed: 1, "source:redis": 1 }]).toContainEqual(first);
      vi.setSystemTime(start + 999);
      await request();
      expect(await stored()).toEqual(first); // counted in the isolate only
      vi.setSystemTime(start + 1000);
      await request(); // due: its flush was handed to ctx.waitUntil, which call() waits for
      expect(await stored()).toEqual({ allowed: 3, "source:redis": 3, near: 1 });
      await request(); // denied, counted, not yet flushed
      expect(await stored()).toEqual({ allowed: 3, "source:redis": 3, near: 1 });
    } finally {
      vi.useRealTimers();
    }
  });

  test("minutes reaches back at most the retention", async () => {
    const detail = await problemOf(
      await call(env(TOKEN, on), "/_edgelimit/analytics?minutes=121", { headers: auth }),
      400,
    );
    expect(detail).toBe('minutes: must be a whole number from 1 to 120 (the analytics retention), got "121"');
  });

  test("Redis down: the page is still served, each route saying why it has no report, and the breaker's state", async () => {
    // a token of its own: a Redis (and so a breaker) no other test of this isolate uses
    const e = envFor(
      config(
        routes.map((route) => ({ ...route, timeout: "200ms" })),
        on,
      ),
      {
        EDGELIMIT_ADMIN_TOKEN: TOKEN,
        UPSTASH_REDIS_REST_URL: "http://127.0.0.1:9",
        UPSTASH_REDIS_REST_TOKEN: "ops-redis-down",
      },
    );
    const noReport = "Redis did not answer for this route's report (unreachable); reload to try again";
    const json = async () =>
      (await (await call(e, "/_edgelimit/analytics", { headers: auth })).json()) as Record<string, unknown>;
    const page = await call(e, "/_edgelimit/", { headers: auth });
    expect(page.status).toBe(200);
    const html = await page.text();
    expect(
      html.match(
        /data-error>Redis did not answer for this route&#39;s report \(unreachable\); reload to try again</g,
      ),
    ).toHaveLength(2);
    // no decision has failed yet: the breaker is closed, and says so though no report came back
    expect(html).toContain('data-breaker="closed"');
    expect(await json()).toEqual({
      routes: { api: { error: noReport }, pages: { error: noReport } },
      breaker: { enabled: true, state: "closed", opened: 0 },
    });
    // five decisions fail open (the default breaker's failures), the sixth is refused by the open breaker
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) {
      const response = await call(e, "/api/x", { headers: { "X-API-Key": "k" } });
      await response.arrayBuffer();
      statuses.push(response.status);
    }
    expect(statuses).toEqual(Array(6).fill(200));
    const open = await (await call(e, "/_edgelimit/", { headers: auth })).text();
    expect(open).toContain(
      '<p class="breaker" data-breaker="open">Redis circuit breaker: <b class="state-open">open</b> <span class="muted" data-opened="1">(opened 1 time in this isolate)</span></p>',
    );
    expect(await json()).toEqual({
      routes: { api: { error: noReport }, pages: { error: noReport } },
      breaker: { enabled: true, state: "open", opened: 1 },
    });
  });
});
