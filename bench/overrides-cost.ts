// What one decision costs inside Redis with overrides on, per algorithm and path, beside
// @upstash/ratelimit with `dynamicLimits: true`: commands (EVALSHA plus every command inside, as INFO
// commandstats counts them) and the server µs per EVALSHA. The machinery of bench/lua-cost.ts: each
// library's real EVALSHA is captured from the library (edgelimit's through an in-process fetch, the
// peer's through a recording client), then replayed pipelined to one private redis-server.
//
// edgelimit, one rule, effective limit 2 per hour in every case (call 1 first, 2 later, 3 denied):
//   off      overrides off (today's lean path), limit 2
//   none     overrides: true, no override stored, limit 2
//   plan     overrides: true, base limit 1, `overrides.set(id, { plan: "pro" })`, pro raises it to 2
//   custom   overrides: true, base limit 1, `overrides.set(id, { rules: { r0: { …: 2 } } })`
// the peer, dynamicLimits: true:
//   unset    no dynamic limit set, limit 2
//   set      limit 1, `setDynamicLimit({ limit: 2 })`
// Stored overrides and the dynamic limit are written with the commands the libraries send for them
// (captured the same way), before the measured decisions and outside their commandstats.
//
//   node --import tsx bench/overrides-cost.ts [--rounds 7] [--ids 2000] [--redis redis://127.0.0.1:6379]
import { Ratelimit } from "@upstash/ratelimit";
import type { Redis } from "@upstash/redis";
import { startRedisServer } from "../src/bridge/index.js";
import { connectRedis, type RedisConnection } from "../src/bridge/resp.js";
import { stripUnknownShebangFlags } from "../src/bridge/scripts.js";
import * as generated from "../src/engine/generated/scripts.js";
import { Limiter } from "../src/index.js";
import {
  BATCH,
  type Command,
  LIMIT,
  LUA_PATHS,
  type LuaPath,
  measure,
  median,
  NOW,
  ourRule,
  peerAlgorithm,
  quartiles,
  type Sample,
} from "./lua-cost.js";

type Algo = "fixedWindow" | "slidingWindow" | "tokenBucket" | "gcra";
type PeerAlgo = "fixedWindow" | "slidingWindow" | "tokenBucket";
export type OursCase = "off" | "none" | "plan" | "custom";
export type PeerCase = "unset" | "set";
export const OURS_CASES: readonly OursCase[] = ["off", "none", "plan", "custom"];
export const PEER_CASES: readonly PeerCase[] = ["unset", "set"];

const PAIRS: readonly { algo: Algo; peer: PeerAlgo }[] = [
  { algo: "fixedWindow", peer: "fixedWindow" },
  { algo: "slidingWindow", peer: "slidingWindow" },
  { algo: "tokenBucket", peer: "tokenBucket" },
  { algo: "gcra", peer: "tokenBucket" },
];

/** The constructor field that holds each rule's capacity: what the plan and the custom override raise. */
const CAPACITY: Record<Algo, string> = {
  fixedWindow: "limit",
  slidingWindow: "limit",
  tokenBucket: "capacity",
  gcra: "burst",
};

export interface Cost {
  commands: number;
  inner: Record<string, number>;
  usec: number;
  usecQuartiles: [number, number];
}

export interface OverridesCostRow {
  algo: Algo;
  peer: PeerAlgo;
  path: LuaPath;
  /** The generated script each case sends (its export name in src/engine/generated/scripts.ts). */
  scripts: Record<OursCase, string>;
  ours: Record<OursCase, Cost>;
  peerCost: Record<PeerCase, Cost>;
}

interface Captured {
  /** Commands that store the override (or the dynamic limit): sent before, not measured. */
  setup: string[][];
  decisions: Command[];
}

