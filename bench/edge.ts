// A benchmark that looks like the edge: the clients reach the bridge through a proxy on loopback that
// delays every chunk 0, 5 or 20 ms each way (bench/server.mjs), and decisions arrive as independent
// requests do (open loop, each in a macrotask of its own), in real time. Every run starts at the
// beginning of a window: each contestant's clock is real time shifted to a window boundary.
import { ideal } from "./accuracy.js";
import { contestant, type Entry, labelOf, type Policy } from "./contestants.js";
import type { BenchEnv } from "./env.js";
import { log, percentile, sleep } from "./util.js";

export const LEASE = { max: 50, ttl: "1s" };

export interface EdgeSettings {
  delays: number[];
  /** Seconds of traffic per run of (a), (b), (c), (d). */
  seconds: { hot: number; many: number; flood: number; isolates: number };
  /** (b)'s identifiers, each at 5 requests/s. */
  manyIds: number;
  /** (d)'s Limiter instances, and the one-way delay it runs at. */
  isolates: number[];
  isolatesDelay: number;
}

export interface Measured {
  decisions: number;
  /** Decisions issued per second, as achieved (the schedule's rate unless the machine fell behind). */
  issuedPerSec: number;
  allowed: number;
  /** Share of allowed decisions answered with no request on their path. */
  allowedLocal: number;
  p50: number;
  p99: number;
  httpPer1000: number;
  commandsPer1000: number;
  ideal: number;
  over: number;
  under: number;
  /** Decisions on which Redis failed or timed out. */
  errors: number;
}

export interface EdgeRow {
  scenario: string;
  delay: number;
  isolates: number;
  label: string;
  lease: boolean;
  /** Absent when the contestant could not run (the Limiter has no `lease` option yet). */
  m?: Measured;
  pending?: string;
}

/** One decision due `t` ms after the start, for `id`, in isolate number `isolate`. */
type Arrival = { t: number; id: string; isolate: number };

const HOT: Policy = { limit: 1000, window: 60_000 };
const FLOOD: Policy = { limit: 10, window: 3_600_000 };

export const CONTESTANTS: Entry[] = [
  { lib: "upstash", algo: "fixedWindow" },
  { lib: "upstash", algo: "cachedFixedWindow" },
  { lib: "edgelimit", algo: "fixedWindow" },
  { lib: "edgelimit", algo: "fixedWindow", lease: LEASE },
];

/** `rate` per second for `seconds`, identifiers and isolates taken in turn. */
const arrivals = (rate: number, seconds: number, ids: number, isolates = 1): Arrival[] =>
  Array.from({ length: Math.round(rate * seconds) }, (_, k) => ({
    t: (k * 1000) / rate,
    id: `id${k % ids}`,
    isolate: k % isolates,
  }));

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

async function run(
  env: BenchEnv,
  tag: string,
  scenario: string,
  e: Entry,
  delay: number,
  policy: Policy,
  plan: Arrival[],
  isolates = 1,
): Promise<EdgeRow> {
  const row: EdgeRow = { scenario, delay, isolates, label: labelOf(e), lease: e.lease !== undefined };
  // real time, shifted so that the run starts at the beginning of an hour (so of a minute too)
  const t0 = (Math.ceil(Date.now() / 3_600_000) + 1) * 3_600_000;
  const shift = t0 - Date.now();
  const clock = () => Date.now() + shift;
  const prefix = `edge-${tag}-${scenario[1]}-${delay}-${isolates}-${CONTESTANTS.indexOf(e)}`;
  let cs: ReturnType<typeof contestant>[];
  try {
    const redis = () => env.client(env.proxyUrl(delay));
    cs = Array.from({ length: isolates }, () =>
      contestant(e, { redis: redis(), prefix, policy, cache: "default", clock }),
    );
  } catch (error) {
    if (!e.lease || !(error as Error).message.startsWith("lease")) throw error;
    return { ...row, pending: `pending: ${(error as Error).message}` };
  }
  log(`edge: ${scenario}, ${delay} ms, ${isolates} isolate(s), ${row.label}`);
  // one decision each first, so script loading and connection setup stay out of the counts
  await Promise.all(cs.map((c, i) => c.limit(`warm-up-${i}`)));
  await env.resetCounts();
  const { results, seconds } = await openLoop(plan, (a) => cs[a.isolate]!.limit(a.id));
  await Promise.all(cs.map((c) => c.close()));
  // close() waits for the lease refunds; the peer's writes still under way count too
  await sleep(4 * delay + 100);
  const counts = await env.counts();
  const allowed = results.filter((r) => r.outcome.allowed);
  const latencies = results.map((r) => r.latency);
  const ids = new Set(plan.map((a) => a.id)).size;
  // the exact fixed window over the true call times; (b) never reaches its limit
  const best =
    ids > 1
      ? plan.length
      : ideal(
          "fixed window",
          policy,
          results.map((r) => r.at + t0),
          0,
        ).filter(Boolean).length;
  const per1000 = (n: number) => (n * 1000) / results.length;
  row.m = {
    decisions: results.length,
    issuedPerSec: results.length / seconds,
    allowed: allowed.length,
    allowedLocal: allowed.filter((r) => r.outcome.local).length / Math.max(1, allowed.length),
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    httpPer1000: per1000(counts.http),
    commandsPer1000: per1000(counts.commands),
    ideal: best,
    over: Math.max(0, allowed.length - best),
    under: Math.max(0, best - allowed.length),
    errors: results.filter((r) => r.outcome.error).length,
  };
  return row;
}

export async function runEdge(env: BenchEnv, s: EdgeSettings, tag: string): Promise<EdgeRow[]> {
  const rows: EdgeRow[] = [];
  const many = `(b) ${s.manyIds} identifiers, 5/s each`;
  for (const delay of s.delays) {
    for (const e of CONTESTANTS) {
      rows.push(
        await run(env, tag, "(a) one hot identifier, 200/s", e, delay, HOT, arrivals(200, s.seconds.hot, 1)),
      );
    }
    for (const e of CONTESTANTS.filter((c) => c.algo !== "cachedFixedWindow")) {
      rows.push(await run(env, tag, many, e, delay, HOT, arrivals(5 * s.manyIds, s.seconds.many, s.manyIds)));
      rows.push(
        await run(env, tag, "(c) deny flood, 1000/s", e, delay, FLOOD, arrivals(1000, s.seconds.flood, 1)),
      );
    }
  }
  for (const n of s.isolates) {
    for (const e of CONTESTANTS) {
      const plan = arrivals(200, s.seconds.isolates, 1, n);
      rows.push(
        await run(env, tag, "(d) isolates sharing one limit, 200/s in all", e, s.isolatesDelay, HOT, plan, n),
      );
    }
  }
  return rows;
}
