// Part 2, what one decision costs inside Redis, and the machinery part 8 shares: each library's real
// EVALSHA captured from the library itself (edgelimit's through an in-process fetch, the peer's through
// a recording client), for many identifiers at one injected time, then sent pipelined over RESP to a
// private redis-server (the client's speed does not enter the server's figures). Every identifier is
// sent three times: its first decision in a window, a later one (still allowed), a denied one (limit 2).
import { createHash } from "node:crypto";
import { Ratelimit } from "@upstash/ratelimit";
import type { Redis } from "@upstash/redis";
import type { RedisConnection } from "../src/bridge/resp.js";
import { stripUnknownShebangFlags } from "../src/bridge/scripts.js";
import * as generated from "../src/engine/generated/scripts.js";
import type { LimiterOptions } from "../src/index.js";
import {
  type Algo,
  type OurAlgo,
  ourRule,
  PAIRS,
  type PeerAlgo,
  pairName,
  peerLimiter,
} from "./contestants.js";
import {
  atTime,
  check,
  commandNames,
  commandStats,
  log,
  type Part,
  type Spread,
  spread,
  startCountingRedis,
  startRedis,
  table,
  vs,
} from "./harness.js";
import { edgelimit, upstashEntry } from "./load.js";
import { type RedisBenchmark, redisBenchmark } from "./lua-redis-benchmark.js";

export type LuaPath = "first" | "later" | "denied";
export const LUA_PATHS: readonly LuaPath[] = ["first", "later", "denied"];

/** Decisions per sample (one RESETSTAT ... INFO commandstats span). */
const BATCH = 50;
/** Two units per hour: call 1 is a first decision, call 2 a later one, call 3 a denial. */
export const LIMIT = 2;
const WINDOW = 3_600_000;
/** A round hour plus 17 minutes: mid-window for every algorithm. */
const NOW = 1_700_000_000_000 - (1_700_000_000_000 % WINDOW) + 17 * 60_000;

/** Each library's rule of `limit` units per hour (buckets: `limit` deep, one unit back an hour). */
export const hourly = (limit: number) =>
  [
    { limit, window: WINDOW },
    { capacity: limit, refillRate: 1, interval: WINDOW },
  ] as const;

export interface Command {
  sha: string;
  keys: string[];
  args: string[];
}
export const evalsha = (c: Command) => ["EVALSHA", c.sha, String(c.keys.length), ...c.keys, ...c.args];

/** setup: commands that store an override (or the peer's dynamic limit), sent before, not measured. */
export type Captured = { setup: string[][]; decisions: Command[] };

/**
 * What edgelimit's Limiter sends for `ids`: `before(limiter, id)` for each (not measured), then one
 * decision each, at NOW. Its transport speaks the REST protocol itself, so `fetch` is the capture.
 */
export async function captureOurs(
  options: Omit<LimiterOptions, "redis">,
  ids: string[],
  before?: (limiter: InstanceType<typeof edgelimit.Limiter>, id: string) => Promise<unknown>,
): Promise<Captured> {
  const limiter = new edgelimit.Limiter({
    redis: { url: "http://capture.invalid", token: "capture" },
    denyCache: false,
    clock: () => NOW,
    ...options,
  });
  return capturing(ids, (id) => limiter.limit(id), before && ((id) => before(limiter, id)));
}

/**
 * What edgelimit/upstash's Ratelimit sends for `ids` at NOW, built by the peer's factory of `algo` at
 * `limit` per hour: the peer's API on the engine, captured as the Limiter's own is.
 */
export async function captureEntry(
  algo: Algo,
  limit: number,
  prefix: string,
  ids: string[],
): Promise<Captured> {
  const { Ratelimit: Entry } = upstashEntry;
  const [window, bucket] = hourly(limit);
  const ratelimit = new Entry({
    redis: { url: "http://capture.invalid", token: "capture" },
    limiter:
      algo === "tokenBucket"
        ? Entry.tokenBucket(bucket.refillRate, `${bucket.interval} ms`, bucket.capacity)
        : Entry[algo as "fixedWindow"](window.limit, `${window.window} ms`),
    prefix,
    ephemeralCache: false,
    clock: () => NOW,
  });
  return capturing(ids, (id) => ratelimit.limit(id));
}

