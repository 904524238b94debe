// The algorithms: each module in this directory is one (its options, rule, checks, encoding and
// traits), its Lua in lua/algorithms/. This file registers them and holds what every rule shares: its
// checks, the plans' checks, the cost's.
import { describe, readDuration } from "../duration.js";
import { type Issue, issueText } from "../validate.js";
import { fixedWindowAlgorithm } from "./fixed-window.js";
import { type GcraOptions, type GcraRule, gcraAlgorithm } from "./gcra.js";
import {
  type IntervalBucketOptions,
  type IntervalBucketRule,
  intervalBucketAlgorithm,
} from "./interval-bucket.js";
import {
  type AlgorithmModule,
  type CountingOptions,
  type Fields,
  MAX_EXACT,
  type WindowOptions,
  type WindowRule,
} from "./shared.js";
import { slidingLogAlgorithm } from "./sliding-log.js";
import { slidingWindowAlgorithm } from "./sliding-window.js";
import { type TokenBucketOptions, type TokenBucketRule, tokenBucketAlgorithm } from "./token-bucket.js";

export { fixedWindow } from "./fixed-window.js";
export { type GcraOptions, type GcraRule, gcra } from "./gcra.js";
export { type IntervalBucketOptions, type IntervalBucketRule, intervalBucket } from "./interval-bucket.js";
export {
  type AlgorithmModule,
  type CountingOptions,
  type KeyedOptions,
  MAX_EXACT,
  type WindowOptions,
  type WindowRule,
} from "./shared.js";
export { slidingLog } from "./sliding-log.js";
export { slidingWindow } from "./sliding-window.js";
export { type TokenBucketOptions, type TokenBucketRule, tokenBucket } from "./token-bucket.js";

/** A rule as configured: what the constructors return, and what a JSON config holds. */
export type RuleConfig =
  | ({ algorithm: "gcra" } & GcraOptions)
  | ({ algorithm: "tokenBucket" } & TokenBucketOptions)
  | ({ algorithm: "intervalBucket" } & IntervalBucketOptions)
  | ({ algorithm: "fixedWindow" } & WindowOptions & CountingOptions)
  | ({ algorithm: "slidingWindow" } & WindowOptions & CountingOptions)
  | ({ algorithm: "slidingLog" } & WindowOptions);

export type Algorithm = RuleConfig["algorithm"];

/** A validated rule, ready to send (src/engine/scripts/ encodes it for the scripts). */
export type Rule = GcraRule | TokenBucketRule | IntervalBucketRule | WindowRule;

/** Every algorithm, by the name its rules give. */
const ALGORITHMS: Record<Algorithm, AlgorithmModule> = {
  gcra: gcraAlgorithm,
  tokenBucket: tokenBucketAlgorithm,
  intervalBucket: intervalBucketAlgorithm,
  fixedWindow: fixedWindowAlgorithm,
  slidingWindow: slidingWindowAlgorithm,
  slidingLog: slidingLogAlgorithm,
};

/**
 * What the engine knows of `rule`'s algorithm: its encoding and traits.
 *
 * @example
 * algorithmOf(rule).leasable // false for a sliding log
 */
export function algorithmOf(rule: Pick<Rule, "algorithm">): AlgorithmModule {
  return ALGORITHMS[rule.algorithm];
}

/** What a rule name (and a Worker route name) may be: it becomes part of Redis keys. */
export const NAME = /^[A-Za-z0-9_.-]{1,64}$/;

/**
 * Validates one rule and turns it into what the script reads. Throws an Error naming the rule and
 * field; when several fields are wrong, the message lists every one, separated by "; ".
 *
 * @example
 * compileRule("daily", fixedWindow({ limit: 1000, window: "1d" }))
 * // { name: "daily", algorithm: "fixedWindow", limit: 1000, window: 86400000, policy: { quota: 1000, window: 86400000 } }
 */
export function compileRule(name: string, config: RuleConfig): Rule {
  const checked = checkRule(name, config);
  if (checked.issues !== undefined) throw new Error(checked.issues.map(issueText).join("; "));
  return checked.rule;
}

/**
 * Validates one rule and reports every problem: the rule, or the list of issues. Each issue's path is
 * `["rules", name, field]`, or `["rules", name]` for one that spans fields ("burst × period") or for a
 * rule that is not an object, or `["rules"]` for a bad rule name.
 *
 * @example
 * checkRule("r", { algorithm: "gcra", limit: 0, period: "1 week" }).issues
 * // [{ path: ["rules", "r", "limit"], message: "must be a positive whole number, got 0" },
 * //  { path: ["rules", "r", "period"], message: '"1 week" is not a duration; ...' }]
 */
