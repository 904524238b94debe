// What the limiter's script families share: the types a call and a reply carry, a rule's encoding,
// and the decisions' replies (decoded here for the limiter and overrides families alike), with where
// each admitted decision counted its units, for a settle.
import { algorithmOf, type Rule } from "../algorithms/index.js";
import { describe } from "../duration.js";
import { RedisCallError } from "../errors.js";
import { SCRIPT_CONSTANTS } from "../generated/scripts.js";
import type { RuleKeys } from "../keys.js";
import type { CallOptions } from "../transport.js";
import { carrierOf, type Decision, type RuleResult } from "../types.js";

/** The retry of a cost that is never admitted, as the scripts answer it (scripts/build-lua.mjs). */
const { NEVER } = SCRIPT_CONSTANTS;

/**
 * Where units held by a tier (a lease, a pool) came from: when home counted the reservation (its
 * `now`) and how many of its units they are (what it reserved for this holder; a pool's, less what it
 * lent a lease). gcra gives back at most what they still hold, less what refunds gave back since then
 * (lua/refund.lua). `at` 0: not known (a pool written by a script that kept none), capped by their
 * TAT alone.
 */
export interface Origin {
  readonly at: number;
  readonly taken: number;
}

/** An origin not known. */
export const UNKNOWN: Origin = { at: 0, taken: 0 };

/**
 * What a decision answers that went to home or the region's pool: the decision, and what it reserved
 * beside its cost for a tier above (none for a plain decision).
 */
export interface Reservation {
  readonly decision: Decision;
  /** Units taken beside the cost, for the lease. */
  readonly reserved: number;
  /**
   * Per rule, where the units were counted, as the rule counts: the start of their window (fixed and
   * sliding windows), the TAT they hold, rounded up to a ms (gcra and the token bucket: what a refund
   * may give back is capped by it), the last refill (an interval bucket); 0 when none was taken.
   */
  readonly countedAt: readonly number[];
  /**
   * When the reserved units were counted and how many of that reservation's units they are, when not
   * this decision's own: a regional pool's, lent with them (scripts/pool.ts).
   */
  readonly from?: Origin;
  /**
   * When the reserved units stop being handed out, when a regional pool lent them: the end of the
   * pool's deposit (epoch ms, the caller's clock), which a lease of them does not outlive.
   */
  readonly until?: number;
}

/**
 * Where a decision counted its units, as a settle needs them: the rules that applied (a plan's, or a
 * stored override's), per rule where they were counted (`countedAt`: the start of their window, a
 * sliding log's stamp, for gcra and the token bucket the TAT they hold, rounded up to a ms), and per
 * sliding log rule its count after the decision, per gcra rule the time it counted from (0: unknown),
 * else 0.
 */
export interface Counted {
  readonly applied: Applied;
  readonly countedAt: readonly number[];
  readonly counts: readonly number[];
}

/** How each call goes to Redis: its timeout, batching and breaker. */
export interface ScriptCallOptions {
  timeout: number;
  batchWindow: number;
  breaker: boolean;
}

/**
 * A rule as the limiter, refund and settle scripts read it: the algorithm the script runs and three
 * integer parameters (its module's encoding: a token bucket runs as GCRA).
 */
export function encodeRule(rule: Rule): [string, string, string, string] {
  return algorithmOf(rule).encode(rule);
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
  /** Where an admission counted its units, from the script's integer at `now`. */
  counted(result: number, now: number): number;
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
  /** The prototype of its decisions, carrying `rules` as their `decidedBy` (carrierOf). */
  readonly carrier: object;
  /** Every rule's four arguments, in rule order. */
  readonly args: readonly string[];
  readonly one: OneRule | undefined;
  /** The number of rules, as the EVALSHA's key count. */
  readonly count: string;
  /** With overrides on: the plan table limiterOverrides reads (lua/overrides.lua), for a call under this plan. */
  readonly table?: string;
  /** With overrides on: the other plans' window keys the table points at (KEYS after the override key). */
  readonly windows?: readonly { readonly plan: PlanEncoding; readonly rule: number }[];
  /**
   * With overrides on and one fixed window: its fixedWindowOneRuleOverrides, built for this plan
   * (planScript), for a cost up to its limit.
   */
  readonly fixed?: CallOptions;
  /**
   * With overrides on: the one-rule script's variant that also reads the stored override, built for
   * this plan (planScript), for a cost `one` takes (one GCRA, token bucket, interval bucket or sliding
   * window rule).
   */
  readonly lean?: CallOptions;
  /**
   * With overrides on and rules keyed by several fields: per rule, its field's place among the call's
   * (one character, "1" the first): the call takes limiterNestedOverrides, an override key per field.
   */
  readonly places?: string;
  /** With `places`: the plan table of each field's rules, in field order (lua/nested_overrides.lua). */
  readonly tables?: readonly string[];
}

