// The limiter's scripts as the engine calls them: the one place that knows their argument layouts and
// what their replies mean. Three kinds (scripts/build-lua.mjs builds them from lua/):
//  - a one-rule script per algorithm that has one (one rule, no reservation, a cost the rule can
//    admit): straight-line Lua answering one integer, decoded here per algorithm;
//  - the limiter script (lua/prelude.lua, the algorithms' checks, lua/dispatcher.lua): every other
//    decision, and reservations for leases; it answers 4 integers per rule (and, reserving, the
//    units reserved and the window each rule counted them in);
//  - the refund script (lua/refund.lua): gives a lease's unused units back;
//  - the settle script (lua/settle.lua): charges a decision what it really cost.
// Every rule is encoded once, when the Limiter is built, under the base rules and under each plan (a
// PlanEncoding each); a call looks its plan's up and adds its time and cost.
// With overrides on, every decision also reads the identifier's stored override: one GET more, in the
// same EVALSHA. One rule that a one-rule script takes runs that script's variant with overrides on
// (<name>OneRuleOverrides); every other decision runs limiterOverrides (lua/overrides.lua).
import { checkRule, type Rule, type RuleConfig, type WindowRule } from "./algorithms.js";
import { describe } from "./duration.js";
import { RedisCallError } from "./errors.js";
import {
  ALGORITHM_CONSTANTS,
  FIXED_WINDOW_ONE_RULE,
  FIXED_WINDOW_ONE_RULE_OVERRIDES,
  GCRA_ONE_RULE,
  GCRA_ONE_RULE_OVERRIDES,
  LIMITER,
  LIMITER_OVERRIDES,
  REFUND,
  SETTLE,
  SLIDING_WINDOW_ONE_RULE,
  SLIDING_WINDOW_ONE_RULE_OVERRIDES,
} from "./generated/scripts.js";
import type { RuleKeys } from "./keys.js";
import type { CallOptions, CallResult, Script, Transport } from "./transport.js";
import { type Decision, decidedBy, type RuleResult } from "./types.js";

/** A fixed window's key outlives its window by min(window, GRACE) ms (lua/algorithms/fixed_window.lua). */
const GRACE = ALGORITHM_CONSTANTS.fixedWindow.GRACE;
/** The sliding window's packed state holds counts below PACK (lua/algorithms/sliding_window.lua). */
const PACK = ALGORITHM_CONSTANTS.slidingWindow.PACK;
/** Below a limit of SMALL, the state also keeps where in each window its latest unit came (SLOTS a
 * window, both windows' in one number under SLOT), used once callers' clocks have disagreed. */
const { SMALL, SLOTS, SLOT } = ALGORITHM_CONSTANTS.slidingWindow;

/** What a decision that reserved units for a lease answers. */
export interface Reservation {
  readonly decision: Decision;
  /** Units taken beside the cost, for the lease. */
  readonly reserved: number;
  /**
   * Per rule, the start of the window the units were counted in; for gcra and the token bucket the TAT
   * they hold, rounded up to a ms (what a refund may give back is capped by it); 0 when none was taken.
   */
  readonly windowStarts: readonly number[];
}

/**
 * Where a decision counted its units, as a settle needs them: the rules that applied (a plan's, or a
 * stored override's), per rule the start of the window they were counted in (a sliding log's stamp;
 * for gcra and the token bucket the TAT they hold, rounded up to a ms), and per sliding log rule its
 * count after the decision, per gcra rule the time it counted from (0: unknown), else 0.
 */
export interface Counted {
  readonly applied: Applied;
  readonly starts: readonly number[];
  readonly counts: readonly number[];
}

/** How each call goes to Redis: its timeout, batching and breaker. */
export interface ScriptCallOptions {
  timeout: number;
  batchWindow: number;
  breaker: boolean;
}

/**
 * A rule as the limiter and refund scripts read it: the algorithm the script runs and three integer
 * parameters. A token bucket runs as GCRA (lua/algorithms/gcra.lua): limit = refillRate, period =
 * interval, burst = capacity.
 */
function encodeRule(rule: Rule): [string, string, string, string] {
  switch (rule.algorithm) {
    case "gcra":
      return ["gcra", String(rule.rate), String(rule.period), String(rule.burst)];
    case "tokenBucket":
      return ["gcra", String(rule.refillRate), String(rule.interval), String(rule.capacity)];
    default:
      return [rule.algorithm, String(rule.limit), String(rule.window), "0"];
  }
}

/**
 * The limiter script's arguments for `rules` at `now` for `cost`, reserving up to `reserve` more when
 * given. For tests that call the script directly.
 *
 * @example
 * redis.eval(LIMITER.text, limiter.keys("id"), limiterArgs(limiter.rules, now, 1))
 */
export function limiterArgs(rules: readonly Rule[], now: number, cost: number, reserve?: number): string[] {
  const args = [now.toString(16), String(cost), ...rules.flatMap(encodeRule)];
  if (reserve !== undefined) args.push(String(reserve));
  return args;
}

