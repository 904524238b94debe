// edgelimit/upstash against the bridge, with a real @upstash/redis client: the peer's API and its
// semantics, exact counts, an injected clock.
import { Redis } from "@upstash/redis";
import { describe, expect, inject, it } from "vitest";
import { IpDenyList, Ratelimit } from "../../../src/adapters/upstash/index.js";
import { failOnUnhandledRejections, ownBridge } from "../../own-bridge.js";
import { manualClock, T0, uniquePrefix } from "../../support.js";

failOnUnhandledRejections();
const bridge = ownBridge();

function redis(): Redis {
  return new Redis({ url: bridge.url, token: inject("bridgeToken"), enableTelemetry: false });
}

function build(limiter: ReturnType<typeof Ratelimit.fixedWindow>, extra: Record<string, unknown> = {}) {
  const clock = manualClock();
  const ratelimit = new Ratelimit({
    redis: redis(),
    limiter,
    prefix: uniquePrefix("upstash"),
    timeout: 15_000, // not about timeouts: a slow machine must not make a decision fail open
    clock,
    ...extra,
  });
  return { ratelimit, clock };
}

describe("Ratelimit: exact counts", () => {
  it("fixedWindow: 10 admitted, then denied until the window ends, reset at its end", async () => {
    const { ratelimit, clock } = build(Ratelimit.fixedWindow(10, "1 m"));
    const seen: [boolean, number, number][] = [];
    for (let i = 0; i < 12; i++) {
      clock.set(T0 + i);
      const r = await ratelimit.limit("user:1");
      seen.push([r.success, r.remaining, r.reset]);
    }
    const end = T0 + 60_000;
    expect(seen).toEqual([
      ...Array.from({ length: 10 }, (_, i) => [true, 9 - i, end]),
      [false, 0, end],
      [false, 0, end],
    ]);
    clock.set(end);
    expect((await ratelimit.limit("user:1")).remaining).toBe(9);
  });

  it("slidingWindow: the peer's duration strings, 1.5 s windows", async () => {
    const { ratelimit, clock } = build(Ratelimit.slidingWindow(3, "1.5 s"));
    const first = [];
    for (let i = 0; i < 4; i++) first.push((await ratelimit.limit("a")).success);
    expect(first).toEqual([true, true, true, false]);
    // two windows later both counters have faded
    clock.set(T0 + 3_000);
    expect(await ratelimit.limit("a")).toMatchObject({ success: true, limit: 3, remaining: 2 });
  });

  it("tokenBucket: maxTokens at once, then refillRate per interval", async () => {
    const { ratelimit, clock } = build(Ratelimit.tokenBucket(2, "1 s", 5));
    const seen = [];
    for (let i = 0; i < 6; i++) seen.push((await ratelimit.limit("b")).remaining);
    expect(seen).toEqual([4, 3, 2, 1, 0, 0]);
    clock.set(T0 + 1_000);
    const after = await ratelimit.limit("b", { rate: 2 });
    expect(after).toMatchObject({ success: true, limit: 5, remaining: 0 });
    // a rate above maxTokens is denied and takes nothing
    clock.set(T0 + 10_000);
    expect(await ratelimit.limit("b", { rate: 6 })).toMatchObject({
      success: false,
      remaining: 0,
      reset: T0 + 11_000,
    });
    expect((await ratelimit.getRemaining("b")).remaining).toBe(5);
    // then blocked in the isolate until that reset, as the peer's cache blocks it, for any rate
    expect(await ratelimit.limit("b")).toMatchObject({ success: false, reason: "cacheBlock" });
    clock.set(T0 + 11_000);
    expect(await ratelimit.limit("b")).toMatchObject({ success: true, remaining: 4 });
  });

  it("cachedFixedWindow: exactly the limit, then a cache block with no request", async () => {
    const { ratelimit } = build(Ratelimit.cachedFixedWindow(5, "1 h"));
    const seen = [];
    for (let i = 0; i < 6; i++) seen.push((await ratelimit.limit("cf")).success);
    expect(seen).toEqual([true, true, true, true, true, false]);
    const before = bridge.stats.requests;
    expect(await ratelimit.limit("cf")).toMatchObject({ success: false, remaining: 0, reason: "cacheBlock" });
    expect(bridge.stats.requests).toBe(before);
    // a refund lifts the block and gives back in one request (the denial was counted, as the peer's
    // fixed window counts it: 6 - 2 leaves 1)
    expect(await ratelimit.limit("cf", { rate: -2 })).toMatchObject({ success: true, remaining: 1 });
    expect(bridge.stats.requests).toBe(before + 1);
    expect(await ratelimit.limit("cf")).toMatchObject({ success: true });
  });

  it('"1 w" is a week', async () => {
    const { ratelimit } = build(Ratelimit.fixedWindow(1, "1 w"));
    const r = await ratelimit.limit("w");
    expect(r.reset).toBe((Math.floor(T0 / 604_800_000) + 1) * 604_800_000);
  });
});

