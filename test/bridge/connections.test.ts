/**
 * The bridge's Redis connections under callers that leave, overflow or misbehave: abandoned blocking
 * commands, the dedicated-connection cap, per-connection state, pub/sub over SSE, the body limit.
 * A private redis-server, so connection and subscriber counts are this file's alone.
 */
import http from "node:http";
import net from "node:net";
import { Redis } from "@upstash/redis";
import { beforeAll, describe, expect, it } from "vitest";
import { type Bridge, type RedisServer, startBridge } from "../../src/bridge/index.js";
import type { RedisConnection } from "../../src/bridge/resp.js";
import { privateRedis } from "../own-bridge.js";

const token = "connections-test";
const own = privateRedis({ token, bridge: { maxDedicatedConnections: 4, maxBodyBytes: 4096 } });
let server: RedisServer;
let bridge: Bridge;
let direct: RedisConnection;

beforeAll(() => {
  ({ server, bridge, conn: direct } = own);
});

let counter = 0;
function key(name: string): string {
  counter += 1;
  return `connections:${name}:${counter}`;
}

function client(url = bridge.url): Redis {
  return new Redis({ url, token, enableTelemetry: false });
}

async function post(path: string, body: unknown, signal?: AbortSignal, url = bridge.url) {
  const res = await fetch(`${url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}` },
    body: JSON.stringify(body),
    signal,
  });
  return { status: res.status, json: (await res.json()) as unknown };
}

/** Polls `probe` until it returns true (at most 500 tries, 10 ms apart): waits on events, not time. */
async function until(what: string, probe: () => Promise<boolean> | boolean): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (await probe()) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`gave up waiting for ${what}`);
}

async function info(field: string): Promise<number> {
  const text = String(await direct.call("INFO", "clients"));
  const match = text.match(new RegExp(`${field}:(\\d+)`));
  if (!match) throw new Error(`INFO clients has no ${field}`);
  return Number(match[1]);
}

/** Sends `body` to `path`, waits until Redis holds `blocked` blocked clients, then aborts the request. */
async function abandon(requests: { path: string; body: unknown }[], blocked: number): Promise<void> {
  const controller = new AbortController();
  const pending = requests.map(({ path, body }) =>
    post(path, body, controller.signal).catch(() => "aborted"),
  );
  await until(`${blocked} blocked clients`, async () => (await info("blocked_clients")) === blocked);
  controller.abort();
  expect(await Promise.all(pending)).toEqual(requests.map(() => "aborted"));
}

