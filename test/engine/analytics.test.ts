// Decision analytics against a real redis-server of this file's own (INFO commandstats counts only
// this file's commands) through the REST bridge: exact counts across Limiters, nothing added to the
// request path, one request per flush, failed flushes that never fail a decision nor count twice.
import { execFile } from "node:child_process";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { Redis } from "@upstash/redis";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { type Bridge, startBridge } from "../../src/bridge/index.js";
import type { RedisConnection } from "../../src/bridge/resp.js";
import { analyticsConfig } from "../../src/engine/analytics.js";
import {
  type Decision,
  fixedWindow,
  gcra,
  Limiter,
  type LimiterOptions,
  type RedisCallError,
} from "../../src/index.js";
import { type Cluster, type ClusterNode, startCluster } from "../cluster.js";
import { failOnUnhandledRejections, privateRedis } from "../own-bridge.js";
import { manualClock, T0, uniquePrefix } from "../support.js";

failOnUnhandledRejections();

const TOKEN = "analytics";
const own = privateRedis({ token: TOKEN });
let bridge: Bridge;
let conn: RedisConnection;
let hop: FailingHop;
beforeAll(async () => {
  ({ bridge, conn } = own);
  hop = await startFailingHop(bridge.url);
});
afterAll(async () => {
  await hop?.close();
});

/**
 * An HTTP hop in front of the bridge: forwards every request, and answers 502 instead of the
 * bridge's answer to those `fail` picks (the commands ran in Redis; the answer is lost).
 */
interface FailingHop {
  url: string;
  fail: (body: string) => boolean;
  /** Requests answered 502 so far. */
  failed: number;
  /** Requests that carried a flush (an HINCRBY). */
  flushes: number;
  close(): Promise<void>;
}

async function startFailingHop(target: string): Promise<FailingHop> {
  const hop: FailingHop = { url: "", fail: () => false, failed: 0, flushes: 0, close: async () => {} };
  const http: Server = createServer(async (request, response) => {
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks).toString("utf8");
    if (body.includes("HINCRBY")) hop.flushes += 1;
    const answer = await fetch(`${target}${request.url}`, {
      method: request.method,
      headers: { authorization: String(request.headers.authorization) },
      body,
    });
    const text = await answer.text();
    if (hop.fail(body)) {
      hop.failed += 1;
      response.writeHead(502, { "content-type": "application/json" });
      response.end(JSON.stringify({ error: "bad gateway" }));
      return;
    }
    response.writeHead(answer.status, { "content-type": "application/json" });
    response.end(text);
  });
  await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve));
  hop.url = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
  hop.close = async () => {
    http.closeAllConnections();
    await new Promise((resolve) => http.close(resolve));
  };
  return hop;
}

const redis = () => ({ url: bridge.url, token: TOKEN });
/** A client of its own through the hop: a transport (and a flusher) of its own. */
const throughHop = () => new Redis({ url: hop.url, token: TOKEN, enableTelemetry: false });
const perMinute = fixedWindow({ limit: 5, window: "1m" });

function limiter(options: Partial<LimiterOptions> & { prefix: string }): Limiter {
  return new Limiter({ redis: redis(), rules: { perMinute }, analytics: true, ...options });
}

async function commandStats(): Promise<Record<string, number>> {
  const info = String(await conn.call("INFO", "commandstats"));
  const out: Record<string, number> = {};
  for (const [, name, calls] of info.matchAll(/^cmdstat_([a-z|]+):calls=(\d+)/gm)) {
    if (name === "info" || name!.startsWith("config")) continue;
    out[name!.toUpperCase()] = Number(calls);
  }
  return out;
}