export function checkRule(
  name: string,
  config: RuleConfig,
):
  | { readonly rule: Rule; readonly issues?: undefined }
  | { readonly rule?: undefined; readonly issues: readonly Issue[] } {
  const issues: Issue[] = [];
  if (!NAME.test(name)) {
    issues.push({
      path: ["rules"],
      message: `rule name ${describe(name)} must be 1-64 characters of A-Z a-z 0-9 _ . -`,
    });
  }
  const at = ["rules", name];
  if (config === null || typeof config !== "object" || Array.isArray(config)) {
    issues.push({
      path: at,
      message: `expected a rule such as gcra({ limit, period }), got ${describe(config)}`,
    });
    return { issues };
  }
  const algorithm = (config as { algorithm?: unknown }).algorithm;
  if (typeof algorithm !== "string" || !Object.hasOwn(ALGORITHMS, algorithm)) {
    issues.push({
      path: [...at, "algorithm"],
      message: `unknown algorithm ${describe(algorithm)}; use one of ${Object.keys(ALGORITHMS).join(", ")}`,
    });
    return { issues };
  }
  const module = ALGORITHMS[algorithm as Algorithm];
  const known = module.fields;
  for (const field of Object.keys(config)) {
    if (
      field !== "algorithm" &&
      field !== "by" &&
      !known.includes(field) &&
      !module.options?.includes(field)
    ) {
      issues.push({
        path: [...at, field],
        message: `not an option of ${algorithm}; it takes ${known.join(", ")}`,
      });
    }
  }
  const c = config as unknown as Record<string, unknown>;
  const by = c.by ?? "id";
  if (typeof by !== "string" || !FIELD.test(by)) {
    issues.push({
      path: [...at, "by"],
      message: `must name a field of the identifier record, 1-64 characters of A-Z a-z 0-9 _ . : - (got ${describe(by)})`,
    });
  }
  // Each field is checked on its own, so one mistake does not hide the next.
  const fields: Fields = {
    has: (field) => c[field] !== undefined,
    count(field) {
      const message = countIssue(c[field]);
      if (message === undefined) return c[field] as number;
      issues.push({ path: [...at, field], message });
      return undefined;
    },
    duration(field) {
      const read = readDuration(c[field]);
      if ("ms" in read) return read.ms;
      issues.push({ path: [...at, field], message: read.message });
      return undefined;
    },
    flag(field) {
      const value = c[field];
      if (value === undefined || typeof value === "boolean") return value === true;
      issues.push({ path: [...at, field], message: `must be true or false, got ${describe(value)}` });
      return false;
    },
    bounded(count, ms, what) {
      if (count === undefined || ms === undefined || count * ms <= MAX_EXACT) return;
      issues.push({
        path: at,
        message: `${what} is ${count * ms} ms, too large to count exactly: it must be at most 2^50 (${MAX_EXACT})`,
      });
    },
    issue: (field, message) => issues.push({ path: [...at, field], message }),
    get failed() {
      return issues.length > 0;
    },
  };
  const rule = module.compile(name, fields);
  if (rule === undefined || issues.length > 0) return { issues };
  // `by` is set only where it is not the default, so a rule keyed by "id" reads as it always did
  return { rule: by === "id" ? rule : { ...rule, by: by as string } };
}

/** What a rule's `by` may be: a field of the identifier record (a Worker's key spec, "header:x-api-key", is one). */
export const FIELD = /^[A-Za-z0-9_.:-]{1,64}$/;

/**
 * The field of the identifier record that keys `rule` (its `by`; "id" by default).
 *
 * @example
 * fieldOf(compileRule("perOrg", fixedWindow({ limit: 25, window: "1h", by: "org" }))) // "org"
 */
export function fieldOf(rule: Pick<Rule, "by">): string {
  return rule.by ?? "id";
}

/**
 * The largest cost a request may have and still be admitted by every rule: the smallest rule limit
 * (burst for GCRA, capacity for a token bucket). A larger cost is denied forever.
 *
 * @example
 * maxCost([compileRule("a", gcra({ limit: 10, period: "1s", burst: 20 }))]) // 20
 */
export function maxCost(rules: readonly Pick<Rule, "limit">[]): number {
  return Math.min(...rules.map((rule) => rule.limit));
}

