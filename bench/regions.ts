// Three regions on loopback. Each region has its own redis-server behind the REST bridge (bench/env.ts,
// bench/server.mjs) and 4 isolates (Limiter instances, each with its own connections). Region A's
// database is home: 0 ms from A's isolates, 60 ms one way from B's and C's. B's and C's own databases are
// 2 ms one way from their isolates; every database is 60 ms one way from the other regions' isolates.
// Every (database, region) pair has a delay proxy of its own, so the HTTP requests each region's
// isolates send are counted apart (a fetch wrapper, by port); Redis commands are counted per database
// (INFO commandstats).
//
// Traffic: 200 identifiers with Zipf popularity (seeded) plus one identifier hot in every region, each
// request sent from a region and an isolate drawn at random, open-loop in real time. One fixed-window
// rule for every contestant; the ideal is the exact fixed window over the whole world (one limit per
// identifier, however its requests spread over the regions), computed from the times the limiters read.
import { MultiRegionRatelimit } from "@upstash/ratelimit";
import { Redis } from "@upstash/redis";
import type { LimiterOptions } from "../src/index.js";
import { openLoop } from "./edge.js";
import { type BenchEnv, startEnv } from "./env.js";
import { edgelimit } from "./load.js";
import { log, percentile, rng, sleep } from "./util.js";

const { fixedWindow, Limiter } = edgelimit;

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
export const POOL_TTL_MS = 5000;
export const REGION_LEASE = { max: 50, ttl: "1s" };
/** An identifier is warm in a region at this many of its decisions there per pool ttl. */
export const WARM = 10;
/**
 * docs/regions.md's bound on one identifier's under-admission: the units pools and leases may hold,
 * pools in B and C (A's isolates keep none), leases in every isolate.
 */
export const underBound = (kind: RegionKind) =>
  (kind.startsWith("regions") ? (REGIONS.length - 1) * POOL.max : 0) +
  (kind.endsWith("lease") ? REGIONS.length * ISOLATES * REGION_LEASE.max : 0);

export interface RegionSettings {
  /** Seconds of traffic per contestant. */
  seconds: number;
  /** Decisions per second, all regions together. */
  rate: number;
  /** Identifiers besides the hot one, Zipf-distributed. */
  ids: number;
  /** Zipf exponent. */
  zipf: number;
  /** Share of the traffic that is the one identifier hot in every region. */
  hotShare: number;
}

export type RegionKind = "home" | "home+lease" | "regions" | "regions+lease" | "peer";
export const REGION_CONTESTANTS: { kind: RegionKind; label: string }[] = [
  { kind: "home", label: "edgelimit, home only" },
  {
    kind: "home+lease",
    label: `edgelimit, home only + lease (max ${REGION_LEASE.max}, ttl ${REGION_LEASE.ttl})`,
  },
  { kind: "regions", label: `edgelimit, regions (pool max ${POOL.max}, ttl ${POOL.ttl})` },
  { kind: "regions+lease", label: `edgelimit, regions + lease` },
  { kind: "peer", label: "@upstash/ratelimit MultiRegionRatelimit" },
];

export interface RegionMeasured {
  decisions: number;
  p50: number;
  p99: number;
  /**
   * The round trip to this region's own database as measured during the run (p50 of a PING every
   * 100 ms through the same proxy and bridge, in the same process): what "the regional round trip" is
   * on this machine, beside its nominal 2 × the one-way delay.
   */
  rtt: number;
  /** Share of the warm identifiers' decisions answered without waiting on home. */
  warmWithoutHome: number;
  /** p50 of the decisions of identifiers warm in this region, and of the others (cold). */
  warmP50: number;
  warmDecisions: number;
  coldP50: number;
  /** Share of decisions answered without waiting on home. */
  withoutHome: number;
  allowed: number;
  /** The region's decisions the global ideal admits. */
  ideal: number;
  /** HTTP requests this region's isolates sent (to any database), per 1,000 of its decisions. */
  httpPer1000: number;
  /** Redis commands run in this region's database, per 1,000 decisions of every region. */
  commandsPer1000: number;
  /** HTTP requests this region's database received, per 1,000 decisions of every region. */
  dbHttpPer1000: number;
  errors: number;
}

/** (a) the steady Zipf traffic; (b) one identifier's burst in every region at once. */
export type RegionScenario = "steady" | "burst";

export interface RegionRow {
  scenario: RegionScenario;
  kind: RegionKind;
  label: string;
  /** Absent when the contestant could not run (pending). */
  regions?: RegionMeasured[];
  /** The whole world: admitted, the ideal, and over / under summed per identifier and window. */
  total?: {
    decisions: number;
    allowed: number;
    ideal: number;
    over: number;
    under: number;
    /** The most one identifier was under-admitted in one window. */
    maxUnder: number;
    errors: number;
  };
  issuedPerSec?: number;
  pending?: string;
}

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
interface World {
  dbs: BenchEnv[];
  url(db: number, region: number): string;
  /** HTTP requests sent by each region's isolates since the last reset. */
  sent: number[];
  /** The fetch the counter wraps: for the round-trip probe, which is not counted. */
  realFetch: typeof fetch;
  restore(): void;
}

