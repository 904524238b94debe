// Part 6, Worker overhead: `wrangler dev` (local workerd) in front of a local origin answering "ok". Targets:
// the origin directly; a minimal forwarding Worker (what wrangler dev itself costs); edgelimit's Worker
// on a route no rule matches; and on a route with one gcra rule far above the load (every request pays
// one decision). Closed loops of fetch, 1 and 64 in flight.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type BenchEnv, closedLoop, fmt, log, ms, type Part, percentile, sleep, table } from "./harness.js";
import { ROOT } from "./load.js";

/** failed: responses other than 200, and failed requests; bridgePerRequest: HTTP requests that reached the bridge. */
type WorkerRow = Record<"inFlight" | "perSec" | "p50" | "p99" | "failed" | "bridgePerRequest", number> & {
  target: string;
};

const MINIMAL = `export default { fetch: (r, env) => { const u = new URL(r.url);
  return fetch(env.ORIGIN + u.pathname, { method: r.method, headers: r.headers }); } };\n`;

const listen = (server: http.Server) =>
  new Promise<number>((resolve) =>
    server.listen(0, "127.0.0.1", () => resolve((server.address() as AddressInfo).port)),
  );

/** Starts `wrangler dev -c toml` in a process group of its own; resolves when it answers. */
async function wrangler(dir: string, toml: string, started: ChildProcess[]): Promise<string> {
  const probe = http.createServer();
  const port = await listen(probe);
  probe.close();
  const args = [
    "dev",
    "-c",
    toml,
    "--ip",
    "127.0.0.1",
    "--port",
    String(port),
    "--persist-to",
    `state-${toml}`,
  ];
  const proc = spawn(
    process.execPath,
    [join(ROOT, "node_modules/wrangler/bin/wrangler.js"), ...args, "--log-level", "warn"],
    {
      cwd: dir,
      env: { ...process.env, CLOUDFLARE_CF_FETCH_ENABLED: "false", WRANGLER_SEND_METRICS: "false", CI: "1" },
      stdio: "ignore",
      detached: true,
    },
  );
  started.push(proc);
  const base = `http://127.0.0.1:${port}`;
  for (const until = Date.now() + 90_000; Date.now() < until; await sleep(250)) {
    if (proc.exitCode !== null) throw new Error(`wrangler dev exited with ${proc.exitCode}`);
    if (
      await fetch(base).then(
        (r) => r.arrayBuffer().then(() => r.status < 500),
        () => false,
      )
    )
      return base;
  }
  throw new Error("wrangler dev was not ready within 90 s");
}

const SECONDS = 4;

async function runWorker(env: BenchEnv): Promise<WorkerRow[]> {
  const origin = http.createServer((_req, res) => res.end("ok"));
  const originUrl = `http://127.0.0.1:${await listen(origin)}`;
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
  const compat = /^compatibility_date\s*=.*$/m.exec(readFileSync(join(ROOT, "wrangler.toml"), "utf8"))?.[0];
  const vars = {
    EDGELIMIT_CONFIG: JSON.stringify(config),
    UPSTASH_REDIS_REST_URL: env.bridgeUrl,
    UPSTASH_REDIS_REST_TOKEN: env.token,
  };
  const dir = mkdtempSync(join(tmpdir(), "edgelimit-bench-worker-"));
  const main = JSON.stringify(join(ROOT, "src/adapters/worker/index.ts"));
  const toml = (name: string, file: string, v: object) =>
    `name = "${name}"\nmain = ${file}\n${compat}\n\n[vars]\n${Object.entries(v)
      .map(([k, x]) => `${k} = ${JSON.stringify(x)}`)
      .join("\n")}\n`;
  writeFileSync(join(dir, "edgelimit.toml"), toml("edgelimit-bench", main, vars));
  writeFileSync(join(dir, "minimal.toml"), toml("minimal", '"minimal.js"', { ORIGIN: originUrl }));
  writeFileSync(join(dir, "minimal.js"), MINIMAL);
  const headers = { "x-bench-key": "bench" };
  const started: ChildProcess[] = [];
  try {
    log("worker: starting two wrangler dev servers");
    const minimal = await wrangler(dir, "minimal.toml", started);
    const worker = await wrangler(dir, "edgelimit.toml", started);
    const probe = await fetch(`${worker}/limited/x`, { headers });
    await probe.arrayBuffer();
    if (!probe.headers.has("ratelimit"))
      throw new Error(`the limited route answered ${probe.status} without RateLimit headers`);
    const targets = {
      "origin directly": `${originUrl}/open/x`,
      "minimal forwarding Worker": `${minimal}/open/x`,
      "edgelimit Worker, pass-through route": `${worker}/open/x`,
      "edgelimit Worker, limited route": `${worker}/limited/x`,
    };
    const rows: WorkerRow[] = [];
    for (const [target, url] of Object.entries(targets)) {
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
        const { latencies, seconds } = await closedLoop(get, inFlight, SECONDS * 1000);
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
    return rows;
  } finally {
    for (const signal of ["SIGTERM", "SIGKILL"] as const) {
      for (const proc of started) {
        try {
          process.kill(-proc.pid!, signal);
        } catch {
          // already gone
        }
      }
      await sleep(500);
    }
    origin.closeAllConnections();
    origin.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

export const worker: Part<WorkerRow[]> = {
  name: "worker",
  title: "## 6. Worker overhead",
  fullOnly: true,
  run: ({ env }) => runWorker(env),
  render(rows) {
    const cells = (x: WorkerRow) => [x.target, x.inFlight, fmt(x.perSec), ms(x.p50), ms(x.p99), x.failed];
    return `\`wrangler dev\` (local workerd) in front of a local origin; closed loops of \`fetch\`, 1 and 64 in flight, ${SECONDS} s each.
The limited route has one gcra rule far above the load; the minimal Worker only forwards.

${table(
  ["target | in flight | requests/s | p50 ms | p99 ms | failed | bridge requests per request"],
  rows.map((x) => [...cells(x), fmt(x.bridgePerRequest, 2)]),
)}`;
  },
};