/**
 * Throws a RangeError naming `field` when `cost` can never be admitted by every rule.
 *
 * @example
 * checkCost(limiter.rules, 5, "cost") // ok when every rule holds at least 5
 */
export function checkCost(rules: readonly Pick<Rule, "name" | "limit">[], cost: number, field: string): void {
  for (const rule of rules) {
    if (cost > rule.limit) {
      throw new RangeError(
        `${field}: ${cost} can never be admitted: rule "${rule.name}" holds at most ${rule.limit} (make the cost at most ${maxCost(rules)}, or raise the rule's limit)`,
      );
    }
  }
}

// What is wrong with a configured count, if anything.
function countIssue(value: unknown): string | undefined {
  if (typeof value !== "number" || !Number.isInteger(value) || value <= 0) {
    return `must be a positive whole number, got ${describe(value)}`;
  }
  if (value > MAX_EXACT) return `must be at most 2^50 (${MAX_EXACT}) to be counted exactly, got ${value}`;
  return undefined;
}

/**
 * What a plan changes in one rule: some of the fields of the rule's constructor (`limit`, `burst`,
 * `window`, ...). Fields left out keep the base rule's.
 */
export type RulePlan =
  | Partial<GcraOptions>
  | Partial<TokenBucketOptions>
  | Partial<WindowOptions>
  | Partial<IntervalBucketOptions>;
/** A plan: the rules it changes, by rule name. It cannot add or remove a rule, or change its algorithm. */
export type PlanConfig = Record<string, RulePlan>;

/** Plan names a plan may not take: a Decision's `plan` says "default" for the base rules. */
export const RESERVED_PLANS: readonly string[] = ["default", "custom"];

/**
 * Validates `plans` against the base rules (as configured) and compiles each plan's rules: the base
 * rule's config with the plan's fields over it, checked as the rule's constructor would be, so
 * defaults follow (a plan `{ limit: 1000 }` on `gcra({ limit: 100, period: "1m" })` gets burst 1000).
 * Reports every problem, each issue's path under `["plans", plan, rule, field]`.
 *
 * @example
 * checkPlans({ perMinute: gcra({ limit: 100, period: "1m" }) }, { pro: { perMinute: { limit: 1000 } } }).plans
 * // Map { "pro" => [{ name: "perMinute", algorithm: "gcra", rate: 1000, burst: 1000, ... }] }
 */
export function checkPlans(
  rules: Record<string, RuleConfig>,
  plans: unknown,
):
  | { readonly plans: ReadonlyMap<string, readonly Rule[]>; readonly issues?: undefined }
  | { readonly plans?: undefined; readonly issues: readonly Issue[] } {
  if (plans === null || typeof plans !== "object" || Array.isArray(plans)) {
    return {
      issues: [
        {
          path: ["plans"],
          message: `expected plans by name, e.g. { pro: { ${Object.keys(rules)[0] ?? "perMinute"}: { limit: 1000 } } }, got ${describe(plans)}`,
        },
      ],
    };
  }
  const issues: Issue[] = [];
  const compiled = new Map<string, readonly Rule[]>();
  const names = Object.keys(rules);
  for (const [plan, changes] of Object.entries(plans as Record<string, unknown>)) {
    if (RESERVED_PLANS.includes(plan)) {
      issues.push({
        path: ["plans", plan],
        message: `"${plan}" is reserved (a decision's plan says "default" for the base rules and "custom" for an override); name the plan otherwise`,
      });
      continue;
    }
    if (!NAME.test(plan)) {
      issues.push({
        path: ["plans"],
        message: `plan name ${describe(plan)} must be 1-64 characters of A-Z a-z 0-9 _ . -`,
      });
      continue;
    }
    if (changes === null || typeof changes !== "object" || Array.isArray(changes)) {
      issues.push({
        path: ["plans", plan],
        message: `expected the rules it changes, e.g. { ${names[0]}: { limit: 1000 } }, got ${describe(changes)}`,
      });
      continue;
    }
    const checked = checkChanges(rules, changes as Record<string, unknown>, ["plans", plan], "a plan");
    if (checked.issues !== undefined) issues.push(...checked.issues);
    else compiled.set(plan, checked.rules);
  }
  return issues.length > 0 ? { issues } : { plans: compiled };
}

/**
 * The rule configs of `plan` ("default": the base rules; the plans already validated): each base
 * config with the plan's fields over it. What an override giving both `plan` and `rules` starts from.
 *
 * @example
 * planConfigs(rules, plans, "pro").perMinute // { algorithm: "gcra", limit: 1000, period: "1m" }
 */
