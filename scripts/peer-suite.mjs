#!/usr/bin/env node
// Runs @upstash/ratelimit's own test suite against edgelimit/upstash, outside this repository.
//
//   npm run build
//   node scripts/peer-suite.mjs --peer <checkout of upstash/ratelimit-js> [--dir /tmp/peer-suite] [--bun 1.3.6]
//                               [--against @upstash/ratelimit]
//
// The peer's test files (src/**/*.test.ts and src/test_utils.ts) are copied to a scratch directory;
// the modules of the peer's they import are replaced there by short modules that export this
// package's `edgelimit/upstash` (an internal of the peer's, which the entry does not have, becomes a
// function that throws saying so). bun comes from npm, as the peer runs its tests with it. Four
// redis-servers, each behind this package's REST bridge, stand in for the peer's databases
// (UPSTASH_REDIS_REST_*, and US1_, APN_, EU2_ for its multi-region tests). Prints bun's tally, and
// exits with bun's status. The peer's checkout may be a work tree or a bare git directory; nothing
// from it is written into this repository. `--against @upstash/ratelimit` runs the same files, through
// the same replacements, against the peer's published package (this repository's devDependency): the
// reference tally, so a test that fails there too is not the entry's to pass.

import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

const root = resolve(import.meta.dirname, "..");
const args = Object.fromEntries(
  process.argv.slice(2).flatMap((arg, i, all) => (arg.startsWith("--") ? [[arg.slice(2), all[i + 1]]] : [])),
);
if (!args.peer) {
  console.error(
    "usage: node scripts/peer-suite.mjs --peer <checkout of upstash/ratelimit-js> [--dir D] [--bun V]",
  );
  process.exit(2);
}
const peer = resolve(args.peer);
const dir = resolve(args.dir ?? "/tmp/peer-suite");
const bunVersion = args.bun ?? "1.3.6";
const against = args.against ?? "edgelimit/upstash";
if (against !== "edgelimit/upstash" && against !== "@upstash/ratelimit") {
  console.error("--against: edgelimit/upstash (default) or @upstash/ratelimit");
  process.exit(2);
}
if (!existsSync(join(root, "dist/adapters/upstash/index.js"))) {
  console.error("dist/adapters/upstash/index.js is missing: run `npm run build` first");
  process.exit(2);
}

// The peer's test files, from a work tree or a bare git directory.
rmSync(join(dir, "src"), { recursive: true, force: true });
mkdirSync(join(dir, "src"), { recursive: true });
if (existsSync(join(peer, "src"))) {
  execFileSync("sh", [
    "-c",
    `cd "${peer}" && find src -name '*.test.ts' -o -name test_utils.ts | cpio -pdm "${dir}" 2>/dev/null`,
  ]);
} else {
  const files = execFileSync("git", ["--git-dir", peer, "ls-tree", "-r", "--name-only", "HEAD", "src"], {
    encoding: "utf8",
  })
    .split("\n")
    .filter((file) => file.endsWith(".test.ts") || file === "src/test_utils.ts");
  for (const file of files) {
    mkdirSync(join(dir, dirname(file)), { recursive: true });
    writeFileSync(join(dir, file), execFileSync("git", ["--git-dir", peer, "show", `HEAD:${file}`]));
  }
}

// What the tests import of the peer's, as this package's entry. Paths from src/.
const ENTRY = against;
const internal = (name) =>
  `export function ${name}(): never {\n  throw new Error("${name}: an internal of @upstash/ratelimit, not part of its API");\n}\n`;