/** One rule's one-rule script: when it is taken, its arguments, and what its integer says. */
export interface OneRule {
  readonly sha1: string;
  readonly options: CallOptions;
  /** Whether a call for `cost` takes it (else the limiter script decides). */
  takes(cost: number): boolean;
  /** Appends the arguments for `cost` at `now`. */
  push(command: string[], cost: number, now: number): void;
  /** The rule's outcome from the script's integer, for `cost` at `now`. */
  decode(result: number, cost: number, now: number): RuleResult;
}

const ceilDiv = (a: number, b: number) => Math.floor((a + b - 1) / b);

/** The fixed window's: ARGV ms until the key expires, then cost and limit for a cost above 1. */
function fixedWindowOne(limit: number, window: number, options: CallOptions): OneRule {
  const limitArg = String(limit);
  return {
    sha1: options.script!.sha1,
    options,
    takes: (cost) => cost >= 1 && cost <= limit,
    push(command, cost, now) {
      const ends = now - (now % window) + window;
      command.push(String(ends + Math.min(window, GRACE) - now));
      if (cost !== 1) command.push(String(cost), limitArg);
    },
    decode: (count, cost, now) => fixedWindowOutcome(limit, window, count, cost, now),
  };
}

/**
 * The fixed window's outcome from its one-rule count (the window's count after adding the cost:
 * admitted iff count <= limit). A cost above the limit (an override lowered it) is never admitted.
 */
function fixedWindowOutcome(
  limit: number,
  window: number,
  count: number,
  cost: number,
  now: number,
): RuleResult {
  const ends = now - (now % window) + window;
  if (count <= limit) return { allowed: true, limit, remaining: limit - count, resetAt: ends, retryAfter: 0 };
  const before = count - cost;
  const never = cost > limit;
  return {
    allowed: false,
    limit,
    remaining: Math.max(0, limit - before),
    resetAt: never && before <= 0 ? now : ends,
    retryAfter: never ? Number.POSITIVE_INFINITY : ends - now,
  };
}

/** GCRA's (a token bucket's too): ARGV now (hexadecimal), cost, limit, period, burst. */
function gcraOne(rate: number, period: number, burst: number, options: CallOptions): OneRule {
  const tail = [String(rate), String(period), String(burst)] as const;
  return {
    sha1: options.script!.sha1,
    options,
    takes: (cost) => cost >= 1 && cost <= burst,
    push(command, cost, now) {
      command.push(now.toString(16), String(cost), tail[0], tail[1], tail[2]);
    },
    decode: (result, cost, now) => gcraOutcome(rate, period, burst, result, cost, now),
  };
}

/**
 * GCRA's one-rule integer: d after the cost when admitted, else -(d before) - 1. A cost above the
 * burst (a stored override lowered it) is never admitted.
 */
function gcraOutcome(
  rate: number,
  period: number,
  burst: number,
  result: number,
  cost: number,
  now: number,
): RuleResult {
  // d: how far TAT lies ahead of now, in 1/rate ms; after the cost when admitted
  const capacity = burst * period;
  const allowed = result >= 0;
  const d = allowed ? result : -result - 1;
  return {
    allowed,
    limit: burst,
    remaining: Math.max(0, Math.floor((capacity - d) / period)),
    resetAt: now + ceilDiv(d, rate),
    retryAfter: allowed
      ? 0
      : cost > burst
        ? Number.POSITIVE_INFINITY
        : ceilDiv(d + cost * period - capacity, rate),
  };
}

/** The sliding window's (limit below PACK): ARGV now (hexadecimal), cost, limit, window. */
function slidingWindowOne(limit: number, window: number, options: CallOptions): OneRule {
  const tail = [String(limit), String(window)] as const;
  return {
    sha1: options.script!.sha1,
    options,
    takes: (cost) => cost >= 1 && cost <= limit,
    push(command, cost, now) {
      command.push(now.toString(16), String(cost), tail[0], tail[1]);
    },
    decode: (result, cost, now) => slidingWindowOutcome(limit, window, result, cost, now),
  };
}

/**
 * The sliding window's one-rule integer, n when admitted and -n - 1 when denied, with
 * n = counts * 4 + newer * 2 + slotted (lua/algorithms/sliding_window.lua): its counts (current after
 * the cost when admitted) and, slotted, where in each window its latest unit came and whether callers'
 * clocks have disagreed; and whether a lagging caller was counted in the next window. A cost above the limit (a stored override lowered it) is
 * never admitted.
 */
