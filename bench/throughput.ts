// Throughput and latency: closed loops (each of N workers sends its next decision when the previous one
// is answered), the two contestants of a pair interleaved round by round, nothing denied, 1000 identifiers.
import { type Algo, contestant, type Entry, labelOf } from "./contestants.js";
import type { BenchEnv } from "./env.js";
import { log, median, percentile } from "./util.js";

export interface ThroughputRow {
  group: string;
  label: string;
  lib: Entry["lib"];
  inFlight: number;
  /** Median over rounds. */
  perSec: number;
  p50: number;
  p99: number;
  perRequest: number;
}

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

const OPEN = { limit: 1_000_000_000, window: 60_000 };

/** edgelimit's algorithm, the peer's nearest, and how many rules (3: one Limiter against three peer limiters). */
const GROUPS: [Algo, Algo, number][] = [
  ["fixedWindow", "fixedWindow", 1],
  ["slidingWindow", "slidingWindow", 1],
  ["tokenBucket", "tokenBucket", 1],
  ["gcra", "tokenBucket", 1],
  ["fixedWindow", "fixedWindow", 3],
];

export async function runThroughput(env: BenchEnv, s: { rounds: number; sampleMs: number }, tag: string) {
  const rows: ThroughputRow[] = [];
  let n = 0;
  for (const [ours, theirs, rules] of GROUPS) {
    const group = rules > 1 ? `${rules} ${ours} rules` : `${ours} ↔ ${theirs}`;
    const entries: Entry[] = [
      { lib: "edgelimit", algo: ours, rules },
      { lib: "upstash", algo: theirs, rules },
    ];
    const cs = entries.map((e) =>
      contestant(e, { redis: env.client(), prefix: `tp-${tag}-${n++}`, policy: OPEN, cache: "off" }),
    );
    // warm-up at both loads: the first group otherwise also pays the process's own warm-up (JIT,
    // connections) in its first round, which its median does not always shed
    for (const c of cs) {
      await closedLoop(c.limit, 64, s.sampleMs / 2);
      await closedLoop(c.limit, 1, s.sampleMs / 2);
    }
    for (const inFlight of [1, 64]) {
      log(`throughput: ${group}, ${inFlight} in flight`);
      const runs = cs.map(() => ({ rates: [] as number[], latencies: [] as number[], http: 0 }));
      for (let round = 0; round < s.rounds; round++) {
        for (const [i, c] of cs.entries()) {
          await env.resetCounts();
          const { latencies, seconds } = await closedLoop(c.limit, inFlight, s.sampleMs);
          runs[i]!.rates.push(latencies.length / seconds);
          runs[i]!.latencies.push(...latencies);
          runs[i]!.http += (await env.counts()).http;
        }
      }
      entries.forEach((e, i) => {
        const { rates, latencies, http } = runs[i]!;
        const [p50, p99] = [percentile(latencies, 50), percentile(latencies, 99)];
        rows.push({
          group,
          label: labelOf(e),
          lib: e.lib,
          inFlight,
          perSec: median(rates),
          p50,
          p99,
          perRequest: latencies.length / http,
        });
      });
    }
  }
  return rows;
}
