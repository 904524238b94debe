// limiter.settle() as a user calls it: `new Redis({ url, token })` with @upstash/redis's default options
// (retries, telemetry, base64 responses), a Limiter with its defaults (deny cache on, 1 s timeout) but
// for an injected clock, against the REST bridge. test/engine/settle.test.ts covers the math per
// algorithm with a tuned client; this file checks the same promises hold with the defaults, where the
// deny cache answers peeks of a key in debt and @upstash/redis would retry a lost answer.
import { Redis } from "@upstash/redis";
import { describe, expect, inject, it } from "vitest";
import {
  fixedWindow,
  gcra,
  Limiter,
  RedisCallError,
  type RuleConfig,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from "../src/index.js";
import { startCutHop } from "./cut-hop.js";
import { failOnUnhandledRejections, ownBridge } from "./own-bridge.js";
import { manualClock, T0, uniquePrefix } from "./support.js";

failOnUnhandledRejections();
const bridge = ownBridge();

// A limit of 20 a minute each; gcra and the token bucket earn a unit back every 3 s.
const rules: Record<string, RuleConfig> = {
  gcra: gcra({ limit: 20, period: "1m" }),
  tokenBucket: tokenBucket({ capacity: 20, refillRate: 1, interval: "3s" }),
  fixedWindow: fixedWindow({ limit: 20, window: "1m" }),
  slidingWindow: slidingWindow({ limit: 20, window: "1m" }),
  slidingLog: slidingLog({ limit: 20, window: "1m" }),
};

// 25 counted against 20 at T0 + 1 s: how long until one more unit fits.
const debtWait: Record<string, number> = {
  // 5 owed and 1 more: 6 units of 3 s
  gcra: 18_000,
  tokenBucket: 18_000,
  // the window ends at T0 + 60 s
  fixedWindow: 59_000,
  // 25 fading through the next window: 25 * (60 - e) / 60 <= 19 at e = 14.4 s
  slidingWindow: 59_000 + 14_400,
  // the 6th oldest of 25 entries stamped T0 + 1 s leaves a minute later
  slidingLog: 60_000,
};

const userRedis = (url: string) => new Redis({ url, token: inject("bridgeToken") });

describe.each(Object.keys(rules))("%s with default options", (name) => {
  const setup = (url = bridge.url) => {
    const clock = manualClock(T0 + 1000);
    const prefix = uniquePrefix("settle-user");
    const limiter = new Limiter({ redis: userRedis(url), prefix, rules: { r: rules[name]! }, clock });
    return { limiter, clock, prefix };
  };

  it("cost 10 settled at 4: exactly 6 fewer used; a second settle rejects", async () => {
    const { limiter } = setup();
    const d = await limiter.limit("u", { cost: 10 });
    expect(d).toMatchObject({ allowed: true, remaining: 10, source: "redis" });
    expect((await limiter.limit("u", { cost: 0 })).remaining).toBe(10);
    expect(await limiter.settle(d, 4)).toEqual({ difference: -6, via: "redis" });
    expect((await limiter.limit("u", { cost: 0 })).remaining).toBe(16);
    await expect(limiter.settle(d, 4)).rejects.toThrow(/settle: the decision for "u" .* was already settled/);
    expect((await limiter.limit("u", { cost: 0 })).remaining).toBe(16);
  });

  it("cost 10 settled at 25: the debt reads back exactly, and is waited out", async () => {
    const { limiter, clock } = setup();
    const d = await limiter.limit("fresh", { cost: 10 });
    expect(await limiter.settle(d, 25)).toEqual({ difference: 15, via: "redis" });
    const wait = debtWait[name]!;
    expect(await limiter.limit("fresh", { cost: 0 })).toMatchObject({
      allowed: false,
      remaining: 0,
      retryAfter: wait,
    });
    // the deny cache holds the denial as long as it lasts, and no longer
    clock.set(T0 + 1000 + wait - 1);
    expect((await limiter.limit("fresh")).allowed).toBe(false);
    clock.set(T0 + 1000 + wait);
    expect(await limiter.limit("fresh")).toMatchObject({ allowed: true, source: "redis" });
    await expect(limiter.settle(d, 25)).rejects.toThrow("was already settled");
  });

  it("through a hop that cuts the connection after forwarding: an error, sent once, not again", async () => {
    const hop = await startCutHop(bridge.url);
    try {
      const { limiter, prefix, clock } = setup(hop.url);
      const direct = new Limiter({ redis: userRedis(bridge.url), prefix, rules: { r: rules[name]! }, clock });
      const d = await limiter.limit("cut", { cost: 10 });
      // the settle script is loaded (a first settle through the hop), so the cut one is one EVALSHA
      await limiter.settle(await limiter.limit("warm", { cost: 2 }), 1);
      const before = bridge.stats.requests;
      hop.cutNext = "cut";
      const settled = await limiter.settle(d, 4);
      expect(hop.cuts).toBe(1);
      expect(settled).toMatchObject({ difference: -6, via: "redis" });
      expect(settled.error).toBeInstanceOf(RedisCallError);
      // reached Redis once and given back once: 6, not 12; @upstash/redis's retries did not resend it
      expect(bridge.stats.requests - before).toBe(1);
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(bridge.stats.requests - before).toBe(1);
      expect((await direct.limit("cut", { cost: 0 })).remaining).toBe(16);
      await expect(limiter.settle(d, 4)).rejects.toThrow("was already settled");
    } finally {
      await hop.close();
    }
  });
});

describe("a waitUntil that throws when called (Workers' ctx.waitUntil passed unbound)", () => {
  // As workerd's ExecutionContext: a method that needs its `this`. Taken off the object, it throws.
  class Context {
    readonly #pending: Promise<unknown>[] = [];
    waitUntil(promise: Promise<unknown>): void {
      this.#pending.push(promise);
    }
    settled(): Promise<unknown[]> {
      return Promise.all(this.#pending);
    }
  }

  it("rejects naming waitUntil, sends nothing, and the decision can still be settled", async () => {
    const clock = manualClock(T0 + 1000);
    const limiter = new Limiter({
      redis: userRedis(bridge.url),
      prefix: uniquePrefix("settle-unbound"),
      rules: { r: gcra({ limit: 20, period: "1m" }) },
      clock,
    });
    const d = await limiter.limit("u", { cost: 10 });
    const ctx = new Context();
    const before = bridge.stats.requests;
    await expect(limiter.settle(d, 4, { waitUntil: ctx.waitUntil })).rejects.toThrow(
      /^waitUntil: calling it threw \(.+\); on Workers pass \(p\) => ctx\.waitUntil\(p\) or ctx\.waitUntil\.bind\(ctx\)/,
    );
    expect(bridge.stats.requests).toBe(before);
    expect((await limiter.limit("u", { cost: 0 })).remaining).toBe(10);
    expect(await limiter.settle(d, 4, { waitUntil: ctx.waitUntil.bind(ctx) })).toEqual({
      difference: -6,
      via: "redis",
      pending: true,
    });
    expect(await ctx.settled()).toEqual([{ difference: -6, via: "redis" }]);
    expect((await limiter.limit("u", { cost: 0 })).remaining).toBe(16);
  });

  it("a settle that sends nothing still hands waitUntil a promise that ends", async () => {
    const limiter = new Limiter({
      redis: userRedis(bridge.url),
      prefix: uniquePrefix("settle-none"),
      rules: { r: gcra({ limit: 20, period: "1m" }) },
      clock: manualClock(T0 + 1000),
    });
    const d = await limiter.limit("u", { cost: 4 });
    const ctx = new Context();
    expect(await limiter.settle(d, 4, { waitUntil: (p) => ctx.waitUntil(p) })).toEqual({
      difference: 0,
      via: "none",
    });
    expect(await ctx.settled()).toEqual([{ difference: 0, via: "none" }]);
  });
});