/** edgelimit's commands for `ids` in one case: what `overrides.set()` and `limit()` send, as sent. */
async function captureOurs(algo: Algo, which: OursCase, prefix: string, ids: string[]): Promise<Captured> {
  const setup: string[][] = [];
  const decisions: Command[] = [];
  const realFetch = globalThis.fetch;
  globalThis.fetch = (async (_url: unknown, init?: { body?: unknown }) => {
    const body = JSON.parse(String(init?.body)) as unknown[];
    const single = typeof body[0] === "string";
    const commands = (single ? [body] : body) as string[][];
    for (const cmd of commands) {
      if (String(cmd[0]).toUpperCase() === "EVALSHA") {
        const n = Number(cmd[2]);
        decisions.push({
          sha: String(cmd[1]),
          keys: cmd.slice(3, 3 + n).map(String),
          args: cmd.slice(3 + n).map(String),
        });
      } else setup.push(cmd.map(String));
    }
    const replies = commands.map(() => ({ result: 1 }));
    return new Response(JSON.stringify(single ? replies[0] : replies), {
      headers: { "content-type": "application/json" },
    });
  }) as typeof fetch;
  const on = which !== "off";
  const base = which === "plan" || which === "custom" ? 1 : LIMIT;
  const raise = { r0: { [CAPACITY[algo]]: LIMIT } };
  const limiter = new Limiter({
    redis: { url: "http://capture.invalid", token: "capture" },
    prefix,
    rules: { r0: ourRule(algo, base) },
    ...(on ? { plans: { pro: raise }, overrides: true } : {}),
    denyCache: false,
    clock: () => NOW,
  });
  try {
    for (const id of ids) {
      if (which === "plan") await limiter.overrides.set(id, { plan: "pro" });
      if (which === "custom") await limiter.overrides.set(id, { rules: raise });
    }
    // the stand-in's replies are not decisions: only the command sent matters here
    for (const id of ids) await limiter.limit(id).catch(() => undefined);
  } finally {
    globalThis.fetch = realFetch;
  }
  if (decisions.length !== ids.length)
    throw new Error(`overrides-cost: captured ${decisions.length} EVALSHA for ${ids.length} ids`);
  return { setup, decisions };
}

/** The peer's commands for `ids` with dynamicLimits on, and its script. */
async function capturePeer(
  algo: PeerAlgo,
  which: PeerCase,
  prefix: string,
  ids: string[],
): Promise<Captured & { script: string }> {
  let script = "";
  const setup: string[][] = [];
  const calls: Omit<Command, "sha">[] = [];
  const redis = {
    evalsha: async () => {
      throw new Error("NOSCRIPT No matching script");
    },
    eval: async (text: string, keys: string[], args: unknown[]) => {
      script = text;
      calls.push({ keys: keys.map(String), args: args.map(String) });
      return algo === "tokenBucket" ? [1, 1, 1] : [1, 1];
    },
    set: async (key: string, value: unknown) => {
      setup.push(["SET", key, String(value)]);
      return "OK";
    },
  };
  const limiter = new Ratelimit({
    redis: redis as unknown as Redis,
    limiter: peerAlgorithm(algo, which === "set" ? 1 : LIMIT),
    prefix,
    ephemeralCache: false,
    enableTelemetry: false,
    analytics: false,
    dynamicLimits: true,
  });
  if (which === "set") await limiter.setDynamicLimit({ limit: LIMIT });
  const real = Date.now;
  for (const id of ids) {
    Date.now = () => NOW;
    try {
      await limiter.limit(id);
    } finally {
      Date.now = real;
    }
  }
  return {
    script: stripUnknownShebangFlags(script),
    setup,
    decisions: calls.map((c) => ({ sha: "", ...c })),
  };
}

/** Loads every script edgelimit ships (whatever the Limiter picks with overrides on): SHA-1 → its name. */
async function loadOurs(conn: RedisConnection): Promise<Map<string, string>> {
  const texts = new Map<string, string>();
  const visit = (value: unknown, name: string) => {
    if (!value || typeof value !== "object") return;
    if ("text" in value && typeof value.text === "string") {
      if (!texts.has(value.text)) texts.set(value.text, name);
    } else for (const [key, inner] of Object.entries(value)) visit(inner, key);
  };
  // the top-level exports first: their names are the ones to show
  const exports = Object.entries(generated).sort(([, a], [, b]) => Number("text" in b) - Number("text" in a));
  for (const [name, value] of exports) visit(value, name);
  const shas = new Map<string, string>();
  for (const [text, name] of texts) shas.set(String(await conn.call("SCRIPT", "LOAD", text)), name);
  return shas;
}

