// Regional pools: the middle level of the lease tree (home database → regional pool → isolate lease).
//
// - Filling: a decision that goes home may reserve units for the region's pool in the same EVALSHA
//   (as a lease reservation: under every rule or none, never more than half of what the tightest rule
//   has left). The pool script says how many: about the region's demand for the identifier over the
//   last ttl, at most `max`, and only to one isolate of the region at a time (until its deposit or a
//   ttl). The units are deposited into the region's database off the request path (waitUntil, else
//   in the background).
// - Leases: a take may also take this isolate's lease share, and a lease's top-up asks the pool first.
// - Answering: a decision asks the pool first (one EVALSHA on the region's database): it takes the
//   cost when the pool holds it and has not expired (`source: "region"`), else answers "miss" and the
//   decision goes home, whose answer is the truth.
// - Topping up: a hit that leaves the pool low asks its isolate to reserve a top-up at home in the
//   background, so that a warm identifier keeps being answered in the region.
// - Refunds: the first isolate that finds a pool past its expiry with units left takes them out (the
//   pool script does it atomically, so only one does) and gives them back at home through the refund
//   script; an isolate that deposited into a pool asks it once it expires (sweep). A pool nobody asks again expires with its units, which stay consumed at home until home's
//   state expires: fewer admissions, never more. A unit is only ever created at home.
import type { Rule } from "./algorithms/index.js";
import { describe } from "./duration.js";
import type { RedisCallError } from "./errors.js";
import type { RuleKeys } from "./keys.js";
import { checkLease, type LeaseConfig, type LeaseOptions, type WaitUntil, withHeld } from "./leases.js";
import type { PoolScript } from "./pool-script.js";
import type { PlanEncoding, Reservation, RuleScripts } from "./scripts/limiter.js";
import type { Transport } from "./transport.js";
import { type Decision, decidedBy, type RuleResult } from "./types.js";
import { type Issue, issueText, MAX_TIMER_MS } from "./validate.js";

/** Pools whose deposits a Limiter remembers, to take back their leftovers (the oldest forgotten first). */
const MAX_TRACKED = 10_000;

/** What `region` takes: a database near this isolate, and the pool each identifier may have there. */
export interface RegionOptions {
  /** `{ url, token }` of the region's Upstash-compatible REST endpoint, or an @upstash/redis client. */
  redis: unknown;
  /** At most `max` units per identifier in the region's pool, each deposit handed out for at most `ttl`. */
  pool: LeaseOptions;
}

/** A validated `region.pool`. */
export type PoolConfig = LeaseConfig;

/**
 * Validates the `region` option's shape and its pool, or throws naming the field (`region.pool.max:
 * ...`). The database (`region.redis`) is checked where its transport is made.
 *
 * @example
 * regionPool({ redis: { url, token }, pool: { max: 500, ttl: "5s" } }) // { max: 500, ttl: 5000 }
 */
export function regionPool(value: unknown, field = "region"): PoolConfig {
  const issues: Issue[] = [];
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new Error(
      `${field}: expected { redis, pool: { max, ttl } }, e.g. { redis: { url, token }, pool: { max: 500, ttl: "5s" } }, got ${describe(value)}`,
    );
  }
  for (const key of Object.keys(value)) {
    if (key !== "redis" && key !== "pool")
      issues.push({ path: [field, key], message: "not a region option; it takes redis, pool" });
  }
  if (!("redis" in value) || (value as { redis?: unknown }).redis === undefined) {
    issues.push({
      path: [field, "redis"],
      message: "give the region's database: { url, token } or a client",
    });
  }
  const checked = checkLease((value as { pool?: unknown }).pool);
  for (const issue of checked.issues ?? []) issues.push({ ...issue, path: [field, "pool", ...issue.path] });
  if (issues.length > 0 || checked.lease === undefined) throw new Error(issues.map(issueText).join("; "));
  return checked.lease;
}

/**
 * The regional pools of one Limiter: asks the region's database first, and fills it from home.
 *
 * @example
 * const region = new Region(pool, { max: 500, ttl: 5000 }, scripts, regionTransport, clock);
 * const answer = await region.take("user:42", 1, now, encoding); // a Reservation (the pool answered), or units to reserve at home
 */
