// @upstash/ratelimit's MultiRegionRatelimit on edgelimit's regional pools. The peer decides in
// whichever database answers first and reconciles the others afterwards, so every region may admit a
// full limit at once. Here the first database is home and alone holds the count; the database that
// answers this isolate fastest (measured once, in the background), when clearly nearer than home, is
// its region, whose pool hands out units home has already counted: never over the limit.

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
/** Ms a region's PING must beat home's by (and answer in under half its time) to get a pool. */
const REGION_GAIN_MS = 5;
/** Ms a PING is waited for; one that takes longer counts as unreachable. */
const PING_WAIT_MS = 5000;

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

  /**
   * Pings every database once; the fastest becomes the region when a pool there pays: it answers in
   * less than half home's time and at least REGION_GAIN_MS sooner. Otherwise (home near, or every
   * database as near as home) there is no region and every decision is home's, exactly.
   */
  private async chooseRegion(databases: unknown[]): Promise<void> {
    const started = Date.now();
    // a database that does not answer within PING_WAIT_MS counts as infinitely far; the wait ends with
    // the last answer, so that it keeps no process alive once every database has answered
    let timer: ReturnType<typeof setTimeout> | undefined;
    const gaveUp = new Promise<number>((resolve) => {
      timer = setTimeout(resolve, PING_WAIT_MS, Number.POSITIVE_INFINITY);
    });
    const times = await Promise.all(
      databases.map((redis) =>
        Promise.race([
          (redis as Pingable).ping().then(
            () => Date.now() - started,
            () => Number.POSITIVE_INFINITY,
          ),
          gaveUp,
        ]),
      ),
    );
    clearTimeout(timer);
    let fastest = 0;
    for (let i = 1; i < times.length; i++) if (times[i]! < times[fastest]!) fastest = i;
    const home = times[0]!;
    const near = times[fastest]!;
    if (fastest === 0 || !(near * 2 < home && home - near >= REGION_GAIN_MS)) return;
    this.chosen.region = databases[fastest];
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
