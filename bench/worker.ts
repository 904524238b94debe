// Part 8: what the Worker adds in front of an origin. `wrangler dev` (local workerd) runs src/adapters/worker/index.ts
// with a config of two routes, one passing through (no route matches it: forwarded unlimited) and one
// limited (a limit far above the load, so every request is admitted and pays for one decision), in
// front of a local origin. autocannon drives 64 connections for a fixed time; a sequential fetch loop
// (one request at a time) measures latency at sub-millisecond resolution, which autocannon (whole
// milliseconds) cannot.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import autocannon from "autocannon";
import type { BenchEnv } from "./env.js";
import { ROOT } from "./load.js";
import { log, median, percentile } from "./util.js";

export interface WorkerRow {
  target: string;
  concurrency: number;
  reqPerSec: number;
  p50: number;
  p99: number;
  errors: number;
  non2xx: number;
  requests: number;
  /** HTTP requests the bridge received during the run (the Worker's Redis calls). */
  bridgeRequests?: number;
  /** Non-2xx status codes seen, as "code×count". */
  statuses?: string[];
}

export interface WorkerResult {
  status: "ok" | "pending";
  reason?: string;
  rows: WorkerRow[];
  config?: string;
}

const freePort = () =>
  new Promise<number>((resolve, reject) => {
    const s = http.createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address() as AddressInfo;
      s.close(() => resolve(port));
    });
  });

async function waitReady(url: string, child: ChildProcess, output: () => string, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (child.exitCode !== null)
      throw new Error(`wrangler dev exited (${child.exitCode}): ${output().slice(-1500)}`);
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(2000) });
      await res.arrayBuffer();
      if (res.status < 500) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`wrangler dev was not ready within ${ms} ms: ${output().slice(-1500)}`);
}

interface SequentialRun {
  latencies: number[];
  seconds: number;
  non2xx: number;
  errors: number;
}

/** One request at a time for `ms`: precise latencies. */
async function sequential(url: string, ms: number, headers: Record<string, string>): Promise<SequentialRun> {
  const latencies: number[] = [];
  let non2xx = 0;
  let errors = 0;
  const start = performance.now();
  while (performance.now() - start < ms) {
    const t0 = performance.now();
    try {
      const res = await fetch(url, { headers });
      await res.arrayBuffer();
      if (res.status < 200 || res.status > 299) non2xx++;
    } catch {
      errors++;
    }
    latencies.push(performance.now() - t0);
  }
  return { latencies, seconds: (performance.now() - start) / 1000, non2xx, errors };
}

async function cannon(url: string, seconds: number, headers: Record<string, string>): Promise<WorkerRow> {
  const r = await autocannon({ url, connections: 64, duration: seconds, headers });
  return {
    target: url,
    concurrency: 64,
    reqPerSec: r.requests.average,
    p50: r.latency.p50,
    p99: r.latency.p99,
    errors: r.errors,
    non2xx: r.non2xx,
    requests: r.requests.total,
    statuses: Object.entries(r.statusCodeStats ?? {})
      .filter(([code]) => !code.startsWith("2"))
      .map(([code, { count }]) => `${code}×${count}`),
  };
}

// The baseline: the smallest Worker that forwards to the origin, under the same wrangler dev, so the
// numbers separate what wrangler dev / workerd cost from what edgelimit's Worker adds.
const MINIMAL_WORKER = `export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    return fetch(env.ORIGIN + url.pathname + url.search, { method: request.method, headers: request.headers, redirect: "manual" });
  },
};
`;

interface Wrangler {
  base: string;
  stop(): Promise<void>;
}