/** The text of every generated script, by SHA-1. */
const generatedTexts = new Map<string, string>();
(function visit(value: unknown) {
  if (!value || typeof value !== "object") return;
  if ("text" in value && "sha1" in value) generatedTexts.set(String(value.sha1), String(value.text));
  else for (const inner of Object.values(value)) visit(inner);
})(generated);
/**
 * Scripts a Limiter built for one of its plans (a one-rule variant with overrides on behind the plan's
 * head, src/engine/scripts/overrides.ts's planScript), by SHA-1: the SHA-1 of the generated script each
 * came from. Captures learn them from the SCRIPT LOAD the Limiter sends when Redis lacks one.
 */
const builtFrom = new Map<string, string>();
/** Their texts, by SHA-1: each capture's `setup` loads the ones it used. */
const builtText = new Map<string, string>();

/**
 * Runs `decide` for each of `ids` with `fetch` recording what goes out (replies are stand-ins). A
 * script no capture has seen yet is answered NOSCRIPT once, so that the Limiter sends its text
 * (SCRIPT LOAD, kept in `setup`) before the EVALSHA recorded.
 */
async function capturing(
  ids: string[],
  decide: (id: string) => Promise<unknown>,
  before?: (id: string) => Promise<unknown>,
): Promise<Captured> {
  const setup: string[][] = [];
  const decisions: Command[] = [];
  const loaded = new Set<string>();
  const realFetch = globalThis.fetch;
  globalThis.fetch = (async (_url: unknown, init?: { body?: unknown }) => {
    const body = JSON.parse(String(init?.body)) as unknown[];
    const single = typeof body[0] === "string";
    const commands = (single ? [body] : body) as string[][];
    const replies = commands.map((c) => {
      const cmd = c.map(String);
      const n = Number(cmd[2]);
      if (cmd[0]!.toUpperCase() === "EVALSHA") {
        if (!generatedTexts.has(cmd[1]!) && !builtFrom.has(cmd[1]!))
          return { error: "NOSCRIPT No matching script. Please use EVAL." };
        // (a script built for a plan, loaded already by an earlier capture: this one's setup loads it too)
        if (builtFrom.has(cmd[1]!) && !loaded.has(cmd[1]!)) {
          loaded.add(cmd[1]!);
          setup.push(["SCRIPT", "LOAD", builtText.get(cmd[1]!)!]);
        }
        decisions.push({ sha: cmd[1]!, keys: cmd.slice(3, 3 + n), args: cmd.slice(3 + n) });
        return { result: 1 };
      }
      setup.push(cmd);
      if (cmd[0]!.toUpperCase() === "SCRIPT" && cmd[1]!.toUpperCase() === "LOAD") {
        const text = cmd[2]!;
        const sha = createHash("sha1").update(text).digest("hex");
        const template = [...generatedTexts].find(([, t]) => text.endsWith(`\n${t}`));
        if (!template) throw new Error("the Limiter loads a script built from none this file knows");
        builtFrom.set(sha, template[0]);
        builtText.set(sha, text);
        loaded.add(sha);
        return { result: sha };
      }
      return { result: 1 };
    });
    return new Response(JSON.stringify(single ? replies[0] : replies), {
      headers: { "content-type": "application/json" },
    });
  }) as typeof fetch;
  try {
    if (before) for (const id of ids) await before(id);
    // the stand-in's replies are not decisions: only the command sent matters here
    for (const id of ids) await decide(id).catch(() => undefined);
  } finally {
    globalThis.fetch = realFetch;
  }
  if (decisions.length !== ids.length)
    throw new Error(`captured ${decisions.length} EVALSHA for ${ids.length} identifiers`);
  return { setup, decisions };
}

