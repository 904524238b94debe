// The tier: units home already consumed, held nearer the caller, so that decisions are answered with
// fewer round trips (none from an isolate's memory, one to a region's database). The lease tree has it
// at two levels, each the same idea over another store:
//
//   isolate tier (tier-isolate.ts: units in this isolate's memory)
//     ─▶ regional tier (tier-region.ts: units in the region's database, lua/pool.lua)
//       ─▶ home (one EVALSHA)
//
// (a decision goes down it until a step answers; units come up it from home)
//
// Every tier
// - holds units reserved at home under every rule at once, or none (the limiter script never gives
//   more than half of what the tightest rule has left, so the last units are decided at home);
// - sizes what it asks for by its demand estimate: units seen over the last ttl, at most `max`;
// - hands units out only until its expiry: a ttl (and `overrides.maxStale`), and never past the end of
//   a window they were counted in (see expiry);
// - asks its upstream (the next step of the pipeline: the regional tier, or home) for a top-up before
//   it runs dry, off the request path;
// - takes back what is left once expired and refunds it at home, under the rules the units were
//   reserved under, through `waitUntil` when the caller gives one, else from a timer (the regional
//   tier holds only its plan's rules: units an override reserved under others are not pooled but
//   given back under those, at once);
// - hands out units a regional pool lent only until the pool's deposit ends (Reservation.until).
// A unit is only ever created at home: a tier hands out, or gives back, units home took first.
import { algorithmOf, type Rule } from "./algorithms/index.js";
import { GIVES_BACK } from "./algorithms/shared.js";
import type { Applied, PlanEncoding, Reservation, RuleScripts } from "./scripts/limiter.js";
import type { Origin } from "./scripts/shared.js";
import { type Decision, decidedBy, type RuleResult } from "./types.js";
import { MAX_TIMER_MS } from "./validate.js";

/** Hands a promise to the runtime so that it may finish after the response (`ctx.waitUntil`). */
export type WaitUntil = (promise: Promise<unknown>) => void;

/** A tier's size: at most `max` units held per identifier, each for at most `ttl` ms. */
export interface TierConfig {
  readonly max: number;
  readonly ttl: number;
}

/**
 * The next step of the pipeline, where a tier's units come from: the regional tier, or home. Never
 * rejects: a failure resolves to an Answer with `error` and no reservation.
 */
export interface Upstream {
  /**
   * Decides `cost` units of `identifier` at `now`, reserving up to `want` more for the tier asking
   * (`reserved` in the answer's reservation); `want` 0: nobody above wants units (the regional tier
   * may still reserve for its own pool).
   */
  reserve(
    identifier: string,
    cost: number,
    now: number,
    want: number,
    waitUntil?: WaitUntil,
  ): Promise<Answer>;
}

/**
 * Units a tier held that answered a decision (a lease, a pool's take): where they were counted. A
 * lease is read as it is when settled (units joining it may move a TAT earlier).
 */
export interface Holding {
  readonly countedAt: readonly number[];
}

/** A tier that may take a settle of a decision its units answered back into them (the isolate tier). */
export interface Absorber {
  /**
   * Takes `difference` more units (actual - cost, not 0; fewer when negative) of a decision its
   * `answer` gave, into the units that answered it, where it can; returns whether it did (else the
   * settle goes home).
   */
  charge(identifier: string, answer: Answer, difference: number, now: number): boolean;
}

/**
 * What a step of the pipeline answers, one record per decision: the Decision, with the Reservation
 * it came from when a tier asked upstream for it, and what a settle of it needs: where its units were
 * counted (`held`, when a tier's units answered it; else home's decision, `home` when `decision` is a
 * copy of it), and the tier that may take the settle itself (`absorber`). When Redis failed, no
 * decision and no reservation, and `error` says why: the Limiter's `onError` decides. An upstream's
 * answer always carries its reservation unless it failed.
 */
