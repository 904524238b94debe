// The multi-rule script on a real 3-node Redis Cluster: every key of one decision shares one hash tag,
// so the cluster runs it (after at most one MOVED redirect) instead of refusing it with CROSSSLOT.
import { Redis } from "@upstash/redis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisError } from "../../src/bridge/resp.js";
import { SCRIPTS } from "../../src/engine/generated/scripts.js";
import { RuleKeys } from "../../src/engine/keys.js";
import { limiterArgs } from "../../src/engine/scripts/limiter.js";
import { fixedWindow, gcra, Limiter, slidingLog, slidingWindow, tokenBucket } from "../../src/index.js";
import { type Cluster, startCluster } from "../cluster.js";
import { T0 } from "../support.js";

let cluster: Cluster;
beforeAll(async () => {
  cluster = await startCluster();
}, 30_000);
afterAll(async () => {
  await cluster?.stop();
});

const limiter = new Limiter({
  redis: new Redis({ url: "http://127.0.0.1:1", token: "unused" }),
  prefix: "cluster",
  rules: {
    // Keys that outlive the test in real time (T = 60 s), so a slow machine cannot expire them between calls.
    burst: gcra({ limit: 10, period: "10m", burst: 5 }),
    bucket: tokenBucket({ capacity: 5, refillRate: 1, interval: "1m" }),
    minute: fixedWindow({ limit: 100, window: "1m" }),
    sliding: slidingWindow({ limit: 100, window: "1m" }),
    log: slidingLog({ limit: 100, window: "1m" }),
  },
});
const decide = (keys: string[], cost: number) =>
  cluster.call(["EVAL", SCRIPTS.limiter.text, keys.length, ...keys, ...limiterArgs(limiter.rules, T0, cost)]);

describe("on a 3-node Redis Cluster", () => {
  it("runs one decision over five rules for any identifier, all or nothing", async () => {
    for (const id of ["user:42", "", "{a}", "}{", "\u{1F600}", "x".repeat(10_000)]) {
      // per rule: allowed, remaining, resetAt, retryAfter, where the units were counted
      const minute = T0 - (T0 % 60_000);
      expect(await decide(limiter.keys(id), 3)).toEqual([
        ...[1, 2, T0 + 180_000, 0, T0 + 180_000],
        ...[1, 2, T0 + 180_000, 0, T0 + 180_000],
        ...[1, 97, minute + 60_000, 0, minute],
        ...[1, 97, minute + 120_000, 0, minute],
        ...[1, 97, T0 + 60_000, 0, T0],
      ]);
      // 3 more exceed the burst and the bucket: denied, and no rule is charged
      const denied = (await decide(limiter.keys(id), 3)) as number[];
      expect(denied.filter((_, i) => i % 5 === 0)).toEqual([0, 0, 1, 1, 1]);
      expect(denied.filter((_, i) => i % 5 === 1)).toEqual([2, 2, 97, 97, 97]);
    }
  });

  it("runs the regional pool script for any identifier, its key in the slot of the rule keys", async () => {
    const keys = new RuleKeys("cluster", limiter.rules);
    const snapshot = "1 2 3 4 5 6 7 8 9 10";
    // bulk strings come back as bytes from a raw connection
    const pool = async (key: string, ...args: string[]) =>
      ((await cluster.call(["EVAL", SCRIPTS.pool.text, 1, key, T0.toString(16), ...args])) as unknown[]).map(
        (item) => (Buffer.isBuffer(item) ? item.toString() : item),
      );
    for (const id of ["pool:42", "{b}", "}{{", "\u{1F601}", "y".repeat(10_000)]) {
      const key = keys.pool(id, "default");
      const slot = (k: string) => cluster.nodes[0]!.conn.call("CLUSTER", "KEYSLOT", k);
      expect(await slot(key)).toEqual(await slot(limiter.keys(id)[0]!));
      // a deposit of 7 units (ttl 5 s, max 500) reserved at T0, then a take of 3
      const reserved = `${T0} 7`;
      expect(
        await pool(key, "put", "5000", "500", "7", String(T0 + 5000), "0 0 0 0 0", snapshot, "1", reserved),
      ).toEqual([7, 0, "", 0, 0, 0]);
      expect(await pool(key, "take", "5000", "500", "3", "0")).toEqual([
        1,
        4,
        0,
        snapshot,
        0,
        "0 0 0 0 0",
        T0,
        0,
        T0 + 5000,
      ]);
    }
  });

  it("spreads identifiers over the nodes", async () => {
    const slots = await Promise.all(
      ["a", "b", "c", "d", "e", "f"].map((id) =>
        cluster.nodes[0]!.conn.call("CLUSTER", "KEYSLOT", limiter.keys(id)[0]!),
      ),
    );
    expect(new Set(slots.map((slot) => Math.floor(Number(slot) / 5461))).size).toBeGreaterThan(1);
  });

  it("would refuse keys of two identifiers in one call (the check above can fail)", async () => {
    const mixed = [limiter.keys("a")[0]!, ...limiter.keys("b").slice(1)];
    const reply = await decide(mixed, 1);
    expect(reply).toBeInstanceOf(RedisError);
    expect((reply as RedisError).message).toMatch(/^CROSSSLOT/);
  });
});
