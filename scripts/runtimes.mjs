#!/usr/bin/env node
// Runs the built package under Bun and Deno, as their users run it: the library (a Limiter deciding
// exact counts), `edgelimit/upstash` (the @upstash/ratelimit face, with an @upstash/redis client) and
// the Hono middleware, against a real redis-server behind the bridge.
//
//   npm run build && node scripts/runtimes.mjs        (.ci/run calls it after `npm test`)
//
// Both runtimes come from npm as devDependencies (`bun`, `deno`: their platform packages carry the
// binaries, so `npm ci` is all a fresh machine needs). Each runtime runs one module, written to a
// scratch directory whose node_modules points at this package and its dev copies of hono and
// @upstash/redis. Any wrong count, a missing binary or a runtime that fails exits non-zero, naming it.

import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const root = resolve(import.meta.dirname, "..");
const modules = join(root, "node_modules");

if (!existsSync(join(root, "dist/index.js")) || !existsSync(join(root, "dist/bridge/index.js"))) {
  fail("dist/ is missing: run `npm run build` first");
}

/** The first candidate that runs and answers `--version`: the platform package's binary. */
function binary(name, candidates) {
  for (const candidate of candidates) {
    const path = join(modules, candidate);
    // the npm package's own bin is a small placeholder until its postinstall has run
    if (!existsSync(path) || statSync(path).size < 1_000_000) continue;
    try {
      const version = execFileSync(path, ["--version"], { encoding: "utf8" })
        .split("\n")[0]
        .replace(/^\D*/, "")
        .split(" ")[0];
      return { path, version };
    } catch {}
  }
  fail(`${name}: no runnable binary under node_modules (tried ${candidates.join(", ")}); run \`npm ci\``);
}

const arch = process.arch === "arm64" ? "aarch64" : "x64";
const bun = binary("bun", [
  "bun/bin/bun.exe",
  `@oven/bun-${process.platform}-${arch}/bin/bun`,
  `@oven/bun-${process.platform}-${arch}-baseline/bin/bun`,
]);
const deno = binary("deno", [
  `@deno/${process.platform}-${process.arch === "arm64" ? "arm64" : "x64"}-glibc/deno`,
  `@deno/${process.platform}-${process.arch === "arm64" ? "arm64" : "x64"}/deno`,
]);

// The scratch consumer: its node_modules links this package and the dev copies it imports.
const dir = mkdtempSync(join(tmpdir(), "edgelimit-runtimes-"));
const links = {
  edgelimit: root,
  hono: join(modules, "hono"),
  "@upstash/redis": join(modules, "@upstash/redis"),
};
for (const [name, target] of Object.entries(links)) {
  if (!existsSync(target)) continue;
  const link = join(dir, "node_modules", name);
  mkdirSync(join(link, ".."), { recursive: true });
  symlinkSync(target, link);
}
writeFileSync(
  join(dir, "package.json"),
  `${JSON.stringify({ name: "runtimes-check", private: true, type: "module", dependencies: { edgelimit: "*", hono: "*", "@upstash/redis": "*" } })}\n`,
);

const { startBridge, startRedisServer } = await import(join(root, "dist/bridge/index.js"));
const server = await startRedisServer();
const token = `runtimes-${crypto.randomUUID()}`;
const bridge = await startBridge({ redisUrl: server.url, port: 0, token });
let failed = 0;
try {
  for (const [name, { path, version }, args] of [
    ["bun", bun, ["run"]],
    ["deno", deno, ["run", "--allow-net", "--allow-env", "--allow-read", "--allow-sys"]],
  ]) {
    const file = join(dir, `check-${name}.mjs`);
    writeFileSync(file, checkModule(bridge.url, token, `${name}-${crypto.randomUUID()}`));
    const { code, output } = await run(path, [...args, file], dir);
    const lines = output.trim().split("\n");
    if (code === 0 && lines.at(-1) === "ok") {
      console.log(`${name} ${version}: ok (${lines.slice(0, -1).join("; ")})`);
    } else {
      failed++;
      console.error(`${name} ${version}: FAILED (exit ${code})\n${output}`);
    }
  }
} finally {
  await bridge.close();
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
}
if (failed > 0) fail(`${failed} runtime(s) failed`);
console.log("runtimes: 2 passed, 0 failed");

function run(command, args, cwd) {
  return new Promise((done) => {
    const child = spawn(command, args, { cwd, env: { ...process.env, NO_COLOR: "1" } });
    let output = "";
    child.stdout.on("data", (chunk) => (output += chunk));
    child.stderr.on("data", (chunk) => (output += chunk));
    const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
    child.on("close", (code) => {
      clearTimeout(timer);
      done({ code: code ?? 1, output });
    });
  });
}

