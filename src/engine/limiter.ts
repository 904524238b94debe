import { compileRule, type Rule, type RuleConfig } from "./algorithms.js";
import type { BreakerOptions } from "./breaker.js";
import { DenyCache } from "./deny-cache.js";
import { describe } from "./duration.js";
import { RedisCallError } from "./errors.js";
import { SCRIPT, SCRIPT_SHA1, SCRIPTS } from "./generated/scripts.js";
import { checkIdentifier, checkPrefix, keyTag } from "./keys.js";
import { type LeaseOptions, Leases, leaseConfig, type Refund, type TopUp, type WaitUntil } from "./leases.js";
import { decodeShortcut, fixedWindowArgs, takesShortcut } from "./shortcuts.js";
import { type Transport, transportFor } from "./transport.js";
import type { Decision, RuleResult } from "./types.js";

/** What `new Limiter()` takes. Only `redis` and `rules` are required. */
export interface LimiterOptions {
  /** An @upstash/redis client (`new Redis({ url, token })`). */
  redis: unknown;
  /** Key namespace (default "edgelimit"): 1-64 characters of A-Z a-z 0-9 _ . : - */
  prefix?: string;
  /** The rules every decision checks, by name; a request is admitted only if all of them admit it. */
  rules: Record<string, RuleConfig>;
  /**
   * The in-isolate cache of deny decisions (default `{ maxEntries: 10_000 }`), or `false`. It belongs to
   * this Limiter: build the Limiter once per isolate (module scope), not per request.
   */
  denyCache?: { maxEntries: number } | false;
  /** Ms a decision waits for Redis before following `onError` (default 1000). */
  timeout?: number;
  /** What a decision is when Redis fails or times out: "allow" (default, fail open) or "deny". */
  onError?: "allow" | "deny";
  /** The caller's clock, epoch ms (default `Date.now`). Sent to the script: Redis's clock is never used. */
  clock?: () => number;
  /**
   * Ms to collect decisions into one request (default 0: those issued in the same tick). A small
   * window (1-2 ms) lets independent requests in one isolate share a pipeline.
   */
  batchWindow?: number;
  /**
   * The circuit breaker (default `{ failures: 5, cooldown: 1000, maxCooldown: 4000 }`), or `false`.
   * After `failures` consecutive failed calls, decisions follow `onError` at once without asking Redis;
   * after `cooldown` ms one decision probes Redis: success closes the breaker, failure reopens it with
   * the cooldown doubled up to `maxCooldown`. It belongs to the Redis client, not to this Limiter:
   * every Limiter on one client shares it (one per isolate on Workers).
   */
  breaker?: BreakerOptions | false;
  /**
   * Leases (default off): `{ max: 50, ttl: "1s" }` lets this Limiter hold up to `max` units of a hot
   * identifier, already consumed in Redis, and answer its decisions from them with no request
   * (`source: "lease"`) for up to `ttl`; unused units are given back. See README, Leases.
   */
  lease?: LeaseOptions | false;
}

/** Options of one decision. */
export interface LimitOptions {
  /** Units this request takes (default 1); 0 peeks: it answers for a cost of 1 and consumes nothing. */
  cost?: number;
  /**
   * The runtime's `waitUntil` (`ctx.waitUntil` on Workers, `waitUntil` of @vercel/functions): lease
   * refunds due now are handed to it, to finish after the response. Without it they run from a timer.
   */
  waitUntil?: WaitUntil;
}

/** How long a caller is told to wait after a decision denied by `onError: "deny"`. */
const ERROR_RETRY_MS = 1000;
const SCRIPT_TEXT = { text: SCRIPT, sha1: SCRIPT_SHA1 };
const OPTIONS = [
  "redis",
  "prefix",
  "rules",
  "denyCache",
  "timeout",
  "onError",
  "clock",
  "batchWindow",
  "breaker",
  "lease",
];

