// The regional tier (tier.ts), its units kept in a database near the region's isolates (lua/pool.lua):
// a pool per identifier and plan, shared by every isolate of the region.
//
// - Answering: a decision asks the pool first (one EVALSHA on the region's database): it takes the
//   cost when the pool holds it and has not expired (`source: "region"`), and up to what the isolate
//   tier above wants for its lease; else the pool says "miss" and the decision passes on home, whose
//   answer is the truth.
// - Filling: on a miss the pool says how many units to reserve for it at home in the same EVALSHA:
//   about the region's demand for the identifier over the last ttl (the pool script keeps the
//   region's estimate), at most `max`, and only to one isolate of the region at a time (until its
//   deposit or a ttl). The pool's share is deposited off the request path (waitUntil, else in the
//   background); the rest goes up to the isolate tier.
// - Topping up: a hit that leaves the pool low asks its isolate to reserve a top-up at home in the
//   background, so that a warm identifier keeps being answered in the region.
// - Refunds: the first isolate that finds a pool past its expiry with units left takes them out (the
//   pool script does it atomically, so only one does) and gives them back at home; an isolate that
//   deposited into a pool asks it once it expires (sweep). A pool nobody asks again expires with its
//   units, which stay consumed at home until home's state expires: fewer admissions, never more.
import type { RedisCallError } from "./errors.js";
import type { PoolScript, PoolTake } from "./scripts/pool.js";
import type { Origin, PlanEncoding, Reservation } from "./scripts/shared.js";
import {
  type Answer,
  type Entry,
  fromHeld,
  type Home,
  leasable,
  mostRecent,
  Tier,
  type TierConfig,
  type Upstream,
  type WaitUntil,
  withHeld,
} from "./tier.js";
import type { Transport } from "./transport.js";
import type { Decision } from "./types.js";

/** What the regional tier runs on the region's database: the pool script's calls (scripts/pool.ts). */
export type PoolStore = Pick<PoolScript, "take" | "put" | "free" | "drain">;

/**
 * The counters of a Limiter's regional tiers (one per plan, sharing them): answers from the pool,
 * misses, failed asks, units deposited, units given back to home, refunds that failed, and units
 * reserved for a pool that never reached it (they stay consumed at home until its state expires).
 */
export interface RegionStats {
  hits: number;
  misses: number;
  errors: number;
  deposited: number;
  refunded: number;
  refundsFailed: number;
  lost: number;
}

/**
 * A Limiter's regional tiers, one per plan: the counters they share, and each other, so that a
 * decision under one plan also takes back the expired deposits of the others.
 */
export class RegionalTiers {
  readonly stats: RegionStats = {
    hits: 0,
    misses: 0,
    errors: 0,
    deposited: 0,
    refunded: 0,
    refundsFailed: 0,
    lost: 0,
  };
  readonly all: RegionalTier[] = [];
}

/**
 * Whether decisions under `rules` go through the region: only where units may be held (see
 * `leasable`), and not with `overrides: { maxStale: 0 }` (no answer may come from anywhere but home).
 */
export function servesRegion(rules: PlanEncoding["rules"], maxStale: number): boolean {
  return maxStale > 0 && leasable(rules);
}

/** The identifier's pool key under `plan` in the region's database. */
export function poolKey(plan: PlanEncoding, identifier: string): string {
  return plan.keys.pool(identifier, plan.name);
}

/**
 * Deletes the pools at `keys` in the region's database (no refund: the state at home is gone too).
 * Rejects when the region's database fails.
 */
export async function deletePools(
  transport: Transport,
  keys: readonly string[],
  timeout: number,
): Promise<void> {
  const reply = await transport.call(["DEL", ...keys], { timeout, breaker: false });
  if (!reply.ok) throw reply.error;
}

/**
 * The pools under `prefix` in the region's database of every subject one of whose tags is `tag` (rules
 * keyed by several fields): their subjects and plans. One SCAN of the whole database, its MATCH
 * narrowing what comes back, a page at a time. Rejects when the region's database fails.
 */
export async function poolsHolding(
  transport: Transport,
  prefix: string,
  tag: string,
  timeout: number,
): Promise<{ subject: string; plan: string }[]> {
  // a tag may hold the glob's own characters: matched as themselves
  const pattern = `${prefix}:*${tag.replace(/[*?[\]\\]/g, "\\$&")}*:pool.*`;
  const found: { subject: string; plan: string }[] = [];
  let cursor = "0";
  do {
    const reply = await transport.call(["SCAN", cursor, "MATCH", pattern, "COUNT", "1000"], {
      timeout,
      breaker: false,
    });
    if (!reply.ok) throw reply.error;
    const [next, keys] = reply.result as [unknown, unknown];
    if (!Array.isArray(keys)) throw new Error(`reset: the region answered SCAN with ${String(reply.result)}`);
    for (const key of keys as string[]) {
      // <prefix>:<subject, its tags>:pool.<plan>; a tag never holds "}", so the first "}:pool." ends it
      const end = key.indexOf("}:pool.", prefix.length);
      if (!key.startsWith(`${prefix}:{`) || end < 0) continue;
      found.push({ subject: key.slice(prefix.length + 1, end + 1), plan: key.slice(end + 7) });
    }
    cursor = String(next);
  } while (cursor !== "0");
  return found;
}

