// The validators the engine's options and arguments share, and the bounds they check against. Each
// throws an Error naming the field the user got wrong, so one message says where to fix it.
import { describe, toMs } from "./duration.js";

/**
 * The longest delay a timer holds: `setTimeout` turns a longer one into 1 ms. No lease, wait or timeout
 * the engine arms a timer for may be longer (2^31 - 1 ms, about 24.8 days).
 */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * One problem with a value a user gave: where (the keys from the option's root, e.g.
 * `["rules", "daily", "limit"]`) and what is wrong, without the where. A caller that reports problems
 * its own way (the Worker's config reader) re-roots the path; {@link issueText} renders it for an Error.
 */
export interface Issue {
  readonly path: readonly (string | number)[];
  readonly message: string;
}

/**
 * An issue as one line, "rules.daily.limit: message" (keys joined by dots, indexes in brackets), or
 * the message alone when the path is empty.
 *
 * @example
 * issueText({ path: ["rules", "daily", "limit"], message: "must be a positive whole number, got 0" })
 * // "rules.daily.limit: must be a positive whole number, got 0"
 */
export function issueText(issue: Issue): string {
  let at = "";
  for (const key of issue.path) at += typeof key === "number" ? `[${key}]` : at ? `.${key}` : key;
  return at ? `${at}: ${issue.message}` : issue.message;
}

/**
 * `issues` re-rooted under `at`: an option's issues as its owner sees them.
 *
 * @example
 * under(["region", "pool"], checkLease(pool).issues ?? []) // [{ path: ["region", "pool", "max"], ... }]
 */
export function under(at: readonly (string | number)[], issues: readonly Issue[]): Issue[] {
  return issues.map((issue) => ({ path: [...at, ...issue.path], message: issue.message }));
}

/**
 * Every issue as one line (issueText) under `at`, separated by "; ": the message of the Error an
 * option's throwing check raises, so it reports every problem, not only the first.
 *
 * @example
 * issuesText(["overrides"], [{ path: ["maxStale"], message: "must be at most 2147483647 ms, got 9e9" }])
 * // "overrides.maxStale: must be at most 2147483647 ms, got 9e9"
 */
export function issuesText(at: readonly (string | number)[], issues: readonly Issue[]): string {
  return under(at, issues).map(issueText).join("; ");
}

/**
 * Refuses anything but an options object whose fields are all among `fields`, naming `what` or the
 * stray field.
 *
 * @example
 * checkOptions(options, "Lock", ["redis", "prefix", "ttl", "timeout", "clock"]);
 */
export function checkOptions(options: unknown, what: string, fields: readonly string[]): void {
  if (options === null || typeof options !== "object") throw new Error(`${what}: expected an options object`);
  for (const field of Object.keys(options)) {
    if (!fields.includes(field)) {
      throw new Error(`${field}: not a ${what} option; it takes ${fields.join(", ")}`);
    }
  }
}

/**
 * The caller's clock option: a function, or an Error naming `clock`.
 *
 * @example
 * const clock = checkClock(options.clock ?? Date.now);
 */
export function checkClock(clock: unknown): () => number {
  if (typeof clock !== "function") throw new Error("clock: must be a function returning epoch ms");
  return clock as () => number;
}

/**
 * Reads the caller's clock: epoch ms, floored to a whole ms. Anything but a finite number of 0 or more
 * is a broken clock, refused with a TypeError naming `clock` (a NaN or negative time would be stored
 * and compared in Redis).
 *
 * @example
 * const now = readClock(this.clock); // 1700000040000
 */
export function readClock(clock: () => number): number {
  const now = clock();
  if (typeof now !== "number" || !Number.isFinite(now) || now < 0) {
    throw new TypeError(`clock: returned ${describe(now)}, expected epoch milliseconds (0 or more)`);
  }
  return Math.floor(now);
}

/**
 * A positive number of milliseconds up to `max` (default {@link MAX_TIMER_MS}), or `Infinity` where
 * `infinite` allows it; else an Error naming `field`. Fractions are kept (a timer takes them).
 *
 * @example
 * positiveMs(options.timeout ?? 1000, "timeout", { infinite: true }) // 1000
 */
export function positiveMs(
  value: unknown,
  field: string,
  options: { max?: number; infinite?: boolean } = {},
): number {
  const { max = MAX_TIMER_MS, infinite = false } = options;
  if (infinite && value === Number.POSITIVE_INFINITY) return value;
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0 || value > max) {
    const range = `a positive number of milliseconds up to ${max}${infinite ? " (or Infinity)" : ""}`;
    throw new Error(`${field}: must be ${range}, got ${describe(value)}`);
  }
  return value;
}

/**
 * A duration a timer will wait out (a lease, a wait): whole ms or a string such as "30s", positive
 * and at most {@link MAX_TIMER_MS}; else an Error naming `field`.
 *
 * @example
 * durationMs("30s", "lease") // 30000
 */
export function durationMs(value: unknown, field: string): number {
  if (typeof value === "number" && (!Number.isFinite(value) || value <= 0)) {
    throw new Error(
      `${field}: must be a positive number of milliseconds up to ${MAX_TIMER_MS}, got ${describe(value)}`,
    );
  }
  const ms = toMs(value, field);
  if (ms > MAX_TIMER_MS) {
    throw new Error(`${field}: must be at most ${MAX_TIMER_MS} ms (about 24.8 days), got ${describe(value)}`);
  }
  return ms;
}

/**
 * A name, owner or identifier: a non-empty string (any characters, any length: keys escape or hash
 * it). Empty is refused: every caller whose value came out empty (a missing header read as "") would
 * share one lock, one owner (re-entering each other's holds) or one set of slots. A TypeError or a
 * RangeError naming `field`.
 *
 * @example
 * checkString("invoice:42", "name") // "invoice:42"
 */
export function checkString(value: unknown, field: string): string {
  if (typeof value !== "string") throw new TypeError(`${field}: expected a string, got ${describe(value)}`);
  if (value === "") {
    throw new RangeError(
      `${field}: must not be empty (every caller whose ${field} came out empty would share one); pass a real ${field}`,
    );
  }
  return value;
}
