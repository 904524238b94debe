// Redis µs per EVALSHA measured the way a redis-benchmark user measures it: the EVALSHA each library
// sends (captured from the library itself, as bench/lua-cost.ts does) replayed by redis-benchmark
// against one redis-server, and INFO commandstats' usec_per_call read after each run. The two
// libraries take turns, round after round; the figures are medians. One rule, cost 1:
//   first   a fresh key every call (__rand_int__ in the identifier, -r 100000000)
//   later   one key and a limit far above the calls: every call after a warm-up one is admitted
//   denied  one key and a limit of 1: every call after a warm-up one is denied
// With taskset (util-linux), redis-server runs on the last CPU and redis-benchmark on the first: on a
// small machine they otherwise contend, and the spread doubles.
//
//   node --import tsx bench/lua-redis-benchmark.ts [--requests 100000] [--rounds 5] [--micro]
//
// --micro measures instead what the scripts' building blocks cost (what lua/prelude.lua's advice rests
// on): each small script against `return 1`, on a fresh key per call.
import { spawnSync } from "node:child_process";
import { availableParallelism } from "node:os";
import { startRedisServer } from "../src/bridge/index.js";
import { connectRedis } from "../src/bridge/resp.js";
import {
  type Command,
  captureOurs,
  capturePeer,
  LUA_PAIRS,
  LUA_PATHS,
  type LuaPath,
  loadOurs,
} from "./lua-cost.js";

const BIG = 10_000_000; // below 2^25: the sliding window keeps its packed state

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const requests = arg("requests", 100_000);
const rounds = arg("rounds", 5);

const hasTaskset = spawnSync("taskset", ["-V"]).status === 0;
const cpus = availableParallelism();
const pinned = (cpu: number, command: string[]) =>
  hasTaskset && cpus > 1 ? ["taskset", "-c", String(cpu), ...command] : command;

type Run = (command: string[], n: number, random: boolean) => Promise<number>;
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

const server = await startRedisServer();
const conn = await connectRedis(server.url);
try {
  const pid = /process_id:(\d+)/.exec(String(await conn.call("INFO", "server")))?.[1];
  if (hasTaskset && cpus > 1 && pid) spawnSync("taskset", ["-a", "-pc", String(cpus - 1), pid]);

  /** One redis-benchmark run of `command`; usec per EVALSHA from INFO commandstats. */
  const run: Run = async (command, n, random) => {
    await conn.call("CONFIG", "RESETSTAT");
    const bench = pinned(0, [
      "redis-benchmark",
      "-p",
      String(server.port),
      "-q",
      "-n",
      String(n),
      "-P",
      String(Math.min(16, n)),
      ...(random ? ["-r", "100000000"] : []),
      ...command,
    ]);
    const done = spawnSync(bench[0]!, bench.slice(1), { encoding: "utf8" });
    if (done.status !== 0) throw new Error(`redis-benchmark failed: ${done.stderr || done.stdout}`);
    const info = String(await conn.call("INFO", "commandstats"));
    const m = /cmdstat_evalsha:calls=(\d+),usec=(\d+)/.exec(info);
    // -P 16 sends whole pipelines: a count that is no multiple of 16 is rounded up
    if (!m || Number(m[1]) < n) throw new Error(`expected ${n} EVALSHA, INFO says ${m?.[0]}`);
    return Number(m[2]) / Number(m[1]);
  };
  if (process.argv.includes("--micro")) await micro(run);
  else await compare(run);
} finally {
  await conn.close();
  await server.stop();
}