function slidingWindowOutcome(
  limit: number,
  window: number,
  result: number,
  cost: number,
  now: number,
): RuleResult {
  const allowed = result >= 0;
  const n = allowed ? result : -result - 1;
  const slotted = n % 2;
  const newer = Math.floor(n / 2) % 2;
  let counts = Math.floor(n / 4);
  let skewed = 0;
  let slots = 0;
  let current: number;
  if (slotted === 1) {
    skewed = counts % 2;
    counts = (counts - skewed) / 2;
    slots = Math.floor(counts / SLOT);
    counts -= slots * SLOT;
    current = Math.floor(counts / SMALL);
  } else {
    current = Math.floor(counts / PACK);
  }
  const previous = counts - current * (slotted === 1 ? SMALL : PACK);
  // once callers' clocks disagreed, each window's units spread up to the slot of its latest one
  const spreadOf = (slot: number) => (skewed === 1 ? slotSpan(slot, window) : window);
  const start = now - (now % window) + newer * window;
  const elapsed = Math.max(0, now - start);
  const spread = spreadOf(slots % SLOTS);
  const weight = Math.max(0, spread - elapsed);
  let room = Math.floor((limit * spread - previous * weight - current * spread) / spread);
  if (allowed) return { allowed, limit, remaining: room, resetAt: start + 2 * window, retryAfter: 0 };
  // a unit that would spread this window's units later than the room it leaves covers (lua's `late`)
  const latest = Math.floor(slots / SLOTS);
  const slot = Math.floor(((now - start) * SLOTS) / window);
  const late =
    skewed === 1 &&
    current > 0 &&
    now > start &&
    slot > latest &&
    current * (slotSpan(slot, window) - slotSpan(latest, window)) > (limit - current) * window;
  if (late) room = Math.min(room, 0);
  const resetAt = current > 0 ? start + 2 * window : previous > 0 ? start + window : now;
  let retryAfter: number;
  if (cost > limit) {
    retryAfter = Number.POSITIVE_INFINITY;
  } else if (current + cost <= limit && !late) {
    // the previous window's weight has to fade (see the check in lua/algorithms/sliding_window.lua)
    const fade = spread - Math.floor(((limit - current - cost) * spread) / previous);
    retryAfter = Math.max(1, start + fade - now);
  } else {
    const own = spreadOf(latest);
    const fade = Math.max(0, own - Math.floor(((limit - cost) * own) / current));
    retryAfter = start + window - now + fade;
  }
  return { allowed, limit, remaining: Math.max(0, room), resetAt, retryAfter };
}

/** Ms from a window's start to the end of `slot`, one of SLOTS equal parts (rounded up). */
function slotSpan(slot: number, window: number): number {
  return Math.floor(((slot + 1) * window + SLOTS - 1) / SLOTS);
}

/** The one-rule script of `rule`, when its algorithm has one that fits it. */
function oneRuleOf(rule: Rule, options: ScriptCallOptions): OneRule | undefined {
  const call = (script: Script): CallOptions => ({ ...options, script });
  switch (rule.algorithm) {
    case "fixedWindow":
      return fixedWindowOne(rule.limit, rule.window, call(FIXED_WINDOW_ONE_RULE));
    case "gcra":
      return gcraOne(rule.rate, rule.period, rule.burst, call(GCRA_ONE_RULE));
    case "tokenBucket":
      return gcraOne(rule.refillRate, rule.interval, rule.capacity, call(GCRA_ONE_RULE));
    case "slidingWindow":
      // the packed state holds counts below PACK: a larger limit keeps a text state, which the
      // one-rule script does not read
      return rule.limit < PACK
        ? slidingWindowOne(rule.limit, rule.window, call(SLIDING_WINDOW_ONE_RULE))
        : undefined;
    default:
      return undefined;
  }
}

/**
 * What one plan sends, computed once when the Limiter is built: its rules, their keys and encoded
 * arguments, and its one-rule script when it takes one. A decision under a plan costs a Map lookup.
 */
export interface PlanEncoding {
  /** "default" for the base rules, else the plan's name: what a Decision's `plan` says. */
  readonly name: string;
  readonly rules: readonly Rule[];
  readonly keys: RuleKeys;
  /** Every rule's four arguments, in rule order. */
  readonly args: readonly string[];
  readonly one: OneRule | undefined;
  /** The number of rules, as the EVALSHA's key count. */
  readonly count: string;
  /** With overrides on: the plan table limiterOverrides reads (lua/overrides.lua), for a call under this plan. */
  readonly table?: string;
  /** With overrides on: the other plans' window keys the table points at (KEYS after the override key). */
  readonly windows?: readonly { readonly plan: PlanEncoding; readonly rule: number }[];
  /** With overrides on: one fixed window, which takes fixedWindowOneRuleOverrides for a cost up to its limit. */
  readonly fixed?: boolean;
  /**
   * With overrides on: the one-rule script's variant that also reads the stored override, for a cost
   * `one` takes (one GCRA, token bucket or sliding window rule).
   */
  readonly lean?: CallOptions;
}

/** The rules a stored override applied: a plan's, the custom ones, or the base rules when it is stale. */
export interface Applied {
  readonly name: string;
  readonly rules: readonly Rule[];
}

/** How many decoded override lines RuleScripts keeps (a custom line is decoded once). */
const APPLIED_ENTRIES = 1000;
/** Override lines already warned about, once per isolate each. */
const warned = new Set<string>();
function stale(line: string, why: string): void {
  if (warned.has(line) || warned.size >= APPLIED_ENTRIES) return;
  warned.add(line);
  console.warn(`edgelimit: stored override "${line}" ${why}; the base rules apply ("default")`);
}

/** A plan as RuleScripts takes it: its name, compiled rules and keys. */
export interface PlanRules {
  readonly name: string;
  readonly rules: readonly Rule[];
  readonly keys: RuleKeys;
}

