// The one way this library talks to Redis. One Transport per Redis, per isolate, shared by every
// Limiter, Lock and concurrency limiter built on it: per @upstash/redis client object (a WeakMap keyed
// by the client), or per URL and token for `{ url, token }` (see `transportFor`). The breaker is the
// connection's, not a Limiter's: one per transport. It
//  - batches the commands issued in one tick (or batching window) into one `/pipeline` request;
//  - sends that request at most once, through the REST sender (rest.ts), which never retries;
//  - gives every call its own timeout, and aborts the request once no call waits on it;
//  - runs the circuit breaker: after repeated failures calls are refused at once, without a request;
//  - recovers from NOSCRIPT (script cache flushed, Redis restarted) by loading the script once ahead
//    of the calls that need it and asking again: NOSCRIPT means the script did not run;
//  - never rejects: a call resolves to its result or to a typed failure (RedisCallError, by kind).

import { type Batch, Batcher, type Reply, type Sender, type Waiter } from "./batch.js";
import { type Admission, BREAKER_DEFAULTS, Breaker, type BreakerOptions, breakerOptions } from "./breaker.js";
import { RedisCallError } from "./errors.js";
import { endpointOf, isClient, type RestConnection, restSender } from "./rest.js";

/** Who set a transport's breaker, weakest first. */
const DEFAULT = 0;
const LIMITER = 1;
const CONNECTION = 2;

/** A Lua script the transport can load when Redis answers NOSCRIPT. */
export interface Script {
  text: string;
  sha1: string;
}

/** Options of one call. */
export interface CallOptions {
  /** Ms to wait for the reply (Infinity: no limit). The call then fails with kind "timeout". */
  timeout: number;
  /** Ms to collect calls into one request (default 0: those issued in the same tick). */
  batchWindow?: number;
  /** `false`: this call neither consults nor feeds the breaker (default true). */
  breaker?: boolean;
  /** For an EVALSHA: the script to load if Redis does not have it (NOSCRIPT), then ask once more. */
  script?: Script;
}

/** The outcome of one call: never a rejection. */
export type CallResult = { ok: true; result: unknown } | { ok: false; error: RedisCallError };

/** Counters, for tests and reports. */
export interface TransportStats {
  /** HTTP `/pipeline` requests sent. */
  requests: number;
  /** Calls sent to Redis (NOSCRIPT retries included). */
  sent: number;
  /** Calls refused by the open breaker, without a request. */
  refused: number;
}

/**
 * Sends commands to one Redis: batched, at most once, with a timeout per call and a circuit breaker.
 * `redis` is `{ url, token }` or an @upstash/redis client (read once, here). Get the shared one of a
 * Redis with `transportFor(redis)`.
 *
 * @example
 * const transport = transportFor({ url, token });
 * const r = await transport.call(["EVALSHA", sha1, "1", key, "5"], { timeout: 1000, script: { text, sha1 } });
 * if (r.ok) use(r.result); else console.warn(r.error.kind, r.error.message);
 */
export class Transport {
  readonly stats: TransportStats = { requests: 0, sent: 0, refused: 0 };
  /** The breaker of this Redis; `undefined` when the connection says `breaker: false`. */
  breaker: Breaker | undefined;
  /** Who set the breaker (see `configureBreaker`). */
  private breakerSetBy: number = DEFAULT;
  private readonly batchers = new Map<number, Batcher>();
  private readonly sender: Sender;
  /** The batcher of window 0, the one nearly every call uses. */
  private readonly tick: Batcher;

  constructor(
    redis: unknown,
    private readonly options: { breaker?: BreakerOptions | false; now?: () => number } = {},
  ) {
    const send = restSender(endpointOf(redis));
    this.sender = (commands, signal) => {
      this.stats.requests += 1;
      return send(commands, signal);
    };
    this.tick = this.batcher(0);
    const breaker = options.breaker;
    this.breaker = breaker === false ? undefined : new Breaker(breakerOptions(breaker ?? {}), this.now);
    this.breakerSetBy = breaker === undefined ? DEFAULT : CONNECTION;
  }

