import { asError, ints4, mayRetry, runScript } from "./calls.js";
import { describe } from "./duration.js";
import { LOCK } from "./generated/scripts.js";
import { checkPrefix, keyTag } from "./keys.js";
import { type Transport, transportFor } from "./transport.js";
import { renamed, ttlOption } from "./ttl.js";
import {
  checkClock,
  checkOptions,
  checkString,
  durationMs,
  MAX_TIMER_MS,
  positiveMs,
  readClock,
} from "./validate.js";

/**
 * How long a lock's fence outlives its last hold (ms). The fence stays strictly increasing across an
 * expired key as long as no caller's clock runs this far behind another's (see lua/lock.lua).
 */
export const FENCE_MARGIN_MS = 3_600_000;
const DEFAULT_TTL_MS = 30_000;
/** First and longest pause between two tries of an `acquire` that waits. */
const POLL_FIRST_MS = 10;
const POLL_MAX_MS = 500;

/** What `new Lock()` takes. Only `redis` is required. */
export interface LockOptions {
  /**
   * An @upstash/redis client (`new Redis({ url, token })`), or the `{ url, token }` of a REST endpoint,
   * with `breaker` for the circuit breaker of that Redis (see docs/failures.md).
   */
  redis: unknown;
  /** Key namespace (default "edgelimit"): 1-64 characters of A-Z a-z 0-9 _ . : - */
  prefix?: string;
  /** How long a hold lasts unless extended (default "30s"); up to 2^31 - 1 ms. */
  ttl?: number | string;
  /** Ms a call waits for Redis before it counts as failed (default 1000). */
  timeout?: number;
  /** The caller's clock, epoch ms (default `Date.now`). Holds' ends and fences are reckoned by it. */
  clock?: () => number;
}

/** Options of {@link Lock.acquire}. */
export interface AcquireOptions {
  /** Who holds the lock (default: a random id, returned in the result). The same owner re-enters. */
  owner?: string;
  /** How long to keep trying while another owner holds it (default 0: answer at once). */
  wait?: number | string;
  /** How long this hold lasts unless extended (default: the Lock's `ttl`). */
  ttl?: number | string;
}

/** The outcome of {@link Lock.acquire}. */
export interface LockResult {
  /** Whether `owner` holds the lock now. */
  acquired: boolean;
  /** The owner asked for (or generated): pass it to `release` and `extend`. */
  owner: string;
  /**
   * The fencing token of this hold: larger than that of every earlier holder of this name, the same on
   * re-entry. Hand it to the resource the lock protects, which refuses writes carrying a smaller one.
   * 0 when not acquired.
   */
  fence: number;
  /** Reentrancy depth: 1 for a fresh hold, more on re-entry; 0 when not acquired. */
  count: number;
  /**
   * Epoch ms (the Lock's clock) at which the hold lapses unless extended; when refused, when the
   * current holder's lapses (0 when Redis did not answer).
   */
  expiresAt: number;
  /** Set when Redis failed or timed out: the lock is not known to be held. */
  error?: Error;
}

/** The outcome of {@link Lock.release}. */
export interface ReleaseResult {
  /** False when `owner` did not hold the lock (never held, released already, lapsed, or taken over). */
  released: boolean;
  /** The depth still held by `owner` (0: the lock is free). */
  count: number;
  /** Set when Redis failed or timed out: the hold still runs out on its own (its `ttl`). */
  error?: Error;
}

/** The outcome of {@link Lock.extend}. */
export interface ExtendResult {
  /** False when `owner` does not hold the lock (any more). */
  extended: boolean;
  /** Epoch ms at which the hold now lapses; 0 when not extended. */
  expiresAt: number;
  /** Set when Redis failed or timed out: whether the lock is still held is not known. */
  error?: Error;
}

/** Options of {@link Lock.withLock}. */
export interface WithLockOptions {
  /** The owner (default: a random id). Re-entry works when the caller already holds it as this owner. */
  owner?: string;
  /** How long the hold lasts (default: the Lock's `ttl`); renewed at a third of it while `fn` runs. */
  ttl?: number | string;
  /** How long to wait for the lock (default 0). */
  wait?: number | string;
  /** Renew the hold while `fn` runs (default true). Without it, `signal` aborts when its `ttl` runs out. */
  renew?: boolean;
  /**
   * Keeps the work alive past the response on runtimes that stop it otherwise: `ctx.waitUntil` on
   * Cloudflare Workers, `waitUntil` from `@vercel/functions`. It receives the whole run (renewals and
   * the final release).
   */
  waitUntil?: (promise: Promise<unknown>) => void;
}

