// The pool script (lua/pool.lua) as the engine calls it, on a region's own database: takes from a
// regional pool, or deposits units home reserved for it. The one place that knows its argument layout
// and what its replies mean.
import { POOL } from "../generated/scripts.js";
import type { CallOptions, Transport } from "../transport.js";
import { type Origin, type ScriptCallOptions, UNKNOWN, unexpected } from "./shared.js";

/**
 * What a regional pool answered to a take or a drain (lua/pool.lua): a hit answered the decision from
 * the pool, a miss leaves it to home. Either may hand over `units` counted at `countedAt`: a hit's
 * taken beside the cost for the caller's lease, a miss's taken out of a pool past its expiry (or
 * drained) for a refund at home.
 */
export interface PoolTake {
  readonly hit: boolean;
  /** Units the pool holds after a hit; 0 on a miss. */
  readonly pooled: number;
  /**
   * Units to reserve at home for the pool (a hit's beside a top-up decision's own unit, a miss's beside
   * this decision); 0: none.
   */
  readonly reserve: number;
  /**
   * A hit's: home's last answer, per rule in rule order: remaining (the pool's units left out) and
   * resetAt. Empty on a miss.
   */
  readonly snapshot: readonly { readonly remaining: number; readonly resetAt: number }[];
  /** Units handed over, counted at `countedAt`. */
  readonly units: number;
  readonly countedAt: readonly number[];
  /**
   * The reservation `units` came from, and how many of its units they are (a lease's part; a refund of
   * them is bounded by it).
   */
  readonly origin: Origin;
  /** A hit's: when the pool's units stop being handed out (its deposit's end, the caller's clock). */
  readonly until?: number;
}

/** What a deposit into a regional pool answered: what to refund at home, and in which windows. */
export interface PoolPut {
  /** Units of the pool before the deposit, past their expiry or of other windows. */
  readonly leftover: number;
  readonly leftoverCountedAt: readonly number[];
  /** The reservation the leftover came from. */
  readonly leftoverOrigin: Origin;
  /** Units of the deposit beyond `max` (counted in the deposit's windows). */
  readonly excess: number;
}

/** Units home reserved for a pool, with what the pool needs to answer from them. */
export interface Deposit {
  readonly units: number;
  /** Epoch ms (the caller's clock) from which they are no longer handed out. */
  readonly expiresAt: number;
  readonly countedAt: readonly number[];
  /** Home's answer, per rule in rule order: remaining (the deposit left out) and resetAt. */
  readonly snapshot: readonly { readonly remaining: number; readonly resetAt: number }[];
  /** When home counted them and how many of that reservation's units they are. */
  readonly origin: Origin;
}

/** Where units were counted, per rule (a Reservation's `countedAt`), as the pool stores it: "c1 c2 ...". */
const joinCountedAt = (countedAt: readonly number[]) => countedAt.map((at) => String(at)).join(" ");
const splitCountedAt = (text: unknown, n: number): number[] | undefined => {
  if (typeof text !== "string") return undefined;
  if (text === "") return new Array<number>(n).fill(0);
  const countedAt = text.split(" ").map(Number);
  return countedAt.length === n && countedAt.every(Number.isSafeInteger) ? countedAt : undefined;
};
/** A reservation as the pool answers it: its time and units, both whole (time 0: not known). */
const originOf = (at: unknown, taken: unknown): Origin | undefined => {
  if (typeof at !== "number" || typeof taken !== "number") return undefined;
  return at === 0 ? UNKNOWN : { at, taken };
};

/**
 * The pool script's calls on one region's database: a pool per identifier and plan, of at most `max`
 * units, each deposit handed out for at most `ttl` ms. Never rejects: a failure resolves to an Error.
 *
 * @example
 * const pool = new PoolScript(transportFor(nearby), { max: 500, ttl: 5000 }, { timeout: 1000, batchWindow: 0, breaker: true });
 * const answer = await pool.take(new RuleKeys("edgelimit", rules).pool("user:42", "default"), 1, Date.now(), rules.length);
 */
export class PoolScript {
  private readonly call: CallOptions;
  private readonly ttl: string;
  private readonly max: string;

  constructor(
    private readonly transport: Transport,
    config: { readonly max: number; readonly ttl: number },
    options: ScriptCallOptions,
  ) {
    this.call = { ...options, script: POOL };
    this.ttl = String(Math.max(1, Math.ceil(config.ttl)));
    this.max = String(config.max);
  }

