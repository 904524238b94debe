// @upstash/ratelimit's MultiRegionRatelimit on edgelimit's regional pools. The peer decides in
// whichever database answers first and reconciles the others afterwards, so every region may admit a
// full limit at once. Here the first database is home and alone holds the count; the database that
// answers this isolate fastest (measured once, in the background) is its region, whose pool hands out
// units home has already counted: never over the limit.

import type { LimiterOptions } from "../../index.js";
import { type Algorithm, fixedWindowSpec, slidingWindowSpec } from "./algorithm.js";
import type { Duration } from "./duration.js";
import { type CommonConfig, RatelimitBase } from "./ratelimit.js";

/** Options of `new MultiRegionRatelimit()`, as the peer's. */
export interface MultiRegionRatelimitConfig extends CommonConfig {
  /** @upstash/redis clients, one per database: the first is home. */
  redis: unknown[];
  /** Accepted and ignored, as the peer ignores it for several regions. */
  dynamicLimits?: boolean;
}

/** How long a deposit in the region's pool may be handed out. */
const POOL_TTL_MS = 5000;

interface Pingable {
  ping(): Promise<unknown>;
}

/**
 * The peer's MultiRegionRatelimit: the count at home (`redis[0]`), decisions from the nearest
 * database's pool.
 *
 * @example
 * const ratelimit = new MultiRegionRatelimit({
 *   redis: [new Redis({ url: US, token }), new Redis({ url: EU, token })],
 *   limiter: MultiRegionRatelimit.slidingWindow(10, "10 s"),
 * });
 */
export class MultiRegionRatelimit extends RatelimitBase {
  /** The database decisions are asked from first, once chosen (home's own pools need none). */
  private readonly chosen: { region?: unknown };

  constructor(config: MultiRegionRatelimitConfig) {
    if (config === null || typeof config !== "object") {
      throw new Error("MultiRegionRatelimit: expected its options");
    }
    const databases = config.redis;
    if (!Array.isArray(databases) || databases.length === 0) {
      throw new Error("redis: expected an array of @upstash/redis clients, home first");
    }
    const chosen: { region?: unknown } = {};
    const limit = typeof config.limiter === "function" ? config.limiter().limit : 1;
    const pool = { max: Math.max(1, Math.floor(limit / 10)), ttl: POOL_TTL_MS };
    super(
      { ...config, dynamicLimits: false },
      {
        primary: databases[0],
        limiterOptions: (): Pick<LimiterOptions, "redis" | "region"> =>
          chosen.region === undefined
            ? { redis: databases[0] }
            : { redis: databases[0], region: { redis: chosen.region, pool } },
      },
    );
    this.chosen = chosen;
    if (databases.length > 1) void this.chooseRegion(databases);
  }

  /** Pings every database once; the fastest becomes the region, unless it is home. */
  private async chooseRegion(databases: unknown[]): Promise<void> {
    const started = Date.now();
    const answers = databases.map((redis, index) =>
      (redis as Pingable).ping().then(
        () => ({ index, ms: Date.now() - started }),
        () => ({ index, ms: Number.POSITIVE_INFINITY }),
      ),
    );
    const fastest = await Promise.race(
      answers.map((answer) => answer.then((a) => (Number.isFinite(a.ms) ? a : never()))),
    );
    if (fastest.index === 0) return;
    this.chosen.region = databases[fastest.index];
    this.rebuild();
  }

  /** `tokens` per `window`, windows aligned to the epoch. */
  static fixedWindow(tokens: number, window: Duration): Algorithm {
    return fixedWindowSpec(tokens, window);
  }

  /** `tokens` per moving `window`, weighted over the current and the previous window. */
  static slidingWindow(tokens: number, window: Duration): Algorithm {
    return slidingWindowSpec(tokens, window);
  }
}

/** A promise that never settles: a failed ping never wins the race. */
function never(): Promise<never> {
  return new Promise(() => {});
}
