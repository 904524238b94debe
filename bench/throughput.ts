// Part 1: throughput and latency, side by side. Closed loops (each of `concurrency` workers issues its
// next decision as soon as the previous one answers), contestants interleaved round by round
// (A B A B …), nothing denied (limits far above the load), 1000 identifiers in turn.
import { type Algo, type Contestant, contestant, type Lib } from "./contestants.js";
import type { BenchEnv } from "./env.js";
import { log, median, percentile } from "./util.js";

export interface Sample {
  decisions: number;
  seconds: number;
  requests: number;
  latencies: Float64Array;
}

/** Runs `concurrency` closed-loop workers for `durationMs`; returns what they did. */
export async function closedLoop(
  decide: (id: string) => Promise<unknown>,
  ids: readonly string[],
  concurrency: number,
  durationMs: number,
  separate = false,
): Promise<Omit<Sample, "requests">> {
  let latencies = new Float64Array(1 << 16);
  let count = 0;
  let next = 0;
  const start = performance.now();
  const end = start + durationMs;
  const worker = async () => {
    while (performance.now() < end) {
      // separate: each decision starts in a macrotask of its own, as decisions of independent HTTP
      // requests do (microtask-based batching then finds nothing to batch with)
      if (separate) await new Promise<void>((resolve) => setImmediate(resolve));
      const id = ids[next++ % ids.length]!;
      const t0 = performance.now();
      await decide(id);
      const dt = performance.now() - t0;
      if (count === latencies.length) {
        const grown = new Float64Array(latencies.length * 2);
        grown.set(latencies);
        latencies = grown;
      }
      latencies[count++] = dt;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const seconds = (performance.now() - start) / 1000;
  return { decisions: count, seconds, latencies: latencies.slice(0, count) };
}

export interface ThroughputRow {
  group: string;
  concurrency: number;
  label: string;
  lib: Lib;
  /** Median over rounds. */
  decisionsPerSec: number;
  p50: number;
  p99: number;
  decisionsPerRequest: number;
  /** Median over rounds of this contestant's rate / the group's first contestant's rate (1 for the first). */
  ratioToFirst: number;
  rounds: number[];
}

export interface Group {
  name: string;
  entries: {
    lib: Lib;
    algo: Algo;
    rules: number;
    peerMulti?: "parallel" | "sequential";
    batchWindow?: number;
  }[];
  /** Each decision issued from its own macrotask (independent requests), at 64 in flight only. */
  separate?: boolean;
}

export const OPEN_POLICY = { limit: 1_000_000_000, window: 60_000 };

export const GROUPS: Group[] = [
  {
    name: "fixedWindow ↔ fixedWindow",
    entries: [
      { lib: "edgelimit", algo: "fixedWindow", rules: 1 },
      { lib: "upstash", algo: "fixedWindow", rules: 1 },
    ],
  },
  {
    name: "slidingWindow ↔ slidingWindow",
    entries: [
      { lib: "edgelimit", algo: "slidingWindow", rules: 1 },
      { lib: "upstash", algo: "slidingWindow", rules: 1 },
    ],
  },
  {
    name: "tokenBucket ↔ tokenBucket",
    entries: [
      { lib: "edgelimit", algo: "tokenBucket", rules: 1 },
      { lib: "upstash", algo: "tokenBucket", rules: 1 },
    ],
  },
  {
    name: "gcra ↔ tokenBucket",
    entries: [
      { lib: "edgelimit", algo: "gcra", rules: 1 },
      { lib: "upstash", algo: "tokenBucket", rules: 1 },
    ],
  },
  {
    name: "3 fixedWindow rules per decision",
    entries: [
      { lib: "edgelimit", algo: "fixedWindow", rules: 3 },
      { lib: "upstash", algo: "fixedWindow", rules: 3, peerMulti: "parallel" },
      { lib: "upstash", algo: "fixedWindow", rules: 3, peerMulti: "sequential" },
    ],
  },
  {
    name: "independent requests (gcra ↔ tokenBucket)",
    separate: true,
    entries: [
      { lib: "edgelimit", algo: "gcra", rules: 1 },
      { lib: "edgelimit", algo: "gcra", rules: 1, batchWindow: 1 },
      { lib: "upstash", algo: "tokenBucket", rules: 1 },
    ],
  },
];

export interface ThroughputConfig {
  concurrencies: number[];
  rounds: number;
  sampleMs: number;
  warmupMs: number;
  ids: number;
}

export async function runThroughput(
  env: BenchEnv,
  cfg: ThroughputConfig,
  tag: string,
): Promise<ThroughputRow[]> {
  const ids = Array.from({ length: cfg.ids }, (_, i) => `u${i}`);
  const rows: ThroughputRow[] = [];
  for (const [g, group] of GROUPS.entries()) {
    const contestants: Contestant[] = group.entries.map((e, i) =>
      contestant(e.lib, e.algo, {
        redis: env.client(),
        prefix: `tp-${tag}-${g}-${i}`,
        policies: Array.from({ length: e.rules }, (_, r) => ({
          ...OPEN_POLICY,
          window: OPEN_POLICY.window * (r + 1),
        })),
        cache: "off",
        peerMulti: e.peerMulti,
        batchWindow: e.batchWindow,
      }),
    );
    const separate = group.separate === true;
    for (const c of contestants) {
      await closedLoop(c.limit, ids, 64, cfg.warmupMs, separate);
      if (!separate) await closedLoop(c.limit, ids, 1, cfg.warmupMs / 2);
    }
    for (const concurrency of separate ? [64] : cfg.concurrencies) {
      log(`throughput: ${group.name}, concurrency ${concurrency}`);
      const samples: Sample[][] = contestants.map(() => []);
      for (let round = 0; round < cfg.rounds; round++) {
        for (let i = 0; i < contestants.length; i++) {
          await env.resetBridgeStats();
          const s = await closedLoop(contestants[i]!.limit, ids, concurrency, cfg.sampleMs, separate);
          const { requests } = await env.bridgeStats();
          samples[i]!.push({ ...s, requests });
        }
      }
      const rates = samples.map((ss) => ss.map((s) => s.decisions / s.seconds));
      contestants.forEach((c, i) => {
        const all = concat(samples[i]!.map((s) => s.latencies)).sort();
        const decisions = samples[i]!.reduce((a, s) => a + s.decisions, 0);
        const requests = samples[i]!.reduce((a, s) => a + s.requests, 0);
        rows.push({
          group: group.name,
          concurrency,
          label: c.label,
          lib: c.lib,
          decisionsPerSec: median(rates[i]!),
          p50: percentile(all, 50),
          p99: percentile(all, 99),
          decisionsPerRequest: requests > 0 ? decisions / requests : Number.NaN,
          ratioToFirst: median(rates[i]!.map((r, k) => r / rates[0]![k]!)),
          rounds: rates[i]!,
        });
      });
    }
  }
  return rows;
}

function concat(parts: Float64Array[]): Float64Array {
  const out = new Float64Array(parts.reduce((a, p) => a + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
