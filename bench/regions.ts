// Part 10: three regions on loopback, each database behind a delay proxy per region (the section below
// gives the layout), so the HTTP requests each region's isolates send are counted apart (a fetch
// wrapper, by port) and Redis commands per database.
import { MultiRegionRatelimit } from "@upstash/ratelimit";
import { Redis } from "@upstash/redis";
import type { LimiterOptions } from "../src/index.js";
import {
  atTime,
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
  startEnv,
  table,
} from "./harness.js";
import { edgelimit, upstashEntry } from "./load.js";
import { rng } from "./scenarios.js";

export const REGIONS = ["A", "B", "C"] as const;
/** One-way ms from a region's isolates to each database (index: the database's region). */
const HOME_DELAY = 60;
const OWN_DELAY = 2;
/** One-way ms from `region`'s isolates to `db`'s database (A's database is home). */
export function delayOf(region: number, db: number): number {
  if (region !== db) return HOME_DELAY;
  return db === 0 ? 0 : OWN_DELAY;
}
export const ISOLATES = 4;
/** The one rule: a fixed window of 50 per 10 s, for one identifier across every region. */
export const REGION_POLICY = { limit: 50, window: 10_000 };
export const POOL = { max: 500, ttl: "5s" };
const POOL_TTL_MS = 5000;
export const REGION_LEASE = { max: 50, ttl: "1s" };
/** An identifier is warm in a region at this many of its decisions there per pool ttl. */
export const WARM = 10;
/**
 * docs/regions.md's bound on one identifier's under-admission: the units pools and leases may hold,
 * pools in B and C (A's isolates keep none), leases in every isolate.
 */
export const underBound = (kind: RegionKind) =>
  (kind.startsWith("regions") ? (REGIONS.length - 1) * POOL.max : 0) +
  (kind === "entry" ? (REGIONS.length - 1) * ENTRY_POOL_MAX : 0) +
  (kind.endsWith("lease") ? REGIONS.length * ISOLATES * REGION_LEASE.max : 0);

/** edgelimit/upstash's MultiRegionRatelimit pools a tenth of the limit (docs/upstash.md). */
const ENTRY_POOL_MAX = Math.max(1, Math.floor(REGION_POLICY.limit / 10));

/** Seconds per contestant; decisions/s of every region; identifiers besides the hot one (Zipf); its share. */
const settings = (smoke: boolean) => ({
  seconds: smoke ? 2 : 15,
  rate: 60,
  ids: 200,
  zipf: 1.1,
  hotShare: 0.25,
});
type RegionSettings = ReturnType<typeof settings>;

export type RegionKind = "home" | "home+lease" | "regions" | "regions+lease" | "peer" | "entry";
export const REGION_CONTESTANTS: { kind: RegionKind; label: string }[] = [
  { kind: "home", label: "edgelimit, home only" },
  {
    kind: "home+lease",
    label: `edgelimit, home only + lease (max ${REGION_LEASE.max}, ttl ${REGION_LEASE.ttl})`,
  },
  { kind: "regions", label: `edgelimit, regions (pool max ${POOL.max}, ttl ${POOL.ttl})` },
  { kind: "regions+lease", label: `edgelimit, regions + lease` },
  { kind: "peer", label: "@upstash/ratelimit MultiRegionRatelimit" },
  { kind: "entry", label: "edgelimit/upstash MultiRegionRatelimit" },
];

/** (a) the steady Zipf traffic; (b) one identifier's burst in every region at once. */
export type RegionScenario = "steady" | "burst";

type RegionRow = Awaited<ReturnType<typeof run>>;

interface Arrival {
  t: number;
  id: string;
  region: number;
  isolate: number;
}

interface Outcome {
  allowed: boolean;
  /** Answered without waiting on home (edgelimit: its source; the peer: before home's round trip). */
  withoutHome: boolean | undefined;
  error: boolean;
  /** The time the limiter read, epoch ms. */
  now: number;
  a: Arrival;
}