/**
 * Sends a Limiter's decisions, reservations and refunds, each as one EVALSHA through the transport.
 * Never rejects: a failure (Redis, the transport, an answer it cannot read) resolves to an Error.
 * Every call takes the plan it decides under (default: the base rules).
 *
 * @example
 * const scripts = new RuleScripts(limiter.rules, new RuleKeys("edgelimit", limiter.rules), transport, options);
 * const decision = await scripts.decide("user:42", 1, Date.now()); // a Decision, or an Error
 */
export class RuleScripts {
  private readonly limiterCall: CallOptions;
  private readonly refundCall: CallOptions;
  private readonly settleCall: CallOptions;
  private readonly overridesCall: CallOptions | undefined;
  private readonly fixedCall: CallOptions;
  /** Decoded override lines (LRU), with overrides on. */
  private readonly applied = new Map<string, Applied>();
  /** The base rules' encoding ("default"). */
  readonly base: PlanEncoding;
  /** Every encoding by plan name, "default" included. */
  readonly plans: ReadonlyMap<string, PlanEncoding>;

  /**
   * `plans`: the other plans beside the base rules. With any, a fixed window never takes its one-rule
   * script: that script leaves a denial's INCR in a full window's count, harmless while the limit stays,
   * but a plan that raises the limit would then admit less than it should. The limiter script counts
   * admissions only, so counts stay exact across a change of plan.
   *
   * `overrides`: every decision also reads the identifier's stored override, since it may change the
   * rule's parameters: a one-rule script's variant that reads it, else limiterOverrides.
   */
  constructor(
    rules: readonly Rule[],
    keys: RuleKeys,
    private readonly transport: Transport,
    options: ScriptCallOptions,
    plans: readonly PlanRules[] = [],
    overrides = false,
  ) {
    this.limiterCall = { ...options, script: LIMITER };
    this.refundCall = { ...options, script: REFUND };
    this.settleCall = { ...options, script: SETTLE };
    this.overridesCall = overrides ? { ...options, script: LIMITER_OVERRIDES } : undefined;
    this.fixedCall = { ...options, script: FIXED_WINDOW_ONE_RULE_OVERRIDES };
    const exact = plans.length > 0 || overrides;
    const encode = ({ name, rules, keys }: PlanRules): PlanEncoding => {
      const only = rules.length === 1 ? rules[0]! : undefined;
      const one =
        only === undefined || (exact && only.algorithm === "fixedWindow")
          ? undefined
          : oneRuleOf(only, options);
      return { name, rules, keys, args: rules.flatMap(encodeRule), one, count: String(rules.length) };
    };
    this.base = encode({ name: "default", rules, keys });
    const all = new Map<string, PlanEncoding>([["default", this.base]]);
    for (const plan of plans) all.set(plan.name, encode(plan));
    this.plans = overrides ? withTables(all, options) : all;
  }

  /**
   * Decides `cost` units of `identifier` at `now` under `plan`, reserving nothing: a Decision, or an
   * Error. With `then`, resolves with what it makes of that instead (in the call's own promise: no
   * second one).
   */
  decide(identifier: string, cost: number, now: number): Promise<Decision | Error>;
  decide<T>(
    identifier: string,
    cost: number,
    now: number,
    then: (decision: Decision | Error) => T,
    plan?: PlanEncoding,
  ): Promise<T>;
  decide<T>(
    identifier: string,
    cost: number,
    now: number,
    then?: (decision: Decision | Error) => T,
    plan: PlanEncoding = this.base,
  ): Promise<T | Decision | Error> {
    const keys = plan.keys.of(identifier, now);
    if (this.overridesCall !== undefined) {
      const rule = plan.rules[0] as WindowRule;
      if (plan.fixed && cost >= 1 && cost <= rule.limit) {
        return this.transport.callThen(
          this.fixedCommand(plan, identifier, keys, cost, now),
          this.fixedCall,
          (reply) => {
            const decision = reply.ok ? this.decodeOneRule(plan, reply.result, cost, now) : reply.error;
            return then === undefined ? decision : then(decision);
          },
        );
      }
      const lean = plan.lean;
      if (lean !== undefined && plan.one!.takes(cost)) {
        return this.transport.callThen(
          this.leanCommand(plan, lean, identifier, keys, cost, now),
          lean,
          (reply) => {
            const decision = reply.ok ? this.decodeOneRule(plan, reply.result, cost, now) : reply.error;
            return then === undefined ? decision : then(decision);
          },
        );
      }
      return this.transport.callThen(
        this.overridesCommand(plan, identifier, keys, cost, now, undefined),
        this.overridesCall,
        (reply) => {
          const decision = reply.ok ? this.decodeStored(plan, reply.result, false, now) : reply.error;
          return then === undefined ? decision : then(decision);
        },
      );
    }
    const one = plan.one;
    if (one?.takes(cost)) {
      const command = ["EVALSHA", one.sha1, "1", keys[0]!];
      one.push(command, cost, now);
      return this.transport.callThen(command, one.options, (reply) => {
        const decision = oneRuleDecision(plan, one, reply, cost, now);
        return then === undefined ? decision : then(decision);
      });
    }
    return this.transport.callThen(
      this.command(plan, keys, cost, now, undefined),
      this.limiterCall,
      (reply) => {
        const decision = reply.ok ? decode(plan, reply.result, false, now) : reply.error;
        return then === undefined ? decision : then(decision);
      },
    );
  }

