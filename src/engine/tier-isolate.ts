// The isolate tier (tier.ts), its units kept in this isolate's memory: a lease per hot identifier, whose
// units answer its decisions here with no request until they run out or expire.
//
// - Reserving: a decision that passes on asks for up to `want` more units in the same call (home's
//   EVALSHA, or the regional pool's take); the lease starts from what comes back (fill).
// - Sizing: about rate × ttl for this identifier in this isolate (the demand estimate), at most `max`,
//   and 0 for an identifier seen once.
// - Answering: a decision whose cost the lease covers takes it from the lease: allowed, with the
//   headers home last gave minus what this isolate has used since. It never awaits anything.
// - Topping up: a hot lease running low asks its upstream for more in the background (topUp).
// - Refunds: units left when a lease expires (or is ended on a denial, or a reset takes it out, or
//   the Limiter is disposed) go back home under the rules they were reserved under.
import type { Rule } from "./algorithms/index.js";
import type { Applied, Reservation } from "./scripts/limiter.js";
import { type Origin, UNKNOWN } from "./scripts/shared.js";
import {
  type Absorber,
  type Answer,
  type Demand,
  type Entry,
  estimate,
  fromHeld,
  type Holding,
  type Home,
  holdsTat,
  leasable,
  mostRecent,
  size,
  Tier,
  type TierConfig,
  topUpSize,
  type Upstream,
  type WaitUntil,
  withHeld,
} from "./tier.js";
import type { Decision, RuleResult } from "./types.js";

/** Unused units of one identifier, to give back at home. */
interface Unused {
  readonly identifier: string;
  readonly units: number;
  /**
   * Per rule, where the units were counted: the start of their window (fixed and sliding windows); for
   * gcra and the token bucket the TAT they held once taken (a refund gives back no units since earned back).
   */
  readonly countedAt: readonly number[];
  /** The rules the units were reserved under: given back under them, never under another plan's. */
  readonly applied: Applied;
  /** When and how many the (first) reservation took: gcra counts only refunds made since against them. */
  readonly origin: Origin;
}

/** One identifier's units held here: the lease an answer from it carries (Answer.held). */
interface Held extends Holding {
  /** Units still held. */
  units: number;
  expiresAt: number;
  /** Every rule's outcome as home last gave it, the held units counted as remaining. */
  snapshot: Record<string, RuleResult>;
  /** Units handed out since the snapshot. */
  used: number;
  /** Per rule, where the units were counted (a Reservation's `countedAt`; see join). */
  countedAt: readonly number[];
  /** When the first reservation joined here counted its units, and how many (the TATs in `countedAt`). */
  origin: Origin;
  /**
   * The plan name and rules the units were reserved under: the tier's plan's, or those of an override
   * stored for the identifier (a custom one's own rules). Its answers say and state them.
   */
  plan: string;
  rules: readonly Rule[];
}

/** One identifier as this isolate saw it: its demand and its lease. */
interface Seen extends Demand {
  /** Units seen over the last ttl before the decision in progress: the size of the next lease. */
  estimate: number;
  /** When a reservation for it went out and has not come back (concurrent decisions ask for none). */
  asking: number | undefined;
  /** The last reservation that asked for units (a lease's or a top-up's): settled once its units are held. */
  reserving: Promise<unknown> | undefined;
  lease: Held | undefined;
}

/**
 * The isolate tier of one Limiter under one plan (a Limiter with plans has one per plan, so a lease is
 * per identifier and plan: its units, windows and snapshot are those of the plan it was reserved under).
 *
 * @example
 * const isolate = new IsolateTier({ max: 50, ttl: 1000 }, home, upstream, clock);
 * const answer = isolate.fromLease("user:42", 1, now, waitUntil) ?? (await isolate.decide("user:42", 1, now, waitUntil));
 */
export class IsolateTier extends Tier implements Entry, Absorber {
  private readonly seen = new Map<string, Seen>();
  private readonly held = new Map<string, Held>();
  /** Whether this tier may hold units at all (not under a sliding log, an interval bucket or a window that gives back: see `leasable`). */
  private readonly leasable: boolean;
  private readonly rules: readonly Rule[];
  /**
   * Counters for tests and reports: units reserved (top-ups included), answers given here, units given
   * back, and refunds that failed (their units stay consumed until the state expires).
   */
  readonly stats = { reserved: 0, answered: 0, refunded: 0, refundsFailed: 0 };

