// Decision analytics: counted in the isolate, written to Redis in the background, read back as a report.
//
// Every decision increments counters of the minute of its `decidedAt`, here, in memory: nothing is
// added to the decision's own request. A flush writes what every Limiter on one Redis client counted
// as ONE request of its own (a pipeline of HINCRBY, ZINCRBY, ZREMRANGEBYRANK and EXPIRE), at most one
// in flight, at most one per `flushEvery`: handed to the decision's `waitUntil` once `flushEvery` has
// passed since the last flush (by the Limiter's clock), else from an unref'd timer (Node), and by
// `flush()` (every client of that Redis holding counts) and `dispose()`.
//
// A flush is sent once. If it fails, what it carried is dropped: it may have reached Redis, and sending
// it again could count it twice. A flush not sent (the breaker is open and cooling down) keeps its
// counts for the next; once the cooldown is over a flush goes as the breaker's probe; dispose() sends
// them anyway.
//
// Keys, all under one hash tag per name (one Cluster slot), each with the retention as TTL:
//   <prefix>:analytics:{<name>}:<minute>       hash: allowed, denied, near, source:<s>, rule:<r>, error:<kind>
//   <prefix>:analytics:{<name>}:<minute>:top   sorted set: identifier → denied × 2^26 + allowed, trimmed
//                                              to the `top` × 5 highest after every flush
// (<minute>: epoch minutes, decidedAt / 60000 floored.)
import type { Admission, BreakerState } from "./breaker.js";
import { type Duration, describe, readDuration } from "./duration.js";
import { RedisCallError, type RedisErrorKind } from "./errors.js";
import type { WaitUntil } from "./leases.js";
import { endpointOf } from "./rest.js";
import { sha256Hex } from "./sha256.js";
import type { Transport } from "./transport.js";
import type { Decision } from "./types.js";
import { type Issue, issuesText } from "./validate.js";

/** `analytics` option of a Limiter: `true` takes every default. */
export interface AnalyticsOptions {
  /** How often an isolate writes its counts to Redis (default "10s"; from 1 s to 1 h). */
  flushEvery?: Duration;
  /** How many identifiers a report lists, most denied first (default 20; 1 to 100). */
  top?: number;
  /** How long the counts stay in Redis (default "7d"; from 1 h to 90 d): every key's TTL. */
  retention?: Duration;
  /**
   * The namespace of the counts inside the prefix (default "default"): Limiters with the same prefix
   * and name add up; another name counts apart. 1-64 characters of A-Z a-z 0-9 _ . : -
   */
  name?: string;
}

/** A Decision's `source`. */
export type DecisionSource = Decision["source"];

/** What `limiter.analytics.report()` answers: the counts of every isolate that flushed, over [from, to]. */
export interface AnalyticsReport {
  /** Epoch ms the report covers: every minute that overlaps [from, to]. */
  from: number;
  to: number;
  decisions: { allowed: number; denied: number; bySource: Record<DecisionSource, number> };
  /** Denials by the rule that denied (`decision.rule`); every rule of this Limiter is listed. */
  denials: Record<string, number>;
  /** Allowed decisions with `remaining` at most 20 % of `limit`. */
  nearLimit: number;
  /** Decisions Redis did not make (`source: "error"`), by the RedisCallError's `kind`. */
  errors: Record<RedisErrorKind, number>;
  /** One entry per minute, oldest first, zeros included; `at` is the minute's start (epoch ms). */
  minutes: { at: number; allowed: number; denied: number }[];
  /** The identifiers with the most denials, most denied first, at most `top`. */
  top: { identifier: string; denied: number; allowed: number }[];
  /** This isolate's circuit breaker for the Limiter's Redis. */
  breaker: BreakerReport;
}

/** The circuit breaker of a Limiter's Redis, as this isolate sees it. */
export interface BreakerReport {
  /** false when the Limiter was built with `breaker: false` (state is then always "closed"). */
  enabled: boolean;
  state: BreakerState;
  /** Times it opened in this isolate. */
  opened: number;
}

/**
 * The range of a report, epoch ms: every minute from the one `from` is in to the one `to` is in, both
 * included. Default: `to` the Limiter's clock, `from` the start of the minute 59 minutes before `to`'s
 * (60 minutes, the current one last).
 */
export interface ReportRange {
  from?: number;
  to?: number;
}