async function startWrangler(dir: string, toml: string): Promise<Wrangler> {
  const port = await freePort();
  let output = "";
  const child = spawn(
    process.execPath,
    [
      join(ROOT, "node_modules", "wrangler", "bin", "wrangler.js"),
      "dev",
      "-c",
      join(dir, toml),
      "--ip",
      "127.0.0.1",
      "--port",
      String(port),
      "--persist-to",
      join(dir, `state-${toml}`),
      "--show-interactive-dev-session=false",
      "--log-level",
      "warn",
    ],
    {
      cwd: dir,
      env: {
        ...process.env,
        CLOUDFLARE_CF_FETCH_ENABLED: "false",
        WRANGLER_SEND_METRICS: "false",
        NO_COLOR: "1",
        CI: "1",
      },
      stdio: ["ignore", "pipe", "pipe"],
      // its own process group: stop() ends wrangler and the workerd it started, nothing else
      detached: true,
    },
  );
  const collect = (chunk: Buffer) => {
    output = (output + chunk.toString()).slice(-20_000);
  };
  child.stdout?.on("data", collect);
  child.stderr?.on("data", collect);
  const stop = async () => {
    const signal = (sig: NodeJS.Signals) => {
      try {
        process.kill(-child.pid!, sig);
      } catch {
        // already gone
      }
    };
    signal("SIGTERM");
    await new Promise((r) => setTimeout(r, 500));
    signal("SIGKILL");
  };
  const base = `http://127.0.0.1:${port}`;
  try {
    await waitReady(`${base}/open/ready`, child, () => output, 90_000);
  } catch (error) {
    await stop();
    throw error;
  }
  return { base, stop };
}