  constructor(
    config: TierConfig,
    home: Home,
    /** Where top-ups go: the regional tier, or home. */
    private readonly upstream: Upstream,
    clock: () => number,
    maxStale = Number.POSITIVE_INFINITY,
    /**
     * The Limiter's isolate tiers, one per plan, this one joining them: a decision under one plan also
     * takes back the expired leases of the others (with waitUntil no timer does).
     */
    private readonly all: IsolateTier[] = [],
  ) {
    super(config, home, clock, maxStale);
    this.rules = home.plan.rules;
    this.leasable = leasable(this.rules);
    all.push(this);
  }

  /** Leases held now: tests read it to see a lease end (a decision could not tell without changing it). */
  get size(): number {
    return this.held.size;
  }

  protected get holding(): boolean {
    return this.held.size > 0;
  }

  /**
   * This tier's step of the pipeline past its lease (the Limiter asked `fromLease` first, which said
   * to pass on): the decision goes upstream reserving what the lease wants in the same call, and the
   * lease is filled from the answer.
   */
  decide(identifier: string, cost: number, now: number, waitUntil: WaitUntil | undefined): Promise<Answer> {
    const want = this.want(identifier, cost, now);
    const answered = this.upstream.reserve(identifier, cost, now, want, waitUntil).then((answer): Answer => {
      const { reservation, held, home } = answer;
      if (reservation === undefined) return answer; // failed
      // the caller is told a copy (what the lease holds counted as remaining): home's own goes with it
      const decision = this.fill(identifier, reservation, now, waitUntil);
      return { decision, reservation, held, home: home ?? reservation.decision };
    });
    // want() saw the identifier to ask for units
    if (want > 0) this.seen.get(identifier)!.reserving = answered;
    return answered;
  }

  /**
   * This tier's first step: the answer for `cost` units from the identifier's lease, on the spot (it
   * never waits on a request, this one's or another's), or undefined to pass on (`decide`). Records
   * the demand, and refunds expired leases, every plan's (through `waitUntil` when given).
   */
  fromLease(identifier: string, cost: number, now: number, waitUntil?: WaitUntil): Answer | undefined {
    for (const tier of this.all) if (now >= tier.nextExpiry) tier.sweep(now, waitUntil);
    const seen = this.seen.get(identifier) ?? {
      start: now,
      current: 0,
      previous: 0,
      estimate: 0,
      asking: undefined,
      reserving: undefined,
      lease: undefined,
    };
    // the least recently seen past MAX_TRACKED is forgotten, its lease refunded
    const out = mostRecent(this.seen, identifier, seen);
    if (out !== undefined) this.end(out[0], out[1], now, waitUntil);
    seen.estimate = estimate(seen, now, this.config.ttl);
    seen.current += cost;
    const lease = seen.lease;
    if (lease === undefined || lease.units < Math.max(cost, 1)) return undefined;
    lease.units -= cost;
    lease.used += cost;
    this.stats.answered += 1;
    const decision = fromLease(lease, now);
    if (lease.units === 0) this.detach(identifier, seen);
    else this.topUp(identifier, seen, lease, now, waitUntil);
    // a settle of it is taken back into the lease while it lives (charge)
    return { decision, held: lease, absorber: this };
  }

  /** Units to reserve beside the `cost` of a decision passing on now. */
  private want(identifier: string, cost: number, now: number): number {
    if (!this.leasable || this.disposed || cost === 0 || this.maxStale <= 0) return 0;
    const seen = this.seen.get(identifier);
    // A lease still holding units (fewer than this cost) is used first: no second one beside it.
    if (seen === undefined || seen.lease !== undefined) return 0;
    // One reservation at a time: concurrent decisions would each reserve as much, and give it back.
    if (seen.asking !== undefined && now - seen.asking < this.config.ttl) return 0;
    if (this.isHeldOff(identifier)) return 0;
    const units = size(this.config, seen.estimate);
    if (units > 0) seen.asking = now;
    return units;
  }