/** The `analytics` option, validated, with defaults. */
export interface AnalyticsConfig {
  readonly flushEvery: number;
  readonly top: number;
  readonly retention: number;
  readonly name: string;
}

const MINUTE = 60_000;
const HOUR = 3_600_000;
const FIELDS = ["flushEvery", "top", "retention", "name"];
const NAME = /^[A-Za-z0-9_.:-]{1,64}$/;
/** A top identifier's score: denied × DENIED + allowed, exact while allowed < 2^26 a minute. */
const DENIED = 2 ** 26;
/** Identifiers stored per minute, per `top` reported. */
const KEEP_PER_TOP = 5;
/** Identifiers tracked per minute in the isolate (pruned to the most denied when twice this). */
const TRACKED = 1000;
/** Minutes of counts an isolate holds while its flushes are not sent (the breaker is open). */
const MAX_PENDING_MINUTES = 60;
/** Minutes read per request of a report. */
const REPORT_CHUNK = 500;
/** Longer identifiers are stored shortened, with a hash of the whole to keep them apart. */
const MAX_MEMBER = 200;

// Every value of a type, zero: a source or kind added to the type fails to compile here until listed.
const NO_SOURCES: Record<DecisionSource, 0> = { redis: 0, cache: 0, lease: 0, region: 0, error: 0 };
const NO_ERRORS: Record<RedisErrorKind, 0> = {
  timeout: 0,
  unreachable: 0,
  unauthorized: 0,
  http: 0,
  redis: 0,
  "breaker-open": 0,
};

/**
 * Validates the `analytics` option: undefined or false (off), true (defaults), or the options object;
 * else throws an Error naming the field (`analytics.top: ...`), every problem separated by "; ".
 *
 * @example
 * analyticsConfig({ flushEvery: "5s" }) // { flushEvery: 5000, top: 20, retention: 604800000, name: "default" }
 */
export function analyticsConfig(value: unknown): AnalyticsConfig | undefined {
  const checked = checkAnalytics(value);
  if (checked.issues === undefined) return checked.analytics;
  throw new Error(issuesText(["analytics"], checked.issues));
}

/**
 * Validates the `analytics` option and reports every problem: the config with its defaults (undefined:
 * off), or the issues, each with its path inside the option (`["top"]`, or `[]` for a value of the wrong
 * kind). `named: false` refuses `name` too, for a caller that names the counts itself.
 *
 * @example
 * checkAnalytics({ top: 0 }).issues // [{ path: ["top"], message: "must be a whole number from 1 to 100, got 0" }]
 */
export function checkAnalytics(
  value: unknown,
  { named = true }: { named?: boolean } = {},
):
  | { readonly analytics: AnalyticsConfig | undefined; readonly issues?: undefined }
  | { readonly analytics?: undefined; readonly issues: readonly Issue[] } {
  if (value === undefined || value === false) return { analytics: undefined };
  const fields = named ? FIELDS : FIELDS.filter((field) => field !== "name");
  if (value === true) value = {};
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    const message = `expected true, false or { ${fields.join(", ")} }, got ${describe(value)}`;
    return { issues: [{ path: [], message }] };
  }
  const issues: Issue[] = Object.keys(value)
    .filter((field) => !fields.includes(field))
    .map((field) => ({ path: [field], message: `not an analytics option; it takes ${fields.join(", ")}` }));
  const options = value as AnalyticsOptions;
  const flushEvery = boundedDuration(
    options.flushEvery ?? "10s",
    "flushEvery",
    1000,
    HOUR,
    "1s",
    "1h",
    issues,
  );
  const retention = boundedDuration(
    options.retention ?? "7d",
    "retention",
    HOUR,
    90 * 24 * HOUR,
    "1h",
    "90d",
    issues,
  );
  const top = options.top ?? 20;
  if (typeof top !== "number" || !Number.isInteger(top) || top < 1 || top > 100) {
    issues.push({ path: ["top"], message: `must be a whole number from 1 to 100, got ${describe(top)}` });
  }
  const name = (named ? options.name : undefined) ?? "default";
  if (typeof name !== "string" || !NAME.test(name)) {
    issues.push({
      path: ["name"],
      message: `must be 1-64 characters of A-Z a-z 0-9 _ . : - (got ${describe(name)})`,
    });
  }
  return issues.length > 0 ? { issues } : { analytics: { flushEvery, top, retention, name } };
}