/**
 * Decides whether an identifier may proceed under every rule, in one Redis round trip.
 *
 * @example
 * const limiter = new Limiter({
 *   redis: new Redis({ url, token }),
 *   rules: { burst: gcra({ limit: 10, period: "1s", burst: 20 }), daily: fixedWindow({ limit: 1000, window: "1d" }) },
 * });
 * const decision = await limiter.limit("user:42");
 * if (!decision.allowed) return new Response("slow down", { status: 429 });
 */
export class Limiter {
  readonly prefix: string;
  /** The validated rules, in the order they were given. */
  readonly rules: readonly Rule[];
  private readonly transport: Transport;
  private readonly batchWindow: number;
  private readonly useBreaker: boolean;
  private readonly cache: DenyCache | undefined;
  private readonly timeout: number;
  private readonly failOpen: boolean;
  /** The caller's clock this limiter decides by (epoch ms); adapters read time from it too. */
  readonly clock: () => number;
  private readonly ruleArgs: string[];
  private readonly keySuffixes: string[];
  /** Per rule: the window of a fixed window (whose keys are one per window), else 0. */
  private readonly windows: number[];
  private readonly leases: Leases | undefined;

  constructor(options: LimiterOptions) {
    if (options === null || typeof options !== "object")
      throw new Error("Limiter: expected an options object");
    for (const field of Object.keys(options)) {
      if (!OPTIONS.includes(field))
        throw new Error(`${field}: not a Limiter option; it takes ${OPTIONS.join(", ")}`);
    }
    // `{ url, token }` or an @upstash/redis client; checked first, naming the field (redis.url: ...)
    const redis = options.redis;
    transportFor(redis);
    this.prefix = checkPrefix(options.prefix ?? "edgelimit");

    const rules = options.rules;
    if (rules === null || typeof rules !== "object" || Object.keys(rules).length === 0) {
      throw new Error("rules: give at least one rule, e.g. { perMinute: gcra({ limit: 60, period: '1m' }) }");
    }
    this.rules = Object.entries(rules).map(([name, config]) => compileRule(name, config));
    this.ruleArgs = this.rules.flatMap((rule) => rule.args);
    // The algorithm is part of the key: a rule whose algorithm changes starts afresh instead of reading
    // state written in another algorithm's format. A token bucket keeps GCRA's state, and its key says
    // so ("tokenBucket.gcra"): a token bucket's state of an earlier format is never read.
    this.keySuffixes = this.rules.map((rule) =>
      rule.args[0] === rule.algorithm
        ? `:${rule.name}:${rule.algorithm}`
        : `:${rule.name}:${rule.algorithm}.${rule.args[0]}`,
    );
    this.windows = this.rules.map((rule) => (rule.algorithm === "fixedWindow" ? Number(rule.args[2]) : 0));

    this.timeout = delay(options.timeout ?? 1000, "timeout", true);
    const onError = options.onError ?? "allow";
    if (onError !== "allow" && onError !== "deny") {
      throw new Error(`onError: must be "allow" or "deny", got ${describe(onError)}`);
    }
    this.failOpen = onError === "allow";
    const clock = options.clock ?? Date.now;
    if (typeof clock !== "function") throw new Error("clock: must be a function returning epoch ms");
    this.clock = clock;
    const batchWindow = options.batchWindow ?? 0;
    if (batchWindow !== 0) delay(batchWindow, "batchWindow", false);
    this.batchWindow = batchWindow;
    const breaker = options.breaker;
    this.useBreaker = breaker !== false;
    this.transport = transportFor(redis, { breaker: breaker === false ? undefined : breaker });

    const denyCache = options.denyCache ?? { maxEntries: 10_000 };
    if (denyCache !== false) {
      const maxEntries = (denyCache as { maxEntries?: unknown })?.maxEntries;
      if (typeof maxEntries !== "number" || !Number.isInteger(maxEntries) || maxEntries <= 0) {
        throw new Error(`denyCache.maxEntries: must be a positive whole number, got ${describe(maxEntries)}`);
      }
      this.cache = new DenyCache(maxEntries);
    }
    if (options.lease !== undefined && options.lease !== false) {
      const refund = (r: Refund, now: number) => this.refund(r, now);
      const topUp = (identifier: string, want: number, now: number) => this.topUp(identifier, want, now);
      this.leases = new Leases(leaseConfig(options.lease), this.rules, refund, () => this.now(), topUp);
    }
  }

