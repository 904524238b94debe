// Leases: units an isolate holds for a hot identifier, already consumed in Redis, so that later
// decisions for it are answered here with no request until the units run out or expire.
//
// - Reserving: a decision that goes to Redis asks for up to k more units in the same EVALSHA. The
//   script consumes them like any other units, under every rule at once or not at all, and never more
//   than half of what remains, so the last units of a quota are always decided in Redis.
// - Sizing: k is about rate × ttl for this identifier in this isolate (units seen over the last ttl),
//   at most `max`, and 0 for an identifier seen once.
// - Answering: a decision whose cost the lease covers takes it from the lease: allowed, with the
//   headers Redis last gave minus what this isolate has used since. It never awaits anything.
// - Refunds: units left when a lease expires (or is dropped on a denial, or the Limiter is disposed)
//   go back to Redis through the refund script, off the request path: through `waitUntil` when the
//   caller gives one (Workers, Vercel), else from a timer (Node).
// Top-ups and refunds go to Redis through the Limiter's scripts (src/engine/scripts/), from here.
import type { Rule } from "./algorithms/index.js";
import { describe, readDuration } from "./duration.js";
import type { Applied, Reservation } from "./scripts/limiter.js";
import { type Decision, decidedBy, type RuleResult } from "./types.js";
import { type Issue, issueText, MAX_TIMER_MS } from "./validate.js";

/** What `lease` takes: at most `max` units held per identifier, each for at most `ttl`. */
export interface LeaseOptions {
  /** Most units this Limiter may hold for one identifier (1 to 100,000). */
  max: number;
  /** How long units may be held before the unused ones are given back: ms or "500ms", "1s", ... */
  ttl: number | string;
}

/** A validated `lease` option. */
export interface LeaseConfig {
  readonly max: number;
  readonly ttl: number;
}

/** Hands a promise to the runtime so that it may finish after the response (`ctx.waitUntil`). */
export type WaitUntil = (promise: Promise<unknown>) => void;

/** What a Leases sends to Redis: the top-ups and refunds of one plan's rules (RuleScripts, bound to it). */
export interface LeaseScripts {
  /** A top-up: `cost` units and up to `want` more (with a region, from its pool first). */
  reserve(
    identifier: string,
    cost: number,
    now: number,
    want: number,
    waitUntil?: WaitUntil,
  ): Promise<Reservation | Error>;
  /** Gives `units` back under the rules they were reserved under (`applied`: a plan's or an override's). */
  refund(
    identifier: string,
    units: number,
    windowStarts: readonly number[],
    now: number,
    applied: Applied,
  ): Promise<boolean>;
}

/** Unused units of one identifier to give back. */
export interface Refund {
  readonly identifier: string;
  readonly units: number;
  /**
   * Per rule, the start of the window the units were counted in (fixed and sliding windows); for gcra
   * and the token bucket the TAT they held once taken (a refund gives back no units since earned back).
   */
  readonly windowStarts: readonly number[];
  /** The rules the units were reserved under: given back under them, never under another plan's. */
  readonly applied: Applied;
}

/**
 * The lease a decision answered here came from, for a settle (settleAnswer): a module-private symbol,
 * not enumerable (a copy of the decision carries none; cheaper than a WeakMap entry).
 */
const ANSWERED_FROM: unique symbol = Symbol("edgelimit.lease");
const answeredFrom: PropertyDescriptor = { value: undefined, enumerable: false };

const MAX_UNITS = 100_000;
/** Identifiers whose rate is tracked, least recently seen out first (their lease is refunded). */
const MAX_TRACKED = 10_000;

/**
 * Validates the `lease` option, or throws naming the field (every problem, separated by "; ").
 *
 * @example
 * leaseConfig({ max: 50, ttl: "1s" }) // { max: 50, ttl: 1000 }
 */
export function leaseConfig(value: unknown, field = "lease"): LeaseConfig {
  const checked = checkLease(value);
  if (checked.issues === undefined) return checked.lease;
  throw new Error(
    checked.issues.map((issue) => issueText({ ...issue, path: [field, ...issue.path] })).join("; "),
  );
}

