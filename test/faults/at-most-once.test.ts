// One decision costs at most one unit, with the client a user writes (`new Redis({ url, token })`,
// @upstash/redis's default 5 retries): a hop forwards the request to Redis and then cuts the
// connection (or answers 502) instead of passing the answer on.
import { Redis } from "@upstash/redis";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import {
  fixedWindow,
  gcra,
  Limiter,
  RedisCallError,
  type RuleConfig,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from "../../src/index.js";
import { failOnUnhandledRejections } from "../own-bridge.js";
import { bridgeRedis, manualClock, uniquePrefix } from "../support.js";
import { Hop } from "./support.js";

failOnUnhandledRejections();
let hop: Hop;
beforeAll(async () => {
  hop = await Hop.start(inject("bridgeUrl"));
});
afterAll(async () => {
  await hop.close();
});

const single: Record<string, Record<string, RuleConfig>> = {
  gcra: { r: gcra({ limit: 10, period: "1m" }) },
  tokenBucket: { r: tokenBucket({ capacity: 10, refillRate: 1, interval: "1m" }) },
  fixedWindow: { r: fixedWindow({ limit: 10, window: "1m" }) },
  slidingWindow: { r: slidingWindow({ limit: 10, window: "1m" }) },
  slidingLog: { r: slidingLog({ limit: 10, window: "1m" }) },
  "three rules": {
    burst: gcra({ limit: 10, period: "10m", burst: 10 }),
    minute: slidingLog({ limit: 10, window: "1m" }),
    daily: fixedWindow({ limit: 10, window: "1d" }),
  },
};

/** The same limiter twice: once through the hop (the user's default client), once straight. */
function pair(rules: Record<string, RuleConfig>) {
  const prefix = uniquePrefix("once");
  const clock = manualClock();
  const user = new Redis({ url: hop.url, token: inject("bridgeToken") }); // default retries
  const through = new Limiter({ redis: user, prefix, rules, clock, denyCache: false, timeout: 5000 });
  const direct = new Limiter({ redis: bridgeRedis(), prefix, rules, clock, denyCache: false });
  return { through, direct };
}

describe.each(["cut", "502"] as const)("a hop that forwards, then %s", (mode) => {
  it.each(Object.keys(single))("%s: one decision costs one unit", async (name) => {
    const { through, direct } = pair(single[name]!);
    await direct.limit("warm-up"); // the script is loaded: the cut request runs it
    hop.mode = mode;
    const before = hop.swallowed;
    const decision = await through.limit("victim");
    hop.mode = "pass";
    expect(decision.source).toBe("error");
    expect(decision.error).toBeInstanceOf(RedisCallError);
    expect(decision.error).toMatchObject(
      mode === "cut" ? { kind: "unreachable" } : { kind: "unreachable", status: 502 },
    );
    expect(hop.swallowed - before).toBe(1); // Redis ran it once, and was not asked again
    const peek = await direct.limit("victim", { cost: 0 });
    for (const rule of Object.values(peek.rules)) expect(rule.remaining).toBe(9);
  });
});

describe("a hop that cuts every answer, under concurrency", () => {
  it("50 decisions on one key cost 50 units, not up to 300", async () => {
    const { through, direct } = pair({ r: fixedWindow({ limit: 1000, window: "1h" }) });
    await direct.limit("warm-up");
    hop.mode = "cut";
    const decisions = await Promise.all(Array.from({ length: 50 }, () => through.limit("crowd")));
    hop.mode = "pass";
    expect(decisions.every((d) => d.source === "error" && d.allowed)).toBe(true);
    expect((await direct.limit("crowd", { cost: 0 })).remaining).toBe(950);
  });
});
