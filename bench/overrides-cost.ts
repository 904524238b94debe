// Part 8: what one decision costs inside Redis with overrides on, beside @upstash/ratelimit with
// `dynamicLimits: true`, with the machinery of bench/lua-cost.ts; the cases are the section's columns.
// Stored overrides and the dynamic limit are written with the commands the libraries send for them
// (captured the same way), before the measured decisions and outside their commandstats.
import type { RedisConnection } from "../src/bridge/resp.js";
import { type Algo, ourRule, PAIRS, pairName } from "./contestants.js";
import { check, commandNames, type Goal, type Part, table } from "./harness.js";
import {
  asEvalsha,
  type Command,
  type Contestants,
  type Cost,
  captureOurs,
  capturePeer,
  countInstructions,
  hourly,
  LIMIT,
  measureCosts,
  pairedRatio,
} from "./lua-cost.js";

const OURS = ["off", "none", "plan", "custom"] as const;
/** Identifiers a contestant whose instructions are counted (countInstructions). */
const COUNTED = 300;
const PEER = ["unset", "set"] as const;
const CASES = [...OURS, ...PEER];
type Case = (typeof CASES)[number];
/**
 * Two ablations, timed in turns of their own beside their cases (not counted: their instructions are
 * their cases'): "none" with its override key one key every call reads (never stored), and "unset"
 * with its dynamic limit's key one per identifier (never set), as an override's is. What moves is only
 * where a key lies in memory: one every call reads stays in the CPU's caches, one per identifier is
 * read from memory.
 */
const ABLATED = ["none", "noneShared", "unset", "unsetPerId"] as const;
type Ablated = (typeof ABLATED)[number];

/** The constructor field that holds each rule's capacity: what the plan and the custom override raise. */
const CAPACITY: Partial<Record<Algo, string>> = {
  fixedWindow: "limit",
  slidingWindow: "limit",
  tokenBucket: "capacity",
  gcra: "burst",
};

async function send(conn: RedisConnection, commands: string[][]): Promise<void> {
  for (let at = 0; at < commands.length; at += 1000) {
    const failed = (await conn.send(commands.slice(at, at + 1000))).find((r) => r instanceof Error);
    if (failed) throw failed;
  }
}

