// Part 7, the client's own CPU per decision: what one sequential limit() costs the process that calls
// it, with the network taken out. Each library's request is first sent for real (a private
// redis-server behind the REST bridge) and its HTTP reply recorded; then `fetch` returns
// `new Response(body, headers)` of that reply at once. Both libraries as a user writes them, each on
// its own `new Redis({ url, token })`, every other option at its default (paths "later" and "denied":
// the section below). Run in a process of its own: only the decisions it times run there.
import { Ratelimit } from "@upstash/ratelimit";
import { Redis } from "@upstash/redis";
import { type Algo, type OurAlgo, ourRule, PAIRS, pairName, peerLimiter } from "./contestants.js";
import {
  type BenchEnv,
  check,
  type Goal,
  inTurns,
  log,
  type Part,
  type Spread,
  spread,
  startEnv,
  table,
} from "./harness.js";
import { edgelimit } from "./load.js";
import { hourly, LIMIT } from "./lua-cost.js";

type CpuPath = "later" | "denied";
const PATHS: readonly CpuPath[] = ["later", "denied"];
/** The peer's client as a user writes it, or with auto-pipelining off (the peer's cheaper way). */
type PeerClient = "default" | "noAutoPipelining";
const PEER_CLIENTS: readonly PeerClient[] = ["default", "noAutoPipelining"];
const IDS = Array.from({ length: 256 }, (_, i) => `user:${1000 + i}`);

export interface CpuRow {
  algo: OurAlgo;
  /** The peer's algorithm this row compares with (undefined: the peer has none). */
  peer?: Algo;
  path: CpuPath;
  /** CPU µs per decision over the rounds: edgelimit's, and the peer's by client. */
  us: Spread;
  peerUs?: Record<PeerClient, Spread>;
  /** The peer's client with the lower median: the one the ratio is taken against. */
  cheaper?: PeerClient;
  /** edgelimit ÷ that client's peer in each round (measured back to back): the lowest and highest. */
  roundRatios?: [number, number];
}

/** The rows, and the floor (timed in the same turns): the part of a decision no client avoids. */
type CpuResult = { rows: CpuRow[]; floor: Spread };

/** An HTTP reply as recorded: what `new Response(body, init)` needs to give it again. */
interface Reply {
  body: string;
  init: { status: number; headers: Record<string, string> };
}

/** Hop-by-hop and per-response headers: not part of what a library reads. */
const DROP = new Set(["connection", "keep-alive", "transfer-encoding", "date", "content-length"]);

let mode: "record" | "replay" = "record";
let recorded: Reply[] = [];
let replay: Reply | undefined;
let fetches = 0;

/** One `fetch` for the whole run, installed before any client exists: it forwards and records while capturing, and answers with the current contestant's recorded reply while measuring. */
function installFetch() {
  const realFetch = globalThis.fetch;
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
}

interface Contestant {
  name: string;
  limit(id: string): Promise<unknown>;
  /** Allowed, and answered by Redis (not from the library's memory, not a failure or timeout). */
  outcome(result: unknown): { allowed: boolean; redis: boolean };
  /** The recorded reply of this contestant's path, set during capture. */
  reply?: Reply;
}