describe("Ratelimit: the peer's semantics kept", () => {
  for (const [name, limiter] of [
    ["fixedWindow", Ratelimit.fixedWindow(10, "1 h")],
    ["slidingWindow", Ratelimit.slidingWindow(10, "1 h")],
  ] as const) {
    it(`${name}: a charge past the room left is counted, although denied`, async () => {
      const { ratelimit } = build(limiter);
      expect(await ratelimit.limit("u", { rate: 8 })).toMatchObject({ success: true, remaining: 2 });
      expect(await ratelimit.limit("u", { rate: 5 })).toMatchObject({ success: false, remaining: 0 });
      expect(await ratelimit.getRemaining("u")).toMatchObject({ remaining: 0, limit: 10 });
      // counted past the limit: one more unit is denied too
      expect((await ratelimit.limit("u")).success).toBe(false);
    });
  }

  it("fixedWindow: a negative rate refunds as the peer's 2.1, past what was charged; one request each", async () => {
    const { ratelimit, clock } = build(Ratelimit.fixedWindow(10, "1 h"));
    await ratelimit.limit("r", { rate: 4 });
    await ratelimit.limit("r", { rate: 6 });
    // denied, and counted as the peer counts it: 11
    expect((await ratelimit.limit("r")).success).toBe(false);
    expect((await ratelimit.getRemaining("r")).remaining).toBe(0);
    const before = bridge.stats.requests;
    expect(await ratelimit.limit("r", { rate: -3 })).toMatchObject({
      success: true,
      limit: 10,
      remaining: 2,
    });
    expect(bridge.stats.requests).toBe(before + 1);
    expect((await ratelimit.getRemaining("r")).remaining).toBe(2);
    // past what was charged: a credit, remaining above the limit until the window ends
    expect(await ratelimit.limit("r", { rate: -20 })).toMatchObject({ success: true, remaining: 22 });
    expect(await ratelimit.limit("r", { rate: 5 })).toMatchObject({ success: true, remaining: 17 });
    expect((await ratelimit.getRemaining("r")).remaining).toBe(17);
    // a new window starts from the limit
    clock.set(Math.floor(T0 / 3_600_000) * 3_600_000 + 3_600_000);
    expect(await ratelimit.limit("r")).toMatchObject({ success: true, remaining: 9 });
    // a fresh identifier: 3 back before any charge is 13 left
    expect(await ratelimit.limit("fresh", { rate: -3 })).toMatchObject({ success: true, remaining: 13 });
  });

  it("tokenBucket: a negative rate adds tokens, past maxTokens until the next refill", async () => {
    const { ratelimit, clock } = build(Ratelimit.tokenBucket(1, "1 h", 10));
    await ratelimit.limit("t", { rate: 4 });
    await ratelimit.limit("t", { rate: 3 });
    expect(await ratelimit.limit("t", { rate: -5 })).toMatchObject({ success: true, remaining: 8 });
    expect((await ratelimit.getRemaining("t")).remaining).toBe(8);
    // past maxTokens, as the peer's: a credit, which a rate above maxTokens may use
    expect(await ratelimit.limit("t", { rate: -5 })).toMatchObject({ success: true, remaining: 13 });
    expect((await ratelimit.getRemaining("t")).remaining).toBe(13);
    expect(await ratelimit.limit("t", { rate: 12 })).toMatchObject({ success: true, remaining: 1 });
    expect(await ratelimit.limit("t", { rate: -1000 })).toMatchObject({ success: true, remaining: 1001 });
    // the first refill (an hour after the first charge) cuts the credit to maxTokens
    clock.set(T0 + 3_600_000);
    expect((await ratelimit.getRemaining("t")).remaining).toBe(10);
    // a fresh identifier given 3 back holds 13
    expect(await ratelimit.limit("fresh", { rate: -3 })).toMatchObject({ success: true, remaining: 13 });
    // a credit stops at 2^50 tokens, exactly
    await ratelimit.limit("huge", { rate: -Number.MAX_SAFE_INTEGER });
    expect(await ratelimit.limit("huge", { rate: -Number.MAX_SAFE_INTEGER })).toMatchObject({
      success: true,
      remaining: 2 ** 50,
    });
    expect(await ratelimit.limit("huge", { rate: 2 ** 50 - 7 })).toMatchObject({
      success: true,
      remaining: 7,
    });
  });

  it("tokenBucket: refillRate at each interval's end, none before it (the peer's 80 % load)", async () => {
    // 16 tokens, 16 more each 10 s; 3 units a second over 10 s (30) exhaust the bucket by 5.33 s
    const { ratelimit, clock } = build(Ratelimit.tokenBucket(16, "10 s", 16));
    const admitted = [];
    for (let s = 0; s < 10; s++) {
      clock.set(T0 + s * 1_000);
      admitted.push((await ratelimit.limit("load", { rate: 3 })).success);
    }
    // 5 charges of 3 leave 1: the rest wait for the refill at T0 + 10 s, whatever the fraction earned
    expect(admitted).toEqual([true, true, true, true, true, false, false, false, false, false]);
    clock.set(T0 + 9_999);
    expect((await ratelimit.getRemaining("load")).remaining).toBe(1);
    clock.set(T0 + 10_000);
    expect((await ratelimit.limit("load", { rate: 3 })).remaining).toBe(13);
  });

  it("refunds in sequence, and after a charge past the limit itself", async () => {
    const { ratelimit } = build(Ratelimit.slidingWindow(10, "1 h"));
    await ratelimit.limit("s", { rate: 8 });
    await ratelimit.limit("s", { rate: -2 });
    expect((await ratelimit.getRemaining("s")).remaining).toBe(4);
    await ratelimit.limit("s", { rate: -3 });
    expect((await ratelimit.getRemaining("s")).remaining).toBe(7);
    expect(await ratelimit.limit("s", { rate: 5 })).toMatchObject({ success: true, remaining: 2 });

    // 11 on a limit of 10: counted (10, and 1 past the limit), denied; 5 back leaves room for 4
    expect(await ratelimit.limit("o", { rate: 11 })).toMatchObject({ success: false, remaining: 0 });
    expect((await ratelimit.limit("o")).success).toBe(false);
    await ratelimit.limit("o", { rate: -5 });
    expect((await ratelimit.getRemaining("o")).remaining).toBe(4);
    // past what was charged, as the peer's 2.1: a credit, remaining above the limit
    expect(await ratelimit.limit("o", { rate: -20 })).toMatchObject({ success: true, remaining: 24 });
    expect((await ratelimit.getRemaining("o")).remaining).toBe(24);
    // a charge in credit is admitted exactly; its own answer says at most the limit (docs/upstash.md)
    expect(await ratelimit.limit("o", { rate: 4 })).toMatchObject({ success: true, remaining: 10 });
    expect((await ratelimit.getRemaining("o")).remaining).toBe(20);
    // a fresh identifier: 3 back before any charge is 13 left
    expect(await ratelimit.limit("fresh", { rate: -3 })).toMatchObject({ success: true, remaining: 13 });
  });

  it("rate 0 answers and counts nothing", async () => {
    const { ratelimit } = build(Ratelimit.slidingWindow(5, "1 m"));
    await ratelimit.limit("z", { rate: 2 });
    expect(await ratelimit.limit("z", { rate: 0 })).toMatchObject({ success: true, remaining: 3 });
    expect((await ratelimit.getRemaining("z")).remaining).toBe(3);
  });

  it("resetUsedTokens forgets the count", async () => {
    const { ratelimit } = build(Ratelimit.fixedWindow(2, "1 h"));
    await ratelimit.limit("x", { rate: 2 });
    expect((await ratelimit.limit("x")).success).toBe(false);
    await ratelimit.resetUsedTokens("x");
    expect(await ratelimit.limit("x")).toMatchObject({ success: true, remaining: 1 });
  });

  it("a denial is answered from the cache the second time: reason cacheBlock, no request", async () => {
    const { ratelimit } = build(Ratelimit.fixedWindow(1, "1 h"));
    await ratelimit.limit("c");
    expect((await ratelimit.limit("c")).reason).toBeUndefined();
    const before = bridge.stats.requests;
    expect(await ratelimit.limit("c")).toMatchObject({ success: false, reason: "cacheBlock" });
    expect(bridge.stats.requests).toBe(before);
  });

  it("ephemeralCache false: every denial asks Redis, none from the cache", async () => {
    const { ratelimit, clock } = build(Ratelimit.fixedWindow(2, "1 h"), { ephemeralCache: false });
    const start = bridge.stats.requests;
    const seen = [];
    for (let i = 0; i < 4; i++) seen.push(await ratelimit.limit("e"));
    expect(seen.map(({ success, remaining, reason }) => [success, remaining, reason])).toEqual([
      [true, 1, undefined],
      [true, 0, undefined],
      [false, 0, undefined],
      [false, 0, undefined],
    ]);
    const hourEnd = (Math.floor(clock() / 3_600_000) + 1) * 3_600_000;
    expect(seen.map((r) => r.reset)).toEqual([hourEnd, hourEnd, hourEnd, hourEnd]);
    expect(bridge.stats.requests - start).toBe(4);
    expect(await ratelimit.limit("e", { rate: 0 })).toMatchObject({ success: true, remaining: 0 });
  });

  it("a rate that is not a whole number rejects, as an async function does, and asks nothing", async () => {
    const { ratelimit } = build(Ratelimit.fixedWindow(2, "1 h"), { ephemeralCache: false });
    const start = bridge.stats.requests;
    const answers = [1.5, Number.NaN, "2" as unknown as number].map((rate) => ratelimit.limit("n", { rate }));
    for (const answer of answers) await expect(answer).rejects.toThrow(RangeError);
    expect(bridge.stats.requests).toBe(start);
  });

  it("dynamic limits: set, read, applied, cleared", async () => {
    const { ratelimit } = build(Ratelimit.fixedWindow(2, "1 h"), { dynamicLimits: true });
    expect(await ratelimit.getDynamicLimit()).toEqual({ dynamicLimit: null });
    await ratelimit.setDynamicLimit({ limit: 4 });
    expect(await ratelimit.getDynamicLimit()).toEqual({ dynamicLimit: 4 });
    const seen = [];
    for (let i = 0; i < 5; i++) seen.push((await ratelimit.limit("d")).success);
    expect(seen).toEqual([true, true, true, true, false]);
    expect(await ratelimit.getRemaining("d")).toMatchObject({ limit: 4, remaining: 0 });
    await ratelimit.setDynamicLimit({ limit: false });
    expect(await ratelimit.getDynamicLimit()).toEqual({ dynamicLimit: null });
  });

  it("dynamic limits off: set and get throw, naming the option", async () => {
    const { ratelimit } = build(Ratelimit.fixedWindow(2, "1 h"));
    await expect(ratelimit.setDynamicLimit({ limit: 3 })).rejects.toThrow(/dynamicLimits must be enabled/);
  });

  it("the deny list: identifier, ip, user agent, country; reason denyList; blockUntilReady throws", async () => {
    const client = redis();
    const { ratelimit } = build(Ratelimit.fixedWindow(10, "1 h"), { enableProtection: true, redis: client });
    const prefix = (ratelimit as unknown as { prefix: string }).prefix;
    await client.set(`${prefix}:ipDenyListStatus`, "disabled");
    await client.sadd(`${prefix}:denyList:all`, "bad-user", "198.51.100.9", "evilbot", "XX");
    expect((await ratelimit.limit("good", { ip: "203.0.113.1", country: "DE" })).success).toBe(true);
    for (const [id, req, value] of [
      ["bad-user", {}, "bad-user"],
      ["u1", { ip: "198.51.100.9" }, "198.51.100.9"],
      ["u2", { userAgent: "evilbot" }, "evilbot"],
      ["u3", { country: "XX" }, "XX"],
    ] as const) {
      expect(await ratelimit.limit(id, req)).toMatchObject({
        success: false,
        remaining: 0,
        reason: "denyList",
        deniedValue: value,
      });
    }
    await expect(ratelimit.blockUntilReady("bad-user", 1000)).rejects.toThrow(/deny list/);
  });
});