/** The rules a stored override applied: a plan's, the custom ones, or the base rules when it is stale. */
export interface Applied {
  readonly name: string;
  readonly rules: readonly Rule[];
  /** The prototype of its decisions, carrying `rules` as their `decidedBy` (carrierOf). */
  readonly carrier?: object;
}

/** A plan as RuleScripts takes it: its name, compiled rules and keys. */
export interface PlanRules {
  readonly name: string;
  readonly rules: readonly Rule[];
  readonly keys: RuleKeys;
}

/**
 * Where each admitted Decision from Redis counted its units: the limiter script's reply (5 integers per
 * rule), or for a one-rule script's decision the place its integer states.
 */
const replies = new WeakMap<Decision, readonly unknown[] | number>();

/**
 * Per rule of an admitted Decision from Redis, where its units were counted, as its script answered:
 * the start of their window, the TAT they hold (gcra, token bucket), their stamp (sliding log).
 * Undefined for a decision no script answered here (a lease's, a copy).
 */
export function countedIn(decision: Decision, n: number): number[] | undefined {
  const reply = replies.get(decision);
  if (reply === undefined) return undefined;
  if (typeof reply === "number") return [reply];
  const countedAt: number[] = [];
  for (let i = 0; i < n; i++) countedAt.push(Number(reply[5 * i + 4]));
  return countedAt;
}

/**
 * A decision script's reply (the limiter script's, a one-rule script's): 5 integers per rule, allowed
 * (1/0), remaining, resetAt, retryAfter (NEVER: never) and where the units were counted; then, when
 * `reserving`, the units reserved.
 */
export function decode(plan: Applied, result: unknown, reserving: boolean, now: number): Decision | Error {
  const planRules = plan.rules;
  const n = planRules.length;
  if (!Array.isArray(result) || result.length !== 5 * n + (reserving ? 1 : 0)) return unexpected(result);
  const rules: Record<string, RuleResult> = {};
  let binding: RuleResult | undefined;
  let bindingName = "";
  let allowed = true;
  for (let i = 0; i < n; i++) {
    const retry = Number(result[5 * i + 3]);
    const outcome: RuleResult = {
      allowed: result[5 * i] === 1,
      limit: planRules[i]!.limit,
      remaining: Number(result[5 * i + 1]),
      resetAt: Number(result[5 * i + 2]),
      retryAfter: retry === NEVER ? Number.POSITIVE_INFINITY : retry,
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
  const decision: Decision & { __proto__: object } = {
    __proto__: plan.carrier ?? carrierOf(planRules),
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
  if (allowed) replies.set(decision, result);
  return decision;
}

export function unexpected(result: unknown): RedisCallError {
  return new RedisCallError("redis", `edgelimit: unexpected script result ${describe(result)}`);
}

/** Whether `candidate` binds more tightly than `current`: a denial over an admission, then the
 * later retry among denials, then the fewer remaining among admissions. */
export function binds(candidate: RuleResult, current: RuleResult): boolean {
  if (candidate.allowed !== current.allowed) return !candidate.allowed;
  if (!candidate.allowed) return candidate.retryAfter > current.retryAfter;
  return candidate.remaining < current.remaining;
}

/** The Decision of a one-rule script's reply (one integer), under `applied`'s one rule. */
export function oneRuleDecision(
  applied: Applied,
  one: Pick<OneRule, "decode" | "counted">,
  result: unknown,
  cost: number,
  now: number,
): Decision | Error {
  if (typeof result !== "number" || !Number.isInteger(result)) return unexpected(result);
  const outcome = one.decode(result, cost, now);
  const name = applied.rules[0]!.name;
  const rules: Record<string, RuleResult> = {};
  rules[name] = outcome;
  const decision: Decision & { __proto__: object } = {
    __proto__: applied.carrier ?? carrierOf(applied.rules),
    allowed: outcome.allowed,
    limit: outcome.limit,
    remaining: outcome.remaining,
    resetAt: outcome.resetAt,
    retryAfter: outcome.retryAfter,
    rule: name,
    source: "redis",
    plan: applied.name,
    decidedAt: now,
    rules,
  };
  if (outcome.allowed) replies.set(decision, one.counted(result, now));
  return decision;
}
