// The client's own CPU per decision: what one sequential limit() costs the process that calls it, with
// the network taken out. `fetch` is answered in-process with the reply Redis really gave: each
// library's request is first sent for real, through a private redis-server and the REST bridge, and
// its HTTP reply (body and headers) recorded; then `fetch` returns `new Response(body, headers)` of that
// reply at once. What is left is the library's work, the Response and reading its body, and the
// timers and promises of one decision.
//
// Both libraries as a user writes them, each on its own `new Redis({ url, token })` (the client's
// defaults: auto-pipelining and telemetry on):
//   edgelimit:  new Limiter({ redis, rules: { r: fixedWindow({ limit: 2, window: "1h" }) } })
//   the peer:   new Ratelimit({ redis, limiter: Ratelimit.fixedWindow(2, "1 h") })
// with every other option at its default (the peer's analytics off, its ephemeralCache on, its
// timeout 5 s; edgelimit's denyCache on, its timeout 1 s and its breaker on). The peer runs twice: on
// the default client, and on one with `enableAutoPipelining: false`, which costs it less CPU; the ratio
// is taken against the cheaper of the two. edgelimit is measured as it ships (bench/load.ts). Paths:
//   later:   a decision after the first in its window, still allowed;
//   denied:  a denial, with edgelimit's `denyCache: false` and the peer's `ephemeralCache: false`, so
//            both libraries ask Redis (by default each answers a repeated denial from memory).
// Each path runs N decisions in a row, one at a time, over 256 identifiers in turn; CPU is
// process.cpuUsage() (user + system) over the N, divided by N. The contestants take turns (who goes
// first rotates by round) after a warm-up; the figures are medians over the rounds. The floor (one
// command stringified, `fetch` answered, its reply read and parsed) is timed in the same rounds.
//
//   node --import tsx bench/cpu.ts [--rounds 9] [--n 4000] [--warmup 3000] [--smoke] [--json]
import { Ratelimit } from "@upstash/ratelimit";
import { Redis } from "@upstash/redis";
import { bridge, edgelimit } from "./load.js";

const { fixedWindow, gcra, Limiter, slidingLog, slidingWindow, tokenBucket } = edgelimit;

export type CpuAlgo = "fixedWindow" | "slidingWindow" | "tokenBucket" | "gcra" | "slidingLog";
type PeerAlgo = "fixedWindow" | "slidingWindow" | "tokenBucket";
export type CpuPath = "later" | "denied";
export const CPU_PATHS: readonly CpuPath[] = ["later", "denied"];

/** Each edgelimit algorithm and the peer's it is measured against (as bench/lua-cost.ts pairs them). */
export const CPU_PAIRS: readonly { algo: CpuAlgo; peer?: PeerAlgo }[] = [
  { algo: "fixedWindow", peer: "fixedWindow" },
  { algo: "slidingWindow", peer: "slidingWindow" },
  { algo: "tokenBucket", peer: "tokenBucket" },
  { algo: "gcra", peer: "tokenBucket" },
  { algo: "slidingLog" },
];

/** The peer's client as a user writes it, or with auto-pipelining off (the peer's cheaper way). */
export type PeerClient = "default" | "noAutoPipelining";
export const PEER_CLIENTS: readonly PeerClient[] = ["default", "noAutoPipelining"];

export interface CpuRow {
  algo: CpuAlgo;
  /** The peer's algorithm this row compares with (undefined: the peer has none). */
  peer?: PeerAlgo;
  path: CpuPath;
  /** CPU µs per decision: the median round, and the first and third quartiles of the rounds. */
  us: number;
  usQuartiles: [number, number];
  /** The same for the peer, by client. */
  peerUs?: Record<PeerClient, number>;
  peerUsQuartiles?: Record<PeerClient, [number, number]>;
  /** The peer's client with the lower median: the one the ratio is taken against. */
  cheaper?: PeerClient;
  /** edgelimit ÷ that client's peer in each round (measured back to back): the lowest and highest. */
  roundRatios?: [number, number];
}

/** The rows, and the floor: the part of a decision no client avoids, timed in the same turns. */
export interface CpuResult {
  rows: CpuRow[];
  /**
   * CPU µs of JSON.stringify of one command, `fetch` answered in-process, `text()` and JSON.parse of
   * the reply: the median round and its quartiles.
   */
  floorUs: number;
  floorQuartiles: [number, number];
}

export interface CpuOptions {
  /** Rounds: each runs every contestant once per path. */
  rounds?: number;
  /** Decisions per contestant, path and round. */
  n?: number;
  /** Decisions per contestant and path before the first round. */
  warmup?: number;
  log?: (line: string) => void;
}

