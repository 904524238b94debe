// Part 1: closed loops (each of N workers sends its next decision when the previous one is answered),
// the contestants of a pair interleaved round by round, nothing denied, 1000 identifiers. Beside
// edgelimit's Limiter and the peer: edgelimit/upstash, the peer's API on edgelimit's engine.
// A few rows only, into a file of their own (without --out the run writes BENCHMARKS.md with them alone):
//   node --import tsx bench/run.ts --only throughput --out /tmp/tp.md --pairs fixedWindow --in-flight 64 --rounds 9
// --pairs: edgelimit's algorithm of a one-rule pair, or "3rules"; --in-flight: 1, 64 or both; --rounds:
// in place of 3.
import { type Algo, contestant, type Entry, labelOf } from "./contestants.js";
import { arg, closedLoop, fmt, inTurns, log, ms, type Part, percentile, table, vs } from "./harness.js";

/** perSec: the median over rounds; perRequest: decisions per HTTP request. */
export type ThroughputRow = Record<"inFlight" | "perSec" | "p50" | "p99" | "perRequest", number> & {
  group: string;
  label: string;
  lib: Entry["lib"];
};

const OPEN = { limit: 1_000_000_000, window: 60_000 };
const settings = (smoke: boolean) => ({
  ...(smoke ? { rounds: 1, sampleMs: 150 } : { rounds: 3, sampleMs: 1000 }),
  ...(arg("rounds") === undefined ? {} : { rounds: Number(arg("rounds")) }),
});
/** The rows asked for: a pair by edgelimit's algorithm ("3rules": the three-rule group), a load. */
const pairs = arg("pairs")?.split(",");
const loads = arg("in-flight")?.split(",").map(Number) ?? [1, 64];
const wanted = (ours: Algo, rules: number) => !pairs || pairs.includes(rules > 1 ? `${rules}rules` : ours);

/** edgelimit's algorithm, the peer's nearest, and how many rules (3: one Limiter against three peer limiters). */
const GROUPS: [Algo, Algo, number][] = [
  ["fixedWindow", "fixedWindow", 1],
  ["slidingWindow", "slidingWindow", 1],
  ["tokenBucket", "tokenBucket", 1],
  ["gcra", "tokenBucket", 1],
  ["fixedWindow", "fixedWindow", 3],
];

export const throughput: Part<ThroughputRow[]> = {
  name: "throughput",
  title: "## 1. Throughput and latency",
  async run({ env, smoke, tag }) {
    const s = settings(smoke);
    const rows: ThroughputRow[] = [];
    let n = 0;
    for (const [ours, theirs, rules] of GROUPS.filter(([ours, , rules]) => wanted(ours, rules))) {
      const group = rules > 1 ? `${rules} ${ours} rules` : `${ours} ↔ ${theirs}`;
      const entries: Entry[] = [
        { lib: "edgelimit", algo: ours, rules },
        { lib: "upstash", algo: theirs, rules },
        { lib: "entry", algo: theirs, rules },
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
      for (const inFlight of loads) {
        log(`throughput: ${group}, ${inFlight} in flight`);
        const runs = cs.map(() => ({ rates: [] as number[], latencies: [] as number[], http: 0 }));
        for (let round = 0; round < s.rounds; round++) {
          await inTurns(cs.length, 0, async (i) => {
            await env.resetCounts();
            const { latencies, seconds } = await closedLoop(cs[i]!.limit, inFlight, s.sampleMs);
            runs[i]!.rates.push(latencies.length / seconds);
            runs[i]!.latencies.push(...latencies);
            runs[i]!.http += (await env.counts()).http;
          });
        }
        entries.forEach((e, i) => {
          const { rates, latencies, http } = runs[i]!;
          rows.push({
            group,
            label: labelOf(e),
            lib: e.lib,
            inFlight,
            perSec: percentile(rates, 50),
            p50: percentile(latencies, 50),
            p99: percentile(latencies, 99),
            perRequest: latencies.length / http,
          });
        });
      }
    }
    return rows;
  },
  render(r, { smoke }) {
    const s = settings(smoke);
    const rows: string[][] = [];
    for (const inFlight of [1, 64]) {
      for (const group of new Set(r.map((t) => t.group))) {
        const [a, b, c] = ["edgelimit", "upstash", "entry"].map((lib) =>
          r.find((t) => t.group === group && t.inFlight === inFlight && t.lib === lib),
        );
        if (!a || !b) continue;
        rows.push([
          group,
          String(inFlight),
          ...vs(a.perSec, b.perSec, fmt),
          c ? fmt(c.perSec) : "–",
          c ? `${(c.perSec / b.perSec).toFixed(2)}×` : "–",
          `${ms(a.p50)} / ${ms(a.p99)}`,
          `${ms(b.p50)} / ${ms(b.p99)}`,
          c ? `${ms(c.p50)} / ${ms(c.p99)}` : "–",
          `${fmt(a.perRequest, 1)} / ${fmt(b.perRequest, 1)}${c ? ` / ${fmt(c.perRequest, 1)}` : ""}`,
        ]);
      }
    }
    return `Closed loops on the bridge (no added delay), ${s.rounds} interleaved rounds of ${s.sampleMs / 1000} s; decisions/s is the median round.
Nothing is denied; 1000 identifiers in turn; caches off. "3 fixedWindow rules": one Limiter with 3 rules against
three peer limiters awaited in turn. "entry": \`edgelimit/upstash\`, the peer's API on edgelimit's engine (the
peer's algorithm, one instance per rule awaited in turn, as code written against the peer runs); "entry ÷ peer"
beside edgelimit's own ratio.

${table(["pair", "in flight", "edgelimit /s", "peer /s", "ratio", "entry /s", "entry ÷ peer", "edgelimit p50 / p99 ms", "peer p50 / p99 ms", "entry p50 / p99 ms", "decisions per HTTP request (edgelimit / peer / entry)"], rows)}`;
  },
};
