// concurrencyLimit() in a Hono app, with a real Concurrency on the bridge: the slot is held while the
// body streams and given back at its end, when the client cancels it, or when the handler throws.
import { Redis } from "@upstash/redis";
import { Hono } from "hono";
import { describe, expect, inject, it, vi } from "vitest";
import {
  type ConcurrencyEvent,
  type ConcurrencyVariables,
  concurrencyLimit,
} from "../../../src/adapters/hono/index.js";
import { Concurrency } from "../../../src/engine/concurrency.js";
import { QUOTA_EXCEEDED } from "../../../src/http/headers.js";
import { startCutHop } from "../../cut-hop.js";
import { bridgeRedis, manualClock, T0, uniquePrefix } from "../../support.js";

const TITLE = "Request cannot be satisfied as assigned quota has been exceeded";

/** A stream the test feeds and ends by hand. */
function gate() {
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  const body = new ReadableStream<Uint8Array>({
    start(c) {
      controller = c;
    },
  });
  return {
    body,
    write: (text: string) => controller.enqueue(new TextEncoder().encode(text)),
    end: () => controller.close(),
  };
}

function setup(limit = 2) {
  const clock = manualClock();
  const concurrency = new Concurrency({
    redis: bridgeRedis(),
    prefix: uniquePrefix("hono-conc"),
    limit,
    ttl: "30s",
    clock,
  });
  const released: Promise<unknown>[] = [];
  const events: ConcurrencyEvent[] = [];
  const gates = new Map<string, ReturnType<typeof gate>>();
  const app = new Hono<{ Variables: ConcurrencyVariables }>();
  app.use(
    "/api/*",
    concurrencyLimit({
      concurrency,
      key: (c) => c.req.header("x-user"),
      waitUntil: (_c, promise) => released.push(promise),
      log: (event) => events.push(event),
    }),
  );
  app.get("/api/stream/:id", (c) => {
    const g = gate();
    gates.set(c.req.param("id"), g);
    g.write("first;");
    return new Response(g.body, { headers: { "x-remaining": String(c.get("concurrency").remaining) } });
  });
  app.get("/api/plain", (c) => c.text("plain"));
  app.get("/api/boom", () => {
    throw new Error("boom");
  });
  app.onError((_error, c) => c.text("failed", 500));
  const get = (path: string, user: string | undefined = "u1") =>
    app.request(path, { headers: user === undefined ? {} : { "x-user": user } });
  return { app, get, released, gates, events, concurrency, clock };
}