  /** Decides `cost` units of `identifier` at `now` under `plan`, reserving up to `want` more for a lease. */
  async reserve(
    identifier: string,
    cost: number,
    now: number,
    want: number,
    plan: PlanEncoding = this.base,
  ): Promise<Reservation | Error> {
    const keys = plan.keys.of(identifier, now);
    const reply =
      this.overridesCall === undefined
        ? await this.transport.call(this.command(plan, keys, cost, now, want), this.limiterCall)
        : await this.transport.call(
            this.overridesCommand(plan, identifier, keys, cost, now, want),
            this.overridesCall,
          );
    if (!reply.ok) return reply.error;
    const decision = this.decodeStored(plan, reply.result, true, now);
    if (decision instanceof Error) return decision;
    const result = reply.result as unknown[];
    const at = 4 * plan.rules.length;
    const windowStarts = plan.rules.map((_, i) => Number(result[at + 1 + i]));
    return { decision, reserved: Number(result[at]), windowStarts };
  }

  /**
   * Gives `units` of `identifier` back under every rule `applied` (a plan's, or a custom override's:
   * the rules the units were counted under), each in the window it counted them in (`windowStarts`,
   * as a reservation answered them). Resolves true when Redis ran it.
   */
  async refund(
    identifier: string,
    units: number,
    windowStarts: readonly number[],
    now: number,
    applied: Applied = this.base,
  ): Promise<boolean> {
    // a plan's own encoding when these are its rules (its keys and arguments are computed once)
    const own = this.plans.get(applied.name);
    const plan: Applied = own !== undefined && own.rules === applied.rules ? own : applied;
    const keys = this.keysOf(plan, identifier, now, windowStarts);
    const command = ["EVALSHA", REFUND.sha1, String(keys.length), ...keys, now.toString(16), String(units)];
    plan.rules.forEach((rule, i) => {
      command.push(...this.givingBack(rule, i), String(windowStarts[i] ?? 0));
    });
    const reply = await this.transport.call(command, this.refundCall);
    return reply.ok;
  }

  /**
   * Where an admitted Decision from Redis counted its units, read from the decision itself (nothing is
   * kept per decision): the rules that applied (its plan's, or a custom override's), and per rule
   *   gcra, token bucket  the TAT its units hold (its resetAt: a refund gives back no units since
   *                       earned back) and the time it counted from, `decidedAt`;
   *   fixed window        the window of `decidedAt` (the time it was decided at, and counted in);
   *   sliding window      the window whose counter it took (a lagging caller's may be the next one):
   *                       an admission's resetAt is that window's start plus two windows;
   *   sliding log         its entries' stamp (an admission's resetAt is the stamp plus the window) and
   *                       the count after it, limit - remaining (sliding logs are never leased, so
   *                       remaining is Redis's own).
   */
  counted(decision: Decision): Counted {
    // the decision carries the rules it was decided by: a plan's (by name, with its keys) or a custom override's
    const own = this.plans.get(decision.plan);
    const custom = decision.decidedBy;
    const applied: Applied =
      decision.plan === "custom" && custom !== undefined
        ? { name: "custom", rules: custom }
        : (own ?? this.base);
    const now = decision.decidedAt;
    const starts: number[] = [];
    const counts: number[] = [];
    for (const rule of applied.rules) {
      const outcome = decision.rules[rule.name]!;
      let start = 0;
      let count = 0;
      if (rule.algorithm === "gcra" || rule.algorithm === "tokenBucket") {
        start = outcome.resetAt;
        count = now;
      } else if (rule.algorithm === "fixedWindow") start = now - (now % rule.window);
      else if (rule.algorithm === "slidingWindow") start = outcome.resetAt - 2 * rule.window;
      else if (rule.algorithm === "slidingLog") {
        start = outcome.resetAt - rule.window;
        count = rule.limit - outcome.remaining;
      }
      starts.push(start);
      counts.push(count);
    }
    return { applied, starts, counts };
  }

  /**
   * Charges a decision of `identifier` that took `cost` units what it really cost, `actual` (whole,
   * not `cost`), at `now`, under every rule it was counted under: one EVALSHA of the settle script
   * (lua/settle.lua). Giving back, a fixed window's key is the window the units were counted in;
   * charging more, the window of `now`. Resolves with the transport's result (never rejects).
   */
  settle(
    identifier: string,
    counted: Counted,
    cost: number,
    actual: number,
    now: number,
  ): Promise<CallResult> {
    const { applied, starts, counts } = counted;
    const keys = this.keysOf(applied, identifier, now, actual < cost ? starts : undefined);
    const command = ["EVALSHA", SETTLE.sha1, String(keys.length), ...keys];
    command.push(now.toString(16), String(cost), String(actual));
    applied.rules.forEach((rule, i) => {
      const mark =
        rule.algorithm === "slidingLog"
          ? counts[i]! - cost
          : rule.algorithm === "gcra" || rule.algorithm === "tokenBucket"
            ? (counts[i] ?? 0)
            : 0;
      command.push(...this.givingBack(rule, i), String(starts[i] ?? 0), String(mark));
    });
    return this.transport.call(command, this.settleCall);
  }