  /**
   * Fills the identifier's lease from the answer to a decision that asked for what `want` said, and
   * returns the decision to give the caller.
   * A denial drops the identifier's lease (its units are refunded); an admission with `reserved`
   * units starts one. The `remaining` that comes back leaves out every unit taken, reserved ones
   * included; the caller is told what this identifier can still have: that, plus what this isolate
   * holds for it.
   */
  private fill(
    identifier: string,
    { decision, reserved, countedAt, from, until }: Reservation,
    now: number,
    waitUntil?: WaitUntil,
  ): Decision {
    const seen = this.seen.get(identifier);
    if (seen !== undefined) seen.asking = undefined;
    if (!decision.allowed) {
      this.end(identifier, seen, now, waitUntil);
      return decision;
    }
    if (reserved > 0) this.stats.reserved += reserved;
    const lease = seen?.lease;
    const origin = originOf(decision, reserved, from);
    // Units held before this answer, and reserved by it, are this identifier's to use (or on their way back).
    const answer = withHeld(decision, (lease?.units ?? 0) + reserved);
    if (seen === undefined || this.disposed) {
      // Forgotten while the request was out (evicted), or disposed since: the reserved units go straight back.
      if (reserved > 0)
        this.track(
          this.giveBack(identifier, reserved, countedAt, now, this.appliedOf(decision), origin),
          waitUntil,
        );
      return answer;
    }
    if (lease !== undefined) {
      // A decision whose cost the lease could not cover, or a second reservation that crossed the first.
      if (this.keep(identifier, lease, decision, reserved, countedAt, origin, now, waitUntil) > 0)
        this.endBy(lease, until, waitUntil);
      lease.snapshot = answer.rules;
      lease.used = 0;
      return answer;
    }
    if (reserved > 0) {
      this.start(identifier, seen, reserved, answer, countedAt, origin, now, waitUntil);
      this.endBy(seen.lease!, until, waitUntil);
    }
    return answer;
  }

  /**
   * A lease holding units a regional pool handed out ends by the end of the pool's deposit (`until`:
   * the pool's deposits are handed out for at most `maxStale` after home decided them, and so are
   * the units a lease takes from them).
   */
  private endBy(lease: Held, until: number | undefined, waitUntil: WaitUntil | undefined): void {
    if (until === undefined || until >= lease.expiresAt) return;
    lease.expiresAt = until;
    this.hold(until, waitUntil === undefined);
  }

  /**
   * Charges a decision answered here from a lease `difference` more units (actual - cost, not 0; fewer
   * when negative) against that lease where it can: units given back rejoin the lease while it lives
   * (it holds units counted in the same windows); extra units come out of it when it holds that many.
   * Returns whether the lease took it; when not, the answer's `held` (the lease) says where the units
   * were counted.
   */
  charge(identifier: string, answer: Answer, difference: number, now: number): boolean {
    // the lease it answered from, while it is still this identifier's and has not expired
    const held = this.held.get(identifier);
    if (this.disposed || held === undefined || held !== answer.held || now >= held.expiresAt) return false;
    if (difference > 0 && held.units < difference) return false;
    held.units -= difference;
    held.used += difference;
    if (held.units === 0) this.detach(identifier, this.seen.get(identifier)!);
    return true;
  }

  /**
   * Ends the lease of every identifier `holds` matches, for a reset or an override changed here (held
   * off first: holdOff), so that the next decision is home's. Waits
   * for the reservations of theirs on their way, whose units then join their leases (else one landing
   * before the reset's DEL would fill a lease with units the DEL erased, handed out as if counted), and
   * for this tier's refunds on their way (one landing after the DEL would give back, on the fresh
   * state, units it never counted); with `refund`, gives each lease's unused units back at home and resolves once every refund is done:
   * the rules the reset leaves alone (another field's) get them back before the DEL. Without, the
   * units go with the state the DEL deletes.
   */
  async takeOut(holds: (identifier: string) => boolean, refund: boolean, now: number): Promise<void> {
    const matched = [...this.seen].filter(([identifier]) => holds(identifier));
    await Promise.allSettled([...this.pending, ...matched.map(([, seen]) => seen.reserving)]);
    const unused: Unused[] = [];
    for (const [identifier, seen] of matched) {
      if (seen.lease !== undefined) unused.push(this.detach(identifier, seen));
    }
    if (!refund) return;
    const refunds = unused
      .filter(({ units }) => units > 0)
      .map(({ identifier, units, countedAt, applied, origin }) =>
        this.giveBack(identifier, units, countedAt, now, applied, origin),
      );
    for (const sent of refunds) this.track(sent, undefined);
    await Promise.all(refunds);
  }