/** Per algorithm: the generated script each case of ours sends (its export name in src/engine/generated/scripts.ts). */
async function measureOverridesCost(rounds: number, idCount: number, counted: number) {
  const scripts: Record<string, string> = {};
  const pairs = PAIRS.filter((p) => p.peer);
  // the contestants `cases` names, in that order: edgelimit's, then the peer's
  const contestants =
    (cases: readonly (Case | Ablated)[]): Contestants<(typeof pairs)[number]> =>
    async ({ algo, peer }, ids, conn, ourScript) => {
      const contestants: Command[][] = [];
      const raise = { r0: { [CAPACITY[algo]!]: LIMIT } };
      for (const which of cases) {
        if (which === "unset" || which === "set" || which === "unsetPerId") {
          const c = await capturePeer(peer!, LIMIT, `oc-peer-${algo}-${which}`, ids, {
            set: which === "set",
          });
          await send(conn, c.setup);
          const calls = await asEvalsha(conn, c);
          // the ablation: the dynamic limit's key (the last of KEYS) one per identifier
          const perId = (d: Command, at: number) => ({
            ...d,
            keys: [...d.keys.slice(0, -1), `oc-peer-${algo}-dynamic:${ids[at]}`],
          });
          contestants.push(which === "unsetPerId" ? calls.map(perId) : calls);
          continue;
        }
        const rules = { r0: ourRule(algo, ...hourly(which === "plan" || which === "custom" ? 1 : LIMIT)) };
        const on = which === "off" ? {} : { plans: { pro: raise }, overrides: true };
        const c = await captureOurs(
          { prefix: `oc-${algo}-${which}`, rules, ...on },
          ids,
          async (limiter, id) => {
            if (which === "plan") await limiter.overrides.set(id, { plan: "pro" });
            if (which === "custom") await limiter.overrides.set(id, { rules: raise });
          },
        );
        scripts[`${algo} ${which}`] = ourScript(c.decisions);
        await send(conn, c.setup);
        // the ablation: the override key (KEYS[2]) one key for all
        const shared = (d: Command) => ({
          ...d,
          keys: d.keys.map((k, i) => (i === 1 ? `oc-${algo}-shared` : k)),
        });
        contestants.push(which === "noneShared" ? c.decisions.map(shared) : c.decisions);
      }
      return contestants;
    };
  const rows = await measureCosts(pairs, rounds, idCount, contestants(CASES));
  // the ablations in turns of their own, beside their cases (the data set of the cases' stays as it was)
  const ablations = await measureCosts(pairs, rounds, idCount, contestants(ABLATED));
  const counts = await countInstructions(pairs, counted, contestants(CASES));
  return rows.map(({ algo, peer, path, costs }, at) => ({
    algo,
    peer: peer!,
    path,
    scripts: Object.fromEntries(OURS.map((c) => [c, scripts[`${algo} ${c}`]!])),
    costs: Object.fromEntries(CASES.map((c, i) => [c, costs[i]!])) as Record<Case, Cost>,
    ablation: Object.fromEntries(ABLATED.map((c, i) => [c, ablations[at]!.costs[i]!])) as Record<
      Ablated,
      Cost
    >,
    instructions: counts
      ? (Object.fromEntries(CASES.map((c, i) => [c, counts[at]!.instructions[i]!])) as Record<Case, number>)
      : undefined,
  }));
}
type OverridesCostRow = Awaited<ReturnType<typeof measureOverridesCost>>[number];

/** The most commands overrides add to a decision (a case on, against off), and where, over every row. */
function addedCommands(rows: OverridesCostRow[]) {
  const all = rows.flatMap((r) =>
    (["none", "plan", "custom"] as const).map((c) => ({
      added: r.costs[c].commands - r.costs.off.commands,
      where: `${r.algo} ${r.path} ${c}`,
    })),
  );
  const added = Math.max(...all.map((x) => x.added));
  return { added: Number(added.toFixed(2)), where: all.filter((x) => x.added === added).map((x) => x.where) };
}

/** The worst of `xs` (a ratio and where it was measured). */
const worst = (xs: { ratio: number; where: string }[]) => xs.reduce((a, b) => (b.ratio > a.ratio ? b : a));

/**
 * The worst µs ratio of each case on to the peer's like case, and where: none ÷ unset, plan and
 * custom ÷ set; and none ÷ the ablation unsetPerId (the peer reading a key per identifier, as we do).
 */
function peerRatios(rows: OverridesCostRow[]) {
  const where = (r: OverridesCostRow, c = "") => `${pairName(r)} ${r.path}${c && ` ${c}`}`;
  return {
    none: worst(rows.map((r) => ({ ratio: pairedRatio(r.costs.none, r.costs.unset), where: where(r) }))),
    stored: worst(
      rows.flatMap((r) =>
        (["plan", "custom"] as const).map((c) => ({
          ratio: pairedRatio(r.costs[c], r.costs.set),
          where: where(r, c),
        })),
      ),
    ),
    perId: worst(
      rows.map((r) => ({ ratio: pairedRatio(r.ablation.none, r.ablation.unsetPerId), where: where(r) })),
    ),
  };
}
const times = (x: { ratio: number; where: string }) => `${x.ratio.toFixed(2)}× (${x.where})`;