/** A duration from `min` to `max` ms; else an issue at `field` and 0. */
function boundedDuration(
  value: unknown,
  field: string,
  min: number,
  max: number,
  minText: string,
  maxText: string,
  issues: Issue[],
): number {
  const read = readDuration(value);
  if ("message" in read) issues.push({ path: [field], message: read.message });
  else if (read.ms < min || read.ms > max) {
    issues.push({ path: [field], message: `must be from ${minText} to ${maxText}, got ${describe(value)}` });
  } else return read.ms;
  return 0;
}

/** A decision's observer: analytics and `onDecision`, called once per decision, on every path. */
export type Observer = (decision: Decision, identifier: string, waitUntil: WaitUntil | undefined) => void;

/**
 * The Limiter's observer for `analytics` and `onDecision`, or undefined when both are off (then a
 * decision costs nothing more). `onDecision` is called synchronously and never awaited; what it throws
 * (or a promise it returns rejects with) is caught and logged once.
 */
export function observerOf(
  counter: Counter | undefined,
  onDecision: ((decision: Decision, identifier: string) => unknown) | undefined,
): Observer | undefined {
  if (onDecision === undefined) return counter && ((d, id, waitUntil) => counter.record(d, id, waitUntil));
  let logged = false;
  const log = (error: unknown) => {
    if (logged) return;
    logged = true;
    console.error("edgelimit: onDecision failed (logged once; later failures are not logged):", error);
  };
  return (decision, identifier, waitUntil) => {
    counter?.record(decision, identifier, waitUntil);
    try {
      const result = onDecision(decision, identifier);
      if (
        result !== null &&
        typeof result === "object" &&
        typeof (result as Promise<unknown>).then === "function"
      ) {
        (result as Promise<unknown>).then(undefined, log);
      }
    } catch (error) {
      log(error);
    }
  };
}

/**
 * Validates the `onDecision` option: a function, or an Error naming it.
 */
export function checkOnDecision(
  value: unknown,
): ((decision: Decision, identifier: string) => unknown) | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "function") {
    throw new Error(`onDecision: must be a function (decision, identifier) => void, got ${describe(value)}`);
  }
  return value as (decision: Decision, identifier: string) => unknown;
}

interface Tally {
  allowed: number;
  denied: number;
}

/** What an isolate counted in one minute. */
class MinuteCounts {
  /** allowed, denied, near, source:<s>, rule:<r>, error:<kind> */
  readonly fields = new Map<string, number>();
  readonly identifiers = new Map<string, Tally>();
}

function bump(map: Map<string, number>, field: string): void {
  map.set(field, (map.get(field) ?? 0) + 1);
}

const score = (t: Tally) => t.denied * DENIED + t.allowed;

/** The `keep` identifiers with the highest score (most denied, then most allowed). */
function mostDenied(identifiers: Map<string, Tally>, keep: number): [string, Tally][] {
  const entries = [...identifiers];
  if (entries.length <= keep) return entries;
  entries.sort((a, b) => score(b[1]) - score(a[1]));
  return entries.slice(0, keep);
}

/** What the analytics keys of a Limiter are called. */
export class AnalyticsKeys {
  private readonly base: string;

  constructor(prefix: string, name: string) {
    this.base = `${prefix}:analytics:{${name}}:`;
  }

  /** The hash of one minute's counters. `minute`: epoch minutes. */
  counts(minute: number): string {
    return `${this.base}${minute}`;
  }

  /** The sorted set of one minute's most denied identifiers. */
  top(minute: number): string {
    return `${this.base}${minute}:top`;
  }
}

/** How an identifier is stored in a top set: as is, or shortened with a hash of the whole when long. */
function member(identifier: string): string {
  if (identifier.length <= MAX_MEMBER) return identifier;
  return `${identifier.slice(0, 128)}…#${sha256Hex(identifier).slice(0, 16)}`;
}

/** What the flushes to one Redis did, for tests and logs. */
export interface FlushStats {
  /** Flush requests sent. */
  flushes: number;
  /** Flushes that failed (their counts dropped: they may have been applied). */
  failed: number;
  /** Flushes not sent because the breaker was open (their counts kept for the next). */
  deferred: number;
}

