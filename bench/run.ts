// `npm run bench`: every part against a private redis-server and bridge; writes BENCHMARKS.md and
// BENCHMARKS.svg. `npm run bench:smoke`: a few iterations of each part, no wrangler, writes nothing
// (unless given --out FILE). --only throughput,memory,accuracy,edge,worker,lua runs those parts.
import { execFile } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import { basename, join } from "node:path";
import { promisify } from "node:util";
import { type AccuracyRow, runAccuracy, SIM_T0 } from "./accuracy.js";
import { renderChart } from "./chart.js";
import { type EdgeRow, type EdgeSettings, runEdge } from "./edge.js";
import { startEnv } from "./env.js";
import { ROOT } from "./load.js";
import { type MemoryRow, runMemory } from "./memory.js";
import { renderReport } from "./report.js";
import { runThroughput, type ThroughputRow } from "./throughput.js";
import { log } from "./util.js";
import { runWorker, type WorkerResult } from "./worker.js";

const exec = promisify(execFile);
const args = process.argv.slice(2);
const smoke = args.includes("--smoke");
const outArg = args.indexOf("--out");
const only = args.includes("--only") ? args[args.indexOf("--only") + 1]!.split(",") : undefined;
const want = (part: string) => only === undefined || only.includes(part);
const out = outArg >= 0 ? args[outArg + 1]! : smoke ? undefined : join(ROOT, "BENCHMARKS.md");

const settings = {
  throughput: smoke ? { rounds: 1, sampleMs: 150 } : { rounds: 3, sampleMs: 1000 },
  memoryBig: smoke ? 200 : 10_000,
  accuracyMs: smoke ? 20_000 : 60_000,
  edge: (smoke
    ? {
        delays: [0, 5],
        seconds: { hot: 0.3, many: 0.2, flood: 0.2, isolates: 0.3 },
        isolates: [1, 4],
        manyIds: 100,
        isolatesDelay: 5,
      }
    : {
        delays: [0, 5, 20],
        seconds: { hot: 6, many: 4, flood: 2, isolates: 5 },
        isolates: [1, 4, 16],
        manyIds: 100,
        isolatesDelay: 20,
      }) as EdgeSettings,
  worker: { ms: 4000 },
};

export interface Results {
  smoke: boolean;
  startedAt: string;
  seconds: number;
  settings: typeof settings;
  versions: Record<string, string>;
  throughput: ThroughputRow[];
  memory: MemoryRow[];
  accuracy: AccuracyRow[];
  edge: EdgeRow[];
  worker?: WorkerResult;
  /** Markdown printed by bench/lua-cost.ts (redis-benchmark, interleaved against the peer), when it exists. */
  lua?: string;
}

const t0 = performance.now();
const startedAt = new Date().toISOString().slice(0, 16).replace("T", " ");
const tag = Date.now().toString(36);
const env = await startEnv(settings.edge.delays);
let results: Results;
try {
  const git = (...a: string[]) =>
    exec("git", a, { cwd: ROOT }).then(
      (r) => r.stdout.trim(),
      () => "",
    );
  const pkg = (name: string) =>
    JSON.parse(readFileSync(join(ROOT, "node_modules", name, "package.json"), "utf8")).version;
  const versions = {
    commit: `${await git("rev-parse", "--short", "HEAD")}${(await git("status", "--porcelain", "src", "lua")) ? " + uncommitted changes" : ""}`,
    machine: `${os.cpus().length} × ${os.cpus()[0]?.model ?? "?"}, ${Math.round(os.totalmem() / 2 ** 30)} GiB`,
    node: process.version,
    redis: /redis_version:(\S+)/.exec(String(await env.call("INFO", "server")))?.[1] ?? "?",
    ratelimit: pkg("@upstash/ratelimit"),
    redis_client: pkg("@upstash/redis"),
  };
  const throughput = want("throughput") ? await runThroughput(env, settings.throughput, tag) : [];
  await env.call("FLUSHALL"); // the memory part scans the keyspace
  const memory = want("memory") ? await runMemory(env, tag, SIM_T0, settings.memoryBig) : [];
  const accuracy = want("accuracy") ? await runAccuracy(env, tag, settings.accuracyMs) : [];
  const edge = want("edge") ? await runEdge(env, settings.edge, tag) : [];
  const worker = smoke || !want("worker") ? undefined : await runWorker(env, settings.worker);
  const lua = want("lua") ? await luaCost() : undefined;
  results = {
    smoke,
    startedAt,
    seconds: (performance.now() - t0) / 1000,
    settings,
    versions,
    throughput,
    memory,
    accuracy,
    edge,
    worker,
    lua,
  };
} finally {
  await env.close();
}

/** bench/lua-cost.ts (the lean-script figures) runs on its own and prints Markdown. */
async function luaCost(): Promise<string | undefined> {
  const file = join(ROOT, "bench", "lua-cost.ts");
  if (!existsSync(file)) return undefined;
  log("lua cost: bench/lua-cost.ts");
  const a = ["--import", "tsx", file, ...(smoke ? ["--rounds", "1", "--ids", "200"] : [])];
  return exec(process.execPath, a, { cwd: ROOT, maxBuffer: 1 << 22, timeout: 300_000 }).then(
    (r) => r.stdout.trim(),
    (error: Error) => `**Pending:** bench/lua-cost.ts failed: ${error.message.split("\n")[0]}`,
  );
}

const chartFile = out ? out.replace(/\.md$/, ".svg") : "BENCHMARKS.svg";
const report = renderReport(results, basename(chartFile));
if (out) {
  writeFileSync(out, report);
  writeFileSync(chartFile, renderChart(results.throughput));
  log(`wrote ${out} and ${chartFile} in ${results.seconds.toFixed(0)} s`);
} else {
  renderChart(results.throughput);
  log(
    `smoke run done in ${results.seconds.toFixed(1)} s: ${report.length} characters of report, not written`,
  );
}
process.exit(0); // keep-alive sockets would hold the process open a while
