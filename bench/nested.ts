// Part 11: budgets that nest. Three identifiers a request (an API key, the client's IP, one global),
// one Limiter with a rule keyed `by` each, with and without leases, beside three @upstash/ratelimit
// limiters awaited in turn (the peer's way). (a) closed loops, as part 1, nothing denied; (b) 4
// instances × 64 callers, random costs, on a clock that does not move (every limit exact), most
// decisions denied: what each identifier was admitted, and what its limits hold as taken (peeked).
import { Ratelimit } from "@upstash/ratelimit";
import type { Redis } from "@upstash/redis";
import type { RuleConfig } from "../src/index.js";
import { type Algo, ourRule, peerLimiter } from "./contestants.js";
import {
  atTime,
  check,
  closedLoop,
  fmt,
  type Goal,
  inTurns,
  log,
  ms,
  type Part,
  percentile,
  startEnv,
  table,
} from "./harness.js";
import { edgelimit } from "./load.js";
import { type Policy, rng, SIM_T0 } from "./scenarios.js";

const RULES = ["perKey", "perIp", "global"] as const;
type RuleName = (typeof RULES)[number];
/** Each rule: the field it is keyed by, edgelimit's algorithm and the peer's; the peer awaits its limiters in this order. */
const SHAPE: Record<RuleName, { by: string; ours: Algo; peer: Algo }> = {
  perKey: { by: "key", ours: "gcra", peer: "tokenBucket" },
  perIp: { by: "ip", ours: "slidingWindow", peer: "slidingWindow" },
  global: { by: "global", ours: "gcra", peer: "tokenBucket" },
};
const OPEN: Policy = { limit: 1_000_000_000, window: 60_000 };
const RULES_OPEN = { perKey: OPEN, perIp: OPEN, global: OPEN };
/** (b): a minute each, on a clock that does not move; 12 keys on 4 IPs, so each level binds in turn. */
const LOAD: Record<RuleName, Policy> = {
  perKey: { limit: 10, window: 60_000 },
  perIp: { limit: 30, window: 60_000 },
  global: { limit: 100, window: 60_000 },
};
const LOAD_KEYS = 12;
const LEASE = { max: 50, ttl: "1s" };
const INSTANCES = 4;
const CALLERS = 64;

type Kind = "edgelimit" | "edgelimit+lease" | "peer";
const KINDS: { kind: Kind; label: string }[] = [
  { kind: "edgelimit", label: "edgelimit, one Limiter, 3 rules" },
  { kind: "edgelimit+lease", label: `edgelimit + lease (max ${LEASE.max}, ttl ${LEASE.ttl})` },
  { kind: "peer", label: "@upstash/ratelimit, 3 limiters awaited in turn" },
];

type Who = Record<"key" | "ip" | "global", string>;
/** Key kN or uN comes from IP N mod `ips`: (a) 1000 keys on 250 IPs, (b) 12 keys on 4. */
const who = (key: string, ips = 250): Who => ({
  key,
  ip: `10.0.0.${Number(key.slice(1)) % ips}`,
  global: "all",
});

interface Nested {
  /** `rule`: the binding rule of a denial. */
  limit(w: Who, cost: number): Promise<{ allowed: boolean; rule?: RuleName; error: boolean }>;
  /** Each rule's remaining units for `w`, charging nothing. */
  peek(w: Who): Promise<Record<RuleName, number>>;
  /** Waits for the work handed to `waitUntil` (lease top-ups and refunds), so it is counted with its sample. */
  drain(): Promise<void>;
  close(): Promise<void>;
}

interface NestedOptions {
  redis: Redis;
  prefix: string;
  policies: Record<RuleName, Policy>;
  /** edgelimit's deny cache, the peer's ephemeralCache (each library's default), or off. */
  cache: boolean;
  clock?: () => number;
}

