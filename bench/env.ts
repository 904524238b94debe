// The benchmark's world: a private redis-server, the REST bridge in a child process, delay proxies in
// front of it in another, an admin RESP connection (INFO commandstats, MEMORY USAGE: never through the
// bridge, so never counted), and @upstash/redis clients that all have the same settings.
import { type ChildProcess, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { Redis } from "@upstash/redis";
import type { Reply } from "../src/bridge/index.js";
import { bridge, COMPILED, ROOT } from "./load.js";

export interface Counts {
  /** HTTP requests the bridge received. */
  http: number;
  /** Redis commands run (EVALSHA and every command inside scripts), from INFO commandstats. */
  commands: number;
  evalsha: number;
  /** usec_per_call of EVALSHA. */
  usecPerEvalsha: number;
}

export interface BenchEnv {
  redisPort: number;
  bridgeUrl: string;
  token: string;
  /** The bridge behind a proxy adding `delay` ms each way. */
  proxyUrl(delay: number): string;
  /** A new @upstash/redis client (the bridge directly, or `url`). */
  client(url?: string): Redis;
  /** Zeroes the bridge's counter and INFO commandstats. */
  resetCounts(): Promise<void>;
  counts(): Promise<Counts>;
  call(...args: (string | number)[]): Promise<Reply>;
  close(): Promise<void>;
}

/** Both libraries' client, as a user writes it (auto-pipelining is @upstash/redis's default). */
export const CLIENT_SETTINGS = { enableTelemetry: false, enableAutoPipelining: true } as const;

/** The harness's own commands (admin connection): left out of every count. */
const ADMIN = /^(info|config|memory|scan|ping|script|flushall|exists|hello|client|command)/;

/** A child process with an IPC channel; resolves to its first message. */
async function child(file: string, args: string[]): Promise<[ChildProcess, unknown]> {
  const proc = spawn(process.execPath, [`${ROOT}/bench/${file}`, ...args], {
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  const first = await new Promise((resolve, reject) => {
    proc.once("exit", (code) => reject(new Error(`bench/${file} exited with ${code}`)));
    proc.once("message", resolve);
  });
  return [proc, first];
}

export async function startEnv(delays: number[]): Promise<BenchEnv> {
  const redis = await bridge.startRedisServer();
  const token = `bench-${randomUUID()}`;
  const admin = await bridge.connectRedis(redis.url);
  const [bridgeProc, ready] = await child("bridge-proc.mjs", [COMPILED, redis.url, token]);
  const bridgeUrl = (ready as { url: string }).url;
  const delayArgs = [new URL(bridgeUrl).port, ...delays.map(String)];
  const [proxyProc, ports] = (await child("delay-proxy.mjs", delayArgs)) as [
    ChildProcess,
    Record<string, number>,
  ];
  let nextId = 1;
  const ask = (op: string) =>
    new Promise<number>((resolve) => {
      const id = nextId++;
      const onMessage = (m: { id: number; requests: number }) => {
        if (m.id !== id) return;
        bridgeProc.off("message", onMessage);
        resolve(m.requests);
      };
      bridgeProc.on("message", onMessage);
      bridgeProc.send({ id, op });
    });
  return {
    redisPort: redis.port,
    bridgeUrl,
    token,
    proxyUrl: (delay) => `http://127.0.0.1:${ports[delay]}`,
    client: (url = bridgeUrl) => new Redis({ url, token, ...CLIENT_SETTINGS }),
    resetCounts: async () => {
      await ask("reset");
      await admin.call("CONFIG", "RESETSTAT");
    },
    counts: async () => {
      const http = await ask("stats");
      const info = String(await admin.call("INFO", "commandstats"));
      let commands = 0;
      let evalsha = 0;
      let usecPerEvalsha = Number.NaN;
      for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=\d+,usec_per_call=([\d.]+)/gm)) {
        if (ADMIN.test(m[1]!)) continue;
        commands += Number(m[2]);
        if (m[1] === "evalsha") [evalsha, usecPerEvalsha] = [Number(m[2]), Number(m[3])];
      }
      return { http, commands, evalsha, usecPerEvalsha };
    },
    call: (...args) => admin.call(...args),
    close: async () => {
      proxyProc.kill();
      const exited = new Promise((resolve) => bridgeProc.once("exit", resolve));
      bridgeProc.send({ id: 0, op: "close" });
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
      bridgeProc.kill("SIGKILL");
      await admin.close();
      await redis.stop();
    },
  };
}