export interface Answer {
  readonly decision?: Decision;
  readonly error?: Error;
  readonly reservation?: Reservation;
  /**
   * The units a tier held that answered it (a lease, a pool's take): a settle charges them where they
   * were counted, under the decision's rules, with no count of its own. Unset: home decided it.
   */
  readonly held?: Holding;
  /**
   * Home's own decision when `decision` is a copy of it (a tier's units counted as remaining): a
   * settle reads where its units were counted from home's reply, which only the decision the script
   * answered carries (RuleScripts.counted). Unset: `decision` is home's own, or `held` is set.
   */
  readonly home?: Decision;
  /** The tier whose units answered it and that may take a settle back (the isolate tier's lease). */
  readonly absorber?: Absorber;
}

/** A script's answer as the pipeline's: a decision, or the failure. */
export function answerOf(decision: Decision | Error): Answer {
  return decision instanceof Error ? { error: decision } : { decision };
}

/** A reservation's answer as the pipeline's: it with its decision, or the failure. */
export function reserved(reservation: Reservation | Error): Answer {
  return reservation instanceof Error
    ? { error: reservation }
    : { decision: reservation.decision, reservation };
}

/**
 * The pipeline of one plan past the deny cache and the lease (IsolateTier.fromLease, asked first),
 * entered at its first step: the isolate tier (reserves upstream and fills the lease), the regional
 * tier (answers from the pool, else passes on home), or home. Never rejects for Redis trouble.
 */
export interface Entry {
  /** Decides `cost` units of `identifier` at `now`. */
  decide(identifier: string, cost: number, now: number, waitUntil: WaitUntil | undefined): Promise<Answer>;
}

/** What home runs, as RuleScripts sends it: decisions, reservations, refunds. */
export type HomeScripts = Pick<RuleScripts, "decide" | "reserve" | "refund">;

/**
 * Home under one plan: the limiter script, where every unit is created, and the refund script, where
 * every tier's leftovers go back.
 *
 * @example
 * const home = new Home(scripts, scripts.plans.get("default")!);
 * const { reservation, error } = await home.reserve("user:42", 1, Date.now(), 10);
 */
export class Home implements Upstream, Entry {
  /** A plain decision's windows: none were reserved in. */
  private readonly none: readonly number[];

  constructor(
    private readonly scripts: HomeScripts,
    readonly plan: PlanEncoding,
  ) {
    this.none = plan.rules.map(() => 0);
  }

  /**
   * The plain decision (a one-rule script where one serves), made an Answer in the transport call's
   * own promise: no tier, no async layer around it.
   */
  decide(identifier: string, cost: number, now: number): Promise<Answer> {
    return this.scripts.decide(identifier, cost, now, answerOf, this.plan);
  }

  reserve(identifier: string, cost: number, now: number, want: number): Promise<Answer> {
    if (want > 0) return this.scripts.reserve(identifier, cost, now, want, this.plan).then(reserved);
    // nobody wants units: the plain decision
    return this.scripts.decide(
      identifier,
      cost,
      now,
      (decision) =>
        decision instanceof Error
          ? { error: decision }
          : { decision, reservation: { decision, reserved: 0, countedAt: this.none } },
      this.plan,
    );
  }

  /**
   * Gives `units` back under the rules they were reserved under (`applied`), from the reservation
   * `origin` (when, how many; UNKNOWN when the holder kept none). Resolves true when home ran it.
   */
  refund(
    identifier: string,
    units: number,
    countedAt: readonly number[],
    now: number,
    applied: Applied,
    origin: Origin,
  ): Promise<boolean> {
    return this.scripts.refund(identifier, units, countedAt, now, applied, origin);
  }
}

/**
 * The most identifiers a tier keeps anything of (the isolate tier their demand and leases, the least
 * recently seen out first, their lease refunded; the regional tier the pools it deposited into, the
 * oldest forgotten first: whoever asks that pool next takes its leftovers out).
 */
