// @upstash/ratelimit's Ratelimit, answered by edgelimit's Limiter: one EVALSHA per decision, a
// bounded ephemeral cache, a timeout that aborts its request, the breaker, exact counts. The peer's
// semantics that code written against it depends on are kept here, around the Limiter's public API
// and the windows' CountingOptions (docs/upstash.md lists each one, kept or changed).

import { MAX_EXACT } from "../../engine/algorithms/index.js";
import { type Decision, Limiter, type LimiterOptions, RedisCallError } from "../../index.js";
import {
  type Algorithm,
  type AlgorithmSpec,
  cachedFixedWindowSpec,
  fixedWindowSpec,
  slidingWindowSpec,
  tokenBucketSpec,
} from "./algorithm.js";
import { type Geo, Recorder } from "./analytics.js";
import { DenyList } from "./deny-list.js";
import type { Duration } from "./duration.js";
import { DEFAULT_PREFIX, dynamicLimitKey, limiterPrefix } from "./keys.js";

/** Why `success` is what it is, where Redis did not decide it alone. */
export type RatelimitResponseType = "timeout" | "cacheBlock" | "denyList";

/** What `limit()` and `blockUntilReady()` answer, as the peer documents it. */
export interface RatelimitResponse {
  /** Whether the request may pass. */
  success: boolean;
  /** The limit in force (a token bucket's `maxTokens`; a dynamic limit when one is set). */
  limit: number;
  /** Units left after this request. */
  remaining: number;
  /** Epoch ms at which the limit resets (a denied request: when it could be admitted). */
  reset: number;
  /**
   * Work that goes on after the answer (analytics, a stale IP deny list's refresh): hand it to
   * `waitUntil` on Workers and Vercel.
   */
  pending: Promise<unknown>;
  /** "timeout", "cacheBlock" (denied in the isolate, no request) or "denyList"; else undefined. */
  reason?: RatelimitResponseType;
  /** With `reason: "denyList"`: the value that was denied. */
  deniedValue?: string;
}

/** Options of one `limit()` call. */
export interface LimitOptions {
  /** Units this request takes (default 1); a negative rate gives units back. */
  rate?: number;
  /** Checked against the deny list with `enableProtection`. */
  ip?: string;
  userAgent?: string;
  country?: string;
  /** Recorded with the request's analytics. */
  geo?: Geo;
}

/** The options both Ratelimit and MultiRegionRatelimit take. */
export interface CommonConfig {
  /** From `Ratelimit.fixedWindow(...)`, `slidingWindow`, `tokenBucket` or `cachedFixedWindow`. */
  limiter: Algorithm;
  /** Key namespace (default "@upstash/ratelimit"). */
  prefix?: string;
  /**
   * The in-isolate cache of denials: left out or a Map, a cache bounded to 10,000 identifiers (the
   * Map itself is not used: it would grow without bound); `false`, none.
   */
  ephemeralCache?: Map<string, number> | false;
  /** Ms a decision waits for Redis (default 5000; 0: no limit). Then it answers `reason: "timeout"`. */
  timeout?: number;
  /** Counts every decision into the peer's analytics tables, written in the background. */
  analytics?: boolean;
  /** Accepted and ignored. */
  enableTelemetry?: boolean;
  /** Accepted and ignored (the peer's deprecated option). */
  cacheScripts?: boolean;
  /** The clock decisions are made by, epoch ms (default `Date.now`): edgelimit's own option. */
  clock?: () => number;
}

/** Options of `new Ratelimit()`, as the peer's. */
export interface RatelimitConfig extends CommonConfig {
  /** An @upstash/redis client (`new Redis({ url, token })`). */
  redis: unknown;
  /** Denies by identifier, ip, user agent and country from the peer's deny lists. */
  enableProtection?: boolean;
  /** The ipsum level of the IP deny list, 1-8 (default 6). */
  denyListThreshold?: number;
  /** Reads the limit set by `setDynamicLimit()`: at most a second old. */
  dynamicLimits?: boolean;
}