describe("counts", () => {
  it("adds up two Limiters' decisions exactly after flush()", async () => {
    const prefix = uniquePrefix("an");
    const clock = manualClock();
    const a = limiter({ prefix, clock, denyCache: false });
    // b as a user hands one in: an @upstash/redis client
    const b = limiter({
      prefix,
      clock,
      redis: new Redis({ url: bridge.url, token: TOKEN, enableTelemetry: false }),
    });
    // a: alice ×7 at T0: 5 allowed (remaining 4 3 2 1 0: the last two near the limit), 2 denied
    for (let i = 0; i < 7; i++) await a.limit("alice");
    // b: alice ×2 a second later: denied by Redis, then by b's deny cache
    clock.set(T0 + 1000);
    expect((await b.limit("alice")).source).toBe("redis");
    expect((await b.limit("alice")).source).toBe("cache");
    // b: bob ×3 in the next minute: allowed (remaining 4 3 2: none near)
    clock.set(T0 + 60_000);
    for (let i = 0; i < 3; i++) expect((await b.limit("bob")).allowed).toBe(true);
    await Promise.all([a.analytics.flush(), b.analytics.flush()]);

    const r = await a.analytics.report({ from: T0, to: T0 + 60_000 });
    expect(r.from).toBe(T0);
    expect(r.to).toBe(T0 + 60_000);
    expect(r.decisions).toEqual({
      allowed: 8,
      denied: 4,
      bySource: { redis: 11, cache: 1, lease: 0, region: 0, error: 0 },
    });
    expect(r.denials).toEqual({ perMinute: 4 });
    expect(r.nearLimit).toBe(2);
    expect(r.errors).toEqual({
      timeout: 0,
      unreachable: 0,
      unauthorized: 0,
      http: 0,
      redis: 0,
      "breaker-open": 0,
    });
    expect(r.minutes).toEqual([
      { at: T0, allowed: 5, denied: 4 },
      { at: T0 + 60_000, allowed: 3, denied: 0 },
    ]);
    expect(r.top).toEqual([{ identifier: "alice", denied: 4, allowed: 5 }]);
    expect(r.breaker).toEqual({ enabled: true, state: "closed", opened: 0 });
    // b reads the same counts; a second flush with nothing new adds nothing
    await b.analytics.flush();
    expect(await b.analytics.report({ from: T0, to: T0 + 60_000 })).toEqual(r);

    // the default range: the 60 minutes up to the limiter's clock's, one entry each, zeros included
    clock.set(T0 + 60_000 + 30_000);
    const hour = await a.analytics.report();
    expect(hour.to).toBe(T0 + 90_000);
    expect(hour.from).toBe(T0 + 120_000 - 3_600_000);
    expect(hour.minutes).toHaveLength(60);
    expect(hour.minutes[0]!.at).toBe(hour.from);
    expect(hour.minutes.slice(-2)).toEqual(r.minutes);
    expect(hour.minutes.slice(0, -2).every((m) => m.allowed === 0 && m.denied === 0)).toBe(true);
    expect(hour.decisions).toEqual(r.decisions);
    await Promise.all([a.dispose(), b.dispose()]);
  });

  it("two Limiters on clients with default options and the real clock: report() is exact", async () => {
    const prefix = uniquePrefix("real");
    // GCRA: no window edge the real clock could cross mid-test, and no refill within it
    const rules = { hourly: gcra({ limit: 5, period: "1h" }) };
    const a = new Limiter({
      redis: new Redis({ url: bridge.url, token: TOKEN }),
      prefix,
      rules,
      analytics: true,
    });
    const b = new Limiter({
      redis: new Redis({ url: bridge.url, token: TOKEN }),
      prefix,
      rules,
      analytics: true,
    });
    const sources: string[] = [];
    for (let i = 0; i < 7; i++) sources.push((await a.limit("alice")).source);
    for (let i = 0; i < 2; i++) sources.push((await b.limit("alice")).source);
    for (let i = 0; i < 3; i++) sources.push((await b.limit("bob")).source);
    expect(sources).toEqual([
      ...Array(6).fill("redis"),
      "cache",
      "redis",
      "cache",
      ...Array(3).fill("redis"),
    ]);
    // a Limiter of another Redis (through the hop) holding counts is not written by a's flush
    const other = limiter({ redis: throughHop(), prefix, analytics: true });
    await other.limit("carol");
    const flushes = hop.flushes;
    const requests = bridge.stats.requests;
    // one flush writes both clients' counts (one request each): b need not flush first
    await a.analytics.flush();
    expect(bridge.stats.requests - requests).toBe(2);
    expect(hop.flushes).toBe(flushes);
    for (const r of [await a.analytics.report(), await b.analytics.report()]) {
      expect(r.decisions).toEqual({
        allowed: 8,
        denied: 4,
        bySource: { redis: 10, cache: 2, lease: 0, region: 0, error: 0 },
      });
      expect(r.denials).toEqual({ hourly: 4 });
      expect(r.nearLimit).toBe(2);
      expect(r.top).toEqual([{ identifier: "alice", denied: 4, allowed: 5 }]);
      expect(r.minutes).toHaveLength(60);
      expect(r.minutes.reduce((n, m) => n + m.allowed, 0)).toBe(8);
      expect(r.minutes.reduce((n, m) => n + m.denied, 0)).toBe(4);
    }
    // without a flush: b's next decisions are written by a's report
    await b.limit("dave");
    expect((await a.analytics.report()).decisions.allowed).toBe(9);
    await other.dispose();
    expect(hop.flushes - flushes).toBe(1);
    expect((await a.analytics.report()).decisions.allowed).toBe(10);
    await Promise.all([a.dispose(), b.dispose()]);
  });

  it("keeps Limiters of another name apart under the same prefix", async () => {
    const prefix = uniquePrefix("an");
    const clock = manualClock();
    const api = limiter({ prefix, clock, analytics: { name: "api" } });
    const web = limiter({ prefix, clock, analytics: { name: "web" } });
    await api.limit("x");
    await api.limit("x");
    await web.limit("x");
    await api.dispose();
    await web.dispose();
    expect((await api.analytics.report({ from: T0, to: T0 })).decisions.allowed).toBe(2);
    expect((await web.analytics.report({ from: T0, to: T0 })).decisions.allowed).toBe(1);
  });

  it("ranks the most denied identifiers, at most `top`", async () => {
    const prefix = uniquePrefix("an");
    const clock = manualClock();
    const l = limiter({ prefix, clock, denyCache: false, analytics: { top: 2 } });
    // u1 denied 1, u2 denied 3, u3 denied 2, u4 never denied
    const plan: [string, number][] = [
      ["u1", 6],
      ["u2", 8],
      ["u3", 7],
      ["u4", 4],
    ];
    for (const [id, n] of plan) for (let i = 0; i < n; i++) await l.limit(id);
    const r = await l.analytics.report({ from: T0, to: T0 });
    expect(r.top).toEqual([
      { identifier: "u2", denied: 3, allowed: 5 },
      { identifier: "u3", denied: 2, allowed: 5 },
    ]);
    expect(r.decisions.denied).toBe(6);
    await l.dispose();
  });

  it("counts errors by kind and source error", async () => {
    const prefix = uniquePrefix("an");
    const clock = manualClock();
    const l = new Limiter({
      redis: throughHop(),
      prefix,
      rules: { perMinute },
      analytics: true,
      breaker: false,
      clock,
    });
    hop.fail = (body) => body.includes("EVALSHA");
    try {
      for (let i = 0; i < 3; i++) expect((await l.limit("e")).source).toBe("error");
    } finally {
      hop.fail = () => false;
    }
    const r = await l.analytics.report({ from: T0, to: T0 });
    expect(r.decisions).toEqual({
      allowed: 3,
      denied: 0,
      bySource: { redis: 0, cache: 0, lease: 0, region: 0, error: 3 },
    });
    expect(r.errors.unreachable).toBe(3);
    expect(r.breaker.enabled).toBe(false);
    await l.dispose();
  });
});

