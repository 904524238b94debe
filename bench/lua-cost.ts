// What one decision costs inside Redis, per algorithm and path, edgelimit against @upstash/ratelimit:
// the commands Redis runs (EVALSHA plus every command the script runs, as INFO commandstats counts
// them) and the server time per EVALSHA (commandstats usec, which includes the script's commands).
//
// Each library's real command is captured from the library itself (a recording stand-in for the
// client), for many identifiers at one injected time, then sent straight to one redis-server over RESP
// (pipelined: the client's speed does not enter the server's figures). Every identifier is sent three
// times: its first decision in a window, a later one (still allowed), and a denied one (limit 2).
// Both libraries run on the same redis-server, interleaved, several rounds; the figures are medians.
//
//   node --import tsx bench/lua-cost.ts [--rounds 7] [--ids 2000] [--redis redis://127.0.0.1:6379]
import { Ratelimit } from "@upstash/ratelimit";
import type { Redis } from "@upstash/redis";
import { startRedisServer } from "../src/bridge/index.js";
import { connectRedis, type RedisConnection } from "../src/bridge/resp.js";
import { stripUnknownShebangFlags } from "../src/bridge/scripts.js";
import { ONE_RULE_SCRIPTS, SCRIPTS } from "../src/engine/generated/scripts.js";
import {
  fixedWindow,
  gcra,
  Limiter,
  type RuleConfig,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from "../src/index.js";

export type LuaAlgo = "fixedWindow" | "slidingWindow" | "tokenBucket" | "gcra" | "slidingLog";
export type LuaPath = "first" | "later" | "denied";
export const LUA_PATHS: readonly LuaPath[] = ["first", "later", "denied"];

/** Each edgelimit algorithm and the peer algorithm it is measured against (none for the sliding log). */
export const LUA_PAIRS: readonly { algo: LuaAlgo; peer?: "fixedWindow" | "slidingWindow" | "tokenBucket" }[] =
  [
    { algo: "fixedWindow", peer: "fixedWindow" },
    { algo: "slidingWindow", peer: "slidingWindow" },
    { algo: "tokenBucket", peer: "tokenBucket" },
    { algo: "gcra", peer: "tokenBucket" },
    { algo: "slidingLog" },
  ];

export interface LuaCostRow {
  algo: LuaAlgo;
  /** The peer's algorithm this row compares with (undefined: no peer). */
  peer?: string;
  path: LuaPath;
  /** Commands per decision, EVALSHA included. */
  commands: number;
  peerCommands?: number;
  /** The commands inside the script, by name, per decision. */
  inner: Record<string, number>;
  peerInner?: Record<string, number>;
  /** usec per EVALSHA: the median over every sample (a batch of BATCH decisions). */
  usec: number;
  peerUsec?: number;
  /** The first and third quartiles of the samples, to judge the spread. */
  usecQuartiles: [number, number];
  peerUsecQuartiles?: [number, number];
}

export interface LuaCostOptions {
  /** Rounds: each sends every identifier through every path, for both libraries. */
  rounds?: number;
  /** Identifiers per round: each is sent once per path. */
  ids?: number;
  /** A redis-server to use; by default one of its own is started (and stopped). */
  redisUrl?: string;
  log?: (line: string) => void;
}

/** Decisions per sample (one RESETSTAT ... INFO commandstats span). */
export const BATCH = 50;
/** Two units per hour: call 1 is a first decision, call 2 a later one, call 3 a denial. */
export const LIMIT = 2;
export const WINDOW = 3_600_000;
/** A round hour plus 17 minutes: mid-window for every algorithm. */
export const NOW = 1_700_000_000_000 - (1_700_000_000_000 % WINDOW) + 17 * 60_000;

export interface Command {
  sha: string;
  keys: string[];
  args: string[];
}

export function ourRule(algo: LuaAlgo, limit: number): RuleConfig {
  switch (algo) {
    case "fixedWindow":
      return fixedWindow({ limit, window: WINDOW });
    case "slidingWindow":
      return slidingWindow({ limit, window: WINDOW });
    case "slidingLog":
      return slidingLog({ limit, window: WINDOW });
    case "tokenBucket":
      return tokenBucket({ capacity: limit, refillRate: 1, interval: WINDOW });
    case "gcra":
      return gcra({ limit: 1, period: WINDOW, burst: limit });
  }
}

export function peerAlgorithm(algo: "fixedWindow" | "slidingWindow" | "tokenBucket", limit: number) {
  switch (algo) {
    case "fixedWindow":
      return Ratelimit.fixedWindow(limit, `${WINDOW} ms`);
    case "slidingWindow":
      return Ratelimit.slidingWindow(limit, `${WINDOW} ms`);
    case "tokenBucket":
      return Ratelimit.tokenBucket(1, `${WINDOW} ms`, limit);
  }
}

/**
 * The EVALSHA each of `ids` would send through edgelimit's Limiter (captured, not rebuilt), for the
 * algorithm's rule of `limit` units per hour at one fixed time.
 */
export async function captureOurs(
  algo: LuaAlgo,
  prefix: string,
  ids: string[],
  limit = LIMIT,
): Promise<Command[]> {
  const out: Command[] = [];
  // fetch answered here: the Limiter speaks the REST protocol itself, so its pipeline bodies are the capture
  const realFetch = globalThis.fetch;
  globalThis.fetch = (async (_url: unknown, init?: { body?: unknown }) => {
    const commands = JSON.parse(String(init?.body)) as string[][];
    const replies = commands.map((cmd) => {
      if (String(cmd[0]).toUpperCase() === "EVALSHA") {
        const n = Number(cmd[2]);
        out.push({ sha: cmd[1]!, keys: cmd.slice(3, 3 + n).map(String), args: cmd.slice(3 + n).map(String) });
      }
      return { result: 1 };
    });
    return new Response(JSON.stringify(replies), { headers: { "content-type": "application/json" } });
  }) as typeof fetch;
  const limiter = new Limiter({
    redis: { url: "http://capture.invalid", token: "capture" },
    prefix,
    rules: { r0: ourRule(algo, limit) },
    denyCache: false,
    clock: () => NOW,
  });
  try {
    for (const id of ids) await limiter.limit(id);
  } finally {
    globalThis.fetch = realFetch;
  }
  if (out.length !== ids.length)
    throw new Error(`lua-cost: captured ${out.length} commands for ${ids.length} ids`);
  return out;
}

/** The EVALSHA each of `ids` would send through @upstash/ratelimit, and its script (shebang flags this Redis knows). */
export async function capturePeer(
  algo: "fixedWindow" | "slidingWindow" | "tokenBucket",
  prefix: string,
  ids: string[],
  limit = LIMIT,
): Promise<{ script: string; commands: Omit<Command, "sha">[] }> {
  let script = "";
  const commands: Omit<Command, "sha">[] = [];
  const redis = {
    evalsha: async () => {
      throw new Error("NOSCRIPT No matching script");
    },
    eval: async (text: string, keys: string[], args: unknown[]) => {
      script = text;
      commands.push({ keys: keys.map(String), args: args.map(String) });
      return algo === "tokenBucket" ? [1, 1, 1] : [1, 1];
    },
  };
  const limiter = new Ratelimit({
    redis: redis as unknown as Redis,
    limiter: peerAlgorithm(algo, limit),
    prefix,
    ephemeralCache: false,
    enableTelemetry: false,
    analytics: false,
  });
  const real = Date.now;
  for (const id of ids) {
    // the peer reads Date.now() before its first await
    Date.now = () => NOW;
    try {
      await limiter.limit(id);
    } finally {
      Date.now = real;
    }
  }
  return { script: stripUnknownShebangFlags(script), commands };
}

const ADMIN = new Set(["info", "config", "config|resetstat", "script", "script|load", "ping", "flushall"]);

interface Stat {
  calls: number;
  usec: number;
}

export function parseStats(info: string): Map<string, Stat> {
  const out = new Map<string, Stat>();
  for (const line of info.split("\n")) {
    const m = /^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/.exec(line.trim());
    if (m && !ADMIN.has(m[1]!)) out.set(m[1]!, { calls: Number(m[2]), usec: Number(m[3]) });
  }
  return out;
}

export interface Sample {
  commands: number;
  inner: Record<string, number>;
  usec: number;
}

/** Sends `commands` (pipelined) between a RESETSTAT and an INFO commandstats: what each cost. */
export async function measure(conn: RedisConnection, commands: Command[]): Promise<Sample> {
  await conn.call("CONFIG", "RESETSTAT");
  const replies = await conn.send(
    commands.map((c) => ["EVALSHA", c.sha, String(c.keys.length), ...c.keys, ...c.args]),
  );
  const failed = replies.find((r) => r instanceof Error);
  if (failed) throw failed;
  const stats = parseStats(String(await conn.call("INFO", "commandstats")));
  const n = commands.length;
  const evalsha = stats.get("evalsha");
  if (!evalsha || evalsha.calls !== n)
    throw new Error(`lua-cost: expected ${n} EVALSHA, saw ${evalsha?.calls}`);
  let total = 0;
  const inner: Record<string, number> = {};
  for (const [name, s] of stats) {
    total += s.calls;
    if (name !== "evalsha") inner[name] = s.calls / n;
  }
  return { commands: total / n, inner, usec: evalsha.usec / n };
}

function quantile(values: number[], q: number): number {
  const s = [...values].sort((a, b) => a - b);
  const at = (s.length - 1) * q;
  const low = Math.floor(at);
  return s[low]! + (s[Math.min(low + 1, s.length - 1)]! - s[low]!) * (at - low);
}
export const median = (values: number[]) => quantile(values, 0.5);
export const quartiles = (values: number[]): [number, number] => [
  quantile(values, 0.25),
  quantile(values, 0.75),
];

/** Loads every script the Limiter may send (the limiter script and the one-rule ones); their SHA-1s. */
export async function loadOurs(conn: RedisConnection): Promise<Set<string>> {
  const shas = new Set<string>();
  for (const script of [SCRIPTS.limiter, ...Object.values(ONE_RULE_SCRIPTS)]) {
    shas.add(String(await conn.call("SCRIPT", "LOAD", script.text)));
  }
  return shas;
}

/** Runs the whole measurement and returns one row per algorithm and path. */
export async function measureLuaCost(options: LuaCostOptions = {}): Promise<LuaCostRow[]> {
  const rounds = options.rounds ?? 7;
  const idCount = options.ids ?? 2000;
  const log = options.log ?? (() => {});
  const server = options.redisUrl ? undefined : await startRedisServer();
  const conn = await connectRedis(options.redisUrl ?? server!.url);
  try {
    const ourShas = await loadOurs(conn);
    const rows: LuaCostRow[] = [];
    for (const pair of LUA_PAIRS) {
      log(`lua-cost: ${pair.algo}${pair.peer ? ` vs the peer's ${pair.peer}` : ""}`);
      const ours: Record<LuaPath, Sample[]> = { first: [], later: [], denied: [] };
      const peer: Record<LuaPath, Sample[]> = { first: [], later: [], denied: [] };
      for (let round = 0; round < rounds; round++) {
        const ids = Array.from({ length: idCount }, (_, i) => `u${round}-${i}`);
        const mine = await captureOurs(pair.algo, `lc-${pair.algo}`, ids);
        if (!mine.every((command) => ourShas.has(command.sha)))
          throw new Error("lua-cost: the Limiter sends a script this file does not load");
        let theirs: Command[] = [];
        if (pair.peer) {
          const captured = await capturePeer(pair.peer, `lc-peer-${pair.algo}`, ids);
          const sha = String(await conn.call("SCRIPT", "LOAD", captured.script));
          theirs = captured.commands.map((c) => ({ sha, ...c }));
        }
        // Every path of one identifier runs in order. Within a path the identifiers go in small batches,
        // ours and the peer's taking turns (who goes first alternates): each batch is one sample, so a
        // batch in which the scheduler took Redis off the CPU (a shared machine) is an outlier the
        // median ignores instead of a few µs smeared over every call.
        for (const path of LUA_PATHS) {
          for (let at = 0, b = 0; at < ids.length; at += BATCH, b++) {
            const order = (round + b) % 2 === 0 ? (["ours", "peer"] as const) : (["peer", "ours"] as const);
            for (const who of order) {
              if (who === "ours") ours[path].push(await measure(conn, mine.slice(at, at + BATCH)));
              else if (theirs.length > 0) peer[path].push(await measure(conn, theirs.slice(at, at + BATCH)));
            }
          }
        }
      }
      for (const path of LUA_PATHS) {
        const o = ours[path];
        const p = peer[path];
        rows.push({
          algo: pair.algo,
          peer: pair.peer,
          path,
          commands: median(o.map((s) => s.commands)),
          inner: o[0]!.inner,
          usec: median(o.map((s) => s.usec)),
          usecQuartiles: quartiles(o.map((s) => s.usec)),
          ...(p.length > 0
            ? {
                peerCommands: median(p.map((s) => s.commands)),
                peerInner: p[0]!.inner,
                peerUsec: median(p.map((s) => s.usec)),
                peerUsecQuartiles: quartiles(p.map((s) => s.usec)),
              }
            : {}),
        });
      }
    }
    return rows;
  } finally {
    await conn.close();
    await server?.stop();
  }
}

const inner = (r: Record<string, number> | undefined) =>
  r
    ? Object.entries(r)
        .map(([name, n]) => `${name.toUpperCase()}${n === 1 ? "" : `×${Number(n.toFixed(2))}`}`)
        .join(" ") || "–"
    : "";

/** The rows as a Markdown table. */
export function luaCostTable(rows: LuaCostRow[]): string {
  const head = [
    "algorithm",
    "path",
    "commands (ours)",
    "commands (peer)",
    "µs/EVALSHA (ours)",
    "µs/EVALSHA (peer)",
    "ratio",
    "script runs (ours)",
    "script runs (peer)",
  ];
  const lines = [`| ${head.join(" | ")} |`, `|${head.map((_, i) => (i < 2 ? "---" : "---:")).join("|")}|`];
  for (const r of rows) {
    const algo = r.peer && r.peer !== r.algo ? `${r.algo} (peer: ${r.peer})` : r.algo;
    lines.push(
      `| ${[
        algo,
        r.path,
        Number(r.commands.toFixed(2)),
        r.peerCommands === undefined ? "–" : Number(r.peerCommands.toFixed(2)),
        r.usec.toFixed(2),
        r.peerUsec === undefined ? "–" : r.peerUsec.toFixed(2),
        r.peerUsec === undefined ? "–" : `${(r.usec / r.peerUsec).toFixed(2)}×`,
        inner(r.inner),
        inner(r.peerInner) || "–",
      ].join(" | ")} |`,
    );
  }
  return lines.join("\n");
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const arg = (name: string) => {
    const i = process.argv.indexOf(`--${name}`);
    return i > 0 ? process.argv[i + 1] : undefined;
  };
  const rows = await measureLuaCost({
    rounds: arg("rounds") ? Number(arg("rounds")) : undefined,
    ids: arg("ids") ? Number(arg("ids")) : undefined,
    redisUrl: arg("redis"),
    log: (line) => process.stderr.write(`${line}\n`),
  });
  console.log(luaCostTable(rows));
}