  /**
   * Sets the breaker of this Redis, for every user of it. The connection's own setting (`{ url, token,
   * breaker }`) outranks a Limiter's `breaker` option, which outranks the default; between two settings
   * of one rank the first stays. A setting that is not used says so once per process, never throws:
   * two Limiters on one Redis may well have been written apart. Options left undefined accept what is
   * there. Throws, naming the field, only for options that are wrong in themselves.
   */
  configureBreaker(options: BreakerOptions | false | undefined, from: "connection" | "limiter"): void {
    if (options === undefined) return;
    let wanted: Required<BreakerOptions> | undefined;
    try {
      wanted = options === false ? undefined : breakerOptions(options);
    } catch (error) {
      if (from === "limiter") throw error;
      throw new Error(`redis.${(error as Error).message}`);
    }
    const rank = from === "connection" ? CONNECTION : LIMITER;
    const current = this.breaker?.options;
    if (sameOptions(current, wanted)) {
      this.breakerSetBy = Math.max(this.breakerSetBy, rank);
    } else if (rank > this.breakerSetBy) {
      this.breaker = wanted && new Breaker(wanted, this.now);
      this.breakerSetBy = rank;
    } else {
      notUsed(current, wanted, from);
    }
  }

  /** Sends one command and resolves with its result or a typed failure; never rejects. */
  call(command: unknown[], options: CallOptions): Promise<CallResult> {
    return this.send(command, options, undefined);
  }

  /**
   * Like `call`, but resolves with `then(result)`: the caller's whole answer in the one promise of the
   * call, with no promise of its own around it. Rejects only if `then` throws.
   *
   * @example
   * const allowed = await transport.callThen(command, options, (r) => r.ok && r.result === 1);
   */
  callThen<T>(command: unknown[], options: CallOptions, then: (result: CallResult) => T): Promise<T> {
    return this.send(command, options, then);
  }

  private send<T>(
    command: unknown[],
    options: CallOptions,
    then: ((result: CallResult) => T) | undefined,
  ): Promise<T> {
    const breaker = options.breaker === false ? undefined : this.breaker;
    const admission = breaker ? breaker.admit() : NO_BREAKER;
    if (admission instanceof RedisCallError) {
      this.stats.refused += 1;
      const refused: CallResult = { ok: false, error: admission };
      return then === undefined
        ? Promise.resolve(refused as T)
        : new Promise<T>((resolve) => resolve(then(refused)));
    }
    const window = options.batchWindow ?? 0;
    const batcher = window === 0 ? this.tick : this.batcher(window);
    return new Promise<T>((resolve, reject) => {
      const finish = resolve as (value: unknown) => void;
      const call = new Call(command, options, batcher, breaker, admission, this.stats, finish, reject, then);
      batcher.send(call);
      this.stats.sent += 1;
      // A timer per call, set in the caller's own task: on Workers a timer belongs to the request that
      // set it, and keeps that request alive while it waits on a fetch another request sent.
      if (options.timeout !== Number.POSITIVE_INFINITY) {
        call.deadline = performance.now() + options.timeout;
        call.timer = setTimeout(timeOut, options.timeout, call);
      }
    });
  }

  /**
   * Sends `commands` as one request of their own, never batched with calls (so never riding in, or
   * delaying, a decision's request), at most once, within `timeout` ms. Neither consults nor feeds the
   * breaker: the caller reads `breaker.state` itself. Resolves with one reply per command, or the
   * failure; never rejects.
   *
   * @example
   * const replies = await transport.pipeline([["HINCRBY", key, "allowed", "3"], ["EXPIRE", key, "60"]], { timeout: 5000 });
   */
  pipeline(commands: unknown[][], options: { timeout: number }): Promise<Reply[] | RedisCallError> {
    const controller = new AbortController();
    const timer =
      options.timeout === Number.POSITIVE_INFINITY
        ? undefined
        : setTimeout(() => controller.abort(), options.timeout);
    let sent: Promise<Reply[]>;
    try {
      sent = this.sender(commands, controller.signal);
    } catch (error) {
      sent = Promise.reject(error);
    }
    return sent.then(
      (replies) => {
        if (timer !== undefined) clearTimeout(timer);
        return replies;
      },
      (error: unknown) => {
        if (timer !== undefined) clearTimeout(timer);
        return controller.signal.aborted
          ? new RedisCallError("timeout", `edgelimit: Redis did not answer within ${options.timeout} ms`)
          : asCallError(error);
      },
    );
  }

