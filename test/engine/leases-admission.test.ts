// Over- and under-admission with leases: 1, 4 and 16 Limiter instances (isolates) share one hot
// identifier on one real redis-server, against a Limiter without leases fed the very same arrivals
// (the ideal count). Traffic: 200 decisions/s in total, round-robin over the instances, on a
// hand-moved clock. LEASE_REPORT=1 prints the figures (docs/leases.md, What it guarantees).
import { Redis } from "@upstash/redis";
import { describe, expect, inject, it } from "vitest";
import { fixedWindow, gcra, Limiter, type RuleConfig } from "../../src/index.js";
import { ownBridge } from "../own-bridge.js";
import { bridgeRedis, manualClock, T0, uniquePrefix } from "../support.js";

const bridge = ownBridge();

const MAX = 50;
const STEP_MS = 5; // 200 decisions/s in total
/** Simulated seconds of gcra traffic: LEASE_SECONDS for a longer measurement. */
const SECONDS = Number(process.env.LEASE_SECONDS ?? 15);

async function run(rule: RuleConfig, isolates: number, seconds: number) {
  const clock = manualClock();
  const prefix = uniquePrefix("adm");
  const rules = { r: rule };
  const limiters = Array.from(
    { length: isolates },
    () =>
      new Limiter({
        redis: new Redis({ url: bridge.url, token: inject("bridgeToken"), enableTelemetry: false }),
        prefix,
        rules,
        clock,
        lease: { max: MAX, ttl: "1s" },
        // no fail-open admissions on a busy machine: this measures the leases, not timeouts
        timeout: Number.POSITIVE_INFINITY,
        breaker: false,
      }),
  );
  const ideal = new Limiter({
    redis: bridgeRedis(),
    prefix,
    rules,
    clock,
    timeout: Number.POSITIVE_INFINITY,
    breaker: false,
  });
  const decisions = (seconds * 1000) / STEP_MS;
  // Half the limit taken at once first, by both: the state then holds seconds of debt, so its key's
  // TTL (real ms) outlives any pause of a busy machine while the hand-moved clock stands still.
  const half = rule.algorithm === "gcra" ? rule.limit / 2 : 0;
  let admitted = 0;
  let admittedIdeal = 0;
  if (half > 0) {
    if ((await limiters[0]!.limit("hot", { cost: half })).allowed) admitted += half;
    if ((await ideal.limit("ideal", { cost: half })).allowed) admittedIdeal += half;
  }
  let fromLeases = 0;
  let worstGap = 0;
  const errors: string[] = [];
  let worstOver = Number.NEGATIVE_INFINITY;
  const perWindow = new Map<number, number>();
  bridge.stats.reset();
  for (let i = 0; i < decisions; i++) {
    const d = await limiters[i % isolates]!.limit("hot");
    const e = await ideal.limit("ideal");
    if (d.allowed) admitted += 1;
    if (e.allowed) admittedIdeal += 1;
    if (d.source === "lease") fromLeases += 1;
    if (d.source === "error" || e.source === "error") errors.push(`${d.error ?? e.error}`);
    // Over-admission, by the rule's own exact bound, at every moment: gcra admits at most burst +
    // elapsed / T since the first decision; a fixed window at most its limit in each window.
    if (rule.algorithm === "gcra") {
      const most = rule.limit + Math.floor(((clock.now - T0) * rule.limit) / 60_000);
      worstOver = Math.max(worstOver, admitted - most);
    } else if (rule.algorithm === "fixedWindow" && d.allowed) {
      const window = clock.now - (clock.now % 10_000);
      perWindow.set(window, (perWindow.get(window) ?? 0) + 1);
      worstOver = Math.max(worstOver, perWindow.get(window)! - rule.limit);
    }
    // Under-admission, against a Limiter without leases fed the same arrivals.
    worstGap = Math.max(worstGap, admittedIdeal - admitted);
    clock.set(clock.now + STEP_MS);
  }
  const requests = bridge.stats.requests;
  await Promise.all(limiters.map((limiter) => limiter.dispose()));
  const figures = {
    algorithm: rule.algorithm,
    isolates,
    decisions,
    ideal: admittedIdeal,
    admitted,
    underAdmitted: admittedIdeal - admitted,
    worstOverTheBound: worstOver,
    errors: errors.length,
    worstGapDuringRun: worstGap,
    bound: isolates * MAX,
    fromLeasesPct: Math.round((1000 * fromLeases) / Math.max(1, admitted)) / 10,
    requestsPer1000: Math.round((1000 * requests) / decisions),
  };
  if (process.env.LEASE_REPORT) console.log(JSON.stringify(figures));
  return figures;
}

describe("admitted against the ideal count, 200 decisions/s on one identifier", () => {
  for (const isolates of [1, 4, 16]) {
    it(`gcra 1000/min, ${isolates} isolate(s), ${SECONDS} s: never over, under by at most ${isolates} × max`, async () => {
      const f = await run(gcra({ limit: 1000, period: "1m" }), isolates, SECONDS);
      expect(f.errors).toBe(0);
      expect(f.worstOverTheBound).toBeLessThanOrEqual(0);
      expect(f.worstGapDuringRun).toBeLessThanOrEqual(f.bound);
    });

    it(`fixedWindow 500 per 10 s, ${isolates} isolate(s), 30 s: never over, under by at most ${isolates} × max per window`, async () => {
      const f = await run(fixedWindow({ limit: 500, window: "10s" }), isolates, 30);
      expect(f.errors).toBe(0);
      expect(f.worstOverTheBound).toBeLessThanOrEqual(0);
      expect(f.worstGapDuringRun).toBeLessThanOrEqual(f.bound);
      // a window's leases end with it: what one window left unused is not lost to the next
      expect(f.underAdmitted).toBeLessThanOrEqual(3 * f.bound);
    });
  }
});