/** How long a dynamic limit read from Redis is trusted. */
const DYNAMIC_FRESH_MS = 1000;
const CACHE_ENTRIES = 10_000;
/** Limiters kept at once, one per limit in force (the configured one, dynamic ones). */
const MAX_LIMITERS = 4;

/**
 * The `pending` of an answer with no work after it: one settled promise for all of them, since
 * awaiting it, or handing it to `waitUntil`, reads nothing from it.
 */
const DONE: Promise<unknown> = Promise.resolve();

/** What the peer answers when its timeout wins the race. */
function timedOut(): RatelimitResponse {
  return { success: true, limit: 0, remaining: 0, reset: 0, pending: DONE, reason: "timeout" };
}

/** What a subclass says about its databases. */
export interface Databases {
  /** The database analytics, deny lists and dynamic limits live in (the first one). */
  readonly primary: unknown;
  /** The Limiter's `redis`, and `region` when there is one. */
  limiterOptions(): Pick<LimiterOptions, "redis" | "region">;
}

/**
 * The Limiters deciding at one limit: the one that charges, and one whose rule gives back (a negative
 * rate), on the same prefix and rule name: the same keys, home only.
 */
interface Deciders {
  readonly charging: Limiter;
  readonly refunding: Limiter;
}

/** Lets Limiters no longer used give back what they hold, in the background. */
function retire({ charging, refunding }: Deciders): void {
  void charging.dispose();
  void refunding.dispose();
}

/** What Ratelimit and MultiRegionRatelimit share: the decisions, refunds and the peer's extras. */
export abstract class RatelimitBase {
  protected readonly spec: AlgorithmSpec;
  protected readonly prefix: string;
  private readonly keyPrefix: string;
  private readonly timeout: number;
  private readonly cache: boolean;
  protected readonly clock: () => number;
  private readonly limiters = new Map<number, Deciders>();
  private readonly recorder: Recorder | undefined;
  private readonly denyList: DenyList | undefined;
  private readonly dynamicLimits: boolean;
  /** With the ephemeral cache: identifiers denied, until when (bounded, oldest first out). */
  private readonly blocked: Map<string, number> | undefined;
  private dynamic: { value: number | null; readAt: number } | undefined;

  protected constructor(
    config: CommonConfig & {
      enableProtection?: boolean;
      denyListThreshold?: number;
      dynamicLimits?: boolean;
    },
    private readonly databases: Databases,
  ) {
    if (typeof config.limiter !== "function") {
      throw new Error('limiter: expected an algorithm such as Ratelimit.slidingWindow(10, "10 s")');
    }
    this.spec = config.limiter();
    this.prefix = config.prefix ?? DEFAULT_PREFIX;
    if (typeof this.prefix !== "string" || this.prefix === "") {
      throw new Error(`prefix: must be a non-empty string, got ${String(config.prefix)}`);
    }
    this.keyPrefix = limiterPrefix(this.prefix);
    const timeout = config.timeout ?? 5000;
    if (typeof timeout !== "number" || !(timeout >= 0)) {
      throw new Error(`timeout: must be ms, 0 or more, got ${String(timeout)}`);
    }
    this.timeout = timeout === 0 ? Number.POSITIVE_INFINITY : timeout;
    this.cache = config.ephemeralCache !== false;
    this.blocked = this.cache ? new Map() : undefined;
    if (this.spec.name === "cachedFixedWindow" && !this.cache) {
      throw new Error("ephemeralCache: cachedFixedWindow answers from the cache; leave it on");
    }
    this.clock = config.clock ?? Date.now;
    this.dynamicLimits = config.dynamicLimits === true && this.spec.name !== "cachedFixedWindow";
    this.recorder = config.analytics ? new Recorder(databases.primary, this.prefix) : undefined;
    this.denyList = config.enableProtection
      ? new DenyList(databases.primary, this.prefix, config.denyListThreshold ?? 6, this.clock)
      : undefined;
    // built now, so that a bad client or option throws from the constructor as it does for the peer
    this.limiterAt(this.spec.limit);
  }

