// Accuracy: 64 callers share one identifier for 60 simulated seconds (injected time), issued in time
// order 64 at a time; each decision is compared with the ideal limiter of its algorithm's family,
// computed from the true (unskewed) send times. Caches as each library defaults (both on).
import { ALL, type Algo, bucketOf, contestant, labelOf, type Policy } from "./contestants.js";
import type { BenchEnv } from "./env.js";
import { log, rng } from "./util.js";

/** 2023-11-14T22:14:00Z: aligned to every window used here. */
export const SIM_T0 = 1_700_000_040_000;
export const ACCURACY_POLICY: Policy = { limit: 100, window: 10_000 };
const CALLERS = 64;

export const SHAPES = ["steady 2×", "edge bursts", "steady 2×, skew ±500 ms", "edge bursts, skew ±500 ms"];

interface Event {
  /** True send time, ms after SIM_T0. */
  t: number;
  caller: number;
}

/** steady: twice the limit's rate, ±10% jitter; bursts: `limit` in the 250 ms either side of each boundary. */
export function schedule(shape: string, p: Policy, durationMs: number): Event[] {
  const random = rng(42);
  const events: Event[] = [];
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

type Family = "fixed window" | "sliding window" | "bucket";
const FAMILY: Partial<Record<Algo, Family>> = {
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

export interface AccuracyRow {
  label: string;
  shape: string;
  requests: number;
  ideal: number;
  admitted: number;
  /** Admitted where the ideal denies, denied where it admits. */
  wronglyAdmitted: number;
  wronglyDenied: number;
}

export async function runAccuracy(env: BenchEnv, tag: string, durationMs: number): Promise<AccuracyRow[]> {
  const p = ACCURACY_POLICY;
  const rows: AccuracyRow[] = [];
  let run = 0;
  for (const shape of SHAPES) {
    const events = schedule(shape, p, durationMs);
    for (const e of ALL) {
      log(`accuracy: ${shape}, ${labelOf(e)}`);
      const want = ideal(
        FAMILY[e.algo]!,
        p,
        events.map((x) => x.t),
      );
      let now = SIM_T0;
      const c = contestant(e, {
        redis: env.client(),
        prefix: `acc-${tag}-${run++}`,
        policy: p,
        cache: "default",
        clock: () => now,
      });
      const got: boolean[] = [];
      for (let i = 0; i < events.length; i += CALLERS) {
        const pending = events.slice(i, i + CALLERS).map((x) => {
          // half the callers' clocks run 500 ms fast, half 500 ms slow
          now = SIM_T0 + x.t + (shape.includes("skew") ? (x.caller % 2 ? -500 : 500) : 0);
          return c.limit("caller-group");
        });
        for (const o of await Promise.all(pending)) got.push(o.allowed);
      }
      rows.push({
        label: labelOf(e),
        shape,
        requests: events.length,
        ideal: want.filter(Boolean).length,
        admitted: got.filter(Boolean).length,
        wronglyAdmitted: got.filter((g, i) => g && !want[i]).length,
        wronglyDenied: got.filter((g, i) => !g && want[i]).length,
      });
    }
  }
  return rows;
}
