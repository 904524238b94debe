// The accuracy scenarios (bench/accuracy.ts) and what their decisions are held to: the ideal limiter
// of each family over the true send times, and the algorithms' own promise in the callers' time. No
// library is loaded here, so tests share them (test/engine/skew.test.ts).

/** mulberry32: deterministic randomness, so every run sends the same traffic. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** edgelimit's algorithms. */
export type OurAlgo = "fixedWindow" | "slidingWindow" | "slidingLog" | "tokenBucket" | "gcra";

/** `limit` units per `window` ms. Buckets: capacity `limit`, refilled in tenths of the window when it divides. */
export interface Policy {
  limit: number;
  window: number;
}

export function bucketOf(p: Policy): { capacity: number; refillRate: number; interval: number } {
  const tenths = p.limit % 10 === 0 && p.window % 10 === 0;
  return {
    capacity: p.limit,
    refillRate: tenths ? p.limit / 10 : p.limit,
    interval: tenths ? p.window / 10 : p.window,
  };
}

/** 2023-11-14T22:14:00Z: aligned to every window used here. */
export const SIM_T0 = 1_700_000_040_000;
export const ACCURACY_POLICY: Policy = { limit: 100, window: 10_000 };
export const CALLERS = 64;

export const SHAPES = [
  "steady 2×",
  "edge bursts",
  "steady 2×, skew ±500 ms",
  "edge bursts, skew ±500 ms",
  "edge bursts ×8, skew ±500 ms",
];

/** How many times the run's duration a shape lasts: "×8" is 8 (more boundaries, more ways to meet one). */
export function lengthOf(shape: string): number {
  return Number(/×(\d+),/.exec(shape)?.[1] ?? 1);
}

export interface Event {
  /** True send time, ms after SIM_T0. */
  t: number;
  caller: number;
}

/**
 * steady: twice the limit's rate, ±10% jitter; bursts: `limit` in the 250 ms either side of each boundary,
 * the callers in turn (so with skew, fast and slow clocks alternate within every burst). "×8": over 8
 * times `durationMs`, so 8 times as many boundaries, each a fresh draw of which clocks come first.
 */
export function schedule(shape: string, p: Policy, durationMs: number): Event[] {
  const random = rng(42);
  const events: Event[] = [];
  durationMs *= lengthOf(shape);
  if (shape.startsWith("steady")) {
    const spacing = p.window / (2 * p.limit);
    for (let k = 0; k * spacing < durationMs; k++)
      events.push({
        t: Math.max(0, Math.round((k + (random() - 0.5) * 0.2) * spacing)),
        caller: k % CALLERS,
      });
  } else {
    let k = 0;
    for (let b = p.window; b < durationMs; b += p.window)
      for (let i = 0; i < 2 * p.limit; i++)
        events.push({ t: b + (i < p.limit ? -250 : 0) + Math.floor(random() * 250), caller: k++ % CALLERS });
  }
  return events.sort((a, b) => a.t - b.t);
}

export type Family = "fixed window" | "sliding window" | "bucket";
export const FAMILY: Partial<Record<string, Family>> = {
  fixedWindow: "fixed window",
  slidingWindow: "sliding window",
  slidingLog: "sliding window",
  tokenBucket: "bucket",
  gcra: "bucket",
};

/**
 * Which requests the ideal limiter admits (cost 1 each, in true-time order). Fixed window: the first
 * `limit` of each epoch-aligned window. Sliding window: admitted iff fewer than `limit` admissions in
 * (t − window, t]. Bucket: continuous refill from full, counted in 1/interval tokens so it is exact.
 */
export function ideal(family: Family, p: Policy, times: number[], t0 = SIM_T0): boolean[] {
  const out: boolean[] = [];
  const used = new Map<number, number>();
  const admitted: number[] = [];
  const b = bucketOf(p);
  let tokens = b.capacity * b.interval;
  let at = times[0] ?? 0;
  for (const t of times) {
    let ok: boolean;
    if (family === "fixed window") {
      const w = Math.floor((t0 + t) / p.window);
      ok = (used.get(w) ?? 0) < p.limit;
      if (ok) used.set(w, (used.get(w) ?? 0) + 1);
    } else if (family === "sliding window") {
      ok = admitted.filter((x) => x > t - p.window).length < p.limit;
      if (ok) admitted.push(t);
    } else {
      tokens = Math.min(b.capacity * b.interval, tokens + (t - at) * b.refillRate);
      at = t;
      ok = tokens >= b.interval;
      if (ok) tokens -= b.interval;
    }
    out.push(ok);
  }
  return out;
}

/**
 * How many admissions broke their algorithm's promise in the callers' time: each decision at the time
 * it was made at, its caller's clock, or, for a caller lagging behind the state, the time the state
 * had reached (docs/algorithms.md, "Clock skew"). `admitted`: each admitted decision's caller clock,
 * in the order Redis decided them. 0 is the goal.
 * - fixed window: admissions past `limit` in a window of the callers' clocks;
 * - sliding log: admissions with more than `limit` in the `window` ms up to them, each at the newest
 *   time admitted so far (the log's stamp);
 * - sliding window: admissions at which the estimate exceeds `limit`, each at the start of the newest
 *   window admitted in when its clock lags behind it; the previous window's units spread evenly up to
 *   its latest one (the script's slot ends later, so it counts more);
 * - buckets: admissions at t whose caller clocks hold more than capacity + (t − s) × rate in some [s, t].
 */
export function overLimit(algo: OurAlgo, p: Policy, admitted: number[]): number {
  let over = 0;
  if (algo === "fixedWindow") {
    const counts = new Map<number, number>();
    for (const t of admitted) {
      const w = Math.floor(t / p.window);
      const n = (counts.get(w) ?? 0) + 1;
      counts.set(w, n);
      if (n > p.limit) over++;
    }
  } else if (algo === "slidingLog") {
    const stamps: number[] = [];
    let newest = Number.NEGATIVE_INFINITY;
    let first = 0;
    for (const t of admitted) {
      newest = Math.max(newest, t);
      stamps.push(newest);
      while (stamps[first]! <= newest - p.window) first++;
      if (stamps.length - first > p.limit) over++;
    }
  } else if (algo === "slidingWindow") {
    const counts = new Map<number, number>();
    const latest = new Map<number, number>();
    let newestStart = Number.NEGATIVE_INFINITY;
    for (const own of admitted) {
      const t = Math.max(own, newestStart);
      const start = t - (t % p.window);
      newestStart = start;
      const current = (counts.get(start) ?? 0) + 1;
      counts.set(start, current);
      latest.set(start, Math.max(latest.get(start) ?? t, t));
      const previous = counts.get(start - p.window) ?? 0;
      const spread = (latest.get(start - p.window) ?? start - 1) - (start - p.window) + 1;
      // previous × max(0, spread − elapsed) / spread + current > limit, multiplied through by spread
      if (previous * Math.max(0, spread - (t - start)) + current * spread > p.limit * spread) over++;
    }
  } else {
    const b = bucketOf(p);
    const sorted = [...admitted].sort((x, y) => x - y);
    for (let j = 0; j < sorted.length; j++) {
      for (let i = 0; i <= j; i++) {
        // j − i + 1 units in [sorted[i], sorted[j]]: at most capacity + elapsed × refillRate / interval
        if ((j - i + 1 - b.capacity) * b.interval > (sorted[j]! - sorted[i]!) * b.refillRate) {
          over++;
          break;
        }
      }
    }
  }
  return over;
}