  /**
   * Takes `cost` units (0 peeks) from the pool at `key` for a decision over `rules` rules, and up to
   * `extra` more for the caller's lease.
   */
  async take(key: string, cost: number, now: number, rules: number, extra = 0): Promise<PoolTake | Error> {
    const command = ["EVALSHA", POOL.sha1, "1", key, now.toString(16), "take", this.ttl, this.max];
    command.push(String(cost), String(extra));
    return this.ask(command, rules);
  }

  /**
   * Takes every unit out of the pool at `key`, expired or not, for a refund at home: answers as a
   * miss whose `leftover` is what was taken out (`want` 0).
   */
  async drain(key: string, now: number, rules: number): Promise<PoolTake | Error> {
    return this.ask(["EVALSHA", POOL.sha1, "1", key, now.toString(16), "drain", this.ttl, this.max], rules);
  }

  private async ask(command: string[], rules: number): Promise<PoolTake | Error> {
    const reply = await this.transport.call(command, this.call);
    if (!reply.ok) return reply.error;
    const result = reply.result;
    if (!Array.isArray(result) || (result.length !== 6 && result.length !== 9)) return unexpected(result);
    const [hit, a, b, text] = result as [unknown, unknown, unknown, unknown];
    if (typeof a !== "number" || typeof b !== "number") return unexpected(result);
    if (hit === 1 && result.length === 9) {
      const numbers = typeof text === "string" && text !== "" ? text.split(" ").map(Number) : [];
      const taken = result[4];
      const countedAt = splitCountedAt(result[5], rules);
      const origin = originOf(result[6], result[7]);
      if (numbers.length !== 2 * rules || !numbers.every(Number.isSafeInteger)) return unexpected(result);
      const until = result[8];
      if (typeof taken !== "number" || countedAt === undefined || origin === undefined)
        return unexpected(result);
      if (typeof until !== "number") return unexpected(result);
      const snapshot = [];
      for (let i = 0; i < rules; i++)
        snapshot.push({ remaining: numbers[2 * i]!, resetAt: numbers[2 * i + 1]! });
      return { hit: true, pooled: a, reserve: b, snapshot, units: taken, countedAt, origin, until };
    }
    const countedAt = b > 0 ? splitCountedAt(text, rules) : new Array<number>(rules).fill(0);
    const origin = originOf(result[4], result[5]);
    if (hit !== 0 || result.length !== 6 || countedAt === undefined || origin === undefined)
      return unexpected(result);
    return { hit: false, pooled: 0, reserve: a, snapshot: [], units: b, countedAt, origin };
  }

  /**
   * Lets another isolate reserve for the pool at `key`: the reservation a take asked for at `asked`
   * brought nothing. Resolves true when the pool ran it.
   */
  async free(key: string, asked: number): Promise<boolean> {
    const command = ["EVALSHA", POOL.sha1, "1", key, asked.toString(16), "free", this.ttl, this.max];
    command.push(String(asked));
    return (await this.transport.call(command, this.call)).ok;
  }

  /** Deposits units home reserved into the pool at `key`. */
  async put(key: string, deposit: Deposit, now: number): Promise<PoolPut | Error> {
    const snapshot = deposit.snapshot.flatMap((rule) => [String(rule.remaining), String(rule.resetAt)]);
    const least = Math.min(...deposit.snapshot.map((rule) => rule.remaining));
    const command = ["EVALSHA", POOL.sha1, "1", key, now.toString(16), "put", this.ttl, this.max];
    command.push(String(deposit.units), String(deposit.expiresAt), joinCountedAt(deposit.countedAt));
    command.push(snapshot.join(" "), String(least), `${deposit.origin.at} ${deposit.origin.taken}`);
    const reply = await this.transport.call(command, this.call);
    if (!reply.ok) return reply.error;
    const result = reply.result;
    if (!Array.isArray(result) || result.length !== 6) return unexpected(result);
    const [units, leftover, old, excess] = result as [unknown, unknown, unknown, unknown];
    if (typeof units !== "number" || typeof leftover !== "number" || typeof excess !== "number")
      return unexpected(result);
    const leftoverCountedAt =
      leftover > 0 ? splitCountedAt(old, deposit.countedAt.length) : deposit.countedAt.map(() => 0);
    const leftoverOrigin = originOf(result[4], result[5]);
    if (leftoverCountedAt === undefined || leftoverOrigin === undefined) return unexpected(result);
    return { leftover, leftoverCountedAt, leftoverOrigin, excess };
  }
}