async function send(conn: RedisConnection, commands: string[][]): Promise<void> {
  for (let at = 0; at < commands.length; at += 1000) {
    const replies = await conn.send(commands.slice(at, at + 1000));
    const failed = replies.find((r) => r instanceof Error);
    if (failed) throw failed;
  }
}

const summary = (samples: Sample[]): Cost => ({
  commands: median(samples.map((s) => s.commands)),
  inner: samples[0]!.inner,
  usec: median(samples.map((s) => s.usec)),
  usecQuartiles: quartiles(samples.map((s) => s.usec)),
});

export async function measureOverridesCost(
  options: { rounds?: number; ids?: number; redisUrl?: string; log?: (line: string) => void } = {},
): Promise<OverridesCostRow[]> {
  const rounds = options.rounds ?? 7;
  const idCount = options.ids ?? 2000;
  const log = options.log ?? (() => {});
  const server = options.redisUrl ? undefined : await startRedisServer();
  const conn = await connectRedis(options.redisUrl ?? server!.url);
  try {
    const ourShas = await loadOurs(conn);
    const rows: OverridesCostRow[] = [];
    const scripts = new Map<string, string>();
    for (const pair of PAIRS) {
      log(`overrides-cost: ${pair.algo} vs the peer's ${pair.peer} with dynamicLimits`);
      const names = [...OURS_CASES.map((c) => `ours:${c}`), ...PEER_CASES.map((c) => `peer:${c}`)];
      const samples = new Map<string, Record<LuaPath, Sample[]>>(
        names.map((n) => [n, { first: [], later: [], denied: [] }]),
      );
      for (let round = 0; round < rounds; round++) {
        const ids = Array.from({ length: idCount }, (_, i) => `u${round}-${i}`);
        const contestants = new Map<string, Command[]>();
        for (const which of OURS_CASES) {
          const c = await captureOurs(pair.algo, which, `oc-${pair.algo}-${which}`, ids);
          if (!c.decisions.every((d) => ourShas.has(d.sha)))
            throw new Error("overrides-cost: the Limiter sends a script this file does not load");
          scripts.set(`${pair.algo} ${which}`, ourShas.get(c.decisions[0]!.sha)!);
          await send(conn, c.setup);
          contestants.set(`ours:${which}`, c.decisions);
        }
        for (const which of PEER_CASES) {
          const c = await capturePeer(pair.peer, which, `oc-peer-${pair.algo}-${which}`, ids);
          const sha = String(await conn.call("SCRIPT", "LOAD", c.script));
          await send(conn, c.setup);
          contestants.set(
            `peer:${which}`,
            c.decisions.map((d) => ({ ...d, sha })),
          );
        }
        // as in bench/lua-cost.ts: every path in order; within one, batches in which the contestants
        // take turns, the order rotating from batch to batch
        for (const path of LUA_PATHS) {
          for (let at = 0, b = 0; at < ids.length; at += BATCH, b++) {
            for (let k = 0; k < names.length; k++) {
              const name = names[(round + b + k) % names.length]!;
              const batch = contestants.get(name)!.slice(at, at + BATCH);
              samples.get(name)![path].push(await measure(conn, batch));
            }
          }
        }
      }
      for (const path of LUA_PATHS) {
        const of = (name: string) => summary(samples.get(name)![path]);
        rows.push({
          algo: pair.algo,
          peer: pair.peer,
          path,
          scripts: Object.fromEntries(
            OURS_CASES.map((c) => [c, scripts.get(`${pair.algo} ${c}`)!]),
          ) as Record<OursCase, string>,
          ours: Object.fromEntries(OURS_CASES.map((c) => [c, of(`ours:${c}`)])) as Record<OursCase, Cost>,
          peerCost: Object.fromEntries(PEER_CASES.map((c) => [c, of(`peer:${c}`)])) as Record<PeerCase, Cost>,
        });
      }
    }
    return rows;
  } finally {
    await conn.close();
    await server?.stop();
  }
}

const innerText = (r: Record<string, number>) =>
  Object.entries(r)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([name, n]) => `${name.toUpperCase()}${n === 1 ? "" : `×${Number(n.toFixed(2))}`}`)
    .join(" ") || "–";
const count = (c: Cost) => `${Number(c.commands.toFixed(2))} (${innerText(c.inner)})`;

