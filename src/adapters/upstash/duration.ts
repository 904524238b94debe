// The durations @upstash/ratelimit accepts: a number and a unit, with or without one space between
// them, the number possibly a decimal ("1.5 s"), the unit one of ms, s, m, h, d and w. Rounded to
// whole milliseconds, as the peer does; anything under 1 ms is refused.

type Unit = "ms" | "s" | "m" | "h" | "d" | "w";
/** A window or interval as @upstash/ratelimit spells it: `"10 s"`, `"1m"`, `"1.5 s"`, `"1 w"`. */
export type Duration =
  | `${number} ${"ms" | "s" | "m" | "h" | "d" | "w"}`
  | `${number}${"ms" | "s" | "m" | "h" | "d" | "w"}`;

const UNITS: Record<Unit, number> = {
  ms: 1,
  s: 1_000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
  w: 604_800_000,
};
const PATTERN = /^(\d+(?:\.\d+)?)\s?(ms|s|m|h|d|w)$/;

/**
 * The milliseconds of `duration`, or an Error naming the field and what it should look like.
 *
 * @example
 * durationMs("1.5 s", "window") // 1500
 * durationMs("1 w", "window")   // 604800000
 */
export function durationMs(duration: Duration, field: string): number {
  const match = typeof duration === "string" ? PATTERN.exec(duration) : null;
  if (!match) {
    throw new Error(
      `${field}: ${JSON.stringify(duration)} is not a duration; use a number and a unit, e.g. "10 s", "1m", "1.5 s", "1 w"`,
    );
  }
  const ms = Math.round(Number.parseFloat(match[1]!) * UNITS[match[2] as Unit]);
  if (ms < 1) throw new Error(`${field}: must be at least 1 ms, got ${JSON.stringify(duration)}`);
  return ms;
}
