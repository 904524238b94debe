// Per-identifier overrides, stored in Redis beside the identifier's state (docs/overrides.md).
//
// - Key: `<prefix>:{<tag>}:override` (RuleKeys.override): the identifier's hash tag, so the decision's
//   script reads it in the same slot as the rule keys. Configuration, not state: no TTL unless the
//   override has an `expiresAt` (then PXAT, set with the value in one SET).
// - Value: `<line>\n<json>`. The line is what the script reads: `=<plan>` for a plan alone, or `!` and
//   4 tokens per rule in rule order, as the limiter script's ARGV encodes a rule, resolved here from the
//   base rules (or the named plan's) with the override's fields over them. The json is the override as
//   given: what get() returns. A plan with nothing else (no expiresAt) is its line alone, `=<plan>\n`,
//   which is also how the plan table names its record: the script looks the value up as it is.
// - Index: a ZSET `<prefix>:overrides` of identifiers, all scored 0, paged by lex: list() needs neither
//   KEYS nor SCAN. set() writes ZADD before SET and delete() DEL before ZREM (one pipeline, in order),
//   so a failure can only leave an index member without a key; a page drops and ZREMs those, as it does
//   members whose key expired.
// - Off the request path: every method's commands go as one request of their own (never in a decision's
//   batch), wait the analytics' background bound (the Limiter's timeout, at least 5 s, at most 30 s),
//   and are sent again on a timeout or an unreachable Redis, up to ATTEMPTS times. That is safe because
//   each is idempotent: SET of the same value (and the same PXAT), ZADD of the same member and score,
//   DEL, ZREM, GET, ZRANGE; nothing counts or versions a write. What a retry cannot order is a late
//   first attempt landing after another writer's newer set (docs/overrides.md).
import {
  checkChanges,
  fieldOf,
  type PlanConfig,
  planConfigs,
  type Rule,
  type RuleConfig,
  type RulePlan,
} from "./algorithms/index.js";
import { type Duration, describe, readDuration } from "./duration.js";
import { RedisCallError } from "./errors.js";
import type { Identities, Identity, RuleKeys } from "./keys.js";
import { limiterArgs } from "./scripts/limiter.js";
import type { Transport } from "./transport.js";
import { type Issue, issuesText, issueText, MAX_TIMER_MS } from "./validate.js";

/** What the Limiter's `overrides` option takes beside `true`. */
export interface OverridesOptions {
  /**
   * How long a cached denial (and a lease) is trusted at most before Redis is asked again (default
   * "1s"; 0: never), so that an override set from another isolate reaches this one within it.
   */
  maxStale?: Duration;
}

/** One identifier's override: a plan, its own values for some rules, or both; until `expiresAt` if given. */
export interface Override {
  /** The plan that applies to the identifier, whatever plan a call names. */
  plan?: string;
  /** Fields of some rules (those of each rule's constructor), over the plan's rules or the base rules. */
  rules?: Record<string, RulePlan>;
  /** Epoch ms at which the override is removed by Redis. */
  expiresAt?: number;
}

/** An identifier and its override, as list() and page() give them. */
export interface OverrideEntry {
  identifier: string;
  override: Override;
}

/** A page of overrides, and the `after` of the next one when there may be more. */
export interface OverridesPage {
  items: OverrideEntry[];
  next?: string;
}

/** A validated `overrides` option. */
export interface OverridesConfig {
  readonly maxStale: number;
}

/** What a Limiter lends its Overrides. */
export interface OverridesContext {
  readonly config: OverridesConfig;
  readonly transport: Transport;
  readonly prefix: string;
  readonly keys: RuleKeys;
  /** The rules and plans as configured (validated). */
  readonly rules: Record<string, RuleConfig>;
  readonly plans: Record<string, PlanConfig> | undefined;
  readonly timeout: number;
  readonly clock: () => number;
  /** What an override's identity is read as: a string (the id), or a record of one field. */
  readonly identities: Identities;
  /** Drops this Limiter's cached denials, leases and its region's pools of the identifier `value` in `field`. */
  readonly forget: (value: string, field: string) => Promise<void>;
}

