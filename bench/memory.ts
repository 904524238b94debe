// Part 3: one identifier gets `limit` requests spread over one 60 s window (injected time), then
// MEMORY USAGE is summed over every key under the contestant's prefix.
import { ALL, contestant, type Entry, labelOf } from "./contestants.js";
import { fmt, log, type Part, ratio, table } from "./harness.js";
import { SIM_T0 } from "./scenarios.js";

type MemoryRow = { label: string; lib: Entry["lib"]; limit: number; keys: number; bytes: number };

/** The peer's nearest algorithm (it has no sliding log). */
const NEAREST: Record<string, string> = { gcra: "tokenBucket", slidingLog: "none" };

export const memory: Part<MemoryRow[]> = {
  name: "memory",
  title: "## 3. Memory per identifier",
  async run({ env, smoke, tag }) {
    await env.call("FLUSHALL"); // the keyspace is scanned below
    const rows: MemoryRow[] = [];
    let n = 0;
    for (const e of ALL) {
      for (const limit of e.algo === "slidingLog" ? [100, smoke ? 200 : 10_000] : [100]) {
        log(`memory: ${labelOf(e)}, limit ${limit}`);
        const prefix = `mem-${tag}-${n++}`;
        let now = SIM_T0;
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
            now = SIM_T0 + Math.floor((k * 59_400) / limit);
            batch.push(c.limit("member"));
          }
          await Promise.all(batch);
        }
        const scan = await env.call("SCAN", 0, "MATCH", `${prefix}*`, "COUNT", 100_000);
        const keys = (scan as [unknown, unknown[]])[1];
        let bytes = 0;
        for (const key of keys) bytes += Number(await env.call("MEMORY", "USAGE", String(key), "SAMPLES", 0));
        rows.push({ label: labelOf(e), lib: e.lib, limit, keys: keys.length, bytes });
      }
    }
    return rows;
  },
  render(r) {
    const bytes = (x: MemoryRow | undefined) =>
      x ? `${fmt(x.bytes)} (${x.keys} key${x.keys === 1 ? "" : "s"})` : "–";
    const rows = r
      .filter((m) => m.lib === "edgelimit")
      .map((m) => {
        const algo = m.label.split(" ")[1]!;
        const peer = r.find(
          (x) => x.lib === "upstash" && x.label.endsWith(` ${NEAREST[algo] ?? algo}`) && x.limit === m.limit,
        );
        const peerAlgo = peer ? peer.label.split(" ")[1]! : "–";
        return [algo, fmt(m.limit), bytes(m), peerAlgo, bytes(peer), ratio(m.bytes, peer?.bytes)];
      });
    return `One identifier filled to \`limit\` within one 60 s window (injected time); \`MEMORY USAGE\` summed over its keys.
The peer's slidingWindow keeps one key per window and reads the previous one: two keys in steady state.

${table(["edgelimit", "limit", "bytes", "@upstash/ratelimit", "bytes", "ratio"], rows)}`;
  },
};
