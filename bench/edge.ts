// A benchmark that looks like the edge: the clients reach the bridge through a proxy on loopback that
// delays every chunk 0, 5 or 20 ms each way (bench/server.mjs), and decisions arrive as independent
// requests do (open loop, each in a macrotask of its own), in real time. Every run starts at the
// beginning of a window: each contestant's clock is real time shifted to a window boundary.
import { contestant, type Entry, labelOf, type Policy } from "./contestants.js";
import {
  type BenchEnv,
  check,
  fmt,
  type Goal,
  log,
  ms,
  openLoop,
  type Part,
  pct,
  percentile,
  sleep,
  table,
} from "./harness.js";
import { ideal } from "./scenarios.js";

export const LEASE = { max: 50, ttl: "1s" };

/** The one-way delays of the proxies bench/run.ts starts, and (d)'s Limiter instances and delay. */
export const edgeSettings = (smoke: boolean) => ({
  delays: smoke ? [0, 5] : [0, 5, 20],
  /** Seconds of traffic per run of (a), (b), (c), (d). */
  seconds: smoke
    ? { hot: 0.3, many: 0.2, flood: 0.2, isolates: 0.3 }
    : { hot: 6, many: 8, flood: 2, isolates: 6 },
  /** (b)'s identifiers, each at 5 requests/s. */
  manyIds: 40,
  isolates: smoke ? [1, 4] : [1, 4, 16],
  isolatesDelay: smoke ? 5 : 20,
});

export type EdgeRow = Awaited<ReturnType<typeof run>>;

/** One decision due `t` ms after the start, for `id`, in isolate number `isolate`. */
type Arrival = { t: number; id: string; isolate: number };

const HOT: Policy = { limit: 1000, window: 60_000 };
const FLOOD: Policy = { limit: 10, window: 3_600_000 };

export const CONTESTANTS: Entry[] = [
  { lib: "upstash", algo: "fixedWindow" },
  { lib: "upstash", algo: "cachedFixedWindow" },
  { lib: "edgelimit", algo: "fixedWindow" },
  { lib: "edgelimit", algo: "fixedWindow", lease: LEASE },
];

/** `rate` per second for `seconds`, identifiers and isolates taken in turn. */
const arrivals = (rate: number, seconds: number, ids: number, isolates = 1): Arrival[] =>
  Array.from({ length: Math.round(rate * seconds) }, (_, k) => ({
    t: (k * 1000) / rate,
    id: `id${k % ids}`,
    isolate: k % isolates,
  }));

async function run(
  env: BenchEnv,
  tag: string,
  scenario: string,
  e: Entry,
  delay: number,
  policy: Policy,
  plan: Arrival[],
  isolates = 1,
) {
  const label = labelOf(e);
  // real time, shifted so that the run starts at the beginning of an hour (so of a minute too)
  const t0 = (Math.ceil(Date.now() / 3_600_000) + 1) * 3_600_000;
  const shift = t0 - Date.now();
  const clock = () => Date.now() + shift;
  const prefix = `edge-${tag}-${scenario[1]}-${delay}-${isolates}-${CONTESTANTS.indexOf(e)}`;
  const cs = Array.from({ length: isolates }, () =>
    contestant(e, { redis: env.client(env.proxyUrl(delay)), prefix, policy, cache: "default", clock }),
  );
  log(`edge: ${scenario}, ${delay} ms, ${isolates} isolate(s), ${label}`);
  // one decision each first, so script loading and connection setup stay out of the counts
  await Promise.all(cs.map((c, i) => c.limit(`warm-up-${i}`)));
  await env.resetCounts();
  const { results, seconds } = await openLoop(plan, (a) => cs[a.isolate]!.limit(a.id));
  await Promise.all(cs.map((c) => c.close()));
  // close() waits for the lease refunds; the peer's writes still under way count too
  await sleep(4 * delay + 100);
  const counts = await env.counts();
  const allowed = results.filter((r) => r.outcome.allowed);
  const latencies = results.map((r) => r.latency);
  const ids = new Set(plan.map((a) => a.id)).size;
  // the exact fixed window over the true call times; (b) never reaches its limit
  const times = results.map((r) => r.at + t0);
  const best = ids > 1 ? plan.length : ideal("fixed window", policy, times, 0).filter(Boolean).length;
  const per1000 = (n: number) => (n * 1000) / results.length;
  const m = {
    // as achieved: the schedule's rate unless the machine fell behind
    issuedPerSec: results.length / seconds,
    allowed: allowed.length,
    // the share of allowed decisions answered with no request on their path
    allowedLocal: allowed.filter((r) => r.outcome.local).length / Math.max(1, allowed.length),
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    httpPer1000: per1000(counts.http),
    commandsPer1000: per1000(counts.commands),
    ideal: best,
    over: Math.max(0, allowed.length - best),
    under: Math.max(0, best - allowed.length),
    errors: results.filter((r) => r.outcome.error).length,
  };
  return { scenario, delay, isolates, label, lease: e.lease !== undefined, m };
}

