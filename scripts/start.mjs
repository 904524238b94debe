#!/usr/bin/env node
// npm start [-- CONFIG.json|CONFIG.jsonc]: the real Worker (src/adapters/worker/index.ts under `wrangler dev`,
// local mode) on this machine, in one command.
//
// - The config is wrangler.toml's `[vars] EDGELIMIT_CONFIG` (read as wrangler reads it), or the file given.
//   It is validated with the Worker's own parser before anything starts; problems exit 1 with their paths.
// - An origin on a reserved example domain (example.com/.net/.org, *.example, *.invalid) cannot be anyone's
//   server: a local echo origin stands in for it, and the banner says so.
// - Redis: UPSTASH_REDIS_REST_URL and UPSTASH_REDIS_REST_TOKEN when set, else a private redis-server (free
//   port, no persistence) with the REST bridge in front of it. Either way a PING goes through the REST URL
//   before the banner: a wrong URL or token exits 1 with the fix.
// - The admin API and the ops page are on, with a development token (EDGELIMIT_ADMIN_TOKEN=dev-<random>,
//   or the one set in the environment); the banner prints the page's URL, the token, and a curl that
//   upgrades a key of the first keyed route with plans.
// - Stopping: SIGINT, SIGTERM or SIGHUP to this process or to npm (package.json runs it with `exec`, so npm
//   forwards SIGINT and SIGTERM here; a parent that dies is noticed within half a second), the exit of any
//   child (redis-server, wrangler), workerd no longer listening, or a crash here stops every process it
//   started. A watchdog shell holds the children's ids and kills them if this process is killed outright
//   (SIGKILL) before it can.
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import net from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const USAGE = `usage: npm start [-- CONFIG.json|CONFIG.jsonc]
  Without a file, the config is EDGELIMIT_CONFIG in wrangler.toml's [vars].
  UPSTASH_REDIS_REST_URL and UPSTASH_REDIS_REST_TOKEN: use that Redis instead of a local one.
  EDGELIMIT_ADMIN_TOKEN: the admin API's token (default: a fresh dev-<random> one).
  PORT: the Worker's port (default: a free one).`;

const cleanups = [];
let stopping = false;
let wrangler;
let watchdog;
let tempDir;

function say(text) {
  try {
    process.stdout.write(`${text}\n`);
  } catch {
    // stdout gone (a closed terminal): nothing to tell.
  }
}

function complain(text) {
  try {
    process.stderr.write(`${text}\n`);
  } catch {
    // stderr gone.
  }
}

function fail(message, code = 1) {
  complain(`npm start: ${message}`);
  return stop(code);
}

async function stop(code) {
  if (stopping) return;
  stopping = true;
  // A cleanup that hangs must not keep anything alive: past this, exit (the exit hook SIGKILLs the rest).
  setTimeout(() => process.exit(code), 15_000).unref();
  // Last in, first out: wrangler (and its workerd) before the bridge before Redis.
  for (const cleanup of cleanups.reverse()) {
    try {
      await cleanup();
    } catch (error) {
      complain(`npm start: while stopping: ${error.message}`);
    }
  }
  // Everything is down: the watchdog may go without killing anything.
  if (watchdog) await new Promise((resolve) => watchdog.stdin.end("done\n", resolve));
  process.exit(code);
}

for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) {
  process.on(signal, () => {
    if (!stopping) say(`\nnpm start: ${signal}, stopping`);
    stop(signal === "SIGINT" ? 130 : 0);
  });
}
process.on("uncaughtException", (error) => fail(`crashed: ${error.stack ?? error}`));
process.on("unhandledRejection", (error) => fail(`crashed: ${error?.stack ?? error}`));
// A closed terminal or pipe (EPIPE) is no crash. Left to uncaughtException, each failed write would log
// a failure that fails to write, in a loop that starves the event loop and with it the cleanups.
process.stdout.on("error", () => {});
process.stderr.on("error", () => {});
// Whatever happens, never leave wrangler's process group running behind us (startRedisServer's own exit
// hook does the same for redis-server).
process.on("exit", () => {
  killGroup("SIGKILL");
  if (tempDir) rmSync(tempDir, { recursive: true, force: true });
});