/**
 * Validates the `lease` option and reports every problem: the config, or the issues, each with its path
 * inside the option (`["max"]`, `["ttl"]`, or `[]` for a value that is not an object).
 *
 * @example
 * checkLease({ max: 0, ttl: "1s" }).issues
 * // [{ path: ["max"], message: "must be a whole number of units from 1 to 100000, got 0" }]
 */
export function checkLease(
  value: unknown,
):
  | { readonly lease: LeaseConfig; readonly issues?: undefined }
  | { readonly lease?: undefined; readonly issues: readonly Issue[] } {
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    return {
      issues: [
        { path: [], message: `expected { max, ttl }, e.g. { max: 50, ttl: "1s" }, got ${describe(value)}` },
      ],
    };
  }
  const issues: Issue[] = [];
  for (const key of Object.keys(value)) {
    if (key !== "max" && key !== "ttl")
      issues.push({ path: [key], message: "not a lease option; it takes max, ttl" });
  }
  const { max, ttl } = value as { max?: unknown; ttl?: unknown };
  if (typeof max !== "number" || !Number.isInteger(max) || max < 1 || max > MAX_UNITS) {
    issues.push({
      path: ["max"],
      message: `must be a whole number of units from 1 to ${MAX_UNITS}, got ${describe(max)}`,
    });
  }
  const read = readDuration(ttl);
  if ("message" in read) issues.push({ path: ["ttl"], message: read.message });
  else if (read.ms > MAX_TIMER_MS) {
    issues.push({ path: ["ttl"], message: `must be at most ${MAX_TIMER_MS} ms, got ${describe(ttl)}` });
  }
  if (issues.length > 0 || !("ms" in read)) return { issues };
  return { lease: { max: max as number, ttl: read.ms } };
}

interface Held {
  /** Units still held. */
  units: number;
  expiresAt: number;
  /** Every rule's outcome as Redis last gave it, the held units counted as remaining. */
  snapshot: Record<string, RuleResult>;
  /** Units handed out since the snapshot. */
  used: number;
  windowStarts: readonly number[];
  /**
   * The plan name and rules the units were reserved under: the Leases' plan's, or those of an override
   * stored for the identifier (a custom one's own rules). Its answers say and state them.
   */
  plan: string;
  rules: readonly Rule[];
}

interface Seen {
  /** Start of the current rate bucket (ttl ms long), and the units seen in it and the one before. */
  start: number;
  current: number;
  previous: number;
  /** Units seen over the last ttl before the decision in progress: the size of the next lease. */
  estimate: number;
  /** When a reservation for it went out and has not come back (concurrent decisions ask for none). */
  asking: number | undefined;
  lease: Held | undefined;
}

/**
 * The leases of one Limiter under one plan (a Limiter with plans has a Leases per plan, so a lease is
 * per identifier and plan: its units, windows and snapshot are those of the plan it was reserved under).
 *
 * @example
 * const leases = new Leases({ max: 50, ttl: 1000 }, limiter.rules, scripts, clock);
 * const answer = leases.answer("user:42", 1, now, waitUntil); // a Decision from the lease, or undefined
 */
export class Leases {
  private readonly seen = new Map<string, Seen>();
  private readonly held = new Map<string, Held>();
  private readonly pending = new Set<Promise<void>>();
  /** Whether this Limiter may reserve at all (not with a sliding log rule: see the constructor). */
  private readonly leasable: boolean;
  private nextExpiry = Number.POSITIVE_INFINITY;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private disposed = false;
  /**
   * Counters for tests and reports: units reserved (top-ups included), answers given here, units given
   * back, and refunds that failed (their units stay consumed until the state expires).
   */
  readonly stats = { reserved: 0, answered: 0, refunded: 0, refundsFailed: 0 };

  constructor(
    readonly config: LeaseConfig,
    private readonly rules: readonly Rule[],
    /** What sends top-ups and refunds (never rejects). */
    private readonly scripts: LeaseScripts,
    private readonly clock: () => number,
    /**
     * With overrides on, ms a lease is held at most (`overrides.maxStale`): an override set elsewhere
     * reaches this isolate's leased answers within it. 0: no leases.
     */
    private readonly maxStale = Number.POSITIVE_INFINITY,
  ) {
    // A sliding log stamps every unit with the time it was admitted. A unit handed out later from a
    // lease would carry an earlier stamp and leave the log early, letting a later window hold more than
    // the limit; so a Limiter with a sliding log rule never reserves.
    this.leasable = !rules.some((rule) => rule.algorithm === "slidingLog");
  }

