// Parts 2, 3 and 5: what a decision costs in HTTP requests (bridge counters) and Redis commands
// (INFO commandstats, which counts the commands a script runs as well as the EVALSHA itself), the deny
// flood, and the server-side time of each script (usec_per_call of EVALSHA).
import { ALGOS, type Algo, type Contestant, contestant, type Lib, type Policy } from "./contestants.js";
import { type BenchEnv, workCommands } from "./env.js";
import { OPEN_POLICY } from "./throughput.js";
import { log } from "./util.js";

export type Phase = "allowed, first in window" | "allowed, later" | "denied";
export const PHASES: Phase[] = ["allowed, first in window", "allowed, later", "denied"];

export interface CostRow {
  label: string;
  lib: Lib;
  algo: Algo;
  rules: number;
  peerMulti?: "parallel" | "sequential";
  phase: Phase;
  decisions: number;
  httpPerDecision: number;
  evalshaPerDecision: number;
  /** Every command Redis ran (EVALSHA + the commands inside scripts), per decision. */
  commandsPerDecision: number;
  /** Commands inside the scripts, by name, per decision. */
  inner: Record<string, number>;
  /** Decisions that came out other than the phase expects (should be 0). */
  unexpected: number;
}

/** Everything each call of a decision costs, one phase at a time: each identifier is called once per phase. */
export async function runCost(env: BenchEnv, tag: string, ids: number): Promise<CostRow[]> {
  const rows: CostRow[] = [];
  const entries: { lib: Lib; algo: Algo; rules: number; peerMulti?: "parallel" | "sequential" }[] = [];
  for (const lib of ["edgelimit", "upstash"] as const)
    for (const algo of ALGOS[lib]) entries.push({ lib, algo, rules: 1 });
  for (const algo of ALGOS.edgelimit) entries.push({ lib: "edgelimit", algo, rules: 3 });
  for (const algo of ALGOS.upstash) {
    entries.push({ lib: "upstash", algo, rules: 3, peerMulti: "parallel" });
    entries.push({ lib: "upstash", algo, rules: 3, peerMulti: "sequential" });
  }
  const names = Array.from({ length: ids }, (_, i) => `c${i}`);
  let n = 0;
  for (const e of entries) {
    log(`cost: ${e.lib} ${e.algo} ×${e.rules}${e.peerMulti ? ` ${e.peerMulti}` : ""}`);
    // two units per long window: call 1 is a first admission, call 2 a later one, call 3 a denial
    const policies: Policy[] = Array.from({ length: e.rules }, (_, r) => ({
      limit: 2,
      window: 3_600_000 * (r + 1),
    }));
    const c = contestant(e.lib, e.algo, {
      redis: env.client(),
      prefix: `cost-${tag}-${n++}`,
      policies,
      cache: "off",
      peerMulti: e.peerMulti,
    });
    await c.limit("warm-up"); // loads the script (NOSCRIPT → EVAL) outside the counted runs
    for (const phase of PHASES) {
      await env.resetCommandStats();
      await env.resetBridgeStats();
      let unexpected = 0;
      for (const id of names) {
        const allowed = await c.limit(id); // concurrency 1: one decision at a time
        if (allowed !== (phase !== "denied")) unexpected++;
      }
      const http = await env.bridgeStats();
      const stats = workCommands(await env.commandStats());
      const evalsha = stats.get("evalsha")?.calls ?? 0;
      let total = 0;
      const inner: Record<string, number> = {};
      for (const [name, s] of stats) {
        total += s.calls;
        if (name !== "evalsha") inner[name] = s.calls / ids;
      }
      rows.push({
        label: c.label,
        lib: e.lib,
        algo: e.algo,
        rules: e.rules,
        peerMulti: e.peerMulti,
        phase,
        decisions: ids,
        httpPerDecision: http.requests / ids,
        evalshaPerDecision: evalsha / ids,
        commandsPerDecision: total / ids,
        inner,
        unexpected,
      });
    }
  }
  return rows;
}

export interface FloodRow {
  label: string;
  lib: Lib;
  algo: Algo;
  cache: "default" | "off";
  concurrency: number;
  requests: number;
  admitted: number;
  http: number;
  evalsha: number;
  commands: number;
  seconds: number;
}

