// The multi-rule script on a real 3-node Redis Cluster: every key of one decision shares one hash tag,
// so the cluster runs it (after at most one MOVED redirect) instead of refusing it with CROSSSLOT.
import net from "node:net";
import { Redis } from "@upstash/redis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  connectRedis,
  type RedisConnection,
  RedisError,
  type RedisServer,
  type Reply,
  startRedisServer,
} from "../../src/bridge/index.js";
import { SCRIPT } from "../../src/engine/generated/scripts.js";
import { fixedWindow, gcra, Limiter, slidingLog, slidingWindow, tokenBucket } from "../../src/index.js";
import { T0 } from "../support.js";

interface Node {
  server: RedisServer;
  conn: RedisConnection;
}
let nodes: Node[] = [];

function isFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = net.createServer();
    probe.once("error", () => resolve(false));
    probe.listen(port, "127.0.0.1", () => probe.close(() => resolve(true)));
  });
}

/** A port whose cluster bus port (port + 10000) is free too. */
async function clusterPort(): Promise<number> {
  for (;;) {
    const port = 20_000 + Math.floor(Math.random() * 20_000);
    if ((await isFree(port)) && (await isFree(port + 10_000))) return port;
  }
}

beforeAll(async () => {
  for (let i = 0; i < 3; i++) {
    const server = await startRedisServer({
      port: await clusterPort(),
      args: [
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        "5000",
      ],
    });
    nodes.push({ server, conn: await connectRedis(server.url) });
  }
  const ranges = [
    [0, 5460],
    [5461, 10922],
    [10923, 16383],
  ];
  for (const [i, node] of nodes.entries()) await node.conn.call("CLUSTER", "ADDSLOTSRANGE", ...ranges[i]!);
  for (const node of nodes.slice(1))
    await nodes[0]!.conn.call("CLUSTER", "MEET", "127.0.0.1", node.server.port);
  const deadline = Date.now() + 20_000;
  for (;;) {
    const infos = await Promise.all(nodes.map((node) => node.conn.call("CLUSTER", "INFO")));
    if (infos.every((info) => String(info).includes("cluster_state:ok"))) break;
    if (Date.now() > deadline) throw new Error(`the cluster did not form: ${String(infos[0])}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}, 30_000);

afterAll(async () => {
  for (const node of nodes) {
    await node.conn.close();
    await node.server.stop();
  }
  nodes = [];
});

/** Sends a command as a cluster client does: to any node, then where a MOVED points. */
async function clusterCall(args: (string | number)[]): Promise<Reply> {
  let node = nodes[0]!;
  for (let hop = 0; hop < 3; hop++) {
    const [reply] = await node.conn.send([args]);
    const moved = reply instanceof RedisError ? /^MOVED \d+ [\d.]+:(\d+)/.exec(reply.message) : null;
    if (!moved) return reply!;
    node = nodes.find((n) => n.server.port === Number(moved[1]))!;
  }
  throw new Error("too many redirects");
}

const limiter = new Limiter({
  redis: new Redis({ url: "http://127.0.0.1:1", token: "unused" }),
  prefix: "cluster",
  rules: {
    burst: gcra({ limit: 10, period: "1s", burst: 5 }),
    bucket: tokenBucket({ capacity: 5, refillRate: 1 }),
    minute: fixedWindow({ limit: 100, window: "1m" }),
    sliding: slidingWindow({ limit: 100, window: "1m" }),
    log: slidingLog({ limit: 100, window: "1m" }),
  },
});
const ruleArgs = limiter.rules.flatMap((rule) => rule.args);
const decide = (keys: string[], cost: number) =>
  clusterCall(["EVAL", SCRIPT, keys.length, ...keys, T0, cost, ...ruleArgs]);

describe("on a 3-node Redis Cluster", () => {
  it("runs one decision over five rules for any identifier, all or nothing", async () => {
    for (const id of ["user:42", "", "{a}", "}{", "\u{1F600}", "x".repeat(10_000)]) {
      expect(await decide(limiter.keys(id), 3)).toEqual([
        1,
        2,
        T0 + 300,
        0,
        1,
        2,
        T0 + 3000,
        0,
        1,
        97,
        T0 - (T0 % 60_000) + 60_000,
        0,
        1,
        97,
        T0 - (T0 % 60_000) + 120_000,
        0,
        1,
        97,
        T0 + 60_000,
        0,
      ]);
      // 3 more exceed the burst and the bucket: denied, and no rule is charged
      const denied = (await decide(limiter.keys(id), 3)) as number[];
      expect(denied.filter((_, i) => i % 4 === 0)).toEqual([0, 0, 1, 1, 1]);
      expect(denied.filter((_, i) => i % 4 === 1)).toEqual([2, 2, 97, 97, 97]);
    }
  });

  it("spreads identifiers over the nodes", async () => {
    const slots = await Promise.all(
      ["a", "b", "c", "d", "e", "f"].map((id) =>
        nodes[0]!.conn.call("CLUSTER", "KEYSLOT", limiter.keys(id)[0]!),
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
