// The far side of the network, in a process of its own so that it shares no event loop with the clients
// being measured: the REST bridge (compiled, bench/load.ts) in front of redis-server, and TCP proxies on
// loopback in front of the bridge that hold every chunk DELAY ms in each direction (a one-way delay, no
// bandwidth limit; chunks keep their order, since Node fires timers of one duration in the order set).
// Spawned by bench/harness.ts (startEnv) with an IPC channel: sends { url, ports: { <delay>: port } }, then answers
// "stats" and "reset" with the bridge's request count. A delay may carry a label ("60:b"), so that
// several proxies of one delay (one per region reaching this database) each have a port of their own.
//   node bench/server.mjs COMPILED_DIR REDIS_URL TOKEN DELAY_MS[:LABEL]...
import net from "node:net";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [compiled, redisUrl, token, ...delays] = process.argv.slice(2);
const { startBridge } = await import(pathToFileURL(join(compiled, "bridge", "index.js")).href);
const bridge = await startBridge({ redisUrl, port: 0, token });

function forward(from, to, delay) {
  from.on("data", (chunk) => (delay === 0 ? to.write(chunk) : setTimeout(() => to.write(chunk), delay)));
  from.on("end", () => setTimeout(() => to.end(), delay));
  from.on("error", () => to.destroy());
  from.on("close", () => setTimeout(() => to.destroy(), delay + 1));
}

const ports = {};
for (const spec of delays) {
  const delay = Number(spec.split(":")[0]);
  const server = net.createServer((client) => {
    const upstream = net.connect({ host: "127.0.0.1", port: new URL(bridge.url).port, noDelay: true });
    client.setNoDelay(true);
    forward(client, upstream, delay);
    forward(upstream, client, delay);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  ports[spec] = server.address().port;
}

process.on("message", ({ id, op }) => {
  if (op === "reset") bridge.stats.reset();
  process.send({ id, requests: bridge.stats.requests });
});
process.on("disconnect", () => process.exit(0)); // the parent went away
process.send({ url: bridge.url, ports });
