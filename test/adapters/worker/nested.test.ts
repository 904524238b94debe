// Rules with a "by" in the Worker, inside workerd against the test bridge's Redis: a route counts each
// request by its API key, its client address and one global identifier at once, in one decision, all
// or nothing; each count is read back with a peek by a Limiter over the same keys. Then the LLM gateway
// of docs/worker.md (the cost settled from OpenAI usage, on every rule), a request missing a key, and
// the admin API's overrides of one identifier (?by=).
import { afterEach, beforeEach, describe, expect, inject, test, vi } from "vitest";
import worker from "../../../src/adapters/worker/index.js";
import { hashed } from "../../../src/http/identity.js";
import { fixedWindow, Limiter } from "../../../src/index.js";
import { call, config, envFor } from "./support.js";

const TOKEN = "test-admin-token-0123456789";
const auth = { Authorization: `Bearer ${TOKEN}` };

/** A route counted per API key (its key), per client address and globally, with these limits. */
function gateway(name: string, limits: [number, number, number], extra: Record<string, unknown> = {}) {
  const [perKey, perIp, global] = limits;
  return {
    name,
    key: "header:x-api-key",
    rules: {
      perKey: { algorithm: "fixedWindow", limit: perKey, window: "1h" },
      perIp: { algorithm: "fixedWindow", limit: perIp, window: "1h", by: "ip" },
      global: { algorithm: "fixedWindow", limit: global, window: "1h", by: "global" },
    },
    ...extra,
  };
}

/** The Worker's env for one gateway route, and a peek at what each identifier has left. */
function setup(
  limits: [number, number, number],
  extra: Record<string, unknown> = {},
  top: Record<string, unknown> = {},
) {
  const document = config([gateway("api", limits, extra)], top);
  const env = envFor(document, { EDGELIMIT_ADMIN_TOKEN: TOKEN });
  const [perKey, perIp, global] = limits;
  const peeker = new Limiter({
    redis: { url: inject("bridgeUrl"), token: inject("bridgeToken") },
    prefix: document.prefix as string,
    rules: {
      perKey: fixedWindow({ limit: perKey, window: "1h" }),
      perIp: fixedWindow({ limit: perIp, window: "1h", by: "ip" }),
      global: fixedWindow({ limit: global, window: "1h", by: "global" }),
    },
    // every rule's count read from Redis, never a cached denial's one rule
    denyCache: false,
  });
  /** Units left on each rule for API key `key` from `ip` (a peek: nothing charged). */
  const left = async (key: string, ip: string) => {
    const identity = { id: `api:${hashed(key)}`, ip: `api:${ip}`, global: "api:global" };
    const decision = await peeker.limit(identity, { cost: 0 });
    return Object.fromEntries(
      Object.entries(decision.rules).map(([rule, { remaining }]) => [rule, remaining]),
    );
  };
  /** One request, its body read to the end, then its background work (a settle among it) awaited. */
  const send = async (key: string | undefined, ip: string | null, path = "/x") => {
    const headers = new Headers(key === undefined ? {} : { "x-api-key": key });
    if (ip !== null) headers.set("CF-Connecting-IP", ip);
    const pending: Promise<unknown>[] = [];
    const ctx = {
      waitUntil: (promise: Promise<unknown>) => void pending.push(promise),
      passThroughOnException: () => {},
      props: {},
    };
    const response = await worker.fetch(new Request(`https://edge.example${path}`, { headers }), env, ctx);
    await response.arrayBuffer();
    await Promise.all(pending);
    return response;
  };
  return { env, left, send };
}

beforeEach(() => {
  // every fixed window of a test is one clock hour
  vi.useFakeTimers({ toFake: ["Date"] });
  vi.setSystemTime(1_767_225_600_000 + 60_000);
});
afterEach(() => {
  vi.useRealTimers();
});