describe("the request path", () => {
  it("is unchanged with analytics on: the same commands and requests; a flush is one request", async () => {
    const clock = manualClock();
    const off = new Limiter({ redis: redis(), prefix: uniquePrefix("off"), rules: { perMinute }, clock });
    const on = limiter({ prefix: uniquePrefix("on"), clock });
    await off.limit("warm-up");
    await on.limit("warm-up");
    const run = async (l: Limiter) => {
      await conn.call("CONFIG", "RESETSTAT");
      const requests = bridge.stats.requests;
      for (let i = 0; i < 8; i++) await l.limit(`id${i % 2}`);
      await Promise.all(Array.from({ length: 10 }, (_, i) => l.limit(`c${i}`)));
      return { commands: await commandStats(), requests: bridge.stats.requests - requests };
    };
    const without = await run(off);
    const withAnalytics = await run(on);
    expect(withAnalytics).toEqual(without);
    // 8 one by one, 10 in one tick: 9 requests
    expect(without.requests).toBe(9);
    // a fixed window: EVALSHA, its INCR, and PEXPIRE on a window's first unit
    expect(without.commands).toEqual({ EVALSHA: 18, INCR: 18, PEXPIRE: 12 });

    await conn.call("CONFIG", "RESETSTAT");
    const requests = bridge.stats.requests;
    await on.analytics.flush();
    expect(bridge.stats.requests - requests).toBe(1);
    // one minute: its hash (a field each: allowed, near, source:redis) and its top set (13
    // identifiers, warm-up included), each with its EXPIRE
    expect(await commandStats()).toEqual({ HINCRBY: 3, EXPIRE: 2, ZINCRBY: 13, ZREMRANGEBYRANK: 1 });
    await off.dispose();
    await on.dispose();
  });

  it("hands a flush to waitUntil once flushEvery has passed by the limiter's clock, one at a time", async () => {
    const clock = manualClock();
    const l = limiter({
      redis: throughHop(),
      prefix: uniquePrefix("wu"),
      clock,
      analytics: { flushEvery: "5s" },
    });
    const flushes = hop.flushes;
    const handed: Promise<unknown>[] = [];
    const waitUntil = (p: Promise<unknown>) => {
      handed.push(p);
    };
    for (let i = 0; i < 3; i++) await l.limit("w", { waitUntil });
    clock.set(T0 + 4999);
    await l.limit("w", { waitUntil });
    expect(handed).toHaveLength(0);
    clock.set(T0 + 5000);
    await l.limit("w", { waitUntil });
    expect(handed).toHaveLength(1);
    // while it is in flight, and until 5 s after it started, no other
    await l.limit("w", { waitUntil });
    await handed[0];
    expect(hop.flushes - flushes).toBe(1);
    clock.set(T0 + 9999);
    await l.limit("w", { waitUntil });
    expect(handed).toHaveLength(1);
    clock.set(T0 + 10_000);
    await l.limit("w", { waitUntil });
    expect(handed).toHaveLength(2);
    await handed[1];
    expect(hop.flushes - flushes).toBe(2);
    const r = await l.analytics.report({ from: T0, to: T0 });
    expect(r.decisions.allowed + r.decisions.denied).toBe(8);
    await l.dispose();
  });
});

describe("in Node, without waitUntil", () => {
  it("flushes from a timer flushEvery after the first unwritten count", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    const clock = manualClock();
    const l = limiter({
      redis: throughHop(),
      prefix: uniquePrefix("timer"),
      clock,
      analytics: { flushEvery: "2s" },
    });
    try {
      const flushes = hop.flushes;
      for (let i = 0; i < 3; i++) await l.limit("t");
      vi.advanceTimersByTime(1999);
      expect(hop.flushes).toBe(flushes);
      vi.advanceTimersByTime(1);
      await l.analytics.flush(); // after the timer's flush, which wrote all three
      expect(hop.flushes - flushes).toBe(1);
      expect((await l.analytics.report({ from: T0, to: T0 })).decisions.allowed).toBe(3);
      // nothing new: the timer is not armed again
      vi.advanceTimersByTime(10_000);
      await l.analytics.flush();
      expect(hop.flushes - flushes).toBe(1);
    } finally {
      vi.useRealTimers();
      await l.dispose();
    }
  });

  it("never keeps the process alive: the timer is unref'd", async () => {
    const script = `
      import { Limiter, fixedWindow } from "./src/index.ts";
      const l = new Limiter({ redis: { url: ${JSON.stringify(bridge.url)}, token: ${JSON.stringify(TOKEN)} },
        prefix: ${JSON.stringify(uniquePrefix("exit"))}, rules: { r: fixedWindow({ limit: 5, window: "1m" }) },
        analytics: { flushEvery: "1h" } });
      console.log((await l.limit("x")).source);
    `;
    const started = Date.now();
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ["--import", "tsx", "--input-type=module", "-e", script],
      {
        cwd: fileURLToPath(new URL("../..", import.meta.url)),
        timeout: 20_000,
      },
    );
    expect(stdout.trim()).toBe("redis");
    expect(Date.now() - started).toBeLessThan(15_000);
  }, 25_000);
});