describe("concurrencyLimit", () => {
  it("holds a slot until the body has been read to the end, and refuses with a problem when full", async () => {
    const { get, released, gates } = setup(2);
    const a = await get("/api/stream/a");
    const b = await get("/api/stream/b");
    expect([a.status, b.status]).toEqual([200, 200]);
    expect([a.headers.get("x-remaining"), b.headers.get("x-remaining")]).toEqual(["1", "0"]);

    const full = await get("/api/plain");
    expect(full.status).toBe(429);
    expect(Object.fromEntries(full.headers)).toEqual({
      "cache-control": "no-store",
      "content-type": "application/problem+json",
      "retry-after": "30",
    });
    expect(await full.json()).toEqual({
      type: QUOTA_EXCEEDED,
      title: TITLE,
      status: 429,
      detail: 'Quota exceeded for "concurrency". Retry after 30 seconds.',
      "violated-policies": ["concurrency"],
      "retry-after": 30,
    });
    // another client is not affected
    expect((await get("/api/plain", "u2")).status).toBe(200);

    // a's body: read partway, then ended by the handler, then read to the end
    const reader = a.body!.getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toBe("first;");
    expect(released.length).toBe(3); // a, b, and u2's, handed over at once
    gates.get("a")!.write("rest");
    expect(new TextDecoder().decode((await reader.read()).value)).toBe("rest");
    expect((await get("/api/plain")).status).toBe(429); // still streaming: still held
    gates.get("a")!.end();
    expect((await reader.read()).done).toBe(true);
    await released[0];
    const next = await get("/api/plain");
    expect(next.status).toBe(200);
    expect(await next.text()).toBe("plain");
  });

  it("gives the slot back when the client goes away (the body is cancelled)", async () => {
    const { get, released } = setup(1);
    const a = await get("/api/stream/a");
    expect((await get("/api/plain")).status).toBe(429);
    await a.body!.cancel("client went away");
    await released[0];
    expect((await get("/api/plain")).status).toBe(200);
  });

  it("gives the slot back when the handler throws, and for a body-less response", async () => {
    const { get, released } = setup(1);
    const boom = await get("/api/boom");
    expect(boom.status).toBe(500);
    expect(await boom.text()).toBe("failed");
    await Promise.all(released);
    const head = await get("/api/plain");
    await head.text();
    await Promise.all(released);
    expect((await get("/api/plain")).status).toBe(200);
  });

  it("answers 401 without a key, and builds its own Concurrency from options", async () => {
    const app = new Hono();
    app.use(
      "*",
      concurrencyLimit({
        redis: bridgeRedis(),
        prefix: uniquePrefix("hono-conc-opts"),
        limit: 1,
        ttl: 5000,
        clock: () => T0,
        key: (c) => c.req.header("x-user"),
      }),
    );
    app.get("/", (c) => c.text("ok"));
    const missing = await app.request("/");
    expect(missing.status).toBe(401);
    expect((await app.request("/", { headers: { "x-user": "" } })).status).toBe(401);
    expect(missing.headers.get("content-type")).toBe("application/problem+json");
    const first = await app.request("/", { headers: { "x-user": "u" } });
    expect(first.status).toBe(200);
    // not read yet: the slot is held
    const second = await app.request("/", { headers: { "x-user": "u" } });
    expect([second.status, second.headers.get("retry-after")]).toEqual([429, "5"]);
    await first.text();
  });

  it("follows onError when Redis cannot be reached, and logs it without the key", async () => {
    const dead = new Redis({ url: "http://127.0.0.1:1", token: "x", enableTelemetry: false });
    const events: ConcurrencyEvent[] = [];
    const app = new Hono();
    app.use(
      "*",
      concurrencyLimit({
        redis: dead,
        limit: 1,
        ttl: "10s",
        onError: "deny",
        key: () => "secret-api-key",
        log: (event) => events.push(event),
      }),
    );
    app.get("/", (c) => c.text("ok"));
    const response = await app.request("/");
    expect(response.status).toBe(429);
    expect(response.headers.get("retry-after")).toBe("1");
    expect((await response.json()).type).toBe("about:blank");
    expect(events.map((event) => event.kind)).toEqual(["error"]);
    expect(events[0]!.message).toMatch(/^edgelimit: no concurrency slot from Redis for GET \/, refused/);
    expect(events[0]!.message).not.toContain("secret-api-key");
  });

  it("a refusal because the answer was lost gives back the slot the acquire may have taken", async () => {
    const hop = await startCutHop(inject("bridgeUrl"));
    try {
      const concurrency = new Concurrency({
        redis: bridgeRedis(hop.url),
        prefix: uniquePrefix("hono-conc-lost"),
        limit: 1,
        ttl: "1h",
        onError: "deny",
      });
      await (await concurrency.acquire("warm-up")).release(); // the script is known: the cut one runs
      const released: Promise<unknown>[] = [];
      const app = new Hono();
      app.use(
        "*",
        concurrencyLimit({
          concurrency,
          key: () => "k",
          waitUntil: (_c, promise) => released.push(promise),
          log: () => {},
        }),
      );
      app.get("/", (c) => c.text("ok"));
      hop.cutNext = '"acquire"';
      const refused = await app.request("/");
      expect([refused.status, hop.cuts]).toEqual([429, 1]);
      await Promise.all(released);
      const next = await app.request("/");
      expect(next.status).toBe(200); // without the release the slot would be held for an hour
      await next.text();
    } finally {
      await hop.close();
    }
  });

  it("in shadow mode lets a request over the limit through, marked and logged, holding no slot", async () => {
    const concurrency = new Concurrency({
      redis: bridgeRedis(),
      prefix: uniquePrefix("hono-conc-shadow"),
      limit: 1,
      ttl: "30s",
      clock: manualClock(),
    });
    const events: ConcurrencyEvent[] = [];
    const released: Promise<unknown>[] = [];
    const app = new Hono();
    app.use(
      "*",
      concurrencyLimit({
        concurrency,
        key: () => "secret-key",
        mode: "shadow",
        log: (event) => events.push(event),
        waitUntil: (_c, promise) => released.push(promise),
      }),
    );
    app.get("/", (c) => c.text("ok"));
    const first = await app.request("/");
    expect([first.status, first.headers.get("edgelimit-shadow")]).toEqual([200, null]);
    const second = await app.request("/"); // the first body is unread: its slot is still held
    expect([second.status, second.headers.get("edgelimit-shadow"), await second.text()]).toEqual([
      200,
      "denied",
      "ok",
    ]);
    expect(events.map((event) => [event.kind, event.message])).toEqual([
      ["shadow-denied", "edgelimit shadow: would refuse GET / (all 1 concurrency slots taken)"],
    ]);
    expect(released.length).toBe(1); // only the first request held a slot
    await first.text();
    await Promise.all(released);
    expect((await app.request("/")).headers.get("edgelimit-shadow")).toBe(null);
  });

  it("validates its options", () => {
    expect(() => concurrencyLimit({ redis: bridgeRedis(), limit: 0, ttl: 1, key: () => "k" })).toThrow(
      /^limit: /,
    );
    expect(() =>
      concurrencyLimit({ redis: bridgeRedis(), limit: 1, ttl: 1, key: "k" as unknown as () => string }),
    ).toThrow(/^key: /);
    expect(() =>
      concurrencyLimit({
        redis: bridgeRedis(),
        limit: 1,
        ttl: 1,
        key: () => "k",
        mode: "loud" as "shadow",
      }),
    ).toThrow(/^mode: /);
  });

  it("builds its Concurrency from `lease`, the old name of `ttl`, with one warning", async () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    try {
      const app = new Hono();
      const options = { redis: bridgeRedis(), prefix: uniquePrefix("old-lease"), limit: 1, lease: "2s" };
      app.use("/", concurrencyLimit({ ...options, key: () => "k", clock: () => T0 } as never));
      app.get("/", (c) => c.json(c.get("concurrency" as never)));
      const slot = await (await app.request("/")).json();
      expect(slot).toMatchObject({ allowed: true, resetAt: T0 + 2000 });
      expect(warn.mock.calls).toEqual([
        [
          "edgelimit: Concurrency: the option `lease` is now `ttl` (the same duration); rename it, the old name will go",
        ],
      ]);
    } finally {
      warn.mockRestore();
    }
  });
});