/** Two units per hour: call 2 of an identifier is a later allowed decision, call 3 a denial. */
const LIMIT = 2;
const IDS = Array.from({ length: 256 }, (_, i) => `user:${1000 + i}`);

function ourRule(algo: CpuAlgo) {
  switch (algo) {
    case "fixedWindow":
      return fixedWindow({ limit: LIMIT, window: "1h" });
    case "slidingWindow":
      return slidingWindow({ limit: LIMIT, window: "1h" });
    case "slidingLog":
      return slidingLog({ limit: LIMIT, window: "1h" });
    case "tokenBucket":
      return tokenBucket({ capacity: LIMIT, refillRate: 1, interval: "1h" });
    case "gcra":
      return gcra({ limit: 1, period: "1h", burst: LIMIT });
  }
}

function peerAlgorithm(algo: PeerAlgo) {
  switch (algo) {
    case "fixedWindow":
      return Ratelimit.fixedWindow(LIMIT, "1 h");
    case "slidingWindow":
      return Ratelimit.slidingWindow(LIMIT, "1 h");
    case "tokenBucket":
      return Ratelimit.tokenBucket(1, "1 h", LIMIT);
  }
}

/** An HTTP reply as recorded: what `new Response(body, init)` needs to give it again. */
interface Reply {
  body: string;
  init: { status: number; headers: Record<string, string> };
}

/** Hop-by-hop and per-response headers: not part of what a library reads. */
const DROP = new Set(["connection", "keep-alive", "transfer-encoding", "date", "content-length"]);

// One `fetch` for the whole run, installed before any client exists: it forwards and records while
// capturing, and answers with the current contestant's recorded reply while measuring.
const realFetch = globalThis.fetch;
let mode: "record" | "replay" = "record";
let recorded: Reply[] = [];
let replay: Reply | undefined;
let fetches = 0;
globalThis.fetch = (async (input: RequestInfo | URL, init?: RequestInit) => {
  fetches += 1;
  if (mode === "replay") return new Response(replay!.body, replay!.init);
  const response = await realFetch(input, init);
  const reply: Reply = { body: await response.text(), init: { status: response.status, headers: {} } };
  response.headers.forEach((value, name) => {
    if (!DROP.has(name)) reply.init.headers[name] = value;
  });
  recorded.push(reply);
  return new Response(reply.body, reply.init);
}) as typeof fetch;

interface Outcome {
  allowed: boolean;
  /** Answered by Redis (not from the library's memory, not a failure or timeout). */
  redis: boolean;
}

interface Contestant {
  name: string;
  limit(id: string): Promise<unknown>;
  outcome(result: unknown): Outcome;
  /** The recorded reply of this contestant's path, set during capture. */
  reply?: Reply;
}

function ours(algo: CpuAlgo, path: CpuPath, url: string, token: string): Contestant {
  const limiter = new Limiter({
    redis: new Redis({ url, token }),
    rules: { r: ourRule(algo) },
    ...(path === "denied" ? { denyCache: false as const } : {}),
  });
  return {
    name: `edgelimit ${algo}`,
    limit: (id) => limiter.limit(id),
    outcome: (d) => {
      const { allowed, source } = d as { allowed: boolean; source: string };
      return { allowed, redis: source === "redis" };
    },
  };
}

function peer(algo: PeerAlgo, path: CpuPath, url: string, token: string, client: PeerClient): Contestant {
  const ratelimit = new Ratelimit({
    redis: new Redis({
      url,
      token,
      ...(client === "noAutoPipelining" ? { enableAutoPipelining: false } : {}),
    }),
    limiter: peerAlgorithm(algo),
    ...(path === "denied" ? { ephemeralCache: false as const } : {}),
  });
  return {
    name: `@upstash/ratelimit ${algo} (${client} client)`,
    limit: (id) => ratelimit.limit(id),
    outcome: (r) => {
      const { success, reason } = r as { success: boolean; reason?: string };
      return { allowed: success, redis: reason === undefined };
    },
  };
}

/**
 * Sends calls 1..3 of a fresh identifier for real and records the reply of the path's call (2: later,
 * 3: denied), checking that it was one request and said what the path needs.
 */