/** Thrown by {@link Lock.withLock} when the lock could not be acquired. */
export class LockUnavailableError extends Error {
  override readonly name = "LockUnavailableError";
  constructor(
    message: string,
    /** What acquire answered: who-holds-until in `expiresAt`, or the Redis failure in `error`. */
    readonly result: LockResult,
  ) {
    super(message, result.error === undefined ? undefined : { cause: result.error });
  }
}

/** Why `signal` aborted in {@link Lock.withLock}. */
export class LockLostError extends Error {
  override readonly name = "LockLostError";
}

// `lease` is the old name of `ttl`, still read (see ttl.ts)
const OPTIONS = ["redis", "prefix", "ttl", "timeout", "clock", "lease"];

/**
 * A reentrant lock with a time to live, a fencing token and renewal, kept in Redis (one hash per name).
 *
 * @example
 * const lock = new Lock({ redis: new Redis({ url, token }), ttl: "30s" });
 * await lock.withLock("invoice:42", async (signal, fence) => {
 *   await db.write({ invoice: 42, fence }, { signal }); // the store refuses a fence older than its last
 * });
 */
export class Lock {
  readonly prefix: string;
  /** How long a hold lasts unless extended or given its own `ttl`, ms. */
  readonly ttl: number;
  /** The clock holds' ends are reckoned by (epoch ms). */
  readonly clock: () => number;
  private readonly transport: Transport;
  private readonly timeout: number;

  constructor(options: LockOptions) {
    checkOptions(options, "Lock", OPTIONS);
    // transportFor checks what the object is (a client or { url, token }) and throws naming `redis`.
    this.transport = transportFor(options.redis);
    this.prefix = checkPrefix(options.prefix ?? "edgelimit");
    this.ttl = ttlMs(ttlOption(options, "Lock"), DEFAULT_TTL_MS);
    this.timeout = positiveMs(options.timeout ?? 1000, "timeout", { infinite: true });
    this.clock = checkClock(options.clock ?? Date.now);
  }

  /** The Redis key of the lock `name`. */
  key(name: string): string {
    return `${this.prefix}:lock:${keyTag(checkString(name, "name"))}`;
  }

  /**
   * Takes the lock for `owner`, or re-enters it (count + 1) when `owner` holds it already. When another
   * owner holds it, answers `acquired: false` at once, or keeps trying for up to `wait`, pausing between
   * tries with exponential backoff and jitter (never past the end of the holder's hold). Never rejects for Redis
   * trouble: the result carries `error` instead.
   *
   * @example
   * const hold = await lock.acquire("report", { owner: "worker-1", wait: "2s" });
   * if (hold.acquired) try { await build(hold.fence); } finally { await lock.release("report", { owner: "worker-1" }); }
   */
  async acquire(name: string, options: AcquireOptions = {}): Promise<LockResult> {
    const key = this.key(name);
    const owner = options.owner === undefined ? crypto.randomUUID() : checkString(options.owner, "owner");
    const ttl = ttlMs(ttlOption(options, "lock.acquire"), this.ttl);
    const wait = options.wait === undefined || options.wait === 0 ? 0 : durationMs(options.wait, "wait");
    const deadline = Date.now() + wait;
    // Every try of this call carries one id: a retry after a lost answer is not a second re-entry.
    const attemptId = crypto.randomUUID();
    for (let attempt = 0; ; attempt++) {
      const now = this.now();
      let result: LockResult;
      try {
        const [ok, fence, count, expires] = ints4(await this.run(key, "acquire", now, owner, ttl, attemptId));
        result = { acquired: ok === 1, owner, fence, count, expiresAt: expires };
      } catch (error) {
        result = { acquired: false, owner, fence: 0, count: 0, expiresAt: 0, error: asError(error) };
      }
      const left = deadline - Date.now();
      if (result.acquired || left <= 0) return result;
      // Backoff with jitter: contenders spread out instead of polling in step; the end of the holder's
      // hold is the latest worth sleeping to, since the lock is free by then if nobody renews it.
      const backoff = Math.min(POLL_MAX_MS, POLL_FIRST_MS * 2 ** Math.min(attempt, 10));
      let pause = backoff / 2 + Math.random() * (backoff / 2);
      if (result.expiresAt > now) pause = Math.min(pause, result.expiresAt - now + 1);
      await sleep(Math.max(1, Math.min(pause, left)));
    }
  }