export const overrides: Part<OverridesCostRow[]> = {
  name: "overrides",
  title: "## 8. Overrides and dynamic limits",
  alone: true,
  run: ({ smoke }) => measureOverridesCost(smoke ? 1 : 7, smoke ? 200 : 2000, smoke ? 20 : COUNTED),
  render(rows, { versions }) {
    const head = [
      "algorithm | path | off | on, none stored | on, plan stored | on, custom stored",
      "peer, no dynamic limit | peer, dynamic limit set",
    ];
    const count = (c: Cost) => `${Number(c.commands.toFixed(2))} (${commandNames(c.inner)})`;
    const us = (c: Cost) =>
      `${c.usec.median.toFixed(2)} [${c.usec.quartiles.map((q) => q.toFixed(2)).join("–")}]`;
    const ratio = (r: OverridesCostRow, c: Case, of: Case) =>
      `${pairedRatio(r.costs[c], r.costs[of]).toFixed(2)}×`;
    const ratios = peerRatios(rows);
    const added = addedCommands(rows);
    return `bench/overrides-cost.ts, with the machinery of part 2: each library's real EVALSHA, captured from the library,
replayed pipelined to one redis-server, every contestant in turns batch by batch; commands as INFO
commandstats counts them, µs its usec per EVALSHA (median over batches of 50; a ratio is the median over
the turns of the two batches of one turn, as in part 2). One rule, an effective limit of 2 per hour in every
column (call 1 is \`first\`, 2 \`later\`, 3 \`denied\`). edgelimit: "off" is \`overrides\` off (part 2's
lean scripts); "on" is \`overrides: true\` with no override stored (limit 2), with
\`overrides.set(id, { plan: "pro" })\` stored (base limit 1, the plan raises it to 2), or with a custom
override \`{ rules: { r0: { limit: 2 } } }\` stored (base limit 1; \`capacity\` for tokenBucket, \`burst\` for
gcra). The peer: \`dynamicLimits: true\`, with no dynamic limit set (limit 2) or with
\`setDynamicLimit({ limit: 2 })\` (limit 1). The override and the dynamic limit are written before the measured
decisions with the commands each library sends for them, outside the measured spans.

The peer's dynamic limit, from its code (@upstash/ratelimit ${versions.ratelimit}):
- It is one value per limiter (per \`prefix\`), the key \`\${prefix}:dynamic:global\` (by default
  \`@upstash/ratelimit:dynamic:global\`), not one per identifier. \`setDynamicLimit({ limit })\` is a \`SET\` of
  that key with no TTL; \`{ limit: false }\` a \`DEL\`. It replaces the limit (tokens, or maxTokens); the window
  and the refill stay.
- With \`dynamicLimits: true\` every call passes the key as an extra KEYS entry of its EVALSHA, and the script
  runs a \`GET\` of it whether or not a limit is set.
- The key has no hash tag (\`{…}\`). On a Redis Cluster every key of one EVALSHA must hash to one slot; the
  identifier's key and this key hash independently, so a call whose identifier's key is in another slot than
  \`\${prefix}:dynamic:global\` is answered with a CROSSSLOT error.

Commands per decision (EVALSHA included; the script's commands in brackets):

${table(
  head,
  rows.map((r) => [pairName(r), r.path, ...CASES.map((c) => count(r.costs[c]))]),
  2,
)}

Redis µs per EVALSHA, median [quartiles]:

${table(
  [...head, "ratio none ÷ no limit", "ratio plan, custom ÷ limit set"],
  rows.map((r) => [
    pairName(r),
    r.path,
    ...CASES.map((c) => us(r.costs[c])),
    ratio(r, "none", "unset"),
    `${ratio(r, "plan", "set")}, ${ratio(r, "custom", "set")}`,
  ]),
  2,
)}

${
  rows.every((r) => r.instructions)
    ? `Redis instructions per EVALSHA (bench/harness.ts's startCountingRedis: a redis-server under valgrind's
callgrind counting inside EVALSHA only, what commandstats times; ${COUNTED} identifiers a contestant, one
after another; the same for the same binary and commands however busy the machine is). What they leave
out is memory: the peer's dynamic limit is one key every call reads (in the CPU's caches), an override
one key per identifier (a read from memory).

${table(
  [...head, "ratio none ÷ no limit", "ratio plan, custom ÷ limit set"],
  rows.map((r) => {
    const n = r.instructions!;
    const x = (c: Case, of: Case) => `${(n[c] / n[of]).toFixed(2)}×`;
    return [
      pairName(r),
      r.path,
      ...CASES.map((c) => n[c]),
      x("none", "unset"),
      `${x("plan", "set")}, ${x("custom", "set")}`,
    ];
  }),
  2,
)}

`
    : "Redis instructions per EVALSHA: not counted (valgrind is not installed).\n\n"
}Scripts edgelimit sends: ${rows
      .filter((r) => r.path === "first")
      .map((r) => `${r.algo}: ${OURS.map((c) => `${c} \`${r.scripts[c]}\``).join(", ")}`)
      .join("; ")}.

Overrides on add at most +${added.added} commands per decision to overrides off, over every algorithm, path and case (${added.where.join(", ")}).
With overrides on, µs per EVALSHA beside the peer's with dynamicLimits on: none stored at most ${times(ratios.none)} no dynamic limit; a plan or custom override stored at most ${times(ratios.stored)} a dynamic limit set.

Where the difference lies: two ablations, the same scripts with one key moved, timed in turns of their own
beside their cases (none stored, no dynamic limit), in a redis-server of their own. "Shared" is
edgelimit's "none" with its override key replaced by one key every call reads (never stored), as the
peer's dynamic limit is; "per identifier" the peer's "no dynamic limit" with that key replaced by one
per identifier (never set), as an override's is. Neither is a library as shipped: they show what a key
read per identifier costs either script (a read from memory, where one key read by every call stays in
the CPU's caches). µs per EVALSHA, median:

${table(
  [
    "algorithm | path | on, none stored | the same, override key shared | peer, no dynamic limit",
    "the same, its key per identifier | ratio none ÷ no limit | ratio shared ÷ no limit | ratio none ÷ per identifier",
  ],
  rows.map((r) => {
    const a = (c: Ablated, of: Ablated) => `${pairedRatio(r.ablation[c], r.ablation[of]).toFixed(2)}×`;
    return [
      pairName(r),
      r.path,
      ...ABLATED.map((c) => r.ablation[c].usec.median.toFixed(2)),
      a("none", "unset"),
      a("noneShared", "unset"),
      a("none", "unsetPerId"),
    ];
  }),
  2,
)}

Beside the peer reading a key per identifier, as edgelimit does, none stored is at most ${times(ratios.perId)}.`;
  },
  goals(rows): Goal[] {
    const added = rows && addedCommands(rows);
    const ratios = rows && peerRatios(rows);
    return [
      [
        "Redis commands per decision with overrides on ≤ overrides off + 1, every algorithm and path (part 8)",
        added ? `+${added.added} at most (${added.where.join(", ")})` : "–",
        check(added ? added.added <= 1 : undefined),
      ],
      [
        "Redis µs per EVALSHA with overrides on and none stored ≤ 1.0× the peer's with dynamicLimits on and none set, every algorithm and path (part 8)",
        ratios ? `at most ${times(ratios.none)}` : "–",
        check(ratios && ratios.none.ratio <= 1),
      ],
      [
        "Redis µs per EVALSHA with a plan or custom override stored ≤ 1.25× the peer's with a dynamic limit set, every algorithm and path (part 8)",
        ratios ? `at most ${times(ratios.stored)}` : "–",
        check(ratios && ratios.stored.ratio <= 1.25),
      ],
      // an ablation: no bar
      [
        "The same, none stored, beside the peer with its dynamic limit's key one per identifier, as an override's is (an ablation, part 8)",
        ratios ? `at most ${times(ratios.perId)}` : "–",
        ratios ? "shown" : "pending",
      ],
    ];
  },
};
