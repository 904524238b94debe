// Small helpers shared by the parts: percentiles, formatting, Markdown tables, a seeded PRNG, log.

export function percentile(values: ArrayLike<number>, p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

export const median = (values: ArrayLike<number>) => percentile(values, 50);

/** 12345.6 → "12,346"; `digits` decimals. */
export function fmt(n: number, digits = 0): string {
  if (!Number.isFinite(n)) return "–";
  return n.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

/** Milliseconds with a sensible number of decimals. */
export function ms(n: number): string {
  if (!Number.isFinite(n)) return "–";
  const a = Math.abs(n);
  return a < 1 ? n.toFixed(3) : a < 10 ? n.toFixed(2) : n.toFixed(1);
}

/** edgelimit ÷ peer, as "1.23×"; "–" when either side is missing. */
export function ratio(a: number | undefined, b: number | undefined): string {
  if (a === undefined || b === undefined || !Number.isFinite(a / b) || b === 0) return "–";
  return `${(a / b).toFixed(2)}×`;
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

/** Progress on stderr. */
export function log(message: string): void {
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${message}\n`);
}
