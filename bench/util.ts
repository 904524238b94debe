// Small helpers shared by the parts: percentiles, medians, formatting, Markdown tables, a seeded PRNG.

export function percentile(sorted: Float64Array | number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

export function median(values: number[]): number {
  if (values.length === 0) return Number.NaN;
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** 12345.6 → "12,346"; small numbers keep `digits` decimals. */
export function fmt(n: number, digits = 0): string {
  if (!Number.isFinite(n)) return String(n);
  return n.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

/** Milliseconds with a sensible number of decimals. */
export function ms(n: number): string {
  if (!Number.isFinite(n)) return "–";
  const a = Math.abs(n);
  return a < 1 ? n.toFixed(3) : a < 10 ? n.toFixed(2) : n.toFixed(1);
}

export function pct(n: number, digits = 1): string {
  if (!Number.isFinite(n)) return "–";
  const s = (n * 100).toFixed(digits);
  return `${n > 0 ? "+" : ""}${s}%`;
}

export function table(header: string[], rows: (string | number)[][]): string {
  const line = (cells: (string | number)[]) =>
    `| ${cells.map((c) => String(c).replace(/\|/g, "\\|")).join(" | ")} |`;
  const align = header.map((_, i) => (i === 0 ? "---" : "---:"));
  return [line(header), `|${align.join("|")}|`, ...rows.map(line)].join("\n");
}

/** mulberry32: deterministic randomness, so every run sends the same traffic. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Logs progress to stderr (stdout stays clean for the final summary). */
export function log(message: string): void {
  if (process.env.BENCH_QUIET === "1") return;
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${message}\n`);
}
