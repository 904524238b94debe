// The overrides' scripts as the engine calls them: with overrides on, every decision also reads the
// identifier's stored override, one GET more in the same EVALSHA. One rule that a one-rule script
// takes runs that script's variant (<name>OneRuleOverrides); every other decision runs
// limiterOverrides (lua/overrides.lua). The one place in TypeScript that knows the plan table.
// lua/override.lua alone reads a stored line (src/engine/overrides.ts writes it): the script answers
// what it applied, and this file turns that answer into the rules that decided.

import { expiresIn } from "../algorithms/fixed-window.js";
import { algorithmOf, checkRule, fieldOf, type Rule, type WindowRule } from "../algorithms/index.js";
import { GIVES_BACK } from "../algorithms/shared.js";
import { LIMITER_NESTED_OVERRIDES, LIMITER_OVERRIDES } from "../generated/scripts.js";
import { fieldsOf } from "../keys.js";
import { sha1Hex } from "../sha1.js";
import type { CallOptions, CallResult, Script, Transport } from "../transport.js";
import { carrierOf, type Decision } from "../types.js";
import {
  type Applied,
  decode,
  encodeRule,
  oneRuleDecision,
  type PlanEncoding,
  type ScriptCallOptions,
  unexpected,
} from "./shared.js";

/** How many custom answers OverrideScripts keeps decoded (each is decoded once). */
const APPLIED_ENTRIES = 1000;
/** How many plans a table tags with one character (lua/override.lua): the others are answered by name. */
const TAGGED = 62;
/**
 * The tag of a custom line that changes at most one of the call's parameters, to a value of at most 4
 * digits (lua/override.lua), and the room a one-rule script leaves it below its integer.
 */
const CUSTOM = 63;
const CUSTOM_ROOM = 2 ** 22;

/** Stale lines already warned about, once per isolate each. */
const warned = new Set<string>();
function stale(line: string, why: string): void {
  if (warned.has(line) || warned.size >= APPLIED_ENTRIES) return;
  warned.add(line);
  console.warn(`edgelimit: stored override "${line}" ${why}; the base rules apply ("default")`);
}

/** A Limiter's decisions with overrides on: their commands, and their replies read under the stored line. */
export class OverrideScripts {
  private readonly overridesCall: CallOptions;
  private readonly nestedCall: CallOptions;
  /** Custom parameters' rules, by the answer that gave them (LRU). */
  private readonly applied = new Map<string, Applied>();
  /** The plans by tag - 1: their order in every table. */
  private readonly tagged: readonly PlanEncoding[];

  constructor(
    private readonly transport: Transport,
    options: ScriptCallOptions,
    private readonly base: PlanEncoding,
    private readonly plans: ReadonlyMap<string, PlanEncoding>,
  ) {
    this.overridesCall = { ...options, script: LIMITER_OVERRIDES };
    this.nestedCall = { ...options, script: LIMITER_NESTED_OVERRIDES };
    this.tagged = [...plans.values()].slice(0, TAGGED);
  }

