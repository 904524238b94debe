// The refund and settle scripts as the engine calls them: giving units back (lua/refund.lua: what a
// lease or a regional pool did not hand out, and what a field's call reserved when another field
// denied) and charging a decision what it really cost (lua/settle.lua), each in the window its units
// were counted in.
import { algorithmOf, type Rule, type WindowRule } from "../algorithms/index.js";
import { REFUND, SETTLE } from "../generated/scripts.js";
import type { CallOptions, CallResult, Transport } from "../transport.js";
import type { Decision } from "../types.js";
import {
  type Applied,
  type Counted,
  countedIn,
  encodeRule,
  type Origin,
  type PlanEncoding,
  type ScriptCallOptions,
} from "./shared.js";

/** Gives units back and settles decisions under a Limiter's plans. */
export class SettleScripts {
  private readonly refundCall: CallOptions;
  private readonly settleCall: CallOptions;

  constructor(
    private readonly transport: Transport,
    options: ScriptCallOptions,
    private readonly base: PlanEncoding,
    private readonly plans: ReadonlyMap<string, PlanEncoding>,
    /** Overrides on: a custom override may admit past every plan's limit (see givingBack). */
    private readonly overrides = false,
  ) {
    this.refundCall = { ...options, script: REFUND };
    this.settleCall = { ...options, script: SETTLE };
  }

  /**
   * Gives `units` of `identifier` back under every rule `applied` (a plan's, or a custom override's:
   * the rules the units were counted under), each in the window it counted them in (`countedAt`,
   * as a reservation answered them), `origin` when and how many that reservation counted. Resolves
   * true when Redis ran it.
   */
  async refund(
    identifier: string,
    units: number,
    countedAt: readonly number[],
    now: number,
    applied: Applied,
    origin: Origin,
  ): Promise<boolean> {
    // a plan's own encoding when these are its rules (its keys and arguments are computed once)
    const own = this.plans.get(applied.name);
    const plan: Applied = own !== undefined && own.rules === applied.rules ? own : applied;
    const keys = this.keysOf(plan, identifier, now, countedAt);
    const command = ["EVALSHA", REFUND.sha1, String(keys.length), ...keys, now.toString(16), String(units)];
    command.push(origin.at.toString(16), String(origin.taken));
    plan.rules.forEach((rule, i) => {
      command.push(...this.givingBack(rule, i, true), String(countedAt[i] ?? 0));
    });
    const reply = await this.transport.call(command, this.refundCall);
    return reply.ok;
  }

  /** The rules an admitted Decision was decided by: its plan's (by name, with its keys) or a custom override's. */
  applied(decision: Decision): Applied {
    const custom = decision.decidedBy;
    if (decision.plan === "custom" && custom !== undefined) return { name: "custom", rules: custom };
    return this.plans.get(decision.plan) ?? this.base;
  }

  /**
   * Where an admitted Decision from Redis counted its units: the rules that applied (its plan's, or a
   * custom override's, as the decision carries them), per rule where its script answered that it
   * counted them (the start of their window, the TAT they hold, their stamp), and what each algorithm's
   * settle needs beside (its module's `countOf`).
   */
  counted(decision: Decision): Counted {
    const applied = this.applied(decision);
    const now = decision.decidedAt;
    const countedAt = countedIn(decision, applied.rules.length) ?? applied.rules.map(() => 0);
    const counts = applied.rules.map((rule) =>
      algorithmOf(rule).countOf(rule, decision.rules[rule.name]!, now),
    );
    return { applied, countedAt, counts };
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
    const { applied, countedAt, counts } = counted;
    const keys = this.keysOf(applied, identifier, now, actual < cost ? countedAt : undefined);
    const command = ["EVALSHA", SETTLE.sha1, String(keys.length), ...keys];
    command.push(now.toString(16), String(cost), String(actual));
    applied.rules.forEach((rule, i) => {
      const mark = algorithmOf(rule).settleMark(counts[i] ?? 0, cost);
      command.push(...this.givingBack(rule, i, actual < cost), String(countedAt[i] ?? 0), String(mark));
    });
    return this.transport.call(command, this.settleCall);
  }

  /**
   * Rule `i`'s arguments for a refund or a settle (`giving`: one that gives units back). A fixed window
   * reads a count above the limit it is given as that limit (a denial's overshoot); plans that keep a
   * window share its key, so the limit given is the highest of any plan for that window: units a
   * higher plan admitted are never wiped by a lower plan's refund (a lower plan's overshoot may then
   * stay: fewer admitted, never more). With overrides on, a custom override set since may have
   * admitted past every plan's limit: units go back from the count as it stands (no limit read into
   * it), and a settle's debt is still bounded by the plans' limits.
   */
  private givingBack(rule: Rule, i: number, giving: boolean): [string, string, string, string] {
    const args = encodeRule(rule);
    if (!algorithmOf(rule).countsDenials) return args;
    if (giving && this.overrides) {
      args[1] = String(Number.MAX_SAFE_INTEGER);
      return args;
    }
    const window = (rule as WindowRule).window;
    let limit = rule.limit;
    for (const plan of this.plans.values()) {
      const other = plan.rules[i] as WindowRule | undefined;
      if (other !== undefined && other.window === window) limit = Math.max(limit, other.limit);
    }
    args[1] = String(limit);
    return args;
  }

  /**
   * The keys of `identifier` under the rules `applied` (a plan's, or a custom override's: each rule's
   * key is that of a plan with its window, as lua/overrides.lua reads it), at `now` or, per rule, where
   * the units were counted (`countedAt`).
   */
  private keysOf(applied: Applied, identifier: string, now: number, countedAt?: readonly number[]): string[] {
    const own = (applied as Partial<PlanEncoding>).keys;
    if (own !== undefined) return own.of(identifier, now, countedAt);
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
      return plan.keys.of(identifier, now, countedAt)[i]!;
    });
  }
}