/** Counts one Limiter's decisions in the isolate; its Redis's Flusher writes them. */
export class Counter {
  readonly keys: AnalyticsKeys;
  private pending = new Map<number, MinuteCounts>();
  private readonly keep: number;
  private readonly ttl: string;
  private disposed = false;

  constructor(
    readonly config: AnalyticsConfig,
    prefix: string,
    readonly flusher: Flusher,
    readonly timeout: number,
  ) {
    this.keys = new AnalyticsKeys(prefix, config.name);
    this.keep = config.top * KEEP_PER_TOP;
    this.ttl = String(Math.ceil(config.retention / 1000));
  }

  /** Counts one decision; the Flusher hands a flush to `waitUntil` when one is due, else arms its timer. */
  record(decision: Decision, identifier: string, waitUntil: WaitUntil | undefined): void {
    const at = decision.decidedAt;
    const minute = Math.floor(at / MINUTE);
    let counts = this.pending.get(minute);
    if (counts === undefined) {
      // the Flusher holds this Counter only while it has something to write: no Limiter is kept alive
      if (this.pending.size === 0) this.flusher.add(this);
      counts = new MinuteCounts();
      this.pending.set(minute, counts);
      if (this.pending.size > MAX_PENDING_MINUTES) this.pending.delete(this.pending.keys().next().value!);
    }
    const fields = counts.fields;
    if (decision.allowed) {
      bump(fields, "allowed");
      if (decision.remaining * 5 <= decision.limit) bump(fields, "near");
    } else {
      bump(fields, "denied");
      bump(fields, `rule:${decision.rule}`);
    }
    bump(fields, `source:${decision.source}`);
    if (decision.source === "error") {
      const error = decision.error;
      bump(fields, `error:${error instanceof RedisCallError ? error.kind : "unknown"}`);
    }
    const identifiers = counts.identifiers;
    let tally = identifiers.get(identifier);
    if (tally === undefined) {
      tally = { allowed: 0, denied: 0 };
      identifiers.set(identifier, tally);
      if (identifiers.size > 2 * TRACKED) {
        const kept = mostDenied(identifiers, TRACKED);
        identifiers.clear();
        for (const [id, t] of kept) identifiers.set(id, t);
        if (!identifiers.has(identifier)) identifiers.set(identifier, tally);
      }
    }
    if (decision.allowed) tally.allowed += 1;
    else tally.denied += 1;
    if (!this.disposed) this.flusher.due(at, waitUntil);
  }

  /**
   * Writes what every Limiter on this Redis counted so far, through whichever client (the same URL and
   * token): one request per client holding counts; resolves when written (or dropped).
   */
  flush(): Promise<void> {
    const flusher = this.flusher;
    const others: Flusher[] = [];
    for (const ref of holding.get(flusher.endpoint) ?? []) {
      const other = ref.deref();
      if (other !== undefined && other !== flusher) others.push(other);
    }
    if (others.length === 0) return flusher.flush();
    return Promise.all([flusher.flush(), ...others.map((other) => other.flush())]).then(() => {});
  }

  /** Writes what is left; later decisions are counted but wait for an explicit flush. */
  dispose(): Promise<void> {
    this.disposed = true;
    return this.flusher.flush(true);
  }

  /** The commands that write what was counted, which is then forgotten here. */
  take(): string[][] {
    const batch = this.pending;
    this.pending = new Map();
    const commands: string[][] = [];
    for (const [minute, counts] of batch) {
      const key = this.keys.counts(minute);
      for (const [field, n] of counts.fields) commands.push(["HINCRBY", key, field, String(n)]);
      commands.push(["EXPIRE", key, this.ttl]);
      const ids = mostDenied(counts.identifiers, this.keep);
      if (ids.length === 0) continue;
      const top = this.keys.top(minute);
      for (const [id, tally] of ids) commands.push(["ZINCRBY", top, String(score(tally)), member(id)]);
      commands.push(["ZREMRANGEBYRANK", top, "0", String(-(this.keep + 1))]);
      commands.push(["EXPIRE", top, this.ttl]);
    }
    return commands;
  }
}

const flushers = new WeakMap<Transport, Flusher>();
/**
 * The Flushers holding counts, by the Redis they write to (URL and token): an explicit flush, or a
 * report, writes them all, so two Limiters on two clients of one Redis need not both flush first.
 * A Flusher is here only while it holds counts, and weakly: this keeps no client alive.
 */
const holding = new Map<string, Set<WeakRef<Flusher>>>();

