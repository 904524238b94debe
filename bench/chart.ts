// BENCHMARKS.svg: decisions/s and p99 latency per contestant, 64 decisions in flight, as two panels of
// horizontal bars, edgelimit and @upstash/ratelimit in two colours. Plain SVG, no dependency.
import type { ThroughputRow } from "./throughput.js";
import { fmt, ms } from "./util.js";

const COLOR = { edgelimit: "#2563eb", upstash: "#f59e0b" } as const;
const ROW = 22;
const LABEL = 300;
const BAR = 260;
const GAP = 40;

const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

export function renderChart(rows: ThroughputRow[]): string {
  const data = rows.filter((r) => r.inFlight === 64);
  const panels = [
    {
      title: "decisions/s (more is better)",
      value: (r: ThroughputRow) => r.perSec,
      text: (v: number) => fmt(v),
    },
    {
      title: "p99 latency, ms (less is better)",
      value: (r: ThroughputRow) => r.p99,
      text: (v: number) => ms(v),
    },
  ];
  const height = 60 + data.length * ROW + 30;
  const width = LABEL + panels.length * (BAR + GAP) + 20;
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="#fff"/>`,
    `<text x="10" y="20" font-size="14" font-weight="bold">edgelimit vs @upstash/ratelimit: 64 decisions in flight, one run</text>`,
  ];
  data.forEach((r, i) => {
    const y = 60 + i * ROW;
    out.push(`<text x="${LABEL - 8}" y="${y + 14}" text-anchor="end">${esc(r.label)}</text>`);
  });
  panels.forEach((p, k) => {
    const x0 = LABEL + k * (BAR + GAP);
    const max = Math.max(...data.map(p.value).filter(Number.isFinite), 1e-9);
    out.push(`<text x="${x0}" y="48" font-weight="bold">${esc(p.title)}</text>`);
    data.forEach((r, i) => {
      const v = p.value(r);
      const w = Number.isFinite(v) ? Math.max(1, (v / max) * (BAR - 60)) : 0;
      const y = 60 + i * ROW;
      out.push(
        `<rect x="${x0}" y="${y + 3}" width="${w.toFixed(1)}" height="${ROW - 6}" fill="${COLOR[r.lib]}"/>`,
      );
      out.push(`<text x="${(x0 + w + 4).toFixed(1)}" y="${y + 14}">${p.text(v)}</text>`);
    });
  });
  const ly = height - 12;
  out.push(
    `<rect x="10" y="${ly - 10}" width="12" height="12" fill="${COLOR.edgelimit}"/><text x="26" y="${ly}">edgelimit</text>`,
  );
  out.push(
    `<rect x="100" y="${ly - 10}" width="12" height="12" fill="${COLOR.upstash}"/><text x="116" y="${ly}">@upstash/ratelimit</text>`,
  );
  out.push("</svg>");
  return `${out.join("\n")}\n`;
}