/** What @upstash/ratelimit sends for `ids` at NOW, through a recording client, and its script. */
export async function capturePeer(
  algo: Algo,
  limit: number,
  prefix: string,
  ids: string[],
  dynamic?: { set: boolean },
): Promise<Captured & { script: string }> {
  let script = "";
  const setup: string[][] = [];
  const decisions: Command[] = [];
  const redis = {
    evalsha: async () => {
      throw new Error("NOSCRIPT No matching script");
    },
    eval: async (text: string, keys: string[], args: unknown[]) => {
      script = text;
      decisions.push({ sha: "", keys: keys.map(String), args: args.map(String) });
      return algo === "tokenBucket" ? [1, 1, 1] : [1, 1];
    },
    set: async (key: string, value: unknown) => {
      setup.push(["SET", key, String(value)]);
      return "OK";
    },
  };
  const limiter = new Ratelimit({
    redis: redis as unknown as Redis,
    limiter: peerLimiter(algo, ...hourly(dynamic?.set ? 1 : limit)),
    prefix,
    ephemeralCache: false,
    enableTelemetry: false,
    analytics: false,
    ...(dynamic ? { dynamicLimits: true } : {}),
  });
  if (dynamic?.set) await limiter.setDynamicLimit({ limit });
  for (const id of ids) await atTime(NOW, () => limiter.limit(id));
  return { script: stripUnknownShebangFlags(script), setup, decisions };
}

/** The generated script `sha` is, or a Limiter built from for one of its plans (builtFrom). */
export const templateOf = (sha: string) => builtFrom.get(sha) ?? sha;

/** Loads every script edgelimit ships, whichever the Limiter picks: SHA-1 → its export's name. */
export async function loadOurs(conn: RedisConnection): Promise<Map<string, string>> {
  const texts = new Map<string, string>();
  const visit = (value: unknown, name: string) => {
    if (!value || typeof value !== "object") return;
    if ("text" in value && typeof value.text === "string") {
      if (!texts.has(value.text)) texts.set(value.text, name);
    } else for (const [key, inner] of Object.entries(value)) visit(inner, key);
  };
  // the top-level exports first: their names are the ones to show
  const exports = Object.entries(generated).sort(([, a], [, b]) => Number("text" in b) - Number("text" in a));
  for (const [name, value] of exports) visit(value, name);
  const shas = new Map<string, string>();
  for (const [text, name] of texts) shas.set(String(await conn.call("SCRIPT", "LOAD", text)), name);
  return shas;
}

/**
 * Names the script edgelimit's captured calls run, by loadOurs' names (a script a Limiter built for
 * its plan by its template's); throws when one is not loaded.
 */
const naming = (shas: Map<string, string>) => (c: Command[]) => {
  if (!c.every((d) => shas.has(templateOf(d.sha))))
    throw new Error("the Limiter sends a script this file does not load");
  const sha = c[0]!.sha;
  return shas.get(templateOf(sha))! + (templateOf(sha) === sha ? "" : " (built for its plan)");
};

/** The peer's captured calls, as EVALSHA of its script loaded. */
export async function asEvalsha(conn: RedisConnection, c: Captured & { script: string }) {
  const sha = String(await conn.call("SCRIPT", "LOAD", c.script));
  return c.decisions.map((d) => ({ ...d, sha }));
}

export interface Sample {
  commands: number;
  inner: Record<string, number>;
  usec: number;
}