  /**
   * Rule `i`'s arguments for a refund or a settle. A fixed window reads a count above the limit it is
   * given as that limit (a denial's overshoot); plans that keep a window share its key, so the limit
   * given is the highest of any plan for that window: units a higher plan admitted are never wiped by
   * a lower plan's refund (a lower plan's overshoot may then stay: fewer admitted, never more).
   */
  private givingBack(rule: Rule, i: number): [string, string, string, string] {
    const args = encodeRule(rule);
    if (rule.algorithm !== "fixedWindow") return args;
    let limit = rule.limit;
    for (const plan of this.plans.values()) {
      const other = plan.rules[i];
      if (other?.algorithm === "fixedWindow" && other.window === rule.window)
        limit = Math.max(limit, other.limit);
    }
    args[1] = String(limit);
    return args;
  }

  /**
   * The keys of `identifier` under the rules `applied` (a plan's, or a custom override's: each rule's
   * key is that of a plan with its window, as lua/overrides.lua reads it), at `now` or, per rule, at
   * `starts`.
   */
  private keysOf(applied: Applied, identifier: string, now: number, starts?: readonly number[]): string[] {
    const own = (applied as Partial<PlanEncoding>).keys;
    if (own !== undefined) return own.of(identifier, now, starts);
    return applied.rules.map((rule, i) => {
      let plan = this.base;
      if ("window" in rule) {
        for (const candidate of this.plans.values()) {
          if ((candidate.rules[i] as WindowRule).window === rule.window) {
            plan = candidate;
            break;
          }
        }
      }
      return plan.keys.of(identifier, now, starts)[i]!;
    });
  }

  /**
   * limiterOverrides' EVALSHA: the plan's keys, the override key, the other windows' keys; the limiter
   * script's arguments, reserve ("" for none), the plan's table.
   */
  private overridesCommand(
    plan: PlanEncoding,
    identifier: string,
    keys: string[],
    cost: number,
    now: number,
    reserve: number | undefined,
  ): string[] {
    const windows = plan.windows ?? [];
    const command = ["EVALSHA", LIMITER_OVERRIDES.sha1, String(keys.length + 1 + windows.length)];
    for (const key of keys) command.push(key);
    command.push(plan.keys.override(identifier));
    for (const { plan: other, rule } of windows) command.push(other.keys.of(identifier, now)[rule]!);
    command.push(now.toString(16), String(cost));
    for (const arg of plan.args) command.push(arg);
    command.push(reserve === undefined ? "" : String(reserve), plan.table!);
    return command;
  }

  /**
   * fixedWindowOneRuleOverrides' EVALSHA (one fixed window): the window's key, the override key, the
   * other windows' keys; ms until the key expires, cost, limit, window, now, the plan's table.
   */
  private fixedCommand(
    plan: PlanEncoding,
    identifier: string,
    keys: string[],
    cost: number,
    now: number,
  ): string[] {
    const windows = plan.windows ?? [];
    const { limit, window } = plan.rules[0] as WindowRule;
    const command = ["EVALSHA", FIXED_WINDOW_ONE_RULE_OVERRIDES.sha1, String(2 + windows.length), keys[0]!];
    command.push(plan.keys.override(identifier));
    for (const { plan: other, rule } of windows) command.push(other.keys.of(identifier, now)[rule]!);
    const ends = now - (now % window) + window;
    command.push(String(ends + Math.min(window, GRACE) - now), String(cost), String(limit), String(window));
    command.push(now.toString(16), plan.table!);
    return command;
  }

  /**
   * A one-rule variant's EVALSHA (gcraOneRuleOverrides, slidingWindowOneRuleOverrides): the rule's key,
   * the override key, the other windows' keys; the one-rule script's arguments, then the plan's table.
   */
  private leanCommand(
    plan: PlanEncoding,
    lean: CallOptions,
    identifier: string,
    keys: string[],
    cost: number,
    now: number,
  ): string[] {
    const windows = plan.windows!;
    const command = ["EVALSHA", lean.script!.sha1, String(2 + windows.length), keys[0]!];
    command.push(plan.keys.override(identifier));
    for (const { plan: other, rule } of windows) command.push(other.keys.of(identifier, now)[rule]!);
    plan.one!.push(command, cost, now);
    command.push(plan.table!);
    return command;
  }