  /**
   * Gives up one level of `owner`'s hold; at depth 0 the lock is free. A wrong owner gets
   * `{ released: false }` and the holder keeps the lock.
   *
   * @example
   * await lock.release("report", { owner: "worker-1" }); // { released: true, count: 0 }
   */
  async release(name: string, options: { owner: string }): Promise<ReleaseResult> {
    const key = this.key(name);
    const owner = checkString(options?.owner, "owner");
    // A release whose answer is lost would leave the lock until its ttl runs out: it is tried once more, with one
    // id for both tries, so that a first try that did get through is not counted twice.
    const releaseId = crypto.randomUUID();
    for (let attempt = 1; ; attempt++) {
      try {
        const [ok, , count] = ints4(await this.run(key, "release", this.now(), owner, 0, releaseId));
        return { released: ok === 1, count };
      } catch (error) {
        if (attempt < 2 && mayRetry(error)) continue;
        return { released: false, count: 0, error: asError(error) };
      }
    }
  }

  /**
   * Pushes the end of `owner`'s hold to now + `ttl` (ms or a duration; default the Lock's `ttl`).
   * Never shortens it. `{ extended: false }` when `owner` does not hold the lock.
   *
   * @example
   * const { extended, expiresAt } = await lock.extend("report", { owner: "worker-1", ttl: 500 });
   */
  async extend(name: string, options: { owner: string; ttl?: number | string }): Promise<ExtendResult> {
    const key = this.key(name);
    const owner = checkString(options?.owner, "owner");
    const ttl = ttlMs(ttlOption(options, "lock.extend"), this.ttl);
    try {
      const [ok, , , expires] = ints4(await this.run(key, "extend", this.now(), owner, ttl));
      return { extended: ok === 1, expiresAt: ok === 1 ? expires : 0 };
    } catch (error) {
      return { extended: false, expiresAt: 0, error: asError(error) };
    }
  }

