// Keeps the benchmark harness from rotting: every part runs a few iterations (bench/run.ts --smoke),
// against a redis-server and bridge the harness starts itself, and the report renders. No number is
// checked beyond "there is one": the benchmark never fails on performance. wrangler dev (part 8) is
// not started here.
import { describe, expect, it } from "vitest";
import { renderReport } from "../bench/report.js";
import { runBench } from "../bench/suite.js";

describe("bench (smoke)", () => {
  it("runs every part and renders the report", { timeout: 180_000 }, async () => {
    process.env.BENCH_QUIET = "1";
    const r = await runBench({ smoke: true, worker: false });

    expect(r.throughput.length).toBeGreaterThan(0);
    for (const t of r.throughput) expect(t.decisionsPerSec).toBeGreaterThan(0);
    expect(r.cost.length).toBeGreaterThan(0);
    for (const c of r.cost) expect(c.evalshaPerDecision).toBeGreaterThan(0);
    expect(r.flood.length).toBeGreaterThan(0);
    expect(r.memory.every((m) => m.keys > 0 && m.bytes > 0)).toBe(true);
    expect(r.lua.every((l) => l.calls > 0)).toBe(true);
    expect(r.accuracy.length).toBeGreaterThan(0);
    for (const a of r.accuracy) expect(a.ideal).toBeGreaterThan(0);
    expect(r.ceiling.some((c) => c.what === "PING")).toBe(true);
    expect(r.hotpath.length).toBeGreaterThan(0);
    expect(r.worker.status).toBe("pending");

    const report = renderReport(r);
    for (const heading of ["## 1.", "## 2.", "## 3.", "## 4.", "## 5.", "## 6.", "## 7.", "## 8.", "## 9."]) {
      expect(report).toContain(heading);
    }
  });
});