export async function runWorker(
  env: BenchEnv,
  cfg: { cannonSeconds: number; sequentialMs: number },
): Promise<WorkerResult> {
  const workerFile = join(ROOT, "src", "adapters", "worker", "index.ts");
  let repoToml: string;
  try {
    readFileSync(workerFile);
    repoToml = readFileSync(join(ROOT, "wrangler.toml"), "utf8");
  } catch {
    return {
      status: "pending",
      reason: "src/adapters/worker/index.ts or wrangler.toml is missing",
      rows: [],
    };
  }
  const origin = http.createServer((_req, res) => {
    res.writeHead(200, { "content-type": "text/plain", "content-length": "2" });
    res.end("ok");
  });
  await new Promise<void>((resolve) => origin.listen(0, "127.0.0.1", resolve));
  const originUrl = `http://127.0.0.1:${(origin.address() as AddressInfo).port}`;
  const config = {
    origin: originUrl,
    prefix: "bench-worker",
    routes: [
      {
        name: "limited",
        match: { path: "/limited/*" },
        key: "header:x-bench-key",
        rules: { perMinute: { algorithm: "gcra", limit: 1_000_000_000, period: "1m" } },
      },
    ],
  };
  // the repo's wrangler.toml up to its [vars], with main made absolute, then our vars
  const head = repoToml
    .split(/^\[vars\]/m)[0]!
    .replace(/^main\s*=.*$/m, `main = ${JSON.stringify(workerFile)}`);
  const compat = /^compatibility_date\s*=.*$/m.exec(repoToml)?.[0] ?? 'compatibility_date = "2026-05-01"';
  const dir = mkdtempSync(join(tmpdir(), "edgelimit-bench-worker-"));
  const toml = `${head.trimEnd()}\n\n[vars]\nEDGELIMIT_CONFIG = '''${JSON.stringify(config)}'''\nUPSTASH_REDIS_REST_URL = ${JSON.stringify(env.bridgeUrl)}\nUPSTASH_REDIS_REST_TOKEN = ${JSON.stringify(env.token)}\n`;
  writeFileSync(join(dir, "wrangler.toml"), toml);
  writeFileSync(join(dir, "minimal.js"), MINIMAL_WORKER);
  writeFileSync(
    join(dir, "minimal.toml"),
    `name = "minimal-proxy"\nmain = "minimal.js"\n${compat}\n\n[vars]\nORIGIN = ${JSON.stringify(originUrl)}\n`,
  );
  // every request carries the key the limited route counts by (one identifier)
  const headers = { "x-bench-key": "bench" };
  const rows: WorkerRow[] = [];
  // Both wrangler dev servers stay up and the targets take turns, round by round, so that a slow
  // moment of this shared machine lands on every target alike.
  const measure = async (targets: [string, string][]) => {
    const rounds = 3;
    for (const [, url] of targets) await sequential(url, Math.min(500, cfg.sequentialMs), headers); // warm-up
    const seq = targets.map(() => ({
      latencies: [] as number[],
      seconds: 0,
      non2xx: 0,
      errors: 0,
      bridge: 0,
    }));
    for (let round = 0; round < rounds; round++) {
      for (const [i, [name, url]] of targets.entries()) {
        log(`worker: ${name}, one request at a time (round ${round + 1}/${rounds})`);
        await env.resetBridgeStats();
        const run = await sequential(url, cfg.sequentialMs / rounds, headers);
        const acc = seq[i]!;
        acc.latencies.push(...run.latencies);
        acc.seconds += run.seconds;
        acc.non2xx += run.non2xx;
        acc.errors += run.errors;
        acc.bridge += (await env.bridgeStats()).requests;
      }
    }
    for (const [i, [name]] of targets.entries()) {
      const acc = seq[i]!;
      const sorted = [...acc.latencies].sort((a, b) => a - b);
      rows.push({
        target: name,
        concurrency: 1,
        reqPerSec: sorted.length / acc.seconds,
        p50: percentile(sorted, 50),
        p99: percentile(sorted, 99),
        errors: acc.errors,
        non2xx: acc.non2xx,
        requests: sorted.length,
        bridgeRequests: acc.bridge,
      });
    }
    const runs = targets.map(() => [] as (WorkerRow & { bridgeRequests: number })[]);
    const cannonRounds = 2;
    for (let round = 0; round < cannonRounds; round++) {
      for (const [i, [name, url]] of targets.entries()) {
        log(`worker: ${name}, autocannon 64 connections (round ${round + 1}/${cannonRounds})`);
        await env.resetBridgeStats();
        const r = await cannon(url, cfg.cannonSeconds / cannonRounds, headers);
        runs[i]!.push({ ...r, target: name, bridgeRequests: (await env.bridgeStats()).requests });
      }
    }
    for (const [i, [name]] of targets.entries()) {
      const rs = runs[i]!;
      const sum = (f: (r: WorkerRow) => number) => rs.reduce((a, r) => a + f(r), 0);
      rows.push({
        target: name,
        concurrency: 64,
        reqPerSec: sum((r) => r.reqPerSec) / rs.length,
        p50: median(rs.map((r) => r.p50)),
        p99: median(rs.map((r) => r.p99)),
        errors: sum((r) => r.errors),
        non2xx: sum((r) => r.non2xx),
        requests: sum((r) => r.requests),
        bridgeRequests: sum((r) => r.bridgeRequests ?? 0),
        statuses: rs.flatMap((r) => r.statuses ?? []),
      });
    }
  };
  let minimal: Wrangler | undefined;
  let worker: Wrangler | undefined;
  try {
    log("worker: starting wrangler dev (minimal proxy Worker)");
    minimal = await startWrangler(dir, "minimal.toml");
    log("worker: starting wrangler dev (src/adapters/worker/index.ts)");
    worker = await startWrangler(dir, "wrangler.toml");
    // the limited route must really be limited: a decision's headers come back
    const probe = await fetch(`${worker.base}/limited/x`, { headers });
    await probe.arrayBuffer();
    if (probe.status !== 200 || !probe.headers.has("ratelimit")) {
      const seen = [...probe.headers].map(([k, v]) => `${k}: ${v}`).join("; ");
      return {
        status: "pending",
        reason: `the limited route answered ${probe.status} without a RateLimit header (${seen})`,
        rows,
        config: toml,
      };
    }
    await measure([
      ["origin directly", `${originUrl}/open/x`],
      ["minimal proxy Worker (no edgelimit)", `${minimal.base}/open/x`],
      ["edgelimit Worker, pass-through route", `${worker.base}/open/x`],
      ["edgelimit Worker, limited route", `${worker.base}/limited/x`],
    ]);
    return { status: "ok", rows, config: toml };
  } catch (error) {
    return { status: "pending", reason: (error as Error).message.slice(0, 2000), rows };
  } finally {
    await minimal?.stop();
    await worker?.stop();
    origin.closeAllConnections();
    origin.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