/** The traffic: `rate`/s for `seconds`, seeded, so every contestant gets the same requests. */
export function regionPlan(s: RegionSettings): Arrival[] {
  const random = rng(18);
  const weights = Array.from({ length: s.ids }, (_, k) => (k + 1) ** -s.zipf);
  const sum = weights.reduce((a, b) => a + b, 0);
  const cdf: number[] = [];
  let acc = 0;
  for (const w of weights) {
    acc += w / sum;
    cdf.push(acc);
  }
  const zipf = () => {
    const u = random();
    let lo = 0;
    let hi = cdf.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cdf[mid]! < u) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
  return Array.from({ length: Math.round(s.rate * s.seconds) }, (_, k) => ({
    t: (k * 1000) / s.rate,
    id: random() < s.hotShare ? "hot" : `id${zipf()}`,
    region: Math.floor(random() * REGIONS.length),
    isolate: Math.floor(random() * ISOLATES),
  }));
}

/** (b): BURST.count decisions of one identifier over BURST.ms from the window's start, regions in turn. */
export const BURST = { count: 90, ms: 150 };
function burstPlan(): Arrival[] {
  const random = rng(1818);
  return Array.from({ length: BURST.count }, (_, k) => ({
    t: (k * BURST.ms) / BURST.count,
    id: "burst",
    region: k % REGIONS.length,
    isolate: Math.floor(random() * ISOLATES),
  }));
}

/** The three databases, each behind a proxy per region at that region's delay. */
type World = Awaited<ReturnType<typeof startWorld>>;

async function startWorld() {
  const dbs: BenchEnv[] = [];
  for (let db = 0; db < REGIONS.length; db++) {
    dbs.push(await startEnv(REGIONS.map((name, region) => `${delayOf(region, db)}:${name}`)));
  }
  const url = (db: number, region: number) => dbs[db]!.proxyUrl(`${delayOf(region, db)}:${REGIONS[region]}`);
  const regionOfPort = new Map<string, number>();
  for (let db = 0; db < REGIONS.length; db++) {
    for (let region = 0; region < REGIONS.length; region++) {
      regionOfPort.set(new URL(url(db, region)).port, region);
    }
  }
  const sent = REGIONS.map(() => 0);
  // Both libraries call the global fetch at request time: count each request by the proxy it goes to.
  const real = globalThis.fetch;
  globalThis.fetch = ((input: RequestInfo | URL, init?: RequestInit) => {
    const target = typeof input === "string" ? input : input instanceof URL ? input.href : input.url;
    const region = regionOfPort.get(new URL(target).port);
    if (region !== undefined) sent[region]! += 1;
    return real(input, init);
  }) as typeof fetch;
  const restore = () => {
    globalThis.fetch = real;
  };
  // `sent`: HTTP requests of each region's isolates since the last reset; `realFetch`: for the
  // round-trip probe, which is not counted
  return { dbs, url, sent, realFetch: real, restore };
}

interface Isolate {
  limit(id: string): Promise<Omit<Outcome, "a">>;
  close(): Promise<void>;
}

