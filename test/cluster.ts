// A real 3-node Redis Cluster for tests: three redis-server nodes sharing the 16384 slots, and a call
// that routes a command as a cluster client does (to any node, then where a MOVED points).
import net from "node:net";
import { type RedisServer, startRedisServer } from "../src/bridge/index.js";
import { connectRedis, type RedisConnection, RedisError, type Reply } from "../src/bridge/resp.js";

export interface ClusterNode {
  server: RedisServer;
  conn: RedisConnection;
}

export interface Cluster {
  readonly nodes: readonly ClusterNode[];
  /** Sends a command to the first node, then where a MOVED points (3 hops at most). */
  call(command: readonly (string | number)[]): Promise<Reply>;
  /** Closes every connection and stops every node. */
  stop(): Promise<void>;
}

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

/** Starts three nodes, gives each a third of the slots, and resolves once every node says cluster_state:ok. */
export async function startCluster(): Promise<Cluster> {
  const nodes: ClusterNode[] = [];
  const stop = async () => {
    for (const node of nodes.splice(0)) {
      await node.conn.close();
      await node.server.stop();
    }
  };
  try {
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
      try {
        nodes.push({ server, conn: await connectRedis(server.url) });
      } catch (error) {
        await server.stop();
        throw error;
      }
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
  } catch (error) {
    await stop();
    throw error;
  }
  return {
    nodes,
    async call(command) {
      let node = nodes[0]!;
      for (let hop = 0; hop < 3; hop++) {
        const [reply] = await node.conn.send([command]);
        const moved = reply instanceof RedisError ? /^MOVED \d+ [\d.]+:(\d+)/.exec(reply.message) : null;
        if (!moved) return reply!;
        node = nodes.find((n) => n.server.port === Number(moved[1]))!;
      }
      throw new Error("too many redirects");
    },
    stop,
  };
}

/** A REST endpoint in front of a cluster: what a Limiter with `cluster: true` is given. */
export interface ClusterRest {
  readonly url: string;
  readonly token: string;
  /** Commands it has routed, by name (EVALSHA, EVAL, DEL, ...). */
  readonly commands: Map<string, number>;
  /** HTTP requests it has answered. */
  requests: number;
  close(): Promise<void>;
}

/**
 * The Upstash REST protocol's `/pipeline` in front of `cluster`, each command routed as a cluster
 * client routes it (to a node, then where a MOVED points): a command whose keys span slots gets the
 * node's CROSSSLOT error, as a Redis Cluster behind a REST proxy answers it.
 */
export async function clusterRest(cluster: Cluster, token = "cluster-token"): Promise<ClusterRest> {
  const { createServer } = await import("node:http");
  const plain = (reply: Reply | undefined): unknown => {
    if (reply instanceof Uint8Array) return Buffer.from(reply).toString("utf8");
    if (Array.isArray(reply)) return reply.map(plain);
    return reply;
  };
  const rest: ClusterRest = {
    url: "",
    token,
    commands: new Map(),
    requests: 0,
    close: async () => {},
  };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", async () => {
      rest.requests += 1;
      if (req.headers.authorization !== `Bearer ${token}`) {
        res.writeHead(401).end(JSON.stringify({ error: "Unauthorized" }));
        return;
      }
      const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as
        | (string | number)[][]
        | (string | number)[];
      const pipeline = req.url === "/pipeline";
      const commands = (pipeline ? body : [body]) as (string | number)[][];
      const replies = [];
      for (const command of commands) {
        const name = String(command[0]).toUpperCase();
        rest.commands.set(name, (rest.commands.get(name) ?? 0) + 1);
        const reply = await cluster.call(command.map(String));
        replies.push(reply instanceof RedisError ? { error: reply.message } : { result: plain(reply) });
      }
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(pipeline ? replies : replies[0]));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address() as { port: number };
  Object.assign(rest, {
    url: `http://127.0.0.1:${address.port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  });
  return rest;
}
