// Decisions over rules keyed by several fields on Redis Cluster (`cluster: true`). Each field's keys
// share one hash tag, so one field's rules are one script call in one slot; the fields' keys live in
// different slots, which one script cannot touch. So a decision is one call per field, all sent at
// once (one pipeline: one HTTP request to the REST endpoint, one round trip), each all or nothing
// for its own rules. When every field admits, the decision is admitted. When any denies, the fields
// that admitted are given their units back (the refund script, one more round trip) before the
// decision answers: never over on any identifier, and nothing stays charged for a denied request,
// once the refund has run. Between the charge and the refund, another decision may see those units
// taken and be denied: the one inexactness, always on the side of admitting less. A refund that
// fails (Redis unreachable) leaves the units charged until their window or TAT runs out.
// Settles and refunds are one call per field as well (each rule's part is independent).
import { algorithmOf, fieldOf, type Rule } from "../algorithms/index.js";
import { RuleKeys, tagsOf } from "../keys.js";
import type { CallResult, Transport } from "../transport.js";
import { carrierOf, type Decision, type RuleResult } from "../types.js";
import type { RuleScripts } from "./limiter.js";
import {
  type Applied,
  binds,
  type Counted,
  type Origin,
  type PlanEncoding,
  type PlanRules,
  type Reservation,
  type ScriptCallOptions,
} from "./shared.js";

/** One field's part of every decision: its rules' places, and the scripts of those rules alone. */
interface Part {
  /** The field's place in a subject's tags. */
  readonly place: number;
  /** Its rules' places among the Limiter's rules. */
  readonly indices: readonly number[];
  readonly scripts: RuleScripts;
}

/** What a decision that admitted, or a field's part of one, counted where: for its settle. */
const COUNTED = new WeakMap<Decision, readonly (Counted | undefined)[]>();

/**
 * A Limiter's decisions, reservations, refunds and settles over rules keyed by several fields, on Redis
 * Cluster: one call per field. Built by RuleScripts, which hands it every call.
 */
export class SplitScripts {
  private readonly parts: readonly Part[];

  constructor(
    private readonly rules: readonly Rule[],
    prefix: string,
    transport: Transport,
    options: ScriptCallOptions,
    plans: readonly PlanRules[],
    overrides: boolean,
    fields: readonly string[],
    make: (
      rules: readonly Rule[],
      keys: RuleKeys,
      transport: Transport,
      options: ScriptCallOptions,
      plans: readonly PlanRules[],
      overrides: boolean,
    ) => RuleScripts,
  ) {
    this.parts = fields.map((field, place) => {
      const indices = rules.flatMap((rule, i) => (fieldOf(rule) === field ? [i] : []));
      const own = indices.map((i) => rules[i]!);
      const partPlans = plans.map((plan) => {
        const planRules = indices.map((i) => plan.rules[i]!);
        return { name: plan.name, rules: planRules, keys: new RuleKeys(prefix, planRules, own, true) };
      });
      const scripts = make(
        own,
        new RuleKeys(prefix, own, undefined, true),
        transport,
        options,
        partPlans,
        overrides,
      );
      return { place, indices, scripts };
    });
  }

  /** Decides `cost` units of `subject` under `plan`: one call per field, and a refund of those that admitted when another denies. */
  async decide(subject: string, cost: number, now: number, plan: PlanEncoding): Promise<Decision | Error> {
    const tags = tagsOf(subject);
    const answers = await Promise.all(
      this.parts.map((part) =>
        part.scripts.decide(tags[part.place]!, cost, now, (d) => d, this.planOf(part, plan)),
      ),
    );
    return this.merge(tags, answers, cost, now, plan);
  }