describe("IpDenyList", () => {
  it("disableIpDenyList takes the IP list out of the deny list, keeps the values denied by hand", async () => {
    const client = redis();
    const prefix = uniquePrefix("ipdeny");
    await client.sadd(`${prefix}:denyList:ipDenyList`, "198.51.100.1", "198.51.100.2");
    await client.sadd(`${prefix}:denyList:all`, "198.51.100.1", "198.51.100.2", "bad-user");
    await IpDenyList.disableIpDenyList(client, prefix);
    expect(await client.smembers(`${prefix}:denyList:all`)).toEqual(["bad-user"]);
    expect(await client.exists(`${prefix}:denyList:ipDenyList`)).toBe(0);
    expect(await client.get(`${prefix}:ipDenyListStatus`)).toBe("disabled");
  });

  it("updateIpDenyList refuses a threshold outside 1-8 with ThresholdError, before any request", async () => {
    await expect(IpDenyList.updateIpDenyList(redis(), "p", 9)).rejects.toBeInstanceOf(
      IpDenyList.ThresholdError,
    );
  });
});

describe("Ratelimit: keys beside the peer's", () => {
  it("never under <prefix>:, and the default prefix is the peer's", async () => {
    const client = redis();
    const prefix = uniquePrefix("keys");
    const ratelimit = new Ratelimit({ redis: client, limiter: Ratelimit.fixedWindow(3, "1 h"), prefix });
    await ratelimit.limit("user:1");
    const keys = (await client.keys(`*${prefix}*`)) as string[];
    expect(keys.length).toBe(1);
    expect(keys[0]!.startsWith(`${prefix}:`)).toBe(false);
    expect(keys[0]!.startsWith(`el-upstash.${prefix}:`)).toBe(true);
  });
});