function nested(kind: Kind, o: NestedOptions): Nested {
  if (kind !== "peer") {
    const rules = Object.fromEntries(
      RULES.map((r): [string, RuleConfig] => [
        r,
        { ...ourRule(SHAPE[r].ours, o.policies[r]), by: SHAPE[r].by },
      ]),
    );
    const limiter = new edgelimit.Limiter({
      redis: o.redis,
      prefix: o.prefix,
      rules,
      clock: o.clock,
      ...(o.cache ? {} : { denyCache: false }),
      ...(kind === "edgelimit+lease" ? { lease: LEASE } : {}),
    });
    // as on a Worker: background work goes to `waitUntil` (with none, a timer would send lease refunds
    // up to a ttl later, into another contestant's counts)
    const pending = new Set<Promise<unknown>>();
    const waitUntil = (p: Promise<unknown>) => {
      pending.add(p);
      void p.finally(() => pending.delete(p));
    };
    return {
      limit: async (w, cost) => {
        const d = await limiter.limit(w, { cost, waitUntil });
        return { allowed: d.allowed, rule: d.rule as RuleName, error: d.source === "error" };
      },
      peek: async (w) => {
        const d = await limiter.limit(w, { cost: 0 });
        return Object.fromEntries(RULES.map((r) => [r, d.rules[r]!.remaining])) as Record<RuleName, number>;
      },
      drain: async () => {
        while (pending.size > 0) await Promise.allSettled([...pending]);
      },
      close: () => limiter.dispose(),
    };
  }
  const limiters = RULES.map(
    (r) =>
      new Ratelimit({
        redis: o.redis,
        limiter: peerLimiter(SHAPE[r].peer, o.policies[r]),
        prefix: `${o.prefix}:${r}`,
        ephemeralCache: o.cache ? undefined : false,
        enableTelemetry: false,
        analytics: false,
      }),
  );
  const field = (r: RuleName) => SHAPE[r].by as keyof Who;
  return {
    limit: async (w, cost) => {
      for (const [i, r] of RULES.entries()) {
        const d = await atTime(o.clock?.(), () => limiters[i]!.limit(w[field(r)], { rate: cost }));
        if (!d.success) return { allowed: false, rule: r, error: d.reason === "timeout" };
      }
      return { allowed: true, error: false };
    },
    peek: async (w) => {
      const left = await Promise.all(
        RULES.map((r, i) => atTime(o.clock?.(), () => limiters[i]!.getRemaining(w[field(r)]))),
      );
      return Object.fromEntries(RULES.map((r, i) => [r, left[i]!.remaining])) as Record<RuleName, number>;
    },
    drain: async () => {},
    close: async () => {},
  };
}

const settings = (smoke: boolean) =>
  smoke ? { rounds: 1, sampleMs: 150, perCaller: 3 } : { rounds: 5, sampleMs: 1000, perCaller: 8 };

/** (a): decisions/s (the median round), latency, and HTTP requests, commands and EVALSHA per decision. */
type LoopRow = {
  kind: Kind;
  inFlight: number;
  perSec: number;
  rates: number[];
  p50: number;
  p99: number;
} & Record<"requests" | "commands" | "evalsha", number>;
/** (b): per rule, units admitted over the limit and units held as taken that no admission took. */
type LoadRow = {
  kind: Kind;
  decisions: number;
  denied: Record<RuleName, number>;
  over: Record<RuleName, number>;
  waste: Record<RuleName, number>;
  errors: number;
};
type NestedResult = { loops: LoopRow[]; load: LoadRow[] };

async function loops(env: Awaited<ReturnType<typeof startEnv>>, smoke: boolean, tag: string) {
  const s = settings(smoke);
  const cs = KINDS.map(({ kind }, i) =>
    nested(kind, { redis: env.client(), prefix: `nl-${tag}-${i}`, policies: RULES_OPEN, cache: false }),
  );
  const decide = (c: Nested) => (id: string) => c.limit(who(id), 1);
  for (const c of cs) {
    await closedLoop(decide(c), 64, s.sampleMs / 2);
    await closedLoop(decide(c), 1, s.sampleMs / 2);
    await c.drain();
  }
  const rows: LoopRow[] = [];
  for (const inFlight of [1, 64]) {
    log(`nested: ${inFlight} in flight`);
    const runs = cs.map(() => ({
      rates: [] as number[],
      latencies: [] as number[],
      http: 0,
      commands: 0,
      evalsha: 0,
    }));
    for (let round = 0; round < s.rounds; round++) {
      await inTurns(cs.length, round, async (i) => {
        await env.resetCounts();
        const { latencies, seconds } = await closedLoop(decide(cs[i]!), inFlight, s.sampleMs);
        await cs[i]!.drain();
        const counts = await env.counts();
        const run = runs[i]!;
        run.rates.push(latencies.length / seconds);
        run.latencies.push(...latencies);
        run.http += counts.http;
        run.commands += counts.commands;
        run.evalsha += counts.byName.EVALSHA ?? 0;
      });
    }
    KINDS.forEach(({ kind }, i) => {
      const { rates, latencies, http, commands, evalsha } = runs[i]!;
      const n = latencies.length;
      rows.push({
        kind,
        inFlight,
        perSec: percentile(rates, 50),
        rates,
        p50: percentile(latencies, 50),
        p99: percentile(latencies, 99),
        requests: http / n,
        commands: commands / n,
        evalsha: evalsha / n,
      });
    });
  }
  await Promise.all(cs.map((c) => c.close()));
  return rows;
}