const SHIMS = {
  "index.ts": `export * from "${ENTRY}";\n`,
  "single.ts": `export { Ratelimit as RegionRatelimit, type RatelimitConfig as RegionRatelimitConfig } from "${ENTRY}";\n`,
  "multi.ts": `export { MultiRegionRatelimit, type MultiRegionRatelimitConfig } from "${ENTRY}";\n`,
  "ratelimit.ts": `export { Ratelimit } from "${ENTRY}";\n`,
  "analytics.ts": `export { Analytics, type AnalyticsConfig } from "${ENTRY}";\n`,
  "constants.ts": `export const DEFAULT_PREFIX = "@upstash/ratelimit";\nexport const DYNAMIC_LIMIT_KEY_SUFFIX = ":dynamic:global";\n`,
  // the peer's storage format, which the entry shares for its deny lists
  "types.ts": [
    `export type { Algorithm } from "${ENTRY}";`,
    "// biome-ignore lint: the peer's context types have no counterpart",
    "export type Context = any; export type RegionContext = any; export type MultiRegionContext = any;",
    `export type RatelimitResponseType = "timeout" | "cacheBlock" | "denyList";`,
    "export type RatelimitResponse = { success: boolean; limit: number; remaining: number; reset: number; pending: Promise<unknown>; reason?: RatelimitResponseType; deniedValue?: string };",
    "export type DenyListResponse = { deniedValue: string | undefined; invalidIpDenyList: boolean };",
    "export type IsDenied = 0 | 1;",
    `export const DenyListExtension = "denyList"; export const IpDenyListKey = "ipDenyList"; export const IpDenyListStatusKey = "ipDenyListStatus";`,
    "",
  ].join("\n"),
  "duration.ts":
    against === "edgelimit/upstash"
      ? `export { durationMs as ms } from "${join(root, "dist/adapters/upstash/duration.js")}";\n`
      : internal("ms"),
  "hash.ts": internal("safeEval"),
  "lua-scripts/hash.ts": `export const SCRIPTS = {}; export const RESET_SCRIPT = {};\n`,
  "deny-list/index.ts": `export * from "./deny-list";\n`,
  "deny-list/deny-list.ts": [
    "checkDenyList",
    "checkDenyListCache",
    "defaultDeniedResponse",
    "resolveLimitPayload",
  ]
    .map(internal)
    .join(""),
  "deny-list/ip-deny-list.ts": `import { IpDenyList } from "${ENTRY}";\nexport const { updateIpDenyList, disableIpDenyList, ThresholdError } = IpDenyList;\n`,
  "deny-list/scripts.ts": `export const checkDenyListScript = "return redis.error_reply('an internal of @upstash/ratelimit')";\n`,
  "deny-list/time.ts": internal("getIpListTTL"),
};
for (const [file, text] of Object.entries(SHIMS)) {
  mkdirSync(dirname(join(dir, "src", file)), { recursive: true });
  writeFileSync(join(dir, "src", file), text);
}

// node_modules: this package as `edgelimit`, the real @upstash/redis, and bun from npm.
writeFileSync(
  join(dir, "package.json"),
  `${JSON.stringify({ name: "peer-suite", private: true, devDependencies: { bun: bunVersion } }, null, 2)}\n`,
);
if (!existsSync(join(dir, "node_modules/.bin/bun"))) {
  execFileSync("npm", ["install", "--no-audit", "--no-fund"], { cwd: dir, stdio: "inherit" });
}
for (const [name, target] of [
  ["edgelimit", root],
  ["@upstash/redis", join(root, "node_modules/@upstash/redis")],
  ["@upstash/ratelimit", join(root, "node_modules/@upstash/ratelimit")],
  ["@upstash/core-analytics", join(root, "node_modules/@upstash/core-analytics")],
]) {
  const link = join(dir, "node_modules", name);
  rmSync(link, { recursive: true, force: true });
  mkdirSync(dirname(link), { recursive: true });
  symlinkSync(relative(dirname(link), target), link);
}

// Four databases, each a redis-server behind the bridge.
const { startBridge, startRedisServer } = await import(join(root, "dist/bridge/index.js"));
const token = `peer-suite-${crypto.randomUUID()}`;
const servers = [];
const bridges = [];
const env = { ...process.env };
try {
  for (const name of ["", "US1_", "APN_", "EU2_"]) {
    const server = await startRedisServer();
    servers.push(server);
    const bridge = await startBridge({ redisUrl: server.url, port: 0, token });
    bridges.push(bridge);
    env[`${name}UPSTASH_REDIS_REST_URL`] = bridge.url;
    env[`${name}UPSTASH_REDIS_REST_TOKEN`] = token;
  }
  const files = readdirSync(join(dir, "src"), { recursive: true })
    .filter((file) => String(file).endsWith(".test.ts"))
    .map((file) => `./src/${file}`);
  const status = await new Promise((done) => {
    const bun = spawn(join(dir, "node_modules/.bin/bun"), ["test", "--timeout", "60000", ...files], {
      cwd: dir,
      env,
      stdio: "inherit",
    });
    bun.on("exit", (code) => done(code ?? 1));
  });
  process.exitCode = status;
} finally {
  for (const bridge of bridges) await bridge.close();
  for (const server of servers) await server.stop();
}