/** One isolate of `region` for contestant `kind`. */
function isolateOf(
  world: World,
  kind: RegionKind,
  region: number,
  prefix: string,
  time: { shift: number },
): Isolate {
  // the clock every limiter reads: real time shifted to a window boundary, pinned during the
  // synchronous part of a call so that the ideal sees exactly the time the limiter read
  let pinned: number | undefined;
  const clock = () => pinned ?? Date.now() + time.shift;
  const decideAt = <T>(call: () => T): { now: number; result: T } => {
    const now = Date.now() + time.shift;
    pinned = now;
    // the peer reads Date.now() only before its first await: it sees the same pinned time
    try {
      return { now, result: atTime(now, call) };
    } finally {
      pinned = undefined;
    }
  };
  const token = (db: number) => world.dbs[db]!.token;
  if (kind === "peer") {
    const rl = new MultiRegionRatelimit({
      redis: REGIONS.map(
        (_, db) => new Redis({ url: world.url(db, region), token: token(db), enableTelemetry: false }),
      ),
      limiter: MultiRegionRatelimit.fixedWindow(REGION_POLICY.limit, `${REGION_POLICY.window} ms`),
      prefix,
      analytics: false,
      enableTelemetry: false,
    });
    const writes: Promise<unknown>[] = [];
    return {
      limit: async (id) => {
        const t0 = performance.now();
        const { now, result } = decideAt(() => rl.limit(id));
        const r = await result;
        writes.push(r.pending.catch(() => {}));
        // home is A's database: B and C answered from another one when faster than home's round trip
        const withoutHome = region === 0 ? false : performance.now() - t0 < 2 * HOME_DELAY;
        return { allowed: r.success, withoutHome, error: r.reason === "timeout", now };
      },
      // its writes to the other databases, still under way after the answer
      close: async () => void (await Promise.all(writes)),
    };
  }
  if (kind === "entry") {
    // the peer's constructor, the same three databases through this region's proxies: home is the
    // first, the region the one that answers this isolate's PING first
    const { MultiRegionRatelimit: Entry } = upstashEntry;
    const rl = new Entry({
      redis: REGIONS.map(
        (_, db) => new Redis({ url: world.url(db, region), token: token(db), enableTelemetry: false }),
      ),
      limiter: Entry.fixedWindow(REGION_POLICY.limit, `${REGION_POLICY.window} ms`),
      prefix,
      clock,
    });
    return {
      limit: async (id) => {
        const t0 = performance.now();
        const { now, result } = decideAt(() => rl.limit(id));
        const r = await result;
        const withoutHome = region === 0 ? false : performance.now() - t0 < 2 * HOME_DELAY;
        return { allowed: r.success, withoutHome, error: r.reason === "timeout", now };
      },
      close: async () => {},
    };
  }
  const home = { url: world.url(0, region), token: token(0) };
  const options: LimiterOptions = {
    redis: home,
    prefix,
    rules: { window: edgelimit.fixedWindow(REGION_POLICY) },
    clock,
    ...(kind.endsWith("lease") ? { lease: REGION_LEASE } : {}),
    // region A's database is home itself: its isolates keep no pool
    ...(kind.startsWith("regions") && region !== 0
      ? { region: { redis: { url: world.url(region, region), token: token(region) }, pool: POOL } }
      : {}),
  };
  const limiter = new edgelimit.Limiter(options);
  return {
    limit: async (id) => {
      const { now, result } = decideAt(() => limiter.limit(id));
      const d = await result;
      const source = d.source as string;
      return {
        allowed: d.allowed,
        withoutHome: source !== "redis" && source !== "error",
        error: source === "error",
        now,
      };
    },
    close: () => limiter.dispose(),
  };
}