function fail(message) {
  console.error(`runtimes: ${message}`);
  process.exit(1);
}

/**
 * The module each runtime runs: exact answers from a Limiter on an injected clock, from
 * edgelimit/upstash's Ratelimit, and from the Hono middleware; prints one line per product, then "ok".
 */
function checkModule(url, token, prefix) {
  return `
import { fixedWindow, gcra, Limiter } from "edgelimit";
import { rateLimit } from "edgelimit/hono";
import { Ratelimit } from "edgelimit/upstash";
import { Redis } from "@upstash/redis";
import { Hono } from "hono";

const url = ${JSON.stringify(url)};
const token = ${JSON.stringify(token)};
const same = (what, got, want) => {
  if (JSON.stringify(got) !== JSON.stringify(want)) {
    throw new Error(what + ": got " + JSON.stringify(got) + ", want " + JSON.stringify(want));
  }
};

// The library: 3 per minute on a clock that stands still, then a GCRA burst.
const now = 1_700_000_040_000;
const limiter = new Limiter({
  redis: { url, token },
  prefix: ${JSON.stringify(`${prefix}-lib`)},
  rules: { minute: fixedWindow({ limit: 3, window: "1m" }) },
  clock: () => now,
});
const decisions = [];
for (let i = 0; i < 5; i++) decisions.push(await limiter.limit("user:1"));
same("Limiter allowed", decisions.map((d) => d.allowed), [true, true, true, false, false]);
same("Limiter remaining", decisions.map((d) => d.remaining), [2, 1, 0, 0, 0]);
same("Limiter resetAt", decisions[0].resetAt, 1_700_000_040_000 + 60_000 - (1_700_000_040_000 % 60_000));
const burst = new Limiter({
  redis: { url, token },
  prefix: ${JSON.stringify(`${prefix}-gcra`)},
  rules: { burst: gcra({ limit: 1, period: "1s", burst: 4 }) },
  clock: () => now,
});
const costs = [];
for (const cost of [2, 2, 1]) costs.push((await burst.limit("user:1", { cost })).allowed);
same("gcra burst", costs, [true, true, false]);
await limiter.dispose();
await burst.dispose();
console.log("Limiter: 3 of 5 admitted, exact");

// edgelimit/upstash with an @upstash/redis client, as the peer's users write it.
const ratelimit = new Ratelimit({
  redis: new Redis({ url, token }),
  limiter: Ratelimit.fixedWindow(3, "1 m"),
  prefix: ${JSON.stringify(`${prefix}-upstash`)},
});
const answers = [];
for (let i = 0; i < 4; i++) answers.push(await ratelimit.limit("user:1", { rate: 1 }));
same("Ratelimit success", answers.map((a) => a.success), [true, true, true, false]);
same("Ratelimit remaining", answers.map((a) => a.remaining), [2, 1, 0, 0]);
same("getRemaining", (await ratelimit.getRemaining("user:1")).remaining, 0);
await ratelimit.resetUsedTokens("user:1");
same("getRemaining after reset", (await ratelimit.getRemaining("user:1")).remaining, 3);
// the peer's refund (a negative rate) and overshoot, each one EVALSHA
same("refund", (await ratelimit.limit("user:1", { rate: -2 })).remaining, 5);
same("overshoot", (await ratelimit.limit("user:1", { rate: 7 })).success, false);
same("overshoot counted", (await ratelimit.getRemaining("user:1")).remaining, 0);
console.log("edgelimit/upstash: 3 of 4 admitted, reset to 3, refund to 5, overshoot counted");

// The Hono middleware: 2 per minute per key, the third answered 429 with the standard headers.
const app = new Hono();
const hono = new Limiter({
  redis: { url, token },
  prefix: ${JSON.stringify(`${prefix}-hono`)},
  rules: { minute: fixedWindow({ limit: 2, window: "1m" }) },
  clock: () => now,
});
app.use("/api/*", rateLimit({ limiter: hono, key: (c) => c.req.header("x-key") }));
app.get("/api/hello", (c) => c.text("hello"));
const statuses = [];
let last;
for (let i = 0; i < 3; i++) {
  last = await app.request("/api/hello", { headers: { "x-key": "k1" } });
  statuses.push(last.status);
}
same("Hono statuses", statuses, [200, 200, 429]);
same("Hono Retry-After", last.headers.get("retry-after") !== null, true);
same("Hono without a key", (await app.request("/api/hello")).status, 401);
await hono.dispose();
console.log("Hono: 200 200 429, 401 without a key");
console.log("ok");
`;
}