  /** Leases held now (for tests and reports). */
  get size(): number {
    return this.held.size;
  }

  /**
   * The decision for `cost` units from the identifier's lease, or undefined when Redis must decide.
   * Records the rate, and refunds expired leases (through `waitUntil` when given).
   */
  answer(identifier: string, cost: number, now: number, waitUntil?: WaitUntil): Decision | undefined {
    if (now >= this.nextExpiry) this.sweep(now, waitUntil);
    let seen = this.seen.get(identifier);
    if (seen === undefined) {
      seen = { start: now, current: 0, previous: 0, estimate: 0, asking: undefined, lease: undefined };
      this.seen.set(identifier, seen);
      if (this.seen.size > MAX_TRACKED) this.forget(this.seen.keys().next().value as string, now, waitUntil);
    } else {
      this.seen.delete(identifier);
      this.seen.set(identifier, seen);
    }
    seen.estimate = this.roll(seen, now);
    seen.current += cost;
    const lease = seen.lease;
    if (lease === undefined || lease.units < Math.max(cost, 1)) return undefined;
    lease.units -= cost;
    lease.used += cost;
    this.stats.answered += 1;
    const decision = fromLease(lease, now);
    answeredFrom.value = lease;
    Object.defineProperty(decision, ANSWERED_FROM, answeredFrom);
    if (lease.units === 0) this.detach(identifier, seen);
    else this.refill(identifier, seen, lease, now, waitUntil);
    return decision;
  }

  /**
   * Tops a hot lease up before it runs dry, in the background (through `waitUntil` when given): when
   * it holds no more than about an eighth of a ttl's traffic (at most a quarter of `max`), one decision
   * of cost 1 goes to Redis reserving about a ttl's traffic (at most `max` held) for the lease, which
   * then lives a ttl from then. Without it, every decision arriving
   * while the next reservation is on its way would go to Redis on its own. No answer waits on it.
   * One reservation or top-up per identifier is on its way at a time.
   */
  private refill(
    identifier: string,
    seen: Seen,
    lease: Held,
    now: number,
    waitUntil: WaitUntil | undefined,
  ): void {
    if (this.disposed) return;
    const low = Math.min(Math.floor(this.config.max / 4), Math.ceil(seen.estimate / 8));
    // about a ttl's traffic, like a fresh lease: a slow identifier is topped up a little
    const want = Math.min(this.config.max, Math.floor(seen.estimate)) - lease.units - 1;
    if (lease.units > low || want < 1) return;
    // The top-up's own unit is taken without the script's half rule: only while Redis, as last seen,
    // has plenty left, so that the last units of a quota are still decided in Redis.
    const redisLeft =
      Math.min(...Object.values(lease.snapshot).map((rule) => rule.remaining)) - lease.used - lease.units;
    if (redisLeft < 2 * this.config.max) return;
    if (seen.asking !== undefined && now - seen.asking < this.config.ttl) return;
    seen.asking = now;
    // a decision of cost 1 reserving `want` more, all for the lease
    const sent = this.scripts.reserve(identifier, 1, now, want, waitUntil).then((answer) => {
      seen.asking = undefined;
      if (!(answer instanceof Error)) this.settleTopUp(identifier, answer, now, waitUntil);
    });
    this.pending.add(sent);
    sent.finally(() => this.pending.delete(sent));
    waitUntil?.(sent);
  }