  /**
   * Decides one request of `identifier`. Never rejects for Redis trouble: on a failure or timeout the
   * decision follows `onError`, with `source: "error"`.
   *
   * @example
   * const { allowed, remaining, retryAfter } = await limiter.limit("203.0.113.7", { cost: 1 });
   */
  limit(identifier: string, options?: LimitOptions): Promise<Decision> {
    checkIdentifier(identifier);
    const cost = options?.cost ?? 1;
    if (typeof cost !== "number" || !Number.isInteger(cost) || cost < 0) {
      throw new RangeError(`cost: must be a whole number of units, 0 or more, got ${describe(cost)}`);
    }
    const now = this.now();
    const cached = this.cache?.get(identifier, Math.max(cost, 1), now);
    if (cached) return Promise.resolve(cached);
    const waitUntil = options?.waitUntil;
    if (waitUntil !== undefined && typeof waitUntil !== "function") {
      throw new TypeError(`waitUntil: expected a function such as ctx.waitUntil, got ${describe(waitUntil)}`);
    }
    // A lease answers on the spot: it never waits on a request, this one's or another's.
    const leased = this.leases?.answer(identifier, cost, now, waitUntil);
    if (leased) return Promise.resolve(leased);
    return this.decide(identifier, cost, now, waitUntil);
  }

  /**
   * Gives back the unused units of every lease (one request each, sent now) and stops leasing;
   * resolves once they are done. `Symbol.asyncDispose` does the same (`await using`).
   *
   * @example
   * process.on("SIGTERM", () => limiter.dispose());
   */
  async dispose(): Promise<void> {
    await this.leases?.dispose();
  }

  /**
   * Forgets everything about `identifier`, for every rule (one request), and its cached denial here.
   *
   * @example
   * await limiter.reset("user:42");
   */
  async reset(identifier: string): Promise<void> {
    checkIdentifier(identifier);
    this.cache?.delete(identifier);
    this.leases?.drop(identifier);
    // a fixed window's key outlives its window by a grace, and a caller whose clock runs ahead may
    // already have opened the next one
    const now = this.now();
    const base = this.base(identifier);
    const keys = this.windows.flatMap((window, i) =>
      window > 0
        ? [now - window, now, now + window].map((t) => this.key(base, i, t))
        : [this.key(base, i, now)],
    );
    const reply = await this.transport.call(["DEL", ...keys], { timeout: this.timeout, breaker: false });
    if (!reply.ok) throw reply.error;
  }

  /**
   * The Redis keys of `identifier` at `now` (default: this Limiter's clock), one per rule, in rule
   * order. A fixed window has a key per window: the rule's key, ":", the window's index.
   */
  keys(identifier: string, now: number = this.now()): string[] {
    const base = this.base(identifier);
    return this.keySuffixes.map((_, i) => this.key(base, i, now));
  }

  /** What every key of `identifier` starts with: the prefix and its hash tag. */
  private base(identifier: string): string {
    return `${this.prefix}:${keyTag(identifier)}`;
  }

  /** Rule i's key at `now`, after `base`. */
  private key(base: string, i: number, now: number): string {
    const window = this.windows[i]!;
    const key = base + this.keySuffixes[i]!;
    return window > 0 ? `${key}:${Math.floor(now / window)}` : key;
  }

  private now(): number {
    const now = this.clock();
    if (typeof now !== "number" || !Number.isFinite(now) || now < 0) {
      throw new TypeError(`clock: returned ${describe(now)}, expected epoch milliseconds (0 or more)`);
    }
    return Math.floor(now);
  }

