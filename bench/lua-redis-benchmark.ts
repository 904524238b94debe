// Part 2's second table: Redis µs per EVALSHA measured the way a redis-benchmark user measures it. The
// EVALSHA each library sends (captured as bench/lua-cost.ts does) is replayed by redis-benchmark against
// a private redis-server, and INFO commandstats' usec_per_call read after each run; the two libraries
// take turns, round after round; the figures are medians, the ratio the median of each round's (paired,
// as part 2's first table). One rule, cost 1:
//   first   a fresh key every call (__rand_int__ in the identifier, -r 100000000)
//   later   one key and a limit far above the calls: every call after a warm-up one is admitted
//   denied  one key and a limit of 1: every call after a warm-up one is denied
// With taskset (util-linux), redis-server runs on the last CPU and redis-benchmark on the first: on a
// small machine they otherwise contend, and the spread doubles.
import { spawnSync } from "node:child_process";
import { availableParallelism } from "node:os";
import { type Algo, ourRule, PAIRS } from "./contestants.js";
import { commandStats, quantile, startRedis } from "./harness.js";
import {
  asEvalsha,
  captureOurs,
  capturePeer,
  evalsha,
  hourly,
  LUA_PATHS,
  type LuaPath,
  loadOurs,
} from "./lua-cost.js";

const BIG = 10_000_000; // below 2^25: the sliding window keeps its packed state

export type RedisBenchmark = Awaited<ReturnType<typeof redisBenchmark>>;

export async function redisBenchmark(rounds: number, requests: number) {
  const pinned = spawnSync("taskset", ["-V"]).status === 0 && availableParallelism() > 1;
  const on = (cpu: number, command: string[]) =>
    pinned ? ["taskset", "-c", String(cpu), ...command] : command;
  const redis = await startRedis();
  const { conn } = redis;
  /** One redis-benchmark run of `command`; usec per EVALSHA from INFO commandstats. */
  const run = async (command: string[], n: number, random: boolean) => {
    await conn.call("CONFIG", "RESETSTAT");
    const flags = ["-p", String(redis.port), "-q", "-n", String(n), "-P", String(Math.min(16, n))];
    const bench = on(0, ["redis-benchmark", ...flags, ...(random ? ["-r", "100000000"] : []), ...command]);
    const done = spawnSync(bench[0]!, bench.slice(1), { encoding: "utf8" });
    if (done.status !== 0) throw new Error(`redis-benchmark failed: ${done.stderr || done.stdout}`);
    const stats = (await commandStats(conn)).get("evalsha");
    // -P 16 sends whole pipelines: a count that is no multiple of 16 is rounded up
    if (!stats || stats.calls < n) throw new Error(`expected ${n} EVALSHA, INFO says ${stats?.calls}`);
    return stats.usec / stats.calls;
  };
  try {
    const pid = /process_id:(\d+)/.exec(String(await conn.call("INFO", "server")))?.[1];
    if (pinned && pid) spawnSync("taskset", ["-a", "-pc", String(availableParallelism() - 1), pid]);
    await loadOurs(conn);
    const rows: { algo: Algo; peer: Algo; path: LuaPath; ours: number; theirs: number; ratio: number }[] = [];
    for (const { algo, peer } of PAIRS) {
      if (!peer) continue;
      for (const path of LUA_PATHS) {
        const id = path === "first" ? "__rand_int__" : `rb-${path}`;
        const limit = path === "denied" ? 1 : BIG;
        const rules = { r0: ourRule(algo, ...hourly(limit)) };
        const [mine] = (await captureOurs({ prefix: `rb-${algo}`, rules }, [id])).decisions;
        const [theirs] = await asEvalsha(conn, await capturePeer(peer, limit, `rb-peer-${algo}`, [id]));
        const commands = [evalsha(mine!), evalsha(theirs!)];
        const usec: number[][] = [[], []];
        for (let round = 0; round < rounds; round++) {
          for (let j = 0; j < 2; j++) {
            const who = (j + round) % 2;
            await conn.call("FLUSHALL");
            if (path !== "first") await run(commands[who]!, 1, false); // the warm-up call: first in its window
            usec[who]!.push(await run(commands[who]!, requests, path === "first"));
          }
        }
        rows.push({
          algo,
          peer,
          path,
          ours: quantile(usec[0]!, 0.5),
          theirs: quantile(usec[1]!, 0.5),
          ratio: quantile(
            usec[0]!.map((x, round) => x / usec[1]![round]!),
            0.5,
          ),
        });
      }
    }
    return { requests, rounds, pinned, rows };
  } finally {
    await redis.stop();
  }
}
