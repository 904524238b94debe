import { asError, ints4, mayRetry, runScript } from "./calls.js";
import { describe } from "./duration.js";
import { CONCURRENCY } from "./generated/scripts.js";
import { checkPrefix, keyTag } from "./keys.js";
import { type Transport, transportFor } from "./transport.js";
import { renamed, ttlOption } from "./ttl.js";
import { checkClock, checkOptions, checkString, durationMs, positiveMs, readClock } from "./validate.js";

/** What `new Concurrency()` takes. `redis`, `limit` and `ttl` are required. */
export interface ConcurrencyOptions {
  /**
   * An @upstash/redis client (`new Redis({ url, token })`), or the `{ url, token }` of a REST endpoint,
   * with `breaker` for the circuit breaker of that Redis (see docs/failures.md).
   */
  redis: unknown;
  /** Key namespace (default "edgelimit"): 1-64 characters of A-Z a-z 0-9 _ . : - */
  prefix?: string;
  /** Holders allowed at once per identifier. */
  limit: number;
  /**
   * How long a slot is held at most (ms or a duration such as "30s"): a holder that never releases
   * (a crashed isolate, a lost release) frees its slot after this. Longer than your slowest request.
   */
  ttl: number | string;
  /** Ms an acquire waits for Redis before following `onError` (default 1000). */
  timeout?: number;
  /** What an acquire is when Redis fails or times out: "allow" (default, fail open) or "deny". */
  onError?: "allow" | "deny";
  /** The caller's clock, epoch ms (default `Date.now`). Slots' ends are reckoned by it. */
  clock?: () => number;
}

/** The outcome of {@link Concurrency.acquire}: a Decision-like answer, and the slot to give back. */
export interface ConcurrencyDecision {
  /** Whether a slot was taken. */
  allowed: boolean;
  /** Holders allowed at once. */
  limit: number;
  /** Slots left free after this one (0 when refused). */
  remaining: number;
  /**
   * Ms until the oldest holder's slot runs out (0 when allowed): the latest a slot is sure to free;
   * holders usually release sooner.
   */
  retryAfter: number;
  /** Epoch ms at which this slot's `ttl` runs out (when refused: when the oldest holder's does). */
  resetAt: number;
  /** "redis", or "error" when Redis did not answer and `onError` decided. */
  source: "redis" | "error";
  /** The name of this limit in headers and problem bodies: "concurrency". */
  rule: "concurrency";
  /** The id of the slot in Redis (random). */
  slotId: string;
  /** @deprecated The old name of `slotId`, still set to the same id: read `slotId`. */
  leaseId: string;
  /**
   * Gives the slot back (one round trip; call it off the request path, e.g. in `waitUntil`). Safe to
   * call more than once, and on a refusal (a no-op): resolves true only the first time it freed a slot.
   */
  release(): Promise<boolean>;
  /** Set when `source` is "error". */
  error?: Error;
}

// `lease` is the old name of `ttl`, still read (see ttl.ts)
const OPTIONS = ["redis", "prefix", "limit", "ttl", "timeout", "onError", "clock", "lease"];
/** How long a caller refused by `onError: "deny"` is told to wait. */
const ERROR_RETRY_MS = 1000;

/**
 * At most `limit` requests in flight per identifier (Stripe's concurrent-requests limiter), where a rate
 * rule limits how many start per period. One round trip to acquire, one to release.
 *
 * @example
 * const inFlight = new Concurrency({ redis: new Redis({ url, token }), limit: 10, ttl: "30s" });
 * const slot = await inFlight.acquire("user:42");
 * if (!slot.allowed) return tooManyInFlight(slot); // the 429, with Retry-After
 * try { return await handle(request); } finally { ctx.waitUntil(slot.release()); }
 */
export class Concurrency {
  readonly prefix: string;
  readonly limit: number;
  /** How long a slot is held at most, ms. */
  readonly ttl: number;
  /** The clock slots' ends are reckoned by (epoch ms). */
  readonly clock: () => number;
  private readonly transport: Transport;
  private readonly timeout: number;
  private readonly failOpen: boolean;

