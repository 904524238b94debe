// The ops page in a real browser: `npm start`'s script (redis-server, the REST bridge, `wrangler dev`)
// serves a config with analytics on in front of an origin of this test's own; the test sends known
// traffic, then headless Chromium (Debian's, driven by playwright-core) opens the page with the printed
// development token, by HTTP Basic and by the login form, and reads the numbers the chart and the tables
// show. A wrong token is refused, and identifiers and paths holding markup show as text and run nothing.
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Browser, type BrowserContext, chromium, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseConfig } from "../src/adapters/worker/config.js";
import { opsPage } from "../src/adapters/worker/ops-page.js";
import { type StartedWorker, startWorker } from "./started-worker.js";

const CHROMIUM = "/usr/bin/chromium";
const HOSTILE = "<img src=x onerror=alert(1)>";
const dir = mkdtempSync(join(tmpdir(), "edgelimit-ops-browser-"));

// GCRA has no window boundary for a test to straddle: 3 at once, then one per 20 minutes.
const hourly = { hourly: { algorithm: "gcra", limit: 3, period: "1h" } };
const routes = [
  { name: "api", match: { path: "/api/*" }, key: "header:x-api-key", rules: hourly },
  { name: "pages", match: { path: "/p/*" }, key: "path", mode: "shadow", rules: hourly },
];

let origin: Server;
let start: StartedWorker | undefined;
let browser: Browser;
let base = "";
let opsUrl = "";
let token = "";

const sha256 = (text: string) => `sha256:${createHash("sha256").update(text).digest("hex")}`;

beforeAll(async () => {
  // Nothing is skipped: without the browser this test fails and says how to get it.
  if (!existsSync(CHROMIUM)) {
    throw new Error(`${CHROMIUM} is missing: apt-get install -y chromium (.ci/run installs it when missing)`);
  }
  origin = createServer((request, response) => {
    response.writeHead(200, { "Content-Type": "text/plain" });
    response.end(`origin: ${request.method} ${request.url}`);
  });
  await new Promise<void>((resolve) => origin.listen(0, "127.0.0.1", resolve));
  const config = {
    origin: `http://127.0.0.1:${(origin.address() as AddressInfo).port}`,
    routes,
    analytics: { flushEvery: "1s", top: 10, retention: "1h" },
  };
  expect(parseConfig(config).ok).toBe(true);
  const file = join(dir, "ops.json");
  writeFileSync(file, JSON.stringify(config));
  const env = { ...process.env };
  delete env.UPSTASH_REDIS_REST_URL;
  delete env.UPSTASH_REDIS_REST_TOKEN;
  start = startWorker(file, env);
  // The banner names the page and the development token.
  [, opsUrl, token] = await start.until("the ops page's line", (output) => {
    const match =
      /Ops page: (http:\/\/127\.0\.0\.1:\d+\/_edgelimit\/) {2}\(log in with the development token: (\S+)\)\n/.exec(
        output,
      );
    return match ? [match[0], match[1] ?? "", match[2] ?? ""] : undefined;
  });
  base = new URL(opsUrl).origin;
  expect(token).toMatch(/^dev-[0-9a-f-]{36}$/);
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await start?.stop();
  // (without an origin, `origin?.close(resolve)` would never resolve: the hook would wait out its timeout)
  if (origin) await new Promise((resolve) => origin.close(resolve));
  rmSync(dir, { recursive: true, force: true });
}, 60_000);

/** Sends `count` requests and returns their statuses. */
async function send(count: number, path: string, headers: Record<string, string> = {}): Promise<number[]> {
  const statuses = [];
  for (let i = 0; i < count; i++) {
    const response = await fetch(`${base}${path}`, { headers });
    await response.arrayBuffer();
    statuses.push(response.status);
  }
  return statuses;
}

/** A page of a fresh context, with every dialog and every request it makes recorded. */
async function open(context: BrowserContext): Promise<{ page: Page; dialogs: string[]; requests: string[] }> {
  const page = await context.newPage();
  const dialogs: string[] = [];
  const requests: string[] = [];
  page.on("dialog", (dialog) => {
    dialogs.push(dialog.message());
    void dialog.dismiss();
  });
  page.on("request", (request) => requests.push(request.url()));
  return { page, dialogs, requests };
}

