// The benchmark's world: a private redis-server; the REST bridge and the delay proxies in front of it in
// a child process (bench/server.mjs); an admin RESP connection (INFO commandstats, MEMORY USAGE: never
// through the bridge, so never counted); and @upstash/redis clients that all have the same settings.
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { join } from "node:path";
import { Redis } from "@upstash/redis";
import { connectRedis, type Reply } from "../src/bridge/resp.js";
import { bridge, COMPILED, ROOT } from "./load.js";

export interface BenchEnv {
  bridgeUrl: string;
  token: string;
  /** The bridge behind a proxy adding `delay` ms each way (or the proxy started as "DELAY:LABEL"). */
  proxyUrl(delay: number | string): string;
  /** A new @upstash/redis client as a user writes it (telemetry off), on the bridge or on `url`. */
  client(url?: string): Redis;
  /** Zeroes the bridge's request counter and INFO commandstats. */
  resetCounts(): Promise<void>;
  /** HTTP requests the bridge received; Redis commands run (EVALSHA and every command inside scripts). */
  counts(): Promise<{ http: number; commands: number }>;
  call(...args: (string | number)[]): Promise<Reply>;
  close(): Promise<void>;
}

/** The harness's own commands (admin connection): left out of every count. */
const ADMIN = /^(info|config|memory|scan|ping|script|flushall|exists|hello|client|command)/;

export async function startEnv(delays: (number | string)[]): Promise<BenchEnv> {
  const redis = await bridge.startRedisServer();
  const token = `bench-${randomUUID()}`;
  const admin = await connectRedis(redis.url);
  const args = [join(ROOT, "bench", "server.mjs"), COMPILED, redis.url, token, ...delays.map(String)];
  const server = spawn(process.execPath, args, { stdio: ["ignore", "inherit", "inherit", "ipc"] });
  const exited = new Promise((resolve) => server.once("exit", resolve));
  const ready = await new Promise<{ url: string; ports: Record<string, number> }>((resolve, reject) => {
    void exited.then((code) => reject(new Error(`bench/server.mjs exited with ${code}`)));
    server.once("message", resolve as (m: unknown) => void);
  });
  let nextId = 1;
  const ask = (op: string) =>
    new Promise<number>((resolve) => {
      const id = nextId++;
      const onMessage = (m: { id: number; requests: number }) => {
        if (m.id !== id) return;
        server.off("message", onMessage);
        resolve(m.requests);
      };
      server.on("message", onMessage);
      server.send({ id, op });
    });
  return {
    bridgeUrl: ready.url,
    token,
    proxyUrl: (delay) => `http://127.0.0.1:${ready.ports[String(delay)]}`,
    client: (url = ready.url) => new Redis({ url, token, enableTelemetry: false }),
    resetCounts: async () => {
      await ask("reset");
      await admin.call("CONFIG", "RESETSTAT");
    },
    counts: async () => {
      const http = await ask("stats");
      const info = String(await admin.call("INFO", "commandstats"));
      let commands = 0;
      for (const [, name, calls] of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
        if (!ADMIN.test(name!)) commands += Number(calls);
      }
      return { http, commands };
    },
    call: (...a) => admin.call(...a),
    close: async () => {
      server.kill();
      await exited;
      await admin.close();
      await redis.stop();
    },
  };
}