/**
 * Writes the counts of every Limiter on one Redis in this isolate, in ONE request per flush: at most
 * one in flight, and at most one per `flushEvery` (the shortest of its Limiters').
 */
export class Flusher {
  readonly stats: FlushStats = { flushes: 0, failed: 0, deferred: 0 };
  /** The Counters with something to write. */
  private readonly counters = new Set<Counter>();
  /** The tail of the flushes: each starts when the one before ended (one in flight at most). */
  private tail: Promise<void> = Promise.resolve();
  private sending = false;
  /** decidedAt of the last flush's start (the latest decision seen then); undefined before any. */
  private lastFlush: number | undefined;
  private latest = 0;
  private timer: ReturnType<typeof setTimeout> | undefined;
  /** Whether this runtime's timers can be unref'd (Node): only then does a timer flush. */
  private timers: boolean | undefined;
  private loggedFailure = false;
  /** This Flusher, weakly: its entry in `holding`. */
  private readonly ref = new WeakRef(this);

  private constructor(
    private readonly transport: Transport,
    /** The Redis written to: its URL and token. */
    readonly endpoint: string,
  ) {}

  /** The Flusher of `transport`'s Redis (`redis`: what the transport was built from), shared by every Limiter on it. */
  static of(transport: Transport, redis: unknown): Flusher {
    let flusher = flushers.get(transport);
    if (flusher === undefined) {
      const { url, token } = endpointOf(redis);
      flusher = new Flusher(transport, `${url} ${token}`);
      flushers.set(transport, flusher);
    }
    return flusher;
  }

  add(counter: Counter): void {
    if (this.counters.size === 0) {
      let set = holding.get(this.endpoint);
      if (set === undefined) {
        set = new Set();
        holding.set(this.endpoint, set);
      }
      // the Flushers of clients since dropped: their counts went with them
      if (set.size >= 16) for (const ref of set) if (ref.deref() === undefined) set.delete(ref);
      set.add(this.ref);
    }
    this.counters.add(counter);
  }

  /** A decision at `at` was counted: hands a flush to `waitUntil` when one is due, else arms the timer. */
  due(at: number, waitUntil: WaitUntil | undefined): void {
    if (at > this.latest) this.latest = at;
    // the first count, or a clock that went back: flushEvery counts from here
    if (this.lastFlush === undefined || at < this.lastFlush) this.lastFlush = at;
    if (this.sending) return;
    if (typeof waitUntil !== "function") {
      this.arm();
      return;
    }
    if (at - this.lastFlush < this.every()) return;
    this.lastFlush = at;
    const flushing = this.flush();
    try {
      waitUntil(flushing);
    } catch {
      // a runtime that refuses it: the flush runs anyway, it just may not outlive the response
    }
  }

  /**
   * Writes everything counted so far; resolves when written (or dropped); never rejects. While the
   * breaker is open the counts are kept for a later flush, unless `last` (dispose: there is no later).
   */
  flush(last = false): Promise<void> {
    const run = this.tail.then(() => this.send(last));
    this.tail = run;
    return run;
  }

  private every(): number {
    let every = Number.POSITIVE_INFINITY;
    for (const counter of this.counters) every = Math.min(every, counter.config.flushEvery);
    return every;
  }

  private arm(): void {
    if (this.timer !== undefined || this.timers === false || this.counters.size === 0) return;
    const timer = setTimeout(() => {
      this.timer = undefined;
      void this.flush();
    }, this.every());
    const unref = (timer as { unref?: () => void }).unref;
    if (typeof unref !== "function") {
      // Workers and edge runtimes: a timer belongs to a request; flushes ride on waitUntil instead
      clearTimeout(timer);
      this.timers = false;
      return;
    }
    unref.call(timer);
    this.timers = true;
    this.timer = timer;
  }