/** The most commands overrides add to a decision (a case on, against off), and where, over every row. */
export function addedCommands(rows: OverridesCostRow[]): { added: number; where: string[] } {
  const all = rows.flatMap((r) =>
    (["none", "plan", "custom"] as const).map((c) => ({
      added: r.ours[c].commands - r.ours.off.commands,
      where: `${r.algo} ${r.path} ${c}`,
    })),
  );
  const added = Math.max(...all.map((x) => x.added));
  return { added, where: all.filter((x) => x.added === added).map((x) => x.where) };
}

/** The worst µs ratio of each case on to the peer's like case: none ÷ unset, plan and custom ÷ set. */
export function peerRatios(rows: OverridesCostRow[]): { none: number; stored: number } {
  return {
    none: Math.max(...rows.map((r) => r.ours.none.usec / r.peerCost.unset.usec)),
    stored: Math.max(
      ...rows.flatMap((r) => [
        r.ours.plan.usec / r.peerCost.set.usec,
        r.ours.custom.usec / r.peerCost.set.usec,
      ]),
    ),
  };
}

/** Two Markdown tables (commands, µs) and the summary lines bench/report.ts reads its goals from. */
export function overridesCostTable(rows: OverridesCostRow[]): string {
  const algoName = (r: OverridesCostRow) => (r.peer === r.algo ? r.algo : `${r.algo} (peer: ${r.peer})`);
  const head = [
    "algorithm",
    "path",
    "off",
    "on, none stored",
    "on, plan stored",
    "on, custom stored",
    "peer, no dynamic limit",
    "peer, dynamic limit set",
  ];
  const align = (h: string[]) => `|${h.map((_, i) => (i < 2 ? "---" : "---:")).join("|")}|`;
  const commands = [`| ${head.join(" | ")} |`, align(head)];
  const usec = [`| ${[...head, "ratio none ÷ no limit", "ratio plan, custom ÷ limit set"].join(" | ")} |`];
  usec.push(align([...head, "", ""]));
  for (const r of rows) {
    const cells = [...OURS_CASES.map((c) => r.ours[c]), ...PEER_CASES.map((c) => r.peerCost[c])];
    commands.push(`| ${[algoName(r), r.path, ...cells.map(count)].join(" | ")} |`);
    usec.push(
      `| ${[
        algoName(r),
        r.path,
        ...cells.map((c) => `${c.usec.toFixed(2)} [${c.usecQuartiles.map((q) => q.toFixed(2)).join("–")}]`),
        `${(r.ours.none.usec / r.peerCost.unset.usec).toFixed(2)}×`,
        `${(r.ours.plan.usec / r.peerCost.set.usec).toFixed(2)}×, ${(r.ours.custom.usec / r.peerCost.set.usec).toFixed(2)}×`,
      ].join(" | ")} |`,
    );
  }
  const ratios = peerRatios(rows);
  const added = addedCommands(rows);
  return `Commands per decision (EVALSHA included; the script's commands in brackets):

${commands.join("\n")}

Redis µs per EVALSHA, median [quartiles]:

${usec.join("\n")}

Scripts edgelimit sends: ${rows
    .filter((r) => r.path === "first")
    .map((r) => `${r.algo}: ${OURS_CASES.map((c) => `${c} \`${r.scripts[c]}\``).join(", ")}`)
    .join("; ")}.

Overrides on add at most +${Number(added.added.toFixed(2))} commands per decision to overrides off, over every algorithm, path and case (${added.where.join(", ")}).
With overrides on, µs per EVALSHA beside the peer's with dynamicLimits on: none stored at most ${ratios.none.toFixed(2)}× no dynamic limit; a plan or custom override stored at most ${ratios.stored.toFixed(2)}× a dynamic limit set.`;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const arg = (name: string) => {
    const i = process.argv.indexOf(`--${name}`);
    return i > 0 ? process.argv[i + 1] : undefined;
  };
  const rows = await measureOverridesCost({
    rounds: arg("rounds") ? Number(arg("rounds")) : undefined,
    ids: arg("ids") ? Number(arg("ids")) : undefined,
    redisUrl: arg("redis"),
    log: (line) => process.stderr.write(`${line}\n`),
  });
  console.log(overridesCostTable(rows));
}
