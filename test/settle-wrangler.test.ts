// Costs from the response as a user deploys them: `npm start`'s script runs the real Worker under
// `wrangler dev` (local mode), with Redis behind the shared REST bridge (UPSTASH_REDIS_REST_URL and
// _TOKEN, as a user points it at a database), a config of this file's own, in front of an origin of
// this file's own. One route settles from an `x-usage` header, one from the OpenAI usage of a JSON body
// or an SSE stream. The refunds are read back exactly with a peek by a Limiter of the same prefix and
// rules, on the same bridge, through a real @upstash/redis client with default options.
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "@upstash/redis";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { parseConfig } from "../src/adapters/worker/config.js";
import { fixedWindow, Limiter } from "../src/index.js";
import { type StartedWorker, startOnBridge } from "./started-worker.js";
import { sharedBridge } from "./support.js";

const dir = mkdtempSync(join(tmpdir(), "edgelimit-settle-wrangler-"));
const bridge = sharedBridge();
const prefix = `settle-wrangler-${crypto.randomUUID().slice(0, 8)}`;

// A fixed window of a day: nothing comes back with time while the test runs (it is not near midnight
// UTC for long), so every number read back is exact. Each request reserves 1,000.
const LIMIT = 10_000;
const RESERVE = 1_000;
const rules = { perDay: { algorithm: "fixedWindow", limit: LIMIT, window: "1d" } };
const route = (name: string, path: string, settle: unknown) => ({
  name,
  match: { path },
  key: "header:x-api-key",
  rules,
  cost: RESERVE,
  timeout: "10s",
  settle,
});
const routes = [
  route("metered", "/h/*", { header: "x-usage" }),
  route("shown", "/x/*", { header: "x-usage", expose: true }),
  route("chat", "/ai/*", { usage: "openai" }),
];

// ------------------------------------------------------------------------------------------- origin
// /h/..., /x/...?usage=V        200 "served", with X-Usage: V when V is given
// /ai/json?tokens=N             an OpenAI chat completion, usage in the middle
// /ai/sse?tokens=N&bytes=B&gate=ID
//                               an OpenAI chat stream of at least B bytes of content events, then (once
//                               the test opened gate ID) the usage event and [DONE]

/** The SSE body's pieces, as the origin writes them: the same bytes for the same arguments. */
function ssePieces(tokens: number, bytes: number): { head: Buffer[]; tail: Buffer[] } {
  const head: Buffer[] = [];
  let sent = 0;
  for (let i = 0; sent < bytes; i++) {
    const event = Buffer.from(
      `data: {"id":"c","choices":[{"index":0,"delta":{"content":"${i} héllo 世界 😀 "}}],"usage":null}\r\n\r\n`,
    );
    sent += event.length;
    head.push(event);
  }
  const usage = `data: {"id":"c","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":${tokens - 20},"total_tokens":${tokens}}}\r\n\r\n`;
  return { head, tail: [Buffer.from(usage), Buffer.from("data: [DONE]\r\n\r\n")] };
}

/** The same events written in pieces of at least `size` bytes (`/ai/sse?...&batch=size`). */
function batched(pieces: Buffer[], size: number): Buffer[] {
  if (size <= 0) return pieces;
  const out: Buffer[] = [];
  let group: Buffer[] = [];
  let length = 0;
  for (const piece of pieces) {
    group.push(piece);
    length += piece.length;
    if (length >= size) {
      out.push(Buffer.concat(group));
      group = [];
      length = 0;
    }
  }
  if (group.length > 0) out.push(Buffer.concat(group));
  return out;
}

const jsonBody = (tokens: number) =>
  `{"id":"chatcmpl-1","object":"chat.completion","usage":{"prompt_tokens":20,"completion_tokens":${tokens - 20},"total_tokens":${tokens}},"choices":[{"index":0,"message":{"role":"assistant","content":"héllo 世界 😀"}}]}`;

const gates = new Map<string, () => void>();
/** By gate id: when the origin's response was closed (ended, or its connection dropped). */
const closed = new Map<string, Promise<unknown>>();
const gateOpen = new Map<string, Promise<void>>();
function gate(id: string): Promise<void> {
  let promise = gateOpen.get(id);
  if (!promise) {
    promise = new Promise((resolve) => gates.set(id, resolve));
    gateOpen.set(id, promise);
  }
  return promise;
}
function open(id: string): void {
  void gate(id);
  gates.get(id)?.();
}

async function write(response: ServerResponse, bytes: Buffer): Promise<void> {
  if (!response.write(bytes)) await new Promise((resolve) => response.once("drain", resolve));
}

let origin: Server;
let start: StartedWorker | undefined;
let base = "";