/** What the scripts' building blocks cost, each against `return 1`, on a fresh key per call. */
async function micro(run: Run): Promise<void> {
  const blocks: [string, string, string[]][] = [
    ["return 1 (the base)", "return 1", []],
    ["a 4-entry table reply", "return { 1, 5, 1700000003600, 0 }", []],
    [
      "3 tonumber()",
      "local a, b, c = tonumber(ARGV[1], 16), tonumber(ARGV[2]), tonumber(ARGV[3]) return 1",
      ["18bcfe56800", "3600000", "1000"],
    ],
    [
      "string.match of a GCRA state",
      "local a, b = string.match('1700000000000:12345', '^(%-?%d+):(%d+)$') return 1",
      [],
    ],
    [
      "3 closures",
      "local f = function(a) return a end local g = function(a) return a end local h = function(a) return a end return 1",
      [],
    ],
    [
      "SET k <string> PX <string>",
      "redis.call('SET', KEYS[1], '6755399441055745', 'PX', '100000') return 1",
      [],
    ],
    [
      "SET k <Lua number> PX <Lua number>",
      "redis.call('SET', KEYS[1], 6755399441055745, 'PX', 100000) return 1",
      [],
    ],
    [
      'SET k string.format("%d") PX string.format("%d")',
      "redis.call('SET', KEYS[1], string.format('%d', 6755399441055745), 'PX', string.format('%d', 100000)) return 1",
      [],
    ],
    [
      "INCR k, then PEXPIRE k <string>",
      "redis.call('INCR', KEYS[1]) redis.call('PEXPIRE', KEYS[1], '100000') return 1",
      [],
    ],
    [
      "INCR k, then SET k <string> PX <string>",
      "redis.call('INCR', KEYS[1]) redis.call('SET', KEYS[1], '6755399441055745', 'PX', '100000') return 1",
      [],
    ],
  ];
  const usec: number[][] = blocks.map(() => []);
  for (let round = 0; round < rounds; round++) {
    for (const [i, [, text, args]] of blocks.entries()) {
      const sha = String(await conn.call("SCRIPT", "LOAD", text));
      await conn.call("FLUSHALL");
      usec[i]!.push(await run(["EVALSHA", sha, "1", "k:__rand_int__", ...args], requests, true));
    }
  }
  console.log(`redis-benchmark, ${requests} EVALSHA a run, -P 16, fresh keys, ${rounds} rounds, medians.\n`);
  console.log("| script | µs/EVALSHA | over `return 1` |");
  console.log("|---|---:|---:|");
  const base = median(usec[0]!);
  for (const [i, [name]] of blocks.entries()) {
    const m = median(usec[i]!);
    console.log(`| ${name} | ${m.toFixed(2)} | ${i === 0 ? "–" : (m - base).toFixed(2)} |`);
  }
}

/** Each library's captured EVALSHA, every algorithm pair and path, the two in turns. */
async function compare(run: Run): Promise<void> {
  await loadOurs(conn);
  const argv = (sha: string, c: Omit<Command, "sha">) => [
    "EVALSHA",
    sha,
    String(c.keys.length),
    ...c.keys,
    ...c.args,
  ];
  console.log(
    `redis-benchmark, ${requests} EVALSHA a run, -P 16, ${rounds} rounds, medians${hasTaskset ? ", pinned" : ""}.\n`,
  );
  console.log("| algorithm | path | µs/EVALSHA (ours) | µs/EVALSHA (peer) | ratio |");
  console.log("|---|---|---:|---:|---:|");
  for (const pair of LUA_PAIRS) {
    if (!pair.peer) continue;
    for (const path of LUA_PATHS) {
      const id = path === "first" ? "__rand_int__" : `rb-${path}`;
      const limit = path === "denied" ? 1 : BIG;
      const [mine] = await captureOurs(pair.algo, `rb-${pair.algo}`, [id], limit);
      const theirs = await capturePeer(pair.peer, `rb-peer-${pair.algo}`, [id], limit);
      const peerSha = String(await conn.call("SCRIPT", "LOAD", theirs.script));
      const commands = { ours: argv(mine!.sha, mine!), peer: argv(peerSha, theirs.commands[0]!) };
      const usec: Record<"ours" | "peer", number[]> = { ours: [], peer: [] };
      for (let round = 0; round < rounds; round++) {
        const order = round % 2 === 0 ? (["ours", "peer"] as const) : (["peer", "ours"] as const);
        for (const who of order) {
          await conn.call("FLUSHALL");
          if (path !== "first") await run(commands[who], 1, false); // the warm-up call: first in its window
          usec[who].push(await run(commands[who], requests, path === "first"));
        }
      }
      const o = median(usec.ours);
      const p = median(usec.peer);
      const name = pair.peer === pair.algo ? pair.algo : `${pair.algo} (peer: ${pair.peer})`;
      console.log(
        `| ${name} | ${path satisfies LuaPath} | ${o.toFixed(2)} | ${p.toFixed(2)} | ${(o / p).toFixed(2)}× |`,
      );
    }
  }
}