describe("a blocking command whose caller went away", () => {
  it("does not swallow the next pushed items: 3 abandoned BLPOP q 0, then RPUSH q a b c", async () => {
    const q = key("blpop");
    await abandon(
      [1, 2, 3].map(() => ({ path: "/", body: ["BLPOP", q, 0] })),
      3,
    );
    const redis = client();
    expect(await redis.rpush(q, "a", "b", "c")).toBe(3);
    expect(await redis.lrange(q, 0, -1)).toEqual(["a", "b", "c"]);
    await until("the dedicated connections to be freed", () => bridge.stats.dedicatedConnections === 0);
    expect(await info("blocked_clients")).toBe(0);
  });

  it("holds with @upstash/redis's own signal option: redis.exec(BLPOP q 0) three times, then abort", async () => {
    const q = key("client-signal");
    const controller = new AbortController();
    const blocking = new Redis({ url: bridge.url, token, enableTelemetry: false, signal: controller.signal });
    const pops = [1, 2, 3].map(() => blocking.exec(["BLPOP", q, "0"]));
    await until("the BLPOPs to block", async () => (await info("blocked_clients")) > 0);
    controller.abort();
    // The client answers an aborted request with its "Aborted" result rather than an error.
    await Promise.allSettled(pops);
    await until("the dedicated connections to be freed", () => bridge.stats.dedicatedConnections === 0);
    const redis = client();
    expect(await redis.rpush(q, "a", "b", "c")).toBe(3);
    expect(await redis.lrange(q, 0, -1)).toEqual(["a", "b", "c"]);
  });

  it("holds when the caller's connection is reset (a killed client), not closed", async () => {
    const q = key("reset");
    const { port } = new URL(bridge.url);
    const body = JSON.stringify(["BLPOP", q, 0]);
    const request =
      `POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\n` +
      `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
    const sockets = [1, 2, 3].map(() =>
      net.connect(Number(port), "127.0.0.1", function (this: net.Socket) {
        this.write(request);
      }),
    );
    for (const socket of sockets) socket.on("error", () => {});
    await until("3 blocked clients", async () => (await info("blocked_clients")) === 3);
    for (const socket of sockets) socket.resetAndDestroy();
    expect(await post("/", ["RPUSH", q, "a", "b", "c"])).toEqual({ status: 200, json: { result: 3 } });
    expect(await direct.call("LRANGE", q, 0, -1)).toEqual(["a", "b", "c"].map((v) => Buffer.from(v)));
  });

  it("does not swallow them from inside a pipeline, nor run the pipeline's later commands", async () => {
    const q = key("pipeline");
    const marker = key("marker");
    await abandon(
      [1, 2].map(() => ({ path: "/pipeline", body: [["PING"], ["BRPOP", q, 0], ["INCR", marker]] })),
      2,
    );
    await post("/", ["RPUSH", q, "a", "b"]);
    expect(await direct.call("LRANGE", q, 0, -1)).toEqual([Buffer.from("a"), Buffer.from("b")]);
    expect(await direct.call("GET", marker)).toBeNull();
  });

  it("covers the other blocking commands: BLMOVE, BZPOPMIN, XREAD BLOCK, XREADGROUP BLOCK, WAIT", async () => {
    const list = key("blmove");
    const zset = key("bzpopmin");
    const stream = key("xread");
    await direct.call("XGROUP", "CREATE", stream, "g", "$", "MKSTREAM");
    await abandon(
      [
        ["BLMOVE", list, key("dest"), "LEFT", "RIGHT", 0],
        ["BZPOPMIN", zset, 0],
        ["XREADGROUP", "GROUP", "g", "c", "BLOCK", 0, "STREAMS", stream, ">"],
        ["WAIT", 1, 0],
      ].map((body) => ({ path: "/", body })),
      4,
    );
    await abandon([{ path: "/", body: ["XREAD", "BLOCK", 0, "STREAMS", stream, "$"] }], 1);
    await post("/pipeline", [
      ["RPUSH", list, "x"],
      ["ZADD", zset, 1, "m"],
      ["XADD", stream, "*", "f", "v"],
    ]);
    expect(await direct.call("LLEN", list)).toBe(1);
    expect(await direct.call("ZCARD", zset)).toBe(1);
    // No consumer read the entry: nothing pending for the group.
    expect(((await direct.call("XPENDING", stream, "g")) as unknown[])[0]).toBe(0);
  });

  it("never blocks inside /multi-exec (Redis runs BLPOP there as LPOP), so nothing is held", async () => {
    const q = key("multi");
    expect(
      await post("/multi-exec", [
        ["BLPOP", q, 0],
        ["RPUSH", q, "kept"],
      ]),
    ).toEqual({
      status: 200,
      json: [{ result: null }, { result: 1 }],
    });
    expect(await direct.call("LRANGE", q, 0, -1)).toEqual([Buffer.from("kept")]);
  });
});

describe("dedicated connections are capped", () => {
  it("answers 503 when all are in use, and frees them when their callers leave", async () => {
    const q = key("cap");
    const controller = new AbortController();
    const held = [1, 2, 3, 4].map(() => post("/", ["BLPOP", q, 0], controller.signal).catch(() => "aborted"));
    await until("4 blocked clients", async () => (await info("blocked_clients")) === 4);
    expect(bridge.stats.dedicatedConnections).toBe(4);
    expect(await post("/", ["BLPOP", q, 0])).toEqual({
      status: 503,
      json: {
        error:
          "ERR edgelimit-bridge: all 4 dedicated Redis connections are in use (blocking commands and " +
          "subscriptions); retry later, or raise maxDedicatedConnections (--max-dedicated)",
      },
    });
    // Ordinary commands, pipelines and transactions do not need one.
    expect(await post("/", ["PING"])).toEqual({ status: 200, json: { result: "PONG" } });
    expect((await post("/multi-exec", [["PING"]])).status).toBe(200);
    controller.abort();
    await Promise.all(held);
    await until("the slots to be freed", () => bridge.stats.dedicatedConnections === 0);
    expect(await post("/", ["BLPOP", q, 0.01])).toEqual({ status: 200, json: { result: null } });
    expect(await info("blocked_clients")).toBe(0);
  });

  it("rejects a cap that is not a positive integer, naming the option", async () => {
    await expect(
      startBridge({ redisUrl: server.url, port: 0, token, maxDedicatedConnections: 0 }),
    ).rejects.toThrow("startBridge: `maxDedicatedConnections` must be an integer of at least 1, got 0");
  });
});

describe("per-connection state cannot leak between callers", () => {
  const refused = [
    ["SELECT", 1],
    ["CLIENT", "SETNAME", "mine"],
    ["CLIENT", "SETINFO", "LIB-NAME", "mine"],
    ["CLIENT", "TRACKING", "ON"],
    ["CLIENT", "CACHING", "YES"],
    ["CLIENT", "REPLY", "OFF"],
    ["CLIENT", "NO-EVICT", "ON"],
    ["CLIENT", "NO-TOUCH", "ON"],
    ["HELLO", 3],
    ["AUTH", "default", "x"],
    ["RESET"],
    ["READONLY"],
    ["READWRITE"],
    ["MONITOR"],
    ["SUBSCRIBE", "ch"],
    ["QUIT"],
  ];

  it("refuses commands that set connection state, alone, in a pipeline and in a transaction", async () => {
    for (const cmd of refused) {
      const name =
        cmd[0] === "CLIENT" ? `client ${String(cmd[1]).toLowerCase()}` : String(cmd[0]).toLowerCase();
      const error = `ERR Command is not available over REST: '${name}'`;
      expect(await post("/", cmd)).toEqual({ status: 400, json: { error } });
      expect(await post("/pipeline", [cmd, ["PING"]])).toEqual({
        status: 200,
        json: [{ error }, { result: "PONG" }],
      });
      expect(await post("/multi-exec", [["PING"], cmd])).toEqual({ status: 400, json: { error } });
    }
    const path = await fetch(`${bridge.url}/client/setname/mine`, {
      headers: { authorization: `Bearer ${token}` },
    });
    expect(path.status).toBe(400);
  });

  it("leaves the shared connection as it was: no name, database 0, no tracking, replies on", async () => {
    const k = key("db0");
    await direct.call("SET", k, "zero");
    expect(
      await post("/pipeline", [
        ["CLIENT", "GETNAME"],
        ["GET", k],
        ["CLIENT", "TRACKINGINFO"],
      ]),
    ).toEqual({
      status: 200,
      json: [
        { result: null },
        { result: "zero" },
        { result: ["flags", ["off"], "redirect", -1, "prefixes", []] },
      ],
    });
  });

  it("still runs the harmless CLIENT subcommands", async () => {
    expect((await post("/", ["CLIENT", "GETNAME"])).json).toEqual({ result: null });
    expect(typeof ((await post("/", ["CLIENT", "ID"])).json as { result: unknown }).result).toBe("number");
  });
});

describe("read your writes", () => {
  it("answers a new Upstash-Sync-Token each time, which @upstash/redis keeps", async () => {
    const redis = client();
    expect(redis.readYourWritesSyncToken).toBe("");
    await redis.set(key("ryw"), "v");
    const first = redis.readYourWritesSyncToken;
    await redis.get(key("ryw"));
    expect([first, redis.readYourWritesSyncToken].map((t) => /^\d+$/.test(t ?? ""))).toEqual([true, true]);
    expect(redis.readYourWritesSyncToken).not.toBe(first);
  });
});

describe("pub/sub as Server-Sent Events", () => {
  async function numsub(channel: string): Promise<number> {
    const reply = (await direct.call("PUBSUB", "NUMSUB", channel)) as unknown[];
    return Number(reply[1]);
  }

  it("delivers a PUBLISH sent through the bridge to @upstash/redis's subscribe(), then lets go", async () => {
    const redis = client();
    const channel = key("channel");
    const subscriber = redis.subscribe<{ n: number }>([channel]);
    const messages: unknown[] = [];
    const counts: unknown[] = [];
    subscriber.on("message", (data) => messages.push(data));
    const subscribed = new Promise((resolve) => subscriber.on("subscribe", resolve));
    subscriber.on("subscribe", (count) => counts.push(count));
    await subscribed;
    expect(counts).toEqual([1]);
    expect(await redis.publish(channel, { n: 1 })).toBe(1);
    expect(await redis.publish(channel, "plain text, with commas")).toBe(1);
    await until("two messages", () => messages.length === 2);
    expect(messages).toEqual([
      { channel, message: { n: 1 } },
      { channel, message: "plain text, with commas" },
    ]);
    expect(bridge.stats.dedicatedConnections).toBe(1);
    await subscriber.unsubscribe();
    await until("Redis to drop the subscriber", async () => (await numsub(channel)) === 0);
    await until("the slot to be freed", () => bridge.stats.dedicatedConnections === 0);
  });

  it("delivers pattern messages to psubscribe()", async () => {
    const redis = client();
    const prefix = key("news");
    const subscriber = redis.psubscribe([`${prefix}.*`]);
    const messages: unknown[] = [];
    subscriber.on("pmessage", (data) => messages.push(data));
    await new Promise((resolve) => subscriber.on("psubscribe", resolve));
    expect(await redis.publish(`${prefix}.sport`, { score: 3 })).toBe(1);
    await until("a message", () => messages.length === 1);
    expect(messages).toEqual([{ pattern: `${prefix}.*`, channel: `${prefix}.sport`, message: { score: 3 } }]);
    await subscriber.unsubscribe();
    await until("Redis to drop the pattern", async () => Number(await direct.call("PUBSUB", "NUMPAT")) === 0);
  });

  it("writes the SSE wire format: one data line per line of the message", async () => {
    const channel = key("raw");
    const controller = new AbortController();
    const res = await fetch(`${bridge.url}/subscribe/${encodeURIComponent(channel)}`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, accept: "text/event-stream" },
      body: "[]",
      signal: controller.signal,
    });
    expect([res.status, res.headers.get("content-type")]).toEqual([200, "text/event-stream"]);
    const reader = res.body!.getReader();
    let text = "";
    const readUntil = async (end: string) => {
      while (!text.endsWith(end)) text += new TextDecoder().decode((await reader.read()).value);
    };
    await readUntil(`data: subscribe,${channel},1\n\n`);
    await direct.call("PUBLISH", channel, "two\nlines");
    await readUntil("lines\n\n");
    expect(text).toBe(`data: subscribe,${channel},1\n\ndata: message,${channel},two\ndata: lines\n\n`);
    controller.abort();
    await until("Redis to drop the subscriber", async () => (await numsub(channel)) === 0);
  });

  it("subscribes to every channel of the path, confirmations first", async () => {
    const [a, b] = [key("multi-a"), key("multi-b")];
    const controller = new AbortController();
    const res = await fetch(`${bridge.url}/subscribe/${a}/${b}`, {
      headers: { authorization: `Bearer ${token}` },
      signal: controller.signal,
    });
    const reader = res.body!.getReader();
    let text = "";
    const expected = `data: subscribe,${a},1\n\ndata: subscribe,${b},2\n\ndata: message,${b},hi\n\n`;
    await until("both confirmations", () => numsub(b).then((n) => n === 1));
    await direct.call("PUBLISH", b, "hi");
    while (text.length < expected.length) text += new TextDecoder().decode((await reader.read()).value);
    expect(text).toBe(expected);
    controller.abort();
    await until("Redis to drop the subscriber", async () => (await numsub(a)) + (await numsub(b)) === 0);
  });

  it("answers 400 for a path with no channel, and 401 without the token", async () => {
    expect(await post("/subscribe/", [])).toEqual({
      status: 400,
      json: { error: "ERR /subscribe/ names no channel: use /subscribe/<channel>" },
    });
    const res = await fetch(`${bridge.url}/subscribe/x`, { method: "POST", body: "[]" });
    expect(res.status).toBe(401);
  });

  it("ends open streams when the bridge closes", async () => {
    const own = await startBridge({ redisUrl: server.url, port: 0, token });
    const res = await fetch(`${own.url}/subscribe/bye`, { headers: { authorization: `Bearer ${token}` } });
    const body = res.text();
    await own.close();
    expect(await body).toBe("data: subscribe,bye,1\n\n");
  });
});

/** A POST with a chunked body (no Content-Length), so the limit must be enforced while reading. */
function postChunked(url: string, body: Buffer): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "transfer-encoding": "chunked" },
    });
    req.on("response", (res) => {
      let text = "";
      res.on("data", (chunk: Buffer) => {
        text += chunk;
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, text }));
    });
    req.on("error", reject);
    for (let i = 0; i < body.length; i += 1000) req.write(body.subarray(i, i + 1000));
    req.end();
  });
}

describe("request body limit", () => {
  /** A JSON command body of exactly `size` bytes. */
  function bodyOf(size: number): Buffer {
    const head = '["ECHO","';
    return Buffer.from(`${head}${"x".repeat(size - head.length - 2)}"]`);
  }

  it("answers 413 above maxBodyBytes, whether Content-Length says so or the body runs over", async () => {
    const error = { error: "ERR request body is larger than 4096 bytes" };
    expect((await postChunked(bridge.url, bodyOf(4096))).status).toBe(200);
    const over = await postChunked(bridge.url, bodyOf(4097));
    expect([over.status, JSON.parse(over.text)]).toEqual([413, error]);
    const sized = await fetch(bridge.url, {
      method: "POST",
      headers: { authorization: `Bearer ${token}` },
      body: bodyOf(4097).toString("latin1"),
    });
    expect([sized.status, await sized.json()]).toEqual([413, error]);
    const fits = await fetch(bridge.url, {
      method: "POST",
      headers: { authorization: `Bearer ${token}` },
      body: bodyOf(4096).toString("latin1"),
    });
    expect(fits.status).toBe(200);
  });
});