/**
 * The regional tier of one Limiter under one plan: answers from the region's pool, or passes on home
 * and fills the pool from home's answer.
 *
 * @example
 * const region = new RegionalTier(poolScript, { max: 500, ttl: 5000 }, home, new RegionalTiers(), clock);
 * const { decision } = await region.reserve("user:42", 1, now, 0); // source "region" on a hit
 */
export class RegionalTier extends Tier implements Upstream, Entry {
  /** The pools this tier deposited into, by key, until their units stop being handed out. */
  private readonly deposits = new Map<string, { identifier: string; expiresAt: number }>();
  /**
   * Deposits and top-ups on their way, from their reservation at home until their put is done, and
   * whose they are (a reset waits for them: landed).
   */
  private readonly filling = new Set<{ readonly identifier: string; readonly done: Promise<unknown> }>();
  private readonly count: number;
  readonly stats: RegionStats;

  constructor(
    private readonly pool: PoolStore,
    config: TierConfig,
    home: Home,
    private readonly tiers: RegionalTiers,
    clock: () => number,
    maxStale = Number.POSITIVE_INFINITY,
  ) {
    super(config, home, clock, maxStale);
    this.count = home.plan.rules.length;
    this.stats = tiers.stats;
    tiers.all.push(this);
  }

  protected get holding(): boolean {
    return this.deposits.size > 0;
  }

  /** The identifier's pool key in the region's database. */
  private key(identifier: string): string {
    return poolKey(this.home.plan, identifier);
  }

  /** This tier's step of the pipeline with no isolate tier above it: `reserve`, reserving nothing for a lease. */
  decide(identifier: string, cost: number, now: number, waitUntil: WaitUntil | undefined): Promise<Answer> {
    return this.reserve(identifier, cost, now, 0, waitUntil);
  }

  /**
   * Asks the identifier's pool for `cost` units, and up to `want` more for the isolate tier's lease:
   * when the pool answers, the Decision (`source: "region"`) and the units taken for the lease; else
   * home's answer to the decision, which also reserves what the pool asked for (deposited here) and
   * what `want` asked for (left in `reserved`). A failure of the region's database passes on home as
   * without a region.
   */
  async reserve(
    identifier: string,
    cost: number,
    now: number,
    want: number,
    waitUntil?: WaitUntil,
  ): Promise<Answer> {
    for (const tier of this.tiers.all) if (now >= tier.nextExpiry) tier.sweep(now, waitUntil);
    const answer = await this.pool.take(this.key(identifier), cost, now, this.count, want);
    if (answer instanceof Error) {
      this.stats.errors += 1;
      return this.fromHome(identifier, cost, now, want, 0, waitUntil);
    }
    // a reset holds off the pool's deposits and top-ups (holdOff): the pool asked for none after all
    const heldOff = answer.reserve > 0 && this.isHeldOff(identifier);
    if (heldOff) this.free(identifier, now, waitUntil);
    if (!answer.hit) {
      this.stats.misses += 1;
      if (answer.units > 0) this.track(this.giveBackLeftover(identifier, answer, now), waitUntil);
      return this.fromHome(identifier, cost, now, want, heldOff ? 0 : answer.reserve, waitUntil);
    }
    this.stats.hits += 1;
    if (answer.reserve > 0 && !heldOff) this.topUp(identifier, answer.reserve, now, waitUntil);
    // the lease's units are this identifier's too: the isolate tier tells the caller them as remaining
    const plan = this.home.plan;
    const decision = fromHeld(
      plan.rules,
      (rule, i) => {
        const { remaining, resetAt } = answer.snapshot[i]!;
        return { limit: rule.limit, remaining: remaining + answer.pooled, resetAt };
      },
      "region",
      plan.name,
      now,
    );
    const reservation: Reservation = {
      decision,
      reserved: answer.units,
      countedAt: answer.countedAt,
      // the lease's units come with their part of the pool's reservation (what a refund of them is bounded by)
      from: answer.origin,
      until: answer.until,
    };
    // settled where the pool's units were counted
    return { decision, reservation, held: reservation };
  }