export const edge: Part<EdgeRow[]> = {
  name: "edge",
  title: "## 5. At the edge: a delay proxy between the clients and Redis",
  async run({ env, smoke, tag }) {
    const s = edgeSettings(smoke);
    const rows: EdgeRow[] = [];
    const many = `(b) ${s.manyIds} identifiers, 5/s each`;
    for (const delay of s.delays) {
      for (const e of CONTESTANTS) {
        const plan = arrivals(200, s.seconds.hot, 1);
        rows.push(await run(env, tag, "(a) one hot identifier, 200/s", e, delay, HOT, plan));
      }
      for (const e of CONTESTANTS.filter((c) => c.algo !== "cachedFixedWindow")) {
        rows.push(
          await run(env, tag, many, e, delay, HOT, arrivals(5 * s.manyIds, s.seconds.many, s.manyIds)),
        );
        const plan = arrivals(1000, s.seconds.flood, 1);
        rows.push(await run(env, tag, "(c) deny flood, 1000/s", e, delay, FLOOD, plan));
      }
    }
    for (const n of s.isolates) {
      for (const e of CONTESTANTS) {
        const plan = arrivals(200, s.seconds.isolates, 1, n);
        const scenario = "(d) isolates sharing one limit, 200/s in all";
        rows.push(await run(env, tag, scenario, e, s.isolatesDelay, HOT, plan, n));
      }
    }
    return rows;
  },
  render(r, { smoke }) {
    const s = edgeSettings(smoke);
    const head = [
      "one-way delay | isolates | contestant | p50 / p99 ms | allowed without waiting on Redis | HTTP per 1,000",
      "commands per 1,000 | admitted / ideal | over / under | Redis errors | issued /s",
    ];
    const line = ({ delay, isolates, label, m }: EdgeRow) => [
      `${delay} ms`,
      isolates,
      label,
      `${ms(m.p50)} / ${ms(m.p99)}`,
      pct(m.allowedLocal),
      fmt(m.httpPer1000),
      fmt(m.commandsPer1000),
      `${m.allowed} / ${m.ideal}`,
      `${m.over} / ${m.under}`,
      m.errors,
      fmt(m.issuedPerSec),
    ];
    const tables = [...new Set(r.map((e) => e.scenario))].map(
      (sc) => `### ${sc}\n\n${table(head, r.filter((e) => e.scenario === sc).map(line))}\n`,
    );
    return `A TCP proxy on loopback delays every chunk ${s.delays.join(", ")} ms each way (bench/server.mjs, a process apart from the clients).
Decisions arrive open-loop in real time, each in a macrotask of its own as independent requests do; p50 / p99 is the
latency \`limit()\` adds to a request. Both libraries' caches on (their defaults); fixedWindow, 1000 per minute
((c): 10 per hour); every run starts at a window boundary. Leases: \`lease: ${JSON.stringify(LEASE)}\`. HTTP and
commands per 1,000 decisions include requests made off the path (the peer's pending writes, lease refunds).
Seconds of traffic per run: (a) ${s.seconds.hot}, (b) ${s.seconds.many}, (c) ${s.seconds.flood}, (d) ${s.seconds.isolates}. (d) runs at ${s.isolatesDelay} ms: one identifier, its requests
spread over the isolates (Limiter instances, each with its own client) in turn. Ideal: the exact fixed window over
the true call times. (b) keeps 5 requests/s per identifier but uses ${s.manyIds} identifiers, not 1000: 5,000 requests/s, each
its own HTTP request without leases, is beyond what this shared 2-core machine serves, and would measure its queue.
"Redis errors" are decisions that timed out (edgelimit's \`timeout\` 1 s, the peer's 5 s) when the machine fell
behind ("issued /s" below the schedule shows it too); such a decision follows \`onError\` (allow, both libraries'
default), which shows as over-admission.

${tables.join("\n").slice(0, -1)}`;
  },
  goals(r = []) {
    const find = (s: string, lease: boolean) =>
      r.find(
        (e) =>
          e.scenario.startsWith(s) && e.delay === 20 && e.lease === lease && e.label.startsWith("edgelimit"),
      )?.m;
    const [a, b, bNo] = [find("(a)", true), find("(b)", true), find("(b)", false)];
    const iso = r.filter((e) => e.scenario.startsWith("(d)") && e.lease);
    const all = (f: (e: EdgeRow) => boolean) => (iso.length ? iso.every(f) : undefined);
    return [
      ["(a) p50 added latency ≤ 1 ms", a ? `${ms(a.p50)} ms` : "–", check(a && a.p50 <= 1)],
      [
        "(a) ≥ 90 % of allowed decisions with no request",
        a ? pct(a.allowedLocal) : "–",
        check(a && a.allowedLocal >= 0.9),
      ],
      [
        "(a) 0 over-admission, no Redis errors",
        a ? `${a.over} over, ${a.errors} errors` : "–",
        check(a && a.over + a.errors === 0),
      ],
      [
        "(d) 0 over-admission, 1, 4, 16 isolates",
        iso.map((e) => e.m.over).join(", ") || "–",
        check(all((e) => e.m.over === 0)),
      ],
      [
        "(d) under-admission ≤ isolates × max",
        iso.map((e) => `${e.m.under} ≤ ${e.isolates * LEASE.max}`).join(", ") || "–",
        check(all((e) => e.m.under <= e.isolates * LEASE.max)),
      ],
      [
        "(b) p50 and p99 with leases no worse than without (within 5 %)",
        b && bNo ? `${ms(b.p50)} / ${ms(b.p99)} ms against ${ms(bNo.p50)} / ${ms(bNo.p99)} ms` : "–",
        check(b && bNo && b.p50 <= bNo.p50 * 1.05 && b.p99 <= bNo.p99 * 1.05),
      ],
    ] satisfies Goal[];
  },
};
