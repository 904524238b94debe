// Memory per identifier: one identifier gets `limit` requests spread over one 60 s window (injected
// time), then MEMORY USAGE is summed over every key under the contestant's prefix.
import { ALL, contestant, type Entry, labelOf } from "./contestants.js";
import type { BenchEnv } from "./env.js";
import { log } from "./util.js";

export interface MemoryRow {
  label: string;
  lib: Entry["lib"];
  limit: number;
  keys: number;
  bytes: number;
}

export async function runMemory(env: BenchEnv, tag: string, t0: number, big: number): Promise<MemoryRow[]> {
  const rows: MemoryRow[] = [];
  let n = 0;
  for (const e of ALL) {
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
      rows.push({ label: labelOf(e), lib: e.lib, limit, keys: keys.length, bytes });
    }
  }
  return rows;
}
