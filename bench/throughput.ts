// Throughput and latency: closed loops (each of N workers sends its next decision when the previous one
// is answered), the contestants of a group interleaved round by round, nothing denied, 1000 identifiers.
import { contestant, type Entry, labelOf, PAIRS } from "./contestants.js";
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

export interface ThroughputSettings {
  rounds: number;
  sampleMs: number;
}

export async function closedLoop(
  decide: (id: string) => Promise<unknown>,
  inFlight: number,
  durationMs: number,
) {
  const latencies: number[] = [];
  let next = 0;
  const start = performance.now();
  const worker = async () => {
    while (performance.now() - start < durationMs) {
      const t0 = performance.now();
      await decide(`u${next++ % 1000}`);
      latencies.push(performance.now() - t0);
    }
  };
  await Promise.all(Array.from({ length: inFlight }, worker));
  return { latencies, seconds: (performance.now() - start) / 1000 };
}

export const OPEN = { limit: 1_000_000_000, window: 60_000 };

export const GROUPS: { name: string; entries: Entry[] }[] = [
  ...PAIRS.filter(([a]) => a !== "slidingLog").map(([a, b]) => ({
    name: `${a} ↔ ${b}`,
    entries: [
      { lib: "edgelimit", algo: a },
      { lib: "upstash", algo: b },
    ] as Entry[],
  })),
  {
    name: "3 fixedWindow rules",
    entries: [
      { lib: "edgelimit", algo: "fixedWindow", rules: 3 },
      { lib: "upstash", algo: "fixedWindow", rules: 3 },
    ],
  },
];

export async function runThroughput(
  env: BenchEnv,
  s: ThroughputSettings,
  tag: string,
): Promise<ThroughputRow[]> {
  const rows: ThroughputRow[] = [];
  let n = 0;
  for (const group of GROUPS) {
    const contestants = group.entries.map((e) =>
      contestant(e, { redis: env.client(), prefix: `tp-${tag}-${n++}`, policy: OPEN, cache: "off" }),
    );
    for (const c of contestants) await closedLoop(c.limit, 64, s.sampleMs / 2); // warm-up
    for (const inFlight of [1, 64]) {
      log(`throughput: ${group.name}, ${inFlight} in flight`);
      const runs = contestants.map(() => ({
        rates: [] as number[],
        latencies: [] as number[],
        decisions: 0,
        http: 0,
      }));
      for (let round = 0; round < s.rounds; round++) {
        for (const [i, c] of contestants.entries()) {
          await env.resetCounts();
          const { latencies, seconds } = await closedLoop(c.limit, inFlight, s.sampleMs);
          const r = runs[i]!;
          r.rates.push(latencies.length / seconds);
          r.latencies.push(...latencies);
          r.decisions += latencies.length;
          r.http += (await env.counts()).http;
        }
      }
      group.entries.forEach((e, i) => {
        const r = runs[i]!;
        rows.push({
          group: group.name,
          label: labelOf(e),
          lib: e.lib,
          inFlight,
          perSec: median(r.rates),
          p50: percentile(r.latencies, 50),
          p99: percentile(r.latencies, 99),
          perRequest: r.decisions / r.http,
        });
      });
    }
  }
  return rows;
}