/** maxStale when `overrides: true`: Retry-After is whole seconds and at least 1 (docs/overrides.md). */
export const DEFAULT_MAX_STALE = 1000;
const FIELDS = ["plan", "rules", "expiresAt"];
const MAX_PAGE = 1000;
const DEFAULT_PAGE = 100;
/** How many times an override's commands are sent when Redis times out or cannot be reached. */
export const ATTEMPTS = 3;
/** Ms between attempts (times the attempt): a refused connection is not asked again at once. */
const RETRY_PAUSE_MS = 100;

/**
 * Validates the Limiter's `overrides` option: undefined/false (off), true, or `{ maxStale }`. Throws
 * naming the field (`overrides.maxStale: ...`), every problem separated by "; ".
 *
 * @example
 * overridesConfig({ maxStale: "5s" }) // { maxStale: 5000 }
 */
export function overridesConfig(value: unknown): OverridesConfig | undefined {
  const checked = checkOverrides(value);
  if (checked.issues === undefined) return checked.overrides;
  throw new Error(issuesText(["overrides"], checked.issues));
}

/**
 * Validates the `overrides` option and reports every problem: the config (undefined: off), or the
 * issues, each with its path inside the option (`["maxStale"]`, or `[]` for a value of the wrong kind).
 *
 * @example
 * checkOverrides({ maxStale: "soon" }).issues
 * // [{ path: ["maxStale"], message: '"soon" is not a duration; use milliseconds or a string like ...' }]
 */
export function checkOverrides(
  value: unknown,
):
  | { readonly overrides: OverridesConfig | undefined; readonly issues?: undefined }
  | { readonly overrides?: undefined; readonly issues: readonly Issue[] } {
  if (value === undefined || value === false) return { overrides: undefined };
  if (value === true) return { overrides: { maxStale: DEFAULT_MAX_STALE } };
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    return {
      issues: [{ path: [], message: `expected true, false or { maxStale }, got ${describe(value)}` }],
    };
  }
  const issues: Issue[] = Object.keys(value)
    .filter((key) => key !== "maxStale")
    .map((key) => ({ path: [key], message: "not an overrides option; it takes maxStale" }));
  const maxStale = (value as { maxStale?: unknown }).maxStale;
  let ms = DEFAULT_MAX_STALE;
  if (maxStale === 0) ms = 0;
  else if (maxStale !== undefined) {
    const read = readDuration(maxStale);
    if ("message" in read) issues.push({ path: ["maxStale"], message: read.message });
    else if (read.ms > MAX_TIMER_MS) {
      issues.push({
        path: ["maxStale"],
        message: `must be at most ${MAX_TIMER_MS} ms, got ${describe(maxStale)}`,
      });
    } else ms = read.ms;
  }
  return issues.length > 0 ? { issues } : { overrides: { maxStale: ms } };
}

/** The Limiter's `limiter.overrides`, over its context (undefined without `overrides`). */
export let buildOverrides: (context: OverridesContext | undefined) => Overrides;

/**
 * A Limiter's per-identifier overrides (`limiter.overrides`). Every method rejects with
 * `overrides: not enabled; pass overrides: true` on a Limiter built without the option.
 *
 * @example
 * await limiter.overrides.set("key_123", { plan: "enterprise" });
 * await limiter.overrides.set("key_456", { rules: { perMinute: { limit: 5_000 } }, expiresAt: Date.now() + 86_400_000 });
 */
export class Overrides {
  /** Whether the Limiter was built with `overrides`. */
  readonly enabled: boolean;
  /** Ms a cached denial or a lease is trusted at most (Infinity when off). */
  readonly maxStale: number;
  /** The index ZSET of identifiers with an override. */
  readonly indexKey: string | undefined;

  static {
    buildOverrides = (context) => new Overrides(context);
  }

  // private: only the Limiter builds one (buildOverrides), so no published type names its context
  private constructor(private readonly context: OverridesContext | undefined) {
    this.enabled = context !== undefined;
    this.maxStale = context?.config.maxStale ?? Number.POSITIVE_INFINITY;
    this.indexKey = context && `${context.prefix}:overrides`;
  }

