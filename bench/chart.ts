// BENCHMARKS.svg: horizontal bars, edgelimit and @upstash/ratelimit in two colours. Top: decisions/s and
// p99 per contestant at 64 decisions in flight (part 1). Below: the latency a decision adds for one hot
// identifier behind the largest delay (part 5 (a)). Plain SVG, no dependency.
import type { EdgeRow } from "./edge.js";
import { fmt, ms } from "./harness.js";
import type { ThroughputRow } from "./throughput.js";

const COLOR = { edgelimit: "#2563eb", upstash: "#f59e0b" } as const;
const ROW = 22;
const LABEL = 330;
const BAR = 260;
const GAP = 50;

const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

interface Bar {
  label: string;
  lib: keyof typeof COLOR;
  values: number[];
}

/** A block of bars: one label column, one panel per value; returns its SVG and its height. */
function block(
  y0: number,
  title: string,
  panels: { title: string; text: (v: number) => string }[],
  bars: Bar[],
) {
  const out = [`<text x="10" y="${y0 + 16}" font-size="14" font-weight="bold">${esc(title)}</text>`];
  bars.forEach((b, i) => {
    const y = y0 + 40 + i * ROW;
    out.push(`<text x="${LABEL - 8}" y="${y + 14}" text-anchor="end">${esc(b.label)}</text>`);
  });
  panels.forEach((p, k) => {
    const x0 = LABEL + k * (BAR + GAP);
    const max = Math.max(...bars.map((b) => b.values[k]!).filter(Number.isFinite), 1e-9);
    out.push(`<text x="${x0}" y="${y0 + 34}" font-weight="bold">${esc(p.title)}</text>`);
    bars.forEach((b, i) => {
      const v = b.values[k]!;
      const w = Number.isFinite(v) ? Math.max(1, (v / max) * (BAR - 60)) : 0;
      const y = y0 + 40 + i * ROW;
      out.push(
        `<rect x="${x0}" y="${y + 3}" width="${w.toFixed(1)}" height="${ROW - 6}" fill="${COLOR[b.lib]}"/>`,
      );
      out.push(`<text x="${(x0 + w + 4).toFixed(1)}" y="${y + 14}">${p.text(v)}</text>`);
    });
  });
  return { svg: out, height: 50 + bars.length * ROW };
}

export function renderChart(throughput: ThroughputRow[], edge: EdgeRow[]): string {
  const top = block(
    0,
    "Throughput: 64 decisions in flight, no added delay",
    [
      { title: "decisions/s (more is better)", text: (v) => fmt(v) },
      { title: "p99 latency, ms (less is better)", text: ms },
    ],
    throughput
      // the two libraries; edgelimit/upstash has its columns in part 1's table
      .filter((r) => r.inFlight === 64 && r.lib !== "entry")
      .map((r) => ({ label: r.label, lib: r.lib as "edgelimit" | "upstash", values: [r.perSec, r.p99] })),
  );
  const delay = Math.max(...edge.map((e) => e.delay));
  const hot = edge.filter((e) => e.scenario.startsWith("(a)") && e.delay === delay && e.m);
  const below = block(
    top.height + 10,
    `One hot identifier, 200 decisions/s, Redis ${delay} ms away each way`,
    [
      { title: "p50 added latency, ms (less is better)", text: ms },
      { title: "HTTP requests per 1,000 decisions", text: (v) => fmt(v) },
    ],
    hot.map((e) => ({
      label: e.label,
      lib: e.label.startsWith("edgelimit") ? "edgelimit" : "upstash",
      values: [e.m!.p50, e.m!.httpPer1000],
    })),
  );
  const height = top.height + 10 + (hot.length ? below.height : 0) + 30;
  const width = LABEL + 2 * (BAR + GAP);
  return `${[
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, sans-serif" font-size="12">`,
    "<title>edgelimit and @upstash/ratelimit: decisions/s and p99; one hot identifier behind the delay proxy</title>",
    `<rect width="100%" height="100%" fill="#fff"/>`,
    ...top.svg,
    ...(hot.length ? below.svg : []),
    `<rect x="10" y="${height - 22}" width="12" height="12" fill="${COLOR.edgelimit}"/><text x="26" y="${height - 12}">edgelimit</text>`,
    `<rect x="100" y="${height - 22}" width="12" height="12" fill="${COLOR.upstash}"/><text x="116" y="${height - 12}">@upstash/ratelimit</text>`,
    "</svg>",
  ].join("\n")}\n`;
}