  /** Builds the Limiters again on their next decision (the databases changed). */
  protected rebuild(): void {
    const old = [...this.limiters.values()];
    this.limiters.clear();
    for (const deciders of old) retire(deciders);
  }

  /**
   * The Limiters deciding at `limit` (the configured one, or a dynamic limit), built once. Their own
   * deny cache is off: the ephemeral cache is `blocked` (below), which a refund lifts.
   */
  private limiterAt(limit: number): Deciders {
    let deciders = this.limiters.get(limit);
    if (deciders === undefined) {
      const options = this.databases.limiterOptions();
      const common = {
        prefix: this.keyPrefix,
        denyCache: false as const,
        timeout: this.timeout,
        clock: this.clock,
      };
      deciders = {
        charging: new Limiter({
          ...options,
          ...common,
          rules: { [this.spec.name]: this.spec.rule(limit) },
          onError: "allow",
          lease:
            this.spec.name === "cachedFixedWindow"
              ? { max: Math.max(1, Math.floor(limit / 10)), ttl: Math.min(this.spec.window, 1000) }
              : false,
        }),
        // a refund goes home, where every unit a pool or a lease holds was counted
        refunding: new Limiter({
          redis: options.redis,
          ...common,
          rules: { [this.spec.name]: this.spec.refundRule(limit) },
        }),
      };
      this.limiters.set(limit, deciders);
      // a dynamic limit that keeps changing keeps only the latest few Limiters (their leases)
      if (this.limiters.size > MAX_LIMITERS) {
        const [oldest, retired] = this.limiters.entries().next().value!;
        this.limiters.delete(oldest);
        retire(retired);
      }
    }
    return deciders;
  }

  /** The limit in force: a dynamic limit (read at most once a second), else the configured one. */
  private async currentLimit(): Promise<number> {
    if (!this.dynamicLimits) return this.spec.limit;
    const now = this.clock();
    if (this.dynamic === undefined || now - this.dynamic.readAt >= DYNAMIC_FRESH_MS) {
      const stored = await (this.databases.primary as Client).get(dynamicLimitKey(this.prefix));
      const value = stored === null || stored === undefined ? null : Number(stored);
      this.dynamic = {
        value: value !== null && Number.isInteger(value) && value > 0 ? value : null,
        readAt: now,
      };
    }
    return this.dynamic.value ?? this.spec.limit;
  }

  /**
   * Decides one request of `identifier`; a negative `rate` gives units back. A timeout answers
   * `{ success: true, reason: "timeout" }` and aborts the request behind it.
   *
   * @example
   * const { success, remaining, reset } = await ratelimit.limit("user:42");
   */
  limit = (identifier: string, req?: LimitOptions): Promise<RatelimitResponse> => {
    const rate = req?.rate ?? 1;
    if (typeof rate !== "number" || !Number.isSafeInteger(rate)) {
      return Promise.reject(new RangeError(`rate: must be a whole number of units, got ${String(rate)}`));
    }
    // without protection and analytics a decision is the Limiter's alone: no layer of their own
    if (this.denyList === undefined && this.recorder === undefined) return this.decide(identifier, rate);
    return this.guarded(identifier, rate, req);
  };