  /** Decides `cost` units reserving up to `want` more: each field reserves, and gives back what it reserved above the least any field did. */
  async reserve(
    subject: string,
    cost: number,
    now: number,
    want: number,
    plan: PlanEncoding,
  ): Promise<Reservation | Error> {
    const tags = tagsOf(subject);
    const answers = await Promise.all(
      this.parts.map((part) =>
        part.scripts.reserve(tags[part.place]!, cost, now, want, this.planOf(part, plan)),
      ),
    );
    const failed = answers.find((answer) => answer instanceof Error) as Error | undefined;
    const reservations = answers.filter((answer): answer is Reservation => !(answer instanceof Error));
    const admitted = failed === undefined && reservations.every((r) => r.decision.allowed);
    const reserved = admitted ? Math.min(...reservations.map((r) => r.reserved)) : 0;
    const countedAt = this.rules.map(() => 0);
    const decisions: (Decision | Error)[] = [];
    const counts: (Counted | undefined)[] = [];
    const refunds: Promise<unknown>[] = [];
    this.parts.forEach((part, p) => {
      const answer = answers[p]!;
      if (answer instanceof Error) {
        decisions.push(answer);
        counts.push(undefined);
        return;
      }
      const counted = answer.decision.allowed ? part.scripts.counted(answer.decision) : undefined;
      counts.push(counted);
      part.indices.forEach((i, j) => {
        countedAt[i] = answer.countedAt[j]!;
      });
      // what this field took beyond what the decision keeps: all of it on a denial or a failure
      const extra = answer.decision.allowed
        ? admitted
          ? answer.reserved - reserved
          : cost + answer.reserved
        : 0;
      if (extra > 0) {
        refunds.push(
          part.scripts.refund(tags[part.place]!, extra, answer.countedAt, now, counted!.applied, {
            at: now,
            taken: cost + answer.reserved,
          }),
        );
      }
      decisions.push(withBack(answer.decision, extra));
    });
    await Promise.all(refunds);
    const decision = this.combine(decisions, now, plan, counts);
    if (decision instanceof Error) return decision;
    return { decision, reserved, countedAt };
  }

  /** Gives `units` back under every rule `applied`, one call per field; true when every field's ran. */
  async refund(
    subject: string,
    units: number,
    countedAt: readonly number[],
    now: number,
    applied: Applied,
    origin: Origin,
  ): Promise<boolean> {
    const tags = tagsOf(subject);
    const done = await Promise.all(
      this.parts.map((part) =>
        part.scripts.refund(
          tags[part.place]!,
          units,
          part.indices.map((i) => countedAt[i] ?? 0),
          now,
          partOf(applied, part),
          origin,
        ),
      ),
    );
    return done.every(Boolean);
  }

  /** The rules an admitted decision was decided by (RuleScripts.applied). */
  applied(decision: Decision): Applied {
    const rules = decision.decidedBy ?? this.rules;
    return { name: decision.plan, rules, carrier: carrierOf(rules) };
  }

  /** Where an admitted decision counted its units, every rule's (RuleScripts.counted). */
  counted(decision: Decision): Counted {
    const parts = COUNTED.get(decision);
    const applied = this.applied(decision);
    const rules = applied.rules;
    const countedAt = this.rules.map(() => 0);
    const counts = rules.map((rule) =>
      algorithmOf(rule).countOf(rule, decision.rules[rule.name]!, decision.decidedAt),
    );
    this.parts.forEach((part, p) => {
      const counted = parts?.[p];
      if (counted === undefined) return;
      part.indices.forEach((i, j) => {
        countedAt[i] = counted.countedAt[j]!;
        counts[i] = counted.counts[j]!;
      });
    });
    return { applied, countedAt, counts };
  }

  /** Settles a decision under every rule it was counted under: one settle call per field. */
  async settle(
    subject: string,
    counted: Counted,
    cost: number,
    actual: number,
    now: number,
  ): Promise<CallResult> {
    const tags = tagsOf(subject);
    const results = await Promise.all(
      this.parts.map((part) =>
        part.scripts.settle(
          tags[part.place]!,
          {
            applied: partOf(counted.applied, part),
            countedAt: part.indices.map((i) => counted.countedAt[i] ?? 0),
            counts: part.indices.map((i) => counted.counts[i] ?? 0),
          },
          cost,
          actual,
          now,
        ),
      ),
    );
    return results.find((result) => !result.ok) ?? results[0]!;
  }

