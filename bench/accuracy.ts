// Accuracy: 64 callers share one identifier for 60 simulated seconds (injected time), issued in time
// order 64 at a time; each decision is compared with the ideal limiter of its algorithm's family,
// computed from the true (unskewed) send times. Caches as each library defaults (both on).
import { ALL, contestant, labelOf } from "./contestants.js";
import type { BenchEnv } from "./env.js";
import {
  ACCURACY_POLICY,
  CALLERS,
  FAMILY,
  ideal,
  type OurAlgo,
  overLimit,
  SHAPES,
  SIM_T0,
  schedule,
} from "./scenarios.js";
import { log } from "./util.js";

export { ACCURACY_POLICY, ideal, SIM_T0 };

export interface AccuracyRow {
  label: string;
  shape: string;
  requests: number;
  ideal: number;
  admitted: number;
  /** Admitted where the ideal denies, denied where it admits. */
  wronglyAdmitted: number;
  wronglyDenied: number;
  /** edgelimit's: admissions over the limit in a window of the callers' time (overLimit); the peer's: undefined. */
  over?: number;
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
      const clocks: number[] = [];
      for (let i = 0; i < events.length; i += CALLERS) {
        const pending = events.slice(i, i + CALLERS).map((x) => {
          // half the callers' clocks run 500 ms fast, half 500 ms slow
          now = SIM_T0 + x.t + (shape.includes("skew") ? (x.caller % 2 ? -500 : 500) : 0);
          clocks.push(now);
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
        over:
          e.lib === "edgelimit"
            ? overLimit(
                e.algo as OurAlgo,
                p,
                clocks.filter((_, i) => got[i]),
              )
            : undefined,
      });
    }
  }
  return rows;
}