  private async send(last: boolean): Promise<void> {
    const counters = [...this.counters];
    if (counters.length === 0) return;
    const breaker = this.transport.breaker;
    // Breaker open: kept for later while it cools down. Once it has, this flush may go as the probe
    // (no decision need come first to close it): its outcome closes or reopens the breaker.
    let probe: Admission | undefined;
    if (!last && breaker !== undefined && breaker.state !== "closed") {
      const admission = breaker.admit();
      if (admission instanceof RedisCallError) {
        this.stats.deferred += 1;
        return;
      }
      probe = admission;
    }
    this.lastFlush = this.latest;
    this.counters.clear();
    const set = holding.get(this.endpoint);
    set?.delete(this.ref);
    if (set?.size === 0) holding.delete(this.endpoint);
    const commands = counters.flatMap((counter) => counter.take());
    const timeout = Math.max(...counters.map((counter) => counter.timeout));
    this.sending = true;
    this.stats.flushes += 1;
    let replies: Awaited<ReturnType<Transport["pipeline"]>>;
    try {
      replies = await this.transport.pipeline(commands, { timeout });
    } finally {
      this.sending = false;
    }
    if (probe !== undefined) {
      // Redis answered (even with an error reply to a command): that closes it, as a decision's would
      if (replies instanceof RedisCallError) breaker!.failure(replies, probe);
      else breaker!.success();
    }
    const failure =
      replies instanceof RedisCallError
        ? replies
        : replies.find((reply) => reply?.error !== undefined)?.error;
    if (failure === undefined) return;
    this.stats.failed += 1;
    if (this.loggedFailure) return;
    this.loggedFailure = true;
    console.warn(
      "edgelimit: an analytics flush failed; its counts are dropped, never sent twice (logged once):",
      failure instanceof Error ? failure.message : failure,
    );
  }
}

/**
 * The Limiter's `limiter.analytics`, over its counter (undefined without `analytics`), its transport,
 * clock, rule names, background timeout, and whether its decisions use the breaker.
 */
export let buildAnalytics: (
  counter: Counter | undefined,
  transport: Transport,
  clock: () => number,
  ruleNames: readonly string[],
  timeout: number,
  breakerOn: boolean,
) => Analytics;

/**
 * `limiter.analytics`: the counts of every isolate that flushed, read from Redis, and this isolate's
 * flush. See docs/analytics.md.
 *
 * @example
 * const r = await limiter.analytics.report({ from: Date.now() - 3_600_000 });
 * console.log(r.decisions.denied, r.top[0]?.identifier);
 */
export class Analytics {
  /** Whether the Limiter counts its decisions (built with `analytics`); without, `report()` rejects. */
  readonly enabled: boolean;

  static {
    buildAnalytics = (...parts) => new Analytics(...parts);
  }

  // private: only the Limiter builds one (buildAnalytics), so no published type names its parts
  /** @param counter undefined when the Limiter was built without `analytics` */
  private constructor(
    private readonly counter: Counter | undefined,
    private readonly transport: Transport,
    private readonly clock: () => number,
    private readonly ruleNames: readonly string[],
    private readonly timeout: number,
    /** Whether the Limiter's decisions use the breaker (`breaker: false` turns it off). */
    private readonly breakerOn: boolean,
  ) {
    this.enabled = counter !== undefined;
  }

  /**
   * This isolate's circuit breaker for the Limiter's Redis, read now, without a request: it answers
   * while Redis is down and with analytics off alike. `state` is what the breaker last decided: "open"
   * stays "open" after its cooldown until a call goes out as the probe ("half-open").
   *
   * @example
   * if (limiter.analytics.breaker().state !== "closed") console.warn("Redis is failing");
   */
  breaker(): BreakerReport {
    // read each time: the breaker belongs to the Redis and is replaced when its options are set
    const breaker = this.breakerOn ? this.transport.breaker : undefined;
    return {
      enabled: breaker !== undefined,
      state: breaker?.state ?? "closed",
      opened: breaker?.opened ?? 0,
    };
  }

  /**
   * Writes this isolate's counts for this Redis now: one request per client of it holding counts (one
   * when every Limiter shares the client, or `{ url, token }`); what `dispose()` also does. Never rejects.
   */
  flush(): Promise<void> {
    return this.counter?.flush() ?? Promise.resolve();
  }

