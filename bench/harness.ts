// What every part shares: its servers (a private redis-server; the REST bridge and the delay proxies
// in a child process, bench/server.mjs), the ways it times contestants and takes their figures, the
// table row that puts edgelimit beside the peer, a goal and its verdict, and the shape of a part.
import { execFileSync, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "@upstash/redis";
import type { RedisConnection } from "../src/bridge/resp.js";
import { bridge, COMPILED, ROOT, resp } from "./load.js";

// --- figures -------------------------------------------------------------------------------------

/** Nearest rank: a value that was measured (latencies, rounds of decisions/s). */
export function percentile(values: ArrayLike<number>, p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

/** Interpolated between ranks (µs per decision over samples). */
export function quantile(values: number[], q: number): number {
  const s = [...values].sort((a, b) => a - b);
  const at = (s.length - 1) * q;
  const low = Math.floor(at);
  return s[low]! + (s[Math.min(low + 1, s.length - 1)]! - s[low]!) * (at - low);
}

/** The median of samples and their first and third quartiles. */
export type Spread = { median: number; quartiles: [number, number] };
export const spread = (values: number[]): Spread => ({
  median: quantile(values, 0.5),
  quartiles: [quantile(values, 0.25), quantile(values, 0.75)],
});

/** 12345.6 → "12,346"; `digits` decimals. */
export function fmt(n: number, digits = 0): string {
  if (!Number.isFinite(n)) return "–";
  return n.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

/** Milliseconds with a sensible number of decimals. */
export function ms(n: number): string {
  if (!Number.isFinite(n)) return "–";
  const a = Math.abs(n);
  return a < 1 ? n.toFixed(3) : a < 10 ? n.toFixed(2) : n.toFixed(1);
}

export const pct = (x: number) => (Number.isFinite(x) ? `${(x * 100).toFixed(1)} %` : "–");

/** edgelimit ÷ peer, as "1.23×"; "–" when either side is missing. */
export function ratio(a: number | undefined, b: number | undefined): string {
  if (a === undefined || b === undefined || !Number.isFinite(a / b) || b === 0) return "–";
  return `${(a / b).toFixed(2)}×`;
}

/** Three cells: edgelimit's figure, the peer's beside it, and edgelimit ÷ peer. */
export const vs = (ours: number, peer: number | undefined, show: (n: number) => string) => [
  show(ours),
  peer === undefined ? "–" : show(peer),
  ratio(ours, peer),
];

/** A Markdown table (a header entry may name several columns: "a | b"); the first `left` aligned left. */
export function table(head: string[], rows: (string | number)[][], left = 1): string {
  const header = head.flatMap((h) => h.split(" | "));
  const line = (cells: (string | number)[]) =>
    `| ${cells.map((c) => String(c).replace(/\|/g, "\\|")).join(" | ")} |`;
  const align = header.map((_, i) => (i < left ? "---" : "---:"));
  return [line(header), `|${align.join("|")}|`, ...rows.map(line)].join("\n");
}

/** "GET×2 SET": commands by name, per decision. */
export const commandNames = (byName: Record<string, number>) =>
  Object.entries(byName)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([name, n]) => `${name.toUpperCase()}${n === 1 ? "" : `×${Number(n.toFixed(2))}`}`)
    .join(" ") || "–";

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Progress on stderr. */
export function log(message: string): void {
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${message}\n`);
}

// --- timing --------------------------------------------------------------------------------------

/** Calls `sample` once per contestant, starting at `offset` (so who goes first rotates with it). */
export async function inTurns<T>(count: number, offset: number, sample: (i: number) => Promise<T>) {
  const out: T[] = new Array(count);
  for (let j = 0; j < count; j++) {
    const i = (j + offset) % count;
    out[i] = await sample(i);
  }
  return out;
}

/** N workers, each sending its next decision when the previous one is answered, for `ms`. */
export async function closedLoop(decide: (id: string) => Promise<unknown>, inFlight: number, ms: number) {
  const latencies: number[] = [];
  let next = 0;
  const start = performance.now();
  const worker = async () => {
    while (performance.now() - start < ms) {
      const t0 = performance.now();
      await decide(`u${next++ % 1000}`);
      latencies.push(performance.now() - t0);
    }
  };
  await Promise.all(Array.from({ length: inFlight }, worker));
  return { latencies, seconds: (performance.now() - start) / 1000 };
}

/** Fires each arrival at its time, in a macrotask of its own; resolves when every decision is answered. */
export async function openLoop<A extends { t: number }, O>(plan: A[], decide: (a: A) => Promise<O>) {
  const results: { at: number; latency: number; outcome: O }[] = [];
  const pending: Promise<unknown>[] = [];
  const start = performance.now();
  const fire = (a: A) => {
    const t0 = performance.now();
    const done = (outcome: O) => results.push({ at: t0 - start, latency: performance.now() - t0, outcome });
    pending.push(decide(a).then(done));
  };
  for (let i = 0; i < plan.length; ) {
    for (const now = performance.now() - start; i < plan.length && plan[i]!.t <= now; i++) {
      const a = plan[i]!;
      setImmediate(() => fire(a));
    }
    if (i < plan.length) await sleep(plan[i]!.t - (performance.now() - start));
  }
  await sleep(0);
  await Promise.all(pending);
  return { results: results.sort((x, y) => x.at - y.at), seconds: (performance.now() - start) / 1000 };
}

/** Runs `call` with Date.now() reading `now`: the peer reads the time only before its first await. */
export function atTime<T>(now: number | undefined, call: () => T): T {
  const real = Date.now;
  if (now !== undefined) Date.now = () => now;
  try {
    return call();
  } finally {
    Date.now = real;
  }
}

// --- servers -------------------------------------------------------------------------------------

/** The harness's own commands (its admin connection): left out of every count. */
const ADMIN = /^(info|config|memory|scan|ping|script|flushall|hello|client|command)/;

/** INFO commandstats by command, the harness's own left out: calls and usec since the last RESETSTAT. */
export async function commandStats(conn: RedisConnection) {
  const out = new Map<string, { calls: number; usec: number }>();
  const info = String(await conn.call("INFO", "commandstats"));
  for (const [, name, calls, usec] of info.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)) {
    if (!ADMIN.test(name!)) out.set(name!, { calls: Number(calls), usec: Number(usec) });
  }
  return out;
}

/** A private redis-server and an admin connection to it (never through the bridge, so never counted). */
export async function startRedis() {
  const server = await bridge.startRedisServer();
  const conn = await resp.connectRedis(server.url);
  return {
    ...server,
    conn,
    stop: async () => {
      await conn.close();
      await server.stop();
    },
  };
}

/**
 * A private redis-server under valgrind's callgrind that counts the instructions it runs inside
 * EVALSHA only (evalShaCommand: what INFO commandstats times), and `instructions(send)`: how many
 * `send` made it run. Counts repeat for the same binary and commands, however busy the machine is.
 * Undefined when valgrind is not installed.
 */
export async function startCountingRedis() {
  try {
    execFileSync("valgrind", ["--version"], { stdio: "ignore" });
  } catch {
    return undefined;
  }
  const dir = mkdtempSync(join(tmpdir(), "edgelimit-callgrind-"));
  const wrapper = join(dir, "redis-server");
  writeFileSync(
    wrapper,
    `#!/bin/sh\nexec valgrind --tool=callgrind --toggle-collect=evalShaCommand --callgrind-out-file=${dir}/out.%p -q redis-server "$@"\n`,
    { mode: 0o755 },
  );
  const server = await bridge.startRedisServer({ bin: wrapper, startTimeout: 60_000 });
  const conn = await resp.connectRedis(server.url);
  const control = (flag: string) =>
    execFileSync("callgrind_control", [flag, String(server.pid)], { stdio: "ignore" });
  let dumps = 0;
  return {
    conn,
    async instructions(send: () => Promise<void>): Promise<number> {
      control("-z");
      await send();
      control("-d");
      dumps++;
      const text = readFileSync(join(dir, `out.${server.pid}.${dumps}`), "utf8");
      const total = /^(?:summary|totals): (\d+)/m.exec(text);
      if (!total) throw new Error("callgrind wrote no total");
      return Number(total[1]);
    },
    stop: async () => {
      await conn.close();
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export type BenchEnv = Awaited<ReturnType<typeof startEnv>>;

/** A private redis-server with the REST bridge in front of it, and a delay proxy per entry of `delays`. */
export async function startEnv(delays: (number | string)[] = []) {
  const redis = await startRedis();
  const token = `bench-${randomUUID()}`;
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
    /** The bridge behind a proxy adding `delay` ms each way (or the proxy started as "DELAY:LABEL"). */
    proxyUrl: (delay: number | string) => `http://127.0.0.1:${ready.ports[String(delay)]}`,
    /** A new @upstash/redis client as a user writes it (telemetry off), on the bridge or on `url`. */
    client: (url = ready.url) => new Redis({ url, token, enableTelemetry: false }),
    /** Zeroes the bridge's request counter and INFO commandstats. */
    resetCounts: async () => {
      await ask("reset");
      await redis.conn.call("CONFIG", "RESETSTAT");
    },
    /** HTTP requests the bridge received; Redis commands run (EVALSHA and every command inside scripts). */
    counts: async () => {
      const http = await ask("stats");
      const byName: Record<string, number> = {};
      for (const [name, s] of await commandStats(redis.conn)) byName[name.toUpperCase()] = s.calls;
      return { http, commands: Object.values(byName).reduce((a, b) => a + b, 0), byName };
    },
    call: (...a: (string | number)[]) => redis.conn.call(...a),
    close: async () => {
      server.kill();
      await exited;
      await redis.stop();
    },
  };
}

// --- parts, goals, the report ---------------------------------------------------------------------

/** A goal row: what is promised, what was measured, and "met", "**not met**", "pending" or "shown". */
export type Goal = [goal: string, measured: string, verdict: string];
export const check = (ok: boolean | undefined) => (ok === undefined ? "pending" : ok ? "met" : "**not met**");

export interface RunContext {
  smoke: boolean;
  /** Unique per run: a prefix for keys. */
  tag: string;
  /** The main redis-server and bridge (bench/run.ts's); a part run in a process of its own has none. */
  env: BenchEnv;
}

export type ReportContext = { smoke: boolean; versions: { ratelimit: string } };

/** One part of BENCHMARKS.md: how it measures, how its section reads, and the goals it states. */
export interface Part<R = unknown> {
  /** Its name for `--only`. */
  name: string;
  /** Its section's heading. */
  title: string;
  /** Measured in a process of its own (bench/run.ts --part NAME), its result passed back as JSON. */
  alone?: boolean;
  /** Left out of a smoke run. */
  fullOnly?: boolean;
  run(ctx: RunContext): Promise<R>;
  /** Its section under the heading. */
  render(r: R, ctx: ReportContext): string;
  /** Its goals; `r` is undefined when it was not run or failed. */
  goals?(r: R | undefined): Goal[];
}

/** `--name value` from the command line, or undefined. */
export function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : undefined;
}
