// MultiRegionRatelimit over three databases (three Redis databases of one server, each behind a bridge
// of its own): home holds the count, the regions' pools hand out only units home counted, so all the
// regions together never admit more than the limit (the peer's may admit a limit per region).
import { Redis } from "@upstash/redis";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { MultiRegionRatelimit } from "../../../src/adapters/upstash/index.js";
import { type Bridge, startBridge } from "../../../src/bridge/index.js";
import { startCutHop } from "../../cut-hop.js";
import { failOnUnhandledRejections } from "../../own-bridge.js";
import { uniquePrefix } from "../../support.js";

failOnUnhandledRejections();

const bridges: Bridge[] = [];
beforeAll(async () => {
  for (const db of [0, 1, 2]) {
    bridges.push(
      await startBridge({ redisUrl: `${inject("redisUrl")}/${db}`, port: 0, token: inject("bridgeToken") }),
    );
  }
});
afterAll(async () => {
  for (const bridge of bridges) await bridge.close();
});

const databases = () =>
  bridges.map(
    (bridge) => new Redis({ url: bridge.url, token: inject("bridgeToken"), enableTelemetry: false }),
  );

describe("MultiRegionRatelimit over three databases", () => {
  it("one isolate: exactly the limit, and the count only at home", async () => {
    const redis = databases();
    const prefix = uniquePrefix("multi");
    const ratelimit = new MultiRegionRatelimit({
      redis,
      prefix,
      limiter: MultiRegionRatelimit.fixedWindow(20, "1 w"),
      timeout: 15_000,
    });
    let admitted = 0;
    for (let i = 0; i < 30; i++) if ((await ratelimit.limit("user:1")).success) admitted += 1;
    expect(admitted).toBe(20);
    expect((await ratelimit.getRemaining("user:1")).remaining).toBe(0);
    // the counted state is home's: no window key in the other databases
    for (const [index, client] of redis.entries()) {
      const keys = (await client.keys(`el-upstash.${prefix}:*`)) as string[];
      const windows = keys.filter((key) => !key.includes(":pool."));
      expect(windows.length, `database ${index}`).toBe(index === 0 ? 1 : 0);
    }
    await ratelimit.resetUsedTokens("user:1");
    expect((await ratelimit.limit("user:1")).remaining).toBe(19);
  });

  it("a refund goes home in one request: refunds in sequence, then past what was charged", async () => {
    const ratelimit = new MultiRegionRatelimit({
      redis: databases(),
      prefix: uniquePrefix("multi-refund"),
      limiter: MultiRegionRatelimit.fixedWindow(10, "1 w"),
      timeout: 15_000,
    });
    expect(await ratelimit.limit("user:r", { rate: 8 })).toMatchObject({ success: true, remaining: 2 });
    expect(await ratelimit.limit("user:r", { rate: -2 })).toMatchObject({ success: true, remaining: 4 });
    expect(await ratelimit.limit("user:r", { rate: -3 })).toMatchObject({ success: true, remaining: 7 });
    expect((await ratelimit.getRemaining("user:r")).remaining).toBe(7);
    expect(await ratelimit.limit("user:r", { rate: -10 })).toMatchObject({ success: true, remaining: 17 });
    expect((await ratelimit.getRemaining("user:r")).remaining).toBe(17);
  });

  it("three isolates, each on the same array: never more than the limit in all", async () => {
    const prefix = uniquePrefix("multi-three");
    const isolates = [0, 1, 2].map(
      () =>
        new MultiRegionRatelimit({
          redis: databases(),
          prefix,
          limiter: MultiRegionRatelimit.slidingWindow(20, "1 w"),
          timeout: 15_000,
        }),
    );
    let admitted = 0;
    for (let i = 0; i < 20; i++) {
      for (const isolate of isolates) if ((await isolate.limit("user:2")).success) admitted += 1;
    }
    expect(admitted).toBeLessThanOrEqual(20);
    // units parked in the other regions' pools (a tenth of the limit each) are all that may be missing
    expect(admitted).toBeGreaterThanOrEqual(16);
  });
});

describe("MultiRegionRatelimit: the region is the fastest database", () => {
  it("with home 40 ms away, decisions come from the nearest database's pool, never past the limit", async () => {
    const hop = await startCutHop(bridges[0]!.url);
    try {
      hop.delay = 40;
      const token = inject("bridgeToken");
      const redis = [hop.url, bridges[1]!.url, bridges[2]!.url].map(
        (url) => new Redis({ url, token, enableTelemetry: false }),
      );
      const prefix = uniquePrefix("multi-near");
      const ratelimit = new MultiRegionRatelimit({
        redis,
        prefix,
        limiter: MultiRegionRatelimit.fixedWindow(20, "1 w"),
        timeout: 15_000,
      });
      const chosen = (ratelimit as unknown as { chosen: { region?: unknown } }).chosen;
      const deadline = Date.now() + 10_000;
      while (chosen.region === undefined && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      expect([redis[1], redis[2]]).toContain(chosen.region);
      let admitted = 0;
      for (let i = 0; i < 30; i++) if ((await ratelimit.limit("user:3")).success) admitted += 1;
      expect(admitted).toBe(20);
      // the region's pool holds the identifier's units; home was asked for fewer than the decisions
      const region = chosen.region as Redis;
      expect(((await region.keys(`el-upstash.${prefix}:*pool*`)) as string[]).length).toBe(1);
      expect(hop.requests).toBeLessThan(30);
    } finally {
      await hop.close();
    }
  });
});
