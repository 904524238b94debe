import { type Duration, describe, readDuration } from "./duration.js";
import { type Issue, issueText } from "./validate.js";

/** `limit` units per `period`, up to `burst` at once (default: `limit`). O(1) memory, exact. */
export interface GcraOptions {
  limit: number;
  period: Duration;
  burst?: number;
}
/** A bucket of `capacity` tokens refilled continuously at `refillRate` tokens per `interval` (default 1s). */
export interface TokenBucketOptions {
  capacity: number;
  refillRate: number;
  interval?: Duration;
}
/** `limit` units per `window`. */
export interface WindowOptions {
  limit: number;
  window: Duration;
}

/** A rule as configured: what the constructors return, and what a JSON config holds. */
export type RuleConfig =
  | ({ algorithm: "gcra" } & GcraOptions)
  | ({ algorithm: "tokenBucket" } & TokenBucketOptions)
  | ({ algorithm: "fixedWindow" } & WindowOptions)
  | ({ algorithm: "slidingWindow" } & WindowOptions)
  | ({ algorithm: "slidingLog" } & WindowOptions);

export type Algorithm = RuleConfig["algorithm"];

/** What every validated rule has, whatever its algorithm. */
interface RuleBase {
  readonly name: string;
  /** The limit reported in decisions (burst for GCRA, capacity for a token bucket). */
  readonly limit: number;
  /**
   * The policy as the RateLimit-Policy header states it: `quota` units per `window` ms, the window whole
   * seconds at the rule's real rate (see policyOf), and quota ≥ limit.
   */
  readonly policy: { readonly quota: number; readonly window: number };
}

/** GCRA: `rate` units per `period` ms (the `limit` option), up to `burst` at once (= limit). */
export interface GcraRule extends RuleBase {
  readonly algorithm: "gcra";
  readonly rate: number;
  readonly period: number;
  readonly burst: number;
}

/** A token bucket of `capacity` tokens (= limit), refilled at `refillRate` per `interval` ms. */
export interface TokenBucketRule extends RuleBase {
  readonly algorithm: "tokenBucket";
  readonly capacity: number;
  readonly refillRate: number;
  readonly interval: number;
}

/** A fixed window, sliding window or sliding log: `limit` units per `window` ms. */
export interface WindowRule extends RuleBase {
  readonly algorithm: "fixedWindow" | "slidingWindow" | "slidingLog";
  readonly window: number;
}

/** A validated rule, ready to send (src/engine/scripts/ encodes it for the scripts). */
export type Rule = GcraRule | TokenBucketRule | WindowRule;

/**
 * GCRA: `limit` per `period`, up to `burst` at once. Exact, O(1) memory.
 *
 * @example
 * gcra({ limit: 10, period: "1s", burst: 20 })
 */
export const gcra = (options: GcraOptions): RuleConfig => ({ algorithm: "gcra", ...options });

/**
 * Token bucket with continuous refill: `refillRate` tokens per `interval`, at most `capacity`.
 *
 * @example
 * tokenBucket({ capacity: 20, refillRate: 10, interval: "1s" })
 */
export const tokenBucket = (options: TokenBucketOptions): RuleConfig => ({
  algorithm: "tokenBucket",
  ...options,
});

/**
 * Fixed window: `limit` per `window`, windows aligned to the epoch.
 *
 * @example
 * fixedWindow({ limit: 1000, window: "1d" })
 */
export const fixedWindow = (options: WindowOptions): RuleConfig => ({ algorithm: "fixedWindow", ...options });

/**
 * Sliding window estimated from two counters: O(1) memory, exact for even traffic (docs/algorithms.md gives the bound).
 *
 * @example
 * slidingWindow({ limit: 100, window: "1m" })
 */
export const slidingWindow = (options: WindowOptions): RuleConfig => ({
  algorithm: "slidingWindow",
  ...options,
});

/**
 * Sliding log: exactly `limit` in any `window`; one stored entry per admitted unit (O(limit) memory).
 *
 * @example
 * slidingLog({ limit: 3, window: "30s" })
 */
export const slidingLog = (options: WindowOptions): RuleConfig => ({ algorithm: "slidingLog", ...options });