async function capture(c: Contestant, path: CpuPath, id: string): Promise<void> {
  mode = "record";
  const calls = path === "later" ? 2 : 3;
  for (let call = 1; call <= calls; call++) {
    recorded = [];
    const outcome = c.outcome(await c.limit(id));
    if (call < calls) continue;
    if (recorded.length !== 1) throw new Error(`cpu: ${c.name} made ${recorded.length} requests, not 1`);
    if (outcome.allowed !== (path === "later") || !outcome.redis)
      throw new Error(`cpu: ${c.name}, call ${call}: ${JSON.stringify(outcome)}, not a ${path} decision`);
    c.reply = recorded[0];
  }
}

/** Runs `n` decisions of `c` one after another on its recorded reply; CPU µs per decision. */
async function turn(c: Contestant, n: number): Promise<number> {
  mode = "replay";
  replay = c.reply;
  fetches = 0;
  const start = process.cpuUsage();
  for (let i = 0; i < n; i++) await c.limit(IDS[i & 255]!);
  const used = process.cpuUsage(start);
  // every decision asked "Redis": none came from a cache
  if (fetches !== n) throw new Error(`cpu: ${c.name} fetched ${fetches} times for ${n} decisions`);
  return (used.user + used.system) / n;
}

/** Warm-up, checking every decision: answered by the recorded reply, and the path's outcome. */
async function warm(c: Contestant, path: CpuPath, n: number): Promise<void> {
  mode = "replay";
  replay = c.reply;
  for (let i = 0; i < n; i++) {
    const outcome = c.outcome(await c.limit(IDS[i & 255]!));
    if (outcome.allowed !== (path === "later") || !outcome.redis)
      throw new Error(`cpu: ${c.name} answered ${JSON.stringify(outcome)} on the ${path} path`);
  }
}

function quantile(values: number[], q: number): number {
  const s = [...values].sort((a, b) => a - b);
  const at = (s.length - 1) * q;
  const low = Math.floor(at);
  return s[low]! + (s[Math.min(low + 1, s.length - 1)]! - s[low]!) * (at - low);
}

/** Runs the whole measurement: one row per algorithm and path. */
export async function measureCpu(options: CpuOptions = {}): Promise<CpuResult> {
  const rounds = options.rounds ?? 9;
  const n = options.n ?? 4000;
  const warmup = options.warmup ?? 3000;
  const log = options.log ?? (() => {});
  const token = `cpu-${crypto.randomUUID()}`;
  const server = await bridge.startRedisServer();
  const rest = await bridge.startBridge({ redisUrl: server.url, port: 0, token });
  // per algorithm and path: edgelimit first, then the peer with each client
  const cells: { algo: CpuAlgo; peer?: PeerAlgo; path: CpuPath; contestants: Contestant[] }[] = [];
  try {
    let fresh = 0;
    for (const pair of CPU_PAIRS) {
      for (const path of CPU_PATHS) {
        const contestants = [ours(pair.algo, path, rest.url, token)];
        for (const client of pair.peer ? PEER_CLIENTS : [])
          contestants.push(peer(pair.peer!, path, rest.url, token, client));
        for (const c of contestants) await capture(c, path, `capture:${fresh++}`);
        cells.push({ ...pair, path, contestants });
      }
    }
  } finally {
    // nothing else runs in this process while it measures
    await rest.close();
    await server.stop();
  }
  const floor = floorOf(rest.url, cells[0]!.contestants[0]!.reply!);
  log(`cpu: replies recorded; warm-up of ${warmup} decisions each`);
  for (const cell of cells) for (const c of cell.contestants) await warm(c, cell.path, warmup);
  await turn(floor, warmup);
  const samples = cells.map((cell) => cell.contestants.map(() => [] as number[]));
  const floorSamples: number[] = [];
  for (let round = 0; round < rounds; round++) {
    log(`cpu: round ${round + 1} of ${rounds}, ${n} decisions each`);
    for (const [i, cell] of cells.entries()) {
      // in turns, who goes first rotating from round to round
      const k = cell.contestants.length;
      for (let j = 0; j < k; j++) {
        const at = (j + round + i) % k;
        samples[i]![at]!.push(await turn(cell.contestants[at]!, n));
      }
    }
    floorSamples.push(await turn(floor, n));
  }
  mode = "record";
  const rows = cells.map((cell, i): CpuRow => {
    const [o, ...peers] = samples[i]!;
    const row: CpuRow = {
      algo: cell.algo,
      peer: cell.peer,
      path: cell.path,
      us: quantile(o!, 0.5),
      usQuartiles: [quantile(o!, 0.25), quantile(o!, 0.75)],
    };
    if (peers.length === 0) return row;
    const byClient = <T>(f: (t: number[]) => T) =>
      Object.fromEntries(PEER_CLIENTS.map((client, j) => [client, f(peers[j]!)])) as Record<PeerClient, T>;
    const peerUs = byClient((t) => quantile(t, 0.5));
    const cheaper = PEER_CLIENTS.reduce((a, b) => (peerUs[b] < peerUs[a] ? b : a));
    const t = peers[PEER_CLIENTS.indexOf(cheaper)]!;
    const ratios = o!.map((x, r) => x / t[r]!);
    return {
      ...row,
      peerUs,
      peerUsQuartiles: byClient((t) => [quantile(t, 0.25), quantile(t, 0.75)]),
      cheaper,
      roundRatios: [Math.min(...ratios), Math.max(...ratios)],
    };
  });
  return {
    rows,
    floorUs: quantile(floorSamples, 0.5),
    floorQuartiles: [quantile(floorSamples, 0.25), quantile(floorSamples, 0.75)],
  };
}