  /**
   * EVALSHA of `script` with its keys and arguments, loading the script once if Redis lacks it.
   *
   * @example
   * const r = await transport.eval(LOCK, [key], [token, "5000"], { timeout: 1000 });
   */
  eval(script: Script, keys: string[], args: (string | number)[], options: CallOptions): Promise<CallResult> {
    const command = ["EVALSHA", script.sha1, String(keys.length), ...keys, ...args.map(String)];
    return this.call(command, { ...options, script });
  }

  private readonly now = (): number => (this.options.now ?? monotonic)();

  private batcher(window: number): Batcher {
    let batcher = this.batchers.get(window);
    if (!batcher) {
      batcher = new Batcher(this.sender, window);
      this.batchers.set(window, batcher);
    }
    return batcher;
  }
}

const NO_BREAKER: Admission = Object.freeze({ probe: false });
/**
 * A timeout timer firing more than LATE_MS after it was due gives the reply once more up to GRACE_MS
 * (at most the timeout): the request may not even have left while the event loop was held up.
 */
const LATE_MS = 20;
const GRACE_MS = 100;

/** One call on its way: what the batcher answers, the timeout ends, and the breaker learns. */
class Call implements Waiter {
  waiting = false;
  batch: Batch | undefined = undefined;
  done = false;
  /** NOSCRIPT answers so far (see `receive`). */
  private attempt = 0;
  timer: ReturnType<typeof setTimeout> | undefined = undefined;
  /** When the timeout was due (performance.now()), and whether a late timer has given the reply more time. */
  deadline = 0;
  private graced = false;

  constructor(
    public command: unknown[],
    private readonly options: CallOptions,
    private readonly batcher: Batcher,
    private readonly breaker: Breaker | undefined,
    private readonly admission: Admission,
    private readonly stats: TransportStats,
    /** Resolves with what `then` makes of the result, or the result itself. */
    private readonly resolve: (value: unknown) => void,
    private readonly reject: (error: unknown) => void,
    /** The caller's mapping (see Transport.callThen). */
    private readonly then: ((result: CallResult) => unknown) | undefined,
  ) {}

  receive(reply: Reply): void {
    if (this.done) return;
    if (reply === null || typeof reply !== "object") {
      this.fail(new RedisCallError("http", "edgelimit: the pipeline reply is missing a command's answer"));
    } else if (reply.error === undefined) {
      this.finish({ ok: true, result: reply.result });
    } else if (this.attempt < 2 && this.options.script && String(reply.error).startsWith("NOSCRIPT")) {
      // The script did not run. Load it once, ahead of every call that met NOSCRIPT in this batch, and
      // ask again within the same timeout. Should the cache be flushed again between that SCRIPT LOAD
      // and the EVALSHA (SCRIPT FLUSH from elsewhere), the last try is an EVAL with the text, which
      // needs no cache.
      const script = this.options.script;
      if (this.attempt === 0) this.batcher.sendAhead(["SCRIPT", "LOAD", script.text]);
      else if (this.command[0] === "EVALSHA") this.command = ["EVAL", script.text, ...this.command.slice(2)];
      this.attempt += 1;
      this.batcher.send(this);
      this.stats.sent += 1;
    } else {
      this.fail(new RedisCallError("redis", `edgelimit: Redis answered an error: ${String(reply.error)}`));
    }
  }

  fail(error: unknown): void {
    this.finish({ ok: false, error: asCallError(error) });
  }

  /** The timeout ran out: stop waiting (aborting the request if nobody else waits on it). */
  timeOut(): void {
    // A timer this late was held up by a busy event loop (say a caller awaiting, in a loop, answers that
    // need no I/O): the reply may have arrived and be waiting unread. Let I/O run a few turns first.
    if (!this.graced && performance.now() - this.deadline > LATE_MS) {
      this.graced = true;
      this.timer = setTimeout(timeOut, Math.min(this.options.timeout, GRACE_MS), this);
      return;
    }
    Batcher.abandon(this);
    this.fail(
      new RedisCallError("timeout", `edgelimit: Redis did not answer within ${this.options.timeout} ms`),
    );
  }

