import net from "node:net";
import { Redis } from "@upstash/redis";
import { afterAll, beforeAll, describe, expect, inject, it, vi } from "vitest";
import { Concurrency } from "../../src/engine/concurrency.js";
import { RedisCallError } from "../../src/engine/errors.js";
import { Lock } from "../../src/engine/lock.js";
import { Transport, transportFor } from "../../src/engine/transport.js";
import { fixedWindow, Limiter } from "../../src/index.js";
import { freePort, Hop } from "../faults/support.js";
import { bridgeRedis, manualClock, uniquePrefix } from "../support.js";

/** Longer than any test may run: a call that waited for it would fail the test by its own timeout. */
const NEVER = 2 ** 31 - 1;

function steppedClock() {
  const now = () => now.t;
  now.t = 0;
  return now;
}

let hop: Hop;
beforeAll(async () => {
  hop = await Hop.start(inject("bridgeUrl"));
});
afterAll(() => hop.close());

function throughHop(): Redis {
  return new Redis({ url: hop.url, token: inject("bridgeToken") });
}

describe("transport", () => {
  it("is shared by every user of one client, and a different client has its own", () => {
    const redis = bridgeRedis();
    expect(transportFor(redis)).toBe(transportFor(redis));
    expect(transportFor(bridgeRedis())).not.toBe(transportFor(redis));
  });

  it("sends the calls of one tick as one pipeline, and answers each", async () => {
    const transport = new Transport(bridgeRedis());
    const replies = await Promise.all([
      transport.call(["PING"], { timeout: NEVER }),
      transport.call(["ECHO", "hi"], { timeout: NEVER }),
      transport.call(["NOSUCHCOMMAND"], { timeout: NEVER }),
    ]);
    expect(transport.stats.requests).toBe(1);
    expect(replies[0]).toEqual({ ok: true, result: "PONG" });
    expect(replies[1]).toEqual({ ok: true, result: "hi" }); // plain JSON, no base64 to decode
    expect(replies[2]).toMatchObject({ ok: false, error: { kind: "redis" } });
  });

  it("callThen resolves with what its function makes of each answer, in one pipeline; a throw rejects", async () => {
    const transport = new Transport(bridgeRedis());
    const seen: string[] = [];
    const answers = await Promise.all([
      transport.callThen(["ECHO", "a"], { timeout: NEVER }, (r) => (r.ok ? `got ${r.result}` : "failed")),
      transport.callThen(["NOSUCHCOMMAND"], { timeout: NEVER }, (r) => (r.ok ? "got" : r.error.kind)),
      transport
        .callThen(["ECHO", "b"], { timeout: NEVER }, (r) => {
          seen.push(String(r.ok && r.result));
          throw new Error("from then");
        })
        .catch((error: Error) => error.message),
    ]);
    expect(answers).toEqual(["got a", "redis", "from then"]);
    expect(seen).toEqual(["b"]);
    expect(transport.stats.requests).toBe(1);
  });

  it("callThen maps a refusal of the open breaker too, without a request", async () => {
    const transport = new Transport(bridgeRedis(), {
      breaker: { failures: 1, cooldown: 1000 },
      now: steppedClock(),
    });
    transport.breaker!.failure(new RedisCallError("timeout", "stalled"), { probe: false });
    expect(transport.breaker!.state).toBe("open");
    const kind = await transport.callThen(["PING"], { timeout: NEVER }, (r) => !r.ok && r.error.kind);
    expect(kind).toBe("breaker-open");
    expect(transport.stats.requests).toBe(0);
    expect(transport.stats.refused).toBe(1);
  });

  it("keeps the client's read-your-writes token moving, as the client's own requests do", async () => {
    const redis = bridgeRedis();
    const transport = new Transport(redis);
    await transport.call(["SET", `ryw-${crypto.randomUUID()}`, "v"], { timeout: NEVER });
    const first = redis.readYourWritesSyncToken;
    expect(first).toMatch(/^\d+$/);
    await transport.call(["PING"], { timeout: NEVER });
    expect(redis.readYourWritesSyncToken).not.toBe(first);
  });

  it("fails at once, without retrying or waiting out the timeout, when the connection is refused", async () => {
    const port = await freePort(); // nothing listens there
    const transport = new Transport(new Redis({ url: `http://127.0.0.1:${port}`, token: "t" }));
    const reply = await transport.call(["PING"], { timeout: NEVER });
    expect(reply).toMatchObject({ ok: false, error: { kind: "unreachable" } });
    if (!reply.ok)
      expect(reply.error.message).toMatch(
        /no answer from Redis at http:\/\/127\.0\.0\.1:\d+ \(.*ECONNREFUSED/,
      );
    expect(transport.stats.requests).toBe(1);
  });

  it("never sends a request twice when the connection drops", async () => {
    let connections = 0;
    const server = net.createServer((socket) => {
      connections += 1;
      socket.once("data", () => socket.destroy()); // reads the request, then drops the connection
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const port = (server.address() as net.AddressInfo).port;
      const transport = new Transport(new Redis({ url: `http://127.0.0.1:${port}`, token: "t" }));
      const reply = await transport.call(["INCR", "n"], { timeout: NEVER });
      expect(reply).toMatchObject({ ok: false, error: { kind: "unreachable" } });
      expect(connections).toBe(1);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it("says unauthorized on a wrong token, and logs the fix once per isolate", async () => {
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      const redis = new Redis({ url: inject("bridgeUrl"), token: "wrong" });
      const transport = new Transport(redis);
      const replies = [];
      for (let i = 0; i < 3; i++) replies.push(await transport.call(["PING"], { timeout: NEVER }));
      for (const reply of replies) {
        expect(reply).toMatchObject({ ok: false, error: { kind: "unauthorized", status: 401 } });
      }
      await new Transport(new Redis({ url: inject("bridgeUrl"), token: "wrong too" })).call(["PING"], {
        timeout: NEVER,
      });
      expect(error).toHaveBeenCalledTimes(1);
      expect(error.mock.calls[0]![0]).toMatch(
        /refused the token \(HTTP 401\).*npx wrangler secret put UPSTASH_REDIS_REST_TOKEN/,
      );
    } finally {
      error.mockRestore();
    }
  });
});

describe("transport breaker, on a stalled hop", () => {
  it("opens after the failures, sends nothing while open, probes once per cooldown, closes when Redis answers", async () => {
    const now = steppedClock();
    const transport = new Transport(throughHop(), { breaker: { failures: 3, cooldown: 1000 }, now });
    hop.mode = "stall";
    try {
      const timeouts = await Promise.all(
        Array.from({ length: 3 }, () => transport.call(["PING"], { timeout: 30 })),
      );
      expect(timeouts.map((r) => !r.ok && r.error.kind)).toEqual(["timeout", "timeout", "timeout"]);
      expect(transport.breaker?.state).toBe("open");
      const requests = transport.stats.requests;

      // open: every call answered at once (a call that waited would wait NEVER), and no request sent
      const refused = await Promise.all(
        Array.from({ length: 20 }, () => transport.call(["PING"], { timeout: NEVER })),
      );
      expect(refused.every((r) => !r.ok && r.error.kind === "breaker-open")).toBe(true);
      expect(transport.stats.requests).toBe(requests);
      expect(transport.stats.refused).toBe(20);

      // after the cooldown, one probe; it fails (still stalled) and the breaker reopens for 2000
      now.t = 1000;
      const [probe, beside] = await Promise.all([
        transport.call(["PING"], { timeout: 30 }),
        transport.call(["PING"], { timeout: NEVER }),
      ]);
      expect(probe).toMatchObject({ ok: false, error: { kind: "timeout" } });
      expect(beside).toMatchObject({ ok: false, error: { kind: "breaker-open" } });
      expect(transport.stats.requests).toBe(requests + 1);
      now.t = 2999;
      expect(await transport.call(["PING"], { timeout: NEVER })).toMatchObject({
        error: { kind: "breaker-open" },
      });

      // Redis is back: the first call after the (doubled) cooldown reaches it and closes the breaker
      hop.mode = "pass"; // (the stalled connections were closed by the client when it gave up on them)
      now.t = 3000;
      expect(await transport.call(["PING"], { timeout: NEVER })).toEqual({ ok: true, result: "PONG" });
      expect(transport.breaker?.state).toBe("closed");
      expect(await transport.call(["PING"], { timeout: NEVER })).toEqual({ ok: true, result: "PONG" });
    } finally {
      hop.mode = "pass";
      hop.dropAll();
    }
  });

  it("with breaker: false, a call neither consults nor feeds it", async () => {
    const now = steppedClock();
    const transport = new Transport(throughHop(), { breaker: { failures: 1, cooldown: 1000 }, now });
    hop.mode = "stall";
    try {
      await transport.call(["PING"], { timeout: 20, breaker: false });
      expect(transport.breaker?.state).toBe("closed");
      await transport.call(["PING"], { timeout: 20 });
      expect(transport.breaker?.state).toBe("open");
      expect(await transport.call(["PING"], { timeout: 20, breaker: false })).toMatchObject({
        error: { kind: "timeout" },
      });
    } finally {
      hop.mode = "pass";
      hop.dropAll();
    }
  });
});

describe("the breaker belongs to the connection", () => {
  const rules = { r: fixedWindow({ limit: 1, window: "1s" }) };
  const url = "http://127.0.0.1:9"; // nothing is sent: building asks nothing of Redis
  const defaults = { failures: 5, cooldown: 1000, maxCooldown: 4000 };

  it("is set by { url, token, breaker }, for the Limiter, the Lock and Concurrency alike", () => {
    const token = `conn-${crypto.randomUUID()}`;
    const redis = { url, token, breaker: { failures: 2, cooldown: 300 } };
    new Lock({ redis });
    const transport = transportFor({ url, token });
    expect(transport.breaker?.options).toEqual({ failures: 2, cooldown: 300, maxCooldown: 4000 });
    new Limiter({ redis, rules });
    new Concurrency({ redis, limit: 1, ttl: "1s" });
    expect(transportFor({ url, token })).toBe(transport);
    expect(transport.breaker?.options).toEqual({ failures: 2, cooldown: 300, maxCooldown: 4000 });

    const off = `off-${crypto.randomUUID()}`;
    new Concurrency({ redis: { url, token: off, breaker: false }, limit: 1, ttl: "1s" });
    expect(transportFor({ url, token: off }).breaker).toBeUndefined();
    expect(transportFor({ url, token: `plain-${crypto.randomUUID()}` }).breaker?.options).toEqual(defaults);
  });

  it("refuses wrong connection options naming redis.breaker, and a wrong Limiter option naming breaker", () => {
    expect(() => transportFor({ url, token: "t", breaker: { cooldown: 0 } })).toThrow(
      /^redis\.breaker\.cooldown: must be a positive number of milliseconds/,
    );
    expect(() => new Lock({ redis: { url, token: "t", breaker: { failure: 3 } } })).toThrow(
      /^redis\.breaker\.failure: not a breaker option/,
    );
    expect(() => new Limiter({ redis: bridgeRedis(), rules, breaker: { cooldown: 0 } })).toThrow(
      /^breaker\.cooldown/,
    );
  });

  it("a Limiter's option sets it when the connection does not; one not used is a warning, never a throw", () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    try {
      // on a client, the first Limiter's setting stays; a different one later is not used
      const redis = bridgeRedis();
      new Limiter({ redis, rules });
      expect(transportFor(redis).breaker?.options).toEqual(defaults);
      new Limiter({ redis, rules, breaker: { failures: 3 } });
      new Limiter({ redis, rules, breaker: { failures: 3 } });
      new Limiter({ redis, rules });
      new Limiter({ redis, rules, breaker: false }); // its own decisions stay out; the breaker stays
      expect(warn).not.toHaveBeenCalled();
      const limiter = new Limiter({ redis, rules, breaker: { failures: 4 } });
      expect(limiter).toBeInstanceOf(Limiter);
      expect(transportFor(redis).breaker?.options).toEqual({ ...defaults, failures: 3 });
      expect(warn.mock.calls).toEqual([
        [
          'edgelimit: breaker: this Redis already has its breaker {"failures":3,"cooldown":1000,"maxCooldown":4000}; a Limiter\'s breaker option ({"failures":4,"cooldown":1000,"maxCooldown":4000}) is not used. The breaker belongs to the connection, one per Redis per isolate: set it once, as redis: { url, token, breaker } (see docs/failures.md)',
        ],
      ]);

      // the connection's setting wins over a Limiter's, whichever comes first; then the first stays
      const token = `rank-${crypto.randomUUID()}`;
      new Limiter({ redis: { url, token }, rules, breaker: { failures: 7 } });
      expect(transportFor({ url, token }).breaker?.options).toEqual({ ...defaults, failures: 7 });
      new Lock({ redis: { url, token, breaker: { failures: 2 } } });
      expect(transportFor({ url, token }).breaker?.options).toEqual({ ...defaults, failures: 2 });
      new Limiter({ redis: { url, token }, rules, breaker: { failures: 9 } });
      new Lock({ redis: { url, token, breaker: false } });
      expect(transportFor({ url, token }).breaker?.options).toEqual({ ...defaults, failures: 2 });
      expect(warn).toHaveBeenCalledTimes(1); // once per process
    } finally {
      warn.mockRestore();
    }
  });

  it("is typed on the decision: a RedisCallError with a kind", async () => {
    expect(new RedisCallError("timeout", "m")).toMatchObject({ name: "RedisCallError", kind: "timeout" });
  });
});

describe("one breaker per client, shared by its limiters", () => {
  it("opens on one limiter's failures and answers the other's decisions at once, without a request", async () => {
    const port = await freePort(); // nothing listens
    const redis = new Redis({ url: `http://127.0.0.1:${port}`, token: "t" });
    const rules = { r: fixedWindow({ limit: 5, window: "1m" }) };
    const a = new Limiter({ redis, rules, timeout: NEVER });
    const b = new Limiter({ redis, rules, timeout: NEVER, onError: "deny" });
    const transport = transportFor(redis);
    for (let i = 0; i < 5; i++) expect((await a.limit("x")).error).toMatchObject({ kind: "unreachable" });
    expect(transport.breaker?.state).toBe("open");
    const requests = transport.stats.requests;
    const d = await b.limit("y");
    expect(d).toMatchObject({ allowed: false, source: "error", retryAfter: 1000 });
    expect(d.error).toBeInstanceOf(RedisCallError);
    expect(d.error).toMatchObject({ kind: "breaker-open" });
    expect(d.error?.message).toMatch(
      /circuit breaker open, Redis not asked \(next probe in \d+ ms; opens after 5 consecutive failures; last failure: unreachable: edgelimit: no answer from Redis at/,
    );
    expect(transport.stats.requests).toBe(requests);
  });
});

describe("{ url, token }: the Upstash REST protocol, no client library", () => {
  const rules = { r: fixedWindow({ limit: 3, window: "1m" }) };

  it("decides, resets and counts exactly from { url, token }", async () => {
    const redis = { url: inject("bridgeUrl"), token: inject("bridgeToken") };
    const limiter = new Limiter({ redis, prefix: uniquePrefix("literal"), rules, clock: manualClock() });
    const seen = [];
    for (let i = 0; i < 4; i++) seen.push(await limiter.limit("u"));
    expect(seen.map((d) => [d.allowed, d.remaining, d.source])).toEqual([
      [true, 2, "redis"],
      [true, 1, "redis"],
      [true, 0, "redis"],
      [false, 0, "redis"],
    ]);
    await limiter.reset("u");
    expect(await limiter.limit("u")).toMatchObject({ allowed: true, remaining: 2, source: "redis" });
  });

  it("serves the Lock and the concurrency limiter too", async () => {
    const redis = { url: inject("bridgeUrl"), token: inject("bridgeToken") };
    const prefix = uniquePrefix("literal-lock");
    const lock = new Lock({ redis, prefix, ttl: "5s" });
    const held = await lock.acquire("job", { owner: "a" });
    expect(held).toMatchObject({ acquired: true, owner: "a" });
    expect(await lock.acquire("job", { owner: "b" })).toMatchObject({ acquired: false });
    expect(await lock.release("job", { owner: "a" })).toMatchObject({ released: true });
    const inFlight = new Concurrency({ redis, prefix, limit: 1, ttl: "5s" });
    expect(await inFlight.acquire("k")).toMatchObject({ allowed: true, remaining: 0 });
    expect(await inFlight.acquire("k")).toMatchObject({ allowed: false, remaining: 0 });
  });

  it("shares one transport per URL and token, apart from any client's", () => {
    const url = inject("bridgeUrl");
    const token = inject("bridgeToken");
    const transport = transportFor({ url, token });
    expect(transportFor({ url: `${url}/`, token })).toBe(transport); // the same Redis, written afresh
    expect(transportFor({ url, token: `${token}-other` })).not.toBe(transport);
    expect(transportFor(bridgeRedis())).not.toBe(transport);
  });

  const url = "https://eu1-example.upstash.io";
  const bad: [string, unknown, RegExp][] = [
    ["nothing", undefined, /^redis: expected an @upstash\/redis client or \{ url, token \}/],
    ["a string", url, /^redis: expected an @upstash\/redis client or \{ url, token \}.*got "https/],
    ["an empty object", {}, /^redis: expected an @upstash\/redis client or \{ url, token \}/],
    ["no url", { token: "t" }, /^redis\.url: expected the REST URL \(http:\/\/ or https:\/\/.*got undefined/],
    ["a redis:// url", { url: "redis://127.0.0.1:6379", token: "t" }, /^redis\.url: .*got "redis:/],
    ["a url with a space", { url: `${url} `, token: "t" }, /^redis\.url: /],
    ["no token", { url }, /^redis\.token: expected the REST token .*got undefined/],
    ["an empty token", { url, token: "" }, /^redis\.token: .*got an empty string/],
    ["a token that is a number", { url, token: 42 }, /^redis\.token: .*got number/],
    ["a token with its newline", { url, token: "s3cret\n" }, /^redis\.token: .*line break/],
    [
      "another field",
      { url, token: "t", retry: 3 },
      /^redis\.retry: not a field of \{ url, token, breaker \}/,
    ],
  ];
  it.each(bad)("refuses %s, naming the field and never the token", (_, redis, message) => {
    expect(() => transportFor(redis)).toThrow(message);
    expect(() => new Limiter({ redis, rules })).toThrow(message);
    expect(() => new Lock({ redis })).toThrow(message);
    try {
      transportFor(redis);
    } catch (error) {
      expect((error as Error).message).not.toContain("s3cret");
    }
  });
});

describe("an @upstash/redis client: read once, never asked to send", () => {
  const rules = { r: fixedWindow({ limit: 3, window: "1m" }) };

  it("refuses at construction a client whose URL and token cannot be read, and never calls it", () => {
    const request = vi.fn(async () => ({ result: 1 }));
    const custom = new Redis({ request } as never); // a client over a requester of the user's own
    const message =
      /^redis: cannot read the REST URL and token of this client.*pass \{ url, token \} instead$/;
    expect(() => new Limiter({ redis: custom, rules })).toThrow(message);
    expect(() => new Lock({ redis: custom })).toThrow(message);
    expect(() => new Concurrency({ redis: custom, limit: 1, ttl: "5s" })).toThrow(message);
    const stripped = bridgeRedis();
    (stripped as unknown as { client: { baseUrl?: string } }).client.baseUrl = undefined;
    expect(() => new Limiter({ redis: stripped, rules })).toThrow(message);
    const tokenless = bridgeRedis();
    (tokenless as unknown as { client: { headers: Record<string, string> } }).client.headers = {};
    expect(() => new Limiter({ redis: tokenless, rules })).toThrow(message);
    expect(request).not.toHaveBeenCalled();
  });

  it("never calls the client's request, on any path: decisions, denials, reset, errors, breaker", async () => {
    const redis = bridgeRedis();
    const request = vi.spyOn((redis as unknown as { client: { request: () => unknown } }).client, "request");
    const limiter = new Limiter({ redis, prefix: uniquePrefix("no-request"), rules, clock: manualClock() });
    const remaining = [];
    for (let i = 0; i < 4; i++) remaining.push((await limiter.limit("u")).remaining);
    expect(remaining).toEqual([2, 1, 0, 0]);
    await limiter.reset("u");
    expect((await limiter.limit("u")).remaining).toBe(2);
    // what the client's URL and token were is settled: changing the client later changes nothing
    (redis as unknown as { client: { baseUrl: string } }).client.baseUrl = "http://127.0.0.1:9";
    expect((await limiter.limit("u")).remaining).toBe(1);

    const wrong = new Redis({ url: inject("bridgeUrl"), token: "wrong" });
    const wrongRequest = vi.spyOn(
      (wrong as unknown as { client: { request: () => unknown } }).client,
      "request",
    );
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      const failing = new Limiter({ redis: wrong, rules, breaker: { failures: 2 } });
      for (let i = 0; i < 3; i++) await failing.limit("u");
      expect(transportFor(wrong).breaker?.state).toBe("open");
      await expect(failing.reset("u")).rejects.toMatchObject({ kind: "unauthorized" });
    } finally {
      error.mockRestore();
    }
    expect(request).not.toHaveBeenCalled();
    expect(wrongRequest).not.toHaveBeenCalled();
  });
});
