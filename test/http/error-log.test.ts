import { Redis } from "@upstash/redis";
import { Hono } from "hono";
import { describe, expect, it, vi } from "vitest";
import { type RateLimitEvent, rateLimit } from "../../src/adapters/hono/index.js";
import { createMiddleware } from "../../src/adapters/vercel/index.js";
import { RedisCallError, type RedisErrorKind } from "../../src/engine/errors.js";
import type { Decision } from "../../src/engine/types.js";
import { failureLog } from "../../src/http/error-log.js";
import { fixedWindow, Limiter } from "../../src/index.js";
import { freePort } from "../faults/support.js";

function decision(source: Decision["source"], kind?: RedisErrorKind, allowed = true): Decision {
  const rule = { allowed, limit: 5, remaining: allowed ? 5 : 0, resetAt: 0, retryAfter: allowed ? 0 : 1000 };
  return {
    ...rule,
    rule: "r",
    source,
    plan: "default",
    decidedAt: 0,
    rules: { r: rule },
    ...(kind ? { error: new RedisCallError(kind, `edgelimit: ${kind} happened`) } : {}),
  };
}

function clock() {
  const now = () => now.t;
  now.t = 0;
  return now;
}

describe("failure log", () => {
  it("tells the first failure in full, then one summary per interval, then that Redis answers again", () => {
    const now = clock();
    const log = failureLog({ interval: 60_000, now });
    const lines: (string | undefined)[] = [];
    const feed = (d: Decision) => {
      const line = log.record(d, "GET /api");
      if (line) lines.push(line);
    };
    feed(decision("redis"));
    feed(decision("error", "timeout"));
    for (let i = 1; i <= 1000; i++) {
      now.t = i * 100; // 100 s of failures, 10 a second
      feed(decision("error", i < 5 ? "timeout" : "breaker-open"));
    }
    feed(decision("error", "breaker-open", false));
    now.t = 100_500;
    feed(decision("redis"));
    feed(decision("redis"));
    expect(lines).toEqual([
      "edgelimit: no decision from Redis for GET /api, allowed (onError: allow): [timeout] edgelimit: timeout happened (further failures: one summary line per 60 s)",
      "edgelimit: 600 decisions failed open in the last 60 s: timeout 4, breaker-open 596; last: [breaker-open] edgelimit: breaker-open happened",
      "edgelimit: Redis answers again; 401 decisions failed (400 open, 1 closed) since the last line: breaker-open 401",
    ]);
  });

  it("starts over after Redis answered: the next outage's first failure is told in full", () => {
    const now = clock();
    const log = failureLog({ now });
    expect(log.record(decision("error", "unreachable"), "POST /a")).toMatch(
      /^edgelimit: no decision.*\[unreachable\]/,
    );
    expect(log.record(decision("cache"), "POST /a")).toBe("edgelimit: Redis answers again");
    expect(log.record(decision("error", "unauthorized", false), "POST /a")).toMatch(
      /^edgelimit: no decision from Redis for POST \/a, denied \(onError: deny\): \[unauthorized\]/,
    );
  });

  it("rejects a bad interval, naming it", () => {
    expect(() => failureLog({ interval: 0 })).toThrow(/interval: must be a positive number/);
  });
});

describe("the Hono middleware's failure log", () => {
  it("logs one line for 30 failed decisions in a row, not 30", async () => {
    const port = await freePort(); // nothing listens: every decision fails at once
    const limiter = new Limiter({
      redis: new Redis({ url: `http://127.0.0.1:${port}`, token: "t" }),
      rules: { r: fixedWindow({ limit: 5, window: "1m" }) },
      timeout: 15_000, // refused at once; a slow machine must not turn that into a timeout
    });
    const events: RateLimitEvent[] = [];
    const app = new Hono();
    app.use("*", rateLimit({ limiter, key: () => "k", log: (event) => events.push(event) }));
    app.get("/x", (c) => c.text("ok"));
    for (let i = 0; i < 30; i++) expect((await app.request("/x")).status).toBe(200);
    expect(events.map((e) => e.message)).toEqual([
      expect.stringMatching(
        /^edgelimit: no decision from Redis for GET \/x, allowed \(onError: allow\): \[unreachable\]/,
      ),
    ]);
  });
});

describe("the Vercel middleware's failure log", () => {
  it("warns once for 30 failed decisions in a row", async () => {
    const port = await freePort();
    const limiter = new Limiter({
      redis: new Redis({ url: `http://127.0.0.1:${port}`, token: "t" }),
      rules: { r: fixedWindow({ limit: 5, window: "1m" }) },
      timeout: 15_000, // refused at once; a slow machine must not turn that into a timeout
    });
    const middleware = createMiddleware({ limiter, key: () => "k" });
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    try {
      for (let i = 0; i < 30; i++) await middleware(new Request("https://app.test/api/x"));
      expect(warn.mock.calls.map((call) => String(call[0]))).toEqual([
        expect.stringMatching(
          /^edgelimit: no decision from Redis for GET \/api\/x, allowed \(onError: allow\): \[unreachable\]/,
        ),
      ]);
    } finally {
      warn.mockRestore();
    }
  });
});