  private async decide(
    identifier: string,
    cost: number,
    now: number,
    waitUntil?: WaitUntil,
  ): Promise<Decision> {
    const keys = this.keys(identifier, now);
    // One rule and no reservation: the script answers one integer (lua/shortcut/); the fixed window's
    // shortcut has arguments of its own.
    const shortcut = this.rules.length === 1 && !this.leases && takesShortcut(this.rules[0]!, cost);
    const command = ["EVALSHA", SCRIPT_SHA1, String(keys.length), ...keys];
    if (shortcut && this.windows[0]! > 0) command.push(...fixedWindowArgs(this.rules[0]!, cost, now));
    else {
      // the script parses now in hex: cheaper in Redis than a 13-digit decimal
      command.push(now.toString(16), String(cost), ...this.ruleArgs);
    }
    // With leases on, the units to reserve beside `cost` go last; the script answers how many it did.
    if (this.leases) command.push(String(this.leases.want(identifier, cost, now)));
    // Sent at most once (NOSCRIPT aside: the script did not run), with its own timeout, through the
    // client's breaker; never rejects.
    const reply = await this.transport.call(command, {
      timeout: this.timeout,
      batchWindow: this.batchWindow,
      breaker: this.useBreaker,
      script: SCRIPT_TEXT,
    });
    if (!reply.ok) return this.failure(reply.error, now);
    let decision: Decision;
    try {
      // a shortcut answers one integer, the general path a table (lua/shortcut/, lua/dispatcher.lua)
      decision =
        shortcut && typeof reply.result === "number"
          ? this.decodeShortcut(reply.result, cost, now)
          : this.decode(reply.result);
    } catch (error) {
      return this.failure(error, now);
    }
    if (!decision.allowed) this.cache?.set(identifier, Math.max(cost, 1), now, decision);
    const reserved = this.leases ? Number((reply.result as unknown[])[this.rules.length * 4]) : 0;
    return this.leases ? this.leases.settle(identifier, decision, reserved, now, waitUntil) : decision;
  }

  /** A lease top-up: one unit and up to `want` more, all for the lease (see Leases). Never rejects. */
  private async topUp(identifier: string, want: number, now: number): Promise<TopUp | undefined> {
    const keys = this.keys(identifier, now);
    const command = ["EVALSHA", SCRIPT_SHA1, String(keys.length), ...keys, now.toString(16), "1"];
    command.push(...this.ruleArgs, String(want));
    const reply = await this.transport.call(command, {
      timeout: this.timeout,
      batchWindow: this.batchWindow,
      breaker: this.useBreaker,
      script: SCRIPT_TEXT,
    });
    if (!reply.ok) return undefined;
    try {
      const decision = this.decode(reply.result);
      return { decision, reserved: Number((reply.result as unknown[])[this.rules.length * 4]) };
    } catch {
      return undefined;
    }
  }

  /** Sends one lease refund (see lua/refund.lua); true when Redis ran it. Never sent twice. */
  private async refund(refund: Refund, now: number): Promise<boolean> {
    // a fixed window's units go back to the window they were counted in
    const base = this.base(refund.identifier);
    const keys = this.rules.map((_, i) => this.key(base, i, refund.windowStarts[i] ?? now));
    const perRule = this.rules.flatMap((rule, i) => [...rule.args, String(refund.windowStarts[i] ?? 0)]);
    const command = ["EVALSHA", SCRIPTS.refund.sha1, String(keys.length), ...keys, String(now)];
    command.push(String(refund.units), ...perRule);
    const reply = await this.transport.call(command, {
      timeout: this.timeout,
      batchWindow: this.batchWindow,
      breaker: this.useBreaker,
      script: SCRIPTS.refund,
    });
    return reply.ok;
  }