  /** Gives back every lease's unused units now; resolves once every refund is done. Leases no more. */
  async dispose(): Promise<void> {
    this.stop();
    const now = this.clock();
    const unused: Unused[] = [];
    for (const [identifier, seen] of this.seen) {
      if (seen.lease) unused.push(this.detach(identifier, seen));
    }
    this.giveBackAll(unused, now, undefined);
    await this.drained();
  }

  /** Refunds every lease expired at `now`. */
  sweep(now: number, waitUntil?: WaitUntil): void {
    const unused: Unused[] = [];
    this.expire(this.held, now, (identifier) => {
      const seen = this.seen.get(identifier);
      if (seen) unused.push(this.detach(identifier, seen));
    });
    this.giveBackAll(unused, now, waitUntil);
  }

  /**
   * Tops a hot lease up before it runs dry, in the background (through `waitUntil` when given): when
   * it holds no more than about an eighth of a ttl's traffic (at most a quarter of `max`), one decision
   * of cost 1 goes upstream reserving about a ttl's traffic (at most `max` held) for the lease, which
   * then lives a ttl from then. Without it, every decision arriving while the next reservation is on
   * its way would pass on by itself. No answer waits on it. One reservation or top-up per identifier is
   * on its way at a time.
   */
  private topUp(
    identifier: string,
    seen: Seen,
    lease: Held,
    now: number,
    waitUntil: WaitUntil | undefined,
  ): void {
    if (this.disposed) return;
    // home's least remaining as last seen, less what this isolate holds and handed out since
    const homeLeft =
      Math.min(...Object.values(lease.snapshot).map((rule) => rule.remaining)) - lease.used - lease.units;
    // about a ttl's traffic, like a fresh lease: a slow identifier is topped up a little
    const want = topUpSize(this.config, seen.estimate, lease.units, homeLeft);
    if (want === 0) return;
    if (seen.asking !== undefined && now - seen.asking < this.config.ttl) return;
    if (this.isHeldOff(identifier)) return;
    seen.asking = now;
    // a decision of cost 1 reserving `want` more, all for the lease
    const sent = this.upstream.reserve(identifier, 1, now, want, waitUntil).then(({ reservation }) => {
      seen.asking = undefined;
      if (reservation !== undefined) this.joinTopUp(identifier, reservation, now, waitUntil);
    });
    seen.reserving = sent;
    this.track(sent, waitUntil);
  }

  /** A top-up's answer: its unit and the reserved ones join the lease (or start a new one). */
  private joinTopUp(
    identifier: string,
    { decision, reserved, countedAt, from, until }: Reservation,
    now: number,
    waitUntil?: WaitUntil,
  ): void {
    const seen = this.seen.get(identifier);
    const units = decision.allowed ? 1 + reserved : 0;
    if (units > 0) this.stats.reserved += units;
    if (!decision.allowed) {
      this.end(identifier, seen, now, waitUntil);
      return;
    }
    const lease = seen?.lease;
    const origin = originOf(decision, units, from);
    if (seen === undefined || this.disposed) {
      this.track(
        this.giveBack(identifier, units, countedAt, now, this.appliedOf(decision), origin),
        waitUntil,
      );
      return;
    }
    if (lease === undefined) {
      this.start(identifier, seen, units, withHeld(decision, units), countedAt, origin, now, waitUntil);
      this.endBy(seen.lease!, until, waitUntil);
      return;
    }
    const keep = this.keep(identifier, lease, decision, units, countedAt, origin, now, waitUntil);
    lease.snapshot = withHeld(decision, lease.units).rules;
    lease.used = 0;
    // a lease topped up lives a ttl from then (what is left of the old units is at most a quarter of max)
    if (keep > 0) {
      lease.expiresAt = this.expiry(now, lease.rules, countedAt);
      this.endBy(lease, until, waitUntil);
    }
  }

  /**
   * Units reserved (from `origin`) for a live lease join it; those that would take it past `max`, or
   * that were counted in other windows or under other rules, go back. Returns how many joined.
   */
  private keep(
    identifier: string,
    lease: Held,
    decision: Decision,
    units: number,
    countedAt: readonly number[],
    origin: Origin,
    now: number,
    waitUntil: WaitUntil | undefined,
  ): number {
    const keep = joins(lease, decision, countedAt) ? Math.min(units, this.config.max - lease.units) : 0;
    const [kept, back] = split(origin, keep);
    if (keep > 0) join(lease, countedAt, kept);
    lease.units += keep;
    if (units > keep)
      this.track(
        this.giveBack(identifier, units - keep, countedAt, now, this.appliedOf(decision), back),
        waitUntil,
      );
    return keep;
  }