  /** Decides `cost` units of `identifier` at `now` under `plan`, reserving nothing (RuleScripts.decide). */
  decide<T>(
    identifier: string,
    cost: number,
    now: number,
    then: (decision: Decision | Error) => T,
    plan: PlanEncoding,
  ): Promise<T> {
    const keys = plan.keys.of(identifier, now);
    const fixed = plan.fixed;
    if (fixed !== undefined && cost >= 1 && cost <= (plan.rules[0] as WindowRule).limit) {
      return this.transport.callThen(
        this.fixedCommand(plan, fixed.script!, identifier, keys, cost, now),
        fixed,
        (reply) => {
          const decision = reply.ok ? this.decodeOneRule(plan, reply.result, cost, now) : reply.error;
          return then(decision);
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
          return then(decision);
        },
      );
    }
    // several rules (with several fields: limiterNestedOverrides)
    return this.transport.callThen(
      this.overridesCommand(plan, identifier, keys, cost, now, undefined),
      plan.places === undefined ? this.overridesCall : this.nestedCall,
      (reply) => {
        const decision = reply.ok ? this.decodeStored(plan, reply.result, false, now) : reply.error;
        return then(decision);
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
      plan.places === undefined ? this.overridesCall : this.nestedCall,
    );
  }

  /**
   * limiterOverrides' EVALSHA: the plan's keys, the override key, the other windows' keys; the limiter
   * script's arguments, reserve ("" for none), the plan's table. With rules keyed by several fields,
   * limiterNestedOverrides': an override key per field, and each rule's field's place after the table.
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
    const places = plan.places;
    const overrides =
      places === undefined ? [plan.keys.override(identifier)] : plan.keys.overrides(identifier);
    const script = places === undefined ? LIMITER_OVERRIDES : LIMITER_NESTED_OVERRIDES;
    const command = ["EVALSHA", script.sha1, String(keys.length + overrides.length + windows.length)];
    for (const key of keys) command.push(key);
    for (const key of overrides) command.push(key);
    for (const { plan: other, rule } of windows) command.push(other.keys.of(identifier, now)[rule]!);
    command.push(now.toString(16), String(cost));
    for (const arg of plan.args) command.push(arg);
    command.push(reserve === undefined ? "" : String(reserve));
    if (places === undefined) command.push(plan.table!);
    else {
      for (const table of plan.tables!) command.push(table);
      command.push(places);
    }
    return command;
  }

  /**
   * The EVALSHA of the plan's fixedWindowOneRuleOverrides (one fixed window): the window's key, the
   * override key, the other windows' keys; ms until the key expires, then the cost (when more than 1,
   * or when now follows) and, with other windows, now.
   */
  private fixedCommand(
    plan: PlanEncoding,
    script: Script,
    identifier: string,
    keys: string[],
    cost: number,
    now: number,
  ): string[] {
    const windows = plan.windows ?? [];
    const { window } = plan.rules[0] as WindowRule;
    const command = ["EVALSHA", script.sha1, String(2 + windows.length), keys[0]!];
    command.push(plan.keys.override(identifier));
    for (const { plan: other, rule } of windows) command.push(other.keys.of(identifier, now)[rule]!);
    command.push(String(expiresIn(window, now)));
    if (cost !== 1 || windows.length > 0) command.push(String(cost));
    if (windows.length > 0) command.push(now.toString(16));
    return command;
  }

  /**
   * The EVALSHA of the plan's one-rule variant (gcraOneRuleOverrides, slidingWindowOneRuleOverrides,
   * intervalBucketOneRuleOverrides): the rule's key, the override key, the other windows' keys; now and
   * the cost (the rule's parameters and the table are the script's own: planScript).
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
    command.push(now.toString(16), String(cost));
    return command;
  }

  /**
   * The Decision of a one-rule override script's reply (fixedWindow, gcra, tokenBucket, slidingWindow,
   * intervalBucket), decoded under the rule applied: the one-rule integer r as r * 64 + the tag of the
   * plan applied (0 the call's), as r * 2^22 + the tag of a custom line (CUSTOM below it: the call's
   * parameters with the one it changes), or a string, r then what applied (lua/one_rule_overrides.lua).
   */
  private decodeOneRule(plan: PlanEncoding, result: unknown, cost: number, now: number): Decision | Error {
    let applied: Applied = plan;
    let value: number;
    if (typeof result === "number") {
      const tag = result - Math.floor(result / 64) * 64;
      if (tag === CUSTOM) {
        // r * 2^22 + (changed * 4 + which) * 64 + 63: the call's parameters, `which` (1-3) changed
        const low = result - Math.floor(result / CUSTOM_ROOM) * CUSTOM_ROOM;
        value = (result - low) / CUSTOM_ROOM;
        const params = plan.args.slice(1, 4);
        const which = Math.floor(low / 64) % 4;
        if (which > 0) params[which - 1] = String(Math.floor(low / 256));
        applied = this.appliedOf(`!${params.join(" ")}`);
      } else {
        value = (result - tag) / 64;
        if (tag > 0) applied = this.tagged[tag - 1] ?? plan;
      }
    } else if (typeof result === "string") {
      const at = result.search(/[=!?#]/);
      value = Number(at < 0 ? result : result.slice(0, at));
      if (at >= 0) applied = this.appliedOf(result.slice(at));
    } else {
      return unexpected(result);
    }
    if (!Number.isSafeInteger(value)) return unexpected(result);
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
   * The Decision of limiterOverrides' reply: the limiter script's table, and, with an override stored,
   * one element more, the tag of the plan applied or what applied, under whose rules it is decoded.
   */
  decodeStored(plan: PlanEncoding, result: unknown, reserving: boolean, now: number): Decision | Error {
    const n = plan.rules.length;
    if (!Array.isArray(result) || result.length !== 5 * n + (reserving ? 2 : 1)) {
      return decode(plan, result, reserving, now);
    }
    const answer = result[result.length - 1];
    if (plan.places !== undefined) {
      const nested = Array.isArray(answer) ? this.nestedApplied(plan, answer) : undefined;
      if (nested === undefined) return unexpected(result);
      return decode(nested, result.slice(0, -1), reserving, now);
    }
    const applied =
      typeof answer === "number"
        ? this.tagged[answer - 1]
        : typeof answer === "string"
          ? this.appliedOf(answer)
          : undefined;
    if (applied === undefined) return unexpected(result);
    return decode(applied, result.slice(0, -1), reserving, now);
  }

  /**
   * The rules limiterNestedOverrides' answer says applied: per field, what its identifier's override
   * applied (0: none, the call's plan), taken for the rules keyed by that field only. One plan
   * throughout keeps its name; a mix is "custom".
   */
  private nestedApplied(plan: PlanEncoding, answers: unknown[]): Applied | undefined {
    const places = plan.places!;
    const rules: Rule[] = [];
    const names = new Set<string>();
    // each rule's place among its field's rules: where a custom answer gives its parameters
    const within = new Map<number, number>();
    for (let i = 0; i < plan.rules.length; i++) {
      const place = places.charCodeAt(i);
      within.set(place, (within.get(place) ?? -1) + 1);
      const answer = answers[place - 49];
      let rule: Rule | undefined;
      let name = plan.name;
      if (typeof answer === "number" && answer > 0) {
        const tagged = this.tagged[answer - 1];
        rule = tagged?.rules[i];
        name = tagged?.name ?? name;
      } else if (typeof answer === "string" && answer.startsWith("!")) {
        rule = this.customRule(answer, within.get(place)!, this.base.rules[i]!);
        name = "custom";
      } else if (typeof answer === "string") {
        const applied = this.appliedOf(answer);
        rule = applied.rules[i];
        name = applied.name;
      } else if (answer === 0) rule = plan.rules[i];
      if (rule === undefined) return undefined;
      rules.push(rule);
      names.add(name);
    }
    if (names.size === 1 && names.has(plan.name)) return plan;
    // a plan whose rules these are (an override's plan that changes only its own field's rules) keeps
    // its name; any other mix is "custom"
    if (names.has("custom")) return { name: "custom", rules, carrier: carrierOf(rules) };
    const args = rules.flatMap(encodeRule).join(" ");
    for (const name of names) {
      const candidate = this.plans.get(name);
      if (candidate !== undefined && candidate.args.join(" ") === args) return candidate;
    }
    return { name: "custom", rules, carrier: carrierOf(rules) };
  }

  /**
   * Rule `own` with the parameters a field's custom answer ("!<p1> <p2> <p3>[ ...]", 3 per rule of that
   * field) gives the rule at place `at` among them; `own` itself (warned once) when they do not fit.
   */
  private customRule(answer: string, at: number, own: Rule): Rule {
    const params = answer.slice(1).split(" ").map(Number);
    const checked = checkRule(
      own.name,
      algorithmOf(own).config(params[3 * at]!, params[3 * at + 1]!, params[3 * at + 2]!),
    );
    if (checked.issues !== undefined) {
      stale(answer, "does not fit this Limiter's rules");
      return own;
    }
    return own.by === undefined ? checked.rule : { ...checked.rule, by: own.by };
  }

  /**
   * The rules a script's answer says a stored override applied (lua/override.lua):
   *   "=<plan>"                that plan's
   *   "#<tag>"                 the plan of that tag (a one-rule script whose integer left it no room)
   *   "!<p1> <p2> <p3>[ ...]"  the base rules' algorithms with these parameters, 3 per rule ("custom"),
   *                            each rule's algorithm before them when a one-rule script answers
   *                            the line itself (decodeOneRule builds this form from a custom tag)
   *   "?<line>"                the base rules: the stored line is stale (warned once)
   */
  private appliedOf(answer: string): Applied {
    const kind = answer[0];
    if (kind === "#") return this.tagged[Number(answer.slice(1)) - 1] ?? this.base;
    if (kind === "=") return this.plans.get(answer.slice(1)) ?? this.base;
    if (kind === "?") {
      const line = answer.slice(1);
      stale(
        line,
        line.startsWith("=")
          ? "names a plan this Limiter does not have"
          : "does not fit this Limiter's rules",
      );
      return this.base;
    }
    const cached = this.applied.get(answer);
    if (cached !== undefined) {
      this.applied.delete(answer);
      this.applied.set(answer, cached);
      return cached;
    }
    const applied = this.custom(answer);
    if (this.applied.size >= APPLIED_ENTRIES) this.applied.delete(this.applied.keys().next().value!);
    this.applied.set(answer, applied);
    return applied;
  }

  /**
   * The custom rules of an answer "!<p1> <p2> <p3>[ ...]": each base rule's algorithm with the
   * parameters applied. Parameters its constructor refuses (a line written by hand) decide nothing
   * here: the base rules, warned once.
   */
  private custom(answer: string): Applied {
    // a one-rule script may answer the custom line itself, its algorithm before the parameters
    const params = answer
      .slice(1)
      .split(" ")
      .filter((token) => token !== "" && !/^[A-Za-z]/.test(token))
      .map(Number);
    const rules: Rule[] = [];
    for (const own of this.base.rules) {
      const at = 3 * rules.length;
      const checked = checkRule(
        own.name,
        algorithmOf(own).config(params[at]!, params[at + 1]!, params[at + 2]!),
      );
      if (checked.issues !== undefined) {
        stale(answer, "does not fit this Limiter's rules");
        return this.base;
      }
      rules.push(own.by === undefined ? checked.rule : { ...checked.rule, by: own.by });
    }
    return { name: "custom", rules, carrier: carrierOf(rules) };
  }
}

/**
 * Adds the plan table (lua/override.lua: the call's first window, then per plan a record that starts
 * with the plan's stored line) and other windows' keys to every encoding (overrides on). A
 * fixed or sliding window that another plan gives another window has a key of its own there
 * (RuleKeys): a call declares one key per such window beside its own, and the table gives each plan's
 * rule, and each window a plan gives a rule, the KEYS index of its key (0: the call's own). Plans are
 * tagged in `all`'s order, which OverrideScripts reads answers by.
 */
export function withTables(
  all: ReadonlyMap<string, PlanEncoding>,
  options: ScriptCallOptions,
): Map<string, PlanEncoding> {
  const out = new Map<string, PlanEncoding>();
  for (const call of all.values()) {
    const n = call.rules.length;
    // rules keyed by several fields: an override key per field before the other windows' keys
    const fields = fieldsOf(call.rules);
    const overrideKeys = fields.length > 1 ? fields.length : 1;
    const places =
      fields.length > 1
        ? call.rules.map((rule) => String.fromCharCode(49 + fields.indexOf(fieldOf(rule)))).join("")
        : undefined;
    const windows: { plan: PlanEncoding; rule: number }[] = [];
    const index = new Map<string, number>();
    const keyOf = (plan: PlanEncoding, i: number, window: number) => {
      if (window === (call.rules[i] as { window: number }).window) return 0;
      const id = `${i}:${window}`;
      let k = index.get(id);
      if (k === undefined) {
        windows.push({ plan, rule: i });
        k = n + overrideKeys + windows.length;
        index.set(id, k);
      }
      return k;
    };
    // the table over some of the rules (all of them; with several fields, one field's): per plan a
    // record that starts with the plan's stored line and its end (lua/override.lua looks for it), its
    // tag, and per rule its k and parameters; then each window a plan gives one of them, for custom
    // lines
    const build = (indices: readonly number[]) => {
      let table = "";
      let tag = 65;
      for (const plan of all.values()) {
        table += `\n=${plan.name}\n${String.fromCharCode(tag <= 65 + TAGGED - 1 ? tag++ : 64)}`;
        for (const i of indices) {
          const rule = plan.rules[i]!;
          const k = algorithmOf(rule).windowed ? keyOf(plan, i, (rule as WindowRule).window) : 0;
          table += `${String.fromCharCode(48 + k)} ${plan.args[4 * i + 1]} ${plan.args[4 * i + 2]} ${plan.args[4 * i + 3]} `;
        }
      }
      const seen = new Set<string>();
      for (const plan of all.values()) {
        indices.forEach((i, at) => {
          const rule = plan.rules[i];
          if (rule === undefined || !algorithmOf(rule).windowed) return;
          const window = (rule as WindowRule).window;
          if (seen.has(`${i}:${window}`)) return;
          seen.add(`${i}:${window}`);
          table += `\n#${at + 1} ${window} ${String.fromCharCode(48 + keyOf(plan, i, window))}`;
        });
      }
      return `${table}\n`;
    };
    const every = call.rules.map((_, i) => i);
    const tables =
      places === undefined
        ? undefined
        : fields.map((field) => build(every.filter((i) => fieldOf(call.rules[i]!) === field)));
    const table = tables === undefined ? build(every) : undefined;
    // one rule whose one-rule script counts denials (a fixed window) takes its own variant
    // (fixedCommand) for a cost up to its limit; one rule with a one-rule script (a sliding window's
    // limit below PACK: plans and overrides keep it there) takes that script's variant; each built
    // for this plan (planScript)
    const module = n === 1 ? algorithmOf(call.rules[0]!) : undefined;
    const template = module?.oneRuleOverrides;
    // (a fixed window that gives back takes limiterOverrides: the variant counts admissions alone,
    // as CountingOptions says of overshoot)
    const own =
      template === undefined ||
      (module!.countsDenials ? call.args[3] === String(GIVES_BACK) : call.one === undefined)
        ? undefined
        : { ...options, script: planScript(template, table!, call.args) };
    const fixed = module?.countsDenials === true ? own : undefined;
    const lean = module?.countsDenials === true ? undefined : own;
    out.set(call.name, { ...call, table, tables, windows, fixed, lean, places });
  }
  return out;
}

/**
 * A character of a Lua string literal that is written as an escape: any but printable ASCII, a quote
 * and a backslash (a table and parameters are ASCII: plan names are letters, digits, "_", "." and "-").
 */
const ESCAPED = /[^ !#-[\]-~]/g;
/** Scripts planScript built, by SHA-1: the template each came from (at most TEMPLATES remembered). */
const templates = new Map<string, Script>();
const TEMPLATES = 10_000;

/**
 * A plan's one-rule script with overrides on: `template` (lua/one_rule_overrides.lua as an algorithm
 * builds it, or lua/algorithms/fixed_window.lua's one-rule-overrides) behind a head that defines what
 * every call under the plan would otherwise send (an argument costs Redis as much as a dozen lines of a
 * script): the table T, the rule's parameters P1..P3 (`rule`: the algorithm and three, as the limiter
 * script encodes them), and MINE, the pattern of a custom line of the rule's algorithm and second
 * parameter (a window, a period, an interval: what overrides rarely change), which lua/override.lua
 * tries before the general one. Redis keeps one script per plan.
 *
 * @example
 * planScript(GCRA_ONE_RULE_OVERRIDES, "\n=default\nA0 10 1000 10 \n", ["gcra", "10", "1000", "10"]).text
 * // 'local T, P1, P2, P3, MINE = "\\n=default\\nA0 10 1000 10 \\n", "10", "1000", "10",
 * // "^!gcra ([1-9]%d*) 1000 (%d+)\\n"\n' + the template
 */
export function planScript(template: Script, table: string, rule: readonly string[]): Script {
  const literal = (value: string) =>
    `"${value.replace(ESCAPED, (c) => (c === "\n" ? "\\n" : `\\${String(c.charCodeAt(0)).padStart(3, "0")}`))}"`;
  const [algorithm, p1, p2, p3] = rule;
  const mine = `^!${algorithm} ([1-9]%d*) ${p2} (%d+)\n`;
  const head = [table, p1!, p2!, p3!, mine].map(literal).join(", ");
  const text = `local T, P1, P2, P3, MINE = ${head}\n${template.text}`;
  const sha1 = sha1Hex(text);
  if (templates.size < TEMPLATES) templates.set(sha1, template);
  return { text, sha1 };
}

/** The template a script planScript built came from, by its SHA-1 (tests and benchmarks name scripts so). */
export function templateOf(sha1: string): Script | undefined {
  return templates.get(sha1);
}
