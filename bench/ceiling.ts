// Part 7: ceilings. What this redis-server does with nothing in front of it (redis-benchmark: a trivial
// script, then each library's real script with the arguments it really sends), and what the bridge
// does with the cheapest possible commands through @upstash/redis (PING, a trivial EVALSHA).
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { ALGOS, type Algo, contestant, type Lib } from "./contestants.js";
import type { BenchEnv } from "./env.js";
import { bridgeScripts, generated } from "./load.js";
import { closedLoop, OPEN_POLICY } from "./throughput.js";
import { log, percentile } from "./util.js";

const exec = promisify(execFile);
const TRIVIAL = "return 1";
const ID = "CEILINGID";

export interface CeilingRow {
  what: string;
  how: string;
  concurrency: number;
  opsPerSec: number;
  p50: number;
  p99: number;
}

interface Captured {
  script?: string;
  sha?: string;
  keys: string[];
  args: string[];
}

/** The command one decision sends, captured with a recording stand-in for the Redis client. */
async function captureCommand(lib: Lib, algo: Algo): Promise<Captured> {
  const policy = algo === "slidingLog" ? { limit: 100_000, window: 60_000 } : OPEN_POLICY;
  const captured: Captured = { keys: [], args: [] };
  if (lib === "edgelimit") {
    const fake = {
      del: async () => 0,
      client: {
        request: async (req: { body?: unknown }) => {
          const [cmd] = req.body as string[][];
          const [, sha, numkeys, ...rest] = cmd!;
          const n = Number(numkeys);
          captured.sha = sha;
          captured.keys = rest.slice(0, n);
          captured.args = rest.slice(n);
          return [{ result: [1, 1, 1, 0] }];
        },
      },
    };
    const c = contestant(lib, algo, {
      redis: fake as never,
      prefix: `ceil-${lib}-${algo}`,
      policies: [policy],
      cache: "off",
    });
    await c.limit(ID);
    captured.script = generated.SCRIPT;
  } else {
    const fake = {
      evalsha: async () => {
        throw new Error("NOSCRIPT No matching script");
      },
      eval: async (script: string, keys: string[], args: unknown[]) => {
        captured.script = script;
        captured.keys = keys;
        captured.args = args.map(String);
        return algo === "tokenBucket" ? [1, 1, 1] : [1, 1];
      },
    };
    const c = contestant(lib, algo, {
      redis: fake as never,
      prefix: `ceil-${lib}-${algo}`,
      policies: [policy],
      cache: "off",
    });
    await c.limit(ID);
  }
  return captured;
}

async function redisBenchmark(
  port: number,
  n: number,
  clients: number,
  command: string[],
): Promise<{ rps: number; p50: number; p99: number }> {
  const { stdout } = await exec(
    "redis-benchmark",
    [
      "-h",
      "127.0.0.1",
      "-p",
      String(port),
      "-n",
      String(n),
      "-c",
      String(clients),
      "-P",
      "1",
      "-r",
      "1000",
      "--csv",
      ...command,
    ],
    {
      maxBuffer: 1 << 20,
    },
  );
  const line = stdout.trim().split("\n").pop()!;
  const cells = line.split('","').map((c) => c.replace(/"/g, ""));
  return { rps: Number(cells[1]), p50: Number(cells[4]), p99: Number(cells[6]) };
}

export async function runCeiling(env: BenchEnv, cfg: { n: number; sampleMs: number }): Promise<CeilingRow[]> {
  const rows: CeilingRow[] = [];
  const trivialSha = String(await env.call("SCRIPT", "LOAD", TRIVIAL));
  const haveRedisBenchmark = await exec("redis-benchmark", ["--version"]).then(
    () => true,
    () => false,
  );
  if (!haveRedisBenchmark) log("ceiling: redis-benchmark is not on PATH: its rows are skipped");
  if (haveRedisBenchmark) log("ceiling: redis-benchmark EVALSHA trivial");
  for (const clients of haveRedisBenchmark ? [64, 1] : []) {
    const r = await redisBenchmark(env.redisPort, clients === 1 ? Math.ceil(cfg.n / 5) : cfg.n, clients, [
      "EVALSHA",
      trivialSha,
      "0",
    ]);
    rows.push({
      what: `EVALSHA "${TRIVIAL}"`,
      how: "redis-benchmark, RESP, no pipelining (-P 1)",
      concurrency: clients,
      opsPerSec: r.rps,
      p50: r.p50,
      p99: r.p99,
    });
  }
  for (const lib of haveRedisBenchmark ? (["edgelimit", "upstash"] as const) : []) {
    for (const algo of ALGOS[lib]) {
      log(`ceiling: redis-benchmark ${lib} ${algo} script`);
      const cap = await captureCommand(lib, algo);
      const loaded = String(
        await env.call("SCRIPT", "LOAD", bridgeScripts.stripUnknownShebangFlags(cap.script!)),
      );
      const keys = cap.keys.map((k) => k.replace(ID, "__rand_int__"));
      const r = await redisBenchmark(env.redisPort, cfg.n, 64, [
        "EVALSHA",
        loaded,
        String(keys.length),
        ...keys,
        ...cap.args,
      ]);
      rows.push({
        what: `${lib === "edgelimit" ? "edgelimit" : "@upstash/ratelimit"} ${algo} script, allowed`,
        how: "redis-benchmark, its real arguments, 1000 ids (-r)",
        concurrency: 64,
        opsPerSec: r.rps,
        p50: r.p50,
        p99: r.p99,
      });
    }
  }
  const redis = env.client();
  for (const [what, op] of [
    ["PING", () => redis.ping()],
    [`EVALSHA "${TRIVIAL}"`, () => redis.evalsha(trivialSha, [], [])],
  ] as const) {
    for (const concurrency of [64, 1]) {
      log(`ceiling: bridge ${what} concurrency ${concurrency}`);
      await closedLoop(op, ["x"], concurrency, Math.min(300, cfg.sampleMs));
      const s = await closedLoop(op, ["x"], concurrency, cfg.sampleMs);
      const sorted = s.latencies.sort();
      rows.push({
        what,
        how: "@upstash/redis → bridge → Redis (auto-pipelined)",
        concurrency,
        opsPerSec: s.decisions / s.seconds,
        p50: percentile(sorted, 50),
        p99: percentile(sorted, 99),
      });
    }
  }
  return rows;
}
