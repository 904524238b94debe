// The limiter's scripts as the engine calls them (scripts/build-lua.mjs builds them from lua/), by
// family:
//  - the one-rule scripts: one rule, no reservation, a cost the rule can admit; each answers one
//    integer, which its algorithm's module (src/engine/algorithms/) builds the call for and decodes;
//  - the limiter script (lua/prelude.lua, the algorithms' checks, lua/dispatcher.lua): every other
//    decision, and reservations for leases; it answers 5 integers per rule (room, reset, retry and
//    where the units were counted) and, reserving, the units reserved, decoded in ./shared.ts;
//  - the refund and settle scripts (./settle.ts);
//  - with overrides on, the scripts that also read the stored override (./overrides.ts).
// Every rule is encoded once, when the Limiter is built, under the base rules and under each plan (a
// PlanEncoding each); a call looks its plan's up and adds its time and cost. RuleScripts is the face
// the engine calls: it sends each call to its family.
import { algorithmOf, type Rule } from "../algorithms/index.js";
import { LIMITER } from "../generated/scripts.js";
import { fieldsOf, type RuleKeys } from "../keys.js";
import type { CallOptions, CallResult, Transport } from "../transport.js";
import { carrierOf, type Decision } from "../types.js";
import { OverrideScripts, withTables } from "./overrides.js";
import { SettleScripts } from "./settle.js";
import {
  type Applied,
  type Counted,
  decode,
  encodeRule,
  type Origin,
  oneRuleDecision,
  type PlanEncoding,
  type PlanRules,
  type Reservation,
  type ScriptCallOptions,
} from "./shared.js";
import { SplitScripts } from "./split.js";

export type {
  Applied,
  Counted,
  Origin,
  PlanEncoding,
  PlanRules,
  Reservation,
  ScriptCallOptions,
} from "./shared.js";
export { UNKNOWN } from "./shared.js";

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

/**
 * Sends a Limiter's decisions, reservations and refunds, each as one EVALSHA through the transport.
 * Never rejects: a failure (Redis, the transport, an answer it cannot read) resolves to an Error.
 * A decision or reservation takes the plan it decides under (default: the base rules); a refund, the
 * rules its units were counted under and where they came from, always given.
 *
 * @example
 * const scripts = new RuleScripts(limiter.rules, new RuleKeys("edgelimit", limiter.rules), transport, options);
 * const decision = await scripts.decide("user:42", 1, Date.now(), (d) => d); // a Decision, or an Error
 */