/** Sends `commands` (pipelined) between a RESETSTAT and an INFO commandstats: what each cost. */
async function measure(conn: RedisConnection, commands: Command[]): Promise<Sample> {
  await conn.call("CONFIG", "RESETSTAT");
  const failed = (await conn.send(commands.map(evalsha))).find((r) => r instanceof Error);
  if (failed) throw failed;
  const stats = await commandStats(conn);
  const n = commands.length;
  const calls = stats.get("evalsha");
  if (!calls || calls.calls !== n) throw new Error(`expected ${n} EVALSHA, saw ${calls?.calls}`);
  let total = 0;
  const inner: Record<string, number> = {};
  for (const [name, s] of stats) {
    total += s.calls;
    if (name !== "evalsha") inner[name] = s.calls / n;
  }
  return { commands: total / n, inner, usec: calls.usec / n };
}

/**
 * Every path of one identifier in order. Within a path the identifiers go in batches, the contestants
 * taking turns (who goes first rotating from batch to batch): each batch is one sample, so a batch in
 * which the scheduler took Redis off the CPU (a shared machine) is an outlier the median ignores
 * instead of a few µs smeared over every call.
 */
async function replay(conn: RedisConnection, round: number, contestants: Command[][], samples: Samples) {
  for (const path of LUA_PATHS) {
    for (let at = 0, b = 0; at < contestants[0]!.length; at += BATCH, b++) {
      for (let j = 0; j < contestants.length; j++) {
        const i = (j + round + b) % contestants.length;
        samples[i]![path].push(await measure(conn, contestants[i]!.slice(at, at + BATCH)));
      }
    }
  }
}
/** Each contestant's samples, by path. */
type Samples = Record<LuaPath, Sample[]>[];
const newSamples = (n: number): Samples =>
  Array.from({ length: n }, () => ({ first: [], later: [], denied: [] }));

export interface Cost {
  /** Commands per decision, EVALSHA included, and the commands inside the script by name. */
  commands: number;
  inner: Record<string, number>;
  /** usec per EVALSHA over the samples (a batch of BATCH decisions each). */
  usec: Spread;
  /** usec per EVALSHA of each sample, in the order of the turns (every contestant has one per turn). */
  turns: number[];
}
const cost = (samples: Sample[]): Cost => ({
  commands: spread(samples.map((s) => s.commands)).median,
  inner: samples[0]!.inner,
  usec: spread(samples.map((s) => s.usec)),
  turns: samples.map((s) => s.usec),
});

/**
 * `a`'s µs per EVALSHA ÷ `b`'s: the median over the turns of the two batches' ratio within one turn
 * (measured one after the other, so that a slower stretch of a shared machine, its frequency or its
 * neighbours, slows both: the ratio of each side's median alone moved by up to a tenth from run to
 * run where this moves by a few hundredths).
 */
export const pairedRatio = (a: Cost, b: Cost) => spread(a.turns.map((x, j) => x / b.turns[j]!)).median;

/**
 * What each contestant sends for `ids` of `pair` (its setup sent on `conn`), in a fixed order;
 * `ourScript` checks edgelimit's against the scripts loaded and names it.
 */
export type Contestants<P> = (
  pair: P,
  ids: string[],
  conn: RedisConnection,
  ourScript: (c: Command[]) => string,
) => Promise<Command[][]>;

/**
 * For each pair, `rounds` rounds of `idCount` fresh identifiers: what each contestant sends for them,
 * captured (`ourScript` checks edgelimit's against the scripts loaded and names it), replayed in turns;
 * each contestant's cost per path, in the order `contestants` returns them.
 */