  /** A top-up's answer: its unit and the reserved ones join the lease (or start a new one). */
  private settleTopUp(
    identifier: string,
    { decision, reserved, windowStarts }: Reservation,
    now: number,
    waitUntil?: WaitUntil,
  ): void {
    const seen = this.seen.get(identifier);
    const units = decision.allowed ? 1 + reserved : 0;
    if (units > 0) this.stats.reserved += units;
    if (!decision.allowed) {
      if (seen?.lease) this.refund([this.detach(identifier, seen)], now, waitUntil);
      return;
    }
    const lease = seen?.lease;
    if (seen === undefined || this.disposed) {
      this.refund([{ identifier, units, windowStarts, applied: this.appliedOf(decision) }], now, waitUntil);
      return;
    }
    if (lease === undefined) {
      this.start(identifier, seen, units, withHeld(decision, units), windowStarts, now, waitUntil);
      return;
    }
    const keep = joins(lease, decision, windowStarts) ? Math.min(units, this.config.max - lease.units) : 0;
    if (keep > 0) join(lease, windowStarts);
    lease.units += keep;
    lease.snapshot = withHeld(decision, lease.units).rules;
    lease.used = 0;
    // a lease topped up lives a ttl from then (what is left of the old units is at most a quarter of max)
    if (keep > 0) lease.expiresAt = this.expiry(now, windowStarts, lease.rules);
    if (units > keep) {
      const applied = this.appliedOf(decision);
      this.refund([{ identifier, units: units - keep, windowStarts, applied }], now, waitUntil);
    }
  }

  /**
   * Settles a decision answered here by `difference` units (actual - cost, not 0) against its lease
   * where it can: units given back rejoin the lease while it lives (it holds units counted in the
   * same windows); extra units come out of it when it holds that many. Returns true when the lease
   * took it, else the windows its units were counted in, for one settle call to Redis; undefined for
   * a decision this did not answer.
   */
  settleAnswer(
    identifier: string,
    decision: Decision,
    difference: number,
    now: number,
  ): true | readonly number[] | undefined {
    const lease = (decision as { [ANSWERED_FROM]?: Held })[ANSWERED_FROM];
    if (lease === undefined) return undefined;
    const live = !this.disposed && this.held.get(identifier) === lease && now < lease.expiresAt;
    if (live && (difference < 0 || lease.units >= difference)) {
      lease.units -= difference;
      lease.used += difference;
      if (lease.units === 0) this.detach(identifier, this.seen.get(identifier)!);
      return true;
    }
    return lease.windowStarts;
  }

  /** Units to reserve beside the `cost` of a decision going to Redis now. */
  want(identifier: string, cost: number, now: number): number {
    if (!this.leasable || this.disposed || cost === 0 || this.maxStale <= 0) return 0;
    const seen = this.seen.get(identifier);
    // A lease still holding units (fewer than this cost) is used first: no second one beside it.
    if (seen === undefined || seen.lease !== undefined) return 0;
    // One reservation at a time: concurrent decisions would each reserve as much, and give it back.
    if (seen.asking !== undefined && now - seen.asking < this.config.ttl) return 0;
    const units = Math.min(this.config.max, Math.floor(seen.estimate));
    if (units > 0) seen.asking = now;
    return units;
  }

  /**
   * Takes Redis's answer to a decision of this Limiter (one that asked to reserve what `want` said)
   * and returns the decision to give the caller.
   * A denial drops the identifier's lease (its units are refunded); an admission with `reserved`
   * units starts one. Redis's `remaining` leaves out every unit taken, reserved ones included; the
   * caller is told what this identifier can still have: that, plus what this isolate holds for it.
   */
  settle(
    identifier: string,
    { decision, reserved, windowStarts }: Reservation,
    now: number,
    waitUntil?: WaitUntil,
  ): Decision {
    const seen = this.seen.get(identifier);
    if (seen !== undefined) seen.asking = undefined;
    if (!decision.allowed) {
      if (seen?.lease) this.refund([this.detach(identifier, seen)], now, waitUntil);
      return decision;
    }
    if (reserved > 0) this.stats.reserved += reserved;
    const lease = seen?.lease;
    // Units held before this answer, and reserved by it, are this identifier's to use (or on their way back).
    const answer = withHeld(decision, (lease?.units ?? 0) + reserved);
    if (seen === undefined || this.disposed) {
      // Forgotten while the request was out (evicted), or disposed since: the reserved units go straight back.
      if (reserved > 0) {
        const applied = this.appliedOf(decision);
        this.refund([{ identifier, units: reserved, windowStarts, applied }], now, waitUntil);
      }
      return answer;
    }
    if (lease !== undefined) {
      // A decision whose cost the lease could not cover, or a second reservation that crossed the
      // first. Units that would take the lease past `max`, or that were counted in another window, go back.
      const keep = joins(lease, decision, windowStarts)
        ? Math.min(reserved, this.config.max - lease.units)
        : 0;
      lease.snapshot = answer.rules;
      lease.used = 0;
      if (keep > 0) join(lease, windowStarts);
      lease.units += keep;
      if (reserved > keep)
        this.refund(
          [{ identifier, units: reserved - keep, windowStarts, applied: this.appliedOf(decision) }],
          now,
          waitUntil,
        );
      return answer;
    }
    if (reserved > 0) this.start(identifier, seen, reserved, answer, windowStarts, now, waitUntil);
    return answer;
  }