  private start(
    identifier: string,
    seen: Seen,
    units: number,
    answer: Decision,
    countedAt: readonly number[],
    origin: Origin,
    now: number,
    waitUntil: WaitUntil | undefined,
  ): void {
    const rules = answer.decidedBy ?? this.rules;
    const held: Held = {
      units,
      expiresAt: this.expiry(now, rules, countedAt),
      snapshot: answer.rules,
      used: 0,
      countedAt,
      origin,
      plan: answer.plan,
      rules,
    };
    seen.lease = held;
    this.held.set(identifier, held);
    this.hold(held.expiresAt, waitUntil === undefined);
  }

  private giveBackAll(unused: readonly Unused[], now: number, waitUntil: WaitUntil | undefined): void {
    for (const { identifier, units, countedAt, applied, origin } of unused) {
      if (units > 0) this.track(this.giveBack(identifier, units, countedAt, now, applied, origin), waitUntil);
    }
  }

  /** Ends the identifier's lease, if any, and gives its unused units back. */
  private end(
    identifier: string,
    seen: Seen | undefined,
    now: number,
    waitUntil: WaitUntil | undefined,
  ): void {
    if (seen?.lease) this.giveBackAll([this.detach(identifier, seen)], now, waitUntil);
  }

  /** Ends a lease here and says what is left of it. */
  private detach(identifier: string, seen: Seen): Unused {
    const lease = seen.lease!;
    seen.lease = undefined;
    this.held.delete(identifier);
    const applied = { name: lease.plan, rules: lease.rules };
    const { units, countedAt, origin } = lease;
    return { identifier, units, countedAt, applied, origin };
  }
}

/**
 * Whether units a decision reserved, counted at `countedAt`, may join `lease`: counted in the same windows
 * (a gcra or token bucket rule's TAT may differ: see join), under the same rules (an override changed
 * in between: they go back instead).
 */
function joins(lease: Held, decision: Decision, countedAt: readonly number[]): boolean {
  return (
    decision.plan === lease.plan &&
    (decision.decidedBy ?? lease.rules) === lease.rules &&
    countedAt.every((start, i) => start === lease.countedAt[i] || holdsTat(lease.rules[i]!))
  );
}

/**
 * Units reserved, counted at `countedAt` (from `origin`), join `lease`: a gcra rule's units then hold the
 * earlier of the two TATs, and count from the earlier reservation, so that a refund never gives back
 * more than the first units still hold (less, at worst). One whose time is not known (the region's
 * pool) leaves the lease's unknown too.
 */
function join(lease: Held, countedAt: readonly number[], origin: Origin): void {
  lease.countedAt = lease.countedAt.map((start, i) =>
    holdsTat(lease.rules[i]!) ? Math.min(start, countedAt[i]!) : start,
  );
  const known = lease.origin.at > 0 && origin.at > 0;
  if (!known) lease.origin = UNKNOWN;
  else if (origin.at < lease.origin.at) lease.origin = origin;
}

/**
 * When and how many units a reservation answered by `decision` counted: its time and `units`, or,
 * for units the region's pool lent (`from`), the pool's reservation and the part it lent with them.
 * A decision the pool answered without lending a part: not known.
 */
function originOf(decision: Decision, units: number, from: Origin | undefined): Origin {
  if (from !== undefined) return from;
  return decision.source === "region" ? UNKNOWN : { at: decision.decidedAt, taken: units };
}

/**
 * A reservation's units split between two holders: the first `units` take as many of its part as
 * they can, the rest the remainder (two holders each bounded by the whole part could, between them,
 * give back more than the units hold).
 */
function split(origin: Origin, units: number): [Origin, Origin] {
  if (origin.at === 0) return [origin, origin];
  const first = Math.min(units, origin.taken);
  return [
    { at: origin.at, taken: first },
    { at: origin.at, taken: origin.taken - first },
  ];
}

/** An admission from a lease: what home last said, minus what this isolate has used since. */
function fromLease(lease: Held, now: number): Decision {
  return fromHeld(
    lease.rules,
    (rule) => {
      const last = lease.snapshot[rule.name]!;
      return {
        limit: last.limit,
        remaining: Math.max(0, last.remaining - lease.used),
        resetAt: last.resetAt,
      };
    },
    "lease",
    lease.plan,
    now,
  );
}
