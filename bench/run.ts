// `npm run bench`: every part against a private redis-server and bridge; writes BENCHMARKS.md and
// BENCHMARKS.svg. `npm run bench:smoke`: a few iterations of each part, no wrangler, writes nothing
// (unless given --out FILE). `--only lua,cpu` runs those parts (throughput, lua, memory, accuracy,
// tokens, edge, worker, cpu, overrides, analytics, regions, nested; accuracy includes tokens). A part marked
// `alone` runs in a process of its own: `node --import tsx bench/run.ts --part NAME [--smoke]` prints
// its result as JSON.
import { execFile } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import { basename, join } from "node:path";
import { promisify } from "node:util";
import { accuracy } from "./accuracy.js";
import { analytics } from "./analytics-cost.js";
import { renderChart } from "./chart.js";
import { cpu } from "./cpu.js";
import { edge, edgeSettings } from "./edge.js";
import { arg, type BenchEnv, log, type Part, startEnv } from "./harness.js";
import { ROOT } from "./load.js";
import { lua } from "./lua-cost.js";
import { memory } from "./memory.js";
import { nestedBudgets } from "./nested.js";
import { overrides } from "./overrides-cost.js";
import { regions } from "./regions.js";
import { type Results, renderReport } from "./report.js";
import { tokens } from "./settle.js";
import { throughput } from "./throughput.js";
import { worker } from "./worker.js";

/** In the order of their sections. */
const PARTS: Part[] = [
  throughput,
  lua,
  memory,
  accuracy,
  tokens,
  edge,
  worker,
  cpu,
  overrides,
  analytics,
  regions,
  nestedBudgets,
];
/** Whose goals head the report, in this order. */
const GOALS = ["edge", "lua", "accuracy", "cpu", "overrides", "analytics", "regions", "nested"];

const exec = promisify(execFile);
const smoke = process.argv.includes("--smoke");
const tag = Date.now().toString(36);

const child = arg("part");
if (child !== undefined) {
  const part = PARTS.find((p) => p.name === child)!;
  console.log(JSON.stringify(await part.run({ smoke, tag, env: undefined as unknown as BenchEnv })));
  process.exit(0); // a client's keep-alive sockets would hold the process open a while
}

const only = arg("only")?.split(",");
const want = (p: Part) =>
  !(smoke && p.fullOnly) && (!only || only.includes(p.name) || (p === tokens && only.includes("accuracy")));
const out = arg("out") ?? (smoke ? undefined : join(ROOT, "BENCHMARKS.md"));

/** A part's result, or why it failed; in a process of its own when it is marked so. */
async function measure(p: Part, env: BenchEnv): Promise<unknown> {
  try {
    if (!p.alone) return await p.run({ smoke, tag, env });
    log(`${p.name}: in a process of its own`);
    const a = [
      "--import",
      "tsx",
      join(ROOT, "bench", "run.ts"),
      "--part",
      p.name,
      ...(smoke ? ["--smoke"] : []),
    ];
    const { stdout } = await exec(process.execPath, a, { cwd: ROOT, maxBuffer: 1 << 24, timeout: 1_200_000 });
    return JSON.parse(stdout);
  } catch (error) {
    log(`${p.name} failed: ${(error as Error).stack}`);
    return `${p.name} failed: ${(error as Error).message.split("\n")[0]}`;
  }
}

async function versions(env: BenchEnv) {
  const git = (...a: string[]) =>
    exec("git", a, { cwd: ROOT }).then(
      (r) => r.stdout.trim(),
      () => "",
    );
  const pkg = (name: string): string =>
    JSON.parse(readFileSync(join(ROOT, "node_modules", name, "package.json"), "utf8")).version;
  const dirty = (await git("status", "--porcelain", "src", "lua")) ? " + uncommitted changes" : "";
  return {
    commit: `${await git("rev-parse", "--short", "HEAD")}${dirty}`,
    machine: `${os.cpus().length} × ${os.cpus()[0]?.model ?? "?"}, ${Math.round(os.totalmem() / 2 ** 30)} GiB`,
    // other work on the machine while the run starts (the benchmark shares it)
    load: os.loadavg()[0]!.toFixed(1),
    node: process.version,
    redis: /redis_version:(\S+)/.exec(String(await env.call("INFO", "server")))?.[1] ?? "?",
    ratelimit: pkg("@upstash/ratelimit"),
    redisClient: pkg("@upstash/redis"),
  };
}

const t0 = performance.now();
const startedAt = new Date().toISOString().slice(0, 16).replace("T", " ");
const env = await startEnv(edgeSettings(smoke).delays);
const results: Results = { smoke, startedAt, seconds: 0, versions: await versions(env), parts: {} };
try {
  for (const p of PARTS.filter(want)) results.parts[p.name] = await measure(p, env);
} finally {
  await env.close();
}
results.seconds = (performance.now() - t0) / 1000;
const chartFile = out ? out.replace(/\.md$/, ".svg") : "BENCHMARKS.svg";
const report = renderReport(results, PARTS, GOALS, basename(chartFile));
const rows = <T>(name: string) => (Array.isArray(results.parts[name]) ? (results.parts[name] as T[]) : []);
const chart = renderChart(rows("throughput"), rows("edge"));
if (out) {
  writeFileSync(out, report);
  writeFileSync(chartFile, chart);
  log(`wrote ${out} and ${chartFile} in ${results.seconds.toFixed(0)} s`);
} else {
  log(
    `smoke run done in ${results.seconds.toFixed(1)} s: ${report.length} characters of report, not written`,
  );
}
process.exit(0); // keep-alive sockets would hold the process open a while