  /**
   * The Decision of a one-rule override script's reply (fixedWindow, gcra, tokenBucket, slidingWindow):
   * the one-rule integer, or it and the stored line, decoded under the rule that line applies.
   */
  private decodeOneRule(plan: PlanEncoding, result: unknown, cost: number, now: number): Decision | Error {
    let applied: Applied = plan;
    let value = result;
    if (Array.isArray(result) && result.length === 2 && typeof result[1] === "string") {
      applied = this.appliedOf(result[1]);
      value = result[0];
    }
    if (typeof value !== "number" || !Number.isInteger(value)) return unexpected(result);
    const rule = applied.rules[0]!;
    const outcome =
      rule.algorithm === "gcra"
        ? gcraOutcome(rule.rate, rule.period, rule.burst, value, cost, now)
        : rule.algorithm === "tokenBucket"
          ? gcraOutcome(rule.refillRate, rule.interval, rule.capacity, value, cost, now)
          : rule.algorithm === "fixedWindow"
            ? fixedWindowOutcome(rule.limit, rule.window, value, cost, now)
            : slidingWindowOutcome(rule.limit, rule.window, value, cost, now);
    const rules: Record<string, RuleResult> = {};
    rules[rule.name] = outcome;
    const decision: Decision = {
      allowed: outcome.allowed,
      limit: outcome.limit,
      remaining: outcome.remaining,
      resetAt: outcome.resetAt,
      retryAfter: outcome.retryAfter,
      rule: rule.name,
      source: "redis",
      plan: applied.name,
      decidedAt: now,
      rules,
    };
    return decidedBy(decision, applied.rules);
  }

  /**
   * The Decision of a limiter script's reply that may end in a stored override's line (with overrides
   * on): decided by the rules that line names.
   */
  private decodeStored(
    plan: PlanEncoding,
    result: unknown,
    reserving: boolean,
    now: number,
  ): Decision | Error {
    const n = plan.rules.length;
    if (!Array.isArray(result) || result.length !== 4 * n + (reserving ? 2 + n : 1)) {
      return decode(plan, result, reserving, now);
    }
    const line = result[result.length - 1];
    if (typeof line !== "string") return unexpected(result);
    return decode(this.appliedOf(line), result.slice(0, -1), reserving, now);
  }

  /** What a stored override's line applies, as lua/overrides.lua reads it; decoded once per line. */
  private appliedOf(line: string): Applied {
    const cached = this.applied.get(line);
    if (cached !== undefined) {
      this.applied.delete(line);
      this.applied.set(line, cached);
      return cached;
    }
    const applied = decodeLine(line, this.plans, this.base);
    if (this.applied.size >= APPLIED_ENTRIES) this.applied.delete(this.applied.keys().next().value!);
    this.applied.set(line, applied);
    return applied;
  }

  /** The limiter script's EVALSHA: keys, now (hexadecimal: cheaper for Redis to parse), cost, rules, reserve. */
  private command(
    plan: PlanEncoding,
    keys: string[],
    cost: number,
    now: number,
    reserve: number | undefined,
  ): string[] {
    const command = ["EVALSHA", LIMITER.sha1, plan.count];
    for (const key of keys) command.push(key);
    command.push(now.toString(16), String(cost));
    for (const arg of plan.args) command.push(arg);
    if (reserve !== undefined) command.push(String(reserve));
    return command;
  }
}

const WINDOWS = new Set(["fixedWindow", "slidingWindow"]);

/**
 * Adds the plan table and other windows' keys to every encoding (overrides on). A fixed or sliding
 * window that another plan gives another window has a key of its own there (RuleKeys): a call declares
 * one key per such window beside its own, and the table gives each plan's rule the KEYS index of its
 * key (0: the call's own).
 */
function withTables(
  all: ReadonlyMap<string, PlanEncoding>,
  options: ScriptCallOptions,
): Map<string, PlanEncoding> {
  const out = new Map<string, PlanEncoding>();
  for (const call of all.values()) {
    const n = call.rules.length;
    const windows: { plan: PlanEncoding; rule: number }[] = [];
    const index = new Map<string, number>();
    let table = "\n";
    for (const plan of all.values()) {
      table += plan.name;
      for (let i = 0; i < n; i++) {
        const rule = plan.rules[i]!;
        let k = 0;
        const window = "window" in rule ? rule.window : 0;
        if (WINDOWS.has(rule.algorithm) && window !== (call.rules[i] as { window: number }).window) {
          const id = `${i}:${window}`;
          k = index.get(id) ?? 0;
          if (k === 0) {
            windows.push({ plan, rule: i });
            k = n + 1 + windows.length;
            index.set(id, k);
          }
        }
        table += ` ${plan.args[4 * i + 1]} ${plan.args[4 * i + 2]} ${plan.args[4 * i + 3]} ${k}`;
      }
      table += "\n";
    }
    const fixed = n === 1 && call.rules[0]!.algorithm === "fixedWindow";
    // one rule with a one-rule script (a sliding window's limit below PACK: plans and overrides keep
    // it there) takes that script's variant
    const algorithm = call.one === undefined ? undefined : call.rules[0]!.algorithm;
    const lean =
      algorithm === "gcra" || algorithm === "tokenBucket"
        ? { ...options, script: GCRA_ONE_RULE_OVERRIDES }
        : algorithm === "slidingWindow"
          ? { ...options, script: SLIDING_WINDOW_ONE_RULE_OVERRIDES }
          : undefined;
    out.set(call.name, { ...call, table, windows, fixed, lean });
  }
  return out;
}

