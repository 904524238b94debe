// The benchmark's world: a private redis-server, the REST bridge in a child process, an admin RESP
// connection (INFO commandstats, CONFIG RESETSTAT, MEMORY USAGE: never through the bridge, so never in
// the bridge's counters), and @upstash/redis clients that all have the same settings.
import { type ChildProcess, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Redis } from "@upstash/redis";
import type { RedisConnection, Reply } from "../src/bridge/index.js";
import { bridge, COMPILED } from "./load.js";

const here = dirname(fileURLToPath(import.meta.url));

export interface BridgeCounters {
  requests: number;
  commands: number;
}

export interface CommandStat {
  calls: number;
  usec: number;
  usecPerCall: number;
}

export interface BenchEnv {
  redisUrl: string;
  redisPort: number;
  bridgeUrl: string;
  token: string;
  admin: RedisConnection;
  /** A new @upstash/redis client, the same settings for every contestant. */
  client(): Redis;
  bridgeStats(): Promise<BridgeCounters>;
  resetBridgeStats(): Promise<void>;
  /** CONFIG RESETSTAT (zeroes INFO commandstats). */
  resetCommandStats(): Promise<void>;
  commandStats(): Promise<Map<string, CommandStat>>;
  call(...args: (string | number)[]): Promise<Reply>;
  close(): Promise<void>;
}

/** Client settings shared by both libraries (auto-pipelining is @upstash/redis's default: on). */
export const CLIENT_SETTINGS = { enableTelemetry: false, enableAutoPipelining: true } as const;

/** Commands the harness itself sends on the admin connection: left out of every cost count. */
export const ADMIN_COMMANDS = new Set([
  "info",
  "config|resetstat",
  "config",
  "memory|usage",
  "memory",
  "scan",
  "ping",
  "script|load",
  "script",
  "flushall",
  "dbsize",
  "command|list",
  "command",
  "hello",
  "client|setname",
]);

export async function startEnv(): Promise<BenchEnv> {
  const redis = await bridge.startRedisServer();
  const token = `bench-${randomUUID()}`;
  let child: ChildProcess | undefined;
  let admin: RedisConnection | undefined;
  try {
    admin = await bridge.connectRedis(redis.url);
    child = spawn(process.execPath, [join(here, "bridge-proc.mjs"), COMPILED, redis.url, token], {
      stdio: ["ignore", "inherit", "inherit", "ipc"],
      cwd: join(here, ".."),
    });
    const proc = child;
    const bridgeUrl = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("bridge child did not start within 30 s")), 30_000);
      proc.once("exit", (code) => reject(new Error(`bridge child exited with ${code}`)));
      proc.on("message", (m: { ready?: boolean; url?: string }) => {
        if (m.ready && m.url) {
          clearTimeout(timer);
          resolve(m.url);
        }
      });
    });
    let nextId = 1;
    const waiting = new Map<number, (c: BridgeCounters) => void>();
    proc.on("message", (m: { id?: number } & BridgeCounters) => {
      if (m.id === undefined) return;
      waiting.get(m.id)?.({ requests: m.requests, commands: m.commands });
      waiting.delete(m.id);
    });
    const ask = (op: string) =>
      new Promise<BridgeCounters>((resolve) => {
        const id = nextId++;
        waiting.set(id, resolve);
        proc.send({ id, op });
      });
    const conn = admin;
    const call = async (...args: (string | number)[]) => conn.call(...args);
    return {
      redisUrl: redis.url,
      redisPort: redis.port,
      bridgeUrl,
      token,
      admin: conn,
      client: () => new Redis({ url: bridgeUrl, token, ...CLIENT_SETTINGS }),
      bridgeStats: () => ask("stats"),
      resetBridgeStats: async () => {
        await ask("reset");
      },
      resetCommandStats: async () => {
        await conn.call("CONFIG", "RESETSTAT");
      },
      commandStats: async () => parseCommandStats(String(await conn.call("INFO", "commandstats"))),
      call,
      close: async () => {
        const exited = new Promise<void>((resolve) => {
          if (proc.exitCode !== null) resolve();
          else proc.once("exit", () => resolve());
        });
        proc.send({ id: 0, op: "close" });
        const kill = setTimeout(() => proc.kill("SIGKILL"), 5000);
        await exited;
        clearTimeout(kill);
        await conn.close();
        await redis.stop();
      },
    };
  } catch (error) {
    child?.kill("SIGKILL");
    await admin?.close();
    await redis.stop();
    throw error;
  }
}

/** `cmdstat_get:calls=1,usec=2,usec_per_call=2.00,...` lines → name → numbers (subcommands as `config|resetstat`). */
export function parseCommandStats(info: string): Map<string, CommandStat> {
  const out = new Map<string, CommandStat>();
  for (const line of info.split(/\r?\n/)) {
    const m = /^cmdstat_([^:]+):calls=(\d+),usec=(\d+),usec_per_call=([\d.]+)/.exec(line);
    if (m) out.set(m[1]!, { calls: Number(m[2]), usec: Number(m[3]), usecPerCall: Number(m[4]) });
  }
  return out;
}

/** Commandstats minus the harness's own admin commands. */
export function workCommands(stats: Map<string, CommandStat>): Map<string, CommandStat> {
  const out = new Map<string, CommandStat>();
  for (const [name, stat] of stats) {
    if (!ADMIN_COMMANDS.has(name) && !ADMIN_COMMANDS.has(name.split("|")[0]!)) out.set(name, stat);
  }
  return out;
}
