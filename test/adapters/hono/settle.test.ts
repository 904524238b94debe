// rateLimit's `settle` in Node: the route's cost is reserved, the response says what the request cost
// (a header, the OpenAI usage of its body, or a function), and the difference is settled after it.
import { Hono } from "hono";
import { streamSSE } from "hono/streaming";
import { describe, expect, inject, it } from "vitest";
import {
  type RateLimitEvent,
  type RateLimitVariables,
  rateLimit,
  type SettleOption,
} from "../../../src/adapters/hono/index.js";
import { gcra, Limiter } from "../../../src/index.js";
import { startCutHop } from "../../cut-hop.js";
import { bridgeRedis, manualClock, uniquePrefix } from "../../support.js";

// GCRA 10,000 an hour: a reservation of 1,000 leaves 9,000 (the clock does not move).
function setup(settle: SettleOption, options: { waitUntil?: boolean; mode?: "shadow" } = {}) {
  const clock = manualClock();
  const limiter = new Limiter({
    redis: bridgeRedis(),
    prefix: uniquePrefix("hono-settle"),
    rules: { perHour: gcra({ limit: 10_000, period: "1h" }) },
    clock,
    timeout: 15_000,
  });
  const events: RateLimitEvent[] = [];
  const app = new Hono<{ Variables: RateLimitVariables }>();
  app.use(
    "/api/*",
    rateLimit({
      limiter,
      key: () => "alice",
      cost: () => 1_000,
      settle,
      mode: options.mode,
      log: (event) => events.push(event),
    }),
  );
  app.get("/api/header", (c) => {
    const value = c.req.query("value");
    if (value !== undefined) c.header("x-usage", value);
    return c.text("served");
  });
  app.get("/api/json", (c) =>
    c.json({ id: "x", usage: { total_tokens: Number(c.req.query("tokens")) }, choices: [] }),
  );
  app.get("/api/sse", (c) =>
    streamSSE(c, async (stream) => {
      await stream.writeSSE({
        data: JSON.stringify({ choices: [{ delta: { content: "héllo" } }], usage: null }),
      });
      await stream.writeSSE({ data: JSON.stringify({ choices: [], usage: { total_tokens: 42 } }) });
      await stream.writeSSE({ data: "[DONE]" });
    }),
  );
  app.get("/api/denied", (c) => c.text("denied"));
  // a careless handler: what the client wrote comes back, in a header or as the body
  app.get("/api/echo-header", (c) => {
    c.header("x-usage", c.req.header("x-usage"));
    return c.text("served");
  });
  app.get("/api/echo", (c) =>
    c.body(c.req.query("body") ?? "", Number(c.req.query("status")) as 200, {
      "Content-Type": c.req.query("type") ?? "",
    }),
  );
  const pending: Promise<unknown>[] = [];
  const ctx = {
    waitUntil: (promise: Promise<unknown>) => void pending.push(promise),
    passThroughOnException: () => {},
    props: {},
  };
  const get = (path: string, init?: RequestInit) =>
    options.waitUntil === false ? app.request(path, init) : app.request(path, init, {}, ctx);
  const peek = async () => (await limiter.limit("alice", { cost: 0 })).remaining;
  return { get, peek, events, settled: () => Promise.all(pending), limiter };
}

