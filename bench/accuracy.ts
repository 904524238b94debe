// Part 4: 64 callers share one identifier for 60 simulated seconds (injected time), issued in time
// order 64 at a time; each decision is compared with the ideal limiter of its algorithm's family,
// computed from the true (unskewed) send times. Caches as each library defaults (both on).
import { ALL, contestant, labelOf } from "./contestants.js";
import { check, log, type Part, pct, table } from "./harness.js";
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

const durationMs = (smoke: boolean) => (smoke ? 20_000 : 60_000);

/** wronglyAdmitted / wronglyDenied: where the ideal denies / admits; over: edgelimit's overLimit. */
type AccuracyRow = Record<"requests" | "ideal" | "admitted" | "wronglyAdmitted" | "wronglyDenied", number> & {
  label: string;
  shape: string;
  over?: number;
};

export const accuracy: Part<AccuracyRow[]> = {
  name: "accuracy",
  title: "## 4. Accuracy",
  async run({ env, smoke, tag }) {
    const p = ACCURACY_POLICY;
    const rows: AccuracyRow[] = [];
    let run = 0;
    for (const shape of SHAPES) {
      const events = schedule(shape, p, durationMs(smoke));
      const times = events.map((x) => x.t);
      for (const e of ALL) {
        log(`accuracy: ${shape}, ${labelOf(e)}`);
        const want = ideal(FAMILY[e.algo]!, p, times);
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
        const admittedAt = clocks.filter((_, i) => got[i]);
        rows.push({
          label: labelOf(e),
          shape,
          requests: events.length,
          ideal: want.filter(Boolean).length,
          admitted: got.filter(Boolean).length,
          wronglyAdmitted: got.filter((g, i) => g && !want[i]).length,
          wronglyDenied: got.filter((g, i) => !g && want[i]).length,
          over: e.lib === "edgelimit" ? overLimit(e.algo as OurAlgo, p, admittedAt) : undefined,
        });
      }
    }
    return rows;
  },
  render(r, { smoke }) {
    const p = ACCURACY_POLICY;
    const shapes = [...new Set(r.map((a) => a.shape))];
    const rows = [...new Set(r.map((a) => a.label))].map((label) => [
      label,
      ...shapes.map((shape) => {
        const a = r.find((x) => x.label === label && x.shape === shape);
        if (!a) return "–";
        const over = a.over === undefined ? "" : `, ${a.over} over`;
        return `${a.admitted} / ${a.ideal} (+${a.wronglyAdmitted} −${a.wronglyDenied}${over})`;
      }),
    ]);
    const head = shapes.map((sh) => `${sh}: ${r.find((a) => a.shape === sh)!.requests} requests`);
    return `64 callers share one identifier for ${durationMs(smoke) / 1000} simulated seconds, ${p.limit} per ${p.window / 1000} s (buckets: capacity ${p.limit}, refilled
continuously). The ideal is the exact limiter of each family (fixed window; sliding window = perfect sliding log;
continuous token bucket) over the true send times. Skew: half the callers' clocks run 500 ms fast, half slow.
"×8": the shape over 8 times as long (more boundaries, each a fresh draw of which clocks reach it first).
Each cell: admitted / ideal (+ admitted where the ideal denies, − denied where it admits) and, for edgelimit,
admissions over the limit in a window of the callers' time (each decision at its caller's clock, or a lagging
caller's at the time the state had reached: docs/algorithms.md, "Clock skew"). Goals: with skew, ≥ 90 % of the
ideal and 0 over, every algorithm.

${table(["contestant", ...head], rows)}`;
  },
  /** The skewed scenarios, every edgelimit algorithm: ≥ 90 % of the ideal, 0 over the limit. */
  goals(r = []) {
    const skewed = r.filter((a) => a.shape.includes("skew") && a.over !== undefined);
    const worst = skewed.length
      ? skewed.reduce((w, a) => (a.admitted / a.ideal < w.admitted / w.ideal ? a : w))
      : undefined;
    const over = skewed.reduce((sum, a) => sum + a.over!, 0);
    return [
      [
        "(4) clocks ±500 ms apart: every algorithm admits ≥ 90 % of the ideal",
        worst ? `at least ${pct(worst.admitted / worst.ideal)} (${worst.label}, ${worst.shape})` : "–",
        check(worst && worst.admitted / worst.ideal >= 0.9),
      ],
      [
        "(4) clocks ±500 ms apart: 0 admissions over the limit in any window of the callers' time",
        worst ? `${over} over` : "–",
        check(worst && over === 0),
      ],
    ];
  },
};