  /**
   * Stores the identifier's override, replacing any other. Rejects before writing anything, naming the
   * field, for an unknown plan or rule, a value the rule's constructor would refuse, a change of a fixed
   * or sliding window's `window`, an `expiresAt` that is not a whole epoch ms after now, or an unknown
   * field. Then drops this Limiter's cached denial and lease of the identifier and takes its region's
   * pools of it out.
   *
   * @example
   * await limiter.overrides.set("key_123", { plan: "pro", expiresAt: Date.now() + 3_600_000 });
   */
  async set(identifier: Identity, override: Override): Promise<void> {
    const context = this.on();
    const { field, value: id } = context.identities.one(identifier);
    const line = this.lineOf(override, context, field);
    // a plan alone is its line (the script then finds it in the plan table as it is stored)
    const alone = override.rules === undefined && override.expiresAt === undefined;
    const value = alone ? `${line}\n` : `${line}\n${JSON.stringify(override)}`;
    const key = context.keys.overrideOf(id, field);
    const expiresAt = override.expiresAt;
    const set =
      expiresAt === undefined ? ["SET", key, value] : ["SET", key, value, "PXAT", String(expiresAt)];
    // one pipeline, in this order (see the file's head)
    await this.run([["ZADD", this.indexOf(field), "0", id], set]);
    await context.forget(id, field);
  }

  /**
   * The identifier's override as it was set, or undefined.
   *
   * @example
   * await limiter.overrides.get("key_456") // { rules: { perMinute: { limit: 5000 } }, expiresAt: 1767225600000 }
   */
  async get(identifier: Identity): Promise<Override | undefined> {
    const context = this.on();
    const { field, value: id } = context.identities.one(identifier);
    const [value] = await this.run([["GET", context.keys.overrideOf(id, field)]]);
    return typeof value === "string" ? parse(value) : undefined;
  }

  /**
   * Removes the identifier's override (nothing if it has none), then drops this Limiter's cached denial
   * and lease of the identifier and takes its region's pools of it out.
   *
   * @example
   * await limiter.overrides.delete("key_456");
   */
  async delete(identifier: Identity): Promise<void> {
    const context = this.on();
    const { field, value: id } = context.identities.one(identifier);
    await this.run([
      ["DEL", context.keys.overrideOf(id, field)],
      ["ZREM", this.indexOf(field), id],
    ]);
    await context.forget(id, field);
  }

  /**
   * The index of the overrides of identifiers in `field`: `<prefix>:overrides` for "id" (`indexKey`),
   * `<prefix>:overrides.<field>` for another.
   */
  private indexOf(field: string): string {
    return field === "id" ? this.indexKey! : `${this.indexKey}.${field}`;
  }

  /**
   * Every override, in identifier order (by bytes), `pageSize` (1-1000, default 100) per request.
   *
   * @example
   * for await (const { identifier, override } of limiter.overrides.list()) console.log(identifier, override);
   */
  async *list(
    options: { pageSize?: number; within?: string; by?: string } = {},
  ): AsyncGenerator<OverrideEntry> {
    this.on();
    let after: string | undefined;
    for (;;) {
      const page = await this.page({
        after,
        limit: options.pageSize ?? DEFAULT_PAGE,
        within: options.within,
        by: options.by,
      });
      yield* page.items;
      if (page.next === undefined) return;
      after = page.next;
    }
  }

