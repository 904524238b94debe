// A route with "settle" in the Worker's config, inside workerd: the route's cost is reserved, and the
// origin's response says what the request really cost (a header, or the OpenAI usage of a JSON body or
// an SSE stream); the difference is given back after the response, read back here with a peek.
import { afterEach, beforeEach, describe, expect, inject, test, vi } from "vitest";
import worker, { type Env } from "../../../src/adapters/worker/index.js";
import { gcra, Limiter } from "../../../src/index.js";
import { config, envFor } from "./support.js";

// GCRA, 10,000 an hour: a reservation of 1,000 leaves 9,000; a settle at 370 gives 630 back. The Date
// is frozen during each test, so no unit comes back with time.
const RULES = { perHour: { algorithm: "gcra", limit: 10_000, period: "1h" } };

function setup(settle: unknown, limit = 10_000) {
  const rules = { perHour: { ...RULES.perHour, limit } };
  const document = config([{ name: "chat", key: "ip", rules, cost: 1_000, timeout: "15s", settle }], {
    origin: inject("usageOriginUrl"),
  });
  const peekLimiter = new Limiter({
    redis: { url: inject("bridgeUrl"), token: inject("bridgeToken") },
    prefix: document.prefix as string,
    rules: { perHour: gcra({ limit, period: "1h" }) },
  });
  /** What Redis holds for the caller now: the units left. */
  const peek = async () => (await peekLimiter.limit("chat:192.0.2.1", { cost: 0 })).remaining;
  return { env: envFor(document), peek };
}

/**
 * One request through the Worker, as the runtime sends it; `settled()` waits for every promise handed
 * to waitUntil so far (a settle handed over when the body ended is among them once it has been read).
 */
async function send(env: Env, path: string, init: { body?: string; headers?: Record<string, string> } = {}) {
  const pending: Promise<unknown>[] = [];
  const ctx = {
    waitUntil: (promise: Promise<unknown>) => void pending.push(promise),
    passThroughOnException: () => {},
    props: {},
  };
  const request = new Request(`https://edge.example${path}`, {
    method: init.body === undefined ? "GET" : "POST",
    headers: { "CF-Connecting-IP": "192.0.2.1", ...init.headers },
    ...(init.body === undefined ? {} : { body: init.body }),
  });
  const response = await worker.fetch(request, env, ctx);
  return { response, settled: () => Promise.all(pending) };
}

async function sha256(bytes: ArrayBuffer): Promise<string> {
  return [...new Uint8Array(await crypto.subtle.digest("SHA-256", bytes))]
    .map((b) => b.toString(16).padStart(2, "0"))
    .join("");
}

/** The origin's own answer, asked directly. */
async function direct(path: string): Promise<ArrayBuffer> {
  return (await fetch(`${inject("usageOriginUrl")}${path}`)).arrayBuffer();
}

beforeEach(() => {
  vi.useFakeTimers({ toFake: ["Date"] });
});
afterEach(() => {
  vi.useRealTimers();
  vi.restoreAllMocks();
});

describe('"settle": { "header": "x-usage" }', () => {
  // First in this file: the Worker's log of unread costs tells the first in full, then one line a minute.
  test("a missing or malformed header keeps the reservation, logged once, then once a minute", async () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const { env, peek } = setup({ header: "x-usage" });
    const missing = await send(env, "/header");
    expect(await missing.response.text()).toBe("served");
    await missing.settled();
    expect(await peek()).toBe(9_000);
    for (const value of ["3.5", "-2", "abc"]) {
      const malformed = await send(env, `/header?value=${value}`);
      expect(malformed.response.headers.has("x-usage")).toBe(false);
      await malformed.response.arrayBuffer();
      await malformed.settled();
    }
    expect(await peek()).toBe(6_000);
    vi.setSystemTime(Date.now() + 60_000);
    const later = await send(env, "/header?value=1e3");
    await later.response.arrayBuffer();
    await later.settled();
    const lines = warn.mock.calls.map(([line]) => line);
    expect(lines).toEqual([
      'edgelimit: GET /header: no x-usage header; kept the reservation (further ones: one summary line per 60 s) [route "chat"]',
      'edgelimit: 4 more costs not read or not settled in the last 60 s; last: GET /header: x-usage is "1e3", not a whole number ≥ 0; kept the reservation [route "chat"]',
    ]);
  });

  test("370 on a reservation of 1,000: 630 given back, and the header is not passed on", async () => {
    const { env, peek } = setup({ header: "x-usage" });
    const { response, settled } = await send(env, "/header?value=370");
    expect(response.status).toBe(200);
    expect(response.headers.get("ratelimit")).toBe('"perHour";r=9000;t=360');
    expect(response.headers.has("x-usage")).toBe(false);
    expect(await response.text()).toBe("served");
    await settled();
    expect(await peek()).toBe(9_630);
    // the next decision starts from there
    const next = await send(env, "/header?value=1000");
    expect(next.response.headers.get("ratelimit")).toBe('"perHour";r=8630;t=494');
    await next.settled();
    expect(await peek()).toBe(8_630);
  });

  test("expose: the header stays; above the reservation the extra is charged", async () => {
    const { env, peek } = setup({ header: "x-usage", expose: true });
    const { response, settled } = await send(env, "/header?value=2500");
    expect(response.headers.get("x-usage")).toBe("2500");
    await response.arrayBuffer();
    await settled();
    expect(await peek()).toBe(7_500);
  });
});