export const MAX_TRACKED = 10_000;

/**
 * Sets `key` to `value` in `tracked` as its most recently seen entry (insertion order is recency);
 * past MAX_TRACKED, takes the least recently seen out and returns it.
 */
export function mostRecent<V>(tracked: Map<string, V>, key: string, value: V): [string, V] | undefined {
  tracked.delete(key);
  tracked.set(key, value);
  if (tracked.size <= MAX_TRACKED) return undefined;
  const oldest = tracked.entries().next().value as [string, V];
  tracked.delete(oldest[0]);
  return oldest;
}

/** What a tier does at both levels: its refunds, its expiries, its timer, the work it has on its way. */
export abstract class Tier {
  /** Refunds, top-ups and deposits on their way (dispose waits for them). */
  protected readonly pending = new Set<Promise<unknown>>();
  /** The earliest expiry of the units held: a decision at or after it sweeps first. */
  protected nextExpiry = Number.POSITIVE_INFINITY;
  protected disposed = false;
  private timer: ReturnType<typeof setTimeout> | undefined;
  /** Identifiers a reset is taking out (see holdOff): no units are reserved for this tier to hold. */
  private readonly heldOff = new Set<(identifier: string) => boolean>();
  /** Counters for tests and reports; every tier counts the units it gave back and the refunds that failed. */
  abstract readonly stats: { refunded: number; refundsFailed: number };

  constructor(
    readonly config: TierConfig,
    /** Where refunds go. */
    protected readonly home: Home,
    protected readonly clock: () => number,
    /**
     * With overrides on, ms units are held at most (`overrides.maxStale`): an override set elsewhere
     * reaches this tier's answers within it. 0: this tier holds nothing.
     */
    protected readonly maxStale = Number.POSITIVE_INFINITY,
  ) {}

  /** Takes back every expired unit at `now` for a refund. */
  abstract sweep(now: number, waitUntil?: WaitUntil): void;
  /**
   * Calls `take` for every entry of `held` expired at `cutoff` (its `expiresAt` at or before it; `take`
   * removes it), and notes the earliest expiry of those left, for the next sweep.
   */
  protected expire<T extends { readonly expiresAt: number }>(
    held: ReadonlyMap<string, T>,
    cutoff: number,
    take: (key: string, entry: T) => void,
  ): void {
    let next = Number.POSITIVE_INFINITY;
    for (const [key, entry] of held) {
      if (entry.expiresAt <= cutoff) take(key, entry);
      else if (entry.expiresAt < next) next = entry.expiresAt;
    }
    this.nextExpiry = next;
  }

  /** Whether it holds anything a timer should sweep. */
  protected abstract get holding(): boolean;

  /**
   * When units reserved at `now`, counted at `countedAt` under `rules`, are no longer handed out: a ttl (and
   * maxStale) later, and never past the end of a window rule's window they were counted in (a unit of
   * that window handed out in the next one would let the next one hold more than its limit).
   */
  protected expiry(now: number, rules: readonly Rule[], countedAt: readonly number[]): number {
    let expiresAt = now + Math.min(this.config.ttl, this.maxStale);
    rules.forEach((rule, i) => {
      if (windowed(rule)) expiresAt = Math.min(expiresAt, countedAt[i]! + rule.window);
    });
    return expiresAt;
  }

  /**
   * Gives units back at home, where they were counted (home's refund), counting what came back and
   * what failed. Off the request path: `track` it.
   */
  protected async giveBack(
    identifier: string,
    units: number,
    countedAt: readonly number[],
    now: number,
    applied: Applied,
    origin: Origin,
  ): Promise<void> {
    const ok = await this.home.refund(identifier, units, countedAt, now, applied, origin);
    if (ok) this.stats.refunded += units;
    else this.stats.refundsFailed += 1;
  }

