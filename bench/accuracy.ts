// Part 6: accuracy. 64 concurrent callers share one identifier for 60 simulated seconds; time is
// injected (edgelimit: the `clock` option; @upstash/ratelimit: Date.now replaced during the synchronous
// part of each limit() call, which is where it reads the time). Each decision is compared with the
// ideal limiter of its algorithm's family, computed here from the true (unskewed) send times.
import { ALGOS, type Algo, bucketOf, contestant, type Lib, type Policy } from "./contestants.js";
import type { BenchEnv } from "./env.js";
import { log, rng } from "./util.js";

/** 2023-11-14T22:14:00Z: aligned to every window used here. */
export const SIM_T0 = 1_700_000_040_000;
export const ACCURACY_POLICY: Policy = { limit: 100, window: 10_000 };
export const SIM_MS = 60_000;
export const CALLERS = 64;
export const SKEW_MS = 500;

export type Shape = "steady 2×" | "edge bursts" | "steady 2×, skew ±500 ms" | "edge bursts, skew ±500 ms";
export const SHAPES: Shape[] = [
  "steady 2×",
  "edge bursts",
  "steady 2×, skew ±500 ms",
  "edge bursts, skew ±500 ms",
];

interface Event {
  /** True send time, ms after SIM_T0. */
  t: number;
  caller: number;
}

/** The traffic of one shape, sorted by true time. */
export function schedule(shape: Shape, p: Policy, scale = 1): Event[] {
  const random = rng(42);
  const events: Event[] = [];
  const duration = SIM_MS * scale;
  if (shape.startsWith("steady")) {
    // twice the limit's rate, evenly spaced, ±10% jitter of the spacing
    const spacing = p.window / (2 * p.limit);
    for (let k = 0; k * spacing < duration; k++) {
      const t = Math.max(0, Math.round(k * spacing + (random() - 0.5) * 0.2 * spacing));
      events.push({ t, caller: k % CALLERS });
    }
  } else {
    // at every window boundary: `limit` requests in the 250 ms before it and `limit` in the 250 ms after
    const span = 250;
    let k = 0;
    for (let b = p.window; b < duration; b += p.window) {
      for (let i = 0; i < p.limit; i++)
        events.push({ t: b - span + Math.floor(random() * span), caller: k++ % CALLERS });
      for (let i = 0; i < p.limit; i++)
        events.push({ t: b + Math.floor(random() * span), caller: k++ % CALLERS });
    }
  }
  events.sort((a, b) => a.t - b.t);
  return events;
}

/** Half the callers run SKEW_MS fast, half SKEW_MS slow (alternating), when the shape says so. */
function skewOf(shape: Shape, caller: number): number {
  return shape.includes("skew") ? (caller % 2 === 0 ? SKEW_MS : -SKEW_MS) : 0;
}

export type Family = "fixed window" | "sliding window" | "bucket";
export const FAMILY: Record<Algo, Family> = {
  fixedWindow: "fixed window",
  slidingWindow: "sliding window",
  slidingLog: "sliding window",
  tokenBucket: "bucket",
  gcra: "bucket",
};

/** Which events the ideal limiter of `family` admits (cost 1 each, processed in true-time order). */
export function ideal(family: Family, p: Policy, events: Event[]): boolean[] {
  const out: boolean[] = [];
  if (family === "fixed window") {
    const used = new Map<number, number>();
    for (const e of events) {
      const w = Math.floor((SIM_T0 + e.t) / p.window);
      const n = used.get(w) ?? 0;
      out.push(n < p.limit);
      if (n < p.limit) used.set(w, n + 1);
    }
  } else if (family === "sliding window") {
    // exact: admitted iff fewer than `limit` admissions at times t' with t - window < t' <= t
    const admitted: number[] = [];
    let head = 0;
    for (const e of events) {
      while (head < admitted.length && admitted[head]! <= e.t - p.window) head++;
      const ok = admitted.length - head < p.limit;
      out.push(ok);
      if (ok) admitted.push(e.t);
    }
  } else {
    // continuous token bucket (equivalently GCRA): starts full, refills refillRate per interval,
    // counted in 1/interval tokens so the arithmetic is exact
    const b = bucketOf(p);
    const full = b.capacity * b.interval;
    let tokens = full;
    let at = 0;
    for (const e of events) {
      tokens = Math.min(full, tokens + (e.t - at) * b.refillRate);
      at = e.t;
      const ok = tokens >= b.interval;
      out.push(ok);
      if (ok) tokens -= b.interval;
    }
  }
  return out;
}

/** The most admissions in any `window` ms span (true times). */
export function maxInWindow(times: number[], window: number): number {
  let best = 0;
  let head = 0;
  for (let i = 0; i < times.length; i++) {
    while (times[head]! <= times[i]! - window) head++;
    best = Math.max(best, i - head + 1);
  }
  return best;
}

export interface AccuracyRow {
  lib: Lib;
  algo: Algo;
  family: Family;
  shape: Shape;
  requests: number;
  ideal: number;
  admitted: number;
  /** Admitted with both libraries' deny caches off. */
  admittedNoCache: number;
  /** Requests admitted that the ideal denies / denied that the ideal admits (caches as default). */
  wronglyAdmitted: number;
  wronglyDenied: number;
  maxInWindow: number;
  idealMaxInWindow: number;
}

export async function runAccuracy(env: BenchEnv, tag: string, scale = 1): Promise<AccuracyRow[]> {
  const p = ACCURACY_POLICY;
  const rows: AccuracyRow[] = [];
  let run = 0;
  for (const lib of ["edgelimit", "upstash"] as const) {
    for (const algo of ALGOS[lib]) {
      log(`accuracy: ${lib} ${algo}`);
      for (const shape of SHAPES) {
        const events = schedule(shape, p, scale);
        const want = ideal(FAMILY[algo], p, events);
        const results: Record<"default" | "off", boolean[]> = { default: [], off: [] };
        for (const cache of ["default", "off"] as const) {
          let simNow = SIM_T0;
          const c = contestant(lib, algo, {
            redis: env.client(),
            prefix: `acc-${tag}-${run++}`,
            policies: [p],
            cache,
            clock: () => simNow,
          });
          const got = results[cache];
          for (let i = 0; i < events.length; i += CALLERS) {
            const batch = events.slice(i, i + CALLERS);
            const pending = batch.map((e) => {
              simNow = SIM_T0 + e.t + skewOf(shape, e.caller);
              return c.limit("caller-group");
            });
            got.push(...(await Promise.all(pending)));
          }
        }
        const got = results.default;
        const admittedTimes = events.filter((_, i) => got[i]).map((e) => e.t);
        const idealTimes = events.filter((_, i) => want[i]).map((e) => e.t);
        rows.push({
          lib,
          algo,
          family: FAMILY[algo],
          shape,
          requests: events.length,
          ideal: idealTimes.length,
          admitted: admittedTimes.length,
          admittedNoCache: results.off.filter(Boolean).length,
          wronglyAdmitted: got.filter((g, i) => g && !want[i]).length,
          wronglyDenied: got.filter((g, i) => !g && want[i]).length,
          maxInWindow: maxInWindow(admittedTimes, p.window),
          idealMaxInWindow: maxInWindow(idealTimes, p.window),
        });
      }
    }
  }
  return rows;
}
