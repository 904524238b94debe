// TCP proxies on loopback that hold every chunk for DELAY ms in each direction before passing it on
// (a one-way network delay; no bandwidth limit; chunks keep their order, since Node fires timers of one
// duration in the order they were set). A process of its own, so its timers share no event loop with
// the clients being measured. Spawned by bench/env.ts (IPC): sends {"<delay>": port, …}.
//   node bench/delay-proxy.mjs TARGET_PORT DELAY_MS...
import net from "node:net";

const [target, ...delays] = process.argv.slice(2).map(Number);

function forward(from, to, delay) {
  from.on("data", (chunk) => (delay === 0 ? to.write(chunk) : setTimeout(() => to.write(chunk), delay)));
  from.on("end", () => setTimeout(() => to.end(), delay));
  from.on("error", () => to.destroy());
  from.on("close", () => setTimeout(() => to.destroy(), delay + 1));
}

const ports = {};
for (const delay of delays) {
  const server = net.createServer((client) => {
    client.setNoDelay(true);
    const upstream = net.connect({ host: "127.0.0.1", port: target, noDelay: true });
    forward(client, upstream, delay);
    forward(upstream, client, delay);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  ports[delay] = server.address().port;
}
process.send(ports);
process.on("disconnect", () => process.exit(0)); // the parent went away
