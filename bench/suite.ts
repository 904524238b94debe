// Runs every part of the benchmark in one process against one redis-server and one bridge, and returns
// the results. bench/run.ts is the command line; test/bench-smoke.test.ts runs the smoke mode.
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { type AccuracyRow, runAccuracy } from "./accuracy.js";
import { type CeilingRow, runCeiling } from "./ceiling.js";
import { type CostRow, type FloodRow, type LuaRow, runCost, runFlood, runLuaCost } from "./cost.js";
import { startEnv } from "./env.js";
import type { HotRow } from "./hotpath.js";
import { ROOT } from "./load.js";
import { type MemoryRow, runMemory } from "./memory.js";
import { runThroughput, type ThroughputConfig, type ThroughputRow } from "./throughput.js";
import { log } from "./util.js";
import { runWorker, type WorkerResult } from "./worker.js";

const exec = promisify(execFile);

export interface BenchOptions {
  smoke: boolean;
  /** Run part 8 (wrangler dev); off in smoke mode. */
  worker: boolean;
}

export interface BenchResults {
  smoke: boolean;
  startedAt: Date;
  seconds: number;
  throughputConfig: ThroughputConfig;
  throughput: ThroughputRow[];
  cost: CostRow[];
  costIds: number;
  flood: FloodRow[];
  floodTotal: number;
  memory: MemoryRow[];
  lua: LuaRow[];
  luaDecisions: number;
  accuracy: AccuracyRow[];
  accuracyScale: number;
  ceiling: CeilingRow[];
  ceilingN: number;
  worker: WorkerResult;
  workerConfig: { cannonSeconds: number; sequentialMs: number };
  hotpath: HotRow[];
  versions: Record<string, string>;
}

/** Per part, full and smoke settings. */
function settings(smoke: boolean) {
  return {
    throughput: smoke
      ? { concurrencies: [1, 64], rounds: 1, sampleMs: 100, warmupMs: 50, ids: 1000 }
      : { concurrencies: [1, 64], rounds: 5, sampleMs: 1200, warmupMs: 500, ids: 1000 },
    costIds: smoke ? 5 : 300,
    floodTotal: smoke ? 200 : 10_000,
    memoryLimits: smoke ? [20] : [100, 10_000],
    luaDecisions: smoke ? 200 : 5000,
    accuracyScale: smoke ? 0.2 : 1,
    ceiling: smoke ? { n: 2000, sampleMs: 100 } : { n: 50_000, sampleMs: 1500 },
    worker: smoke ? { cannonSeconds: 1, sequentialMs: 300 } : { cannonSeconds: 10, sequentialMs: 3000 },
  };
}

export async function runBench(options: BenchOptions): Promise<BenchResults> {
  const s = settings(options.smoke);
  const startedAt = new Date();
  const t0 = performance.now();
  const tag = `${Date.now().toString(36)}`;
  const env = await startEnv();
  try {
    const versions = await collectVersions(env.call);
    const throughput = await runThroughput(env, s.throughput, tag);
    const cost = await runCost(env, tag, s.costIds);
    const flood = await runFlood(env, tag, s.floodTotal);
    const lua = await runLuaCost(env, tag, s.luaDecisions);
    await env.call("FLUSHALL"); // the memory part scans the keyspace: keep it small
    const memory = await runMemory(env, tag, s.memoryLimits);
    const accuracy = await runAccuracy(env, tag, s.accuracyScale);
    const ceiling = await runCeiling(env, s.ceiling);
    const worker: WorkerResult = options.worker
      ? await runWorker(env, s.worker)
      : { status: "pending", reason: "not run (smoke mode or --no-worker)", rows: [] };
    const hotpath = await runHotpath(options.smoke);
    return {
      smoke: options.smoke,
      startedAt,
      seconds: (performance.now() - t0) / 1000,
      throughputConfig: s.throughput,
      throughput,
      cost,
      costIds: s.costIds,
      flood,
      floodTotal: s.floodTotal,
      memory,
      lua,
      luaDecisions: s.luaDecisions,
      accuracy,
      accuracyScale: s.accuracyScale,
      ceiling,
      ceilingN: s.ceiling.n,
      worker,
      workerConfig: s.worker,
      hotpath,
      versions,
    };
  } finally {
    await env.close();
  }
}

/** Part 9 runs in a child process: it needs --expose-gc and a young generation large enough to measure. */
async function runHotpath(smoke: boolean): Promise<HotRow[]> {
  log("hot path (child process)");
  const args = [
    "--expose-gc",
    "--max-semi-space-size=128",
    "--import",
    "tsx",
    join(ROOT, "bench", "hotpath.ts"),
  ];
  if (smoke) args.push("--smoke");
  const { stdout } = await exec(process.execPath, args, { cwd: ROOT, maxBuffer: 1 << 22 });
  return (JSON.parse(stdout.trim().split("\n").pop()!) as { rows: HotRow[] }).rows;
}

async function collectVersions(
  call: (...args: string[]) => Promise<unknown>,
): Promise<Record<string, string>> {
  const { readFileSync } = await import("node:fs");
  const version = (file: string) => (JSON.parse(readFileSync(file, "utf8")) as { version: string }).version;
  const pkg = (name: string) => version(join(ROOT, "node_modules", name, "package.json"));
  const info = String(await call("INFO", "server"));
  const os = await import("node:os");
  const cpu = os.cpus()[0]?.model ?? "unknown";
  const git = async (...args: string[]) =>
    (await exec("git", args, { cwd: ROOT }).catch(() => ({ stdout: "" }))).stdout.trim();
  const head = (await git("rev-parse", "--short", "HEAD")) || "unknown";
  const dirty = (await git("status", "--porcelain")) !== "";
  return {
    commit: `${head}${dirty ? " + uncommitted changes" : ""}`,
    node: process.version,
    redis: /redis_version:([^\r\n]+)/.exec(info)?.[1] ?? "unknown",
    edgelimit: version(join(ROOT, "package.json")),
    "@upstash/ratelimit": pkg("@upstash/ratelimit"),
    "@upstash/redis": pkg("@upstash/redis"),
    wrangler: pkg("wrangler"),
    autocannon: pkg("autocannon"),
    typescript: pkg("typescript"),
    cpu,
    cores: String(os.cpus().length),
    memory: `${Math.round(os.totalmem() / 2 ** 30)} GiB`,
    os: `${os.type()} ${os.release()}`,
  };
}