  /** `limit()` with the deny list checked beside the decision, and the decision recorded. */
  private async guarded(identifier: string, rate: number, req: LimitOptions | undefined) {
    let response: RatelimitResponse;
    if (this.denyList === undefined) {
      response = await this.decide(identifier, rate);
    } else {
      const members = [identifier, req?.ip, req?.userAgent, req?.country].filter(
        (member): member is string => typeof member === "string" && member !== "",
      );
      const blocked = this.denyList.cached(members);
      if (blocked !== undefined) {
        response = this.deniedBy(blocked);
      } else {
        const [decided, check] = await Promise.all([
          this.decide(identifier, rate),
          this.denyList.check(members, this.timeout),
        ]);
        response = check.deniedValue === undefined ? decided : this.deniedBy(check.deniedValue);
        if (check.refresh !== undefined) response.pending = Promise.all([response.pending, check.refresh]);
      }
    }
    if (this.recorder !== undefined) {
      const written = this.recorder.record(
        response.reason === "denyList" ? response.deniedValue! : identifier,
        response.reason === "denyList" ? "denied" : response.success,
        this.clock(),
        req?.geo,
      );
      response.pending = Promise.all([response.pending, written]);
    }
    return response;
  }

  /**
   * Waits until `identifier` may proceed, at most `timeout` ms, asking again at each reset. Throws
   * for an identifier on the deny list: waiting would never admit it.
   *
   * @example
   * const { success } = await ratelimit.blockUntilReady("user:42", 30_000);
   */
  blockUntilReady = async (identifier: string, timeout: number): Promise<RatelimitResponse> => {
    if (typeof timeout !== "number" || !(timeout > 0)) throw new Error("timeout must be positive");
    const deadline = Date.now() + timeout;
    for (;;) {
      const response = await this.limit(identifier);
      if (response.success) return response;
      if (response.reason === "denyList") {
        throw new Error(
          `blockUntilReady: ${JSON.stringify(response.deniedValue)} is on the deny list; it is never admitted`,
        );
      }
      const now = Date.now();
      if (now >= deadline) return response;
      const wait = Math.max(1, Math.min(response.reset - this.clock(), deadline - now));
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  };

  /**
   * Forgets every unit `identifier` has used (one request).
   *
   * @example
   * await ratelimit.resetUsedTokens("user:42");
   */
  resetUsedTokens = async (identifier: string): Promise<void> => {
    this.blocked?.delete(identifier);
    await this.limiterAt(await this.currentLimit()).charging.reset(identifier);
    for (const { charging } of this.limiters.values()) await charging.reset(identifier).catch(() => {});
  };

  /**
   * The units `identifier` has left, when the limit resets, and the limit in force; counts nothing.
   *
   * @example
   * const { remaining } = await ratelimit.getRemaining("user:42");
   */
  getRemaining = async (identifier: string): Promise<{ remaining: number; reset: number; limit: number }> => {
    const limit = await this.currentLimit();
    const peek = await this.limiterAt(limit).charging.limit(identifier, { cost: 0 });
    if (peek.source === "error") throw peek.error;
    return { remaining: peek.remaining, reset: this.resetOf(peek, true), limit: peek.limit };
  };

  /**
   * Sets the limit every identifier is decided by (`false`: back to the configured one), in the
   * peer's key: instances of the peer on the same prefix read it too.
   *
   * @example
   * await ratelimit.setDynamicLimit({ limit: 120 });
   */
  setDynamicLimit = async (options: { limit: number | false }): Promise<void> => {
    if (!this.dynamicLimits) {
      throw new Error("dynamicLimits must be enabled in the Ratelimit constructor to use setDynamicLimit()");
    }
    const limit = options?.limit;
    if (limit !== false && (typeof limit !== "number" || !Number.isInteger(limit) || limit <= 0)) {
      throw new Error(`limit: must be a positive whole number or false, got ${String(limit)}`);
    }
    const client = this.databases.primary as Client;
    const key = dynamicLimitKey(this.prefix);
    await (limit === false ? client.del(key) : client.set(key, limit));
    this.dynamic = { value: limit === false ? null : limit, readAt: this.clock() };
  };

  /**
   * The limit set by `setDynamicLimit()`, or null.
   *
   * @example
   * const { dynamicLimit } = await ratelimit.getDynamicLimit();
   */
  getDynamicLimit = async (): Promise<{ dynamicLimit: number | null }> => {
    if (!this.dynamicLimits) {
      throw new Error("dynamicLimits must be enabled in the Ratelimit constructor to use getDynamicLimit()");
    }
    const stored = await (this.databases.primary as Client).get(dynamicLimitKey(this.prefix));
    return { dynamicLimit: stored === null || stored === undefined ? null : Number(stored) };
  };

  /**
   * One decision of `rate` units (below 0: a refund) under the limit in force. As the peer's cache
   * does, a denied identifier is denied here, with no request, until the denial's reset, for any
   * positive rate and across dynamic limit changes; a refund or a reset lifts it.
   *
   * A charge of 0 or more units is one EVALSHA. The windows count a charge past the room left
   * although they deny it (their rule's `overshoot`, in the same EVALSHA), as the peer's do: code
   * that charges after the fact, then stops at getRemaining() = 0, relies on it. A token bucket
   * denies a rate above what it holds and takes nothing; it admits one above its size from a credit.
   * A rate of 0 peeks: it answers success with what is left.
   *
   * No async function here: at many decisions in flight each one's suspended frame was most of what
   * the entry allocated beside the Limiter, and the garbage collector's work grows with it. The
   * Limiter's promise takes one handler, made once per instance where the answer needs nothing of
   * the call.
   */
  private decide(identifier: string, rate: number): Promise<RatelimitResponse> {
    try {
      if (this.dynamicLimits) {
        return this.currentLimit().then((limit) => this.decideAt(limit, identifier, rate));
      }
      return this.decideAt(this.spec.limit, identifier, rate);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** `decide()` at `limit`, the limit in force. */
  private decideAt(limit: number, identifier: string, rate: number): Promise<RatelimitResponse> {
    const deciders = this.limiterAt(limit);
    if (rate < 0) {
      this.blocked?.delete(identifier);
      return this.refund(deciders, identifier, -rate);
    }
    const blocked = this.blocked;
    if (rate > 0 && blocked !== undefined) {
      const until = blocked.get(identifier);
      if (until !== undefined) {
        if (until > this.clock()) {
          return Promise.resolve({
            success: false,
            limit,
            remaining: 0,
            reset: until,
            pending: DONE,
            reason: "cacheBlock",
          });
        }
        blocked.delete(identifier);
      }
    }
    // a cost of 1 is the Limiter's default: no options object to read
    const decided = deciders.charging.limit(identifier, rate === 1 ? undefined : { cost: rate });
    if (rate === 0) return decided.then(this.peeked);
    if (blocked === undefined) return decided.then(this.charged);
    return decided.then((decision) => {
      const response = this.charged(decision);
      if (!response.success && response.reset > this.clock()) {
        blocked.delete(identifier);
        blocked.set(identifier, response.reset);
        if (blocked.size > CACHE_ENTRIES) blocked.delete(blocked.keys().next().value!);
      }
      return response;
    });
  }

  /** The answer to a charge of 1 unit or more. */
  private readonly charged = (decision: Decision): RatelimitResponse =>
    decision.source === "error" ? this.failed(decision) : this.answer(decision, decision.allowed);

  /** The answer to a rate of 0: what is left, admitted. */
  private readonly peeked = (decision: Decision): RatelimitResponse =>
    decision.source === "error" ? this.failed(decision) : this.answer(decision, true);

  /**
   * Gives `units` back to `identifier`: one EVALSHA of the rule that gives back, as the peer's 2.1
   * does it. A fixed window's count may go below zero (`remaining` above the limit until the window
   * ends); a sliding window gives back what its counts hold; a token bucket may hold more than
   * `maxTokens` (a credit, cut back to `maxTokens` by its next refill).
   */
  private async refund(deciders: Deciders, identifier: string, units: number): Promise<RatelimitResponse> {
    // no count reaches 2^50 (MAX_EXACT): a larger refund gives as much, and the scripts' sums stay exact
    const given = await deciders.refunding.limit(identifier, { cost: Math.min(units, MAX_EXACT) });
    if (given.source === "error") return this.failed(given);
    return this.answer(given, true);
  }

  /** A decision that failed open: a timeout (or the open breaker) answers as the peer's timeout does. */
  private failed(decision: Decision): RatelimitResponse {
    const error = decision.error;
    if (error instanceof RedisCallError && error.kind !== "timeout" && error.kind !== "breaker-open") {
      throw error;
    }
    return timedOut();
  }

  /** The peer's answer: a denied request has nothing left, as the peer says it. */
  private answer(decision: Decision, success: boolean): RatelimitResponse {
    return {
      success,
      limit: decision.limit,
      remaining: success ? decision.remaining : 0,
      reset: this.resetOf(decision, success),
      pending: DONE,
    };
  }

  /**
   * The peer's `reset`: a window's end for the windows; for a denied request, when it could be
   * admitted (a rate above a bucket's size: the next interval); for a token bucket, when it is full.
   */
  private resetOf(decision: Decision, admitted: boolean): number {
    if (!admitted && Number.isFinite(decision.retryAfter) && decision.retryAfter > 0) {
      return decision.decidedAt + decision.retryAfter;
    }
    if (this.spec.name === "tokenBucket") {
      // a rate the bucket can never hold: as the peer, its next interval
      return admitted ? decision.resetAt : decision.decidedAt + this.spec.window;
    }
    const window = this.spec.window;
    return (Math.floor(decision.decidedAt / window) + 1) * window;
  }

  private deniedBy(value: string): RatelimitResponse {
    return {
      success: false,
      limit: 0,
      remaining: 0,
      reset: 0,
      pending: DONE,
      reason: "denyList",
      deniedValue: value,
    };
  }
}

/** The methods of an @upstash/redis client the entry calls beside the Limiter. */
export interface Client {
  get(key: string): Promise<unknown>;
  set(key: string, value: unknown, options?: unknown): Promise<unknown>;
  del(...keys: string[]): Promise<unknown>;
  eval(script: string, keys: string[], args: unknown[]): Promise<unknown>;
  pipeline(): {
    zincrby(key: string, increment: number, member: string): unknown;
    pexpire(key: string, ms: number): unknown;
    exec(): Promise<unknown[]>;
  };
  multi(): unknown;
}

/**
 * @upstash/ratelimit's `Ratelimit` on edgelimit's engine: `import { Ratelimit } from "edgelimit/upstash"`
 * in place of `"@upstash/ratelimit"`.
 *
 * @example
 * const ratelimit = new Ratelimit({ redis: Redis.fromEnv(), limiter: Ratelimit.slidingWindow(10, "10 s") });
 * const { success } = await ratelimit.limit("user:42");
 */
export class Ratelimit extends RatelimitBase {
  constructor(config: RatelimitConfig) {
    if (config === null || typeof config !== "object") throw new Error("Ratelimit: expected its options");
    const redis = config.redis;
    super(config, { primary: redis, limiterOptions: () => ({ redis }) });
  }

  /** `tokens` per `window`, windows aligned to the epoch. */
  static fixedWindow(tokens: number, window: Duration): Algorithm {
    return fixedWindowSpec(tokens, window);
  }

  /** `tokens` per moving `window`, weighted over the current and the previous window. */
  static slidingWindow(tokens: number, window: Duration): Algorithm {
    return slidingWindowSpec(tokens, window);
  }

  /** A bucket of `maxTokens`, refilled by `refillRate` per `interval`. */
  static tokenBucket(refillRate: number, interval: Duration, maxTokens: number): Algorithm {
    return tokenBucketSpec(refillRate, interval, maxTokens);
  }

  /** A fixed window answered in the isolate where it can be (deny cache and lease). */
  static cachedFixedWindow(tokens: number, window: Duration): Algorithm {
    return cachedFixedWindowSpec(tokens, window);
  }
}
