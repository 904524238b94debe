// What a decision costs: HTTP requests (the bridge's counter), Redis commands (INFO commandstats, which
// counts the commands a script runs as well as the EVALSHA: Upstash bills both) and Redis time per
// EVALSHA (usec_per_call), per path; and the memory one identifier holds at its limit.
import { contestant, type Entry, labelOf, PAIRS } from "./contestants.js";
import type { BenchEnv, Counts } from "./env.js";
import { log } from "./util.js";

export const PHASES = ["allowed, first", "allowed, later", "denied"] as const;
export type Phase = (typeof PHASES)[number];

export interface CostRow {
  pair: string;
  label: string;
  lib: Entry["lib"];
  phase: Phase;
  perDecision: Counts;
}

/** The pairs compared, plus 3 rules on one request against three peer limiters awaited in turn. */
export const COST_PAIRS: { name: string; entries: [Entry, Entry] }[] = [
  ...PAIRS.map(([a, b]) => ({
    name: `${a} ↔ ${b}`,
    entries: [
      { lib: "edgelimit", algo: a },
      { lib: "upstash", algo: b },
    ] as [Entry, Entry],
  })),
  {
    name: "3 fixedWindow rules",
    entries: [
      { lib: "edgelimit", algo: "fixedWindow", rules: 3 },
      { lib: "upstash", algo: "fixedWindow", rules: 3 },
    ],
  },
];

/** Each identifier is decided once per phase, one decision at a time, caches off: 2 units per hour. */
export async function runCost(env: BenchEnv, tag: string, ids: number): Promise<CostRow[]> {
  const rows: CostRow[] = [];
  let n = 0;
  for (const pair of COST_PAIRS) {
    log(`cost: ${pair.name}`);
    const cs = pair.entries.map((e) =>
      contestant(e, {
        redis: env.client(),
        prefix: `cost-${tag}-${n++}`,
        policy: { limit: 2, window: 3_600_000 },
        cache: "off",
      }),
    );
    for (const c of cs) await c.limit("warm-up"); // loads the script outside the counted runs
    for (const phase of PHASES) {
      for (const [i, c] of cs.entries()) {
        await env.resetCounts();
        for (let k = 0; k < ids; k++) await c.limit(`c${k}`);
        const t = await env.counts();
        rows.push({
          pair: pair.name,
          label: c.label,
          lib: pair.entries[i]!.lib,
          phase,
          perDecision: { ...t, http: t.http / ids, commands: t.commands / ids, evalsha: t.evalsha / ids },
        });
      }
    }
  }
  return rows;
}

export interface MemoryRow {
  label: string;
  lib: Entry["lib"];
  limit: number;
  keys: number;
  bytes: number;
}

/** One identifier gets `limit` requests spread over one 60 s window (injected time); MEMORY USAGE of its keys. */
export async function runMemory(env: BenchEnv, tag: string, t0: number, big: number): Promise<MemoryRow[]> {
  const rows: MemoryRow[] = [];
  const entries: Entry[] = [
    ...(["fixedWindow", "slidingWindow", "tokenBucket", "gcra", "slidingLog"] as const).map(
      (algo): Entry => ({ lib: "edgelimit", algo }),
    ),
    ...(["fixedWindow", "slidingWindow", "tokenBucket"] as const).map(
      (algo): Entry => ({ lib: "upstash", algo }),
    ),
  ];
  let n = 0;
  for (const e of entries) {
    for (const limit of e.algo === "slidingLog" ? [100, big] : [100]) {
      log(`memory: ${labelOf(e)}, limit ${limit}`);
      const prefix = `mem-${tag}-${n++}`;
      let now = t0;
      const c = contestant(e, {
        redis: env.client(),
        prefix,
        policy: { limit, window: 60_000 },
        cache: "off",
        clock: () => now,
      });
      for (let i = 0; i < limit; i += 64) {
        const batch: Promise<unknown>[] = [];
        for (let k = i; k < Math.min(limit, i + 64); k++) {
          now = t0 + Math.floor((k * 59_400) / limit);
          batch.push(c.limit("member"));
        }
        await Promise.all(batch);
      }
      const [, keys] = (await env.call("SCAN", 0, "MATCH", `${prefix}*`, "COUNT", 100_000)) as unknown as [
        unknown,
        unknown[],
      ];
      let bytes = 0;
      for (const key of keys) bytes += Number(await env.call("MEMORY", "USAGE", String(key), "SAMPLES", 0));
      rows.push({ label: c.label, lib: e.lib, limit, keys: keys.length, bytes });
    }
  }
  return rows;
}