describe('a route whose rules count by "ip" and "global" beside its key', () => {
  test("exact counts per identifier; each level's denial charges no identifier", async () => {
    const { left, send } = setup([3, 5, 7]);
    const A = "192.0.2.1";
    const B = "192.0.2.2";
    for (let i = 0; i < 3; i++) expect((await send("k1", A)).status).toBe(200);
    const byKey = await send("k1", A);
    expect(byKey.status).toBe(429);
    expect(byKey.headers.get("ratelimit")).toBe('"perKey";r=0;t=3540');
    expect(await left("k1", A)).toEqual({ perKey: 0, perIp: 2, global: 4 });

    for (let i = 0; i < 2; i++) expect((await send("k2", A)).status).toBe(200);
    const byIp = await send("k2", A);
    expect(byIp.status).toBe(429);
    expect(byIp.headers.get("ratelimit")).toBe('"perIp";r=0;t=3540');
    expect(await left("k2", A)).toEqual({ perKey: 1, perIp: 0, global: 2 });

    for (let i = 0; i < 2; i++) expect((await send("k3", B)).status).toBe(200);
    const byGlobal = await send("k3", B);
    expect(byGlobal.status).toBe(429);
    expect(byGlobal.headers.get("ratelimit")).toBe('"global";r=0;t=3540');
    expect(await left("k3", B)).toEqual({ perKey: 1, perIp: 3, global: 0 });
    // every other identifier as it was left: the denials charged none
    expect(await left("k1", A)).toEqual({ perKey: 0, perIp: 0, global: 0 });
    expect(await left("k2", B)).toEqual({ perKey: 1, perIp: 3, global: 0 });
  });

  test("a request without a value for some rule's key is a 401, and charges no identifier", async () => {
    const { left, send } = setup([3, 5, 7]);
    const noIp = await send("k1", null);
    expect(noIp.status).toBe(401);
    const noKey = await send(undefined, "192.0.2.1");
    expect(noKey.status).toBe(401);
    expect(await left("k1", "192.0.2.1")).toEqual({ perKey: 3, perIp: 5, global: 7 });
  });

  test("an IPv6 client is counted per /64 on the rule that counts by ip", async () => {
    const { left, send } = setup([10, 2, 10]);
    expect((await send("k1", "2001:db8::1")).status).toBe(200);
    expect((await send("k2", "2001:db8::2")).status).toBe(200);
    expect((await send("k3", "2001:db8::3")).status).toBe(429);
    expect(await left("k3", "2001:db8::/64")).toEqual({ perKey: 10, perIp: 0, global: 8 });
  });
});

describe("analytics and the ops page", () => {
  test("each decision is counted under its binding rule's identifier, shown as the key it reads", async () => {
    const { env, send } = setup([1, 2, 100], {}, { analytics: true });
    expect((await send("k1", "192.0.2.1")).status).toBe(200);
    expect((await send("k1", "192.0.2.1")).status).toBe(429);
    expect((await send("k2", "192.0.2.1")).status).toBe(200);
    expect((await send("k3", "192.0.2.1")).status).toBe(429);
    const response = await call(env, "/_edgelimit/analytics?minutes=5", { headers: auth });
    const { routes } = (await response.json()) as {
      routes: Record<
        string,
        { denials: Record<string, number>; top: { identifier: string; denied: number }[] }
      >;
    };
    expect(routes.api!.denials).toEqual({ perKey: 1, perIp: 1, global: 0 });
    const denied = routes.api!.top.filter(({ denied }) => denied > 0).map(({ identifier }) => identifier);
    expect(denied.sort()).toEqual([`id=api:${hashed("k1")}`, "ip=api:192.0.2.1"]);
    const html = await (await call(env, "/_edgelimit/", { headers: auth })).text();
    expect(html).toContain('<tr data-identifier="ip=192.0.2.1" data-denied="1"');
    expect(html).toContain(`<tr data-identifier="header:x-api-key=${hashed("k1")}" data-denied="1"`);
    expect(html).toContain("&quot;by&quot;:&quot;ip&quot;");
  });
});

describe("the LLM gateway: the cost settled from OpenAI usage", () => {
  test("1,000 reserved, 370 used: each rule gives back 630", async () => {
    const { left, send } = setup(
      [10_000, 15_000, 25_000],
      { cost: 1_000, timeout: "15s", settle: { usage: "openai" } },
      { origin: inject("usageOriginUrl") },
    );
    const response = await send("k1", "192.0.2.1", "/json?tokens=370");
    expect(response.status).toBe(200);
    expect(response.headers.get("ratelimit")).toBe('"perKey";r=9000;t=3540');
    expect(await left("k1", "192.0.2.1")).toEqual({ perKey: 9_630, perIp: 14_630, global: 24_630 });
    // another key from the same address: its own key is whole, the address and global share
    await send("k2", "192.0.2.1", "/json?tokens=2000");
    expect(await left("k2", "192.0.2.1")).toEqual({ perKey: 8_000, perIp: 12_630, global: 22_630 });
  });
});

