// The fault suite: real processes, real faults, a steady load of decisions through the public API
// with the client a user writes. For every fault: no decision throws, no unhandled rejection, the
// exact algorithms admit at most their limit, a decision costs at most one unit, and the breaker
// answers at once while open, lets the first decision after recovery through, and NOSCRIPT after a
// restart costs no failed decision. Latencies are measured (FAULT_FIGURES=1 prints them), not asserted.
import { Redis } from "@upstash/redis";
import { describe, expect, inject, it } from "vitest";
import { startBridge } from "../../src/bridge/index.js";
import { failOnUnhandledRejections } from "../own-bridge.js";
import { EXACT_LIMIT, figures, Load, loadTargets, type Outcome, percentile } from "./load.js";
import { BridgeProcess, Hop, RedisProcess } from "./support.js";

const WORKERS = 4;
failOnUnhandledRejections();

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const failedAtRedis = (o: Outcome) => o.source === "error" && o.kind !== "breaker-open";
const refused = (o: Outcome) => o.kind === "breaker-open";
/** Calls that failed at Redis in `phase`, most per breaker: the ones that opened it (up to `failures`
 * plus one in flight per worker) and one failed probe per reopening. */
function failedBound(failures: number, ...breakers: { opened: number }[]): number {
  return breakers.reduce((sum, b) => sum + failures + WORKERS + b.opened, 0);
}
const bothOpen = (...transports: { breaker?: { state: string } | undefined }[]) =>
  transports.every((t) => t.breaker?.state === "open");
const admitted = (outcomes: Outcome[], target: string, phases: number[]) =>
  outcomes.filter((o) => o.target === target && phases.includes(o.phase) && o.source === "redis" && o.allowed)
    .length;
const recovered = (phase: number, targets: string[]) => (outcomes: Outcome[]) =>
  targets.every((t) => outcomes.some((o) => o.phase === phase && o.target === t && o.source === "redis"));

/** What every fault must leave true. */
function checkCommon(outcomes: Outcome[]): void {
  expect(outcomes.filter((o) => o.threw !== undefined)).toEqual([]);
  expect(outcomes.filter((o) => o.source === "error" && o.allowed !== true)).toEqual([]); // onError: allow
  expect(outcomes.filter((o) => /NOSCRIPT/.test(o.message ?? ""))).toEqual([]);
}

/** Figures of the breaker: refusals and how fast they were answered. */
function breakerFigures(outcomes: Outcome[], phase: number) {
  const open = outcomes.filter((o) => o.phase === phase && refused(o)).map((o) => o.ms);
  return {
    refused: open.length,
    refusedP50ms: Number(percentile(open, 50).toFixed(3)),
    refusedP99ms: Number(percentile(open, 99).toFixed(3)),
    refusedMaxMs: Number(Math.max(...open).toFixed(3)),
    failedAtRedis: outcomes.filter((o) => o.phase === phase && failedAtRedis(o)).length,
  };
}

