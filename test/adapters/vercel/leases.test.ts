import { afterEach, describe, expect, it } from "vitest";
import { createMiddleware } from "../../../src/adapters/vercel/index.js";
import { fixedWindow, Limiter } from "../../../src/index.js";
import { bridgeRedis, manualClock, uniquePrefix } from "../../support.js";

// Inside edge-runtime: the middleware hands lease refunds to Vercel's waitUntil, which it finds where
// @vercel/functions' own waitUntil does (the request context under Symbol.for("@vercel/request-context")).
const CONTEXT = Symbol.for("@vercel/request-context");
const holder = globalThis as unknown as Record<symbol, unknown>;

afterEach(() => {
  delete holder[CONTEXT];
});

describe("vercel createMiddleware with a lease", () => {
  it("gives an expired lease back through the request's waitUntil", async () => {
    const background: Promise<unknown>[] = [];
    holder[CONTEXT] = { get: () => ({ waitUntil: (promise: Promise<unknown>) => background.push(promise) }) };
    const clock = manualClock();
    const prefix = uniquePrefix("vercel-lease");
    const rules = { hourly: fixedWindow({ limit: 1000, window: "1h" }) };
    const limiter = new Limiter({
      redis: bridgeRedis(),
      prefix,
      rules,
      clock,
      lease: { max: 50, ttl: "1s" },
    });
    const plain = new Limiter({ redis: bridgeRedis(), prefix, rules, clock });
    const middleware = createMiddleware({ limiter });
    const call = () =>
      middleware(new Request("https://app.example/", { headers: { "x-real-ip": "203.0.113.7" } }));
    for (let i = 0; i < 4; i++) {
      expect((await call())!.status).toBe(200);
      clock.set(clock.now + 1);
    }
    // the 4th reserved 3 units for this isolate: Redis counts 7
    expect((await plain.limit("203.0.113.7", { cost: 0 })).remaining).toBe(1000 - 7);
    expect(background).toEqual([]);
    clock.set(clock.now + 1000);
    expect((await call())!.status).toBe(200);
    expect(background.length).toBe(1);
    await Promise.all(background);
    // the 3 given back; the 5th decision, still hot, reserved 3 anew: 5 used + 3 held
    expect((await plain.limit("203.0.113.7", { cost: 0 })).remaining).toBe(1000 - 8);
  });
});
