import { algorithmOf, type Rule, type WindowRule } from "./algorithms/index.js";
import { describe } from "./duration.js";
import { sha256Hex } from "./sha256.js";

// Keys look like `<prefix>:{<tag>}:<rule>:<algorithm>` (a fixed window adds `:<window index>`, a token
// bucket says `tokenBucket.gcra`, a plan that changes a window's length adds `.<window ms>` to the
// algorithm: see RuleKeys). The tag is the Redis Cluster hash tag shared by every key of
// one identifier, so a multi-rule script never crosses slots. It is built so that distinct identifiers
// never share it:
//   "=" + the identifier with every UTF-16 code unit outside printable ASCII, and "%", "{", "}", escaped
//         as %XXXX: one-to-one, readable for ordinary ids (user:42, 203.0.113.7), never containing "}";
//   "#" + SHA-256 of that escaped form, when it would be longer than MAX_PLAIN: 10 kB identifiers
//         still give short keys. The leading "=" / "#" keeps the two forms apart, and makes the tag
//         non-empty (an empty "{}" would not be a hash tag at all).
const MAX_PLAIN = 128;
/** What a key prefix may be: no braces, which would move the hash tag. */
export const PREFIX = /^[A-Za-z0-9_.:-]{1,64}$/;

/** Validates a key prefix, or throws naming the field. */
export function checkPrefix(prefix: unknown): string {
  if (typeof prefix !== "string" || !PREFIX.test(prefix)) {
    throw new Error(`prefix: must be 1-64 characters of A-Z a-z 0-9 _ . : - (got ${JSON.stringify(prefix)})`);
  }
  return prefix;
}

/**
 * The hash-tagged part of every key of `identifier`.
 *
 * @example
 * keyTag("user:42") // "{=user:42}"
 */
export function keyTag(identifier: string): string {
  let escaped = "";
  let plainFrom = 0;
  for (let i = 0; i < identifier.length; i++) {
    const code = identifier.charCodeAt(i);
    if (code > 0x20 && code < 0x7f && code !== 0x25 && code !== 0x7b && code !== 0x7d) continue;
    escaped += identifier.slice(plainFrom, i) + "%" + code.toString(16).padStart(4, "0");
    plainFrom = i + 1;
  }
  escaped = plainFrom === 0 ? identifier : escaped + identifier.slice(plainFrom);
  return escaped.length <= MAX_PLAIN ? `{=${escaped}}` : `{#${sha256Hex(escaped)}}`;
}

/**
 * Validates the identifier of a `limit()` or `reset()` call: a non-empty string. An empty one is
 * refused rather than counted, since every caller whose id came out empty (a missing header read as
 * "", an unset variable) would otherwise share one bucket. Throws a TypeError or RangeError naming it.
 *
 * @example
 * checkIdentifier("user:42") // "user:42"
 */
export function checkIdentifier(identifier: unknown): string {
  if (typeof identifier !== "string") {
    throw new TypeError(`identifier: expected a string, got ${describe(identifier)}`);
  }
  if (identifier === "") {
    throw new RangeError(
      "identifier: must not be empty (an empty id would put every such caller in one bucket); answer the request yourself, e.g. with a 401, when it carries no id",
    );
  }
  return identifier;
}

/**
 * The Redis keys of a Limiter's rules. The algorithm is part of the key: a rule whose algorithm changes
 * starts afresh instead of reading state written in another algorithm's format. A token bucket keeps
 * GCRA's state, and its key says so ("tokenBucket.gcra"): a token bucket's state of an earlier format
 * is never read. A fixed window has a key per window: the rule's key, ":", the window's index.
 *
 * @example
 * new RuleKeys("edgelimit", limiter.rules).of("user:42", Date.now()) // one key per rule, in rule order
 */
export class RuleKeys {
  private readonly suffixes: readonly string[];
  /** Per rule: the window of a fixed window (whose keys are one per window), else 0. */
  private readonly windows: readonly number[];

  /**
   * A plan's keys take `base`, the base rules: a fixed or sliding window whose window differs from the
   * base rule's gets a key of its own (`...:fixedWindow.<window ms>`), since its state means nothing
   * under another window. Every other key is the base rule's, so the usage counted carries across plans.
   */
  constructor(
    readonly prefix: string,
    rules: readonly Rule[],
    base?: readonly Rule[],
  ) {
    this.suffixes = rules.map((rule, i) => {
      const { key, windowed } = algorithmOf(rule);
      const before = base?.[i];
      const window = (rule as WindowRule).window;
      const own = windowed && before !== undefined && (before as WindowRule).window !== window;
      return own ? `:${rule.name}:${key}.${window}` : `:${rule.name}:${key}`;
    });
    this.windows = rules.map((rule) => algorithmOf(rule).keyWindow(rule));
  }

  /**
   * The keys of `identifier` at `now`, one per rule, in rule order; a fixed window's at `windowStarts[i]`
   * when given (the window some units were counted in).
   */
  of(identifier: string, now: number, windowStarts?: readonly number[]): string[] {
    const base = this.base(identifier);
    const keys = new Array<string>(this.suffixes.length);
    for (let i = 0; i < keys.length; i++) keys[i] = this.key(base, i, windowStarts?.[i] ?? now);
    return keys;
  }

  /**
   * Every key of `identifier` a reset deletes: a fixed window's key outlives its window by a grace,
   * and a caller whose clock runs ahead may already have opened the next one.
   */
  all(identifier: string, now: number): string[] {
    const base = this.base(identifier);
    return this.windows.flatMap((window, i) =>
      window > 0
        ? [now - window, now, now + window].map((t) => this.key(base, i, t))
        : [this.key(base, i, now)],
    );
  }

  /**
   * The key of `identifier`'s stored override: `<prefix>:{<tag>}:override`, in the slot of its rule keys
   * (a rule key has two or more segments after the tag, so the names never meet).
   *
   * @example
   * new RuleKeys("edgelimit", rules).override("user:42") // "edgelimit:{=user:42}:override"
   */
  override(identifier: string): string {
    return `${this.base(identifier)}:override`;
  }

  /**
   * The key of `identifier`'s regional pool under `plan`, in a region's own database:
   * `<prefix>:{<tag>}:pool.<plan>`, in the slot of its rule keys (one segment after the tag, as the
   * override key: never a rule's key, even where a region shares home's database).
   *
   * @example
   * new RuleKeys("edgelimit", rules).pool("user:42", "default") // "edgelimit:{=user:42}:pool.default"
   */
  pool(identifier: string, plan: string): string {
    return `${this.base(identifier)}:pool.${plan}`;
  }

  /** What every key of `identifier` starts with: the prefix and its hash tag. */
  private base(identifier: string): string {
    return `${this.prefix}:${keyTag(identifier)}`;
  }

  /** Rule i's key at `now`, after `base`. */
  private key(base: string, i: number, now: number): string {
    const window = this.windows[i]!;
    const key = base + this.suffixes[i]!;
    return window > 0 ? `${key}:${Math.floor(now / window)}` : key;
  }
}