// Bounds. The scripts compute in Lua doubles, exact below 2^53 (9007199254740992). Every configured
// count, and every product of a count and a duration, stays at or below MAX_EXACT = 2^50, so that each
// intermediate the scripts form stays below 2^53 with room for the clock (now ≈ 2^41 ms today):
//   gcra         capacity = burst×period; d ≤ capacity + limit (in 1/limit ms); next_d = d + cost×period ≤
//                2×capacity + limit; ceil_div(next_d, limit) adds limit - 1: all ≤ 2^52 (cost ≤ burst)
//   tokenBucket  runs as gcra with burst×period = capacity×interval and limit = refillRate: as above
//   fixedWindow  a count ≤ limit and times now + at most 2×window: nothing multiplies them
//   windows      (sliding) limit×window; the sliding estimate previous×(window - elapsed) + current×window ≤
//                2×limit×window ≤ 2^51; stamps and resets are now + at most 2×window
//   slidingLog   one entry per unit: limit ≤ MAX_LOG_LIMIT
// A clock that lags the stored state by more than about 2^51/limit ms (gcra) makes only the retryAfter
// of a request that is denied anyway inexact, by a millisecond at most: admissions stay exact.
/** The largest count, and the largest count × duration product (in ms), a rule may have: 2^50. */
export const MAX_EXACT = 2 ** 50;
const MAX_LOG_LIMIT = 100_000;
/** What a rule name (and a Worker route name) may be: it becomes part of Redis keys. */
export const NAME = /^[A-Za-z0-9_.-]{1,64}$/;
// RFC 9651 §3.3.1: an sf-integer has at most 15 digits.
const MAX_SF_INTEGER = 999_999_999_999_999;

const FIELDS: Record<Algorithm, readonly string[]> = {
  gcra: ["limit", "period", "burst"],
  tokenBucket: ["capacity", "refillRate", "interval"],
  fixedWindow: ["limit", "window"],
  slidingWindow: ["limit", "window"],
  slidingLog: ["limit", "window"],
};

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
  if (typeof algorithm !== "string" || !Object.hasOwn(FIELDS, algorithm)) {
    issues.push({
      path: [...at, "algorithm"],
      message: `unknown algorithm ${describe(algorithm)}; use one of ${Object.keys(FIELDS).join(", ")}`,
    });
    return { issues };
  }
  const known = FIELDS[algorithm as Algorithm];
  for (const field of Object.keys(config)) {
    if (field !== "algorithm" && !known.includes(field)) {
      issues.push({
        path: [...at, field],
        message: `not an option of ${algorithm}; it takes ${known.join(", ")}`,
      });
    }
  }
  const c = config as unknown as Record<string, unknown>;
  // Each field is checked on its own, so one mistake does not hide the next.
  const count = (field: string): number | undefined => {
    const message = countIssue(c[field]);
    if (message === undefined) return c[field] as number;
    issues.push({ path: [...at, field], message });
    return undefined;
  };
  const duration = (field: string): number | undefined => {
    const read = readDuration(c[field]);
    if ("ms" in read) return read.ms;
    issues.push({ path: [...at, field], message: read.message });
    return undefined;
  };
  const bounded = (count: number | undefined, ms: number | undefined, what: string) => {
    if (count === undefined || ms === undefined || count * ms <= MAX_EXACT) return;
    issues.push({
      path: at,
      message: `${what} is ${count * ms} ms, too large to count exactly: it must be at most 2^50 (${MAX_EXACT})`,
    });
  };
  switch (algorithm as Algorithm) {
    case "gcra": {
      const limit = count("limit");
      const period = duration("period");
      const burst = c.burst === undefined ? limit : count("burst");
      bounded(burst, period, "burst × period");
      if (issues.length > 0) return { issues };
      const policy = policyOf(burst!, limit!, period!);
      const rule: GcraRule = {
        name,
        algorithm: "gcra",
        limit: burst!,
        policy,
        rate: limit!,
        period: period!,
        burst: burst!,
      };
      return { rule };
    }
    case "tokenBucket": {
      const capacity = count("capacity");
      const refillRate = count("refillRate");
      const interval = c.interval === undefined ? 1000 : duration("interval");
      bounded(capacity, interval, "capacity × interval");
      if (issues.length > 0) return { issues };
      const policy = policyOf(capacity!, refillRate!, interval!);
      const rule: TokenBucketRule = {
        name,
        algorithm: "tokenBucket",
        limit: capacity!,
        policy,
        capacity: capacity!,
        refillRate: refillRate!,
        interval: interval!,
      };
      return { rule };
    }
    default: {
      const limit = count("limit");
      const window = duration("window");
      // a fixed window only counts and adds times: its limit and window are bounded each on its own
      if (algorithm !== "fixedWindow") bounded(limit, window, "limit × window");
      else bounded(1, window, "window");
      if (algorithm === "slidingLog" && limit !== undefined && limit > MAX_LOG_LIMIT) {
        issues.push({
          path: [...at, "limit"],
          message: `a sliding log stores one entry per unit, so ${limit} is too many (max ${MAX_LOG_LIMIT}); use slidingWindow or gcra`,
        });
      }
      if (issues.length > 0) return { issues };
      const policy = policyOf(limit!, limit!, window!);
      const rule: WindowRule = {
        name,
        algorithm: algorithm as WindowRule["algorithm"],
        limit: limit!,
        policy,
        window: window!,
      };
      return { rule };
    }
  }
}