  /**
   * Until the function it returns is called, this tier reserves no units to hold for an identifier
   * `holds` matches (the isolate tier: a lease's nor a top-up's; the regional tier: a pool's deposit
   * nor top-up): a reset holds them off from before it takes out what the tiers hold until its DEL is
   * done, so that no units counted before the DEL are held after it.
   */
  holdOff(holds: (identifier: string) => boolean): () => void {
    // a function of its own per call: two resets of one identifier each lift their own
    const held = (identifier: string) => holds(identifier);
    this.heldOff.add(held);
    return () => this.heldOff.delete(held);
  }

  /** Whether a reset holds off the identifier's reservations (holdOff). */
  protected isHeldOff(identifier: string): boolean {
    if (this.heldOff.size === 0) return false;
    for (const holds of this.heldOff) if (holds(identifier)) return true;
    return false;
  }

  /** The rules a decision was decided by (an override's, or this tier's plan's): where its units were counted. */
  protected appliedOf(decision: Decision): Applied {
    return { name: decision.plan, rules: decision.decidedBy ?? this.home.plan.rules };
  }

  /**
   * Keeps `promise` until it is done, handing it to `waitUntil` when given. A waitUntil that throws
   * (called after its request ended, say) changes nothing: the work goes on without it, the decision
   * stands, and what comes after it in the caller still runs.
   */
  protected track(promise: Promise<unknown>, waitUntil: WaitUntil | undefined): void {
    this.pending.add(promise);
    promise.finally(() => this.pending.delete(promise));
    try {
      waitUntil?.(promise);
    } catch {
      // the work is kept here (pending) whatever the host says
    }
  }

  /** Resolves once everything on its way is done (what lands meanwhile included). */
  protected async drained(): Promise<void> {
    while (this.pending.size > 0) await Promise.all([...this.pending]);
  }

  /** Stops the timer and takes no more units. */
  protected stop(): void {
    this.disposed = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
  }

  /**
   * Notes units held until `expiresAt`, so that a decision at or after it sweeps first; `background`
   * (no waitUntil): the timer sweeps them when no decision comes to do it.
   */
  protected hold(expiresAt: number, background: boolean): void {
    if (expiresAt < this.nextExpiry) this.nextExpiry = expiresAt;
    if (background) this.arm();
  }

  /** Node (no waitUntil): a timer that sweeps expired units when no decision comes to do it. Unref'd. */
  private arm(): void {
    if (this.timer !== undefined || this.disposed || !this.holding) return;
    const wait = Math.max(1, Math.min(MAX_TIMER_MS, this.nextExpiry - this.clock()));
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.sweep(this.clock());
      this.arm();
    }, wait);
    (this.timer as { unref?: () => void }).unref?.();
  }
}

/**
 * Units seen per identifier, in two buckets of ttl ms: the demand estimate a tier sizes its
 * reservations by. lua/pool.lua keeps the same two buckets for a region, in its database, so that
 * every isolate of the region counts into one estimate.
 */
export interface Demand {
  /** Start of the current bucket, and the units seen in it and the one before. */
  start: number;
  current: number;
  previous: number;
}

/** Units seen over the last `ttl` at `now`: the current bucket, and the older one weighted by its overlap. */
export function estimate(demand: Demand, now: number, ttl: number): number {
  const elapsed = now - demand.start;
  if (elapsed >= 2 * ttl) {
    demand.previous = 0;
    demand.current = 0;
    demand.start = now;
  } else if (elapsed >= ttl) {
    demand.previous = demand.current;
    demand.current = 0;
    demand.start += ttl;
  }
  const into = Math.min(ttl, Math.max(0, now - demand.start));
  return (demand.previous * (ttl - into)) / ttl + demand.current;
}

// The sizing below is the tier's at both levels: lua/pool.lua's take states it again for a region's
// pool (the region's estimate lives in its database, where only that script can read and update it),
// and test/engine/tier.test.ts checks the two against each other, case by case. Demand counts whole
// units: the estimate rounded down.