  /** A shortcut's one integer (see shortcuts.ts), as the Decision the general answer would give. */
  private decodeShortcut(result: number, cost: number, now: number): Decision {
    const rule = this.rules[0]!;
    if (!Number.isInteger(result)) {
      throw new RedisCallError("redis", `edgelimit: unexpected script result ${describe(result)}`);
    }
    const outcome = decodeShortcut(rule, result, cost, now);
    return {
      ...outcome,
      rule: rule.name,
      source: "redis",
      rules: { [rule.name]: outcome },
    };
  }

  private decode(result: unknown): Decision {
    const expected = this.rules.length * 4 + (this.leases ? 1 : 0);
    if (!Array.isArray(result) || result.length !== expected) {
      throw new RedisCallError("redis", `edgelimit: unexpected script result ${describe(result)}`);
    }
    const rules: Record<string, RuleResult> = {};
    let binding: Rule | undefined;
    let bindingResult: RuleResult | undefined;
    let allowed = true;
    this.rules.forEach((rule, i) => {
      const retry = Number(result[4 * i + 3]);
      const outcome: RuleResult = {
        allowed: result[4 * i] === 1,
        limit: rule.limit,
        remaining: Number(result[4 * i + 1]),
        resetAt: Number(result[4 * i + 2]),
        retryAfter: retry < 0 ? Number.POSITIVE_INFINITY : retry,
      };
      rules[rule.name] = outcome;
      if (!outcome.allowed) allowed = false;
      if (bindingResult === undefined || binds(outcome, bindingResult)) {
        binding = rule;
        bindingResult = outcome;
      }
    });
    const b = bindingResult!;
    return {
      allowed,
      limit: b.limit,
      remaining: b.remaining,
      resetAt: b.resetAt,
      retryAfter: allowed ? 0 : b.retryAfter,
      rule: binding!.name,
      source: "redis",
      rules,
    };
  }

  private failure(error: unknown, now: number): Decision {
    const allowed = this.failOpen;
    const rules: Record<string, RuleResult> = {};
    for (const rule of this.rules) {
      rules[rule.name] = {
        allowed,
        limit: rule.limit,
        remaining: allowed ? rule.limit : 0,
        resetAt: now,
        retryAfter: allowed ? 0 : ERROR_RETRY_MS,
      };
    }
    const first = this.rules[0]!;
    return {
      ...rules[first.name]!,
      rule: first.name,
      source: "error",
      rules,
      error: error instanceof Error ? error : new Error(String(error)),
    };
  }
}

/** Whether `candidate` binds more tightly than `current`: a denial over an admission, then the
 * later retry among denials, then the fewer remaining among admissions. */
function binds(candidate: RuleResult, current: RuleResult): boolean {
  if (candidate.allowed !== current.allowed) return !candidate.allowed;
  if (!candidate.allowed) return candidate.retryAfter > current.retryAfter;
  return candidate.remaining < current.remaining;
}

// `await using limiter = new Limiter(...)` disposes it. Set on the prototype, not declared in the class,
// so that the published types need no `Symbol.asyncDispose` in the consumer's lib.
const asyncDispose = (Symbol as { asyncDispose?: symbol }).asyncDispose ?? Symbol.for("Symbol.asyncDispose");
Object.defineProperty(Limiter.prototype, asyncDispose, {
  value(this: Limiter) {
    return this.dispose();
  },
  writable: true,
  configurable: true,
});

/** Timers clamp a delay above 2^31 - 1 ms to 1 ms: a longer timeout would fire at once. */
const MAX_TIMER_MS = 2 ** 31 - 1;

function delay(value: unknown, field: string, infinite: boolean): number {
  if (infinite && value === Number.POSITIVE_INFINITY) return value;
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0 || value > MAX_TIMER_MS) {
    const range = `a positive number of milliseconds up to ${MAX_TIMER_MS}${infinite ? " (or Infinity)" : ""}`;
    throw new Error(`${field}: must be ${range}, got ${describe(value)}`);
  }
  return value;
}