async function run(
  world: World,
  kind: RegionKind,
  label: string,
  scenario: RegionScenario,
  plan: Arrival[],
  tag: string,
) {
  const { limit, window } = REGION_POLICY;
  // real time, shifted so that the run starts at the beginning of a window
  const t0 = (Math.ceil(Date.now() / window) + 1) * window;
  const prefix = `regions-${tag}-${scenario}-${kind.replace("+", "-")}`;
  const time = { shift: 0 };
  const isolates = REGIONS.map((_, region) =>
    Array.from({ length: ISOLATES }, () => isolateOf(world, kind, region, prefix, time)),
  );
  log(`regions: ${label}`);
  // one decision each first, so script loading and connection setup stay out of the counts
  await Promise.all(isolates.flat().map((isolate, i) => isolate.limit(`warm-up-${i}`)));
  await Promise.all(world.dbs.map((db) => db.resetCounts()));
  world.sent.fill(0);
  // from here the clocks read t0 at the first decision: the run starts at a window's start
  time.shift = t0 - Date.now();
  const probe = probeRoundTrips(world);
  const { results } = await openLoop(plan, async (a) => ({
    ...(await isolates[a.region]![a.isolate]!.limit(a.id)),
    a,
  }));
  const rtts = await probe.stop();
  await Promise.all(isolates.flat().map((isolate) => isolate.close()));
  // refunds and the peer's writes, still on their way through the 60 ms proxies
  await sleep(4 * HOME_DELAY + 200);
  // the probe's PINGs reached the bridges too (INFO commandstats leaves PING out)
  const counts = await Promise.all(world.dbs.map((db) => db.counts()));
  for (const [db, c] of counts.entries()) c.http -= rtts[db]!.length;
  const sent = [...world.sent];

  // The ideal: one fixed window per identifier over the whole world, the first `limit` by the time read.
  const byWindow = new Map<string, typeof results>();
  for (const r of results) {
    const key = `${r.outcome.a.id} ${Math.floor(r.outcome.now / window)}`;
    const list = byWindow.get(key) ?? [];
    if (list.length === 0) byWindow.set(key, list);
    list.push(r);
  }
  const idealAdmits = new Set<(typeof results)[number]>();
  let over = 0;
  let under = 0;
  let maxUnder = 0;
  for (const list of byWindow.values()) {
    list.sort((x, y) => x.outcome.now - y.outcome.now);
    for (const r of list.slice(0, limit)) idealAdmits.add(r);
    const allowed = list.filter((r) => r.outcome.allowed).length;
    const best = Math.min(limit, list.length);
    over += Math.max(0, allowed - best);
    under += Math.max(0, best - allowed);
    maxUnder = Math.max(maxUnder, best - allowed);
  }
  // warm: an identifier with at least WARM decisions per pool ttl in this region
  const perRegionId = new Map<string, number>();
  for (const a of plan)
    perRegionId.set(`${a.region} ${a.id}`, (perRegionId.get(`${a.region} ${a.id}`) ?? 0) + 1);
  const planSeconds = plan.length > 0 ? (plan[plan.length - 1]!.t + 1) / 1000 : 1;
  // (b)'s identifier was never seen before its burst: cold everywhere, however fast it arrives
  const isWarm = (a: Arrival) =>
    scenario === "steady" &&
    ((perRegionId.get(`${a.region} ${a.id}`) ?? 0) / planSeconds) * (POOL_TTL_MS / 1000) >= WARM;
  const per1000 = (n: number, of: number) => (n * 1000) / Math.max(1, of);
  const regions = REGIONS.map((_, region) => {
    const mine = results.filter((r) => r.outcome.a.region === region);
    const warmOnes = mine.filter((r) => isWarm(r.outcome.a));
    const coldOnes = mine.filter((r) => !isWarm(r.outcome.a));
    const latencies = (list: typeof mine) => list.map((r) => r.latency);
    return {
      decisions: mine.length,
      p50: percentile(latencies(mine), 50),
      p99: percentile(latencies(mine), 99),
      // what "the regional round trip" is on this machine, beside its nominal 2 × the one-way delay
      rtt: percentile(rtts[region]!, 50),
      warmWithoutHome:
        warmOnes.length === 0
          ? Number.NaN
          : warmOnes.filter((r) => r.outcome.withoutHome).length / warmOnes.length,
      warmP50: percentile(latencies(warmOnes), 50),
      coldP50: percentile(latencies(coldOnes), 50),
      withoutHome: mine.filter((r) => r.outcome.withoutHome).length / Math.max(1, mine.length),
      allowed: mine.filter((r) => r.outcome.allowed).length,
      ideal: mine.filter((r) => idealAdmits.has(r)).length,
      // what this region's isolates sent, per 1,000 of its decisions; what its database ran and
      // received, per 1,000 decisions of every region
      httpPer1000: per1000(sent[region]!, mine.length),
      commandsPer1000: per1000(counts[region]!.commands, results.length),
      dbHttpPer1000: per1000(counts[region]!.http, results.length),
      errors: mine.filter((r) => r.outcome.error).length,
    };
  });
  return {
    scenario,
    kind,
    label,
    regions,
    // the whole world: over / under summed per identifier and window, and the most one identifier
    // was under-admitted in one window
    total: {
      decisions: results.length,
      allowed: results.filter((r) => r.outcome.allowed).length,
      ideal: idealAdmits.size,
      over,
      under,
      maxUnder,
      errors: results.filter((r) => r.outcome.error).length,
    },
  };
}

/**
 * A PING every 100 ms from each region to its own database, sent as edgelimit's transport sends a
 * command (a /pipeline POST of JSON, the reply read as text), the regions a third of the period
 * apart; until stopped: the round trips measured, under the same load as the decisions.
 */
function probeRoundTrips(world: World): { stop(): Promise<number[][]> } {
  const rtts: number[][] = REGIONS.map(() => []);
  const pending: Promise<unknown>[] = [];
  const ping = (region: number) => {
    const t0 = performance.now();
    const sent = world
      .realFetch(`${world.url(region, region)}/pipeline`, {
        method: "POST",
        headers: { authorization: `Bearer ${world.dbs[region]!.token}`, "content-type": "application/json" },
        body: JSON.stringify([["PING"]]),
      })
      .then(async (response) => {
        await response.text();
        rtts[region]!.push(performance.now() - t0);
      });
    pending.push(sent);
  };
  const timers = REGIONS.map((_, region) =>
    setTimeout(() => {
      ping(region);
      timers[region] = setInterval(() => ping(region), 100);
    }, region * 33),
  );
  return {
    stop: async () => {
      for (const timer of timers) clearInterval(timer);
      await Promise.all(pending);
      return rtts;
    },
  };
}

