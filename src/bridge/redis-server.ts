/**
 * Spawns a throwaway redis-server for tests and local development: 127.0.0.1 only, no persistence,
 * its own temp directory (or the one given), killed when this process exits even if nobody calls `stop()`.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connectRedis } from "./resp.js";

/** Options for {@link startRedisServer}. */
export interface RedisServerOptions {
  /** TCP port on 127.0.0.1; a free one when omitted. */
  port?: number;
  /** The redis-server executable (default `redis-server` from PATH). */
  bin?: string;
  /** Give up when Redis does not answer PING within this many ms (default 10000). */
  startTimeout?: number;
  /** More redis-server arguments, e.g. `["--cluster-enabled", "yes"]`. */
  args?: readonly string[];
  /** Its working directory, left in place by `stop()` (default: a fresh temp directory that `stop()` deletes). */
  dir?: string;
}

/** A running redis-server. */
export interface RedisServer {
  /** `redis://127.0.0.1:PORT` */
  url: string;
  port: number;
  /** Its process id. */
  pid: number;
  /** Settles when the process exits, whoever stops it: its exit code, or the signal that ended it. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Stops the server (SIGTERM, then SIGKILL after 5 s) and deletes its temp directory (not a `dir` given). */
  stop(): Promise<void>;
}

const INSTALL_HINT =
  "Install Redis: `apt-get install -y redis-server` (Debian/Ubuntu) or `brew install redis` (macOS).";

/** Children still running; killed synchronously if the process exits without stopping them. */
const running = new Set<ChildProcess>();
let exitHookInstalled = false;

/**
 * Starts `redis-server` on 127.0.0.1 and resolves once it answers PING.
 *
 * @example
 * const redis = await startRedisServer();
 * const bridge = await startBridge({ redisUrl: redis.url, port: 0, token: "dev" });
 * // …
 * await bridge.close();
 * await redis.stop();
 */
export async function startRedisServer(options: RedisServerOptions = {}): Promise<RedisServer> {
  // A free port found by binding :0 can be taken before Redis binds it: retry with a fresh one.
  for (let attempt = 1; ; attempt++) {
    const port = options.port ?? (await freePort());
    try {
      return await startOn(port, options);
    } catch (error) {
      const portRace = options.port === undefined && /Address already in use/i.test(String(error));
      if (!portRace || attempt >= 3) throw error;
    }
  }
}

async function startOn(port: number, options: RedisServerOptions): Promise<RedisServer> {
  const dir = options.dir ?? (await mkdtemp(join(tmpdir(), "edgelimit-redis-")));
  const removeDir = () => (options.dir === undefined ? rm(dir, { recursive: true, force: true }) : undefined);
  const bin = options.bin ?? "redis-server";
  const args = ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"];
  args.push(
    "--dir",
    dir,
    "--daemonize",
    "no",
    "--logfile",
    "",
    "--loglevel",
    "warning",
    ...(options.args ?? []),
  );
  const child = spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  const collect = (chunk: Buffer) => {
    output = (output + chunk.toString("utf8")).slice(-4000);
  };
  child.stdout?.on("data", collect);
  child.stderr?.on("data", collect);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("exit", (code, signal) => resolve({ code, signal })),
  );
  const failed = new Promise<never>((_, reject) => {
    child.once("error", (error: NodeJS.ErrnoException) => {
      reject(
        error.code === "ENOENT"
          ? new Error(`\`${bin}\` was not found on PATH. ${INSTALL_HINT}`)
          : new Error(`Cannot start \`${bin}\`: ${error.message}`),
      );
    });
    child.once("exit", (code, signal) => {
      reject(new Error(`redis-server exited during startup (${signal ?? `code ${code}`}): ${output.trim()}`));
    });
  });
  failed.catch(() => {});
  track(child);
  const url = `redis://127.0.0.1:${port}`;
  try {
    await Promise.race([failed, waitForPing(url, options.startTimeout ?? 10_000)]);
  } catch (error) {
    await stopChild(child);
    await removeDir();
    throw error;
  }
  // Do not keep the parent alive on Redis's account; the exit hook still kills it.
  child.unref();
  (child.stdout as net.Socket | null)?.unref();
  (child.stderr as net.Socket | null)?.unref();
  let stopping: Promise<void> | undefined;
  return {
    url,
    port,
    pid: child.pid as number,
    exited,
    stop() {
      stopping ??= stopChild(child).then(removeDir);
      return stopping;
    },
  };
}

async function waitForPing(url: string, timeout: number): Promise<void> {
  const deadline = Date.now() + timeout;
  for (;;) {
    try {
      const conn = await connectRedis(url, { connectTimeout: 1000 });
      await conn.close();
      return;
    } catch (error) {
      if (Date.now() > deadline) {
        throw new Error(
          `redis-server did not answer PING at ${url} within ${timeout} ms: ${(error as Error).message}`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
}

/** A TCP port on 127.0.0.1 that was free a moment ago (bound to :0 and released). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

function track(child: ChildProcess): void {
  running.add(child);
  child.once("exit", () => running.delete(child));
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.once("exit", () => {
      for (const c of running) c.kill("SIGKILL");
    });
  }
}

function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined)
    return Promise.resolve();
  return new Promise((resolve) => {
    const kill = setTimeout(() => child.kill("SIGKILL"), 5000);
    child.once("exit", () => {
      clearTimeout(kill);
      resolve();
    });
    child.kill("SIGTERM");
  });
}