export async function measureCosts<P extends { algo: string; peer?: Algo }>(
  pairs: readonly P[],
  rounds: number,
  idCount: number,
  contestants: Contestants<P>,
) {
  const redis = await startRedis();
  try {
    const ourScript = naming(await loadOurs(redis.conn));
    const rows: (P & { path: LuaPath; costs: Cost[] })[] = [];
    for (const pair of pairs) {
      log(`redis cost: ${pair.algo}${pair.peer ? ` vs the peer's ${pair.peer}` : ""}`);
      let samples: Samples | undefined;
      for (let round = 0; round < rounds; round++) {
        const ids = Array.from({ length: idCount }, (_, i) => `u${round}-${i}`);
        const cs = await contestants(pair, ids, redis.conn, ourScript);
        samples ??= newSamples(cs.length);
        await replay(redis.conn, round, cs, samples);
      }
      for (const path of LUA_PATHS) rows.push({ ...pair, path, costs: samples!.map((s) => cost(s[path])) });
    }
    return rows;
  } finally {
    await redis.stop();
  }
}

/**
 * The same contestants' instructions per EVALSHA inside a redis-server under callgrind
 * (startCountingRedis): `idCount` fresh identifiers each, every contestant's first, later and denied
 * calls counted apart, in the order `contestants` returns them. Undefined without valgrind.
 */
export async function countInstructions<P extends { algo: string; peer?: Algo }>(
  pairs: readonly P[],
  idCount: number,
  contestants: Contestants<P>,
) {
  const redis = await startCountingRedis();
  if (!redis) return undefined;
  try {
    const ourScript = naming(await loadOurs(redis.conn));
    const rows: (P & { path: LuaPath; instructions: number[] })[] = [];
    for (const pair of pairs) {
      log(`redis instructions: ${pair.algo}${pair.peer ? ` vs the peer's ${pair.peer}` : ""}`);
      const ids = Array.from({ length: idCount }, (_, i) => `i-${i}`);
      const cs = await contestants(pair, ids, redis.conn, ourScript);
      const counts = LUA_PATHS.map(() => [] as number[]);
      for (const commands of cs) {
        // the calls of every path are the same commands sent again: first, later, denied
        for (const [p] of LUA_PATHS.entries()) {
          const total = await redis.instructions(async () => {
            const failed = (await redis.conn.send(commands.map(evalsha))).find((r) => r instanceof Error);
            if (failed) throw failed;
          });
          counts[p]!.push(Math.round(total / commands.length));
        }
      }
      for (const [p, path] of LUA_PATHS.entries()) rows.push({ ...pair, path, instructions: counts[p]! });
    }
    return rows;
  } finally {
    await redis.stop();
  }
}

/**
 * The pairs of this part: bench/contestants.ts's, then intervalBucket (the peer's token bucket, which
 * edgelimit/upstash runs on) beside the peer's token bucket, as a rule of the Limiter's own.
 */
const LUA_PAIRS: readonly { algo: OurAlgo | "intervalBucket"; peer?: PeerAlgo }[] = [
  ...PAIRS,
  { algo: "intervalBucket", peer: "tokenBucket" },
];

/** edgelimit's rule of `algo` at `limit` per hour (intervalBucket: the buckets' hourly bucket). */
const ourHourly = (algo: OurAlgo | "intervalBucket", limit: number) =>
  algo === "intervalBucket" ? edgelimit.intervalBucket(hourly(limit)[1]) : ourRule(algo, ...hourly(limit));

const measureLuaCost = (rounds: number, idCount: number) =>
  measureCosts(LUA_PAIRS, rounds, idCount, async ({ algo, peer }, ids, conn, ourScript) => {
    const mine = (await captureOurs({ prefix: `lc-${algo}`, rules: { r0: ourHourly(algo, LIMIT) } }, ids))
      .decisions;
    ourScript(mine);
    if (!peer) return [mine];
    const theirs = await asEvalsha(conn, await capturePeer(peer, LIMIT, `lc-peer-${algo}`, ids));
    // edgelimit/upstash, once per peer algorithm (gcra's and intervalBucket's pairs repeat the token
    // bucket's: the entry's token bucket is an intervalBucket)
    if (algo === "gcra" || algo === "intervalBucket") return [mine, theirs];
    const entry = (await captureEntry(peer, LIMIT, `lc-entry-${algo}`, ids)).decisions;
    ourScript(entry);
    return [mine, theirs, entry];
  });
type LuaCostRow = Awaited<ReturnType<typeof measureLuaCost>>[number];

const commands = (c: Cost | undefined) => (c ? Number(c.commands.toFixed(2)) : "–");
/** The largest ratio as the table shows it (two decimals). */
const worst = (ratios: number[]) =>
  ratios.length ? Math.max(...ratios.map((x) => Number(x.toFixed(2)))) : undefined;

export const lua: Part<{ rows: LuaCostRow[]; redisBenchmark: RedisBenchmark }> = {
  name: "lua",
  title: "## 2. Redis commands and µs per decision",
  alone: true,
  run: async ({ smoke }) => ({
    rows: await measureLuaCost(smoke ? 1 : 7, smoke ? 200 : 2000),
    redisBenchmark: await redisBenchmark(smoke ? 1 : 5, smoke ? 10_000 : 100_000),
  }),
  render({ rows, redisBenchmark: rb }) {
    const body = rows.map((r) => [
      pairName(r),
      r.path,
      commands(r.costs[0]),
      commands(r.costs[1]),
      ...vs(r.costs[0]!.usec.median, r.costs[1]?.usec.median, (x) => x.toFixed(2)).slice(0, 2),
      r.costs[1] ? `${pairedRatio(r.costs[0]!, r.costs[1]).toFixed(2)}×` : "–",
      r.costs[2] ? `${commands(r.costs[2])} / ${r.costs[2].usec.median.toFixed(2)}` : "–",
      r.costs[2] && r.costs[1] ? `${pairedRatio(r.costs[2], r.costs[1]).toFixed(2)}×` : "–",
      commandNames(r.costs[0]!.inner),
      r.costs[1] ? commandNames(r.costs[1].inner) : "–",
    ]);
    return `bench/lua-cost.ts: each library's real EVALSHA, captured from the library, sent straight to one redis-server,
both libraries interleaved; commands as INFO commandstats counts them (EVALSHA and every command inside:
Upstash bills both), µs its usec per EVALSHA (median over batches of 50). One rule; ratio is edgelimit ÷ peer,
the median over the turns of the two batches of one turn (paired: a slower stretch of the machine slows
both). "entry": \`edgelimit/upstash\`
built by the peer's factory (its EVALSHA captured from it the same way), its commands and µs, and its ratio to the peer.

${table(["algorithm | path | commands (ours) | commands (peer) | µs/EVALSHA (ours) | µs/EVALSHA (peer) | ratio", "entry: commands / µs | entry ÷ peer | script runs (ours) | script runs (peer)"], body, 2)}

bench/lua-redis-benchmark.ts: the same captured EVALSHA replayed by redis-benchmark (a fresh key each call for
\`first\`, one key for \`later\` and \`denied\`), usec_per_call from INFO commandstats after each run, the two
libraries in turns.

redis-benchmark, ${rb.requests} EVALSHA a run, -P 16, ${rb.rounds} rounds, medians (the ratio: of each round's)${rb.pinned ? ", pinned" : ""}.

${table(
  ["algorithm | path | µs/EVALSHA (ours) | µs/EVALSHA (peer) | ratio"],
  rb.rows.map((r) => [
    pairName(r),
    r.path,
    ...vs(r.ours, r.theirs, (x) => x.toFixed(2)).slice(0, 2),
    `${r.ratio.toFixed(2)}×`,
  ]),
  2,
)}`;
  },
  /** Redis µs per EVALSHA at most the peer's, every algorithm and path, in each of the two tables. */
  goals(r) {
    const lean = r && worst(r.rows.flatMap(({ costs: [o, p] }) => (p ? [pairedRatio(o!, p)] : [])));
    const rb = r && worst(r.redisBenchmark.rows.map((x) => x.ratio));
    return [
      ["bench/lua-cost.ts", lean],
      ["redis-benchmark", rb],
    ].map(([name, x]) => [
      `Redis µs per EVALSHA ≤ 1.0× the peer's, every path (${name}, part 2)`,
      x === undefined ? "–" : `at most ${(x as number).toFixed(2)}×`,
      check(x === undefined ? undefined : (x as number) <= 1),
    ]);
  },
};