export class Region {
  private readonly pending = new Set<Promise<unknown>>();
  /** The pools this Limiter deposited into, by key, until their units stop being handed out. */
  private readonly deposits = new Map<
    string,
    { identifier: string; plan: PlanEncoding; expiresAt: number }
  >();
  private nextExpiry = Number.POSITIVE_INFINITY;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private disposed = false;
  /**
   * Counters for tests and reports: answers from the pool, misses, units deposited, units given back
   * to home, refunds that failed, and units reserved for a pool that never reached it (they stay
   * consumed at home until its state expires).
   */
  readonly stats = { hits: 0, misses: 0, errors: 0, deposited: 0, refunded: 0, refundsFailed: 0, lost: 0 };

  constructor(
    private readonly pool: PoolScript,
    readonly config: PoolConfig,
    private readonly scripts: RuleScripts,
    /** The region's database, for `reset`. */
    private readonly transport: Transport,
    private readonly clock: () => number,
    /** With overrides on, the most a pool is trusted (`overrides.maxStale`): deposits live at most that. */
    private readonly maxStale = Number.POSITIVE_INFINITY,
    private readonly timeout = 1000,
  ) {}

  /**
   * Whether decisions under `plan` ask the region. Not with a sliding log rule: the log stamps each
   * unit with the time it was admitted, and a unit handed out later from a pool would leave the log
   * early, letting a later window hold more than the limit (leases never hold one either). Nor with
   * `overrides: { maxStale: 0 }`: no answer may come from anywhere but home.
   */
  serves(plan: PlanEncoding): boolean {
    return this.maxStale > 0 && !plan.rules.some((rule) => rule.algorithm === "slidingLog");
  }

  /**
   * Asks the identifier's pool in the region for `cost` units, and up to `extra` more for this
   * isolate's lease: when the pool answered, the Decision (`source: "region"`) with the units taken
   * for the lease, as a Reservation; else how many units to reserve for the pool at home beside the
   * decision (0 also when the region's database failed: the decision goes home as without a region).
   */
  async take(
    identifier: string,
    cost: number,
    now: number,
    plan: PlanEncoding,
    waitUntil?: WaitUntil,
    extra = 0,
  ): Promise<Reservation | number> {
    if (now >= this.nextExpiry) this.sweep(now, waitUntil);
    const answer = await this.pool.take(this.key(plan, identifier), cost, now, plan.rules.length, extra);
    if (answer instanceof Error) {
      this.stats.errors += 1;
      return 0;
    }
    if (!answer.hit) {
      this.stats.misses += 1;
      if (answer.leftover > 0)
        this.refund(identifier, answer.leftover, answer.windowStarts, now, plan, waitUntil);
      return answer.want;
    }
    this.stats.hits += 1;
    if (answer.topUp > 0) this.topUp(identifier, answer.topUp, now, plan, waitUntil);
    // the lease's units are this identifier's too: the caller is told them as remaining (Leases.settle)
    const decision = fromPool(answer.snapshot, answer.units, plan, now);
    return { decision, reserved: answer.extra, windowStarts: answer.windowStarts };
  }

  /**
   * Takes home's answer to a decision that reserved `want` units for the pool (and perhaps more for a
   * lease) and deposits the pool's share off the request path. Returns what is left for the lease,
   * with the decision the caller is told: home's, plus the units now on their way to the pool.
   */
  settle(
    identifier: string,
    reservation: Reservation,
    want: number,
    now: number,
    plan: PlanEncoding,
    waitUntil: WaitUntil | undefined,
  ): Reservation {
    const { decision, reserved, windowStarts } = reservation;
    const share = decision.allowed ? Math.min(want, reserved) : 0;
    if (share === 0) {
      this.free(identifier, now, plan, waitUntil);
      return reservation;
    }
    // An override applied other rules at home: its units are not this plan's to pool (nor to refund
    // under this plan's keys); they stay consumed until home's state expires.
    if (decision.plan !== plan.name) {
      this.stats.lost += share;
      this.free(identifier, now, plan, waitUntil);
      return { decision, reserved: reserved - share, windowStarts };
    }
    this.deposit(identifier, share, windowStarts, decision, now, plan, waitUntil);
    return { decision: withHeld(decision, share), reserved: reserved - share, windowStarts };
  }

  /**
   * The reservation the pool asked this isolate for at `now` brought it nothing (home denied, failed,
   * or had nothing to spare): lets another isolate of the region ask, off the request path.
   */
  free(identifier: string, now: number, plan: PlanEncoding, waitUntil: WaitUntil | undefined): void {
    this.track(this.unmark(identifier, now, plan), waitUntil);
  }