export function planConfigs(
  rules: Record<string, RuleConfig>,
  plans: Record<string, PlanConfig> | undefined,
  plan: string,
): Record<string, RuleConfig> {
  const changes = plan === "default" ? undefined : plans?.[plan];
  const out: Record<string, RuleConfig> = {};
  for (const [name, base] of Object.entries(rules)) {
    const merged: Record<string, unknown> = { ...base };
    for (const [field, value] of Object.entries(changes?.[name] ?? {})) {
      if (field !== "algorithm" && value !== undefined) merged[field] = value;
    }
    out[name] = merged as unknown as RuleConfig;
  }
  return out;
}

/**
 * Validates `changes` (rule name -> some fields of its constructor) over `rules` (configs, in rule
 * order) and compiles every rule, changed or not: its config with the changed fields over it, checked
 * as the rule's constructor would be. Issues are rooted at `root` (`["plans", "pro"]` gives
 * `plans.pro.perMinute.limit`). What a plan and an override share; an override (`what` "an override")
 * also may not change a fixed or sliding window's `window`: the script must know that key before it
 * reads the override.
 *
 * @example
 * checkChanges(rules, { perMinute: { limit: 5000 } }, ["rules"], "an override").rules // every rule, compiled
 */
export function checkChanges(
  rules: Record<string, RuleConfig>,
  changes: Record<string, unknown>,
  root: readonly string[],
  what: "a plan" | "an override",
):
  | { readonly rules: readonly Rule[]; readonly issues?: undefined }
  | { readonly rules?: undefined; readonly issues: readonly Issue[] } {
  const issues: Issue[] = [];
  const names = Object.keys(rules);
  for (const rule of Object.keys(changes)) {
    if (!names.includes(rule)) {
      issues.push({ path: [...root, rule], message: `not a rule; the rules are ${names.join(", ")}` });
    }
  }
  const compiled: Rule[] = [];
  for (const name of names) {
    const base = rules[name]!;
    const fields = changes[name];
    const merged: Record<string, unknown> = { ...base };
    if (fields !== undefined) {
      if (fields === null || typeof fields !== "object" || Array.isArray(fields)) {
        issues.push({
          path: [...root, name],
          message: `expected the fields of ${base.algorithm} it changes, e.g. { ${ALGORITHMS[base.algorithm]?.fields[0] ?? "limit"}: 1000 }, got ${describe(fields)}`,
        });
        continue;
      }
      for (const [field, value] of Object.entries(fields)) {
        if (field === "algorithm" || field === "by") {
          const was = (base as unknown as Record<string, unknown>)[field];
          if (field === "algorithm" ? value !== was : (value ?? "id") !== (was ?? "id")) {
            issues.push({
              path: [...root, name, field],
              message: `${what} cannot change a rule's ${field === "by" ? "identifier field (by)" : "algorithm"}`,
            });
          }
        } else if (
          (field === "overshoot" || field === "givesBack") &&
          ALGORITHMS[base.algorithm]?.windowed &&
          Boolean(value) !== Boolean((base as unknown as Record<string, unknown>)[field])
        ) {
          // a window's stored override and plan records carry its limit and window only: how it counts
          // would be read as the base rule's, or the override as stale
          issues.push({
            path: [...root, name, field],
            message: `${what} cannot change how a window rule counts (overshoot, givesBack): give the base rule its own`,
          });
        } else if (value !== undefined) merged[field] = value;
      }
    }
    const checked = checkRule(name, merged as unknown as RuleConfig);
    if (checked.issues !== undefined) {
      for (const issue of checked.issues) {
        issues.push({ path: [...root, ...issue.path.slice(1)], message: issue.message });
      }
      continue;
    }
    const rule = checked.rule;
    const module = algorithmOf(rule);
    const carried = module.carries?.((base as { limit: number }).limit, merged.limit as number);
    if (carried !== undefined) {
      issues.push({ path: [...root, name, "limit"], message: carried });
      continue;
    }
    if (
      what === "an override" &&
      module.windowed &&
      (fields as { window?: unknown } | undefined)?.window !== undefined
    ) {
      const before = readDuration((base as { window?: unknown }).window);
      if (!("ms" in before) || before.ms !== (rule as WindowRule).window) {
        issues.push({
          path: [...root, name, "window"],
          message: "an override cannot change a window; give the identifier a plan with that window",
        });
        continue;
      }
    }
    compiled.push(rule);
  }
  return issues.length > 0 ? { issues } : { rules: compiled };
}