function killGroup(signal) {
  if (wrangler?.pid === undefined) return;
  try {
    process.kill(-wrangler.pid, signal);
  } catch {
    // ESRCH: the group is already gone.
  }
}

// A parent that dies without passing the signal on (npm on SIGHUP; `sh -c` when a shell sits between npm
// and this process) would orphan everything: watch the parent, and the grandparent when the parent is a
// shell running this script, and stop when either is gone.
function watchAncestors() {
  const watched = [process.ppid];
  const parent = processInfo(process.ppid);
  if (parent && /^(\S*\/)?(sh|bash|dash)$/.test(parent.argv[0] ?? "") && parent.argv[1] === "-c") {
    watched.push(parent.ppid);
  }
  const timer = setInterval(() => {
    const reparented =
      processInfo(process.pid)?.ppid !== undefined && processInfo(process.pid).ppid !== watched[0];
    if (reparented || !watched.every(isAlive)) {
      clearInterval(timer);
      if (!stopping) say("\nnpm start: its parent process is gone, stopping");
      stop(1);
    }
  }, 500);
  timer.unref();
}

function processInfo(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
    return { state: fields[0], ppid: Number(fields[1]), group: Number(fields[2]), argv };
  } catch {
    return undefined; // not Linux, or gone
  }
}

// workerd does not always exit when signalled: on SIGTERM the one in front (wrangler's proxy) closes its
// entry socket and stays, and wrangler outlives a workerd that exits. So count the TCP sockets that the
// workerd processes of wrangler's group listen on (Linux /proc; elsewhere nothing is watched), and stop
// when fewer listen than at the start for 5 s in a row (a reload after a file change takes less).
function workerdListeners() {
  let listening = 0;
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    const info = processInfo(Number(name));
    if (info?.group !== wrangler.pid || !/(^|\/)workerd$/.test(info.argv[0] ?? "")) continue;
    listening += tcpListeners(name);
  }
  return listening;
}

function tcpListeners(pid) {
  let count = 0;
  try {
    const sockets = new Set();
    for (const fd of readdirSync(`/proc/${pid}/fd`)) {
      const inode = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`))?.[1];
      if (inode) sockets.add(inode);
    }
    for (const table of ["tcp", "tcp6"]) {
      for (const line of readFileSync(`/proc/${pid}/net/${table}`, "utf8").split("\n").slice(1)) {
        const fields = line.trim().split(/\s+/);
        if (fields[3] === "0A" && sockets.has(fields[9])) count += 1; // 0A: LISTEN
      }
    }
  } catch {
    // gone, or not Linux
  }
  return count;
}

function watchWorkerd() {
  const baseline = workerdListeners();
  if (baseline === 0) return; // nothing to compare with (not Linux)
  let short = 0;
  const timer = setInterval(() => {
    const listening = workerdListeners();
    short = listening < baseline ? short + 1 : 0;
    if (short >= 5) {
      clearInterval(timer);
      fail(
        `workerd (under wrangler dev) stopped serving: ${listening} of its ${baseline} sockets still listen`,
      );
    }
  }, 1000);
  timer.unref();
}

function isAlive(pid) {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  return processInfo(pid)?.state !== "Z";
}

// Holds every child's id (a negative id: a whole process group) and the temp directory, and kills the
// children and deletes the directory when this process's end of its stdin closes without a "done" line,
// which is what a SIGKILL here looks like from there. A signal to the watchdog itself is passed on to
// this process, which then stops in order.
const WATCHDOG = `trap 'signalled=1; kill -s TERM $PPID 2>/dev/null' INT TERM HUP
pids=""
dir=""
while :; do
  signalled=0
  if IFS= read -r line; then
    case "$line" in done) exit 0 ;; "rm "*) dir="\${line#rm }" ;; *) pids="$pids $line" ;; esac
  elif [ "$signalled" = 0 ]; then
    break
  fi