  /** A field's encoding of `plan`. */
  private planOf(part: Part, plan: PlanEncoding): PlanEncoding {
    return part.scripts.plans.get(plan.name) ?? part.scripts.base;
  }

  /**
   * The decision of the fields' answers: admitted when every field admitted; otherwise the fields that
   * admitted get their `cost` back first (a peek took nothing).
   */
  private async merge(
    tags: readonly string[],
    answers: readonly (Decision | Error)[],
    cost: number,
    now: number,
    plan: PlanEncoding,
  ): Promise<Decision | Error> {
    const admitted = answers.every((answer) => !(answer instanceof Error) && answer.allowed);
    if (admitted || cost === 0) return this.combine(answers, now, plan);
    const back: (Decision | Error)[] = [];
    const refunds: Promise<unknown>[] = [];
    this.parts.forEach((part, p) => {
      const answer = answers[p]!;
      if (answer instanceof Error || !answer.allowed) {
        back.push(answer);
        return;
      }
      const counted = part.scripts.counted(answer);
      refunds.push(
        part.scripts.refund(tags[part.place]!, cost, counted.countedAt, now, counted.applied, {
          at: now,
          taken: cost,
        }),
      );
      back.push(withBack(answer, cost));
    });
    await Promise.all(refunds);
    return this.combine(back, now, plan);
  }

  /** One Decision of the fields' own, in rule order; the first failure when any field's call failed. */
  private combine(
    answers: readonly (Decision | Error)[],
    now: number,
    plan: PlanEncoding,
    counts?: readonly (Counted | undefined)[],
  ): Decision | Error {
    const failed = answers.find((answer) => answer instanceof Error);
    if (failed !== undefined) return failed as Error;
    const decisions = answers as readonly Decision[];
    const outcomes: RuleResult[] = new Array(this.rules.length);
    const decidedBy: Rule[] = new Array(this.rules.length);
    const names = new Set<string>();
    this.parts.forEach((part, p) => {
      const decision = decisions[p]!;
      names.add(decision.plan);
      const own = decision.decidedBy ?? part.indices.map((i) => this.rules[i]!);
      part.indices.forEach((i, j) => {
        outcomes[i] = decision.rules[this.rules[i]!.name]!;
        decidedBy[i] = own[j]!;
      });
    });
    const rules: Record<string, RuleResult> = {};
    let binding = 0;
    let allowed = true;
    outcomes.forEach((outcome, i) => {
      rules[this.rules[i]!.name] = outcome;
      if (!outcome.allowed) allowed = false;
      if (i > 0 && binds(outcome, outcomes[binding]!)) binding = i;
    });
    const b = outcomes[binding]!;
    const name = names.size === 1 ? [...names][0]! : "custom";
    const decision: Decision & { __proto__: object } = {
      __proto__: name === plan.name && plan.carrier !== undefined ? plan.carrier : carrierOf(decidedBy),
      allowed,
      limit: b.limit,
      remaining: b.remaining,
      resetAt: b.resetAt,
      retryAfter: allowed ? 0 : b.retryAfter,
      rule: this.rules[binding]!.name,
      source: "redis",
      plan: name,
      decidedAt: now,
      rules,
    };
    if (allowed) {
      COUNTED.set(decision, counts ?? this.parts.map((part, p) => part.scripts.counted(decisions[p]!)));
    }
    return decision;
  }
}

/** `applied`'s rules of one field. */
function partOf(applied: Applied, part: Part): Applied {
  const rules = part.indices.map((i) => applied.rules[i]!);
  return { name: applied.name, rules, carrier: carrierOf(rules) };
}

/** `decision` with `units` given back to each of its rules (their remaining), when more than 0. */
function withBack(decision: Decision, units: number): Decision {
  if (units <= 0) return decision;
  const rules: Record<string, RuleResult> = {};
  for (const name in decision.rules) {
    const rule = decision.rules[name]!;
    rules[name] = { ...rule, remaining: Math.min(rule.limit, rule.remaining + units) };
  }
  const copy = { ...decision, rules, remaining: Math.min(decision.limit, decision.remaining + units) };
  return Object.setPrototypeOf(copy, Object.getPrototypeOf(decision)) as Decision;
}