describe("rateLimit with settle", () => {
  it("two rateLimits stacked on one request, settling by one header: each reads it, the client sees it not", async () => {
    // setup's Limiter, in an app of two rateLimits of its own
    const { limiter } = setup({ header: "x-usage" });
    const events: RateLimitEvent[] = [];
    const app = new Hono<{ Variables: RateLimitVariables }>();
    for (const key of ["outer", "inner"]) {
      app.use(
        "/api/*",
        rateLimit({
          limiter,
          key: () => key,
          cost: () => 1_000,
          settle: { header: "x-usage" },
          log: (e) => events.push(e),
        }),
      );
    }
    app.get("/api/work", (c) => {
      c.header("x-usage", "370");
      return c.text("served");
    });
    const pending: Promise<unknown>[] = [];
    const ctx = {
      waitUntil: (p: Promise<unknown>) => void pending.push(p),
      passThroughOnException: () => {},
      props: {},
    };
    const response = await app.request("/api/work", undefined, {}, ctx);
    expect(response.headers.get("x-usage")).toBeNull();
    await Promise.all(pending);
    for (const key of ["outer", "inner"])
      expect((await limiter.limit(key, { cost: 0 })).remaining).toBe(10_000 - 370);
    expect(events).toEqual([]);
  });

  it("a header: 370 charged of the 1,000 reserved, the header removed, through waitUntil", async () => {
    const { get, peek, settled } = setup({ header: "x-usage" });
    const response = await get("/api/header?value=370");
    expect(response.headers.get("ratelimit")).toBe('"perHour";r=9000;t=360');
    expect(response.headers.has("x-usage")).toBe(false);
    expect(await response.text()).toBe("served");
    await settled();
    expect(await peek()).toBe(9_630);
  });

  it("expose keeps the header; a missing or malformed one keeps the reservation and is logged once", async () => {
    const { get, peek, settled, events } = setup({ header: "X-Usage", expose: true });
    expect((await get("/api/header?value=1200")).headers.get("x-usage")).toBe("1200");
    await settled();
    expect(await peek()).toBe(8_800);
    await get("/api/header");
    await get("/api/header?value=twelve");
    await settled();
    expect(await peek()).toBe(6_800);
    expect(events.map((event) => [event.kind, event.message])).toEqual([
      [
        "usage",
        "edgelimit: GET /api/header: no X-Usage header; kept the reservation (further ones: one summary line per 60 s)",
      ],
    ]);
  });

  it("the OpenAI usage of a JSON body and of an SSE stream", async () => {
    const json = setup({ usage: "openai" });
    const response = await json.get("/api/json?tokens=370");
    expect(await response.json()).toEqual({ id: "x", usage: { total_tokens: 370 }, choices: [] });
    await json.settled();
    expect(await json.peek()).toBe(9_630);

    const sse = setup({ usage: "openai" });
    const stream = await sse.get("/api/sse");
    expect(await stream.text()).toBe(
      'data: {"choices":[{"delta":{"content":"héllo"}}],"usage":null}\n\n' +
        'data: {"choices":[],"usage":{"total_tokens":42}}\n\n' +
        "data: [DONE]\n\n",
    );
    await sse.settled();
    expect(await sse.peek()).toBe(9_958);
  });

  it("a cost the client wrote keeps the reservation: an echoed x-usage, a text/plain or 4xx JSON echo", async () => {
    const header = setup({ header: "x-usage" });
    const echoed = await header.get("/api/echo-header", { headers: { "x-usage": "0" } });
    expect(echoed.headers.has("x-usage")).toBe(false);
    await header.settled();
    expect(await header.peek()).toBe(9_000);
    expect(header.events.map((event) => event.message)).toEqual([
      "edgelimit: GET /api/echo-header: the request itself carries x-usage; kept the reservation (further ones: one summary line per 60 s)",
    ]);

    const body = setup({ usage: "openai" });
    const zero = encodeURIComponent('{"usage":{"total_tokens":0}}');
    for (const [status, type] of [
      [200, "text/plain"],
      [200, "text/html"],
      [400, "application/json"],
    ] as const) {
      const response = await body.get(`/api/echo?status=${status}&type=${type}&body=${zero}`);
      expect(response.status).toBe(status);
      expect(await response.text()).toBe('{"usage":{"total_tokens":0}}');
    }
    await body.settled();
    expect(await body.peek()).toBe(7_000);
    // a 2xx JSON body is the handler's own answer, read as it says: 0 of this 1,000 used
    await (await body.get(`/api/echo?status=200&type=application/json&body=${zero}`)).arrayBuffer();
    await body.settled();
    expect(await body.peek()).toBe(7_000);
  });

  it("a function: its answer is charged, undefined keeps the reservation", async () => {
    const { get, peek, settled } = setup((c) =>
      c.req.query("n") === undefined ? undefined : Number(c.req.query("n")),
    );
    await get("/api/header?n=10");
    await settled();
    expect(await peek()).toBe(9_990);
    await get("/api/header");
    await settled();
    expect(await peek()).toBe(8_990);
  });

  it("without waitUntil (Node) the settle runs on its own", async () => {
    const { get, peek } = setup({ header: "x-usage" }, { waitUntil: false });
    await get("/api/header?value=0");
    let remaining = await peek();
    for (let i = 0; i < 100 && remaining !== 10_000; i++) {
      await new Promise((resolve) => setTimeout(resolve, 10));
      remaining = await peek();
    }
    expect(remaining).toBe(10_000);
  });

  it("a denial shadow mode lets through is not settled, and its header is still removed", async () => {
    const { get, peek, settled, events } = setup({ header: "x-usage" }, { mode: "shadow" });
    for (let i = 0; i < 10; i++) await get("/api/header?value=1000");
    const denied = await get("/api/header?value=5");
    expect(denied.headers.get("edgelimit-shadow")).toBe("denied");
    expect(denied.headers.has("x-usage")).toBe(false);
    await settled();
    expect(await peek()).toBe(0);
    expect(events.map((event) => event.kind)).toEqual(["shadow-denied"]);
  });

  it("a settle whose answer is lost is logged, and never sent again", async () => {
    const hop = await startCutHop(inject("bridgeUrl"));
    try {
      const limiter = new Limiter({
        redis: { url: hop.url, token: inject("bridgeToken") },
        prefix: uniquePrefix("hono-settle-cut"),
        rules: { perHour: gcra({ limit: 10_000, period: "1h" }) },
        clock: manualClock(),
        timeout: 15_000,
      });
      const events: RateLimitEvent[] = [];
      const app = new Hono();
      app.use(
        "*",
        rateLimit({
          limiter,
          key: () => "bob",
          cost: () => 1_000,
          settle: { header: "x-usage" },
          log: (e) => events.push(e),
        }),
      );
      app.get("/", (c) => {
        hop.cutNext = "";
        c.header("x-usage", "370");
        return c.text("served");
      });
      const pending: Promise<unknown>[] = [];
      const ctx = {
        waitUntil: (p: Promise<unknown>) => void pending.push(p),
        passThroughOnException() {},
        props: {},
      };
      expect((await app.request("/", undefined, {}, ctx)).status).toBe(200);
      await Promise.all(pending);
      expect(hop.cuts).toBe(1);
      expect(events.map((event) => event.message)).toEqual([
        expect.stringMatching(/^edgelimit: GET \/: the settle of 370 got no answer: /),
      ]);
      // it ran in Redis once: 630 given back, not twice
      expect((await limiter.limit("bob", { cost: 0 })).remaining).toBe(9_630);
    } finally {
      await hop.close();
    }
  });

  it("a bad settle option is refused, naming the field", () => {
    const limiter = {} as Limiter;
    const key = () => "a";
    expect(() => rateLimit({ limiter, key, settle: { header: "x usage" } })).toThrow(
      'settle.header: must be a header name such as "x-usage"',
    );
    expect(() => rateLimit({ limiter, key, settle: { usage: "gpt" } as unknown as SettleOption })).toThrow(
      'settle.usage: must be "openai", got "gpt"',
    );
  });
});