done
[ -n "$pids" ] && kill -s KILL -- $pids 2>/dev/null
[ -n "$dir" ] && rm -rf -- "$dir"
exit 0`;

function startWatchdog() {
  watchdog = spawn("sh", ["-c", WATCHDOG], { stdio: ["pipe", "ignore", "inherit"] });
  watchdog.stdin.on("error", () => {});
  watchdog.once("exit", (code, signal) => {
    if (!stopping)
      complain(
        `npm start: its watchdog exited (${signal ?? `code ${code}`}); a SIGKILL here would orphan the rest`,
      );
  });
  watchdog.unref();
  watchdog.stdin.unref?.();
}

function guard(pid) {
  watchdog?.stdin.write(`${pid}\n`);
}

function portFree(port) {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}

// The Worker's config parser, its JSONC reader and the bridge, straight from src/ (the Worker runs from
// src/ too, so no build is needed).
async function fromSrc(path) {
  const { tsImport } = await import("tsx/esm/api");
  return tsImport(path, import.meta.url);
}

// ---------------------------------------------------------------------------------------------- config

async function readConfig(file) {
  if (file !== undefined) {
    let text;
    try {
      text = readFileSync(file, "utf8");
    } catch (error) {
      throw new Error(`cannot read ${file} (${error.code ?? error.message})`);
    }
    if (!file.endsWith(".jsonc")) return { text, source: file };
    // One JSONC reader for both scripts: src/adapters/worker/jsonc.ts (check-config uses it too).
    const { stripJsonc } = await fromSrc("../src/adapters/worker/jsonc.ts");
    return { text: stripJsonc(text), source: file };
  }
  const path = join(root, "wrangler.toml");
  const source = `${relative(process.cwd(), path) || "wrangler.toml"} [vars] EDGELIMIT_CONFIG`;
  let raw;
  try {
    const { experimental_readRawConfig } = await import("wrangler");
    raw = experimental_readRawConfig({ config: path }).rawConfig;
  } catch (error) {
    throw new Error(`cannot read ${path}: ${error.message}`);
  }
  const text = raw.vars?.EDGELIMIT_CONFIG;
  if (typeof text !== "string") {
    throw new Error(
      `${source} is missing: put the config there (a JSON string, see docs/worker.md) or pass a file: npm start -- config.json`,
    );
  }
  return { text, source };
}

const RESERVED = /(^|\.)(example\.(com|net|org)|example|invalid)$/i;

// ----------------------------------------------------------------------------------------------- redis

/** PING through the REST URL, as @upstash/redis would send it. Resolves to undefined or what is wrong. */
async function pingRest(url, token, names) {
  let target;
  try {
    target = new URL(url);
  } catch {
    return `${names.url} is not a URL: ${JSON.stringify(url)} (expected https://<database>.upstash.io)`;
  }
  if (target.protocol !== "https:" && target.protocol !== "http:") {
    return `${names.url} must be an http(s) URL, got ${target.protocol}//…`;
  }
  let response;
  try {
    response = await fetch(url, {
      method: "POST",
      headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
      body: '["PING"]',
      signal: AbortSignal.timeout(5000),
    });
  } catch (error) {
    const reason =
      error.name === "TimeoutError"
        ? "no answer within 5 s"
        : (error.cause?.code ?? error.cause?.message ?? error.message);
    return `cannot reach ${names.url} (${target.origin}): ${reason}. Check the URL (the database's REST URL, https://…upstash.io) and the network.`;
  }
  const body = (await response.text()).slice(0, 300);
  if (response.status === 401 || response.status === 403) {
    return (
      `${target.origin} refused ${names.token} (HTTP ${response.status}: ${body.trim()}). ` +
      `Set ${names.token} to the REST token of the database at ${names.url} ` +
      "(Upstash console, the database's REST API section); a deployed Worker takes it from " +
      "`npx wrangler secret put UPSTASH_REDIS_REST_TOKEN`."
    );
  }
  if (!response.ok) return `${target.origin} answered PING with HTTP ${response.status}: ${body.trim()}`;
  let result;
  try {
    result = JSON.parse(body).result;
  } catch {
    // not JSON: reported below
  }
  if (result !== "PONG") {
    return `${target.origin} answered PING with ${body.trim()}, not the Upstash REST protocol's {"result":"PONG"}: is ${names.url} a Redis REST URL?`;
  }
  return undefined;
}