beforeAll(async () => {
  origin = createServer(async (request, response) => {
    const url = new URL(request.url ?? "/", "http://origin");
    const tokens = Number(url.searchParams.get("tokens") ?? 0);
    if (url.pathname.startsWith("/ai/json")) {
      response.writeHead(200, { "Content-Type": "application/json" });
      response.end(jsonBody(tokens));
      return;
    }
    if (url.pathname.startsWith("/ai/sse")) {
      const { head, tail } = ssePieces(tokens, Number(url.searchParams.get("bytes") ?? 0));
      response.writeHead(200, {
        "Content-Type": "text/event-stream; charset=utf-8",
        "Cache-Control": "no-cache",
      });
      for (const piece of batched(head, Number(url.searchParams.get("batch") ?? 0))) {
        await write(response, piece);
      }
      const id = url.searchParams.get("gate");
      if (id !== null) closed.set(id, new Promise((resolve) => response.once("close", resolve)));
      if (id !== null) await gate(id);
      // still generating: events 20 ms apart after the gate opened, then the usage event
      for (let i = Number(url.searchParams.get("after") ?? 0); i > 0; i--) {
        if (response.destroyed) return;
        await write(
          response,
          Buffer.from(`data: {"id":"c","choices":[{"index":0,"delta":{"content":"${i}"}}]}\r\n\r\n`),
        );
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      for (const piece of tail) await write(response, piece);
      response.end();
      return;
    }
    const usage = url.searchParams.get("usage");
    response.writeHead(200, {
      "Content-Type": "text/plain",
      ...(usage === null ? {} : { "X-Usage": usage }),
    });
    response.end("served");
  });
  await new Promise<void>((resolve) => origin.listen(0, "127.0.0.1", resolve));
  const config = { origin: `http://127.0.0.1:${(origin.address() as AddressInfo).port}`, prefix, routes };
  expect(parseConfig(config).ok).toBe(true);
  const file = join(dir, "settle.json");
  writeFileSync(file, JSON.stringify(config));
  ({ start, base } = await startOnBridge(file, bridge.url, inject("bridgeToken")));
}, 120_000);

afterAll(async () => {
  await start?.stop();
  for (const id of gates.keys()) open(id);
  origin?.closeAllConnections();
  await new Promise((resolve) => origin?.close(resolve));
  rmSync(dir, { recursive: true, force: true });
}, 60_000);

// ---------------------------------------------------------------------------------------------- peeks

let peeker: Limiter | undefined;
/** Units left for `apiKey` on route `name`, read by a Limiter of the Worker's prefix and rules. */
async function remaining(name: string, apiKey: string): Promise<number> {
  peeker ??= new Limiter({
    redis: new Redis({ url: bridge.url, token: inject("bridgeToken") }),
    prefix,
    rules: { perDay: fixedWindow({ limit: LIMIT, window: "1d" }) },
  });
  const id = `${name}:sha256:${createHash("sha256").update(apiKey).digest("hex")}`;
  const decision = await peeker.limit(id, { cost: 0 });
  expect(decision.source).toBe("redis");
  return decision.remaining;
}

/** Waits (up to 10 s) for the settle to land: the units left become `expected`, and stay so. */
async function settlesTo(name: string, apiKey: string, expected: number): Promise<void> {
  const deadline = Date.now() + 10_000;
  let seen = await remaining(name, apiKey);
  while (seen !== expected && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    seen = await remaining(name, apiKey);
  }
  expect(seen).toBe(expected);
  // no second charge or refund follows
  await new Promise((resolve) => setTimeout(resolve, 300));
  expect(await remaining(name, apiKey)).toBe(expected);
}

const key = () => `k-${crypto.randomUUID()}`;
const get = (path: string, apiKey: string) => fetch(`${base}${path}`, { headers: { "x-api-key": apiKey } });
const rateLimitRemaining = (response: Response) =>
  Number(/;r=(\d+)/.exec(response.headers.get("ratelimit") ?? "")?.[1]);

describe('"settle": { "header": "x-usage" } under wrangler dev', () => {
  it("gives back exactly what the reservation overshot, and removes the header", async () => {
    const apiKey = key();
    const response = await get("/h/a?usage=370", apiKey);
    expect(response.status).toBe(200);
    expect(await response.text()).toBe("served");
    expect(response.headers.has("x-usage")).toBe(false);
    // decided before the settle: the reservation
    expect(rateLimitRemaining(response)).toBe(LIMIT - RESERVE);
    await settlesTo("metered", apiKey, LIMIT - 370);
    // the next request sees the refund in its RateLimit header
    const next = await get("/h/b?usage=1000", apiKey);
    await next.arrayBuffer();
    expect(rateLimitRemaining(next)).toBe(LIMIT - 370 - RESERVE);
    await settlesTo("metered", apiKey, LIMIT - 370 - RESERVE);
  });

  it("charges a debt past the reservation, and 0 gives all of it back", async () => {
    const apiKey = key();
    await (await get("/h/a?usage=2500", apiKey)).arrayBuffer();
    await settlesTo("metered", apiKey, LIMIT - 2_500);
    await (await get("/h/a?usage=0", apiKey)).arrayBuffer();
    await settlesTo("metered", apiKey, LIMIT - 2_500);
  });

  it("keeps the reservation when the header is missing or malformed", async () => {
    const apiKey = key();
    for (const path of ["/h/a", "/h/a?usage=3.5", "/h/a?usage=-2", "/h/a?usage=abc"]) {
      const response = await get(path, apiKey);
      expect(response.headers.has("x-usage")).toBe(false);
      await response.arrayBuffer();
    }
    await settlesTo("metered", apiKey, LIMIT - 4 * RESERVE);
  });

  it('leaves the header with "expose": true', async () => {
    const apiKey = key();
    const response = await get("/x/a?usage=42", apiKey);
    expect(response.headers.get("x-usage")).toBe("42");
    await response.arrayBuffer();
    await settlesTo("shown", apiKey, LIMIT - 42);
  });
});

describe('"settle": { "usage": "openai" } under wrangler dev', () => {
  it("a JSON body: passes unchanged, settles usage.total_tokens", async () => {
    const apiKey = key();
    const response = await get("/ai/json?tokens=370", apiKey);
    expect(Buffer.from(await response.arrayBuffer()).equals(Buffer.from(jsonBody(370)))).toBe(true);
    await settlesTo("chat", apiKey, LIMIT - 370);
  });

  // wrangler dev's own proxy in front of the Worker (its ProxyWorker) stalls a body written fast in
  // thousands of small pieces after ~700 KB, with any Worker (a bare `return fetch(origin)` one too),
  // while the workerd behind it streams it whole; a body in larger pieces passes. So: 256 KB of small
  // events, and 1 MB of them written 64 KB at a time.
  it.each([
    ["256 KB of 330-byte writes", 256 << 10, 0],
    ["1 MB of 64 KB writes", 1 << 20, 64 << 10],
  ])(
    "an SSE stream (%s) passes byte for byte, and the settle lands after its end",
    async (_, bytes, batch) => {
      const apiKey = key();
      const id = crypto.randomUUID();
      const { head, tail } = ssePieces(370, bytes);
      const expected = Buffer.concat([...head, ...tail]);
      const response = await get(`/ai/sse?tokens=370&bytes=${bytes}&batch=${batch}&gate=${id}`, apiKey);
      expect(response.headers.get("content-type")).toBe("text/event-stream; charset=utf-8");
      const reader = response.body!.getReader();
      const chunks: Uint8Array[] = [];
      let received = 0;
      // every content event arrives before the usage event is sent: no buffering on the way
      const headLength = Buffer.concat(head).length;
      while (received < headLength) {
        const { value, done } = await reader.read();
        if (done) throw new Error(`the stream ended after ${received} bytes`);
        chunks.push(value);
        received += value.length;
      }
      expect(received).toBe(headLength);
      // the body has not ended: the reservation stands
      expect(await remaining("chat", apiKey)).toBe(LIMIT - RESERVE);
      open(id);
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        chunks.push(value);
      }
      const body = Buffer.concat(chunks);
      expect(body.length).toBe(expected.length);
      expect(body.equals(expected)).toBe(true);
      await settlesTo("chat", apiKey, LIMIT - 370);
    },
  );

  // The runtime learns that the client left when a write to it fails: here the model is still
  // generating (50 more events, 20 ms apart) after the client went away, as a model would be. A stream
  // that ends before any further write reaches the Worker ends whole, and is settled.
  it("a client that goes away mid-stream keeps the reservation", async () => {
    const apiKey = key();
    const id = crypto.randomUUID();
    const response = await get(`/ai/sse?tokens=5&bytes=65536&after=50&gate=${id}`, apiKey);
    const reader = response.body!.getReader();
    await reader.read();
    await reader.cancel();
    open(id);
    // the origin's answer is over (the Worker stopped reading it, or it ended): then, past the time a
    // settle takes to land, a later request of the same key is settled and the abandoned one still
    // holds its 1,000
    await closed.get(id);
    await new Promise((resolve) => setTimeout(resolve, 500));
    await (await get("/ai/json?tokens=30", apiKey)).arrayBuffer();
    await settlesTo("chat", apiKey, LIMIT - RESERVE - 30);
  });
});