interface Shown {
  totals: Record<string, string | null>;
  minutes: { at: number; allowed: number; denied: number }[];
  top: { identifier: string; denied: number; allowed: number }[];
  denials: Record<string, number>;
}

/** What the page shows for `route`, read from the elements' data-* attributes. */
async function shown(page: Page, route: string): Promise<Shown> {
  const section = page.locator(`section[data-route="${route}"]`);
  const totals = section.locator("p.totals");
  return {
    totals: {
      allowed: await totals.getAttribute("data-allowed"),
      denied: await totals.getAttribute("data-denied"),
      shadowDenied: await totals.getAttribute("data-shadow-denied"),
      nearLimit: await totals.getAttribute("data-near-limit"),
    },
    minutes: await section.locator("svg.chart g[data-at]").evaluateAll((groups) =>
      groups.map((g) => ({
        at: Number(g.getAttribute("data-at")),
        allowed: Number(g.getAttribute("data-allowed")),
        denied: Number(g.getAttribute("data-denied")),
      })),
    ),
    top: await section.locator('table[data-table="top"] tr[data-identifier]').evaluateAll((rows) =>
      rows.map((row) => ({
        identifier: row.getAttribute("data-identifier") ?? "",
        denied: Number(row.getAttribute("data-denied")),
        allowed: Number(row.getAttribute("data-allowed")),
      })),
    ),
    denials: Object.fromEntries(
      await section
        .locator('table[data-table="denials"] tr[data-name]')
        .evaluateAll((rows) =>
          rows.map((row) => [row.getAttribute("data-name"), Number(row.getAttribute("data-count"))]),
        ),
    ),
  };
}

interface Report {
  decisions: { allowed: number; denied: number; bySource: Record<string, number> };
  denials: Record<string, number>;
  nearLimit: number;
  errors: Record<string, number>;
  minutes: { at: number; allowed: number; denied: number }[];
  top: { identifier: string; denied: number; allowed: number }[];
  shadowDenied: number;
}