/** A private redis-server (no persistence, in `dir`) and the REST bridge in front of it. */
async function startLocalRedis(bridge, dir) {
  let redis;
  try {
    redis = await bridge.startRedisServer({ dir });
  } catch (error) {
    throw new Error(
      `${error.message}\n(redis-server is needed when UPSTASH_REDIS_REST_URL is not set; or use a real database: ` +
        "UPSTASH_REDIS_REST_URL=… UPSTASH_REDIS_REST_TOKEN=… npm start)",
    );
  }
  guard(redis.pid);
  cleanups.push(() => redis.stop());
  redis.exited.then(({ code, signal }) => {
    if (!stopping) fail(`redis-server exited (${signal ?? `code ${code}`})`);
  });
  const token = `dev-${randomUUID()}`;
  const rest = await bridge.startBridge({ redisUrl: redis.url, port: 0, token });
  cleanups.push(() => rest.close());
  return { url: rest.url, token, redisUrl: redis.url };
}

// ---------------------------------------------------------------------------------------------- origin

async function startEchoOrigin() {
  const server = createServer((request, response) => {
    request.resume();
    request.on("end", () => {
      response.writeHead(200, { "Content-Type": "application/json" });
      response.end(
        `${JSON.stringify({ origin: "local echo", method: request.method, url: request.url, at: new Date().toISOString() })}\n`,
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
  return `http://127.0.0.1:${server.address().port}`;
}

// ---------------------------------------------------------------------------------------------- banner

/** One curl loop that shows a 429: the first enforced route with a literal path. */
function tryLine(routes, url) {
  for (const route of routes) {
    const path = route.match?.path;
    if (route.mode === "shadow" || typeof path !== "string" || /[:*]/.test(path)) continue;
    const method = route.match?.methods?.[0]?.toUpperCase() ?? "GET";
    const sizes = Object.values(route.rules ?? {}).map((rule) => rule.burst ?? rule.limit ?? rule.capacity);
    const count = Math.min(30, Math.min(...sizes.filter(Number.isFinite)) + 3);
    if (!Number.isFinite(count)) continue;
    let header = "";
    if (route.key?.startsWith("header:")) header = ` -H "${route.key.slice(7)}: demo"`;
    if (route.key?.startsWith("cookie:")) header = ` -H "Cookie: ${route.key.slice(7)}=demo"`;
    const cmd = `curl -si -X ${method} ${url}${path}${header} | grep -iE "^HTTP|^ratelimit|^retry-after"`;
    return `Watch "${route.name}" answer 429 once over its limit:\n\n  for i in $(seq 1 ${count}); do ${cmd}; done\n`;
  }
  return "";
}

// A shell word: single-quoted, a ' inside written '\''.
const shellQuote = (text) => `'${text.replaceAll("'", "'\\''")}'`;

/** The admin API's address and token, and a curl that puts a key of the first keyed route with plans on a plan. */
function adminLines(json, url, token) {
  const admin = `${url}${json.adminPath ?? "/_edgelimit"}`;
  const counts = json.analytics ? "" : ' (counts appear once the config has "analytics": true)';
  const lines =
    `Ops page: ${admin}/  (log in with the development token: ${token})${counts}\n` +
    `Admin API: ${admin}/overrides/<route>?key=<value>  (Authorization: Bearer ${token})`;
  for (const route of json.routes) {
    const plan = Object.keys(route.plans ?? {})[0];
    if (plan === undefined || !route.overrides || route.key === "global") continue;
    const value = route.key === "ip" ? "203.0.113.9" : route.key === "path" ? "/demo" : "demo";
    const target = `${admin}/overrides/${encodeURIComponent(route.name)}?key=${encodeURIComponent(value)}`;
    const body = JSON.stringify({ plan });
    return `${lines}\nPut ${route.key} ${JSON.stringify(value)} of "${route.name}" on plan "${plan}":\n\n  curl -s -X PUT ${shellQuote(target)} -H ${shellQuote(`Authorization: Bearer ${token}`)} -H 'Content-Type: application/json' -d ${shellQuote(body)}\n`;
  }
  return `${lines}\n(give a route "plans" and "overrides": true to put its keys on a plan at runtime)\n`;
}

function describeRoutes(routes) {
  return routes
    .map((route) => {
      const match = route.match
        ? `${route.match.methods?.join(",") ?? "*"} ${route.match.path ?? "/*"}`
        : "every request";
      const rules = Object.entries(route.rules ?? {})
        .map(([name, rule]) => `${name} ${JSON.stringify(rule)}`)
        .join("; ");
      return `  ${route.name}: ${match}, key ${route.key}${route.mode === "shadow" ? " (shadow)" : ""}: ${rules}`;
    })
    .join("\n");
}

// ------------------------------------------------------------------------------------------------ main

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

function bin() {
  return join(root, "node_modules", ".bin", process.platform === "win32" ? "wrangler.cmd" : "wrangler");
}

// Starts wrangler dev on a port; resolves "serving", "port taken" (it exited as its port was in use) or why
// it did not start. Its output passes through, and is read for the bind failure.
async function startWrangler(command, port, inspectorPort, envFile, dir) {
  const wranglerArgs = ["dev", "--local", "--ip", "127.0.0.1", "--port", String(port)];
  wranglerArgs.push("--inspector-port", String(inspectorPort), "--env-file", envFile);
  wranglerArgs.push("--persist-to", join(dir, "state"), "--show-interactive-dev-session=false");
  // Its own process group (detached), so stopping it takes workerd and esbuild along.
  const child = spawn(command, wranglerArgs, {
    cwd: root,
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, CLOUDFLARE_CF_FETCH_ENABLED: "false", WRANGLER_SEND_METRICS: "false" },
  });
  wrangler = child;
  guard(-child.pid);
  let portTaken = false;
  const pass = (stream, into) => {
    let tail = ""; // the end of the last chunk: the message may be cut between two
    stream.on("data", (chunk) => {
      const text = tail + chunk.toString();
      if (/Address already in use/i.test(text)) portTaken = true;
      tail = text.slice(-32);
      try {
        into.write(chunk);
      } catch {
        // our own output gone: nothing to tell
      }
    });
  };
  pass(child.stdout, process.stdout);
  pass(child.stderr, process.stderr);
  let serving = false;
  child.once("exit", (code, signal) => {
    if (serving && !stopping) fail(`wrangler dev exited (${signal ?? `code ${code}`})`);
  });
  if (await waitUntilServing(`http://127.0.0.1:${port}/`, child)) {
    serving = true;
    return "serving";
  }
  const exited = child.exitCode !== null || child.signalCode !== null;
  if (!exited) {
    killGroup("SIGKILL");
    return "wrangler dev did not start serving";
  }
  killGroup("SIGKILL"); // workerd, if it outlived wrangler
  return portTaken ? "port taken" : `wrangler dev exited (${child.signalCode ?? `code ${child.exitCode}`})`;
}

async function main() {
  const args = process.argv.slice(2);
  if (args.includes("--help") || args.includes("-h")) {
    say(USAGE);
    return stop(0);
  }
  if (args.length > 1 || args[0]?.startsWith("-"))
    return fail(`unexpected arguments: ${args.join(" ")}\n${USAGE}`, 2);
  const { PORT } = process.env;
  if (PORT && !(/^\d+$/.test(PORT) && Number(PORT) >= 1 && Number(PORT) <= 65535)) {
    return fail(`PORT: must be a port number from 1 to 65535, got ${JSON.stringify(PORT)}`, 2);
  }
  if (PORT && !(await portFree(Number(PORT)))) {
    return fail(`PORT: 127.0.0.1:${PORT} is in use; pick another, or leave PORT unset for a free one`, 2);
  }
  watchAncestors();

  // 1. The config, validated before anything starts.
  let config;
  try {
    config = await readConfig(args[0]);
  } catch (error) {
    return fail(error.message);
  }
  const { parseConfig } = await fromSrc("../src/adapters/worker/config.ts");
  const parsed = parseConfig(config.text);
  if (!parsed.ok) {
    const count = `${parsed.errors.length} problem${parsed.errors.length === 1 ? "" : "s"}`;
    return fail(
      `${config.source}: ${count}, nothing started:\n${parsed.errors.map((e) => `  ${e}`).join("\n")}`,
    );
  }
  const json = JSON.parse(config.text);

  startWatchdog();
  const dir = mkdtempSync(join(tmpdir(), "edgelimit-dev-"));
  tempDir = dir;
  watchdog.stdin.write(`rm ${dir}\n`);

  // 2. Redis, answering PING through its REST URL.
  const bridge = await fromSrc("../src/bridge/index.ts");
  let redis;
  const lines = [];
  const { UPSTASH_REDIS_REST_URL: restUrl, UPSTASH_REDIS_REST_TOKEN: restToken } = process.env;
  if (restUrl || restToken) {
    if (!restUrl) return fail("UPSTASH_REDIS_REST_TOKEN is set but UPSTASH_REDIS_REST_URL is not");
    if (!restToken) return fail("UPSTASH_REDIS_REST_URL is set but UPSTASH_REDIS_REST_TOKEN is not");
    redis = { url: restUrl, token: restToken };
    const problem = await pingRest(restUrl, restToken, {
      url: "UPSTASH_REDIS_REST_URL",
      token: "UPSTASH_REDIS_REST_TOKEN",
    });
    if (problem) return fail(problem);
    lines.push(`redis:  ${new URL(restUrl).origin} (UPSTASH_REDIS_REST_URL), PING answered`);
  } else {
    try {
      redis = await startLocalRedis(bridge, dir);
    } catch (error) {
      return fail(error.message);
    }
    const problem = await pingRest(redis.url, redis.token, { url: "the local bridge", token: "its token" });
    if (problem) return fail(problem);
    lines.push(`redis:  redis-server ${redis.redisUrl}, REST bridge ${redis.url}, PING answered`);
  }

  // 3. The origin: a reserved example domain gets a local echo origin in its place.
  const origin = new URL(json.origin);
  if (RESERVED.test(origin.hostname)) {
    json.origin = await startEchoOrigin();
    lines.push(
      `origin: ${json.origin} (a local echo server standing in for ${origin.origin}, a reserved example domain)`,
    );
  } else {
    lines.push(`origin: ${origin.origin}`);
  }

  // 4. wrangler dev. Vars go through a private env file, not --var: command lines are readable by every
  // local user. dotenv single quotes are literal; JSON never needs a raw ' (it can be written \u0027).
  const envFile = join(dir, "dev.env");
  const value = JSON.stringify(json).replaceAll("'", "\\u0027");
  // A development token for the admin API: printed below, so never one that guards anything real.
  const adminToken = process.env.EDGELIMIT_ADMIN_TOKEN || `dev-${randomUUID()}`;
  // a bearer token (RFC 6750), as the admin API reads one; none holds a ' or a space
  if (!/^[A-Za-z0-9._~+/-]+=*$/.test(adminToken)) {
    return fail("EDGELIMIT_ADMIN_TOKEN: must be a bearer token: A-Z a-z 0-9 - . _ ~ + /, = at its end", 2);
  }
  writeFileSync(
    envFile,
    `EDGELIMIT_CONFIG='${value}'\nUPSTASH_REDIS_REST_URL='${redis.url}'\nUPSTASH_REDIS_REST_TOKEN='${redis.token}'\nEDGELIMIT_ADMIN_TOKEN='${adminToken}'\n`,
    { mode: 0o600 },
  );
  cleanups.push(async () => {
    if (wrangler && wrangler.exitCode === null && wrangler.signalCode === null) {
      const exited = new Promise((resolve) => wrangler.once("exit", resolve));
      killGroup("SIGTERM");
      const timer = setTimeout(() => killGroup("SIGKILL"), 5000);
      await exited;
      clearTimeout(timer);
    }
    killGroup("SIGKILL"); // anything of its group still alive (workerd)
  });
  // A free port is only free until someone binds it: another process may take it between our check and
  // workerd's bind. Unless PORT was given, such a bind failure is retried on fresh ports.
  let port;
  for (let attempt = 1; ; attempt++) {
    port = process.env.PORT ? Number(process.env.PORT) : await bridge.freePort();
    const outcome = await startWrangler(bin(), port, await bridge.freePort(), envFile, dir);
    if (outcome === "serving") break;
    if (stopping) return;
    const retry = outcome === "port taken" && !process.env.PORT && attempt < 3;
    if (!retry) return fail(outcome === "port taken" ? "wrangler dev: its port was taken" : outcome);
    say(`npm start: port ${port} was taken before workerd bound it; trying another`);
  }
  const url = `http://127.0.0.1:${port}`;
  watchWorkerd();
  say(`
edgelimit is running at ${url}  (Ctrl-C stops everything)
config: ${config.source}
${lines.join("\n")}
routes:
${describeRoutes(json.routes) || "  (none: every request passes unlimited)"}

${tryLine(json.routes, url)}
${adminLines(json, url, adminToken)}`);
}

main().catch((error) => fail(error.stack ?? error.message));
