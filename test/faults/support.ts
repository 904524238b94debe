/**
 * Real processes and real network faults for the fault suite: a redis-server that can be SIGKILLed,
 * SIGSTOPped and restarted on the same port, the REST bridge in a child process (so SIGSTOP freezes
 * it and not the tests), and a TCP hop whose behaviour a test switches at any time.
 */
import { type ChildProcess, spawn } from "node:child_process";
import net from "node:net";
import { type RedisServer, startRedisServer } from "../../src/bridge/index.js";
import { connectRedis } from "../../src/bridge/resp.js";

const children = new Set<ChildProcess>();
process.once("exit", () => {
  for (const child of children) child.kill("SIGKILL");
});

function track(child: ChildProcess): ChildProcess {
  children.add(child);
  child.once("exit", () => children.delete(child));
  return child;
}

export { freePort } from "../../src/bridge/redis-server.js";

/**
 * A redis-server of the test's own (startRedisServer), on a fixed port so it can come back where it
 * was; its process id (from INFO) lets a test SIGKILL, SIGSTOP and SIGCONT it.
 */
export class RedisProcess {
  private server: RedisServer | undefined;
  private pid = 0;

  private constructor(readonly port: number) {}

  static async start(): Promise<RedisProcess> {
    const server = await startRedisServer();
    const redis = new RedisProcess(server.port);
    await redis.adopt(server);
    return redis;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** Starts the server again, with an empty dataset and an empty script cache. */
  async restart(): Promise<void> {
    await this.adopt(await startRedisServer({ port: this.port }));
  }

  private async adopt(server: RedisServer): Promise<void> {
    this.server = server;
    const conn = await connectRedis(server.url);
    try {
      this.pid = Number(/process_id:(\d+)/.exec(String(await conn.call("INFO", "server")))![1]);
    } finally {
      await conn.close();
    }
  }

  /** SIGKILL: the port refuses connections until `restart()`. */
  async kill(): Promise<void> {
    const server = this.server;
    if (!server) return;
    this.server = undefined;
    process.kill(this.pid, "SIGKILL");
    await server.stop(); // waits for the exit, then deletes the server's directory
  }

  signal(signal: "SIGSTOP" | "SIGCONT"): void {
    if (this.server) process.kill(this.pid, signal);
  }

  async stop(): Promise<void> {
    this.signal("SIGCONT");
    await this.kill();
  }
}

/** The REST bridge (src/bridge/cli.ts) in a child process of its own. */
export class BridgeProcess {
  private constructor(
    private readonly child: ChildProcess,
    readonly url: string,
  ) {}

  static async start(redisUrl: string, token: string): Promise<BridgeProcess> {
    const cli = new URL("../../src/bridge/cli.ts", import.meta.url).pathname;
    const child = track(
      spawn(
        process.execPath,
        ["--import", "tsx", cli, "--redis", redisUrl, "--port", "0", "--token", token],
        {
          stdio: ["ignore", "pipe", "pipe"],
        },
      ),
    );
    const url = await new Promise<string>((resolve, reject) => {
      let out = "";
      const timer = setTimeout(() => reject(new Error(`the bridge did not start: ${out}`)), 20_000);
      const read = (chunk: Buffer) => {
        out += chunk.toString();
        const match = /listening on (http:\/\/\S+)/.exec(out);
        if (match) {
          clearTimeout(timer);
          resolve(match[1]!);
        }
      };
      child.stdout?.on("data", read);
      child.stderr?.on("data", read);
      child.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`the bridge exited with ${code}: ${out}`));
      });
    });
    return new BridgeProcess(child, url);
  }

  signal(signal: "SIGSTOP" | "SIGCONT"): void {
    this.child.kill(signal);
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise((resolve) => this.child.once("exit", resolve));
    this.child.kill("SIGCONT");
    this.child.kill("SIGKILL");
    await exited;
  }
}

/**
 * What the hop does with each connection:
 * - "pass": forwards both ways;
 * - "cut": forwards the request, then, when the answer arrives (so the command ran), closes the
 *   client's connection without a byte of it;
 * - "502": forwards the request, drops the answer, and answers 502 Bad Gateway instead;
 * - "stall": accepts the connection and the request, and sends nothing anywhere.
 */
export type HopMode = "pass" | "cut" | "502" | "stall";

/** A TCP hop between a client and an HTTP server, switchable at any moment. */
export class Hop {
  mode: HopMode = "pass";
  /** Connections accepted so far. */
  connections = 0;
  /** Answers the hop swallowed ("cut" and "502"). */
  swallowed = 0;
  private readonly sockets = new Set<net.Socket>();

  private constructor(
    private readonly server: net.Server,
    readonly url: string,
  ) {}

  static async start(target: string): Promise<Hop> {
    const { hostname, port } = new URL(target);
    let hop!: Hop;
    const server = net.createServer((client) => hop.accept(client, hostname, Number(port)));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    hop = new Hop(server, `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`);
    return hop;
  }

  private accept(client: net.Socket, host: string, port: number): void {
    this.connections += 1;
    this.sockets.add(client);
    client.on("error", () => {});
    client.once("close", () => this.sockets.delete(client));
    const upstream = net.connect(port, host);
    this.sockets.add(upstream);
    upstream.on("error", () => client.destroy());
    upstream.once("close", () => {
      this.sockets.delete(upstream);
      client.destroy();
    });
    client.once("close", () => upstream.destroy());
    let stalled = false;
    client.on("data", (chunk) => {
      // in "stall" a request is held, and so is every later one on its connection (whatever the mode
      // by then); a connection that sent nothing while stalled carries requests again once it ends
      if (this.mode === "stall") stalled = true;
      if (!stalled) upstream.write(chunk);
    });
    upstream.on("data", (chunk) => {
      const mode = this.mode;
      if (mode === "pass" || mode === "stall") {
        client.write(chunk);
        return;
      }
      upstream.removeAllListeners("data");
      this.swallowed += 1;
      if (mode === "cut") {
        client.destroy();
      } else {
        const body = JSON.stringify({ error: "bad gateway" });
        client.end(
          `HTTP/1.1 502 Bad Gateway\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`,
        );
      }
      upstream.destroy();
    });
  }

  /** Closes every open connection (a stalled one included). */
  dropAll(): void {
    for (const socket of this.sockets) socket.destroy();
  }

  close(): Promise<void> {
    this.dropAll();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}