describe("several Limiters on one Redis", () => {
  it("share one flush: one request per flushEvery for all of them", async () => {
    const client = throughHop();
    const clock = manualClock();
    const prefix = uniquePrefix("share");
    const api = limiter({ redis: client, prefix, clock, analytics: { name: "api", flushEvery: "5s" } });
    const web = limiter({ redis: client, prefix, clock, analytics: { name: "web", flushEvery: "2s" } });
    const handed: Promise<unknown>[] = [];
    const waitUntil = (p: Promise<unknown>) => {
      handed.push(p);
    };
    const flushes = hop.flushes;
    await api.limit("a", { waitUntil });
    await web.limit("w", { waitUntil });
    // the shortest flushEvery of the two, counted from the first decision of either
    clock.set(T0 + 1999);
    await api.limit("a", { waitUntil });
    expect(handed).toHaveLength(0);
    clock.set(T0 + 2000);
    await api.limit("a", { waitUntil });
    expect(handed).toHaveLength(1);
    await handed[0];
    expect(hop.flushes - flushes).toBe(1);
    expect((await api.analytics.report({ from: T0, to: T0 })).decisions.allowed).toBe(3);
    expect((await web.analytics.report({ from: T0, to: T0 })).decisions.allowed).toBe(1);
    expect(hop.flushes - flushes).toBe(1); // nothing left to write for the reports
    await api.dispose();
    await web.dispose();
  });
});

describe("a failing flush", () => {
  it("fails no decision, and its counts are dropped, never sent twice", async () => {
    const clock = manualClock();
    const prefix = uniquePrefix("fail");
    const l = new Limiter({
      redis: throughHop(),
      prefix,
      rules: { perMinute: fixedWindow({ limit: 100, window: "1m" }) },
      analytics: { flushEvery: "1s" },
      clock,
    });
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const handed: Promise<unknown>[] = [];
    const waitUntil = (p: Promise<unknown>) => {
      handed.push(p);
    };
    try {
      for (let i = 0; i < 4; i++) await l.limit("f", { waitUntil });
      hop.fail = (body) => body.includes("HINCRBY");
      clock.set(T0 + 1000);
      // the flush and 6 decisions at once: the flush answered 502, every decision Redis's
      const decisions = await Promise.all(Array.from({ length: 6 }, () => l.limit("f", { waitUntil })));
      expect(handed).toHaveLength(1);
      await handed[0];
      expect(hop.failed).toBeGreaterThanOrEqual(1);
      expect(decisions.map((d) => [d.source, d.allowed])).toEqual(Array(6).fill(["redis", true]));
      expect(decisions.map((d) => d.remaining).sort((x, y) => y - x)).toEqual([95, 94, 93, 92, 91, 90]);
      hop.fail = () => false;
      // the 502's batch ran in Redis (the hop forwarded it): counted once, not resent with the rest
      const r = await l.analytics.report({ from: T0, to: T0 });
      expect(r.decisions.allowed).toBe(10);
      expect(r.breaker.state).toBe("closed");
      expect(warn).toHaveBeenCalledTimes(1);
      expect(String(warn.mock.calls[0]![0])).toMatch(/analytics flush failed/);
    } finally {
      hop.fail = () => false;
      warn.mockRestore();
      await l.dispose();
    }
  });
});

describe("while the breaker is open", () => {
  it("keeps the counts for a later flush; dispose() writes them anyway", async () => {
    const clock = manualClock();
    const l = limiter({
      redis: throughHop(),
      prefix: uniquePrefix("open"),
      clock,
      breaker: { failures: 2, cooldown: 60_000 },
    });
    const flushes = hop.flushes;
    hop.fail = (body) => body.includes("EVALSHA");
    try {
      const kinds = [];
      for (let i = 0; i < 3; i++) kinds.push(((await l.limit("o")).error as RedisCallError).kind);
      expect(kinds).toEqual(["unreachable", "unreachable", "breaker-open"]);
    } finally {
      hop.fail = () => false;
    }
    await l.analytics.flush();
    expect(hop.flushes).toBe(flushes); // not sent: Redis is failing
    await l.dispose();
    expect(hop.flushes - flushes).toBe(1);
    const r = await l.analytics.report({ from: T0, to: T0 });
    expect(r.decisions).toEqual({
      allowed: 3,
      denied: 0,
      bySource: { redis: 0, cache: 0, lease: 0, region: 0, error: 3 },
    });
    expect(r.errors).toMatchObject({ unreachable: 2, "breaker-open": 1, timeout: 0 });
    expect(r.breaker).toEqual({ enabled: true, state: "open", opened: 1 });
  });
});

describe("once the breaker has cooled down", () => {
  it("a flush goes as its probe: Redis answering closes it, so flush() and report() need no decision first", async () => {
    vi.useFakeTimers({ toFake: ["performance"] });
    const clock = manualClock();
    const l = limiter({
      redis: throughHop(),
      prefix: uniquePrefix("cool"),
      clock,
      breaker: { failures: 2, cooldown: 1000 },
    });
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const flushes = hop.flushes;
    try {
      hop.fail = (body) => body.includes("EVALSHA");
      for (let i = 0; i < 2; i++) expect((await l.limit("c")).source).toBe("error");
      hop.fail = () => false;
      await l.analytics.flush();
      expect(hop.flushes).toBe(flushes); // cooling down: kept
      vi.advanceTimersByTime(1000);
      expect(l.analytics.breaker().state).toBe("open");
      const r = await l.analytics.report(); // its flush is the probe, and Redis answers it
      expect(hop.flushes - flushes).toBe(1);
      expect(l.analytics.breaker()).toEqual({ enabled: true, state: "closed", opened: 1 });
      expect(r.decisions.bySource.error).toBe(2);
      expect(r.errors.unreachable).toBe(2);

      // a probe that fails reopens it, with the cooldown doubled; its counts are dropped, never resent
      hop.fail = (body) => body.includes("EVALSHA");
      for (let i = 0; i < 2; i++) await l.limit("c");
      hop.fail = () => true;
      vi.advanceTimersByTime(1000);
      await l.analytics.flush();
      expect(hop.flushes - flushes).toBe(2);
      // opened by the two failed decisions, then again by the failed probe
      expect(l.analytics.breaker()).toEqual({ enabled: true, state: "open", opened: 3 });
      hop.fail = () => false;
      vi.advanceTimersByTime(1999);
      await l.analytics.flush();
      expect(hop.flushes - flushes).toBe(2); // nothing left to send, and still cooling down
      expect(warn).toHaveBeenCalledTimes(1);
      // the failed probe's batch reached Redis (the hop forwards, then answers 502): counted once
      expect((await l.analytics.report()).decisions.bySource.error).toBe(4);
    } finally {
      hop.fail = () => false;
      warn.mockRestore();
      vi.useRealTimers();
      await l.dispose();
    }
  });
});