  /**
   * One page of overrides: those of identifiers after `after` (default: from the first), at most `limit`
   * (1-1000, default 100), only identifiers starting with `within` when given; `next` is the `after` of
   * the following page, absent on the last. One ZRANGE and one pipeline of GETs.
   *
   * @example
   * const { items, next } = await limiter.overrides.page({ within: "api:", limit: 50 });
   */
  async page(
    options: { after?: string; limit?: number; within?: string; by?: string } = {},
  ): Promise<OverridesPage> {
    const context = this.on();
    const { after, within } = options;
    const field = options.by ?? "id";
    if (!context.identities.fields.includes(field)) {
      throw new RangeError(
        `by: no rule is keyed by ${describe(field)}; the rules are keyed by ${context.identities.fields.join(", ")}`,
      );
    }
    const index = this.indexOf(field);
    const limit = options.limit ?? DEFAULT_PAGE;
    if (typeof limit !== "number" || !Number.isInteger(limit) || limit < 1 || limit > MAX_PAGE) {
      throw new RangeError(`limit: must be a whole number from 1 to ${MAX_PAGE}, got ${describe(limit)}`);
    }
    if (after !== undefined && typeof after !== "string") {
      throw new TypeError(`after: expected a string, got ${describe(after)}`);
    }
    if (within !== undefined && (typeof within !== "string" || within === "")) {
      throw new TypeError(`within: expected a non-empty string, got ${describe(within)}`);
    }
    // within "api:" is the lex range [api: .. (api; : the prefix with its last code unit incremented
    let min = after === undefined ? "-" : `(${after}`;
    let max = "+";
    if (within !== undefined) {
      if (after === undefined || after < within) min = `[${within}`;
      max = `(${within.slice(0, -1)}${String.fromCharCode(within.charCodeAt(within.length - 1) + 1)}`;
    }
    const [members] = await this.run([["ZRANGE", index, min, max, "BYLEX", "LIMIT", "0", String(limit)]]);
    const ids = members as string[];
    if (ids.length === 0) return { items: [] };
    const values = await this.run(ids.map((id) => ["GET", context.keys.overrideOf(id, field)]));
    const items: OverrideEntry[] = [];
    const gone: string[] = [];
    ids.forEach((identifier, i) => {
      const value = values[i];
      if (typeof value === "string") items.push({ identifier, override: parse(value) });
      else gone.push(identifier);
    });
    // members whose key was deleted or expired: out of the index
    if (gone.length > 0) await this.run([["ZREM", index, ...gone]]);
    return ids.length === limit ? { items, next: ids[ids.length - 1]! } : { items };
  }

  /** The stored line of a valid override, or an Error naming every field wrong. */
  private lineOf(override: Override, context: OverridesContext, field: string): string {
    const issues: Issue[] = [];
    if (override === null || typeof override !== "object" || Array.isArray(override)) {
      throw new TypeError(
        `override: expected { plan } or { rules } (and expiresAt), e.g. { plan: "pro" }, got ${describe(override)}`,
      );
    }
    const hostile = hostileField(override, []);
    if (hostile !== undefined) throw new Error(issueText(hostile));
    for (const field of Object.keys(override)) {
      if (!FIELDS.includes(field)) {
        issues.push({ path: [field], message: `not an override field; it takes ${FIELDS.join(", ")}` });
      }
    }
    const { plan, rules, expiresAt } = override;
    const plans = Object.keys(context.plans ?? {});
    if (plan === undefined && rules === undefined) {
      issues.push({ path: ["plan"], message: 'give plan, rules or both, e.g. { plan: "pro" }' });
    }
    if (plan !== undefined && plan !== "default" && (typeof plan !== "string" || !plans.includes(plan))) {
      issues.push({
        path: ["plan"],
        message: `unknown plan ${describe(plan)}; ${plans.length > 0 ? `the plans are ${plans.join(", ")}` : "this Limiter has no plans"}`,
      });
    }
    let compiled: readonly Rule[] | undefined;
    if (rules !== undefined) {
      if (rules === null || typeof rules !== "object" || Array.isArray(rules)) {
        issues.push({
          path: ["rules"],
          message: `expected the rules it changes, e.g. { ${Object.keys(context.rules)[0]}: { limit: 1000 } }, got ${describe(rules)}`,
        });
      } else if (issues.every((issue) => issue.path[0] !== "plan")) {
        // an override of an identifier in `field` changes only the rules keyed by it
        // (own rules only: "toString" names none, and is checkChanges' to refuse)
        for (const name of Object.keys(rules)) {
          if (!Object.hasOwn(context.rules, name)) continue;
          const by = (context.rules[name] as { by?: string }).by ?? "id";
          if (by !== field) {
            issues.push({
              path: ["rules", name],
              message: `keyed by ${JSON.stringify(by)}, not ${JSON.stringify(field)}: an override of { ${field}: ... } changes only the rules keyed by ${field}`,
            });
          }
        }
      }
      if (issues.every((issue) => issue.path[0] !== "plan" && issue.path[0] !== "rules")) {
        const base = planConfigs(context.rules, context.plans, plan ?? "default");
        const checked = checkChanges(base, rules, ["rules"], "an override");
        if (checked.issues !== undefined) issues.push(...checked.issues);
        else compiled = checked.rules;
      }
    }
    if (expiresAt !== undefined) {
      const now = context.clock();
      if (typeof expiresAt !== "number" || !Number.isSafeInteger(expiresAt) || expiresAt <= now) {
        issues.push({
          path: ["expiresAt"],
          message: `must be a whole epoch ms after now (${now}), got ${describe(expiresAt)}`,
        });
      }
    }
    if (issues.length > 0) throw new Error(issues.map(issueText).join("; "));
    if (compiled === undefined) return `=${plan}`;
    // the limiter script's 4 arguments per rule, as it is sent them (now and cost dropped); with rules
    // keyed by several fields, of the rules keyed by this override's field only (lua/nested_overrides.lua)
    const own = context.identities.nested ? compiled.filter((rule) => fieldOf(rule) === field) : compiled;
    return `!${limiterArgs(own, 0, 1).slice(2).join(" ")}`;
  }

