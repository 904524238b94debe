import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { Ratelimit } from "@upstash/ratelimit";
import { Redis, type RedisConfigNodejs } from "@upstash/redis";
import { beforeAll, describe, expect, inject, it, vi } from "vitest";
import { parseCliArgs, USAGE, UsageError } from "../../src/bridge/cli-args.js";
import { startBridge, startRedisServer } from "../../src/bridge/index.js";
import {
  encodeCommands,
  type RedisConnection,
  RedisError,
  type Reply,
  RespParser,
} from "../../src/bridge/resp.js";
import { stripUnknownShebangFlags } from "../../src/bridge/scripts.js";
import { sharedRedis } from "../own-bridge.js";

const redisUrl = inject("redisUrl");
const bridgeUrl = inject("bridgeUrl");
const token = inject("bridgeToken");

let counter = 0;
/** A key no other test (or test file) uses: tests share one Redis. */
function key(name: string): string {
  counter += 1;
  return `bridge-test:${name}:${counter}:${Math.random().toString(36).slice(2, 10)}`;
}

function sha1(text: string): string {
  return createHash("sha1").update(text, "utf8").digest("hex");
}

interface RawResponse {
  status: number;
  body: string;
  json: unknown;
}

/** A raw HTTP call to a bridge; `body` is JSON-encoded unless it is already a string. */
async function raw(
  path: string,
  body?: unknown,
  init: { method?: string; headers?: Record<string, string>; url?: string } = {},
): Promise<RawResponse> {
  const res = await fetch(`${init.url ?? bridgeUrl}${path}`, {
    method: init.method ?? (body === undefined ? "GET" : "POST"),
    headers: { authorization: `Bearer ${token}`, ...init.headers },
    body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, body: text, json };
}

const b64 = { "upstash-encoding": "base64" };

function client(options: Partial<RedisConfigNodejs> = {}, url = bridgeUrl): Redis {
  return new Redis({ url, token, enableTelemetry: false, ...options });
}

const shared = sharedRedis();
let direct: RedisConnection;
beforeAll(() => {
  direct = shared.conn;
});

describe("wire format (raw HTTP, as Upstash documents it)", () => {
  it("answers one command in the JSON body form", async () => {
    const k = key("single");
    expect(await raw("/", ["SET", k, "value"])).toMatchObject({ status: 200, body: '{"result":"OK"}' });
    expect((await raw("/", ["GET", k])).body).toBe('{"result":"value"}');
    expect((await raw("/", ["GET", key("missing")])).body).toBe('{"result":null}');
    expect((await raw("/", ["APPEND", k, 1234])).body).toBe('{"result":9}');
    expect((await raw("/", ["GET", k])).body).toBe('{"result":"value1234"}');
  });

  it("base64-encodes every string with Upstash-Encoding: base64, except a top-level OK", async () => {
    const k = key("b64");
    expect((await raw("/", ["SET", k, "bar"], { headers: b64 })).body).toBe('{"result":"OK"}');
    expect((await raw("/", ["GET", k], { headers: b64 })).body).toBe('{"result":"YmFy"}');
    expect((await raw("/", ["PING"], { headers: b64 })).body).toBe('{"result":"UE9ORw=="}');
    expect((await raw("/", ["TYPE", k], { headers: b64 })).body).toBe('{"result":"c3RyaW5n"}');
    expect((await raw("/", ["STRLEN", k], { headers: b64 })).body).toBe('{"result":3}');
    expect((await raw("/", ["GET", key("none")], { headers: b64 })).body).toBe('{"result":null}');
  });

  it("encodes nested arrays element by element: statuses, errors and nil included", async () => {
    const script =
      "return {1, 'two', {3, 'four', {false}}, redis.status_reply('OK'), redis.error_reply('ERR boom')}";
    expect((await raw("/", ["EVAL", script, 0])).body).toBe(
      '{"result":[1,"two",[3,"four",[null]],"OK","ERR boom"]}',
    );
    expect((await raw("/", ["EVAL", script, 0], { headers: b64 })).body).toBe(
      '{"result":[1,"dHdv",[3,"Zm91cg==",[null]],"T0s=","RVJSIGJvb20="]}',
    );
  });

  it("returns raw bytes as base64, and U+FFFD for invalid UTF-8 without it", async () => {
    const script = "return string.char(0, 255, 128, 65)";
    expect((await raw("/", ["EVAL", script, 0], { headers: b64 })).body).toBe('{"result":"AP+AQQ=="}');
    expect((await raw("/", ["EVAL", script, 0])).json).toEqual({ result: "\u0000\ufffd\ufffdA" });
  });

  it("sends arguments to Redis as UTF-8 bytes", async () => {
    const k = key("utf8");
    await raw("/", ["SET", k, "é😀\u0000x"]);
    expect((await raw("/", ["STRLEN", k])).body).toBe('{"result":8}');
    expect(await direct.call("GET", k)).toEqual(Buffer.from([0xc3, 0xa9, 0xf0, 0x9f, 0x98, 0x80, 0, 0x78]));
  });

  it("keeps every digit of integers beyond 2^53", async () => {
    const k = key("big");
    expect((await raw("/", ["INCRBY", k, "9007199254740993"])).body).toBe('{"result":9007199254740993}');
    expect((await raw("/", ["DECRBY", k, "18014398509481986"])).body).toBe('{"result":-9007199254740993}');
  });

  it("answers a pipeline with one entry per command, HTTP 200 even when some fail", async () => {
    const k = key("pipe");
    const res = await raw("/pipeline", [
      ["SET", k, "x"],
      ["INCR", k],
      ["GET", k],
      ["SETEX", k, 13, "y"],
    ]);
    expect(res.status).toBe(200);
    expect(res.body).toBe(
      '[{"result":"OK"},{"error":"ERR value is not an integer or out of range"},{"result":"x"},{"result":"OK"}]',
    );
  });

  it("answers a transaction like a pipeline, and with one error when Redis discards it", async () => {
    const k = key("tx");
    const ok = await raw(
      "/multi-exec",
      [
        ["SET", k, "x"],
        ["INCR", k],
        ["APPEND", k, "y"],
      ],
      { headers: b64 },
    );
    expect(ok.status).toBe(200);
    expect(ok.body).toBe(
      '[{"result":"OK"},{"error":"ERR value is not an integer or out of range"},{"result":2}]',
    );
    const discarded = await raw("/multi-exec", [["SET", k, "z"], ["GET"]]);
    expect(discarded).toMatchObject({
      status: 400,
      body: '{"error":"ERR wrong number of arguments for \'get\' command"}',
    });
    expect((await raw("/", ["GET", k])).body).toBe('{"result":"xy"}');
  });

  it("runs each transaction on the shared connection, as one block nothing can slip into", async () => {
    const shared = (await raw("/", ["CLIENT", "ID"])).json as { result: number };
    const again = (await raw("/", ["CLIENT", "ID"])).json as { result: number };
    const tx = (await raw("/multi-exec", [["CLIENT", "ID"]])).json as [{ result: number }];
    expect(again.result).toBe(shared.result);
    expect(tx[0].result).toBe(shared.result);
  });

  it("answers 400 with the Redis error for a failing single command", async () => {
    const k = key("wrongtype");
    await raw("/", ["HSET", k, "f", "v"]);
    expect(await raw("/", ["GET", k])).toMatchObject({
      status: 400,
      body: '{"error":"WRONGTYPE Operation against a key holding the wrong kind of value"}',
    });
    expect((await raw("/", ["NOSUCHCOMMAND"])).status).toBe(400);
  });

  it("refuses commands that would change the shared connection's state", async () => {
    expect(await raw("/", ["MULTI"])).toMatchObject({
      status: 400,
      body: `{"error":"ERR Command is not available over REST: 'multi'"}`,
    });
    const res = await raw("/pipeline", [["PING"], ["SUBSCRIBE", "ch"], ["PING"]]);
    expect(res.json).toEqual([
      { result: "PONG" },
      { error: "ERR Command is not available over REST: 'subscribe'" },
      { result: "PONG" },
    ]);
    expect((await raw("/multi-exec", [["PING"], ["WATCH", "x"]])).status).toBe(400);
  });

  it("supports the path form: /cmd/arg…, a POST body as last argument, query pairs after it", async () => {
    const k = key("path");
    expect((await raw(`/set/${encodeURIComponent(k)}/hello%20world`)).body).toBe('{"result":"OK"}');
    expect((await raw(`/get/${encodeURIComponent(k)}`)).body).toBe('{"result":"hello world"}');
    expect((await raw(`/set/${encodeURIComponent(k)}?EX=100`, '{"a":1}', { method: "POST" })).body).toBe(
      '{"result":"OK"}',
    );
    expect((await raw(`/GET/${encodeURIComponent(k)}`)).body).toBe('{"result":"{\\"a\\":1}"}');
    expect((await raw(`/ttl/${encodeURIComponent(k)}`)).body).toBe('{"result":100}');
  });

  it("answers 401 without the right token, and accepts ?_token=", async () => {
    const unauthorized = { status: 401, body: '{"error":"Unauthorized"}' };
    expect(await raw("/", ["PING"], { headers: { authorization: "" } })).toMatchObject(unauthorized);
    expect(await raw("/", ["PING"], { headers: { authorization: `Bearer ${token}x` } })).toMatchObject(
      unauthorized,
    );
    expect(await raw("/", ["PING"], { headers: { authorization: token } })).toMatchObject(unauthorized);
    expect(await raw("/pipeline", [["PING"]], { headers: { authorization: "Bearer dev" } })).toMatchObject(
      unauthorized,
    );
    const res = await fetch(`${bridgeUrl}/ping?_token=${encodeURIComponent(token)}`);
    expect([res.status, await res.text()]).toEqual([200, '{"result":"PONG"}']);
    const noAuth = await fetch(`${bridgeUrl}/ping`);
    expect([noAuth.status, await noAuth.text()]).toEqual([401, '{"error":"Unauthorized"}']);
  });

  it("answers 400 to malformed bodies, 404 to unknown paths, 405 to other methods", async () => {
    const bad = async (path: string, body: string) => {
      const res = await raw(path, body);
      expect(res.status).toBe(400);
      expect((res.json as { error: string }).error).toMatch(/^ERR /);
      return (res.json as { error: string }).error;
    };
    expect(await bad("/", "not json")).toMatch(/^ERR failed to parse the request body as JSON/);
    expect(await bad("/", '{"cmd":"PING"}')).toBe(
      'ERR the request body must be a non-empty JSON array, like ["SET","key","value"]',
    );
    expect(await bad("/", "[]")).toBe(
      'ERR the request body must be a non-empty JSON array, like ["SET","key","value"]',
    );
    expect(await bad("/", '[["PING"]]')).toBe("ERR the request body: the command name must be a string");
    expect(await bad("/", '["SET","k",{"a":1}]')).toBe(
      'ERR the request body: argument 2 must be a string, number or boolean, got {"a":1}',
    );
    expect(await bad("/pipeline", '["PING"]')).toBe(
      'ERR command 1 must be a non-empty JSON array, like ["SET","key","value"]',
    );
    expect(await bad("/multi-exec", "[]")).toBe(
      "ERR the request body must be a non-empty JSON array of commands",
    );
    expect(await raw("/no-such-command/x")).toMatchObject({ status: 404 });
    expect(await raw("/favicon.ico")).toMatchObject({ status: 404 });
    expect((await raw("/", undefined, { method: "DELETE" })).status).toBe(405);
    expect((await raw("/pipeline", undefined, { method: "GET" })).status).toBe(405);
  });

  it("runs blocking commands on a connection of their own", async () => {
    const list = key("blocking");
    let answered = false;
    const blpop = raw("/", ["BLPOP", list, 0]).finally(() => {
      answered = true;
    });
    // The shared connection stays free while BLPOP waits (with no timeout: only the push ends it).
    expect((await raw("/", ["PING"])).body).toBe('{"result":"PONG"}');
    expect(answered).toBe(false);
    await raw("/", ["RPUSH", list, "item"]);
    expect((await blpop).json).toEqual({ result: [list, "item"] });
  });
});

describe("@upstash/redis through the bridge", () => {
  const redis = client();
  const plain = client({ responseEncoding: false });
  const rawValues = client({ automaticDeserialization: false });

  it("round-trips strings, numbers and null", async () => {
    const k = key("basic");
    expect(await redis.set(k, "hello")).toBe("OK");
    expect(await redis.get(k)).toBe("hello");
    expect(await redis.get(key("absent"))).toBeNull();
    const n = key("n");
    expect(await redis.incr(n)).toBe(1);
    expect(await redis.incrby(n, 41)).toBe(42);
    expect(await redis.get(n)).toBe(42);
    expect(await rawValues.get(n)).toBe("42");
    expect(await redis.incrbyfloat(n, 0.5)).toBe(42.5);
    expect(await redis.exists(k, n, key("absent"))).toBe(2);
    expect(await redis.ping()).toBe("PONG");
    expect(await redis.type(k)).toBe("string");
  });

  it("(de)serializes JSON values", async () => {
    const k = key("json");
    const value = { a: 1, b: [true, null, "x"], c: { d: "é" } };
    await redis.set(k, value);
    expect(await redis.get(k)).toEqual(value);
    expect(await rawValues.get(k)).toBe('{"a":1,"b":[true,null,"x"],"c":{"d":"é"}}');
    const h = key("hash");
    await redis.hset(h, { name: "ann", age: 42, tags: ["x", "y"] });
    expect(await redis.hgetall(h)).toEqual({ name: "ann", age: 42, tags: ["x", "y"] });
  });

  it("is binary-safe: emoji, NUL bytes and a 1 MB value, in both response encodings", async () => {
    const weird = "emoji 😀🎉, NUL \u0000 inside, CJK 漢字, é";
    const big = "x".repeat(512 * 1024) + "é😀".repeat(87_381) + "\u0000end";
    expect(Buffer.byteLength(big)).toBeGreaterThan(1024 * 1024);
    for (const c of [redis, plain]) {
      const k = key("binary");
      await c.set(k, weird);
      expect(await c.get(k)).toBe(weird);
      const large = key("large");
      await c.set(large, big);
      expect(await c.strlen(large)).toBe(Buffer.byteLength(big));
      expect(await c.get(large)).toBe(big);
    }
  });

  it("returns nested arrays: ZRANGE WITHSCORES, SCAN, HGETALL, Lua tables", async () => {
    const z = key("zset");
    await redis.zadd(z, { score: 1.5, member: "a" }, { score: 2, member: "b" }, { score: -3, member: "c" });
    expect(await redis.zrange(z, 0, -1, { withScores: true })).toEqual(["c", -3, "a", 1.5, "b", 2]);
    expect(await rawValues.zrange(z, 0, -1, { withScores: true })).toEqual(["c", "-3", "a", "1.5", "b", "2"]);

    const prefix = key("scan");
    await Promise.all(["1", "2", "3"].map((i) => redis.set(`${prefix}:${i}`, i)));
    const [cursor, keys] = await redis.scan(0, { match: `${prefix}:*`, count: 100_000 });
    expect(cursor).toBe("0");
    expect(keys.sort()).toEqual([`${prefix}:1`, `${prefix}:2`, `${prefix}:3`]);

    const lua = "return {1, 'two', {3, 'four', {'five', false}}, redis.status_reply('OK')}";
    expect(await redis.eval(lua, [], [])).toEqual([1, "two", [3, "four", ["five", null]], "OK"]);
    expect(await plain.eval(lua, [], [])).toEqual([1, "two", [3, "four", ["five", null]], "OK"]);
  });

  it("runs EVAL, SCRIPT LOAD and EVALSHA", async () => {
    const k = key("script");
    const script = "redis.call('SET', KEYS[1], ARGV[1]); return redis.call('GET', KEYS[1]) .. '!'";
    expect(await redis.eval(script, [k], ["hi"])).toBe("hi!");
    const sha = await redis.scriptLoad(script);
    expect(sha).toBe(sha1(script));
    expect(await redis.evalsha(sha, [k], ["again"])).toBe("again!");
    expect(await redis.scriptExists(sha, "0".repeat(40))).toEqual([1, 0]);
    const created = redis.createScript<number>("return tonumber(ARGV[1]) * 2");
    expect(await created.exec([], ["21"])).toBe(42);
  });

  it("runs pipelines, and reports a failing command in one", async () => {
    const k = key("pipeline");
    const results = await redis.pipeline().set(k, 1).incr(k).get(k).exec();
    expect(results).toEqual(["OK", 2, 2]);
    await expect(redis.pipeline().set(k, "text").incr(k).get(k).exec()).rejects.toThrow(
      "Command 2 [ incr ] failed: ERR value is not an integer or out of range",
    );
    const kept = await redis.pipeline().set(k, "text").incr(k).get(k).exec({ keepErrors: true });
    expect(kept).toEqual([
      { result: "OK", error: undefined },
      { result: undefined, error: "ERR value is not an integer or out of range" },
      { result: "text", error: undefined },
    ]);
  });

  it("runs transactions", async () => {
    const k = key("multi");
    expect(await redis.multi().set(k, 10).incrby(k, 5).get(k).exec()).toEqual(["OK", 15, 15]);
  });

  it("throws UpstashError for a Redis error, with and without auto-pipelining", async () => {
    const k = key("wrongtype");
    await redis.hset(k, { f: "v" });
    const message = "WRONGTYPE Operation against a key holding the wrong kind of value";
    const single = client({ enableAutoPipelining: false });
    await expect(single.get(k)).rejects.toThrow(`${message}, command was: ["get","${k}"]`);
    await expect(single.get(k)).rejects.toMatchObject({ name: "UpstashError" });
    await expect(redis.get(k)).rejects.toThrow(`Command failed: ${message}`);
  });

  it("auto-pipelines concurrent commands into one request", async () => {
    const bridge = await startBridge({ redisUrl, port: 0, token });
    try {
      const c = client({}, bridge.url);
      const k = key("auto");
      const results = await Promise.all(Array.from({ length: 100 }, () => c.incr(k)));
      expect(results.sort((a, b) => a - b)).toEqual(Array.from({ length: 100 }, (_, i) => i + 1));
      expect(bridge.stats.requests).toBe(1);
      expect(bridge.stats.commands).toBe(100);

      bridge.stats.reset();
      const single = client({ enableAutoPipelining: false }, bridge.url);
      await Promise.all(Array.from({ length: 10 }, () => single.get(k)));
      expect({ requests: bridge.stats.requests, commands: bridge.stats.commands }).toEqual({
        requests: 10,
        commands: 10,
      });
    } finally {
      await bridge.close();
    }
  });

  it("keeps concurrent transactions isolated from each other and from pipelined commands", async () => {
    const bridge = await startBridge({ redisUrl, port: 0, token });
    try {
      const c = client({}, bridge.url);
      const k = key("isolation");
      const transactions = Array.from({ length: 20 }, () =>
        c.multi().incr(k).incr(k).incr(k).get(k).exec<[number, number, number, number]>(),
      );
      const interleaved = Array.from({ length: 20 }, () => c.incr(k));
      const [results] = await Promise.all([Promise.all(transactions), Promise.all(interleaved)]);
      for (const [a, b, c3, got] of results) expect([b, c3, got]).toEqual([a + 1, a + 2, a + 2]);
      expect(await c.get(k)).toBe(80);
      // MULTI and EXEC count as commands too: 20 × (3 INCR + GET + 2) + 20 INCR + 1 GET.
      expect(bridge.stats.commands).toBe(20 * 6 + 20 + 1);
    } finally {
      await bridge.close();
    }
  });
});

describe("Lua shebang flags Redis does not know", () => {
  it("drops unknown flags and keeps the known ones", () => {
    expect(stripUnknownShebangFlags("#!lua flags=allow-key-locking\nreturn 1")).toBe(
      "#!lua flags=\nreturn 1",
    );
    expect(stripUnknownShebangFlags("#!lua flags=no-writes,allow-key-locking,allow-oom\r\nreturn 1")).toBe(
      "#!lua flags=no-writes,allow-oom\r\nreturn 1",
    );
    const untouched = ["#!lua flags=no-writes\nreturn 1", "#!lua\nreturn 1", "return 1", "#!lua flags=x"];
    for (const script of untouched) expect(stripUnknownShebangFlags(script)).toBe(script);
  });

  it("runs @upstash/ratelimit's fixedWindow, and its EVALSHA hits from the second call on", async () => {
    const bridge = await startBridge({ redisUrl, port: 0, token });
    const now = vi.spyOn(Date, "now").mockReturnValue(1_700_000_000_000);
    try {
      const limiter = new Ratelimit({
        redis: client({}, bridge.url),
        limiter: Ratelimit.fixedWindow(3, "60 s"),
        prefix: key("ratelimit"),
        ephemeralCache: false,
      });
      const first = await limiter.limit("user");
      expect([first.success, first.remaining, first.limit]).toEqual([true, 2, 3]);
      // EVALSHA of the original text misses (NOSCRIPT), then EVAL.
      expect({ requests: bridge.stats.requests, commands: bridge.stats.commands }).toEqual({
        requests: 2,
        commands: 2,
      });
      const rest = [];
      for (let i = 0; i < 4; i++) rest.push(await limiter.limit("user"));
      expect(rest.map((r) => [r.success, r.remaining])).toEqual([
        [true, 1],
        [true, 0],
        [false, 0],
        [false, 0],
      ]);
      expect(rest[0]!.reset).toBe(1_700_000_040_000);
      // One EVALSHA per call: the bridge translated the original SHA to the loaded script's.
      expect({ requests: bridge.stats.requests, commands: bridge.stats.commands }).toEqual({
        requests: 6,
        commands: 6,
      });
      const original = sha1(await ratelimitFixedWindowScript());
      expect(await client({}, bridge.url).scriptExists(original)).toEqual([1]);
    } finally {
      now.mockRestore();
      await bridge.close();
    }
  });

  it("returns the original SHA from SCRIPT LOAD and keeps known flags in force", async () => {
    const c = client();
    const script = "#!lua flags=no-writes,allow-key-locking\nreturn redis.call('SET', KEYS[1], 'x')";
    const sha = await c.scriptLoad(script);
    expect(sha).toBe(sha1(script));
    expect(await c.scriptExists(sha)).toEqual([1]);
    const rewritten = "#!lua flags=no-writes\nreturn redis.call('SET', KEYS[1], 'x')";
    expect(await direct.call("SCRIPT", "EXISTS", sha, sha1(rewritten))).toEqual([0, 1]);
    // no-writes survived the rewrite: Redis refuses the write.
    await expect(c.evalsha(sha, [key("ro")], [])).rejects.toThrow(
      /Write commands are not allowed from read-only scripts/,
    );
  });
});

/** fixedWindow's limit script as the installed @upstash/ratelimit ships it (it sends that text's SHA). */
async function ratelimitFixedWindowScript(): Promise<string> {
  const dist = await readFile(createRequire(import.meta.url).resolve("@upstash/ratelimit"), "utf8");
  const match = dist.match(/var fixedWindowLimitScript = `([^`]*)`/);
  if (!match) throw new Error("fixedWindowLimitScript not found in @upstash/ratelimit");
  return match[1]!;
}

describe("lifecycle", () => {
  it("reconnects to Redis after it went away, answering 502 meanwhile", async () => {
    const server = await startRedisServer();
    const bridge = await startBridge({ redisUrl: server.url, port: 0, token });
    try {
      expect((await raw("/", ["SET", "k", "v"], { url: bridge.url })).status).toBe(200);
      await server.stop();
      const down = await raw("/", ["GET", "k"], { url: bridge.url });
      expect(down.status).toBe(502);
      expect((down.json as { error: string }).error).toMatch(/^ERR edgelimit-bridge: Redis unavailable: /);
      const again = await startRedisServer({ port: server.port });
      try {
        expect((await raw("/", ["GET", "k"], { url: bridge.url })).body).toBe('{"result":null}');
      } finally {
        await again.stop();
      }
    } finally {
      await bridge.close();
      await server.stop();
    }
  });

  it("fails to start with a clear error when Redis is unreachable", async () => {
    const server = await startRedisServer();
    await server.stop();
    await expect(startBridge({ redisUrl: server.url, port: 0, token })).rejects.toThrow(
      `edgelimit-bridge: cannot use Redis at ${server.url}: Cannot connect to Redis at 127.0.0.1:${server.port}`,
    );
    await expect(startBridge({ redisUrl, port: 0, token: "" })).rejects.toThrow("`token` is required");
  });

  it("tells how to install redis-server when the binary is missing", async () => {
    await expect(startRedisServer({ bin: "redis-server-that-does-not-exist" })).rejects.toThrow(
      "`redis-server-that-does-not-exist` was not found on PATH. Install Redis: `apt-get install -y redis-server` (Debian/Ubuntu) or `brew install redis` (macOS).",
    );
  });

  it("closes while a keep-alive client is connected, then refuses connections", async () => {
    const bridge = await startBridge({ redisUrl, port: 0, token });
    const c = client({ retry: false }, bridge.url);
    expect(await c.ping()).toBe("PONG");
    await bridge.close();
    await bridge.close();
    await expect(c.ping()).rejects.toThrow();
  });
});

describe("CLI arguments", () => {
  it("has defaults, and takes the token from EDGELIMIT_BRIDGE_TOKEN", () => {
    expect(parseCliArgs([], { EDGELIMIT_BRIDGE_TOKEN: "env" })).toEqual({
      redisUrl: "redis://127.0.0.1:6379",
      port: 8079,
      host: "127.0.0.1",
      token: "env",
      maxDedicatedConnections: 100,
      maxBodyBytes: 64 * 1024 * 1024,
    });
    const args = ["--redis", "redis://10.0.0.1:7000/2", "--port", "0", "--host", "0.0.0.0", "--token", "t"];
    expect(parseCliArgs(args, { EDGELIMIT_BRIDGE_TOKEN: "env" })).toEqual({
      redisUrl: "redis://10.0.0.1:7000/2",
      port: 0,
      host: "0.0.0.0",
      token: "t",
      maxDedicatedConnections: 100,
      maxBodyBytes: 64 * 1024 * 1024,
    });
    expect(
      parseCliArgs(["--token", "t", "--max-dedicated", "8", "--max-body-bytes", "1024"], {}),
    ).toMatchObject({
      maxDedicatedConnections: 8,
      maxBodyBytes: 1024,
    });
    expect(parseCliArgs(["--help"], {})).toBe("help");
    expect(USAGE).toContain("--token T");
  });

  it("names the offending flag on a bad command line", () => {
    const usage = (argv: string[]) => {
      try {
        parseCliArgs(argv, {});
      } catch (error) {
        expect(error).toBeInstanceOf(UsageError);
        return (error as Error).message;
      }
      throw new Error("expected a UsageError");
    };
    expect(usage(["--token", "t", "--prot", "1"])).toBe("Unknown option '--prot'");
    expect(usage(["--token", "t", "--port", "http"])).toBe(
      '--port must be an integer from 0 to 65535, got "http"',
    );
    expect(usage(["--token", "t", "--port", "70000"])).toBe(
      '--port must be an integer from 0 to 65535, got "70000"',
    );
    expect(usage(["--token", "t", "--port"])).toBe("Option '--port <value>' argument missing");
    expect(usage(["--token", "t", "--redis", "http://x"])).toBe(
      '--redis: Invalid Redis URL: "http://x" (expected redis:// or rediss://)',
    );
    expect(usage([])).toBe("--token is required (or set EDGELIMIT_BRIDGE_TOKEN)");
    expect(usage(["--token", "t", "--max-dedicated", "0"])).toBe(
      '--max-dedicated must be a positive integer, got "0"',
    );
    expect(usage(["--token", "t", "--max-body-bytes", "1e6"])).toBe(
      '--max-body-bytes must be a positive integer, got "1e6"',
    );
  });
});

describe("RESP client", () => {
  it("parses replies split at every byte boundary", () => {
    const wire = Buffer.from(
      "+OK\r\n-ERR bad\r\n:-42\r\n:12345678901234567890\r\n$5\r\nh\r\nlo\r\n$-1\r\n*-1\r\n*0\r\n" +
        "*3\r\n:1\r\n*2\r\n$0\r\n\r\n+QUEUED\r\n-WRONGTYPE x\r\n",
    );
    const expected: Reply[] = [
      "OK",
      new RedisError("ERR bad"),
      -42,
      12345678901234567890n,
      Buffer.from("h\r\nlo"),
      null,
      null,
      [],
      [1, [Buffer.alloc(0), "QUEUED"], new RedisError("WRONGTYPE x")],
    ];
    for (let size = 1; size <= wire.length; size++) {
      const replies: Reply[] = [];
      const parser = new RespParser((r) => replies.push(r));
      for (let i = 0; i < wire.length; i += size) parser.feed(wire.subarray(i, i + size));
      expect(replies).toEqual(expected);
    }
  });

  it("encodes commands as RESP arrays of bulk strings", () => {
    expect(
      encodeCommands([
        ["SET", "k", "é"],
        ["INCRBY", "n", 5],
        ["SET", "b", Buffer.from([0, 255])],
      ]),
    ).toEqual(
      Buffer.concat([
        Buffer.from("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\né\r\n*3\r\n$6\r\nINCRBY\r\n$1\r\nn\r\n$1\r\n5\r\n"),
        Buffer.from("*3\r\n$3\r\nSET\r\n$1\r\nb\r\n$2\r\n"),
        Buffer.from([0, 255, 13, 10]),
      ]),
    );
  });

  it("pipelines commands and moves a 1 MB value split across TCP chunks", async () => {
    const k = key("resp");
    const value = Buffer.alloc(1024 * 1024 + 7, 0xab);
    const replies = await direct.send([
      ["SET", k, value],
      ["STRLEN", k],
      ["GET", k],
      ["GET", key("none")],
    ]);
    expect([replies[0], replies[1], replies[3]]).toEqual(["OK", value.length, null]);
    // Buffer.equals, not toEqual: a deep comparison of 1 MB byte by byte takes seconds.
    expect(Buffer.isBuffer(replies[2]) && replies[2].equals(value)).toBe(true);
    await expect(direct.call("INCR", k)).rejects.toThrow(
      new RedisError("ERR value is not an integer or out of range"),
    );
  });
});