  /**
   * Runs `fn(signal, fence)` holding the lock, renews the hold at a third of its `ttl` while `fn`
   * runs, and releases it afterwards, however `fn` ends. `signal` aborts (with a LockLostError) the
   * moment the hold is known to be lost: Redis says another owner has it, or its ttl ran out before a
   * renewal got through. `fn` should stop writing then; the fence is what keeps a late write out.
   * The hold's end is timed by a timer, which can fire a little before the Lock's clock reaches it:
   * `signal` may abort just before another owner can take the lock, never on purpose after. Early is
   * the safe side (`fn` stops while the lock is still its own); a busy event loop can fire the timer
   * late, and the fence covers that.
   * Rejects with LockUnavailableError when the lock cannot be had within `wait`.
   *
   * @example
   * await lock.withLock("nightly", async (signal, fence) => {
   *   for (const batch of batches) { signal.throwIfAborted(); await store.put(batch, { fence }); }
   * }, { ttl: "10s", waitUntil: (p) => ctx.waitUntil(p) });
   */
  withLock<T>(
    name: string,
    fn: (signal: AbortSignal, fence: number) => T | Promise<T>,
    options: WithLockOptions = {},
  ): Promise<T> {
    // Like every method here, bad input rejects the returned promise (it never throws synchronously).
    try {
      return this.start(name, fn, options);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  private start<T>(
    name: string,
    fn: (signal: AbortSignal, fence: number) => T | Promise<T>,
    options: WithLockOptions,
  ): Promise<T> {
    if (typeof fn !== "function") throw new TypeError(`fn: expected a function, got ${describe(fn)}`);
    const generated = options.owner === undefined;
    const owner = generated ? crypto.randomUUID() : checkString(options.owner, "owner");
    const ttl = ttlMs(ttlOption(options, "lock.withLock"), this.ttl);
    const renew = options.renew ?? true;
    if (typeof renew !== "boolean")
      throw new TypeError(`renew: expected true or false, got ${describe(renew)}`);
    const waitUntil = options.waitUntil;
    if (waitUntil !== undefined && typeof waitUntil !== "function") {
      throw new TypeError(
        `waitUntil: expected a function such as (p) => ctx.waitUntil(p), got ${describe(waitUntil)}`,
      );
    }
    this.key(name);
    const run = this.hold(name, fn, { owner, generated, ttl, renew, wait: options.wait });
    waitUntil?.(run.catch(() => {}));
    return run;
  }

  private async hold<T>(
    name: string,
    fn: (signal: AbortSignal, fence: number) => T | Promise<T>,
    options: {
      owner: string;
      generated: boolean;
      ttl: number;
      renew: boolean;
      wait: number | string | undefined;
    },
  ): Promise<T> {
    const { owner, ttl, renew } = options;
    const got = await this.acquire(name, {
      owner,
      ttl,
      ...(options.wait === undefined ? {} : { wait: options.wait }),
    });
    if (!got.acquired) {
      // The try whose answer was lost may have taken the lock; nobody else knows this owner, so give it
      // back rather than leave it until its ttl runs out. (A caller's own owner may hold it legitimately: not that.)
      if (got.error !== undefined && options.generated) await this.release(name, { owner });
      const why = got.error
        ? `Redis did not answer (${got.error.message})`
        : `held by another owner until ${new Date(got.expiresAt).toISOString()}`;
      throw new LockUnavailableError(`lock ${describe(name)}: ${why}`, got);
    }
    const controller = new AbortController();
    let expiresAt = got.expiresAt;
    let stopped = false;
    let lapseTimer: ReturnType<typeof setTimeout> | undefined;
    let renewTimer: ReturnType<typeof setTimeout> | undefined;
    const lost = (why: string) => {
      if (controller.signal.aborted) return;
      controller.abort(new LockLostError(`lock ${describe(name)}: ${why}`));
    };
    // The hold is gone once its ttl has run out by our clock, whatever a renewal still in flight says.
    const armLapse = () => {
      clearTimeout(lapseTimer);
      lapseTimer = setTimeout(
        () => lost("the hold ran out before it could be renewed"),
        Math.max(0, Math.min(MAX_TIMER_MS, expiresAt - this.clock())),
      );
    };
    const scheduleRenewal = (ms: number) => {
      renewTimer = setTimeout(async () => {
        if (stopped || controller.signal.aborted) return;
        const result = await this.extend(name, { owner, ttl });
        if (stopped || controller.signal.aborted) return;
        if (result.extended) {
          expiresAt = result.expiresAt;
          armLapse();
          scheduleRenewal(ttl / 3);
        } else if (result.error === undefined) {
          lost("another owner holds it now (the hold had run out)");
        } else {
          // Not known to be lost yet: try again soon, while the hold lasts.
          scheduleRenewal(Math.max(1, Math.min(ttl / 3, (expiresAt - this.clock()) / 3)));
        }
      }, ms);
    };
    armLapse();
    if (renew) scheduleRenewal(ttl / 3);
    try {
      return await fn(controller.signal, got.fence);
    } finally {
      stopped = true;
      clearTimeout(lapseTimer);
      clearTimeout(renewTimer);
      await this.release(name, { owner });
    }
  }

  private now(): number {
    return readClock(this.clock);
  }

  private run(key: string, op: string, now: number, owner: string, ttl: number, id = ""): Promise<unknown> {
    const args = [op, String(now), ownerArg(owner), String(ttl), String(FENCE_MARGIN_MS), id];
    return runScript(this.transport, LOCK, [key], args, this.timeout);
  }
}

/** An owner as stored: escaped like an identifier, hashed when long. */
function ownerArg(owner: string): string {
  return keyTag(owner).slice(1, -1);
}

/** `ttl` in ms, or `otherwise` when not given. */
function ttlMs(ttl: number | string | undefined, otherwise: number): number {
  return ttl === undefined ? otherwise : durationMs(ttl, "ttl");
}

// `lock.lease`, the old name of `lock.ttl`: still read, not in the types.
Object.defineProperty(Lock.prototype, "lease", {
  get(this: Lock): number {
    renamed("Lock");
    return this.ttl;
  },
});

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