async function runRegions(s: RegionSettings, tag: string): Promise<RegionRow[]> {
  const world = await startWorld();
  const rows: RegionRow[] = [];
  try {
    for (const [scenario, plan] of [
      ["steady", regionPlan(s)],
      ["burst", burstPlan()],
    ] as const) {
      for (const { kind, label } of REGION_CONTESTANTS)
        rows.push(await run(world, kind, label, scenario, plan, tag));
    }
  } finally {
    world.restore();
    await Promise.all(world.dbs.map((db) => db.close()));
  }
  return rows;
}

/** "B 128.0 ms (home only 122.3 ms), C ..." */
function cold(regional: RegionRow | undefined, home: RegionRow | undefined): string {
  if (!regional) return "–";
  return [1, 2]
    .map((i) => {
      const beside = home ? ` (home only ${ms(home.regions[i]!.coldP50)} ms)` : "";
      return `${REGIONS[i]} ${ms(regional.regions[i]!.coldP50)} ms${beside}`;
    })
    .join(", ");
}

export const regions: Part<RegionRow[]> = {
  name: "regions",
  title: "## 10. Three regions",
  run: ({ smoke, tag }) => runRegions(settings(smoke), tag),
  render(r, { smoke }) {
    const s = settings(smoke);
    const head = [
      "contestant | region | decisions | p50 / p99 ms | p50 warm / cold ms | own database's round trip ms",
      "without waiting on home: all / warm | admitted / ideal | HTTP per 1,000 (its isolates)",
      "commands / HTTP per 1,000 (its database) | Redis errors",
    ];
    const lines = (scenario: string) =>
      r
        .filter((row) => row.scenario === scenario)
        .flatMap(({ label, regions, total: t }): (string | number)[][] => [
          ...regions.map((m, i) => [
            i === 0 ? label : "",
            REGIONS[i]!,
            m.decisions,
            `${ms(m.p50)} / ${ms(m.p99)}`,
            `${ms(m.warmP50)} / ${ms(m.coldP50)}`,
            ms(m.rtt),
            `${pct(m.withoutHome)} / ${pct(m.warmWithoutHome)}`,
            `${m.allowed} / ${m.ideal}`,
            fmt(m.httpPer1000),
            `${fmt(m.commandsPer1000)} / ${fmt(m.dbHttpPer1000)}`,
            m.errors,
          ]),
          [
            "",
            "all",
            t.decisions,
            "",
            "",
            "",
            "",
            `${t.allowed} / ${t.ideal} (over ${t.over}, under ${t.under})`,
            "",
            "",
            t.errors,
          ],
        ]);
    return `bench/regions.ts. Three regions on loopback, each with its own redis-server behind the REST bridge; region A's
database is home. One-way delays (a TCP proxy per database and region, in processes apart from the clients):
home ${delayOf(0, 0)} ms from A's isolates and ${delayOf(1, 0)} ms from B's and C's; B's and C's own databases ${delayOf(1, 1)} ms from their
isolates; any database ${delayOf(1, 2)} ms from another region's isolates. ${ISOLATES} isolates per region (Limiter or peer instances, each
with its own connections). Traffic: ${s.rate} decisions/s for ${s.seconds} s, open-loop in real time: ${s.ids} identifiers with Zipf
popularity (exponent ${s.zipf}, seeded) and one identifier hot in every region (${(s.hotShare * 100).toFixed(0)} % of the traffic), each
request from a region and an isolate drawn at random. One rule for all: a fixed window of ${REGION_POLICY.limit} per ${REGION_POLICY.window / 1000} s per
identifier across every region; every run starts at a window boundary. The ideal is the exact fixed window over the
whole world, from the times the limiters read; over / under are summed per identifier and window.
edgelimit's regions: \`region: { redis: <the region's database>, pool: ${JSON.stringify(POOL)} }\` in B and C (A's
database is home, so A's isolates keep no pool); leases \`${JSON.stringify(REGION_LEASE)}\`. edgelimit/upstash: its
\`MultiRegionRatelimit\`, the peer's constructor over the same three databases (home the first; its region the one
answering its PING first; pools of ${ENTRY_POOL_MAX}, a tenth of the limit, for 5 s); "without waiting on home" timed as the peer's. The peer:
\`MultiRegionRatelimit\` over the same three databases (each instance reaches them through its region's proxies),
\`fixedWindow\`, options at their defaults, analytics off; it sends each decision to all three databases, answers
from the first reply, then writes each request id a database lacks into it, one HSET each (counted here, and awaited
before the counts are read). ${s.rate} decisions/s, not more: at 240/s those writes (about 45 HTTP requests per decision)
saturated this shared 2-core machine, and its latencies measured the queue.
"Own database's round trip": p50 of a PING every 100 ms from the region to its own database through the same proxy and
bridge during the run (nominally ${2 * delayOf(1, 1)} ms in B and C: the rest is this machine's loopback, proxy and bridge).
"Without waiting on home": edgelimit's \`source\` is "cache", "lease" or "region"; the peer in B and C answered in
less than home's round trip (${2 * delayOf(1, 0)} ms), in A never. Warm: an identifier with at least ${WARM} decisions per pool ttl in that
region (cold ones pay the round trip to home). HTTP per 1,000: requests that region's isolates sent, to any
database, per 1,000 of its decisions; commands and HTTP of its database: what that database ran and received, per
1,000 decisions of every region.

### (a) Zipf traffic, ${s.rate} decisions/s for ${s.seconds} s

${table(head, lines("steady"))}

### (b) a burst: one identifier, ${BURST.count} decisions in ${BURST.ms} ms from a window's start, the regions in turn

Every decision of (b) is of an identifier cold in every region: none was seen there before.

${table(head, lines("burst"))}`;
  },
  /** 0 over-admission for edgelimit; warm p50 in B and C within the regional round trip + 1 ms. */
  goals(all = []): Goal[] {
    if (all.length === 0) return [];
    const steady = all.filter((row) => row.scenario === "steady");
    const burst = all.filter((row) => row.scenario === "burst");
    const ours = steady.filter((row) => row.kind !== "peer");
    const [entry, entryBurst] = [steady, burst].map((set) => set.find((row) => row.kind === "entry"));
    const regional = steady.find((row) => row.kind === "regions+lease");
    const [peer, peerBurst] = [steady, burst].map((set) => set.find((row) => row.kind === "peer"));
    const warm = regional?.regions.slice(1);
    return [
      ...[steady, burst].map((set, i): Goal => {
        const mine = set.filter((row) => row.kind !== "peer");
        return [
          `0 over-admission across three regions, every edgelimit contestant, ${i === 0 ? "(a) steady" : "(b) burst"} (part 10)`,
          mine.map((row) => `${row.total.over} (${row.kind})`).join(", ") || "–",
          check(mine.length ? mine.every((row) => row.total.over === 0) : undefined),
        ];
      }),
      [
        "p50 added latency of warm identifiers ≤ the regional round trip (as measured) + 1 ms in B and C, regions + lease (part 10)",
        warm
          ? warm.map((m, i) => `${REGIONS[i + 1]} ${ms(m.warmP50)} ms ≤ ${ms(m.rtt)} + 1 ms`).join(", ")
          : "–",
        check(warm ? warm.every((m) => m.warmP50 <= m.rtt + 1) : undefined),
      ],
      [
        "under-admission within the documented bound (regions × pool.max + isolates × lease.max), per identifier and window (part 10)",
        ours.map((row) => `${row.total.maxUnder} ≤ ${underBound(row.kind)} (${row.kind})`).join(", ") || "–",
        check(ours.length ? ours.every((row) => row.total.maxUnder <= underBound(row.kind)) : undefined),
      ],
      [
        "cold identifiers in B and C pay the round trip to home: p50 with regions + lease, beside home only (part 10)",
        cold(
          regional,
          steady.find((row) => row.kind === "home"),
        ),
        regional ? "shown" : "pending",
      ],
      [
        "MultiRegionRatelimit's over-admission, measured in the same run, (a) steady and (b) burst (part 10)",
        [peer, peerBurst]
          .map((row, i) =>
            row ? `${i === 0 ? "(a)" : "(b)"} ${row.total.over} over, ${row.total.under} under` : "–",
          )
          .join("; "),
        peer ? "shown" : "pending",
      ],
      [
        "edgelimit/upstash's MultiRegionRatelimit beside it, same run: over / under, (a) steady and (b) burst (part 10)",
        [entry, entryBurst]
          .map((row, i) =>
            row ? `${i === 0 ? "(a)" : "(b)"} ${row.total.over} over, ${row.total.under} under` : "–",
          )
          .join("; "),
        check(
          entry ? [entry, entryBurst].every((row) => row === undefined || row.total.over === 0) : undefined,
        ),
      ],
    ];
  },
};