  /**
   * Home decides, reserving `forPool` units for the pool beside what the isolate tier wants: the
   * pool's share is deposited, the rest goes up.
   */
  private fromHome(
    identifier: string,
    cost: number,
    now: number,
    want: number,
    forPool: number,
    waitUntil: WaitUntil | undefined,
  ): Promise<Answer> {
    if (forPool === 0) return this.home.reserve(identifier, cost, now, want);
    const answered = this.home.reserve(identifier, cost, now, forPool + want).then((answer) => {
      if (answer.reservation !== undefined)
        return this.deposit(identifier, answer, answer.reservation, forPool, now, waitUntil);
      this.free(identifier, now, waitUntil);
      return answer;
    });
    // the deposit's put, sent when home answers, is noted as filling in turn
    this.fills(identifier, answered);
    return answered;
  }

  /**
   * Takes the pool's share, `forPool` units, of home's answer and deposits it off the request path.
   * Returns what is left for the isolate tier, with the decision the caller is told: home's, plus the
   * units now on their way to the pool.
   */
  private deposit(
    identifier: string,
    answer: Answer,
    reservation: Reservation,
    forPool: number,
    now: number,
    waitUntil: WaitUntil | undefined,
  ): Answer {
    const { decision, reserved, countedAt } = reservation;
    const share = decision.allowed ? Math.min(forPool, reserved) : 0;
    if (share === 0) {
      this.free(identifier, now, waitUntil);
      return answer;
    }
    if (decision.plan !== this.home.plan.name) {
      this.free(identifier, now, waitUntil);
      this.track(this.elsewhere(identifier, decision, share, countedAt, now), waitUntil);
      return { decision, reservation: { decision, reserved: reserved - share, countedAt } };
    }
    const origin = { at: decision.decidedAt, taken: share };
    const put = this.put(identifier, share, countedAt, decision, origin, now, !waitUntil);
    this.track(put, waitUntil);
    this.fills(identifier, put);
    // the caller is told a copy (the pool's share counted as remaining): home's own goes with it
    const told = withHeld(decision, share);
    return {
      decision: told,
      reservation: { decision: told, reserved: reserved - share, countedAt },
      home: decision,
    };
  }

  /**
   * The reservation the pool asked this isolate for at `now` brought it nothing (home denied, failed,
   * or had nothing to spare): lets another isolate of the region ask, off the request path.
   */
  private free(identifier: string, now: number, waitUntil: WaitUntil | undefined): void {
    this.track(this.pool.free(this.key(identifier), now), waitUntil);
  }

  /**
   * Gives back `units` home reserved for the pool under another plan than this tier's (an override
   * applied other rules at home): not this plan's to pool, they go back under the rules that counted
   * them, as the isolate tier's do, so that an identifier with an override loses nothing however often
   * its pool asks.
   */
  private elsewhere(
    identifier: string,
    decision: Decision,
    units: number,
    countedAt: readonly number[],
    now: number,
  ): Promise<void> {
    const origin = { at: decision.decidedAt, taken: units };
    return this.giveBack(identifier, units, countedAt, now, this.appliedOf(decision), origin);
  }

  /** Gives back at home what a pool's miss (its callers checked it is one) took out of it, if anything. */
  private async giveBackLeftover(identifier: string, miss: PoolTake, now: number): Promise<void> {
    const { units, countedAt, origin } = miss;
    if (units > 0) await this.giveBack(identifier, units, countedAt, now, this.home.plan, origin);
  }

  /**
   * Takes back what is left in every pool this tier deposited into, expired or not (other isolates of
   * the region refill it from home at their next miss), stops its timer, and resolves once every
   * deposit, top-up and refund sent so far is done.
   */
  async dispose(): Promise<void> {
    this.stop();
    // a deposit still on its way is remembered when it lands: drain again until none is left
    do {
      this.takeBack(this.clock(), undefined, true);
      await this.drained();
    } while (this.deposits.size > 0);
  }

  sweep(now: number, waitUntil?: WaitUntil): void {
    this.takeBack(now, waitUntil, false);
  }

  /**
   * Takes every unit out of the identifier's pool, expired or not, and gives them back at home (a
   * reset of one of its fields: the rules keyed by the others keep their state). Rejects when the
   * region's database fails; a refund that fails is counted, as any other.
   */
  async takeOut(identifier: string, now: number): Promise<void> {
    const answer = await this.pool.drain(this.key(identifier), now, this.count);
    if (answer instanceof Error) throw answer;
    // a drain answers as a miss
    if (!answer.hit) await this.giveBackLeftover(identifier, answer, now);
  }