  private async unmark(identifier: string, now: number, plan: PlanEncoding): Promise<void> {
    await this.pool.free(this.key(plan, identifier), now);
  }

  /** Deletes the identifier's pools in the region (no refund: its state at home is gone too). */
  async reset(identifier: string, plans: Iterable<PlanEncoding>): Promise<void> {
    const keys = [...plans].map((plan) => this.key(plan, identifier));
    const reply = await this.transport.call(["DEL", ...keys], { timeout: this.timeout, breaker: false });
    if (!reply.ok) throw reply.error;
  }

  /**
   * Takes back what is left in every pool this Limiter deposited into, expired or not (other isolates
   * of the region refill it from home at their next miss), stops its timer, and resolves once every
   * deposit, top-up and refund sent so far is done.
   */
  async dispose(): Promise<void> {
    this.disposed = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    // a deposit still on its way is remembered when it lands: drain again until none is left
    do {
      this.sweep(this.clock(), undefined, true);
      while (this.pending.size > 0) await Promise.all([...this.pending]);
    } while (this.deposits.size > 0);
  }

  /**
   * Every pool this Limiter deposited into whose units are no longer handed out at `now`: asks it for
   * nothing (a take of 0), which takes out what is left for a refund at home, unless another isolate
   * did, or deposited again since. With `all` (dispose), every pool it deposited into, drained.
   */
  sweep(now: number, waitUntil: WaitUntil | undefined, all = false): void {
    let next = Number.POSITIVE_INFINITY;
    for (const [key, entry] of this.deposits) {
      if (entry.expiresAt > now && !all) {
        next = Math.min(next, entry.expiresAt);
        continue;
      }
      this.deposits.delete(key);
      const { identifier, plan } = entry;
      const asked = all
        ? this.pool.drain(key, now, plan.rules.length)
        : this.pool.take(key, 0, now, plan.rules.length);
      this.track(
        asked.then((answer) => {
          if (answer instanceof Error || answer.hit || answer.leftover === 0) return;
          return this.give(identifier, answer.leftover, answer.windowStarts, now, plan);
        }),
        waitUntil,
      );
    }
    this.nextExpiry = next;
  }

  private key(plan: PlanEncoding, identifier: string): string {
    return (plan.keys as RuleKeys).pool(identifier, plan.name);
  }

  /** A hit left the pool low: one decision of cost 1 goes home reserving `want` more, all for the pool. */
  private topUp(
    identifier: string,
    want: number,
    now: number,
    plan: PlanEncoding,
    waitUntil: WaitUntil | undefined,
  ): void {
    this.track(
      this.scripts.reserve(identifier, 1, now, want, plan).then((answer) => {
        if (answer instanceof Error || !answer.decision.allowed) return this.unmark(identifier, now, plan);
        if (answer.decision.plan !== plan.name) {
          this.stats.lost += 1 + answer.reserved;
          return this.unmark(identifier, now, plan);
        }
        const units = 1 + answer.reserved;
        return this.put(identifier, units, answer.windowStarts, answer.decision, now, plan, !waitUntil);
      }),
      waitUntil,
    );
  }

  private deposit(
    identifier: string,
    units: number,
    windowStarts: readonly number[],
    decision: Decision,
    now: number,
    plan: PlanEncoding,
    waitUntil: WaitUntil | undefined,
  ): void {
    this.track(this.put(identifier, units, windowStarts, decision, now, plan, !waitUntil), waitUntil);
  }

  /** Deposits units home reserved; what the pool cannot keep goes back home. */
  private async put(
    identifier: string,
    units: number,
    windowStarts: readonly number[],
    decision: Decision,
    now: number,
    plan: PlanEncoding,
    /** No waitUntil: a timer takes back the pool's leftovers once it expires. */
    background: boolean,
  ): Promise<void> {
    const snapshot = plan.rules.map((rule) => {
      const outcome = decision.rules[rule.name]!;
      return { remaining: outcome.remaining, resetAt: outcome.resetAt };
    });
    const deposit = { units, expiresAt: this.expiry(now, plan.rules, windowStarts), windowStarts, snapshot };
    const key = this.key(plan, identifier);
    const put = await this.pool.put(key, deposit, now);
    if (put instanceof Error) {
      // Refused before it was sent (the region's breaker is open): the units never left, give them back.
      // Any other failure may have reached the pool: giving them back too could admit them twice.
      if ((put as RedisCallError).kind === "breaker-open")
        await this.give(identifier, units, windowStarts, now, plan);
      else this.stats.lost += units;
      return;
    }
    this.stats.deposited += units - put.excess;
    this.remember(key, identifier, plan, deposit.expiresAt, background);
    const back: Promise<void>[] = [];
    if (put.leftover > 0) back.push(this.give(identifier, put.leftover, put.leftoverWindows, now, plan));
    if (put.excess > 0) back.push(this.give(identifier, put.excess, windowStarts, now, plan));
    await Promise.all(back);
  }