/**
 * The RateLimit-Policy of a rule that admits `units` per `ms` on average and holds at most `most` at
 * once: q per w seconds at exactly that rate (the draft allows whole seconds only), with the smallest
 * q ≥ `most`, so that RateLimit's r never exceeds q. gcra 10 per second with a burst of 20: q=20;w=2;
 * 10 per 500 ms: q=20;w=1; 1000 per day: q=1000;w=86400. Should q not fit the header's 15 digits,
 * q is `most` and w is rounded up instead (a lower rate, never a higher one).
 */
function policyOf(most: number, units: number, ms: number): Rule["policy"] {
  // units per ms = a per b seconds, a/b in lowest terms; then q = k·a, w = k·b with the least k.
  const perSecond = BigInt(units) * 1000n;
  const g = gcd(perSecond, BigInt(ms));
  const a = perSecond / g;
  const b = BigInt(ms) / g;
  const k = (BigInt(most) + a - 1n) / a;
  if (k * a <= BigInt(MAX_SF_INTEGER) && k * b <= BigInt(MAX_SF_INTEGER)) {
    return { quota: Number(k * a), window: Number(k * b) * 1000 };
  }
  return { quota: most, window: Math.ceil((most * ms) / units / 1000) * 1000 };
}

function gcd(a: bigint, b: bigint): bigint {
  while (b !== 0n) [a, b] = [b, a % b];
  return a;
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
export type RulePlan = Partial<GcraOptions> | Partial<TokenBucketOptions> | Partial<WindowOptions>;
/** A plan: the rules it changes, by rule name. It cannot add or remove a rule, or change its algorithm. */
export type PlanConfig = Record<string, RulePlan>;

/** Plan names a plan may not take: a Decision's `plan` says "default" for the base rules. */
export const RESERVED_PLANS: readonly string[] = ["default", "custom"];
// The sliding window's stored format changes at this limit (lua/algorithms/sliding_window.lua): a packed
// integer below it, a text above. A plan stays on its base rule's side, so that counts carry.
const PACK = 2 ** 25;

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
          message: `expected the fields of ${base.algorithm} it changes, e.g. { ${FIELDS[base.algorithm]?.[0] ?? "limit"}: 1000 }, got ${describe(fields)}`,
        });
        continue;
      }
      for (const [field, value] of Object.entries(fields)) {
        if (field === "algorithm") {
          if (value !== base.algorithm) {
            issues.push({
              path: [...root, name, "algorithm"],
              message: `${what} cannot change a rule's algorithm`,
            });
          }
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
    const limit = merged.limit as number;
    const baseLimit = (base as { limit: number }).limit;
    if (base.algorithm === "slidingWindow" && limit < PACK !== baseLimit < PACK) {
      issues.push({
        path: [...root, name, "limit"],
        message: `${limit} must stay ${baseLimit < PACK ? `below ${PACK}` : `at ${PACK} or above`} like the base rule's ${baseLimit}: a sliding window stores counts in another format there, and the usage counted under one plan would not carry to the other`,
      });
      continue;
    }
    const rule = checked.rule;
    if (
      what === "an override" &&
      (rule.algorithm === "fixedWindow" || rule.algorithm === "slidingWindow") &&
      (fields as { window?: unknown } | undefined)?.window !== undefined
    ) {
      const before = readDuration((base as { window?: unknown }).window);
      if (!("ms" in before) || before.ms !== rule.window) {
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