export class RuleScripts {
  private readonly limiterCall: CallOptions;
  /** With overrides on, the scripts that also read the stored override. */
  private readonly overrides: OverrideScripts | undefined;
  /** The refund and settle scripts. */
  private readonly giving: SettleScripts;
  /** On Redis Cluster with rules keyed by several fields: every call, one per field (./split.ts). */
  private readonly split: SplitScripts | undefined;
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
    /** Redis Cluster: rules keyed by several fields are decided one field per call (./split.ts). */
    cluster = false,
  ) {
    this.limiterCall = { ...options, script: LIMITER };
    const exact = plans.length > 0 || overrides;
    const encode = ({ name, rules, keys }: PlanRules): PlanEncoding => {
      const only = rules.length === 1 ? rules[0]! : undefined;
      const module = only === undefined ? undefined : algorithmOf(only);
      const one =
        module === undefined || (exact && module.countsDenials)
          ? undefined
          : module.oneRule?.(only!, options);
      const args = rules.flatMap(encodeRule);
      return { name, rules, keys, carrier: carrierOf(rules), args, one, count: String(rules.length) };
    };
    this.base = encode({ name: "default", rules, keys });
    const all = new Map<string, PlanEncoding>([["default", this.base]]);
    for (const plan of plans) all.set(plan.name, encode(plan));
    this.plans = overrides ? withTables(all, options) : all;
    this.overrides = overrides ? new OverrideScripts(transport, options, this.base, this.plans) : undefined;
    this.giving = new SettleScripts(transport, options, this.base, this.plans, overrides);
    const fields = fieldsOf(rules);
    this.split =
      cluster && fields.length > 1
        ? new SplitScripts(
            rules,
            keys.prefix,
            transport,
            options,
            plans,
            overrides,
            fields,
            (r, k, t, o, p, v) => new RuleScripts(r, k, t, o, p, v),
          )
        : undefined;
  }

  /**
   * Decides `cost` units of `identifier` at `now` under `plan`, reserving nothing, and resolves with
   * what `then` makes of the Decision, or of the Error (in the call's own promise: no second one).
   */
  decide<T>(
    identifier: string,
    cost: number,
    now: number,
    then: (decision: Decision | Error) => T,
    plan: PlanEncoding = this.base,
  ): Promise<T> {
    if (this.split !== undefined) return this.split.decide(identifier, cost, now, plan).then(then);
    if (this.overrides !== undefined) return this.overrides.decide(identifier, cost, now, then, plan);
    const keys = plan.keys.of(identifier, now);
    const one = plan.one;
    if (one?.takes(cost)) {
      const command = ["EVALSHA", one.sha1, "1", keys[0]!];
      one.push(command, cost, now);
      return this.transport.callThen(command, one.options, (reply) => {
        return then(reply.ok ? oneRuleDecision(plan, one, reply.result, cost, now) : reply.error);
      });
    }
    return this.transport.callThen(
      this.command(plan, keys, cost, now, undefined),
      this.limiterCall,
      (reply) => {
        return then(reply.ok ? decode(plan, reply.result, false, now) : reply.error);
      },
    );
  }

  /**
   * Decides `cost` units of `identifier` at `now` under `plan`, reserving up to `want` more for a tier
   * above (a lease, a regional pool, or both).
   */
  async reserve(
    identifier: string,
    cost: number,
    now: number,
    want: number,
    plan: PlanEncoding = this.base,
  ): Promise<Reservation | Error> {
    if (this.split !== undefined) return this.split.reserve(identifier, cost, now, want, plan);
    const keys = plan.keys.of(identifier, now);
    const overrides = this.overrides;
    const reply =
      overrides === undefined
        ? await this.transport.call(this.command(plan, keys, cost, now, want), this.limiterCall)
        : await overrides.reserve(plan, identifier, keys, cost, now, want);
    if (!reply.ok) return reply.error;
    const decision =
      overrides === undefined
        ? decode(plan, reply.result, true, now)
        : overrides.decodeStored(plan, reply.result, true, now);
    if (decision instanceof Error) return decision;
    const result = reply.result as unknown[];
    const countedAt = plan.rules.map((_, i) => Number(result[5 * i + 4]));
    return { decision, reserved: Number(result[5 * plan.rules.length]), countedAt };
  }

  /**
   * Gives `units` of `identifier` back under every rule `applied` (a plan's, or a custom override's:
   * the rules the units were counted under), each in the window it counted them in (`countedAt`,
   * as a reservation answered them), `origin` when and how many that reservation counted (UNKNOWN
   * when not known). Resolves true when Redis ran it.
   */
  refund(
    identifier: string,
    units: number,
    countedAt: readonly number[],
    now: number,
    applied: Applied,
    origin: Origin,
  ): Promise<boolean> {
    if (this.split !== undefined)
      return this.split.refund(identifier, units, countedAt, now, applied, origin);
    return this.giving.refund(identifier, units, countedAt, now, applied, origin);
  }

  /**
   * The rules an admitted Decision was decided by (its plan's, or a custom override's): where a tier
   * that held its units says where they were counted, all a settle needs beside.
   */
  applied(decision: Decision): Applied {
    if (this.split !== undefined) return this.split.applied(decision);
    return this.giving.applied(decision);
  }

  /**
   * Where an admitted Decision from Redis counted its units: the rules that applied (its plan's, or a
   * custom override's, as the decision carries them), per rule where its script answered that it
   * counted them (the start of their window, the TAT they hold, their stamp), and what each algorithm's
   * settle needs beside (its module's `countOf`).
   */
  counted(decision: Decision): Counted {
    if (this.split !== undefined) return this.split.counted(decision);
    return this.giving.counted(decision);
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
    if (this.split !== undefined) return this.split.settle(identifier, counted, cost, actual, now);
    return this.giving.settle(identifier, counted, cost, actual, now);
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