  private refund(
    identifier: string,
    units: number,
    windowStarts: readonly number[],
    now: number,
    plan: PlanEncoding,
    waitUntil: WaitUntil | undefined,
  ): void {
    this.track(this.give(identifier, units, windowStarts, now, plan), waitUntil);
  }

  /** Gives units back at home, where they were counted (the refund script). */
  private async give(
    identifier: string,
    units: number,
    windowStarts: readonly number[],
    now: number,
    plan: PlanEncoding,
  ): Promise<void> {
    const ok = await this.scripts.refund(identifier, units, windowStarts, now, plan);
    if (ok) this.stats.refunded += units;
    else this.stats.refundsFailed += 1;
  }

  /** Notes a pool deposited into, to take back what is left of it once it expires (see sweep). */
  private remember(
    key: string,
    identifier: string,
    plan: PlanEncoding,
    expiresAt: number,
    background: boolean,
  ): void {
    this.deposits.delete(key);
    this.deposits.set(key, { identifier, plan, expiresAt });
    // the oldest is forgotten: whoever asks that pool next takes its leftovers out
    if (this.deposits.size > MAX_TRACKED) this.deposits.delete(this.deposits.keys().next().value!);
    if (expiresAt < this.nextExpiry) this.nextExpiry = expiresAt;
    if (background) this.arm();
  }

  /** Node (no waitUntil): a timer that sweeps expired pools when no decision comes to do it. Unref'd. */
  private arm(): void {
    if (this.timer !== undefined || this.disposed || this.deposits.size === 0) return;
    const wait = Math.max(1, Math.min(MAX_TIMER_MS, this.nextExpiry - this.clock()));
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.sweep(this.clock(), undefined);
      this.arm();
    }, wait);
    (this.timer as { unref?: () => void }).unref?.();
  }

  private track(promise: Promise<unknown>, waitUntil: WaitUntil | undefined): void {
    this.pending.add(promise);
    promise.finally(() => this.pending.delete(promise));
    waitUntil?.(promise);
  }

  /**
   * A pool's units are handed out for at most ttl (and maxStale), and never past the end of a window
   * they were counted in: a unit of that window handed out in the next one would let it hold more.
   */
  private expiry(now: number, rules: readonly Rule[], windowStarts: readonly number[]): number {
    let expiresAt = now + Math.min(this.config.ttl, this.maxStale);
    rules.forEach((rule, i) => {
      if (rule.algorithm === "fixedWindow" || rule.algorithm === "slidingWindow") {
        expiresAt = Math.min(expiresAt, windowStarts[i]! + rule.window);
      }
    });
    return Math.floor(expiresAt);
  }
}

/** An admission from the pool: home's remaining as of the last deposit, plus what the pool holds now. */
function fromPool(
  snapshot: readonly { readonly remaining: number; readonly resetAt: number }[],
  units: number,
  plan: PlanEncoding,
  now: number,
): Decision {
  const rules: Record<string, RuleResult> = {};
  let binding = plan.rules[0]!.name;
  let least = Number.POSITIVE_INFINITY;
  plan.rules.forEach((rule, i) => {
    const { remaining, resetAt } = snapshot[i]!;
    const outcome = {
      allowed: true,
      limit: rule.limit,
      remaining: remaining + units,
      resetAt,
      retryAfter: 0,
    };
    rules[rule.name] = outcome;
    if (outcome.remaining < least) {
      least = outcome.remaining;
      binding = rule.name;
    }
  });
  const b = rules[binding]!;
  const decision: Decision = {
    ...b,
    rule: binding,
    source: "region",
    plan: plan.name,
    decidedAt: now,
    rules,
  };
  return decidedBy(decision, plan.rules);
}