  constructor(options: ConcurrencyOptions) {
    checkOptions(options, "Concurrency", OPTIONS);
    // transportFor checks what the object is (a client or { url, token }) and throws naming `redis`.
    this.transport = transportFor(options.redis);
    this.prefix = checkPrefix(options.prefix ?? "edgelimit");
    const limit = options.limit;
    if (typeof limit !== "number" || !Number.isInteger(limit) || limit < 1 || limit > 1_000_000) {
      throw new Error(`limit: must be a whole number of holders from 1 to 1000000, got ${describe(limit)}`);
    }
    this.limit = limit;
    const ttl = ttlOption(options, "Concurrency");
    if (ttl === undefined) throw new Error('ttl: is required, e.g. ttl: "30s"');
    this.ttl = durationMs(ttl, "ttl");
    this.timeout = positiveMs(options.timeout ?? 1000, "timeout", { infinite: true });
    const onError = options.onError ?? "allow";
    if (onError !== "allow" && onError !== "deny") {
      throw new Error(`onError: must be "allow" or "deny", got ${describe(onError)}`);
    }
    this.failOpen = onError === "allow";
    this.clock = checkClock(options.clock ?? Date.now);
  }

  /** The Redis key (a sorted set of slot ids) of `identifier`. */
  key(identifier: string): string {
    return `${this.prefix}:concurrency:${keyTag(checkString(identifier, "identifier"))}`;
  }

  /**
   * Takes a slot of `identifier` if one is free, in one round trip. Never rejects for Redis trouble:
   * the decision then follows `onError`, with `source: "error"`.
   *
   * @example
   * const slot = await inFlight.acquire(apiKey);
   * // slot.allowed, slot.remaining, slot.retryAfter; later: await slot.release()
   */
  async acquire(identifier: string): Promise<ConcurrencyDecision> {
    const key = this.key(identifier);
    const now = this.now();
    const slotId = crypto.randomUUID();
    let released = false;
    const release = async (): Promise<boolean> => {
      if (released) return false;
      released = true;
      // Removing a slot id twice is harmless: a release whose answer was lost is tried once more.
      for (let attempt = 1; ; attempt++) {
        try {
          const freed = await runScript(
            this.transport,
            CONCURRENCY,
            [key],
            ["release", String(this.now()), slotId],
            this.timeout,
          );
          return freed === 1;
        } catch (error) {
          if (attempt < 2 && mayRetry(error)) continue;
          // The slot frees itself when its ttl runs out; a release is only a courtesy to the next caller.
          return false;
        }
      }
    };
    const base = { limit: this.limit, rule: "concurrency" as const, slotId, leaseId: slotId, release };
    try {
      const args = ["acquire", String(now), slotId, String(this.limit), String(this.ttl)];
      const [allowed, remaining, retryAfter] = ints4(
        await runScript(this.transport, CONCURRENCY, [key], args, this.timeout),
      );
      if (allowed !== 1) released = true; // nothing to give back
      return {
        ...base,
        allowed: allowed === 1,
        remaining,
        retryAfter,
        resetAt: now + (allowed === 1 ? this.ttl : retryAfter),
        source: "redis",
      };
    } catch (error) {
      // The acquire may still have reached Redis: release() removes the slot it may have taken.
      const allowed = this.failOpen;
      return {
        ...base,
        allowed,
        remaining: allowed ? this.limit : 0,
        retryAfter: allowed ? 0 : ERROR_RETRY_MS,
        resetAt: now,
        source: "error",
        error: asError(error),
      };
    }
  }

  private now(): number {
    return readClock(this.clock);
  }
}

// `concurrency.lease`, the old name of `concurrency.ttl`: still read, not in the types.
Object.defineProperty(Concurrency.prototype, "lease", {
  get(this: Concurrency): number {
    renamed("Concurrency");
    return this.ttl;
  },
});