export const FLOOD_POLICY: Policy = { limit: 10, window: 3_600_000 };

/** Part 3: one identifier sends `total` requests, far over its limit. */
export async function runFlood(env: BenchEnv, tag: string, total: number): Promise<FloodRow[]> {
  const rows: FloodRow[] = [];
  let n = 0;
  const runs: { cache: "default" | "off"; concurrency: number }[] = [
    { cache: "default", concurrency: 1 },
    { cache: "default", concurrency: 64 },
    { cache: "off", concurrency: 64 },
  ];
  for (const lib of ["edgelimit", "upstash"] as const) {
    for (const algo of ALGOS[lib]) {
      log(`flood: ${lib} ${algo}`);
      for (const run of runs) {
        const c = contestant(lib, algo, {
          redis: env.client(),
          prefix: `flood-${tag}-${n++}`,
          policies: [FLOOD_POLICY],
          cache: run.cache,
        });
        await c.limit("warm-up");
        await env.resetCommandStats();
        await env.resetBridgeStats();
        let admitted = 0;
        let sent = 0;
        const t0 = performance.now();
        await Promise.all(
          Array.from({ length: run.concurrency }, async () => {
            while (sent < total) {
              sent++;
              if (await c.limit("flooder")) admitted++;
            }
          }),
        );
        const seconds = (performance.now() - t0) / 1000;
        const http = await env.bridgeStats();
        const stats = workCommands(await env.commandStats());
        let commands = 0;
        for (const s of stats.values()) commands += s.calls;
        rows.push({
          label: c.label,
          lib,
          algo,
          cache: run.cache,
          concurrency: run.concurrency,
          requests: total,
          admitted,
          http: http.requests,
          evalsha: stats.get("evalsha")?.calls ?? 0,
          commands,
          seconds,
        });
      }
    }
  }
  return rows;
}

export interface LuaRow {
  label: string;
  lib: Lib;
  algo: Algo;
  path: "allowed" | "denied";
  calls: number;
  usecPerCall: number;
  /** usec per call of the commands the script ran, summed (part of usecPerCall). */
  innerUsecPerCall: number;
}

/** Part 5: server time per EVALSHA (commandstats usec_per_call), per algorithm, allowed and denied paths. */
export async function runLuaCost(env: BenchEnv, tag: string, decisions: number): Promise<LuaRow[]> {
  const rows: LuaRow[] = [];
  const ids = Array.from({ length: 1000 }, (_, i) => `l${i}`);
  let n = 0;
  for (const lib of ["edgelimit", "upstash"] as const) {
    for (const algo of ALGOS[lib]) {
      log(`lua cost: ${lib} ${algo}`);
      for (const path of ["allowed", "denied"] as const) {
        // allowed: far below the limit (the sliding log keeps a handful of entries per identifier);
        // denied: one unit per hour, spent before the counted run
        const policy: Policy =
          path === "denied"
            ? { limit: 1, window: 3_600_000 }
            : algo === "slidingLog"
              ? { limit: 100_000, window: 60_000 }
              : OPEN_POLICY;
        const c: Contestant = contestant(lib, algo, {
          redis: env.client(),
          prefix: `lua-${tag}-${n++}`,
          policies: [policy],
          cache: "off",
        });
        await Promise.all(ids.map((id) => c.limit(id)));
        await env.resetCommandStats();
        let done = 0;
        await Promise.all(
          Array.from({ length: 64 }, async () => {
            while (done < decisions) {
              await c.limit(ids[done++ % ids.length]!);
            }
          }),
        );
        const stats = workCommands(await env.commandStats());
        const ev = stats.get("evalsha");
        let inner = 0;
        for (const [name, s] of stats) if (name !== "evalsha") inner += s.usec;
        rows.push({
          label: c.label,
          lib,
          algo,
          path,
          calls: ev?.calls ?? 0,
          usecPerCall: ev?.usecPerCall ?? Number.NaN,
          innerUsecPerCall: ev ? inner / ev.calls : Number.NaN,
        });
      }
    }
  }
  return rows;
}
