// `npm run bench`: every part against a private redis-server and bridge; writes BENCHMARKS.md and
// BENCHMARKS.svg. `npm run bench:smoke`: a few iterations of each part, no wrangler, writes nothing
// (unless given --out FILE). --only throughput,memory,accuracy,edge,worker,lua,cpu,overrides,analytics,regions
// runs those parts (tokens: only part 4's tokens per minute).
import { execFile } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import { basename, join } from "node:path";
import { promisify } from "node:util";
import { runAccuracy, SIM_T0 } from "./accuracy.js";
import { renderChart } from "./chart.js";
import type { CpuResult } from "./cpu.js";
import { type EdgeSettings, runEdge } from "./edge.js";
import { type BenchEnv, startEnv } from "./env.js";
import { ROOT } from "./load.js";
import { runMemory } from "./memory.js";
import { type RegionSettings, runRegions } from "./regions.js";
import { renderReport } from "./report.js";
import { runTokens } from "./settle.js";
import { runThroughput } from "./throughput.js";
import { log } from "./util.js";
import { runWorker } from "./worker.js";

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
  tokensMs: smoke ? 60_000 : 180_000,
  edge: {
    delays: smoke ? [0, 5] : [0, 5, 20],
    seconds: smoke
      ? { hot: 0.3, many: 0.2, flood: 0.2, isolates: 0.3 }
      : { hot: 6, many: 8, flood: 2, isolates: 6 },
    manyIds: 40,
    isolates: smoke ? [1, 4] : [1, 4, 16],
    isolatesDelay: smoke ? 5 : 20,
  } satisfies EdgeSettings,
  worker: { ms: 4000 },
  regions: {
    seconds: smoke ? 2 : 15,
    rate: 60,
    ids: 200,
    zipf: 1.1,
    hotShare: 0.25,
  } satisfies RegionSettings,
};

const t0 = performance.now();
const startedAt = new Date().toISOString().slice(0, 16).replace("T", " ");
const tag = Date.now().toString(36);

async function collect(env: BenchEnv) {
  return {
    smoke,
    startedAt,
    settings,
    versions: await versions(env),
    throughput: want("throughput") ? await runThroughput(env, settings.throughput, tag) : [],
    // FLUSHALL first: the memory part scans the keyspace
    memory: want("memory")
      ? await env.call("FLUSHALL").then(() => runMemory(env, tag, SIM_T0, settings.memoryBig))
      : [],
    accuracy: want("accuracy") ? await runAccuracy(env, tag, settings.accuracyMs) : [],
    /** Part 4's tokens per minute (bench/settle.ts): a fixed cost per request, or reserve then settle. */
    tokens: want("accuracy") || want("tokens") ? await runTokens(env, tag, settings.tokensMs) : [],
    edge: want("edge") ? await runEdge(env, settings.edge, tag) : [],
    worker: smoke || !want("worker") ? undefined : await runWorker(env, settings.worker),
    /** Markdown printed by bench/lua-cost.ts, when it exists. */
    lua: want("lua") ? await luaPart("lua-cost.ts", ["--rounds", "1", "--ids", "200"]) : undefined,
    /** Markdown printed by bench/lua-redis-benchmark.ts (the same figures, the way redis-benchmark takes them). */
    luaRedisBenchmark: want("lua")
      ? await luaPart("lua-redis-benchmark.ts", ["--rounds", "1", "--requests", "10000"])
      : undefined,
    /** bench/cpu.ts: client CPU µs per decision, or why it is missing. */
    cpu: want("cpu") ? await cpuPart() : undefined,
    /** Markdown printed by bench/overrides-cost.ts: overrides on beside the peer's dynamicLimits. */
    overrides: want("overrides")
      ? await luaPart("overrides-cost.ts", ["--rounds", "1", "--ids", "200"])
      : undefined,
    /** Markdown printed by bench/analytics-cost.ts: commands and requests with analytics on and off, beside the peer's. */
    analytics: want("analytics") ? await luaPart("analytics-cost.ts", []) : undefined,
    /** Three regions, each its own database, with delay proxies (bench/regions.ts). */
    regions: want("regions") ? await runRegions(settings.regions, tag) : [],
  };
}
export type Results = Awaited<ReturnType<typeof collect>> & { seconds: number };

async function versions(env: BenchEnv) {
  const git = (...a: string[]) =>
    exec("git", a, { cwd: ROOT }).then(
      (r) => r.stdout.trim(),
      () => "",
    );
  const pkg = (name: string) =>
    JSON.parse(readFileSync(join(ROOT, "node_modules", name, "package.json"), "utf8")).version;
  const dirty = (await git("status", "--porcelain", "src", "lua")) ? " + uncommitted changes" : "";
  return {
    commit: `${await git("rev-parse", "--short", "HEAD")}${dirty}`,
    machine: `${os.cpus().length} × ${os.cpus()[0]?.model ?? "?"}, ${Math.round(os.totalmem() / 2 ** 30)} GiB`,
    // other work on the machine while the run starts (the benchmark shares it)
    load: os.loadavg()[0]!.toFixed(1),
    node: process.version,
    redis: /redis_version:(\S+)/.exec(String(await env.call("INFO", "server")))?.[1] ?? "?",
    ratelimit: pkg("@upstash/ratelimit") as string,
    redisClient: pkg("@upstash/redis") as string,
  };
}

/** The lean-script figures (bench/lua-cost.ts, bench/lua-redis-benchmark.ts) run on their own and print Markdown. */
async function luaPart(name: string, smokeArgs: string[]): Promise<string | undefined> {
  const file = join(ROOT, "bench", name);
  if (!existsSync(file)) return undefined;
  log(`lua cost: bench/${name}`);
  const a = ["--import", "tsx", file, ...(smoke ? smokeArgs : [])];
  return exec(process.execPath, a, { cwd: ROOT, maxBuffer: 1 << 22, timeout: 300_000 }).then(
    (r) => r.stdout.trim(),
    (error: Error) => `**Pending:** bench/${name} failed: ${error.message.split("\n")[0]}`,
  );
}

/** bench/cpu.ts in a process of its own: only the decisions it times run there while it measures. */
async function cpuPart(): Promise<CpuResult | string> {
  log("client cpu: bench/cpu.ts");
  const a = ["--import", "tsx", join(ROOT, "bench", "cpu.ts"), "--json", ...(smoke ? ["--smoke"] : [])];
  return exec(process.execPath, a, { cwd: ROOT, maxBuffer: 1 << 22, timeout: 600_000 }).then(
    (r) => JSON.parse(r.stdout) as CpuResult,
    (error: Error) => `bench/cpu.ts failed: ${error.message.split("\n")[0]}`,
  );
}

const env = await startEnv(settings.edge.delays);
let results: Results;
try {
  results = { ...(await collect(env)), seconds: (performance.now() - t0) / 1000 };
} finally {
  await env.close();
}
const chartFile = out ? out.replace(/\.md$/, ".svg") : "BENCHMARKS.svg";
const report = renderReport(results, basename(chartFile));
if (out) {
  writeFileSync(out, report);
  writeFileSync(chartFile, renderChart(results.throughput, results.edge));
  log(`wrote ${out} and ${chartFile} in ${results.seconds.toFixed(0)} s`);
} else {
  renderChart(results.throughput, results.edge);
  log(
    `smoke run done in ${results.seconds.toFixed(1)} s: ${report.length} characters of report, not written`,
  );
}
process.exit(0); // keep-alive sockets would hold the process open a while