describe("keys", () => {
  it("every analytics key has the retention as TTL, under one hash tag", async () => {
    const prefix = uniquePrefix("ttl");
    const clock = manualClock();
    const l = limiter({ prefix, clock, denyCache: false, analytics: { retention: "2h", name: "ops" } });
    for (let i = 0; i < 7; i++) await l.limit(`k${i % 2}`);
    clock.set(T0 + 60_000);
    await l.limit("k0");
    await l.analytics.flush();
    const keys = ((await conn.call("KEYS", `${prefix}:analytics:*`)) as unknown[]).map(String);
    expect(keys.sort()).toEqual([
      `${prefix}:analytics:{ops}:${T0 / 60_000}`,
      `${prefix}:analytics:{ops}:${T0 / 60_000}:top`,
      `${prefix}:analytics:{ops}:${T0 / 60_000 + 1}`,
      `${prefix}:analytics:{ops}:${T0 / 60_000 + 1}:top`,
    ]);
    for (const key of keys) {
      const ttl = Number(await conn.call("TTL", key));
      expect(ttl).toBeGreaterThan(7100);
      expect(ttl).toBeLessThanOrEqual(7200);
    }
    await l.dispose();
  });
});

describe("bounds", () => {
  it("keeps top × 5 identifiers a minute in Redis, scored denied × 2^26 + allowed", async () => {
    const prefix = uniquePrefix("trim");
    const clock = manualClock();
    const one = fixedWindow({ limit: 1, window: "1m" });
    const l = limiter({ prefix, clock, denyCache: false, rules: { one }, analytics: { top: 2 } });
    // 12 identifiers: 1 allowed each, and id<k> denied k + 1 times
    for (let k = 0; k < 12; k++) for (let i = 0; i < k + 2; i++) await l.limit(`id${k}`);
    await l.analytics.flush();
    const top = `${prefix}:analytics:{default}:${T0 / 60_000}:top`;
    expect(Number(await conn.call("ZCARD", top))).toBe(10);
    expect(Number(await conn.call("ZSCORE", top, "id11"))).toBe(12 * 2 ** 26 + 1);
    expect(await conn.call("ZSCORE", top, "id1")).toBeNull();
    const r = await l.analytics.report({ from: T0, to: T0 });
    expect(r.top).toEqual([
      { identifier: "id11", denied: 12, allowed: 1 },
      { identifier: "id10", denied: 11, allowed: 1 },
    ]);
    expect(r.denials).toEqual({ one: 78 });
    await l.dispose();
  });

  it("stores an identifier longer than 200 characters shortened, with a hash of the whole", async () => {
    const clock = manualClock();
    const l = limiter({ prefix: uniquePrefix("long"), clock, denyCache: false });
    const long = `${"x".repeat(300)}<img src=x onerror=alert(1)>`;
    for (let i = 0; i < 6; i++) await l.limit(long);
    const [entry] = (await l.analytics.report({ from: T0, to: T0 })).top;
    expect(entry).toMatchObject({ denied: 1, allowed: 5 });
    expect(entry!.identifier).toMatch(/^x{128}…#[0-9a-f]{16}$/);
    await l.dispose();
  });
});

describe("onDecision", () => {
  it("is called with (decision, identifier) on every path", async () => {
    const seen: [Decision["source"], string][] = [];
    const clock = manualClock();
    const l = new Limiter({
      redis: redis(),
      prefix: uniquePrefix("od"),
      rules: { burst: gcra({ limit: 100, period: "1m", burst: 100 }), tight: perMinute },
      lease: { max: 10, ttl: "1s" },
      clock,
      onDecision(decision, identifier) {
        seen.push([decision.source, identifier]);
      },
    });
    for (let i = 0; i < 8; i++) await l.limit("hot");
    expect(seen).toHaveLength(8);
    expect(seen.every(([, id]) => id === "hot")).toBe(true);
    const sources = new Set(seen.map(([source]) => source));
    expect(sources.has("redis")).toBe(true);
    expect(sources.has("cache") || sources.has("lease")).toBe(true);
    await l.dispose();

    const broken = new Limiter({
      redis: { url: "http://127.0.0.1:1", token: "x" },
      rules: { perMinute },
      timeout: 200,
      onDecision: (decision, identifier) => seen.push([decision.source, identifier]),
    });
    expect((await broken.limit("down")).source).toBe("error");
    expect(seen.at(-1)).toEqual(["error", "down"]);
  });

  it("is never awaited, and what it throws is caught and logged once", async () => {
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    let calls = 0;
    const l = new Limiter({
      redis: redis(),
      prefix: uniquePrefix("od"),
      rules: { perMinute },
      clock: manualClock(),
      onDecision() {
        calls += 1;
        throw new Error("metrics down");
      },
    });
    const rejecting = new Limiter({
      redis: redis(),
      prefix: uniquePrefix("od"),
      rules: { perMinute },
      clock: manualClock(),
      onDecision: (() => Promise.reject(new Error("async metrics down"))) as () => void,
    });
    try {
      for (let i = 0; i < 3; i++) expect((await l.limit("t")).allowed).toBe(true);
      expect(calls).toBe(3);
      expect(error).toHaveBeenCalledTimes(1);
      expect(String(error.mock.calls[0]![1])).toMatch(/metrics down/);
      for (let i = 0; i < 3; i++) expect((await rejecting.limit("t")).allowed).toBe(true);
      await new Promise((resolve) => setTimeout(resolve, 0));
      expect(error).toHaveBeenCalledTimes(2);
    } finally {
      error.mockRestore();
    }
  });
});

describe("options", () => {
  const bad: [unknown, RegExp][] = [
    [{ flushEvery: "x" }, /^analytics\.flushEvery: "x" is not a duration/],
    [{ flushEvery: "100ms" }, /^analytics\.flushEvery: must be from 1s to 1h/],
    [{ top: -1 }, /^analytics\.top: must be a whole number from 1 to 100, got -1/],
    [{ top: 2.5 }, /^analytics\.top:/],
    [{ retention: "1m" }, /^analytics\.retention: must be from 1h to 90d/],
    [{ retention: 0 }, /^analytics\.retention:/],
    [{ name: "a b" }, /^analytics\.name:/],
    [{ name: "" }, /^analytics\.name:/],
    [
      { flush: "1s" },
      /^analytics\.flush: not an analytics option; it takes flushEvery, top, retention, name/,
    ],
    ["yes", /^analytics: expected true, false or/],
  ];
  it("defaults to a flush every 10 s, the top 20, 7 days of retention, the name default", () => {
    expect(analyticsConfig(true)).toEqual({
      flushEvery: 10_000,
      top: 20,
      retention: 604_800_000,
      name: "default",
    });
    expect(analyticsConfig(false)).toBeUndefined();
    expect(analyticsConfig({ flushEvery: "1s", top: 100, retention: "90d", name: "a.b:c-1" })).toEqual({
      flushEvery: 1000,
      top: 100,
      retention: 90 * 86_400_000,
      name: "a.b:c-1",
    });
  });

  it.each(bad)("analytics %j is refused, naming the field", (analytics, message) => {
    expect(
      () =>
        new Limiter({
          redis: redis(),
          rules: { perMinute },
          analytics: analytics as LimiterOptions["analytics"],
        }),
    ).toThrow(message);
  });

  it("refuses an onDecision that is not a function, and a report of a bad range", async () => {
    expect(
      () => new Limiter({ redis: redis(), rules: { perMinute }, onDecision: 5 as unknown as () => void }),
    ).toThrow(/^onDecision: must be a function/);
    const l = limiter({ prefix: uniquePrefix("opt"), clock: manualClock() });
    await expect(l.analytics.report({ from: Number.NaN })).rejects.toThrow(
      /^from: expected epoch milliseconds/,
    );
    await expect(l.analytics.report({ from: T0 + 1, to: T0 })).rejects.toThrow(/^from: must be at most to/);
    await expect(l.analytics.report({ from: T0 - 8 * 86_400_000, to: T0 })).rejects.toThrow(
      /^from: a report spans at most the retention/,
    );
    const none = new Limiter({ redis: redis(), rules: { perMinute } });
    expect([l.analytics.enabled, none.analytics.enabled]).toEqual([true, false]);
    await expect(none.analytics.report()).rejects.toThrow(
      /^analytics: this Limiter was built without analytics/,
    );
    await none.analytics.flush(); // nothing to write: resolves
    await l.dispose();
  });
});

describe("on a 3-node Redis Cluster", () => {
  let cluster: Cluster;
  beforeAll(async () => {
    cluster = await startCluster();
  }, 30_000);
  afterAll(async () => {
    await cluster?.stop();
  });

  it("writes and reads one name's keys in one slot, so one node takes the whole flush", async () => {
    const prefix = uniquePrefix("cl");
    const slotOf = async (key: string) => Number(await cluster.call(["CLUSTER", "KEYSLOT", key]));
    const slot = await slotOf(`${prefix}:analytics:{default}:0`);
    /** Whether `node` owns `key`'s slot (another node answers MOVED). */
    const owns = async (node: ClusterNode, key: string) =>
      !((await node.conn.send([["GET", key]]))[0] instanceof Error);
    // a bridge in front of the node that owns that slot, as a REST endpoint in front of its shard
    let node: ClusterNode | undefined;
    for (const candidate of cluster.nodes)
      if (await owns(candidate, `${prefix}:analytics:{default}:0`)) node = candidate;
    if (node === undefined) throw new Error("no node owns the analytics slot");
    const shard = await startBridge({ redisUrl: node.server.url, port: 0, token: TOKEN });
    const clock = manualClock();
    const l = new Limiter({
      redis: { url: shard.url, token: TOKEN },
      prefix,
      rules: { perMinute },
      analytics: true,
      clock,
      denyCache: false,
    });
    try {
      // identifiers whose keys live on that node too, so that their decisions are Redis's
      const ids: string[] = [];
      for (let i = 0; ids.length < 2; i++) if (await owns(node, l.keys(`id${i}`)[0]!)) ids.push(`id${i}`);
      for (let i = 0; i < 7; i++) await l.limit(ids[0]!);
      for (let i = 0; i < 6; i++) await l.limit(ids[1]!);
      clock.set(T0 + 60_000);
      await l.limit(ids[0]!);
      await l.analytics.flush();
      const r = await l.analytics.report({ from: T0, to: T0 + 60_000 });
      expect(r.decisions).toEqual({
        allowed: 11,
        denied: 3,
        bySource: { redis: 14, cache: 0, lease: 0, region: 0, error: 0 },
      });
      expect(r.minutes).toEqual([
        { at: T0, allowed: 10, denied: 3 },
        { at: T0 + 60_000, allowed: 1, denied: 0 },
      ]);
      expect(r.top).toEqual([
        { identifier: ids[0], denied: 2, allowed: 6 },
        { identifier: ids[1], denied: 1, allowed: 5 },
      ]);
      const keys = ((await node.conn.call("KEYS", `${prefix}:analytics:*`)) as unknown[]).map(String);
      expect(keys).toHaveLength(4);
      for (const key of keys) expect(await slotOf(key)).toBe(slot);
    } finally {
      await l.dispose();
      await shard.close();
    }
  });
});

describe("the report's range", () => {
  /** Every report's totals are the sums of its minutes, and its sources add up to them. */
  function expectConsistent(r: Awaited<ReturnType<Limiter["analytics"]["report"]>>) {
    const sum = (pick: (m: { allowed: number; denied: number }) => number) =>
      r.minutes.reduce((total, m) => total + pick(m), 0);
    expect(sum((m) => m.allowed)).toBe(r.decisions.allowed);
    expect(sum((m) => m.denied)).toBe(r.decisions.denied);
    const { redis, cache, lease, error } = r.decisions.bySource;
    expect(redis + cache + lease + error).toBe(r.decisions.allowed + r.decisions.denied);
    expect(r.minutes.map((m) => m.at)).toEqual(
      r.minutes.map((_, i) => (Math.floor(r.from / 60_000) + i) * 60_000),
    );
  }

  it("is every minute from the one `from` is in to the one `to` is in; the default, the 60 ending now", async () => {
    const clock = manualClock();
    const l = limiter({ prefix: uniquePrefix("range"), clock, denyCache: false });
    // one allowed in the minute a 60-minute span from T0 + 30 s starts in, before `from`
    clock.set(T0 - 3_590_000);
    await l.limit("old");
    // two in the first minute of the last hour, seven (5 allowed, 2 denied) in the current one
    clock.set(T0 - 59 * 60_000 + 10_000);
    for (let i = 0; i < 2; i++) await l.limit("first");
    clock.set(T0 + 30_000);
    for (let i = 0; i < 7; i++) await l.limit("now");

    const hour = await l.analytics.report();
    expect([hour.from, hour.to]).toEqual([T0 - 59 * 60_000, T0 + 30_000]);
    expect(hour.minutes).toHaveLength(60);
    expect(hour.minutes[0]).toEqual({ at: T0 - 59 * 60_000, allowed: 2, denied: 0 });
    expect(hour.minutes.at(-1)).toEqual({ at: T0, allowed: 5, denied: 2 });
    expect(hour.decisions).toMatchObject({ allowed: 7, denied: 2 });
    expectConsistent(hour);
    // the same span given explicitly is the same report
    expect(await l.analytics.report({ from: hour.from, to: hour.to })).toEqual(hour);

    // to - from of exactly 60 minutes: the minute `from` falls in as well, 61 entries
    const span = await l.analytics.report({ from: T0 + 30_000 - 3_600_000, to: T0 + 30_000 });
    expect(span.minutes).toHaveLength(61);
    expect(span.minutes[0]).toEqual({ at: T0 - 3_600_000, allowed: 1, denied: 0 });
    expect(span.decisions).toMatchObject({ allowed: 8, denied: 2 });
    expectConsistent(span);

    // on a minute's first millisecond: the same rules
    clock.set(T0);
    const aligned = await l.analytics.report();
    expect([aligned.from, aligned.to, aligned.minutes.length]).toEqual([T0 - 59 * 60_000, T0, 60]);
    expect(aligned.decisions).toMatchObject({ allowed: 7, denied: 2 });
    expectConsistent(aligned);
    const alignedSpan = await l.analytics.report({ from: T0 - 3_600_000, to: T0 });
    expect(alignedSpan.minutes).toHaveLength(61);
    expectConsistent(alignedSpan);
    // one instant: its minute
    const instant = await l.analytics.report({ from: T0 + 1, to: T0 + 1 });
    expect(instant.minutes).toEqual([{ at: T0, allowed: 5, denied: 2 }]);
    expectConsistent(instant);
    await l.dispose();
  });
});

describe("the breaker, read without a request", () => {
  it("says closed, open or half-open while Redis is down, with analytics on or off", async () => {
    const clock = manualClock();
    const down = { url: "http://127.0.0.1:1", token: "breaker-read" };
    const l = new Limiter({
      redis: down,
      rules: { perMinute },
      analytics: true,
      timeout: 200,
      breaker: { failures: 2, cooldown: 60_000 },
      clock,
    });
    const off = new Limiter({ redis: down, rules: { perMinute }, clock });
    expect(l.analytics.breaker()).toEqual({ enabled: true, state: "closed", opened: 0 });
    for (let i = 0; i < 2; i++) expect((await l.limit("x")).source).toBe("error");
    expect(l.analytics.breaker()).toEqual({ enabled: true, state: "open", opened: 1 });
    // a report cannot be had, the breaker's state can; every Limiter on that Redis shares it
    const failed = await l.analytics.report().catch((error: RedisCallError) => error);
    expect((failed as RedisCallError).kind).toBe("unreachable");
    expect(l.analytics.breaker()).toEqual({ enabled: true, state: "open", opened: 1 });
    expect(off.analytics.breaker()).toEqual({ enabled: true, state: "open", opened: 1 });
    const without = new Limiter({ redis: down, rules: { perMinute }, breaker: false, clock });
    expect(without.analytics.breaker()).toEqual({ enabled: false, state: "closed", opened: 0 });
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    try {
      await l.dispose(); // its last flush fails too: logged once, nothing thrown
      expect(warn).toHaveBeenCalledTimes(1);
    } finally {
      warn.mockRestore();
    }
  });

  it("says half-open while the probe is out, then closed once Redis answers it", async () => {
    vi.useFakeTimers({ toFake: ["performance"] });
    const clock = manualClock();
    const l = new Limiter({
      redis: throughHop(),
      prefix: uniquePrefix("half"),
      rules: { perMinute },
      breaker: { failures: 1, cooldown: 1000 },
      clock,
    });
    try {
      hop.fail = (body) => body.includes("EVALSHA");
      expect((await l.limit("h")).source).toBe("error");
      expect(l.analytics.breaker().state).toBe("open");
      vi.advanceTimersByTime(1000);
      expect(l.analytics.breaker().state).toBe("open"); // until a call goes out as the probe
      const probe = l.limit("h");
      expect(l.analytics.breaker().state).toBe("half-open");
      expect((await probe).source).toBe("error");
      expect(l.analytics.breaker()).toEqual({ enabled: true, state: "open", opened: 2 });
      hop.fail = () => false;
      vi.advanceTimersByTime(2000); // the cooldown doubled
      const second = l.limit("h");
      expect(l.analytics.breaker().state).toBe("half-open");
      expect((await second).source).toBe("redis");
      expect(l.analytics.breaker()).toEqual({ enabled: true, state: "closed", opened: 2 });
    } finally {
      hop.fail = () => false;
      vi.useRealTimers();
      await l.dispose();
    }
  });
});

describe("every source, counted once", () => {
  it("a regional pool's decisions: source region, seen by onDecision and counted exactly", async () => {
    const clock = manualClock();
    const prefix = uniquePrefix("reg");
    const seen: Decision["source"][] = [];
    const work: Promise<unknown>[] = [];
    const waitUntil = (promise: Promise<unknown>) => {
      work.push(promise);
    };
    const l = new Limiter({
      redis: redis(),
      // the region's database: a client of its own (the pool's keys are apart from home's)
      region: {
        redis: new Redis({ url: bridge.url, token: TOKEN, enableTelemetry: false }),
        pool: { max: 500, ttl: "5s" },
      },
      prefix,
      rules: { r: fixedWindow({ limit: 100, window: "1m" }) },
      analytics: { flushEvery: "1h" },
      clock,
      onDecision: (decision) => seen.push(decision.source),
    });
    for (let i = 0; i < 8; i++) {
      await l.limit("id", { waitUntil });
      while (work.length > 0) await Promise.all(work.splice(0));
      clock.set(clock.now + 10);
    }
    // cold, then reserving for the pool, then the pool (as test/engine/region.test.ts shows)
    expect(seen).toEqual(["redis", "redis", ...Array(6).fill("region")]);
    const r = await l.analytics.report();
    expect(r.decisions).toEqual({
      allowed: 8,
      denied: 0,
      bySource: { redis: 2, cache: 0, lease: 0, region: 6, error: 0 },
    });
    expect(r.top).toEqual([]);
    await l.dispose();
  });

  it("onDecision sees redis, lease, cache and error decisions; the report counts exactly those; dispose() flushes", async () => {
    const clock = manualClock();
    const prefix = uniquePrefix("src");
    const seen: Decision[] = [];
    const l = new Limiter({
      redis: throughHop(),
      prefix,
      rules: { perMinute: fixedWindow({ limit: 20, window: "1m" }) },
      lease: { max: 5, ttl: "1s" },
      analytics: { flushEvery: "1h" },
      breaker: false,
      clock,
      onDecision: (decision, identifier) => {
        expect(identifier).toBe(decision.allowed ? identifier : "hot");
        seen.push(decision);
      },
    });
    // hot: leased once it is hot, denied by Redis at the limit, then by the deny cache
    const hot: Decision[] = [];
    for (let i = 0; i < 30; i++) hot.push(await l.limit("hot"));
    // settling an admitted decision is not another decision
    const settled = hot.find((d) => d.allowed && d.source === "redis")!;
    await l.settle(settled, 1);
    // cold: Redis unreachable (the hop's 502): decided by onError
    hop.fail = (body) => body.includes("EVALSHA");
    try {
      for (let i = 0; i < 2; i++) await l.limit("cold");
    } finally {
      hop.fail = () => false;
    }
    expect(seen).toHaveLength(32);
    const tally = { redis: 0, cache: 0, lease: 0, region: 0, error: 0 };
    for (const d of seen) tally[d.source] += 1;
    for (const source of ["redis", "cache", "lease", "error"] as const)
      expect(tally[source]).toBeGreaterThan(0);

    const flushes = hop.flushes;
    await l.dispose(); // writes what the isolate holds: one request
    expect(hop.flushes - flushes).toBe(1);
    const reader = limiter({ prefix, clock });
    const r = await reader.analytics.report();
    const allowed = seen.filter((d) => d.allowed).length;
    expect(r.decisions).toEqual({ allowed, denied: 32 - allowed, bySource: tally });
    expect(r.denials).toEqual({ perMinute: 32 - allowed });
    expect(r.top).toEqual([
      { identifier: "hot", denied: 32 - allowed, allowed: hot.filter((d) => d.allowed).length },
    ]);
    expect(r.errors.unreachable).toBe(2);
    await reader.dispose();
  });
});