/** Units a tier asks for at `demand`: about a ttl's traffic, at most `max` (none for an identifier seen once). */
export function size(config: TierConfig, demand: number): number {
  return Math.min(config.max, Math.floor(demand));
}

/**
 * Units held at or under which a warm tier asks for a top-up: about an eighth of a ttl's traffic, at
 * most a quarter of `max`.
 */
export function low(config: TierConfig, demand: number): number {
  return Math.min(Math.floor(config.max / 4), Math.ceil(Math.floor(demand) / 8));
}

/**
 * Units a warm tier holding `held` asks home for beside a top-up decision's own unit, at `demand`,
 * home having had `homeLeft` as last seen; 0: no top-up. Above `low`, none; else about a ttl's
 * traffic (`size`) less what it holds and the own unit. The own unit skips the limiter script's half
 * rule, so a top-up goes only while home had at least twice what it takes: the last units of a quota
 * are still decided at home.
 */
export function topUpSize(config: TierConfig, demand: number, held: number, homeLeft: number): number {
  if (held > low(config, demand)) return 0;
  const want = size(config, demand) - held - 1;
  return want >= 1 && homeLeft >= 2 * (want + 1) ? want : 0;
}

/** The decision with `units` more remaining under every rule (units a tier holds for the identifier). */
export function withHeld(decision: Decision, units: number): Decision {
  if (units === 0) return decision;
  const rules: Record<string, RuleResult> = {};
  for (const [name, rule] of Object.entries(decision.rules))
    rules[name] = { ...rule, remaining: rule.remaining + units };
  const held = { ...decision, remaining: decision.remaining + units, rules };
  return decision.decidedBy === undefined ? held : decidedBy(held, decision.decidedBy);
}

/**
 * An admission from held units: every rule at `remaining(rule, i)`, bound by the least; `source`
 * says which tier answered.
 */
export function fromHeld(
  rules: readonly Rule[],
  remaining: (
    rule: Rule,
    i: number,
  ) => { readonly limit: number; readonly remaining: number; readonly resetAt: number },
  source: "lease" | "region",
  plan: string,
  now: number,
): Decision {
  const out: Record<string, RuleResult> = {};
  let binding = rules[0]!.name;
  let least = Number.POSITIVE_INFINITY;
  rules.forEach((rule, i) => {
    const { limit, remaining: left, resetAt } = remaining(rule, i);
    out[rule.name] = { allowed: true, limit, remaining: left, resetAt, retryAfter: 0 };
    if (left < least) {
      least = left;
      binding = rule.name;
    }
  });
  const b = out[binding]!;
  const decision: Decision = { ...b, retryAfter: 0, rule: binding, source, plan, decidedAt: now, rules: out };
  return decidedBy(decision, rules);
}

/** A rule that counts units in windows (fixed and sliding windows): held units end with their window. */
export function windowed(rule: Rule): rule is Rule & { readonly window: number } {
  return algorithmOf(rule).windowed;
}

/**
 * Whether units may be held under `rules`: as every rule's algorithm says (its module's `leasable`).
 * Not with a sliding log, for one: it stamps every unit with the time it was admitted, and a unit
 * handed out later from a tier would carry an earlier stamp and leave the log early, letting a later
 * window hold more than the limit. Nor with an interval bucket. Nor under a window rule that gives
 * back (`givesBack`): its decisions are refunds, and units reserved beside one would be given back at
 * once, then again when the lease that held them ended.
 */
export function leasable(rules: readonly Rule[]): boolean {
  return rules.every(
    (rule) => algorithmOf(rule).leasable && (rule as { counting?: number }).counting !== GIVES_BACK,
  );
}

/** A gcra or token bucket rule: what its units hold is a TAT, not a window start. */
export function holdsTat(rule: Rule): boolean {
  return algorithmOf(rule).holdsTat;
}