describe("a consumer of the peer's API, unchanged", () => {
  // What LangChain's UpstashRatelimitHandler does: a request limit checked before each LLM call, a
  // token limit checked with getRemaining() before it and charged with the tokens used after it.
  async function llmCall(
    requests: Ratelimit,
    tokens: Ratelimit,
    user: string,
    used: number,
  ): Promise<"served" | "too many requests" | "out of tokens"> {
    if (!(await requests.limit(user)).success) return "too many requests";
    if ((await tokens.getRemaining(user)).remaining <= 0) return "out of tokens";
    await tokens.limit(user, { rate: used });
    return "served";
  }

  it("stops a user once the tokens used pass the limit, charging the call that overshot", async () => {
    const requests = build(Ratelimit.fixedWindow(10, "1 h")).ratelimit;
    const tokens = build(Ratelimit.fixedWindow(1000, "1 h")).ratelimit;
    const seen = [];
    for (const used of [400, 400, 400, 400]) seen.push(await llmCall(requests, tokens, "user:7", used));
    expect(seen).toEqual(["served", "served", "served", "out of tokens"]);
    expect((await tokens.getRemaining("user:7")).remaining).toBe(0);
  });
});

describe("bounded in the isolate", () => {
  it("blocks at most 10,000 denied identifiers, the latest", async () => {
    // a rate above the bucket is denied with one peek each: 10,050 decisions, one pipeline
    const { ratelimit } = build(Ratelimit.tokenBucket(1, "1 h", 1));
    const ids = Array.from({ length: 10_050 }, (_, i) => `id:${i}`);
    const responses = await Promise.all(ids.map((id) => ratelimit.limit(id, { rate: 2 })));
    expect(responses.every((r) => !r.success && r.reason === undefined)).toBe(true);
    const blocked = (ratelimit as unknown as { blocked: Map<string, number> }).blocked;
    expect(blocked.size).toBe(10_000);
    expect(blocked.has("id:49")).toBe(false);
    expect(blocked.has("id:50")).toBe(true);
    expect(await ratelimit.limit("id:10049")).toMatchObject({ success: false, reason: "cacheBlock" });
  });
});