async function startWorld(): Promise<World> {
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
  return { dbs, url, sent, realFetch: real, restore };
}

interface Isolate {
  limit(id: string): Promise<Omit<Outcome, "a">>;
  close(): Promise<void>;
}

/** One isolate of `region` for contestant `kind`; throws when the Limiter lacks an option it needs. */
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
    const real = Date.now;
    pinned = now;
    // the peer reads Date.now() only before its first await: it sees the same pinned time
    Date.now = () => now;
    try {
      return { now, result: call() };
    } finally {
      Date.now = real;
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
  const home = { url: world.url(0, region), token: token(0) };
  const options: LimiterOptions = {
    redis: home,
    prefix,
    rules: { window: fixedWindow(REGION_POLICY) },
    clock,
    ...(kind.endsWith("lease") ? { lease: REGION_LEASE } : {}),
    // region A's database is home itself: its isolates keep no pool
    ...(kind.startsWith("regions") && region !== 0
      ? { region: { redis: { url: world.url(region, region), token: token(region) }, pool: POOL } }
      : {}),
  };
  const limiter = new Limiter(options);
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
): Promise<RegionRow> {
  const { limit, window } = REGION_POLICY;
  // real time, shifted so that the run starts at the beginning of a window
  const t0 = (Math.ceil(Date.now() / window) + 1) * window;
  const prefix = `regions-${tag}-${scenario}-${kind.replace("+", "-")}`;
  const time = { shift: 0 };
  let isolates: Isolate[][];
  try {
    isolates = REGIONS.map((_, region) =>
      Array.from({ length: ISOLATES }, () => isolateOf(world, kind, region, prefix, time)),
    );
  } catch (error) {
    const message = (error as Error).message.split("\n")[0]!;
    if (!message.startsWith("region")) throw error;
    return { scenario, kind, label, pending: `pending: ${message}` };
  }
  log(`regions: ${label}`);
  // one decision each first, so script loading and connection setup stay out of the counts
  await Promise.all(isolates.flat().map((isolate, i) => isolate.limit(`warm-up-${i}`)));
  await Promise.all(world.dbs.map((db) => db.resetCounts()));
  world.sent.fill(0);
  // from here the clocks read t0 at the first decision: the run starts at a window's start
  time.shift = t0 - Date.now();
  const probe = probeRoundTrips(world);
  const { results, seconds } = await openLoop(plan, async (a) => ({
    ...(await isolates[a.region]![a.isolate]!.limit(a.id)),
    a,
  }));
  const rtts = await probe.stop();
  await Promise.all(isolates.flat().map((isolate) => isolate.close()));
  // refunds and the peer's writes, still on their way through the 60 ms proxies
  await sleep(4 * HOME_DELAY + 200);
  // the probe's PINGs reached the bridges too (INFO commandstats leaves PING out)
  const counts = (await Promise.all(world.dbs.map((db) => db.counts()))).map((c, db) => ({
    ...c,
    http: c.http - rtts[db]!.length,
  }));
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
  const regions = REGIONS.map((_, region): RegionMeasured => {
    const mine = results.filter((r) => r.outcome.a.region === region);
    const warmOnes = mine.filter((r) => isWarm(r.outcome.a));
    const coldOnes = mine.filter((r) => !isWarm(r.outcome.a));
    const latencies = (list: typeof mine) => list.map((r) => r.latency);
    return {
      decisions: mine.length,
      p50: percentile(latencies(mine), 50),
      p99: percentile(latencies(mine), 99),
      rtt: percentile(rtts[region]!, 50),
      warmWithoutHome:
        warmOnes.length === 0
          ? Number.NaN
          : warmOnes.filter((r) => r.outcome.withoutHome).length / warmOnes.length,
      warmP50: percentile(latencies(warmOnes), 50),
      warmDecisions: warmOnes.length,
      coldP50: percentile(latencies(coldOnes), 50),
      withoutHome: mine.filter((r) => r.outcome.withoutHome).length / Math.max(1, mine.length),
      allowed: mine.filter((r) => r.outcome.allowed).length,
      ideal: mine.filter((r) => idealAdmits.has(r)).length,
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
    total: {
      decisions: results.length,
      allowed: results.filter((r) => r.outcome.allowed).length,
      ideal: idealAdmits.size,
      over,
      under,
      maxUnder,
      errors: results.filter((r) => r.outcome.error).length,
    },
    issuedPerSec: results.length / seconds,
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

export async function runRegions(s: RegionSettings, tag: string): Promise<RegionRow[]> {
  const world = await startWorld();
  const plan = regionPlan(s);
  const rows: RegionRow[] = [];
  try {
    for (const { kind, label } of REGION_CONTESTANTS) {
      rows.push(await run(world, kind, label, "steady", plan, tag));
    }
    for (const { kind, label } of REGION_CONTESTANTS) {
      rows.push(await run(world, kind, label, "burst", burstPlan(), tag));
    }
  } finally {
    world.restore();
    await Promise.all(world.dbs.map((db) => db.close()));
  }
  return rows;
}
