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
  let ms: number;
  if (typeof value === "number") {
    ms = value;
  } else if (typeof value === "string") {
    const match = PATTERN.exec(value.trim());
    if (!match) {
      throw new Error(
        `${field}: "${value}" is not a duration; use milliseconds or a string like "500ms", "10s", "1m", "1h", "1d"`,
      );
    }
    ms = decimalMs(match[1]!, match[2] ?? "", UNITS[match[3]!]!, field, value);
  } else {
    throw new Error(
      `${field}: expected a duration (milliseconds or a string like "10s"), got ${describe(value)}`,
    );
  }
  if (!Number.isFinite(ms) || ms <= 0 || !Number.isInteger(ms)) {
    throw new Error(`${field}: must be a positive whole number of milliseconds, got ${describe(value)}`);
  }
  return ms;
}

// "2.01s" is 2010 ms exactly, but 2.01 * 1000 is 2009.9999999999998 in floating point: the digits are
// scaled as integers (BigInt), so a decimal that names a whole number of ms is always accepted, and one
// that does not ("1.0005s") is refused by the same test.
function decimalMs(whole: string, fraction: string, unit: number, field: string, value: string): number {
  const scale = 10n ** BigInt(fraction.length);
  const scaled = BigInt(whole + fraction) * BigInt(unit);
  if (scaled % scale !== 0n) {
    throw new Error(`${field}: must be a positive whole number of milliseconds, got ${describe(value)}`);
  }
  const ms = scaled / scale;
  if (ms > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw new Error(`${field}: ${describe(value)} is too long to count in milliseconds exactly`);
  }
  return Number(ms);
}

/** A short, safe rendering of a bad value for error messages. */
export function describe(value: unknown): string {
  if (typeof value === "string") return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  if (typeof value === "number" || typeof value === "boolean" || value == null) return String(value);
  return Array.isArray(value) ? "an array" : typeof value === "object" ? "an object" : `a ${typeof value}`;
}