/** 4 instances × 64 callers, random keys and costs 1-3, then every identifier's limits peeked. */
async function load(env: Awaited<ReturnType<typeof startEnv>>, kind: Kind, smoke: boolean, tag: string) {
  const prefix = `nb-${tag}-${kind.replace("+", "-")}`;
  const options = (cache: boolean) => ({ prefix, policies: LOAD, cache, clock: () => SIM_T0 });
  const instances = Array.from({ length: INSTANCES }, () =>
    nested(kind, { redis: env.client(), ...options(true) }),
  );
  const keys = Array.from({ length: LOAD_KEYS }, (_, i) => `k${i}`);
  const admitted = Object.fromEntries(RULES.map((r) => [r, new Map<string, number>()])) as Record<
    RuleName,
    Map<string, number>
  >;
  const row: LoadRow = { kind, decisions: 0, denied: zero(), over: zero(), waste: zero(), errors: 0 };
  const next = rng(25);
  await Promise.all(
    Array.from({ length: CALLERS }, async (_, caller) => {
      for (let i = 0; i < settings(smoke).perCaller; i++) {
        const w = who(keys[Math.floor(next() * keys.length)]!, 4);
        const cost = 1 + Math.floor(next() * 3);
        const d = await instances[caller % INSTANCES]!.limit(w, cost);
        row.decisions += 1;
        if (d.error) row.errors += 1;
        if (!d.allowed) {
          row.denied[d.rule!] += 1;
          continue;
        }
        for (const r of RULES) {
          const id = w[SHAPE[r].by as keyof Who];
          admitted[r].set(id, (admitted[r].get(id) ?? 0) + cost);
        }
      }
    }),
  );
  for (const c of instances) await c.drain();
  await Promise.all(instances.map((c) => c.close())); // leases given back
  // a reader of its own, with no lease of its own to take
  const reader = nested(kind === "peer" ? kind : "edgelimit", { redis: env.client(), ...options(false) });
  const seen = new Set<string>();
  for (const key of keys) {
    const w = who(key, 4);
    const left = await reader.peek(w);
    for (const r of RULES) {
      const id = w[SHAPE[r].by as keyof Who];
      if (seen.has(`${r}:${id}`)) continue;
      seen.add(`${r}:${id}`);
      const taken = LOAD[r].limit - left[r];
      const got = admitted[r].get(id) ?? 0;
      row.over[r] += Math.max(0, got - LOAD[r].limit);
      row.waste[r] += taken - got;
    }
  }
  return row;
}
const zero = () => ({ perKey: 0, perIp: 0, global: 0 });
const sum = (x: Record<RuleName, number>) => x.perKey + x.perIp + x.global;

async function measureNested(smoke: boolean, tag: string): Promise<NestedResult> {
  const env = await startEnv();
  try {
    const result: NestedResult = { loops: await loops(env, smoke, tag), load: [] };
    for (const { kind } of KINDS) {
      log(`nested: ${INSTANCES} instances × ${CALLERS} callers, ${kind}`);
      result.load.push(await load(env, kind, smoke, tag));
    }
    return result;
  } finally {
    await env.close();
  }
}

const labelOf = (kind: Kind) => KINDS.find((k) => k.kind === kind)!.label;
const loopOf = (r: NestedResult, kind: Kind, inFlight: number) =>
  r.loops.find((l) => l.kind === kind && l.inFlight === inFlight);
/** The median over rounds of decisions/s ÷ the peer's in the same round (a shared machine's load drifts). */
const overPeer = (r: NestedResult, l: LoopRow | undefined) => {
  const peer = loopOf(r, "peer", l?.inFlight ?? 0);
  return l && peer
    ? percentile(
        l.rates.map((x, i) => x / peer.rates[i]!),
        50,
      )
    : undefined;
};
const times = (x: number | undefined) => (x === undefined ? "–" : `${x.toFixed(2)}×`);
const perRule = (x: Record<RuleName, number>) => `${sum(x)} (${RULES.map((r) => x[r]).join(" / ")})`;

