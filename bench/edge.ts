// A benchmark that looks like the edge: the clients reach the bridge through a proxy on loopback that
// delays every chunk by 0, 5 or 20 ms each way (bench/delay-proxy.mjs), and decisions arrive as
// independent requests do (open loop, each in a macrotask of its own), in real time. Every run starts
// at the beginning of a window: each contestant's clock is real time shifted to a window boundary.

import { ideal } from "./accuracy.js";
import { contestant, type Entry, labelOf, type Outcome, type Policy } from "./contestants.js";
import type { BenchEnv } from "./env.js";
import { log, percentile, sleep } from "./util.js";

export const LEASE = { max: 50, ttl: "1s" };
const LEASE_TTL_MS = 1000;

export interface EdgeSettings {
  delays: number[];
  /** Seconds of traffic per run: (a), (b), (c), isolates. */
  seconds: { hot: number; many: number; flood: number; isolates: number };
  isolates: number[];
  /** (b)'s identifiers, each at 5 requests/s. */
  manyIds: number;
  /** The one-way delay the isolate runs use. */
  isolatesDelay: number;
}

export interface EdgeRow {
  scenario: string;
  delay: number;
  isolates: number;
  label: string;
  lease: boolean;
  /** Why the row was not measured. */
  pending?: string;
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

interface Arrival {
  /** ms after the start */
  t: number;
  id: string;
  isolate: number;
}

const HOT: Policy = { limit: 1000, window: 60_000 };
const MANY: Policy = { limit: 1000, window: 60_000 };
const FLOOD: Policy = { limit: 10, window: 3_600_000 };

export const CONTESTANTS: Entry[] = [
  { lib: "upstash", algo: "fixedWindow" },
  { lib: "upstash", algo: "cachedFixedWindow" },
  { lib: "edgelimit", algo: "fixedWindow" },
  { lib: "edgelimit", algo: "fixedWindow", lease: LEASE },
];

/** `rate` per second for `seconds`, identifiers and isolates taken in turn. */
function arrivals(rate: number, seconds: number, ids: number, isolates = 1): Arrival[] {
  return Array.from({ length: Math.round(rate * seconds) }, (_, k) => ({
    t: (k * 1000) / rate,
    id: `id${k % ids}`,
    isolate: k % isolates,
  }));
}

/** Fires each arrival at its time, in a macrotask of its own; resolves when every decision is answered. */
async function openLoop(plan: Arrival[], decide: (a: Arrival) => Promise<Outcome>) {
  const results: { at: number; latency: number; outcome: Outcome }[] = [];
  const pending: Promise<void>[] = [];
  const start = performance.now();
  const fire = (a: Arrival) => {
    const t0 = performance.now();
    pending.push(
      decide(a).then((outcome) => {
        results.push({ at: t0 - start, latency: performance.now() - t0, outcome });
      }),
    );
  };
  let i = 0;
  while (i < plan.length) {
    const now = performance.now() - start;
    while (i < plan.length && plan[i]!.t <= now) {
      const a = plan[i++]!;
      setImmediate(() => fire(a));
    }
    if (i < plan.length) await sleep(Math.max(0, plan[i]!.t - (performance.now() - start)));
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
  const base = {
    scenario,
    delay,
    isolates,
    label: labelOf(e),
    lease: e.lease !== undefined,
  };
  // real time, shifted so that the run starts at the beginning of a window (of an hour, so of a minute too)
  const t0 = (Math.ceil(Date.now() / 3_600_000) + 1) * 3_600_000;
  const shift = t0 - Date.now();
  const clock = () => Date.now() + shift;
  const prefix = `edge-${tag}-${scenario[1]}-${delay}-${isolates}-${CONTESTANTS.indexOf(e)}`;
  let cs: ReturnType<typeof contestant>[];
  try {
    cs = Array.from({ length: isolates }, () =>
      contestant(e, { redis: env.client(env.proxyUrl(delay)), prefix, policy, cache: "default", clock }),
    );
  } catch (error) {
    const message = (error as Error).message;
    if (!e.lease || !message.startsWith("lease")) throw error;
    return { ...base, pending: `pending: ${message}`, ...EMPTY };
  }
  log(`edge: ${scenario}, ${delay} ms, ${isolates} isolate(s), ${base.label}`);
  // one decision each first, so script loading and connection setup stay out of the counts
  await Promise.all(cs.map((c, i) => c.limit(`warm-up-${i}`)));
  await env.resetCounts();
  const { results, seconds } = await openLoop(plan, (a) => cs[a.isolate]!.limit(a.id));
  await Promise.all(cs.map((c) => c.close()));
  // requests still under way (the peer's pending writes, lease refunds) are part of the cost
  await sleep(4 * delay + 100 + (e.lease ? LEASE_TTL_MS : 0));
  const counts = await env.counts();
  const allowed = results.filter((r) => r.outcome.allowed);
  const latencies = results.map((r) => r.latency);
  const idealCount = countIdeal(
    policy,
    plan,
    results.map((r) => r.at + t0),
  );
  return {
    ...base,
    decisions: results.length,
    issuedPerSec: results.length / seconds,
    allowed: allowed.length,
    allowedLocal: allowed.filter((r) => r.outcome.local).length / Math.max(1, allowed.length),
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    httpPer1000: (counts.http * 1000) / results.length,
    commandsPer1000: (counts.commands * 1000) / results.length,
    ideal: idealCount,
    over: Math.max(0, allowed.length - idealCount),
    under: Math.max(0, idealCount - allowed.length),
    errors: results.filter((r) => r.outcome.error).length,
  };
}

const EMPTY = {
  decisions: 0,
  issuedPerSec: Number.NaN,
  allowed: 0,
  allowedLocal: Number.NaN,
  p50: Number.NaN,
  p99: Number.NaN,
  httpPer1000: Number.NaN,
  commandsPer1000: Number.NaN,
  ideal: Number.NaN,
  over: Number.NaN,
  under: Number.NaN,
  errors: Number.NaN,
};

/** The ideal fixed window's admissions, per identifier, over the decisions' true call times. */
function countIdeal(policy: Policy, plan: Arrival[], times: number[]): number {
  const ids = new Set(plan.map((a) => a.id));
  if (ids.size > 1) return Math.min(policy.limit, plan.length / ids.size) * ids.size; // (b): never at the limit
  return ideal("fixed window", policy, times, 0).filter(Boolean).length;
}

export async function runEdge(env: BenchEnv, s: EdgeSettings, tag: string): Promise<EdgeRow[]> {
  const rows: EdgeRow[] = [];
  for (const delay of s.delays) {
    for (const e of CONTESTANTS) {
      rows.push(
        await run(env, tag, "(a) one hot identifier, 200/s", e, delay, HOT, arrivals(200, s.seconds.hot, 1)),
      );
    }
    for (const e of CONTESTANTS.filter((c) => c.algo !== "cachedFixedWindow")) {
      const many = arrivals(5 * s.manyIds, s.seconds.many, s.manyIds);
      rows.push(await run(env, tag, `(b) ${s.manyIds} identifiers, 5/s each`, e, delay, MANY, many));
      const flood = arrivals(1000, s.seconds.flood, 1);
      rows.push(await run(env, tag, "(c) deny flood, 1000/s", e, delay, FLOOD, flood));
    }
  }
  for (const n of s.isolates) {
    for (const e of CONTESTANTS) {
      const plan = arrivals(300, s.seconds.isolates, 1, n);
      rows.push(
        await run(env, tag, "(d) isolates sharing one limit, 300/s", e, s.isolatesDelay, HOT, plan, n),
      );
    }
  }
  return rows;
}
