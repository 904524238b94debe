#!/usr/bin/env node
// Large replies through the REST bridge against redis-cli on the same redis-server: the RESP reader and
// the JSON writer must stay linear in the reply's size. Prints one line per case; no assertions.
//
//   node --import tsx scripts/bench-bridge-resp.mjs [--runs N]
//   BRIDGE_MODULE=/path/to/other/bridge/index.ts node --import tsx scripts/bench-bridge-resp.mjs  (compare)
import { execFile } from "node:child_process";
import { pathToFileURL } from "node:url";

const runs = Number(process.argv[process.argv.indexOf("--runs") + 1]) || 5;
const modulePath = process.env.BRIDGE_MODULE ?? new URL("../src/bridge/index.ts", import.meta.url).pathname;
const { startBridge, startRedisServer } = await import(pathToFileURL(modulePath).href);
// the RESP client is the bridge's own, beside its entry (not exported by it)
const { connectRedis } = await import(pathToFileURL(modulePath.replace(/index\.ts$/, "resp.ts")).href);

const redis = await startRedisServer();
const bridge = await startBridge({ redisUrl: redis.url, port: 0, token: "bench" });
const admin = await connectRedis(redis.url);

async function fill(key, count, value) {
  for (let i = 0; i < count; i += 10_000) {
    const batch = [];
    for (let j = i; j < Math.min(count, i + 10_000); j++) batch.push(value(j));
    await admin.call("RPUSH", key, ...batch);
  }
}
await fill("list:400k", 400_000, (i) => `item-${i}`);
await fill("list:12mb", 400_000, (i) => `element-${String(i).padStart(10, "0")}-${"x".repeat(12)}`);
await admin.call("SET", "string:16mb", Buffer.alloc(16 * 1024 * 1024, 0x61));

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

/** Runs a program to completion; resolves to its wall time and stdout size (the bridge keeps serving). */
function timed(program, args) {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    execFile(program, args, { encoding: "buffer", maxBuffer: 1 << 30 }, (error, stdout) => {
      if (error) reject(error);
      else resolve({ ms: performance.now() - started, bytes: stdout.length });
    });
  });
}

// Both clients are separate processes reading the whole reply; the bridge runs in this one.
function viaBridge(command, headers = {}) {
  const args = [
    "-s",
    "--fail",
    "-H",
    "authorization: Bearer bench",
    "--data-binary",
    JSON.stringify(command),
  ];
  for (const [name, value] of Object.entries(headers)) args.push("-H", `${name}: ${value}`);
  return timed("curl", [...args, bridge.url]);
}

function viaCli(command) {
  return timed("redis-cli", ["-p", String(redis.port), ...command]);
}

const cases = [
  ["LRANGE 400,000 elements", ["LRANGE", "list:400k", "0", "-1"]],
  ["LRANGE 400,000 elements (12 MB)", ["LRANGE", "list:12mb", "0", "-1"]],
  ["GET 16 MB string", ["GET", "string:16mb"]],
];
console.log(
  `median of ${runs} runs; bridge = curl POST / (JSON body), cli = redis-cli; both separate processes, stdout read whole`,
);
for (const [name, command] of cases) {
  const cli = [];
  const plain = [];
  const b64 = [];
  let sizes;
  for (let i = 0; i < runs; i++) {
    const c = await viaCli(command);
    const p = await viaBridge(command);
    const b = await viaBridge(command, { "upstash-encoding": "base64" });
    cli.push(c.ms);
    plain.push(p.ms);
    b64.push(b.ms);
    sizes = `cli ${(c.bytes / 1e6).toFixed(1)} MB, bridge ${(p.bytes / 1e6).toFixed(1)} MB`;
  }
  const [m, p, b] = [median(cli), median(plain), median(b64)];
  console.log(
    `${name.padEnd(34)} redis-cli ${m.toFixed(0).padStart(5)} ms | bridge ${p.toFixed(0).padStart(5)} ms (${(p / m).toFixed(2)}x)` +
      ` | bridge base64 ${b.toFixed(0).padStart(5)} ms (${(b / m).toFixed(2)}x) | ${sizes}`,
  );
}

await admin.close();
await bridge.close();
await redis.stop();