describe("the ops page in headless Chromium", () => {
  const hostilePath = `/p/${HOSTILE}`;
  // fetch and the browser send the path percent-encoded; the route counts it lowercased (normalizePath)
  const hostilePathId = "/p/%3cimg%20src=x%20onerror=alert(1)%3e";

  it("known traffic: the JSON, then the chart and the tables by HTTP Basic, exactly", async () => {
    expect(await send(5, "/api/x", { "X-API-Key": "alpha-secret" })).toEqual([200, 200, 200, 429, 429]);
    expect(await send(4, "/api/y", { "X-API-Key": HOSTILE })).toEqual([200, 200, 200, 429]);
    // shadow: all served; the fourth is a would-be denial
    expect(await send(4, hostilePath)).toEqual([200, 200, 200, 200]);

    const json = await fetch(`${base}/_edgelimit/analytics?minutes=60`, {
      headers: { Authorization: `Bearer ${token}` },
    });
    expect(json.status).toBe(200);
    const body = (await json.json()) as { routes: Record<string, Report>; breaker: { state: string } };
    expect(body.breaker.state).toBe("closed");
    const { api, pages } = body.routes;
    // the fifth "alpha-secret" request is answered by the deny cache, without Redis
    expect(api!.decisions).toEqual({
      allowed: 6,
      denied: 3,
      bySource: { redis: 8, cache: 1, lease: 0, region: 0, error: 0 },
    });
    expect(api!.denials).toEqual({ hourly: 3 });
    expect(api!.shadowDenied).toBe(0);
    // allowed with nothing left (remaining 0 of 3, at most 20 %): the third of each key
    expect(api!.nearLimit).toBe(2);
    expect(api!.top).toEqual([
      { identifier: `api:${sha256("alpha-secret")}`, denied: 2, allowed: 3 },
      { identifier: `api:${sha256(HOSTILE)}`, denied: 1, allowed: 3 },
    ]);
    expect(pages!.decisions).toEqual({
      allowed: 3,
      denied: 1,
      bySource: { redis: 4, cache: 0, lease: 0, region: 0, error: 0 },
    });
    expect(pages!.shadowDenied).toBe(1);
    expect(pages!.nearLimit).toBe(1);
    expect(pages!.denials).toEqual({ hourly: 1 });
    expect(
      [api!.errors, pages!.errors].map((errors) => Object.values(errors).reduce((a, b) => a + b)),
    ).toEqual([0, 0]);
    expect(pages!.top).toEqual([{ identifier: `pages:${hostilePathId}`, denied: 1, allowed: 3 }]);
    for (const report of [api!, pages!]) {
      expect(report.minutes).toHaveLength(60);
      const sum = (field: "allowed" | "denied") => report.minutes.reduce((total, m) => total + m[field], 0);
      expect([sum("allowed"), sum("denied")]).toEqual([report.decisions.allowed, report.decisions.denied]);
    }

    const context = await browser.newContext({ httpCredentials: { username: "ops", password: token } });
    const { page, dialogs, requests } = await open(context);
    const response = await page.goto(opsUrl);
    expect(response?.status()).toBe(200);
    const csp = (await response?.allHeaders())?.["content-security-policy"] ?? "";
    expect(csp).toContain("default-src 'none'");
    expect(csp).not.toContain("script-src");

    const apiShown = await shown(page, "api");
    expect(apiShown.totals).toEqual({
      allowed: "6",
      denied: "3",
      shadowDenied: "0",
      nearLimit: "2",
    });
    // the chart shows the JSON's minutes, one bar group each, with the same counts (a minute may have
    // begun between the two reads: the hour then starts a minute later, with the same counts)
    const counted = (minutes: Report["minutes"]) => minutes.filter((m) => m.allowed + m.denied > 0);
    expect(apiShown.minutes).toHaveLength(60);
    expect(counted(apiShown.minutes)).toEqual(counted(api!.minutes));
    expect(apiShown.top).toEqual([
      { identifier: sha256("alpha-secret"), denied: 2, allowed: 3 },
      { identifier: sha256(HOSTILE), denied: 1, allowed: 3 },
    ]);
    expect(apiShown.denials).toEqual({ hourly: 3 });
    const pagesShown = await shown(page, "pages");
    expect(pagesShown.totals).toEqual({
      allowed: "3",
      denied: "1",
      shadowDenied: "1",
      nearLimit: "1",
    });
    expect(counted(pagesShown.minutes)).toEqual(counted(pages!.minutes));
    expect(pagesShown.top).toEqual([{ identifier: hostilePathId, denied: 1, allowed: 3 }]);
    expect(await page.locator('section[data-route="pages"] [data-shadow]').textContent()).toBe("1");
    expect(await page.locator("[data-breaker]").getAttribute("data-breaker")).toBe("closed");

    // header keys show as their hashes, never the secret; markup from a request shows as text
    const text = (await page.locator("body").textContent()) ?? "";
    expect(text).not.toContain("alpha-secret");
    expect(text).not.toContain(HOSTILE);
    expect(text).toContain(hostilePathId);
    expect(await page.locator("img").count()).toBe(0);
    expect(await page.locator("script").count()).toBe(0);
    expect(dialogs).toEqual([]);
    // nothing but the page itself was loaded
    expect(requests).toEqual([opsUrl]);
    await context.close();
  }, 60_000);

  it("a wrong token is refused: by HTTP Basic, by the login form, and the right one in a URL", async () => {
    const wrong = await browser.newContext({ httpCredentials: { username: "ops", password: `${token}x` } });
    const { page } = await open(wrong);
    // Chromium answers the challenge with the wrong password, gets the 401 again and shows its body.
    const response = await page.goto(opsUrl);
    expect(response?.status()).toBe(401);
    expect(await page.locator("section[data-route]").count()).toBe(0);
    expect(await page.locator('input[name="token"]').count()).toBe(1);
    await wrong.close();

    const context = await browser.newContext();
    const form = (await open(context)).page;
    expect((await form.goto(`${opsUrl}login`))?.status()).toBe(200);
    await form.fill('input[name="token"]', "not-the-token");
    await Promise.all([form.waitForLoadState("load"), form.click("button")]);
    expect(await form.locator("[data-login-error]").textContent()).toBe("That is not the admin token.");
    expect(await form.locator("section[data-route]").count()).toBe(0);
    expect(await context.cookies()).toEqual([]);

    const inUrl = await form.goto(`${opsUrl}?token=${token}`);
    expect(inUrl?.status()).toBe(400);
    expect(await form.locator("section[data-route]").count()).toBe(0);
    await context.close();
  }, 60_000);

  it("the login form: the token sets an HttpOnly, Secure, SameSite=Strict cookie that is not the token", async () => {
    const context = await browser.newContext();
    const { page, dialogs } = await open(context);
    expect((await page.goto(`${opsUrl}login`))?.status()).toBe(200);
    await page.fill('input[name="token"]', token);
    await Promise.all([page.waitForURL(opsUrl), page.click("button")]);
    expect(await page.locator('section[data-route="api"] p.totals').getAttribute("data-allowed")).toBe("6");
    const cookies = await context.cookies();
    expect(cookies).toHaveLength(1);
    expect(cookies[0]).toMatchObject({
      name: "edgelimit_session",
      path: "/_edgelimit",
      httpOnly: true,
      secure: true,
      sameSite: "Strict",
    });
    const captured = cookies[0]!;
    expect(captured.value).toMatch(/^\d+\.\d+\.[0-9a-f]{32}\.[0-9a-f]{64}$/);
    expect(captured.value).not.toContain(token);
    // Max-Age 12 h: the browser drops it then (and the Worker refuses it past the expiry it signed)
    expect(Math.abs(captured.expires - (Date.now() / 1000 + 43_200))).toBeLessThan(120);
    // reloading keeps the session (so does the context's request, which sends the same cookie); logging out ends it
    expect((await page.reload())?.status()).toBe(200);
    expect((await context.request.get(opsUrl, { maxRedirects: 0 })).status()).toBe(200);
    await Promise.all([
      page.waitForURL(`${opsUrl}login`),
      page.click('form[action="/_edgelimit/logout"] button'),
    ]);
    expect(await context.cookies()).toEqual([]);
    expect(await page.locator('input[name="token"]').count()).toBe(1);
    // for good: the cookie as it was before logout, put back, opens nothing
    await context.addCookies([captured]);
    // (a 401 with a Basic challenge is an auth prompt to a navigation: asked as the context's request,
    // which sends the context's cookies)
    const replayed = await context.request.get(opsUrl, { maxRedirects: 0 });
    expect(replayed.status()).toBe(401);
    expect(await replayed.text()).not.toContain("data-route");
    expect(dialogs).toEqual([]);
    await context.close();
  }, 60_000);

  it("markup in any string the page shows, unencoded, renders as text and runs nothing", async () => {
    // The renderer itself, given raw markup where identifiers, rule names and errors go.
    const config = parseConfig({
      origin: "https://api.example.com",
      routes: [
        { name: "api", key: "header:x-api-key", rules: hourly },
        { name: "down", key: "ip", rules: hourly },
      ],
    });
    if (!config.ok) throw new Error(config.errors.join("\n"));
    const at = Date.UTC(2026, 0, 1, 12, 0);
    const html = opsPage({
      adminPath: "/_edgelimit",
      from: at - 3_600_000,
      to: at,
      breaker: { state: `"><img src=x onerror=alert(2)>` },
      routes: [
        {
          route: config.config.routes[0]!,
          report: {
            decisions: { allowed: 1, denied: 2, bySource: { redis: 3, [HOSTILE]: 1 } },
            denials: { [HOSTILE]: 2 },
            nearLimit: 0,
            errors: { "\"'><svg onload=alert(3)>": 1 },
            minutes: [{ at, allowed: 1, denied: 2 }],
            top: [{ identifier: `api:${HOSTILE}`, denied: 2, allowed: 1 }],
            shadowDenied: 0,
          },
        },
        { route: config.config.routes[1]!, report: { error: `<script>alert(4)</script>` } },
      ],
    });
    const context = await browser.newContext();
    const { page, dialogs } = await open(context);
    await page.setContent(html);
    expect(
      await page.locator('table[data-table="top"] tr[data-identifier]').getAttribute("data-identifier"),
    ).toBe(HOSTILE);
    expect(await page.locator('table[data-table="top"] code').textContent()).toBe(HOSTILE);
    expect(await page.locator('table[data-table="denials"] code').textContent()).toBe(HOSTILE);
    expect(await page.locator("[data-error]").textContent()).toBe("<script>alert(4)</script>");
    expect(await page.locator("img, svg[onload], script").count()).toBe(0);
    expect(await page.locator("svg.chart g[data-at]").count()).toBe(1);
    expect(dialogs).toEqual([]);
    await context.close();
  }, 60_000);
});
