// Worker overhead: `wrangler dev` (local workerd) in front of a local origin answering "ok". Targets:
// the origin directly; a minimal forwarding Worker (what wrangler dev itself costs); edgelimit's Worker
// on a route no rule matches; and on a route with one gcra rule far above the load (every request pays
// one decision). Closed loops of fetch, 1 and 64 in flight.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { BenchEnv } from "./env.js";
import { ROOT } from "./load.js";
import { closedLoop } from "./throughput.js";
import { log, percentile, sleep } from "./util.js";

export interface WorkerRow {
  target: string;
  inFlight: number;
  perSec: number;
  p50: number;
  p99: number;
  /** Responses other than 200, and failed requests. */
  failed: number;
  /** HTTP requests that reached the bridge, per request served. */
  bridgePerRequest: number;
}

export interface WorkerResult {
  rows: WorkerRow[];
  /** Why it did not run, when it did not. */
  pending?: string;
}

const MINIMAL = `export default { fetch: (r, env) => { const u = new URL(r.url);
  return fetch(env.ORIGIN + u.pathname, { method: r.method, headers: r.headers }); } };\n`;

const listen = (server: http.Server) =>
  new Promise<number>((resolve) =>
    server.listen(0, "127.0.0.1", () => resolve((server.address() as AddressInfo).port)),
  );

async function wrangler(dir: string, toml: string): Promise<{ base: string; proc: ChildProcess }> {
  const probe = http.createServer();
  const port = await listen(probe);
  probe.close();
  const args = ["dev", "-c", join(dir, toml), "--ip", "127.0.0.1", "--port", String(port)];
  args.push(
    "--persist-to",
    join(dir, `state-${toml}`),
    "--show-interactive-dev-session=false",
    "--log-level",
    "warn",
  );
  const proc = spawn(
    process.execPath,
    [join(ROOT, "node_modules", "wrangler", "bin", "wrangler.js"), ...args],
    {
      cwd: dir,
      env: { ...process.env, CLOUDFLARE_CF_FETCH_ENABLED: "false", WRANGLER_SEND_METRICS: "false", CI: "1" },
      stdio: "ignore",
      detached: true, // its own process group, for stop()
    },
  );
  const base = `http://127.0.0.1:${port}`;
  for (let waited = 0; waited < 90_000; waited += 250) {
    if (proc.exitCode !== null) throw new Error(`wrangler dev exited with ${proc.exitCode}`);
    const ok = await fetch(`${base}/open/ready`).then(
      (r) => r.arrayBuffer().then(() => r.status < 500),
      () => false,
    );
    if (ok) return { base, proc };
    await sleep(250);
  }
  throw new Error("wrangler dev was not ready within 90 s");
}

/** Ends wrangler and the workerd it started (its process group), nothing else. */
async function stop(proc: ChildProcess | undefined): Promise<void> {
  for (const signal of ["SIGTERM", "SIGKILL"] as const) {
    try {
      if (proc?.pid) process.kill(-proc.pid, signal);
    } catch {
      return; // already gone
    }
    await sleep(500);
  }
}

export async function runWorker(env: BenchEnv, s: { ms: number }): Promise<WorkerResult> {
  const origin = http.createServer((_req, res) => res.end("ok"));
  const originUrl = `http://127.0.0.1:${await listen(origin)}`;
  const workerFile = join(ROOT, "src", "adapters", "worker", "index.ts");
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
  const repoToml = readFileSync(join(ROOT, "wrangler.toml"), "utf8");
  const compat = /^compatibility_date\s*=.*$/m.exec(repoToml)?.[0] ?? 'compatibility_date = "2026-05-01"';
  const dir = mkdtempSync(join(tmpdir(), "edgelimit-bench-worker-"));
  writeFileSync(
    join(dir, "wrangler.toml"),
    `name = "edgelimit-bench"\nmain = ${JSON.stringify(workerFile)}\n${compat}\n\n[vars]\nEDGELIMIT_CONFIG = '''${JSON.stringify(config)}'''\nUPSTASH_REDIS_REST_URL = ${JSON.stringify(env.bridgeUrl)}\nUPSTASH_REDIS_REST_TOKEN = ${JSON.stringify(env.token)}\n`,
  );
  writeFileSync(join(dir, "minimal.js"), MINIMAL);
  writeFileSync(
    join(dir, "minimal.toml"),
    `name = "minimal"\nmain = "minimal.js"\n${compat}\n\n[vars]\nORIGIN = "${originUrl}"\n`,
  );
  const headers = { "x-bench-key": "bench" };
  let minimal: ChildProcess | undefined;
  let worker: ChildProcess | undefined;
  try {
    log("worker: starting two wrangler dev servers");
    const m = await wrangler(dir, "minimal.toml");
    minimal = m.proc;
    const w = await wrangler(dir, "wrangler.toml");
    worker = w.proc;
    const probe = await fetch(`${w.base}/limited/x`, { headers });
    await probe.arrayBuffer();
    if (!probe.headers.has("ratelimit"))
      return { rows: [], pending: `the limited route answered ${probe.status} without RateLimit headers` };
    const targets: [string, string][] = [
      ["origin directly", `${originUrl}/open/x`],
      ["minimal forwarding Worker", `${m.base}/open/x`],
      ["edgelimit Worker, pass-through route", `${w.base}/open/x`],
      ["edgelimit Worker, limited route", `${w.base}/limited/x`],
    ];
    const rows: WorkerRow[] = [];
    for (const [target, url] of targets) {
      let failed = 0;
      const get = async () => {
        const res = await fetch(url, { headers }).catch(() => undefined);
        await res?.arrayBuffer();
        if (res?.status !== 200) failed++;
      };
      await closedLoop(get, 8, 500); // warm-up
      for (const inFlight of [1, 64]) {
        log(`worker: ${target}, ${inFlight} in flight`);
        failed = 0;
        await env.resetCounts();
        const { latencies, seconds } = await closedLoop(get, inFlight, s.ms);
        rows.push({
          target,
          inFlight,
          perSec: latencies.length / seconds,
          p50: percentile(latencies, 50),
          p99: percentile(latencies, 99),
          failed,
          bridgePerRequest: (await env.counts()).http / latencies.length,
        });
      }
    }
    return { rows };
  } catch (error) {
    return { rows: [], pending: (error as Error).message.slice(0, 500) };
  } finally {
    await stop(minimal);
    await stop(worker);
    origin.closeAllConnections();
    origin.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