describe("overrides of one identifier (?by=)", () => {
  async function put(env: ReturnType<typeof envFor>, query: string, body: unknown) {
    return call(env, `/_edgelimit/overrides/api?${query}`, {
      method: "PUT",
      body: JSON.stringify(body),
      headers: { ...auth, "Content-Type": "application/json" },
    });
  }
  async function detail(response: Response, status: number) {
    expect(response.status).toBe(status);
    expect(response.headers.get("content-type")).toBe("application/problem+json");
    return ((await response.json()) as { detail: string }).detail;
  }

  test("a rule named as an Object property is no rule of the route's, by any key", async () => {
    const { env } = setup([2, 2, 100], { overrides: true });
    for (const name of ["toString", "hasOwnProperty"]) {
      expect(
        await detail(await put(env, "by=ip&key=192.0.2.1", { rules: { [name]: { limit: 5 } } }), 400),
      ).toBe(`rules.${name}: not a rule; the rules are perKey, perIp, global`);
    }
  });

  test("an address's override raises its perIp alone; the key's override its perKey", async () => {
    const { env, left, send } = setup([2, 2, 100], { overrides: true });
    const raised = await put(env, "by=ip&key=192.0.2.1", { rules: { perIp: { limit: 4 } } });
    expect(raised.status).toBe(200);
    expect(await raised.json()).toEqual({ rules: { perIp: { limit: 4 } } });
    const key = await put(env, "key=k1", { rules: { perKey: { limit: 3 } } });
    expect(key.status).toBe(200);
    for (let i = 0; i < 3; i++) expect((await send("k1", "192.0.2.1")).status).toBe(200);
    const byKey = await send("k1", "192.0.2.1");
    expect(byKey.status).toBe(429);
    expect(byKey.headers.get("ratelimit")).toMatch(/^"perKey";r=0;/);
    // another address keeps the base 2
    expect((await send("k2", "192.0.2.9")).status).toBe(200);
    expect((await send("k3", "192.0.2.9")).status).toBe(200);
    const byIp = await send("k4", "192.0.2.9");
    expect(byIp.status).toBe(429);
    expect(byIp.headers.get("ratelimit")).toMatch(/^"perIp";r=0;/);
    // listed by the key they are for
    const ipList = await call(env, "/_edgelimit/overrides/api?by=ip", { headers: auth });
    expect(await ipList.json()).toEqual({
      items: [{ identifier: "api:192.0.2.1", override: { rules: { perIp: { limit: 4 } } } }],
      next: null,
    });
    const keyList = await call(env, "/_edgelimit/overrides/api", { headers: auth });
    expect(await keyList.json()).toEqual({
      items: [{ identifier: `api:${hashed("k1")}`, override: { rules: { perKey: { limit: 3 } } } }],
      next: null,
    });
    // read back and removed by the same identifier
    const got = await call(env, "/_edgelimit/overrides/api?by=ip&key=192.0.2.1", { headers: auth });
    expect(await got.json()).toEqual({ rules: { perIp: { limit: 4 } } });
    const gone = await call(env, "/_edgelimit/overrides/api?by=ip&key=192.0.2.1", {
      method: "DELETE",
      headers: auth,
    });
    expect(gone.status).toBe(204);
    const after = await call(env, "/_edgelimit/overrides/api?by=ip&key=192.0.2.1", { headers: auth });
    expect(await detail(after, 404)).toBe("key: no override");
    expect(await left("k9", "192.0.2.1")).toMatchObject({ perIp: 0 });
  });

  test("an override that changes a rule counted by another identifier is refused, nothing stored", async () => {
    const { env } = setup([2, 2, 100], { overrides: true });
    expect(
      await detail(await put(env, "by=ip&key=192.0.2.1", { rules: { perKey: { limit: 9 } } }), 400),
    ).toBe('rules.perKey: counts by "header:x-api-key", not by "ip"; to change it, leave by out');
    expect(await detail(await put(env, "key=k1", { rules: { global: { limit: 9 } } }), 400)).toBe(
      'rules.global: counts by "global", not by "header:x-api-key"; to change it, use ?by=global',
    );
    expect(
      await detail(await put(env, "by=cookie:sid&key=s1", { rules: { perKey: { limit: 9 } } }), 400),
    ).toBe(
      'by: no rule of "api" counts by "cookie:sid"; its rules count by "header:x-api-key", "ip", "global"',
    );
    expect(await detail(await put(env, "by=user&key=u1", { rules: { perKey: { limit: 9 } } }), 400)).toBe(
      'by: "user" is not a key; use "ip", "path", "global", "header:NAME" or "cookie:NAME"',
    );
    expect(await detail(await put(env, `by=${"x".repeat(201)}&key=k1`, { plan: "pro" }), 400)).toBe(
      "by: not a key (longer than 200 characters)",
    );
    expect(await detail(await put(env, "by=ip&key=nope", { rules: { perIp: { limit: 9 } } }), 400)).toBe(
      'key: not an IP address, got "nope"',
    );
    const none = await call(env, "/_edgelimit/overrides/api?by=ip&key=192.0.2.1", { headers: auth });
    expect(await detail(none, 404)).toBe("key: no override");
  });

  test("global needs no key", async () => {
    const { env, send } = setup([100, 100, 1], { overrides: true });
    expect((await put(env, "by=global", { rules: { global: { limit: 2 } } })).status).toBe(200);
    expect((await send("k1", "192.0.2.1")).status).toBe(200);
    expect((await send("k2", "192.0.2.2")).status).toBe(200);
    expect((await send("k3", "192.0.2.3")).status).toBe(429);
  });
});
