import { algorithmOf, fieldOf, type Rule, type WindowRule } from "./algorithms/index.js";
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
 * The hash-tagged part of every key of `identifier`; of a field other than "id" (a rule's `by`), the
 * field before the "=" or "#": `{org=acme}`. Field names hold none of "{", "}", "=", "#", "%", so the
 * tags of distinct (field, identifier) pairs never meet, and "id"'s are the tags they always were.
 *
 * @example
 * keyTag("user:42") // "{=user:42}"
 * keyTag("acme", "org") // "{org=acme}"
 */
export function keyTag(identifier: string, field = "id"): string {
  const tag = idTag(identifier);
  return field === "id" ? tag : `{${field}${tag.slice(1)}`;
}

function idTag(identifier: string): string {
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
export function checkIdentifier(identifier: unknown, name = "identifier"): string {
  if (typeof identifier !== "string") {
    throw new TypeError(`${name}: expected a string, got ${describe(identifier)}`);
  }
  if (identifier === "") {
    throw new RangeError(
      `${name}: must not be empty (an empty id would put every such caller in one bucket); answer the request yourself, e.g. with a 401, when it carries no id`,
    );
  }
  return identifier;
}

/**
 * Who a decision is for: an identifier, or a record of identifiers by field when rules are keyed by
 * several (`{ user: "u1", org: "acme" }`: each rule counts the value of its `by`). A string `s` means
 * `{ id: s }`.
 */
export type Identity = string | Readonly<Record<string, string>>;

/**
 * The identities a Limiter's rules take, and what the engine calls a decision's subject: the string
 * its caches, leases, pools and keys go by. With every rule keyed by "id", the subject is the
 * identifier itself; with several fields, it is their tags in field order (`{user=u1}{org=acme}`),
 * one-to-one with the values (a tag never holds "}"), from which RuleKeys takes each rule's.
 *
 * @example
 * const identities = new Identities(limiter.rules); // perUser by user, perOrg by org
 * identities.subject({ user: "u1", org: "acme" }) // "{user=u1}{org=acme}"
 */
export class Identities {
  /** The distinct fields, in the order the rules first name them. */
  readonly fields: readonly string[];
  /** Whether the rules are keyed by anything but "id". */
  readonly nested: boolean;
  /** Per field, the first rule keyed by it (for messages). */
  private readonly firstRule: readonly string[];

  constructor(rules: readonly Rule[]) {
    this.fields = fieldsOf(rules);
    this.nested = this.fields.length > 1 || this.fields[0] !== "id";
    this.firstRule = this.fields.map((field) => rules.find((rule) => fieldOf(rule) === field)!.name);
  }

  /**
   * The subject of `identity`, or a TypeError or RangeError naming the field that is missing, not a
   * string, or empty (before anything is sent or charged).
   */
  subject(identity: unknown): string {
    if (!this.nested) {
      if (identity === null || typeof identity !== "object") return checkIdentifier(identity);
      const record = this.record(identity);
      return checkIdentifier(Object.hasOwn(record, "id") ? record.id : undefined, "identifier.id");
    }
    const record = typeof identity === "string" ? undefined : this.record(identity);
    let subject = "";
    for (let i = 0; i < this.fields.length; i++) {
      const field = this.fields[i]!;
      // an own field only: a record's prototype (toString, constructor) is no identifier
      const value =
        record === undefined
          ? field === "id"
            ? identity
            : undefined
          : Object.hasOwn(record, field)
            ? record[field]
            : undefined;
      if (value === undefined) {
        throw new TypeError(
          `identifier.${field}: missing; rule "${this.firstRule[i]}" is keyed by it (by: "${field}"), so limit() takes a record such as { ${this.fields.map((f) => `${f}: "..."`).join(", ")} }`,
        );
      }
      subject += keyTag(checkIdentifier(value, `identifier.${field}`), field);
    }
    return subject;
  }

  /**
   * The one field and value of an override's or a reset's identity: a string is `id`; a record must
   * name exactly one field, one the rules are keyed by.
   */
  one(identity: unknown): { readonly field: string; readonly value: string } {
    if (typeof identity === "string") {
      if (!this.fields.includes("id")) {
        throw new TypeError(
          `identifier: no rule is keyed by "id"; name the field, e.g. { ${this.fields[0]}: ${JSON.stringify(identity)} }`,
        );
      }
      return { field: "id", value: checkIdentifier(identity) };
    }
    const record = this.record(identity);
    const names = Object.keys(record);
    if (names.length !== 1) {
      throw new TypeError(
        `identifier: name exactly one field (the rules are keyed by ${this.fields.join(", ")}), got ${names.length === 0 ? "none" : names.join(", ")}`,
      );
    }
    const field = names[0]!;
    if (!this.fields.includes(field)) {
      throw new RangeError(
        `identifier.${field}: no rule is keyed by it; the rules are keyed by ${this.fields.join(", ")}`,
      );
    }
    return { field, value: checkIdentifier(record[field], `identifier.${field}`) };
  }

  /**
   * How a decision of `subject` is named to analytics and `onDecision`: the identifier itself, or with
   * several fields the binding rule's field and value, `org=acme` (the value as given, its tag read back).
   */
  label(subject: string, field: string): string {
    if (!this.nested) return subject;
    const tag = tagsOf(subject)[this.fields.indexOf(field)]!;
    const plain = tag.indexOf("=");
    const at = plain === -1 ? tag.indexOf("#") : plain;
    const value = tag.slice(at + 1, -1);
    // an escaped value (%XXXX) reads back as the code units it stands for; a hashed one stays a hash
    const read =
      plain === -1
        ? `#${value}`
        : value.replace(/%([0-9a-f]{4})/g, (_, hex: string) => String.fromCharCode(Number.parseInt(hex, 16)));
    return `${field}=${read}`;
  }

  private record(identity: unknown): Readonly<Record<string, unknown>> {
    if (identity === null || typeof identity !== "object" || Array.isArray(identity)) {
      throw new TypeError(
        `identifier: expected a string or a record of identifiers by field (${this.fields.join(", ")}), got ${describe(identity)}`,
      );
    }
    return identity as Record<string, unknown>;
  }
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
   * With rules keyed by several fields (their `by`): per rule, its field's place in the subject (see
   * Identities), whose tag its key takes. Undefined when every rule is keyed by "id": the subject is
   * then the identifier itself.
   */
  private readonly places: readonly number[] | undefined;
  /** Per rule: whether its key has a refund ledger beside it, `<key>:given` (a TAT's: lua/algorithms/gcra.lua). */
  private readonly ledgers: readonly boolean[];

  /**
   * A plan's keys take `base`, the base rules: a fixed or sliding window whose window differs from the
   * base rule's gets a key of its own (`...:fixedWindow.<window ms>`), since its state means nothing
   * under another window. Every other key is the base rule's, so the usage counted carries across plans.
   */
  constructor(
    readonly prefix: string,
    rules: readonly Rule[],
    base?: readonly Rule[],
    /** Take every subject as tags (`{=user:42}`), even when every rule is keyed by "id": one field's part of a split decision (scripts/split.ts). */
    tagged = false,
  ) {
    this.suffixes = rules.map((rule, i) => {
      const { key, windowed } = algorithmOf(rule);
      const before = base?.[i];
      const window = (rule as WindowRule).window;
      const own = windowed && before !== undefined && (before as WindowRule).window !== window;
      return own ? `:${rule.name}:${key}.${window}` : `:${rule.name}:${key}`;
    });
    this.windows = rules.map((rule) => algorithmOf(rule).keyWindow(rule));
    this.ledgers = rules.map((rule) => algorithmOf(rule).holdsTat);
    const fields = fieldsOf(rules);
    this.places =
      fields.length === 1 && fields[0] === "id" && !tagged
        ? undefined
        : rules.map((rule) => fields.indexOf(fieldOf(rule)));
  }

  /**
   * The keys of `identifier` at `now`, one per rule, in rule order; a fixed window's at `countedAt[i]`
   * when given (the window some units were counted in).
   */
  of(identifier: string, now: number, countedAt?: readonly number[]): string[] {
    const keys = new Array<string>(this.suffixes.length);
    const places = this.places;
    if (places === undefined) {
      const base = this.base(identifier);
      for (let i = 0; i < keys.length; i++) keys[i] = this.key(base, i, countedAt?.[i] ?? now);
      return keys;
    }
    const tags = tagsOf(identifier);
    for (let i = 0; i < keys.length; i++) {
      keys[i] = this.key(`${this.prefix}:${tags[places[i]!]}`, i, countedAt?.[i] ?? now);
    }
    return keys;
  }

  /**
   * Every key of `identifier` a reset deletes: a fixed window's key outlives its window by a grace,
   * and a caller whose clock runs ahead may already have opened the next one.
   */
  all(identifier: string, now: number): string[] {
    const tags = this.places && tagsOf(identifier);
    return this.windows.flatMap((window, i) => {
      const base = tags === undefined ? this.base(identifier) : `${this.prefix}:${tags[this.places![i]!]}`;
      return this.around(base, i, window, now);
    });
  }

  /**
   * Every key a reset of the rules keyed by the tag `tag` deletes (a fixed window's around `now`), for a
   * Limiter whose rules are keyed by several fields: `tag` is one field's (`keyTag(value, field)`).
   */
  allOfTag(tag: string, field: string, rules: readonly Rule[], now: number): string[] {
    const base = `${this.prefix}:${tag}`;
    return this.windows.flatMap((window, i) =>
      fieldOf(rules[i]!) === field ? this.around(base, i, window, now) : [],
    );
  }

  /** Rule i's keys a reset deletes: a fixed window's around `now`, else its key and its refund ledger. */
  private around(base: string, i: number, window: number, now: number): string[] {
    if (window > 0) return [now - window, now, now + window].map((t) => this.key(base, i, t));
    const key = this.key(base, i, now);
    return this.ledgers[i] ? [key, `${key}:given`] : [key];
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
   * The keys of the stored overrides a decision of `subject` reads, one per field of the subject (a
   * Limiter whose rules are all keyed by "id": the one `override(identifier)` gives). Each is
   * `<prefix>:<tag>:override` under its own field's tag (`{org=acme}`), in the slot of that field's rule keys.
   */
  overrides(subject: string): string[] {
    if (this.places === undefined) return [this.override(subject)];
    return tagsOf(subject).map((tag) => `${this.prefix}:${tag}:override`);
  }

  /** The key of the stored override of `value` in `field` (`overrides.set({ org: "acme" }, ...)`). */
  overrideOf(value: string, field: string): string {
    return `${this.prefix}:${keyTag(value, field)}:override`;
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

  /**
   * What every key of `identifier` starts with: the prefix and its hash tag. A subject of several
   * fields is its tags already, the first of which is its hash tag (its pool key's).
   */
  private base(identifier: string): string {
    return this.places === undefined
      ? `${this.prefix}:${keyTag(identifier)}`
      : `${this.prefix}:${identifier}`;
  }

  /** Rule i's key at `now`, after `base`. */
  private key(base: string, i: number, now: number): string {
    const window = this.windows[i]!;
    const key = base + this.suffixes[i]!;
    return window > 0 ? `${key}:${Math.floor(now / window)}` : key;
  }
}

/**
 * The distinct fields `rules` are keyed by (their `by`), in the order the rules first name them.
 *
 * @example
 * fieldsOf([perUser, perOrg, global]) // ["user", "org", "global"]
 */
export function fieldsOf(rules: readonly Pick<Rule, "by">[]): string[] {
  const fields: string[] = [];
  for (const rule of rules) {
    const field = fieldOf(rule);
    if (!fields.includes(field)) fields.push(field);
  }
  return fields;
}

/**
 * The tags of a subject of several fields, one per field in the Limiter's field order: a tag never holds
 * "}" (keyTag escapes it), so the subject splits after each.
 */
export function tagsOf(subject: string): string[] {
  const parts = subject.split("}");
  parts.pop();
  for (let i = 0; i < parts.length; i++) parts[i] += "}";
  return parts;
}
