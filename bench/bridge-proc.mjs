// The REST bridge in a process of its own, so the benchmark's clients and the server side do not share
// one event loop (as with Upstash, where the REST server is elsewhere). Plain JavaScript running the
// compiled bridge (bench/load.ts), so no TypeScript loader sits in the server's hot path.
// Spawned by bench/env.ts with an IPC channel: answers "stats", "reset" and "close" messages.
//   node bench/bridge-proc.mjs COMPILED_DIR REDIS_URL TOKEN
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [compiled, redisUrl, token] = process.argv.slice(2);
if (!compiled || !redisUrl || !token || typeof process.send !== "function") {
  console.error(
    "usage (spawned by bench/env.ts with an IPC channel): bridge-proc.mjs COMPILED_DIR REDIS_URL TOKEN",
  );
  process.exit(2);
}

const { startBridge } = await import(pathToFileURL(join(compiled, "bridge", "index.js")).href);
const bridge = await startBridge({ redisUrl, port: 0, token });

process.on("message", (message) => {
  if (message.op === "reset") bridge.stats.reset();
  if (message.op === "close") {
    void bridge.close().then(() => {
      process.send({ id: message.id, requests: 0, commands: 0 });
      process.exit(0);
    });
    return;
  }
  process.send({ id: message.id, requests: bridge.stats.requests, commands: bridge.stats.commands });
});
// The parent went away: do not linger.
process.on("disconnect", () => process.exit(0));
process.send({ ready: true, url: bridge.url });
