import type { Rule } from "./algorithms/index.js";
import { type Decision, decidedBy } from "./types.js";

interface Entry {
  /** The plan the denial was decided under: a call under another plan is not answered from it. */
  plan: string;
  /** The cost that was denied. Only the same cost is answered: a larger one is denied too, but for
   * longer (or never), and only Redis knows how much longer. */
  cost: number;
  /** Epoch ms at which the identifier could be admitted again. */
  until: number;
  /** The entry is a hit strictly before this: `until`, or sooner when maxStale caps the trust. */
  trustedUntil: number;
  decidedAt: number;
  decision: Decision;
  /**
   * With rules keyed by several fields (setEach): the denied subject's key of each rule, by rule name.
   * Another subject sharing this entry's identifier is answered with the outcomes of the rules whose
   * key it shares only: of the others, nothing here is known.
   */
  keys?: Readonly<Record<string, string>>;
}

/**
 * A bounded cache of deny decisions, least recently used out first. A denial holds until the moment
 * the identifier could be admitted again, and not a millisecond longer, so a hit is always the answer
 * Redis would have given: no request is sent for it. It answers only a call under the plan it was
 * denied under (an upgrade goes to Redis at once); one entry per identifier, the latest denial's.
 * With overrides on, an override set from another isolate may lift the denial early: an entry is then
 * trusted for at most `maxStale` ms after it was decided, and Redis is asked again after that.
 */
export class DenyCache {
  private readonly entries = new Map<string, Entry>();

  constructor(
    readonly maxEntries: number,
    /** Ms a denial is trusted at most (Infinity: until the identifier could be admitted again). */
    readonly maxStale = Number.POSITIVE_INFINITY,
  ) {}

  get size(): number {
    return this.entries.size;
  }

  /**
   * The cached denial of `identifier` for `cost` at `now` under `plan` (default: the base rules), with
   * times made relative to `now`; `keys` and `base` as getEach takes them.
   */
  get(
    identifier: string,
    cost: number,
    now: number,
    plan = "default",
    keys?: Readonly<Record<string, string>>,
    base?: readonly Rule[],
  ): Decision | undefined {
    const entry = this.entries.get(identifier);
    if (entry === undefined) return undefined;
    if (now >= entry.trustedUntil) {
      this.entries.delete(identifier);
      return undefined;
    }
    if (cost !== entry.cost || plan !== entry.plan) return undefined;
    this.entries.delete(identifier);
    this.entries.set(identifier, entry);
    const elapsed = now - entry.decidedAt;
    const decision = entry.decision;
    // each object written out whole, no spreads: a copy that gains properties leaves V8's fast shapes
    const rules: Decision["rules"] = {};
    const shared = entry.keys;
    let another = false;
    for (const name in decision.rules) {
      const rule = decision.rules[name]!;
      if (shared !== undefined && keys !== undefined && shared[name] !== keys[name]) {
        another = true;
        continue;
      }
      const retryAfter = Math.max(0, rule.retryAfter - elapsed);
      rules[name] = {
        allowed: rule.allowed || retryAfter === 0,
        limit: rule.limit,
        remaining: rule.remaining,
        resetAt: rule.resetAt,
        retryAfter,
      };
    }
    const answer: Decision = {
      allowed: decision.allowed,
      limit: decision.limit,
      remaining: decision.remaining,
      resetAt: decision.resetAt,
      retryAfter: entry.until - now,
      rule: decision.rule,
      source: "cache",
      plan: decision.plan,
      decidedAt: now,
      rules,
    };
    // another subject's denial: only the shared rules' outcomes apply to this one, decided by the rules
    // the denied subject's identifiers had for them (an override of the shared identifier included);
    // the others are the call's plan's, not what the denied subject's own overrides made of them
    if (another && base !== undefined) {
      const custom = decision.decidedBy ?? base;
      const applied = base.map((rule, i) => (shared![rule.name] === keys![rule.name] ? custom[i]! : rule));
      if (applied.some((rule, i) => rule !== base[i])) return decidedBy(answer, applied);
      answer.plan = entry.plan;
      return decidedBy(answer, base);
    }
    // the rules of the denial it repeats (a custom override's own included): its headers state them
    return decision.decidedBy === undefined ? answer : decidedBy(answer, decision.decidedBy);
  }

  /**
   * Caches a denial decided at `now` for `cost` under the call's `plan` (default: the decision's). With
   * overrides on they differ: a call under the base rules denied by an override says "custom", and the
   * next such call is answered from the entry.
   */
  set(
    identifier: string,
    cost: number,
    now: number,
    decision: Decision,
    plan = decision.plan,
    keys?: Readonly<Record<string, string>>,
  ): void {
    if (decision.retryAfter <= 0 || this.maxStale <= 0) return;
    this.entries.delete(identifier);
    const until = now + decision.retryAfter;
    this.entries.set(identifier, {
      plan,
      cost,
      until,
      trustedUntil: Math.min(until, now + this.maxStale),
      decidedAt: now,
      decision,
      keys,
    });
    if (this.entries.size > this.maxEntries) {
      this.entries.delete(this.entries.keys().next().value as string);
    }
  }

  /**
   * With rules keyed by several fields: caches the denial under the key of each rule that denied
   * (`keys`, by rule name: its place and its identifier's tag), so that a denial by a shared identifier
   * (a global quota) answers every subject sharing it, until that rule could admit again. Each entry
   * answers as that rule: its limit, remaining, reset and retry.
   */
  setEach(
    keys: Readonly<Record<string, string>>,
    cost: number,
    now: number,
    decision: Decision,
    plan = decision.plan,
  ): void {
    const rules = decision.decidedBy;
    for (const name in keys) {
      const rule = decision.rules[name];
      if (rule === undefined || rule.allowed) continue;
      const one: Decision = {
        allowed: false,
        limit: rule.limit,
        remaining: rule.remaining,
        resetAt: rule.resetAt,
        retryAfter: rule.retryAfter,
        rule: name,
        source: decision.source,
        plan: decision.plan,
        decidedAt: decision.decidedAt,
        rules: decision.rules,
      };
      this.set(keys[name]!, cost, now, rules === undefined ? one : decidedBy(one, rules), plan, keys);
    }
  }

  /**
   * The cached denial answering a subject whose rules' keys are `keys` (see setEach): of the rules
   * with one, the one that holds longest; undefined when none has. Its `rules` are the outcomes of the
   * rules whose key the subject shares with the one denied (all of them for that subject itself).
   * `base`, the call's plan's rules: what another subject's answer is decided by beside the shared
   * rules (its plan the call's, unless a shared rule's own override changed it).
   */
  getEach(
    keys: Readonly<Record<string, string>>,
    cost: number,
    now: number,
    plan = "default",
    base?: readonly Rule[],
  ): Decision | undefined {
    let answer: Decision | undefined;
    for (const name in keys) {
      const hit = this.get(keys[name]!, cost, now, plan, keys, base);
      if (hit !== undefined && (answer === undefined || hit.retryAfter > answer.retryAfter)) answer = hit;
    }
    return answer;
  }

  delete(identifier: string): void {
    this.entries.delete(identifier);
  }
}