export const nestedBudgets: Part<NestedResult> = {
  name: "nested",
  title: "## 11. Nested budgets: an API key, its IP and a global limit in one decision",
  alone: true,
  run: ({ smoke, tag }) => measureNested(smoke, tag),
  render(r, { smoke }) {
    const s = settings(smoke);
    const loopRows = r.loops.map((l) => [
      labelOf(l.kind),
      String(l.inFlight),
      fmt(l.perSec),
      l.kind === "peer" ? "–" : times(overPeer(r, l)),
      `${ms(l.p50)} / ${ms(l.p99)}`,
      fmt(l.requests, 2),
      fmt(l.evalsha, 2),
      fmt(l.commands, 1),
    ]);
    const loadRows = r.load.map((l) => [
      labelOf(l.kind),
      fmt(l.decisions),
      perRule(l.denied),
      perRule(l.over),
      perRule(l.waste),
      String(l.errors),
    ]);
    const rules = RULES.map(
      (n) => `- \`${n}\` by \`${SHAPE[n].by}\`: ${SHAPE[n].ours} (the peer's ${SHAPE[n].peer})`,
    );
    const limits = RULES.map((n) => `${n} ${LOAD[n].limit}`).join(", ");
    return `bench/nested.ts: three identifiers a request, \`{ key, ip, global: "all" }\`, and a rule keyed by each:

${rules.join("\n")}

edgelimit decides them in one Limiter (one EVALSHA, all or nothing); the peer is three \`Ratelimit\`s
awaited in turn, key, IP, then global, stopping at the first that denies. A private redis-server and
bridge; each contestant its own @upstash/redis client.

### (a) Closed loops, nothing denied

${s.rounds} interleaved round${s.rounds === 1 ? "" : "s"} of ${s.sampleMs / 1000} s, each running the three in turn; decisions/s is the
median round, ÷ peer the median of the rounds' ratios. 1000 keys in turn on 250 IPs, limits of 10⁹ a
minute, deny caches off. Requests, EVALSHA and commands per decision: the bridge's counter and INFO
commandstats (a script's inner commands included) over every round, lease top-ups and refunds included
(handed to \`waitUntil\` and awaited after each round). With leases, a decision is answered with no
request only when its key, its IP and the global limit all hold units in that instance; its EVALSHA
count is the decisions that were not, and the top-ups and refunds.

${table(["contestant", "in flight", "decisions/s", "÷ peer", "p50 / p99 ms", "HTTP requests per decision", "EVALSHA per decision", "Redis commands per decision"], loopRows)}

### (b) ${INSTANCES} instances × ${CALLERS} callers, random costs, most decisions denied

${INSTANCES} instances on one Redis (each its own client, deny cache and leases, as isolates are),
${CALLERS} callers in flight, ${s.perCaller} decisions each, ${LOAD_KEYS} keys on 4 IPs picked at random, costs 1–3, on a
clock that does not move, so nothing refills and every limit is exact: ${limits}. Then the
instances are disposed (leases given back) and every identifier's limits are peeked. Over: units
admitted past a limit. Charged for denials: units the limits hold as taken that no admitted request
took, that is what denied requests charged to the rules that did not deny them. Each cell: the sum,
then ${RULES.join(" / ")}.

${table(["contestant", "decisions", "denied, by binding rule", "over the limit", "charged for denials", "Redis errors"], loadRows)}`;
  },
  goals(r) {
    const ours = r?.load.filter((l) => l.kind !== "peer");
    const peerLoad = r?.load.find((l) => l.kind === "peer");
    const one = r && loopOf(r, "edgelimit", 1);
    const leased = r && loopOf(r, "edgelimit+lease", 1);
    const peer = r && loopOf(r, "peer", 1);
    const rate = r && overPeer(r, one);
    const each = (f: (l: LoadRow) => number) =>
      ours && peerLoad
        ? `${ours.map((l) => `${f(l)} (${l.kind})`).join(", ")}; the peer ${f(peerLoad)}`
        : "–";
    return [
      [
        "1 HTTP request and 1 EVALSHA per decision, three identifiers, 1 in flight (part 11)",
        one && peer
          ? `${fmt(one.requests, 2)} and ${fmt(one.evalsha, 2)} (the peer ${fmt(peer.requests, 2)} and ${fmt(peer.evalsha, 2)})`
          : "–",
        check(one ? one.requests <= 1 && one.evalsha <= 1 : undefined),
      ],
      [
        "≥ 2.5× the peer's decisions/s at 1 in flight, three identifiers (part 11)",
        one && peer
          ? `${times(rate)} (${fmt(one.perSec)} against ${fmt(peer.perSec)}/s; with leases ${times(overPeer(r, leased))})`
          : "–",
        check(rate === undefined ? undefined : rate >= 2.5),
      ],
      [
        `0 units charged to rules that did not bind on denied requests, ${INSTANCES} instances (part 11)`,
        each((l) => sum(l.waste)),
        check(ours?.every((l) => sum(l.waste) === 0 && l.errors === 0)),
      ],
      [
        `0 over-admission on any identifier across ${INSTANCES} instances × ${CALLERS} callers (part 11)`,
        each((l) => sum(l.over)),
        check(ours?.every((l) => sum(l.over) === 0 && l.errors === 0)),
      ],
    ] satisfies Goal[];
  },
};
