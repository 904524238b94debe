// Part 4: memory per identifier. One identifier is filled to its limit within one window (the requests
// spread evenly over the window, injected time), then `MEMORY USAGE key SAMPLES 0` is summed over every
// key that holds its state (found with SCAN MATCH for the peer's per-window keys).

import { SIM_T0 } from "./accuracy.js";
import { ALGOS, type Algo, contestant, type Lib } from "./contestants.js";
import type { BenchEnv } from "./env.js";
import { log } from "./util.js";

export interface MemoryRow {
  label: string;
  lib: Lib;
  algo: Algo;
  limit: number;
  admitted: number;
  keys: number;
  bytes: number;
  keyNames: string[];
}

const WINDOW = 60_000;

export async function runMemory(env: BenchEnv, tag: string, limits: number[]): Promise<MemoryRow[]> {
  const rows: MemoryRow[] = [];
  let n = 0;
  for (const lib of ["edgelimit", "upstash"] as const) {
    for (const algo of ALGOS[lib]) {
      for (const limit of limits) {
        log(`memory: ${lib} ${algo} limit ${limit}`);
        let simNow = SIM_T0;
        const c = contestant(lib, algo, {
          redis: env.client(),
          prefix: `mem-${tag}-${n++}`,
          policies: [{ limit, window: WINDOW }],
          cache: "off",
          clock: () => simNow,
        });
        // `limit` requests spread over the window (the last one at 99% of it), 64 at a time
        let admitted = 0;
        const step = (WINDOW * 0.99) / limit;
        for (let i = 0; i < limit; i += 64) {
          const batch: Promise<boolean>[] = [];
          for (let k = i; k < Math.min(limit, i + 64); k++) {
            simNow = SIM_T0 + Math.floor(k * step);
            batch.push(c.limit("member"));
          }
          for (const ok of await Promise.all(batch)) if (ok) admitted++;
        }
        const keys = await findKeys(env, c.keyPatterns("member"));
        let bytes = 0;
        for (const key of keys) bytes += Number(await env.call("MEMORY", "USAGE", key, "SAMPLES", "0")) || 0;
        rows.push({ label: c.label, lib, algo, limit, admitted, keys: keys.length, bytes, keyNames: keys });
      }
    }
  }
  return rows;
}

async function findKeys(env: BenchEnv, patterns: string[]): Promise<string[]> {
  const out: string[] = [];
  for (const pattern of patterns) {
    if (!/(^|[^\\])[*?[]/.test(pattern)) {
      const plain = pattern.replace(/\\(.)/g, "$1");
      if (Number(await env.call("EXISTS", plain)) === 1) out.push(plain);
      continue;
    }
    let cursor = "0";
    do {
      const reply = (await env.call("SCAN", cursor, "MATCH", pattern, "COUNT", 10_000)) as unknown as [
        Buffer,
        Buffer[],
      ];
      cursor = String(reply[0]);
      for (const k of reply[1]) out.push(String(k));
    } while (cursor !== "0");
  }
  return out;
}