  private on(): OverridesContext {
    if (this.context === undefined) throw new Error("overrides: not enabled; pass overrides: true");
    return this.context;
  }

  /**
   * The replies of `commands`, sent as one request of their own (in order, never batched with a
   * decision), within the background bound, again on a timeout or an unreachable Redis (every command
   * here is idempotent: see the file's head); throws the last failure, or the first command's error.
   */
  private async run(commands: unknown[][]): Promise<unknown[]> {
    const { transport, timeout } = this.on();
    const bound = Math.min(Math.max(timeout, 5000), 30_000);
    for (let attempt = 1; ; attempt++) {
      const replies = await transport.pipeline(commands, { timeout: bound });
      if (replies instanceof RedisCallError) {
        if (attempt >= ATTEMPTS || (replies.kind !== "timeout" && replies.kind !== "unreachable")) {
          throw replies;
        }
        await new Promise((resolve) => setTimeout(resolve, RETRY_PAUSE_MS * attempt));
        continue;
      }
      return commands.map((_, i) => {
        const reply = replies[i];
        if (reply === null || typeof reply !== "object") {
          throw new RedisCallError("http", "edgelimit: the pipeline reply is missing a command's answer");
        }
        if (reply.error !== undefined) {
          throw new RedisCallError("redis", `edgelimit: Redis answered an error: ${String(reply.error)}`);
        }
        return reply.result;
      });
    }
  }
}

/** Field names refused anywhere in an override: merged or spread, they reach a prototype. */
const HOSTILE = new Set(["__proto__", "constructor", "prototype"]);

/**
 * The first field named `__proto__`, `constructor` or `prototype` at any depth of `value` (JSON.parse
 * makes `"__proto__"` an own key, which a later merge would turn into a prototype), or an object whose
 * prototype was set (a literal's `__proto__:`), as an Issue at its path; undefined when there is none.
 */
function hostileField(value: unknown, path: (string | number)[]): Issue | undefined {
  if (value === null || typeof value !== "object") return undefined;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = hostileField(value[i], [...path, i]);
      if (found !== undefined) return found;
    }
    return undefined;
  }
  const prototype = Object.getPrototypeOf(value);
  if (prototype !== Object.prototype && prototype !== null) {
    return {
      path: path.length > 0 ? path : ["override"],
      message: "must be a plain object (its prototype was set)",
    };
  }
  for (const key of Object.keys(value)) {
    if (HOSTILE.has(key)) {
      return {
        path: [...path, key],
        message: "refused: __proto__, constructor and prototype are never field names",
      };
    }
    const found = hostileField((value as Record<string, unknown>)[key], [...path, key]);
    if (found !== undefined) return found;
  }
  return undefined;
}

/** The override stored in `value` (`<line>\n<json>`, or a plan's line alone: `=<plan>\n`). */
function parse(value: string): Override {
  const end = value.indexOf("\n");
  if (end === value.length - 1 && value.startsWith("=")) return { plan: value.slice(1, end) };
  return JSON.parse(value.slice(end + 1)) as Override;
}