/** The floor as a contestant: one command out, edgelimit's fixed-window reply back, nothing else. */
function floorOf(url: string, reply: Reply): Contestant {
  const command = [["EVALSHA", "0".repeat(40), "1", "edgelimit:{=user:1000}:r:fixedWindow:0", "3600000"]];
  const init = { method: "POST", headers: { authorization: "Bearer token" } };
  return {
    name: "floor",
    reply,
    limit: async () => {
      const response = await fetch(`${url}/pipeline`, { ...init, body: JSON.stringify(command) });
      return JSON.parse(await response.text());
    },
    outcome: () => ({ allowed: true, redis: true }),
  };
}

/** edgelimit ÷ the cheaper of the peer's clients (undefined: no peer). */
export const cpuRatio = (r: CpuRow) => (r.peerUs && r.cheaper ? r.us / r.peerUs[r.cheaper] : undefined);
/** edgelimit ÷ the peer on its client as a user writes it, options at their defaults (undefined: no peer). */
export const cpuRatioDefault = (r: CpuRow) => (r.peerUs ? r.us / r.peerUs.default : undefined);

const us = (x: number) => x.toFixed(1);
const withSpread = (x: number, q: [number, number]) => `${us(x)} (${us(q[0])}–${us(q[1])})`;

/** The rows as a Markdown table, and the floor; "ratio" is edgelimit ÷ the cheaper peer client, median rounds. */
export function cpuTable({ rows, floorUs, floorQuartiles }: CpuResult): string {
  const head = [
    "algorithm",
    "path",
    "edgelimit µs",
    "peer µs, client defaults",
    "peer µs, auto-pipelining off",
    "ratio to the default client",
    "ratio",
    "ratio per round",
  ];
  const lines = [`| ${head.join(" | ")} |`, `|${head.map((_, i) => (i < 2 ? "---" : "---:")).join("|")}|`];
  for (const r of rows) {
    const algo = r.peer && r.peer !== r.algo ? `${r.algo} (peer: ${r.peer})` : r.algo;
    const ratio = cpuRatio(r);
    const peerCell = (client: PeerClient) =>
      r.peerUs && r.peerUsQuartiles ? withSpread(r.peerUs[client], r.peerUsQuartiles[client]) : "–";
    lines.push(
      `| ${[
        algo,
        r.path,
        withSpread(r.us, r.usQuartiles),
        peerCell("default"),
        peerCell("noAutoPipelining"),
        cpuRatioDefault(r) === undefined ? "–" : `${cpuRatioDefault(r)!.toFixed(2)}×`,
        ratio === undefined ? "–" : `${ratio.toFixed(2)}×`,
        r.roundRatios ? `${r.roundRatios[0].toFixed(2)}–${r.roundRatios[1].toFixed(2)}` : "–",
      ].join(" | ")} |`,
    );
  }
  const floor = `Floor, in the same turns: JSON.stringify of one command, \`fetch\` answered in-process, \`text()\` and JSON.parse of the reply: ${withSpread(floorUs, floorQuartiles)} µs.`;
  return `${lines.join("\n")}\n\n${floor}`;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const arg = (name: string) => {
    const i = process.argv.indexOf(`--${name}`);
    return i > 0 ? Number(process.argv[i + 1]) : undefined;
  };
  const smoke = process.argv.includes("--smoke");
  const result = await measureCpu({
    rounds: arg("rounds") ?? (smoke ? 2 : undefined),
    n: arg("n") ?? (smoke ? 200 : undefined),
    warmup: arg("warmup") ?? (smoke ? 100 : undefined),
    log: (line) => process.stderr.write(`${line}\n`),
  });
  console.log(process.argv.includes("--json") ? JSON.stringify(result) : cpuTable(result));
  process.exit(0); // a client's keep-alive sockets would hold the process open a while
}