  /**
   * The counts of every minute from the one `from` is in to the one `to` is in, both included
   * (`floor(to / 60000) - floor(from / 60000) + 1` entries in `minutes`, oldest first), this
   * isolate's flushed first. `to` defaults to the Limiter's clock and `from` to the start of the
   * minute 59 minutes before `to`'s: the last hour is the 60 minutes ending with the current one. The
   * totals are the sums of `minutes`. Rejects when the Limiter has no analytics, the range is wrong (a
   * RangeError naming the field), or Redis fails (the RedisCallError).
   */
  async report(range: ReportRange = {}): Promise<AnalyticsReport> {
    const counter = this.counter;
    if (counter === undefined) {
      throw new Error("analytics: this Limiter was built without analytics; pass analytics: true");
    }
    if (range === null || typeof range !== "object") {
      throw new TypeError(`report: expected { from, to } in epoch ms, got ${describe(range)}`);
    }
    const to = range.to ?? this.clock();
    checkTime(to, "to");
    // the last hour: the 60 minutes up to the one `to` is in
    const from = range.from ?? (Math.floor(to / MINUTE) - 59) * MINUTE;
    checkTime(from, "from");
    if (from > to) throw new RangeError(`from: must be at most to (${to}), got ${from}`);
    const first = Math.floor(from / MINUTE);
    const last = Math.floor(to / MINUTE);
    const limit = Math.ceil(counter.config.retention / MINUTE) + 1;
    if (last - first + 1 > limit) {
      throw new RangeError(
        `from: a report spans at most the retention (${limit} minutes); got ${last - first + 1} minutes`,
      );
    }
    await counter.flush();

    const bySource: Record<string, number> = { ...NO_SOURCES };
    const denials: Record<string, number> = Object.fromEntries(this.ruleNames.map((name) => [name, 0]));
    const errors: Record<string, number> = { ...NO_ERRORS };
    const minutes: AnalyticsReport["minutes"] = [];
    const scores = new Map<string, number>();
    let allowed = 0;
    let denied = 0;
    let nearLimit = 0;
    for (let start = first; start <= last; start += REPORT_CHUNK) {
      const end = Math.min(last, start + REPORT_CHUNK - 1);
      const commands: string[][] = [];
      for (let m = start; m <= end; m++) {
        commands.push(["HGETALL", counter.keys.counts(m)]);
        commands.push(["ZRANGE", counter.keys.top(m), "0", "-1", "WITHSCORES"]);
      }
      const replies = await this.transport.pipeline(commands, { timeout: this.timeout });
      if (replies instanceof RedisCallError) throw replies;
      for (let m = start, i = 0; m <= end; m++, i += 2) {
        const hash = replies[i];
        const zset = replies[i + 1];
        for (const reply of [hash, zset]) {
          if (reply?.error !== undefined) {
            throw new RedisCallError("redis", `edgelimit: Redis answered an error: ${String(reply.error)}`);
          }
        }
        const entry = { at: m * MINUTE, allowed: 0, denied: 0 };
        const pairs = (hash?.result ?? []) as unknown[];
        for (let k = 0; k + 1 < pairs.length; k += 2) {
          const field = String(pairs[k]);
          const n = Number(pairs[k + 1]);
          if (field === "allowed") entry.allowed = n;
          else if (field === "denied") entry.denied = n;
          else if (field === "near") nearLimit += n;
          else if (field.startsWith("source:")) add(bySource, field.slice(7), n);
          else if (field.startsWith("rule:")) add(denials, field.slice(5), n);
          else if (field.startsWith("error:")) add(errors, field.slice(6), n);
        }
        allowed += entry.allowed;
        denied += entry.denied;
        minutes.push(entry);
        const members = (zset?.result ?? []) as unknown[];
        for (let k = 0; k + 1 < members.length; k += 2) {
          const id = String(members[k]);
          scores.set(id, (scores.get(id) ?? 0) + Number(members[k + 1]));
        }
      }
    }
    const top = [...scores]
      .map(([identifier, total]) => ({
        identifier,
        denied: Math.floor(total / DENIED),
        allowed: total % DENIED,
      }))
      .filter((t) => t.denied > 0)
      .sort((a, b) => b.denied - a.denied || b.allowed - a.allowed || (a.identifier < b.identifier ? -1 : 1))
      .slice(0, counter.config.top);
    return {
      from,
      to,
      decisions: { allowed, denied, bySource: bySource as Record<DecisionSource, number> },
      denials,
      nearLimit,
      errors: errors as Record<RedisErrorKind, number>,
      minutes,
      top,
      breaker: this.breaker(),
    };
  }
}

function add(record: Record<string, number>, field: string, n: number): void {
  record[field] = (record[field] ?? 0) + n;
}

function checkTime(value: unknown, field: string): void {
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0) {
    throw new RangeError(`${field}: expected epoch milliseconds (0 or more), got ${describe(value)}`);
  }
}
