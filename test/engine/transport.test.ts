import net from "node:net";
import { Redis } from "@upstash/redis";
import { afterAll, beforeAll, describe, expect, inject, it, vi } from "vitest";
import { RedisCallError } from "../../src/engine/errors.js";
import { Transport, transportFor } from "../../src/engine/transport.js";
import { fixedWindow, Limiter } from "../../src/index.js";
import { freePort, Hop } from "../faults/support.js";
import { bridgeRedis } from "../support.js";

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

describe("breaker options on a shared client", () => {
  const rules = { r: fixedWindow({ limit: 1, window: "1s" }) };
  it("takes the first explicit setting; a different explicit one is an error naming breaker", () => {
    const redis = bridgeRedis();
    new Limiter({ redis, rules });
    new Limiter({ redis, rules, breaker: { failures: 3 } });
    new Limiter({ redis, rules, breaker: { failures: 3 } });
    new Limiter({ redis, rules });
    new Limiter({ redis, rules, breaker: false });
    expect(transportFor(redis).breaker?.options).toEqual({ failures: 3, cooldown: 1000, maxCooldown: 4000 });
    expect(() => new Limiter({ redis, rules, breaker: { failures: 4 } })).toThrow(
      /breaker: this Redis client already has a breaker with \{"failures":3,"cooldown":1000,"maxCooldown":4000\}/,
    );
    expect(() => new Limiter({ redis: bridgeRedis(), rules, breaker: { cooldown: 0 } })).toThrow(
      /breaker\.cooldown/,
    );
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
