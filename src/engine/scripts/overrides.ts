// The overrides' scripts as the engine calls them: with overrides on, every decision also reads the
// identifier's stored override, one GET more in the same EVALSHA. One rule that a one-rule script
// takes runs that script's variant (<name>OneRuleOverrides); every other decision runs
// limiterOverrides (lua/overrides.lua). The one place in TypeScript that knows the plan table and the
// stored override's line.

import { expiresIn } from "../algorithms/fixed-window.js";
import { algorithmOf, checkRule, type Rule, type WindowRule } from "../algorithms/index.js";
import { FIXED_WINDOW_ONE_RULE_OVERRIDES, LIMITER_OVERRIDES } from "../generated/scripts.js";
import type { CallOptions, CallResult, Transport } from "../transport.js";
import { carrierOf, type Decision } from "../types.js";
import {
  type Applied,
  decode,
  oneRuleDecision,
  type PlanEncoding,
  type ScriptCallOptions,
  unexpected,
} from "./shared.js";

/** How many decoded override lines RuleScripts keeps (a custom line is decoded once). */
const APPLIED_ENTRIES = 1000;
/** Override lines already warned about, once per isolate each. */
const warned = new Set<string>();
function stale(line: string, why: string): void {
  if (warned.has(line) || warned.size >= APPLIED_ENTRIES) return;
  warned.add(line);
  console.warn(`edgelimit: stored override "${line}" ${why}; the base rules apply ("default")`);
}

/** A Limiter's decisions with overrides on: their commands, and their replies read under the stored line. */
export class OverrideScripts {
  private readonly overridesCall: CallOptions;
  private readonly fixedCall: CallOptions;
  /** Decoded override lines (LRU). */
  private readonly applied = new Map<string, Applied>();

  constructor(
    private readonly transport: Transport,
    options: ScriptCallOptions,
    private readonly base: PlanEncoding,
    private readonly plans: ReadonlyMap<string, PlanEncoding>,
  ) {
    this.overridesCall = { ...options, script: LIMITER_OVERRIDES };
    this.fixedCall = { ...options, script: FIXED_WINDOW_ONE_RULE_OVERRIDES };
  }

  /** Decides `cost` units of `identifier` at `now` under `plan`, reserving nothing (RuleScripts.decide). */
  decide<T>(
    identifier: string,
    cost: number,
    now: number,
    then: ((decision: Decision | Error) => T) | undefined,
    plan: PlanEncoding,
  ): Promise<T | Decision | Error> {
    const keys = plan.keys.of(identifier, now);
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

  /** Sends a reservation with overrides on (RuleScripts.reserve): limiterOverrides, reserving `want`. */
  reserve(
    plan: PlanEncoding,
    identifier: string,
    keys: string[],
    cost: number,
    now: number,
    want: number,
  ): Promise<CallResult> {
    return this.transport.call(
      this.overridesCommand(plan, identifier, keys, cost, now, want),
      this.overridesCall,
    );
  }

  /**
   * limiterOverrides' EVALSHA: the plan's keys, the override key, the other windows' keys; the limiter
   * script's arguments, reserve ("" for none), the plan's table.
   */
  overridesCommand(
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
    command.push(String(expiresIn(window, now)), String(cost), String(limit), String(window));
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
    const module = algorithmOf(rule);
    return oneRuleDecision(
      applied,
      {
        decode: (n, c, t) => module.outcome!(rule, n, c, t),
        counted: (n, t) => module.oneRuleCounted!(rule, n, t),
      },
      value,
      cost,
      now,
    );
  }

  /**
   * The Decision of a limiter script's reply that may end in a stored override's line (with overrides
   * on): decided by the rules that line names.
   */
  decodeStored(plan: PlanEncoding, result: unknown, reserving: boolean, now: number): Decision | Error {
    const n = plan.rules.length;
    if (!Array.isArray(result) || result.length !== 5 * n + (reserving ? 2 : 1)) {
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
}

/**
 * Adds the plan table and other windows' keys to every encoding (overrides on). A fixed or sliding
 * window that another plan gives another window has a key of its own there (RuleKeys): a call declares
 * one key per such window beside its own, and the table gives each plan's rule the KEYS index of its
 * key (0: the call's own).
 */
export function withTables(
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
        if (algorithmOf(rule).windowed && window !== (call.rules[i] as { window: number }).window) {
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
    // one rule whose one-rule script counts denials (a fixed window) takes its own variant
    // (fixedCommand) for a cost up to its limit
    const module = n === 1 ? algorithmOf(call.rules[0]!) : undefined;
    const fixed = module?.countsDenials === true;
    // one rule with a one-rule script (a sliding window's limit below PACK: plans and overrides keep
    // it there) takes that script's variant
    const script = call.one === undefined ? undefined : module?.oneRuleOverrides;
    const lean = script === undefined ? undefined : { ...options, script };
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
      const module = algorithmOf(own);
      if (module.windowed && ![...plans.values()].some((plan) => plan.args[4 * i + 2] === p2)) break;
      const a = Number(p1);
      // a sliding window's counts change format at PACK: a line across it is stale (lua/override.lua)
      if (module.carries?.(own.limit, a) !== undefined) break;
      const checked = checkRule(own.name, module.config(a, Number(p2), Number(p3)));
      if (checked.issues !== undefined) break;
      rules.push(checked.rule);
    }
  }
  if (rules.length === base.rules.length) return { name: "custom", rules, carrier: carrierOf(rules) };
  stale(line, "does not fit this Limiter's rules");
  return base;
}