  private start(
    identifier: string,
    seen: Seen,
    units: number,
    answer: Decision,
    windowStarts: readonly number[],
    now: number,
    waitUntil: WaitUntil | undefined,
  ): void {
    const rules = answer.decidedBy ?? this.rules;
    const held: Held = {
      units,
      expiresAt: this.expiry(now, windowStarts, rules),
      snapshot: answer.rules,
      used: 0,
      windowStarts,
      plan: answer.plan,
      rules,
    };
    seen.lease = held;
    this.held.set(identifier, held);
    if (held.expiresAt < this.nextExpiry) this.nextExpiry = held.expiresAt;
    if (waitUntil === undefined) this.arm();
  }

  /** Forgets the identifier's lease without a refund (its state in Redis was deleted). */
  drop(identifier: string): void {
    const seen = this.seen.get(identifier);
    if (seen?.lease) this.detach(identifier, seen);
  }

  /**
   * Ends the identifier's lease and gives its unused units back (through `waitUntil` when given, else
   * in the background): its override changed here, and the next decision must be Redis's.
   */
  release(identifier: string, waitUntil?: WaitUntil): void {
    const seen = this.seen.get(identifier);
    if (seen?.lease) this.refund([this.detach(identifier, seen)], this.clock(), waitUntil);
  }

  /** Gives back every lease's unused units now; resolves once every refund is done. Leases no more. */
  async dispose(): Promise<void> {
    this.disposed = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    const now = this.clock();
    const refunds: Refund[] = [];
    for (const [identifier, seen] of this.seen) {
      if (seen.lease) refunds.push(this.detach(identifier, seen));
    }
    this.refund(refunds, now, undefined);
    while (this.pending.size > 0) await Promise.all([...this.pending]);
  }

  /** Refunds every lease expired at `now`. */
  sweep(now: number, waitUntil?: WaitUntil): void {
    const refunds: Refund[] = [];
    let next = Number.POSITIVE_INFINITY;
    for (const [identifier, lease] of this.held) {
      if (lease.expiresAt <= now) {
        const seen = this.seen.get(identifier);
        if (seen) refunds.push(this.detach(identifier, seen));
      } else if (lease.expiresAt < next) {
        next = lease.expiresAt;
      }
    }
    this.nextExpiry = next;
    this.refund(refunds, now, waitUntil);
  }

  private refund(refunds: readonly Refund[], now: number, waitUntil: WaitUntil | undefined): void {
    for (const refund of refunds) {
      if (refund.units <= 0) continue;
      const sent = this.scripts
        .refund(refund.identifier, refund.units, refund.windowStarts, now, refund.applied)
        .then((ok) => {
          if (ok) this.stats.refunded += refund.units;
          else this.stats.refundsFailed += 1;
        });
      this.pending.add(sent);
      sent.finally(() => this.pending.delete(sent));
      waitUntil?.(sent);
    }
  }

  /** Units seen over the last ttl, from two buckets of ttl ms (the older one weighted by its overlap). */
  private roll(seen: Seen, now: number): number {
    const ttl = this.config.ttl;
    const elapsed = now - seen.start;
    if (elapsed >= 2 * ttl) {
      seen.previous = 0;
      seen.current = 0;
      seen.start = now;
    } else if (elapsed >= ttl) {
      seen.previous = seen.current;
      seen.current = 0;
      seen.start += ttl;
    }
    const into = Math.min(ttl, Math.max(0, now - seen.start));
    return (seen.previous * (ttl - into)) / ttl + seen.current;
  }

  /** Ends a lease here and says what is left of it. */
  private detach(identifier: string, seen: Seen): Refund {
    const lease = seen.lease!;
    seen.lease = undefined;
    this.held.delete(identifier);
    const applied = { name: lease.plan, rules: lease.rules };
    return { identifier, units: lease.units, windowStarts: lease.windowStarts, applied };
  }