describe("fault suite", () => {
  it("redis-server SIGKILLed mid-load, then restarted: breaker opens, recovers, NOSCRIPT costs nothing", async () => {
    const redis = await RedisProcess.start();
    const bridge = await startBridge({ redisUrl: redis.url, port: 0, token: "kill" });
    // documented defaults; a timeout no decision may wait for: a refused Redis must fail at once
    const { targets, transport, unitsTransport, consumed, names } = loadTargets(bridge.url, "kill", {
      timeout: 60_000,
    });
    const load = new Load(targets, WORKERS);
    try {
      await load.until(recovered(0, [...names, "units"]), 5000, "a first answer from every limiter");
      await sleep(200);
      load.phase = 1;
      const sentBefore = unitsTransport.stats.sent;
      await redis.kill();
      await load.until(() => bothOpen(transport, unitsTransport), 8000, "both breakers to open");
      await sleep(1200); // one failed probe at 1000 ms: the cooldown doubles to 2000
      await redis.restart(); // an empty dataset and an empty script cache
      const back = performance.now();
      load.phase = 2;
      const sentDuring = unitsTransport.stats.sent - sentBefore;
      await load.until(recovered(2, [...names, "units"]), 8000, "decisions from Redis after the restart");
      const firstBack = load.outcomes.find((o) => o.phase === 2 && o.source === "redis");
      await load.until(
        (all) => names.every((n) => admitted(all, n, [2]) === EXACT_LIMIT),
        5000,
        "limits to fill",
      );
      const outcomes = await load.stop();

      checkCommon(outcomes);
      for (const name of names) {
        expect(admitted(outcomes, name, [0])).toBeLessThanOrEqual(EXACT_LIMIT);
        // the restarted Redis forgot everything: its own count starts again, and never passes the limit
        expect(admitted(outcomes, name, [1, 2])).toBe(EXACT_LIMIT);
      }
      // while Redis was down, only the calls that opened the breaker and one probe per cooldown were sent
      const opened = transport.breaker!.opened;
      expect(outcomes.filter((o) => o.phase === 1 && failedAtRedis(o)).length).toBeLessThanOrEqual(
        failedBound(5, transport.breaker!, unitsTransport.breaker!),
      );
      expect(outcomes.filter((o) => o.phase === 1 && refused(o)).length).toBeGreaterThan(20);
      // Redis back: the first decision sent reached it, script cache empty or not (NOSCRIPT is handled)
      expect(outcomes.filter((o) => o.phase === 2 && failedAtRedis(o))).toEqual([]);
      // at most one unit per decision: units-2 was consumed by phase-2 decisions only, once each
      const units2 = outcomes.filter((o) => o.phase === 2 && o.target === "units");
      const charged = await consumed(2);
      expect(charged).toBeGreaterThanOrEqual(units2.filter((o) => o.source === "redis").length);
      expect(charged).toBeLessThanOrEqual(units2.filter((o) => !refused(o)).length);
      expect(await consumed(1)).toBe(0); // nothing issued while Redis was down ran later
      figures("redis SIGKILL + restart", {
        ...breakerFigures(outcomes, 1),
        firstDecisionFromRedisAfterRestartMs: Math.round((firstBack?.end ?? Number.NaN) - back),
        unitsSentWhileDown: sentDuring,
        breakerOpened: opened,
        decisions: outcomes.length,
      });
    } finally {
      await load.stop();
      await bridge.close();
      await redis.stop();
    }
  });

  it.each(["bridge", "redis-server"] as const)(
    "the %s SIGSTOPped then SIGCONTed: timeouts open the breaker, requests replayed later charge once",
    async (stalled) => {
      const redis = await RedisProcess.start();
      // the bridge in a child process of its own, so that SIGSTOP freezes it and not the tests
      const bridge =
        stalled === "bridge"
          ? await BridgeProcess.start(redis.url, "stop")
          : await startBridge({ redisUrl: redis.url, port: 0, token: "stop" });
      const freeze = (signal: "SIGSTOP" | "SIGCONT") =>
        bridge instanceof BridgeProcess ? bridge.signal(signal) : redis.signal(signal);
      const breaker = { failures: 5, cooldown: 300, maxCooldown: 600 };
      const { targets, transport, unitsTransport, consumed, names } = loadTargets(bridge.url, "stop", {
        timeout: 1000,
        breaker,
      });
      const load = new Load(targets, WORKERS);
      try {
        await load.until(recovered(0, [...names, "units"]), 5000, "a first answer from every limiter");
        await sleep(200);
        const sent: number[] = [unitsTransport.stats.sent];
        load.phase = 1;
        freeze("SIGSTOP");
        await load.until(() => bothOpen(transport, unitsTransport), 8000, "both breakers to open");
        await sleep(1000);
        sent.push(unitsTransport.stats.sent);
        load.phase = 2;
        freeze("SIGCONT");
        const back = performance.now();
        await load.until(recovered(2, [...names, "units"]), 5000, "decisions from Redis after SIGCONT");
        const firstBack = load.outcomes.find((o) => o.phase === 2 && o.source === "redis");
        await sleep(300);
        const outcomes = await load.stop();
        sent.push(unitsTransport.stats.sent);

        checkCommon(outcomes);
        for (const name of names)
          expect(admitted(outcomes, name, [0, 1, 2])).toBeLessThanOrEqual(EXACT_LIMIT);
        const opened = transport.breaker!.opened;
        const timeouts = outcomes.filter((o) => o.phase === 1 && o.kind === "timeout").length;
        // only the calls in flight when it stalled, and one probe per cooldown, waited for the timeout
        expect(timeouts).toBeLessThanOrEqual(
          failedBound(breaker.failures, transport.breaker!, unitsTransport.breaker!),
        );
        expect(outcomes.filter((o) => o.phase === 1 && refused(o)).length).toBeGreaterThan(20);
        expect(outcomes.filter((o) => o.phase === 2 && failedAtRedis(o))).toEqual([]);
        // the stalled requests ran once the bridge woke (their decisions had failed open), once each
        const replayed = await consumed(1, bridge.url);
        const sentWhileStopped = sent[1]! - sent[0]!;
        expect(replayed).toBeLessThanOrEqual(sentWhileStopped);
        expect(await consumed(2, bridge.url)).toBeLessThanOrEqual(sent[2]! - sent[1]!);
        figures(`${stalled} SIGSTOP + SIGCONT`, {
          ...breakerFigures(outcomes, 1),
          timeouts,
          firstDecisionFromRedisAfterSigcontMs: Math.round((firstBack?.end ?? Number.NaN) - back),
          unitsSentWhileStopped: sentWhileStopped,
          unitsReplayedAfterSigcont: replayed,
          breakerOpened: opened,
          decisions: outcomes.length,
        });
      } finally {
        await load.stop();
        if (bridge instanceof BridgeProcess) await bridge.stop();
        else await bridge.close();
        await redis.stop();
      }
    },
  );

  it.each(["502", "cut"] as const)(
    "a hop that forwards, then answers %s: each decision sent charges exactly one unit, the breaker opens and recovers",
    async (mode) => {
      const hop = await Hop.start(inject("bridgeUrl"));
      const breaker = { failures: 5, cooldown: 200, maxCooldown: 400 };
      const { targets, transport, unitsTransport, consumed, names } = loadTargets(
        hop.url,
        inject("bridgeToken"),
        {
          timeout: 2000,
          breaker,
        },
      );
      const load = new Load(targets, WORKERS);
      try {
        await load.until(recovered(0, [...names, "units"]), 5000, "a first answer from every limiter");
        const sent: number[] = [unitsTransport.stats.sent];
        load.phase = 1;
        hop.mode = mode;
        await load.until(() => bothOpen(transport, unitsTransport), 8000, "both breakers to open");
        await sleep(700);
        sent.push(unitsTransport.stats.sent);
        load.phase = 2;
        hop.mode = "pass";
        const back = performance.now();
        await load.until(recovered(2, [...names, "units"]), 5000, "decisions from Redis after the hop heals");
        const firstBack = load.outcomes.find((o) => o.phase === 2 && o.source === "redis");
        const outcomes = await load.stop();

        checkCommon(outcomes);
        for (const name of names)
          expect(admitted(outcomes, name, [0, 1, 2])).toBeLessThanOrEqual(EXACT_LIMIT);
        const failed = outcomes.filter((o) => o.phase === 1 && failedAtRedis(o));
        expect(new Set(failed.map((o) => o.kind))).toEqual(new Set(["unreachable"]));
        expect(failed.length).toBeLessThanOrEqual(
          failedBound(breaker.failures, transport.breaker!, unitsTransport.breaker!),
        );
        expect(outcomes.filter((o) => o.phase === 1 && refused(o)).length).toBeGreaterThan(20);
        expect(outcomes.filter((o) => o.phase === 2 && failedAtRedis(o))).toEqual([]);
        // every request the hop swallowed had run in Redis: exactly one unit per decision sent, none twice
        expect(await consumed(1)).toBe(sent[1]! - sent[0]!);
        figures(`hop ${mode}`, {
          ...breakerFigures(outcomes, 1),
          firstDecisionFromRedisAfterHealMs: Math.round((firstBack?.end ?? Number.NaN) - back),
          unitsSentDuringFault: sent[1]! - sent[0]!,
          breakerOpened: transport.breaker!.opened,
          decisions: outcomes.length,
        });
      } finally {
        await load.stop();
        await hop.close();
      }
    },
  );

  it("SCRIPT FLUSH every 100 ms under load: no decision fails, limits exact, one unit per decision", async () => {
    const redis = await RedisProcess.start();
    const bridge = await startBridge({ redisUrl: redis.url, port: 0, token: "flush" });
    const { targets, unitsTransport, consumed, names } = loadTargets(bridge.url, "flush", { timeout: 5000 });
    const flusher = new Redis({ url: bridge.url, token: "flush", enableTelemetry: false });
    let flushes = 0;
    const load = new Load(targets, WORKERS);
    const timer = setInterval(() => {
      flushes += 1;
      flusher.scriptFlush().catch(() => {});
    }, 100);
    try {
      // until every limit filled and 10 flushes happened (counted, not timed: the machine may be slow)
      await load.until(
        (all) =>
          flushes >= 10 && names.every((n) => admitted(all, n, [0]) >= EXACT_LIMIT) && all.length > 200,
        30_000,
        "the limits to fill under SCRIPT FLUSH",
      );
      clearInterval(timer);
      const outcomes = await load.stop();

      checkCommon(outcomes);
      expect(flushes).toBeGreaterThanOrEqual(10);
      expect(outcomes.filter((o) => o.source !== "redis")).toEqual([]);
      for (const name of names) expect(admitted(outcomes, name, [0])).toBe(EXACT_LIMIT);
      const units = outcomes.filter((o) => o.target === "units");
      expect(await consumed(0)).toBe(units.length);
      // NOSCRIPT was met and answered by loading the script, not by failing decisions
      expect(unitsTransport.stats.sent).toBeGreaterThan(units.length);
      figures("SCRIPT FLUSH every 100 ms", {
        flushes,
        decisions: outcomes.length,
        unitsDecisions: units.length,
        unitsCallsSent: unitsTransport.stats.sent,
        p99ms: Number(
          percentile(
            outcomes.map((o) => o.ms),
            99,
          ).toFixed(2),
        ),
      });
    } finally {
      clearInterval(timer);
      await load.stop();
      await bridge.close();
      await redis.stop();
    }
  });
});