  private finish(result: CallResult): void {
    if (this.done) return;
    this.done = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    const breaker = this.breaker;
    if (breaker) {
      if (result.ok) breaker.success();
      else breaker.failure(result.error, this.admission);
    }
    const then = this.then;
    if (then === undefined) {
      this.resolve(result);
      return;
    }
    try {
      this.resolve(then(result));
    } catch (error) {
      this.reject(error);
    }
  }
}

/** A call's timer ran out (a function of its own, not a closure per call: the call is its argument). */
function timeOut(call: Call): void {
  call.timeOut();
}

const clients = new WeakMap<object, Transport>();
const connections = new Map<string, Transport>();
/**
 * `{ url, token }` transports kept at most (least recently used out first): a process that builds
 * Limiters for ever new databases or tokens does not keep them all. One evicted while still in use
 * goes on working; a Limiter built later on that Redis gets a transport (and a breaker) of its own.
 */
export const MAX_CONNECTIONS = 256;

/**
 * The transport shared by everything built on this Redis: one per @upstash/redis client object, and
 * one per URL and token for `{ url, token }` (so one per isolate on Workers). Throws an Error naming
 * the field when `redis` cannot be used (`redis.url: ...`); a client whose URL and token cannot be read
 * is refused, never used through its own retrying requests. The breaker is the one `{ url, token,
 * breaker }` gives, else the one `options.breaker` (a Limiter's) gives, else the first set on this
 * Redis before (see `configureBreaker`).
 *
 * `{ url, token }` literals share by value, not by object: a Worker that writes the object afresh for
 * each Limiter, Lock or request still has one breaker and one pipeline per Redis. The token is part of
 * the key because it is what the requests carry (another token may be another user of the database).
 *
 * @example
 * const transport = transportFor({ url, token, breaker: { failures: 5, cooldown: 1000 } });
 */
export function transportFor(redis: unknown, options: { breaker?: BreakerOptions } = {}): Transport {
  let transport: Transport | undefined;
  if (isClient(redis)) {
    transport = clients.get(redis as object);
    if (!transport) {
      transport = new Transport(redis);
      clients.set(redis as object, transport);
    }
  } else {
    const endpoint = endpointOf(redis);
    const key = `${endpoint.url} ${endpoint.token}`;
    transport = connections.get(key);
    if (transport) connections.delete(key);
    else transport = new Transport(redis);
    connections.set(key, transport);
    if (connections.size > MAX_CONNECTIONS) connections.delete(connections.keys().next().value!);
  }
  if (!isClient(redis)) transport.configureBreaker((redis as RestConnection).breaker, "connection");
  transport.configureBreaker(options.breaker, "limiter");
  return transport;
}

function sameOptions(
  a: Required<BreakerOptions> | undefined,
  b: Required<BreakerOptions> | undefined,
): boolean {
  if (a === undefined || b === undefined) return a === b;
  return a.failures === b.failures && a.cooldown === b.cooldown && a.maxCooldown === b.maxCooldown;
}

let warned = false;

/** Says once per process that a breaker setting is not used, and where the breaker is set. */
function notUsed(
  current: Required<BreakerOptions> | undefined,
  wanted: Required<BreakerOptions> | undefined,
  from: "connection" | "limiter",
): void {
  if (warned) return;
  warned = true;
  const given = from === "limiter" ? "a Limiter's breaker option" : "another { url, token, breaker }";
  console.warn(
    `edgelimit: breaker: this Redis already has its breaker ${JSON.stringify(current ?? false)}; ${given} (${JSON.stringify(wanted ?? false)}) is not used. The breaker belongs to the connection, one per Redis per isolate: set it once, as redis: { url, token, breaker } (see docs/failures.md)`,
  );
}

function monotonic(): number {
  return typeof performance !== "undefined" ? performance.now() : Date.now();
}

export { BREAKER_DEFAULTS };

function asCallError(error: unknown): RedisCallError {
  if (error instanceof RedisCallError) return error;
  const message = error instanceof Error ? error.message : String(error);
  return new RedisCallError("unreachable", `edgelimit: ${message}`, { cause: error });
}