  /** The rules a decision from Redis was decided by, which its reserved units were counted under. */
  private appliedOf(decision: Decision): Applied {
    return { name: decision.plan, rules: decision.decidedBy ?? this.rules };
  }

  private forget(identifier: string, now: number, waitUntil: WaitUntil | undefined): void {
    const seen = this.seen.get(identifier);
    if (seen?.lease) this.refund([this.detach(identifier, seen)], now, waitUntil);
    this.seen.delete(identifier);
  }

  /**
   * A window rule counts units in the window they were reserved in: a unit of that window handed out
   * in the next one would let the next one hold more than its limit. So a lease ends with its windows.
   */
  private expiry(now: number, windowStarts: readonly number[], rules: readonly Rule[]): number {
    let expiresAt = now + Math.min(this.config.ttl, this.maxStale);
    rules.forEach((rule, i) => {
      if (rule.algorithm === "fixedWindow" || rule.algorithm === "slidingWindow") {
        expiresAt = Math.min(expiresAt, windowStarts[i]! + rule.window);
      }
    });
    return expiresAt;
  }

  /** Node: a timer that refunds expired leases when no request comes to do it. Unref'd. */
  private arm(): void {
    if (this.timer !== undefined || this.disposed || this.held.size === 0) return;
    const wait = Math.max(1, Math.min(MAX_TIMER_MS, this.nextExpiry - this.clock()));
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.sweep(this.clock());
      this.arm();
    }, wait);
    (this.timer as { unref?: () => void }).unref?.();
  }
}

/** The decision with `units` more remaining under every rule (units held for a lease or a regional pool). */
export function withHeld(decision: Decision, units: number): Decision {
  if (units === 0) return decision;
  const rules: Record<string, RuleResult> = {};
  for (const [name, rule] of Object.entries(decision.rules))
    rules[name] = { ...rule, remaining: rule.remaining + units };
  const held = { ...decision, remaining: decision.remaining + units, rules };
  return decision.decidedBy === undefined ? held : decidedBy(held, decision.decidedBy);
}

/**
 * Whether units a decision reserved in `windowStarts` may join `lease`: counted in the same windows
 * (a gcra or token bucket rule's TAT may differ: see join), under the same rules (an override changed
 * in between: they go back instead).
 */
function joins(lease: Held, decision: Decision, windowStarts: readonly number[]): boolean {
  return (
    decision.plan === lease.plan &&
    (decision.decidedBy ?? lease.rules) === lease.rules &&
    windowStarts.every((start, i) => start === lease.windowStarts[i] || holdsTat(lease.rules[i]!))
  );
}

/** A gcra or token bucket rule: its "window" is the TAT its units hold, not a window start. */
function holdsTat(rule: Rule): boolean {
  return rule.algorithm === "gcra" || rule.algorithm === "tokenBucket";
}

/**
 * Units reserved in `windowStarts` join `lease`: a gcra rule's units then hold the earlier of the two
 * TATs, so that a refund never gives back more than the first units still hold (less, at worst).
 */
function join(lease: Held, windowStarts: readonly number[]): void {
  lease.windowStarts = lease.windowStarts.map((start, i) =>
    holdsTat(lease.rules[i]!) ? Math.min(start, windowStarts[i]!) : start,
  );
}

/** An admission from a lease: what Redis last said, minus what this isolate has used since. */
function fromLease(lease: Held, now: number): Decision {
  const out: Record<string, RuleResult> = {};
  let binding: string | undefined;
  let least = Number.POSITIVE_INFINITY;
  for (const rule of lease.rules) {
    const last = lease.snapshot[rule.name]!;
    const remaining = Math.max(0, last.remaining - lease.used);
    out[rule.name] = { allowed: true, limit: last.limit, remaining, resetAt: last.resetAt, retryAfter: 0 };
    if (remaining < least) {
      least = remaining;
      binding = rule.name;
    }
  }
  const b = out[binding!]!;
  const decision: Decision = {
    ...b,
    retryAfter: 0,
    rule: binding!,
    source: "lease",
    plan: lease.plan,
    decidedAt: now,
    rules: out,
  };
  return decidedBy(decision, lease.rules);
}