  /**
   * Every pool this tier deposited into whose units are no longer handed out at `now`: asks it for
   * nothing (a take of 0), which takes out what is left for a refund at home, unless another isolate
   * did, or deposited again since. With `all` (dispose), every pool it deposited into, drained.
   */
  private takeBack(now: number, waitUntil: WaitUntil | undefined, all: boolean): void {
    this.expire(this.deposits, all ? Number.POSITIVE_INFINITY : now, (key, entry) => {
      this.deposits.delete(key);
      const asked = all ? this.pool.drain(key, now, this.count) : this.pool.take(key, 0, now, this.count);
      // a take of 0 that hits took nothing out: nothing to give back
      this.track(
        asked.then((answer) =>
          answer instanceof Error || answer.hit
            ? undefined
            : this.giveBackLeftover(entry.identifier, answer, now),
        ),
        waitUntil,
      );
    });
  }

  /** A hit left the pool low: a top-up, one decision of cost 1 going home reserving `want` more, all for the pool. */
  private topUp(identifier: string, want: number, now: number, waitUntil: WaitUntil | undefined): void {
    const done = this.home.reserve(identifier, 1, now, want).then(({ reservation }): Promise<unknown> => {
      const key = this.key(identifier);
      if (reservation === undefined || !reservation.decision.allowed) return this.pool.free(key, now);
      const { decision, reserved, countedAt } = reservation;
      const units = 1 + reserved;
      if (decision.plan !== this.home.plan.name)
        return Promise.all([
          this.pool.free(key, now),
          this.elsewhere(identifier, decision, units, countedAt, now),
        ]);
      const origin = { at: decision.decidedAt, taken: units };
      return this.put(identifier, units, countedAt, decision, origin, now, !waitUntil);
    });
    this.track(done, waitUntil);
    this.fills(identifier, done);
  }

  /** Notes a deposit or a top-up of the identifier's pool on its way until `done` (see landed). */
  private fills(identifier: string, done: Promise<unknown>): void {
    const filling = { identifier, done };
    this.filling.add(filling);
    done.then(
      () => this.filling.delete(filling),
      () => this.filling.delete(filling),
    );
  }

  /**
   * Resolves once every deposit and top-up on its way of an identifier `holds` matches has landed in
   * its pool (a reset holds them off first: holdOff). A reset waits for them before it takes the
   * pools out or deletes them: one whose reservation at home landed before the reset's DEL but whose
   * put landed after would fill a pool with units the DEL erased.
   */
  async landed(holds: (identifier: string) => boolean): Promise<void> {
    for (;;) {
      const on = [...this.filling].filter(({ identifier }) => holds(identifier));
      if (on.length === 0) return;
      await Promise.allSettled(on.map(({ done }) => done));
    }
  }

  /** Deposits units home reserved (from `origin`); what the pool cannot keep goes back home. */
  private async put(
    identifier: string,
    units: number,
    countedAt: readonly number[],
    decision: Decision,
    origin: Origin,
    now: number,
    /** No waitUntil: a timer takes back the pool's leftovers once it expires. */
    background: boolean,
  ): Promise<void> {
    const plan = this.home.plan;
    if (this.disposed) {
      // disposed while home answered: no pool is filled any more (nobody here would take it back)
      await this.giveBack(identifier, units, countedAt, now, plan, origin);
      return;
    }
    const snapshot = plan.rules.map((rule) => {
      const outcome = decision.rules[rule.name]!;
      return { remaining: outcome.remaining, resetAt: outcome.resetAt };
    });
    const expiresAt = Math.floor(this.expiry(now, plan.rules, countedAt));
    const key = this.key(identifier);
    const put = await this.pool.put(key, { units, expiresAt, countedAt, snapshot, origin }, now);
    if (put instanceof Error) {
      // Refused before it was sent (the region's breaker is open): the units never left, give them back.
      // Any other failure may have reached the pool: giving them back too could admit them twice.
      if ((put as RedisCallError).kind === "breaker-open")
        await this.giveBack(identifier, units, countedAt, now, plan, origin);
      else this.stats.lost += units;
      return;
    }
    this.stats.deposited += units - put.excess;
    this.remember(key, identifier, expiresAt, background);
    const back: Promise<void>[] = [];
    if (put.leftover > 0)
      back.push(
        this.giveBack(identifier, put.leftover, put.leftoverCountedAt, now, plan, put.leftoverOrigin),
      );
    if (put.excess > 0) {
      // the pool kept the rest of the reservation's part: the excess goes back with its own
      const excess = { at: origin.at, taken: Math.min(put.excess, origin.taken) };
      back.push(this.giveBack(identifier, put.excess, countedAt, now, plan, excess));
    }
    await Promise.all(back);
  }

  /** Notes a pool deposited into, to take back what is left of it once it expires (see sweep). */
  private remember(key: string, identifier: string, expiresAt: number, background: boolean): void {
    // the oldest past MAX_TRACKED is forgotten: whoever asks that pool next takes its leftovers out
    mostRecent(this.deposits, key, { identifier, expiresAt });
    this.hold(expiresAt, background);
  }
}