/** edgelimit's Limiter for `algo` (no `client`), or the peer's Ratelimit on that client. */
function contestant(algo: Algo, path: CpuPath, env: BenchEnv, client?: PeerClient): Contestant {
  const { bridgeUrl: url, token } = env;
  const denied = path === "denied";
  if (!client) {
    const rules = { r: ourRule(algo, ...hourly(LIMIT)) };
    const limiter = new edgelimit.Limiter({
      redis: new Redis({ url, token }),
      rules,
      ...(denied ? { denyCache: false as const } : {}),
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
  const pipelining = client === "noAutoPipelining" ? { enableAutoPipelining: false } : {};
  const ratelimit = new Ratelimit({
    redis: new Redis({ url, token, ...pipelining }),
    limiter: peerLimiter(algo, ...hourly(LIMIT)),
    ...(denied ? { ephemeralCache: false as const } : {}),
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

/** Throws unless `c` answered a decision of `path`, from Redis. */
function expect(c: Contestant, path: CpuPath, result: unknown, what: string) {
  const outcome = c.outcome(result);
  if (outcome.allowed !== (path === "later") || !outcome.redis)
    throw new Error(`cpu: ${c.name}, ${what}: ${JSON.stringify(outcome)}, not a ${path} decision`);
}

/** Sends calls 1..3 of a fresh identifier for real and records the one request of the path's call. */
async function capture(c: Contestant, path: CpuPath, id: string): Promise<void> {
  mode = "record";
  const calls = path === "later" ? 2 : 3;
  for (let call = 1; call <= calls; call++) {
    recorded = [];
    const result = await c.limit(id);
    if (call < calls) continue;
    if (recorded.length !== 1) throw new Error(`cpu: ${c.name} made ${recorded.length} requests, not 1`);
    expect(c, path, result, `call ${call}`);
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

/** One row per algorithm and path: each cell's contestants in turns, who goes first rotating by round. */
async function measureCpu(rounds: number, n: number, warmup: number): Promise<CpuResult> {
  installFetch();
  const env = await startEnv();
  // per algorithm and path: edgelimit first, then the peer with each client
  const cells: { algo: OurAlgo; peer?: Algo; path: CpuPath; contestants: Contestant[] }[] = [];
  try {
    let fresh = 0;
    for (const pair of PAIRS) {
      for (const path of PATHS) {
        const contestants = [contestant(pair.algo, path, env)];
        for (const client of pair.peer ? PEER_CLIENTS : [])
          contestants.push(contestant(pair.peer!, path, env, client));
        for (const c of contestants) await capture(c, path, `capture:${fresh++}`);
        cells.push({ ...pair, path, contestants });
      }
    }
  } finally {
    await env.close(); // nothing else runs in this process while it measures
  }
  const floor = floorOf(env.bridgeUrl, cells[0]!.contestants[0]!.reply!);
  log(`cpu: replies recorded; warm-up of ${warmup} decisions each`);
  for (const cell of cells) {
    for (const c of cell.contestants) {
      mode = "replay";
      replay = c.reply;
      for (let i = 0; i < warmup; i++) expect(c, cell.path, await c.limit(IDS[i & 255]!), "warm-up");
    }
  }
  await turn(floor, warmup);
  const samples = cells.map((cell) => cell.contestants.map(() => [] as number[]));
  const floorSamples: number[] = [];
  for (let round = 0; round < rounds; round++) {
    log(`cpu: round ${round + 1} of ${rounds}, ${n} decisions each`);
    for (const [i, cell] of cells.entries()) {
      const times = await inTurns(cell.contestants.length, round + i, (k) => turn(cell.contestants[k]!, n));
      for (const [k, t] of times.entries()) samples[i]![k]!.push(t);
    }
    floorSamples.push(await turn(floor, n));
  }
  mode = "record";
  const rows = cells.map(({ algo, peer, path }, i): CpuRow => {
    const [o, ...peers] = samples[i]!;
    if (peers.length === 0) return { algo, peer, path, us: spread(o!) };
    const peerUs = Object.fromEntries(PEER_CLIENTS.map((c, j) => [c, spread(peers[j]!)])) as Record<
      PeerClient,
      Spread
    >;
    const cheaper = PEER_CLIENTS.reduce((a, b) => (peerUs[b].median < peerUs[a].median ? b : a));
    const t = peers[PEER_CLIENTS.indexOf(cheaper)]!;
    const ratios = o!.map((x, r) => x / t[r]!);
    return {
      algo,
      peer,
      path,
      us: spread(o!),
      peerUs,
      cheaper,
      roundRatios: [Math.min(...ratios), Math.max(...ratios)],
    };
  });
  return { rows, floor: spread(floorSamples) };
}

/** edgelimit ÷ the cheaper of the peer's clients, or ÷ the peer as a user writes it (undefined: no peer). */
const cheaperRatio = (r: CpuRow) =>
  r.peerUs && r.cheaper ? r.us.median / r.peerUs[r.cheaper].median : undefined;
const defaultRatio = (r: CpuRow) => (r.peerUs ? r.us.median / r.peerUs.default.median : undefined);
const us = (s: Spread) => `${s.median.toFixed(1)} (${s.quartiles.map((q) => q.toFixed(1)).join("–")})`;
const times = (x: number | undefined) => (x === undefined ? "–" : `${x.toFixed(2)}×`);

export const cpu: Part<CpuResult> = {
  name: "cpu",
  title: "## 7. Client CPU per decision",
  alone: true,
  run: ({ smoke }) => (smoke ? measureCpu(2, 200, 100) : measureCpu(9, 4000, 3000)),
  render({ rows, floor }) {
    const body = rows.map((r) => [
      pairName(r),
      r.path,
      us(r.us),
      r.peerUs ? us(r.peerUs.default) : "–",
      r.peerUs ? us(r.peerUs.noAutoPipelining) : "–",
      times(defaultRatio(r)),
      times(cheaperRatio(r)),
      r.roundRatios ? `${r.roundRatios[0].toFixed(2)}–${r.roundRatios[1].toFixed(2)}` : "–",
    ]);
    return `bench/cpu.ts, in a process of its own: the CPU (user + system, \`process.cpuUsage()\`) one sequential \`limit()\`
costs the calling process, with \`fetch\` answered in-process: each library's request is first sent for real
(a private redis-server behind the REST bridge), its HTTP reply recorded, and \`fetch\` then returns
\`new Response(body, headers)\` of that reply at once; what remains is the library, the Response and its
body, and the decision's timers and promises. One rule (2 per hour), 256 identifiers in turn. Both libraries
as a user writes them, each on its own \`new Redis({ url, token })\`, options at their defaults (the peer's
analytics off, ephemeralCache on, timeout 5 s; edgelimit's deny cache on, timeout 1 s, breaker on); the peer
also with \`enableAutoPipelining: false\`, its cheaper client. "later": an allowed decision after the first in
its window; "denied": a denial, with edgelimit's \`denyCache: false\` and the peer's \`ephemeralCache: false\` so
both ask Redis. Every timed decision made one \`fetch\`. Contestants take turns after a warm-up; µs is the
median round (quartiles in brackets); "ratio to the default client" is edgelimit ÷ the peer as a user writes
it; "ratio" is edgelimit ÷ the cheaper peer client, and per round against it. Of edgelimit's own work, about
2 µs is the AbortSignal each request carries (Node 20's cost of creating one) so that a request nobody waits
for any more is aborted; the peer's timeout returns while its request goes on.

${table(["algorithm | path | edgelimit µs | peer µs, client defaults | peer µs, auto-pipelining off", "ratio to the default client | ratio | ratio per round"], body, 2)}

Floor, in the same turns: JSON.stringify of one command, \`fetch\` answered in-process, \`text()\` and JSON.parse of the reply: ${us(floor)} µs.`;
  },
  /** Per algorithm the peer has: against the peer as a user writes it, and against its cheaper client (a stricter bar). */
  goals(r) {
    return PAIRS.filter((pair) => pair.peer).flatMap((pair) => {
      const mine = r ? r.rows.filter((x) => x.algo === pair.algo) : [];
      const against = [
        ["its default client", defaultRatio],
        ["its cheaper client (auto-pipelining off)", cheaperRatio],
      ] as const;
      return against.map(([client, ratioOf]): Goal => {
        const ratios = mine.map((x) => [x.path, ratioOf(x)] as const);
        const known = ratios.length > 0 && ratios.every(([, x]) => x !== undefined);
        return [
          `CPU µs per decision ≤ 1.0× the peer's on ${client}, ${pairName(pair)}, every path (part 7)`,
          known ? ratios.map(([path, x]) => `${path} ${x!.toFixed(2)}×`).join(", ") : "–",
          check(known ? ratios.every(([, x]) => x! <= 1) : undefined),
        ];
      });
    });
  },
};
