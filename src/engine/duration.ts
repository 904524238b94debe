const UNITS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const PATTERN = /^(\d+)(?:\.(\d+))?\s*(ms|s|m|h|d)$/;

/** A duration: milliseconds as a number, or a string such as `"500ms"`, `"10s"`, `"1m"`, `"1h"`, `"1d"`. */
export type Duration =
  | number
  | `${number}${"ms" | "s" | "m" | "h" | "d"}`
  | `${number} ${"ms" | "s" | "m" | "h" | "d"}`;

/**
 * Converts a duration to a whole, positive number of milliseconds, or throws an Error that names `field`.
 *
 * @example
 * toMs("1m", "window") // 60000
 * toMs(250, "period")  // 250
 */
export function toMs(value: unknown, field: string): number {
  const read = readDuration(value);
  if ("message" in read) throw new Error(`${field}: ${read.message}`);
  return read.ms;
}

/**
 * What {@link toMs} checks, reported instead of thrown: the milliseconds, or what is wrong with the
 * value without naming a field (for a caller that knows the field's path its own way).
 *
 * @example
 * readDuration("1m")     // { ms: 60000 }
 * readDuration("1 week") // { message: '"1 week" is not a duration; use milliseconds or ...' }
 */
export function readDuration(value: unknown): { readonly ms: number } | { readonly message: string } {
  let ms: number;
  if (typeof value === "number") {
    ms = value;
  } else if (typeof value === "string") {
    const match = PATTERN.exec(value.trim());
    if (!match) {
      return {
        message: `"${value}" is not a duration; use milliseconds or a string like "500ms", "10s", "1m", "1h", "1d"`,
      };
    }
    const scaled = decimalMs(match[1]!, match[2] ?? "", UNITS[match[3]!]!);
    if (scaled === undefined) return { message: notWhole(value) };
    if (scaled > BigInt(Number.MAX_SAFE_INTEGER)) {
      return { message: `${describe(value)} is too long to count in milliseconds exactly` };
    }
    ms = Number(scaled);
  } else {
    return { message: `expected a duration (milliseconds or a string like "10s"), got ${describe(value)}` };
  }
  if (!Number.isFinite(ms) || ms <= 0 || !Number.isInteger(ms)) return { message: notWhole(value) };
  return { ms };
}

const notWhole = (value: unknown) =>
  `must be a positive whole number of milliseconds, got ${describe(value)}`;

// "2.01s" is 2010 ms exactly, but 2.01 * 1000 is 2009.9999999999998 in floating point: the digits are
// scaled as integers (BigInt), so a decimal that names a whole number of ms is always accepted, and one
// that does not ("1.0005s") is refused by the same test (undefined here).
function decimalMs(whole: string, fraction: string, unit: number): bigint | undefined {
  const scale = 10n ** BigInt(fraction.length);
  const scaled = BigInt(whole + fraction) * BigInt(unit);
  return scaled % scale === 0n ? scaled / scale : undefined;
}

/** A short, safe rendering of a bad value for error messages. */
export function describe(value: unknown): string {
  if (typeof value === "string") return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  if (typeof value === "number" || typeof value === "boolean" || value == null) return String(value);
  return Array.isArray(value) ? "an array" : typeof value === "object" ? "an object" : `a ${typeof value}`;
}
