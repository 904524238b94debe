#!/usr/bin/env node
// npm start [-- CONFIG.json]: the real Worker (src/adapters/worker/index.ts under `wrangler dev`, local mode) on this
// machine, in one command. Without UPSTASH_REDIS_REST_URL it starts a private redis-server (free port,
// no persistence) and the REST bridge in front of it; without a config file it also starts a small demo
// origin and limits POST /login (5 a minute per IP) and /api/* (per x-api-key). Ctrl-C or SIGTERM stops
// every process it started.
import { spawn, spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import net from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const configFile = process.argv[2];
const cleanups = [];
let wrangler;
let stopping = false;

function fail(message) {
  console.error(`npm start: ${message}`);
  return stop(1);
}

async function stop(code) {
  if (stopping) return;
  stopping = true;
  // Last in, first out: wrangler (and its workerd) before the bridge before Redis.
  for (const cleanup of cleanups.reverse()) {
    try {
      await cleanup();
    } catch (error) {
      console.error(`npm start: while stopping: ${error.message}`);
    }
  }
  process.exit(code);
}

process.on("SIGINT", () => stop(0));
process.on("SIGTERM", () => stop(0));
// Whatever happens, never leave wrangler's process group running behind us.
process.on("exit", () => killGroup("SIGKILL"));

function killGroup(signal) {
  if (wrangler?.pid === undefined) return;
  try {
    process.kill(-wrangler.pid, signal);
  } catch {
    // ESRCH: the group is already gone.
  }
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

async function startRedisAndBridge() {
  const found = spawnSync("redis-server", ["--version"], { stdio: "ignore" });
  if (found.error) {
    return fail(
      "redis-server is not installed (needed when UPSTASH_REDIS_REST_URL is not set).\n" +
        "  Debian/Ubuntu: sudo apt-get install -y redis-server\n" +
        "  macOS:         brew install redis\n" +
        "or point it at a real Upstash database: UPSTASH_REDIS_REST_URL=... UPSTASH_REDIS_REST_TOKEN=... npm start",
    );
  }
  const bridgeModule = join(root, "dist", "bridge", "index.js");
  if (!existsSync(bridgeModule)) return fail("dist/ is missing: run `npm run build` (npm install does it)");
  const { startBridge, startRedisServer } = await import(bridgeModule);
  const redis = await startRedisServer();
  cleanups.push(() => redis.stop());
  const token = `dev-${randomUUID()}`;
  const bridge = await startBridge({ redisUrl: redis.url, port: 0, token });
  cleanups.push(() => bridge.close());
  console.log(`redis-server ${redis.url}, REST bridge ${bridge.url}`);
  return { url: bridge.url, token };
}

async function startDemoOrigin() {
  const server = createServer((request, response) => {
    request.resume();
    request.on("end", () => {
      response.writeHead(200, { "Content-Type": "application/json" });
      response.end(
        `${JSON.stringify({ origin: "demo", method: request.method, url: request.url, at: new Date().toISOString() })}\n`,
      );
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  cleanups.push(
    () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  const url = `http://127.0.0.1:${server.address().port}`;
  console.log(`demo origin ${url}`);
  return url;
}

function demoConfig(origin) {
  return {
    origin,
    routes: [
      {
        name: "login",
        match: { path: "/login", methods: ["POST"] },
        key: "ip",
        rules: { perMinute: { algorithm: "gcra", limit: 5, period: "1m" } },
      },
      {
        name: "api",
        match: { path: "/api/*" },
        key: "header:x-api-key",
        rules: {
          burst: { algorithm: "tokenBucket", capacity: 10, refillRate: 1, interval: "1s" },
          daily: { algorithm: "fixedWindow", limit: 1000, window: "1d" },
        },
      },
    ],
    deny: ["198.51.100.0/24"],
  };
}

async function waitUntilServing(url, child) {
  const deadline = Date.now() + 90_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) return false;
    try {
      const response = await fetch(url, { signal: AbortSignal.timeout(2000) });
      await response.arrayBuffer();
      return true;
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }
  return false;
}

async function main() {
  let config;
  if (configFile) {
    try {
      config = JSON.parse(readFileSync(configFile, "utf8"));
    } catch (error) {
      return fail(`cannot read ${configFile}: ${error.message}`);
    }
  }

  let redis;
  if (process.env.UPSTASH_REDIS_REST_URL) {
    if (!process.env.UPSTASH_REDIS_REST_TOKEN)
      return fail("UPSTASH_REDIS_REST_URL is set but UPSTASH_REDIS_REST_TOKEN is not");
    redis = { url: process.env.UPSTASH_REDIS_REST_URL, token: process.env.UPSTASH_REDIS_REST_TOKEN };
    console.log("using the Redis at UPSTASH_REDIS_REST_URL");
  } else {
    redis = await startRedisAndBridge();
    if (!redis) return;
  }
  config ??= demoConfig(await startDemoOrigin());

  // Vars go through a private env file, not --var: command lines are readable by every local user.
  const dir = mkdtempSync(join(tmpdir(), "edgelimit-dev-"));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const envFile = join(dir, "dev.env");
  // dotenv single quotes are literal; JSON never needs a raw ' (it can be written \u0027).
  const json = JSON.stringify(config).replaceAll("'", "\\u0027");
  writeFileSync(
    envFile,
    `EDGELIMIT_CONFIG='${json}'\nUPSTASH_REDIS_REST_URL='${redis.url}'\nUPSTASH_REDIS_REST_TOKEN='${redis.token}'\n`,
    { mode: 0o600 },
  );

  const port = Number(process.env.PORT) || (await freePort());
  const inspectorPort = await freePort();
  const bin = join(root, "node_modules", ".bin", process.platform === "win32" ? "wrangler.cmd" : "wrangler");
  const args = ["dev", "--local", "--ip", "127.0.0.1", "--port", String(port)];
  args.push("--inspector-port", String(inspectorPort), "--env-file", envFile);
  args.push("--persist-to", join(dir, "state"), "--show-interactive-dev-session=false");
  // Its own process group (detached), so stopping it takes workerd along.
  wrangler = spawn(bin, args, {
    cwd: root,
    detached: true,
    stdio: ["ignore", "inherit", "inherit"],
    env: { ...process.env, CLOUDFLARE_CF_FETCH_ENABLED: "false", WRANGLER_SEND_METRICS: "false" },
  });
  cleanups.push(async () => {
    if (wrangler.exitCode === null && wrangler.signalCode === null) {
      const exited = new Promise((resolve) => wrangler.once("exit", resolve));
      killGroup("SIGTERM");
      const timer = setTimeout(() => killGroup("SIGKILL"), 5000);
      await exited;
      clearTimeout(timer);
    }
    killGroup("SIGKILL"); // anything of its group still alive (workerd)
  });
  wrangler.once("exit", (code, signal) => {
    if (!stopping) fail(`wrangler dev exited (${signal ?? `code ${code}`})`);
  });

  const url = `http://127.0.0.1:${port}`;
  if (!(await waitUntilServing(`${url}/`, wrangler))) return fail("wrangler dev did not start serving");
  console.log(`
edgelimit is running at ${url}  (Ctrl-C stops everything)
${
  configFile
    ? `config: ${configFile}`
    : `POST /login: 5 a minute per IP. Watch the 6th get a 429:

  for i in $(seq 1 8); do curl -si -X POST ${url}/login | grep -iE "^HTTP|^ratelimit|^retry-after"; done

/api/*: 10 at once per x-api-key, then 1 a second; no key is a 401:

  curl -si ${url}/api/hello -H "x-api-key: demo" | grep -iE "^HTTP|^ratelimit"
  curl -si ${url}/api/hello | head -1`
}
`);
}

main().catch((error) => fail(error.stack ?? error.message));