/** The rules a stored override's line applies (lua/overrides.lua decides the same). */
function decodeLine(line: string, plans: ReadonlyMap<string, PlanEncoding>, base: PlanEncoding): Applied {
  if (line.startsWith("=")) {
    const plan = plans.get(line.slice(1));
    if (plan !== undefined) return plan;
    stale(line, "names a plan this Limiter does not have");
    return base;
  }
  const tokens = line.startsWith("!")
    ? line
        .slice(1)
        .split(" ")
        .filter((t) => t !== "")
    : [];
  const rules: Rule[] = [];
  if (tokens.length === 4 * base.rules.length) {
    for (let i = 0; i < base.rules.length; i++) {
      const own = base.rules[i]!;
      const [algorithm, p1, p2, p3] = tokens.slice(4 * i, 4 * i + 4).map(String) as [
        string,
        string,
        string,
        string,
      ];
      if (algorithm !== base.args[4 * i]) break;
      if (WINDOWS.has(algorithm) && ![...plans.values()].some((plan) => plan.args[4 * i + 2] === p2)) break;
      const a = Number(p1);
      // a sliding window's counts change format at PACK: a line across it is stale (lua/override.lua)
      if (algorithm === "slidingWindow" && a < PACK !== own.limit < PACK) break;
      const b = Number(p2);
      const c = Number(p3);
      const config: RuleConfig =
        own.algorithm === "gcra"
          ? { algorithm: "gcra", limit: a, period: b, burst: c }
          : own.algorithm === "tokenBucket"
            ? { algorithm: "tokenBucket", refillRate: a, interval: b, capacity: c }
            : { algorithm: own.algorithm, limit: a, window: b };
      const checked = checkRule(own.name, config);
      if (checked.issues !== undefined) break;
      rules.push(checked.rule);
    }
  }
  if (rules.length === base.rules.length) return { name: "custom", rules };
  stale(line, "does not fit this Limiter's rules");
  return base;
}

/** The Decision of a one-rule script's reply. */
function oneRuleDecision(
  plan: PlanEncoding,
  one: OneRule,
  reply: CallResult,
  cost: number,
  now: number,
): Decision | Error {
  if (!reply.ok) return reply.error;
  const result = reply.result;
  if (typeof result !== "number" || !Number.isInteger(result)) return unexpected(result);
  const outcome = one.decode(result, cost, now);
  const name = plan.rules[0]!.name;
  const rules: Record<string, RuleResult> = {};
  rules[name] = outcome;
  const decision: Decision = {
    allowed: outcome.allowed,
    limit: outcome.limit,
    remaining: outcome.remaining,
    resetAt: outcome.resetAt,
    retryAfter: outcome.retryAfter,
    rule: name,
    source: "redis",
    plan: plan.name,
    decidedAt: now,
    rules,
  };
  return decidedBy(decision, plan.rules);
}

/** The limiter script's table: 4 integers per rule (then, reserving, 1 + one per rule). */
function decode(plan: Applied, result: unknown, reserving: boolean, now: number): Decision | Error {
  const planRules = plan.rules;
  const n = planRules.length;
  if (!Array.isArray(result) || result.length !== 4 * n + (reserving ? 1 + n : 0)) return unexpected(result);
  const rules: Record<string, RuleResult> = {};
  let binding: RuleResult | undefined;
  let bindingName = "";
  let allowed = true;
  for (let i = 0; i < n; i++) {
    const retry = Number(result[4 * i + 3]);
    const outcome: RuleResult = {
      allowed: result[4 * i] === 1,
      limit: planRules[i]!.limit,
      remaining: Number(result[4 * i + 1]),
      resetAt: Number(result[4 * i + 2]),
      retryAfter: retry < 0 ? Number.POSITIVE_INFINITY : retry,
    };
    const name = planRules[i]!.name;
    rules[name] = outcome;
    if (!outcome.allowed) allowed = false;
    if (binding === undefined || binds(outcome, binding)) {
      binding = outcome;
      bindingName = name;
    }
  }
  const b = binding!;
  const decision: Decision = {
    allowed,
    limit: b.limit,
    remaining: b.remaining,
    resetAt: b.resetAt,
    retryAfter: allowed ? 0 : b.retryAfter,
    rule: bindingName,
    source: "redis",
    plan: plan.name,
    decidedAt: now,
    rules,
  };
  return decidedBy(decision, plan.rules);
}

export function unexpected(result: unknown): RedisCallError {
  return new RedisCallError("redis", `edgelimit: unexpected script result ${describe(result)}`);
}

/** Whether `candidate` binds more tightly than `current`: a denial over an admission, then the
 * later retry among denials, then the fewer remaining among admissions. */
function binds(candidate: RuleResult, current: RuleResult): boolean {
  if (candidate.allowed !== current.allowed) return !candidate.allowed;
  if (!candidate.allowed) return candidate.retryAfter > current.retryAfter;
  return candidate.remaining < current.remaining;
}