describe('"settle": { "usage": "openai" }', () => {
  test("a JSON body: passed on as it is, total_tokens charged", async () => {
    const { env, peek } = setup({ usage: "openai" });
    const { response, settled } = await send(env, "/json?tokens=370");
    expect(await response.text()).toBe(new TextDecoder().decode(await direct("/json?tokens=370")));
    await settled();
    expect(await peek()).toBe(9_630);
  });

  test("a 1 MB SSE stream passes byte for byte; the settle lands after its end, not before", async () => {
    const { env, peek } = setup({ usage: "openai" });
    const bytes = 1 << 20;
    const expected = await sha256(await direct(`/sse?tokens=370&bytes=${bytes}`));
    const gate = crypto.randomUUID();
    const { response, settled } = await send(env, `/sse?tokens=370&bytes=${bytes}&gate=${gate}`);
    expect(response.headers.get("content-type")).toBe("text/event-stream; charset=utf-8");
    const reader = response.body!.getReader();
    const chunks: Uint8Array[] = [];
    let read = 0;
    // everything the origin sends before its gate: at least `bytes`
    while (read < bytes) {
      const { done, value } = await reader.read();
      if (done) throw new Error("the stream ended before its gate");
      chunks.push(value);
      read += value.byteLength;
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(await peek()).toBe(9_000);
    await fetch(`${inject("usageOriginUrl")}/open/${gate}`);
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
    }
    const body = new Uint8Array(chunks.reduce((n, chunk) => n + chunk.byteLength, 0));
    let at = 0;
    for (const chunk of chunks) {
      body.set(chunk, at);
      at += chunk.byteLength;
    }
    expect(body.byteLength).toBeGreaterThan(bytes);
    expect(await sha256(body.buffer)).toBe(expected);
    await settled();
    expect(await peek()).toBe(9_630);
  });

  test("a client that goes away mid-stream keeps the reservation", async () => {
    const { env, peek } = setup({ usage: "openai" });
    const gate = crypto.randomUUID();
    const { response, settled } = await send(env, `/sse?tokens=370&bytes=65536&gate=${gate}`);
    const reader = response.body!.getReader();
    expect((await reader.read()).done).toBe(false);
    await reader.cancel("the client went away");
    await fetch(`${inject("usageOriginUrl")}/open/${gate}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
    await settled();
    expect(await peek()).toBe(9_000);
  });

  test("a stream without a usage event keeps the reservation", async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const { env, peek } = setup({ usage: "openai" });
    const { response, settled } = await send(env, "/sse?bytes=1000");
    expect(await response.text()).toContain("data: [DONE]");
    await settled();
    expect(await peek()).toBe(9_000);
  });
});

// What a client can make an origin say about its cost: its own words, echoed back. A route that reserves
// 1,000 of 3,000 an hour admits exactly 3 such requests, the fourth refused, whatever the echo says;
// while the origin's own usage, in a 2xx JSON body or the last event of a stream, still settles exactly.
describe("a cost the client wrote is never read", () => {
  const ZERO = '{"usage":{"total_tokens":0}}';

  /** Four requests through `env`; the statuses, after each one's body and settle. */
  async function four(env: Env, path: string, init: Parameters<typeof send>[2]) {
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) {
      const { response, settled } = await send(env, path, init);
      statuses.push(response.status);
      await response.arrayBuffer();
      await settled();
    }
    return statuses;
  }

  test.each([
    ["a text/plain echo", "/echo?type=text/plain", 200],
    ["an HTML error page", "/echo?status=400&type=text/html;%20charset=utf-8", 400],
    ["a 4xx JSON error", "/echo?status=422&type=application/json", 422],
    ["a 5xx problem+json", "/echo?status=500&type=application/problem%2Bjson", 500],
    ["a 2xx body without a Content-Type", "/echo?type=", 200],
  ])("%s keeps the reservation: 3 admitted, the 4th refused", async (_, path, status) => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const { env, peek } = setup({ usage: "openai" }, 3_000);
    expect(await four(env, path, { body: ZERO })).toEqual([status, status, status, 429]);
    expect(await peek()).toBe(0);
  });

  test("a usage line echoed early in a stream: the last usage event (370) is what settles", async () => {
    const { env, peek } = setup({ usage: "openai" }, 3_000);
    const { response, settled } = await send(env, "/sse-echo?tokens=370", { body: ZERO });
    expect(await response.text()).toMatch(/^data: \{"usage":\{"total_tokens":0\}\}\n\n/);
    await settled();
    expect(await peek()).toBe(2_630);
    // and the three reservations that fit after it are still counted at 370 each
    expect(await four(env, "/sse-echo?tokens=370", { body: ZERO })).toEqual([200, 200, 200, 200]);
    expect(await peek()).toBe(1_150);
  });

  test("a 2xx JSON body the origin wrote still settles exactly", async () => {
    const { env, peek } = setup({ usage: "openai" }, 3_000);
    const { response, settled } = await send(env, "/json?tokens=370");
    expect(response.status).toBe(200);
    await response.arrayBuffer();
    await settled();
    expect(await peek()).toBe(2_630);
  });

  test("a client's own x-usage request header never reaches the origin, nor refunds", async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const { env, peek } = setup({ header: "x-usage" }, 3_000);
    expect(await four(env, "/header-echo", { headers: { "X-Usage": "0" } })).toEqual([200, 200, 200, 429]);
    expect(await peek()).toBe(0);
  });

  test("the origin's x-usage on a non-2xx answer is its own statement: it settles", async () => {
    const { env, peek } = setup({ header: "x-usage" }, 3_000);
    const { response, settled } = await send(env, "/header?value=370&status=500");
    expect(response.status).toBe(500);
    expect(response.headers.has("x-usage")).toBe(false);
    await response.arrayBuffer();
    await settled();
    expect(await peek()).toBe(2_630);
  });
});
