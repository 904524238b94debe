/**
 * A steady load of decisions for the fault suite: a few workers, each deciding in a loop (one
 * decision, then a millisecond's pause so that an open breaker cannot spin the event loop), recording
 * every outcome with the phase of the fault it was issued in.
 */
import { Redis } from "@upstash/redis";
import type { RedisCallError } from "../../src/engine/errors.js";
import { type Transport, transportFor } from "../../src/engine/transport.js";
import {
  type BreakerOptions,
  type Decision,
  fixedWindow,
  gcra,
  Limiter,
  type RuleConfig,
  slidingLog,
  tokenBucket,
} from "../../src/index.js";
import { manualClock, uniquePrefix } from "../support.js";

/** One decision as the load saw it. */
export interface Outcome {
  target: string;
  phase: number;
  /** Ms from the call to its answer (performance.now). */
  ms: number;
  /** When the answer came (performance.now). */
  end: number;
  source?: Decision["source"];
  allowed?: boolean;
  kind?: RedisCallError["kind"] | "other";
  message?: string;
  /** Set when `limit()` threw or rejected: never expected. */
  threw?: unknown;
}

/** The limit of every exact rule under load: each hot identifier is asked far more often than this. */
export const EXACT_LIMIT = 25;

const exactRules: Record<string, RuleConfig> = {
  gcra: gcra({ limit: EXACT_LIMIT, period: "1h" }),
  tokenBucket: tokenBucket({ capacity: EXACT_LIMIT, refillRate: 1, interval: "1h" }),
  fixedWindow: fixedWindow({ limit: EXACT_LIMIT, window: "1h" }),
  slidingLog: slidingLog({ limit: EXACT_LIMIT, window: "1h" }),
};

/**
 * The limiters under load, on the client a user would write (default retries): one per exact
 * algorithm on a hot identifier, sharing one client (and so its breaker); and "units", on a client of
 * its own so its transport counts exactly the decisions it sent, with a limit nobody reaches, to count
 * the units Redis consumed. Its key changes with the phase (`units-<phase>`).
 */
export function loadTargets(
  url: string,
  token: string,
  options: { breaker?: BreakerOptions; timeout: number },
) {
  const redis = new Redis({ url, token });
  const unitsRedis = new Redis({ url, token });
  const prefix = uniquePrefix("fault");
  const clock = manualClock();
  const common = {
    prefix,
    clock,
    denyCache: false as const,
    timeout: options.timeout,
    breaker: options.breaker,
  };
  const targets: Record<string, Limiter> = {};
  for (const [name, rule] of Object.entries(exactRules)) {
    targets[name] = new Limiter({ ...common, redis, rules: { [name]: rule } });
  }
  const unitRules = { units: fixedWindow({ limit: 1_000_000, window: "1h" }) };
  targets.units = new Limiter({ ...common, redis: unitsRedis, rules: unitRules });
  /** Units Redis consumed under `units-<phase>`, read through a fresh client without a breaker. */
  const consumed = async (phase: number, via = url) => {
    const reader = new Limiter({
      ...common,
      redis: new Redis({ url: via, token }),
      rules: unitRules,
      breaker: false,
    });
    const peek = await reader.limit(`units-${phase}`, { cost: 0 });
    if (peek.source !== "redis") throw new Error(`could not read units-${phase}: ${peek.error?.message}`);
    return 1_000_000 - peek.remaining;
  };
  return {
    targets,
    transport: transportFor(redis) as Transport,
    unitsTransport: transportFor(unitsRedis) as Transport,
    consumed,
    names: Object.keys(exactRules),
  };
}

export class Load {
  readonly outcomes: Outcome[] = [];
  phase = 0;
  private running = true;
  private readonly done: Promise<void>;

  constructor(targets: Record<string, Limiter>, workers: number) {
    const names = Object.keys(targets);
    this.done = Promise.all(
      Array.from({ length: workers }, async (_, w) => {
        for (let i = w; this.running; i++) {
          const target = names[i % names.length]!;
          await this.decide(target, targets[target]!);
          await new Promise((resolve) => setTimeout(resolve, 1));
        }
      }),
    ).then(() => {});
  }

  private async decide(target: string, limiter: Limiter): Promise<void> {
    const phase = this.phase;
    const started = performance.now();
    try {
      const d = await limiter.limit(target === "units" ? `units-${phase}` : "hot");
      const error = d.error as RedisCallError | undefined;
      const end = performance.now();
      this.outcomes.push({
        target,
        phase,
        ms: end - started,
        end,
        source: d.source,
        allowed: d.allowed,
        ...(error ? { kind: error.kind ?? "other", message: error.message } : {}),
      });
    } catch (threw) {
      const end = performance.now();
      this.outcomes.push({ target, phase, ms: end - started, end, threw });
    }
  }

  /** Resolves once the outcomes pass `test` (checked every 10 ms), or throws after `limit` ms. */
  async until(test: (outcomes: Outcome[]) => boolean, limit: number, what: string): Promise<void> {
    const deadline = performance.now() + limit;
    while (!test(this.outcomes)) {
      if (performance.now() > deadline) throw new Error(`load: gave up waiting for ${what}`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }

  async stop(): Promise<Outcome[]> {
    this.running = false;
    await this.done;
    return this.outcomes;
  }
}

/** The p-th percentile (0-100) of `values`. */
export function percentile(values: number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

/** Figures for the notes: printed only with FAULT_FIGURES=1 (a green run prints nothing). */
export function figures(name: string, values: Record<string, unknown>): void {
  if (process.env.FAULT_FIGURES === "1") console.log(`fault figures: ${name} ${JSON.stringify(values)}`);
}
