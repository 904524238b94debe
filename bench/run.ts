// `npm run bench`: runs every part against a private redis-server and bridge and writes BENCHMARKS.md.
//   node --import tsx bench/run.ts            full run (≈6 min on 2 cores), writes BENCHMARKS.md
//   node --import tsx bench/run.ts --smoke    a few iterations of each part, no wrangler, writes nothing
//   --no-worker                               skip part 8 (wrangler dev)
//   --out FILE                                write the report elsewhere
// BENCH_SMOKE=1 in the environment means --smoke. A smoke run writes only when given --out.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "./load.js";
import { renderReport } from "./report.js";
import { runBench } from "./suite.js";
import { log } from "./util.js";

const args = process.argv.slice(2);
const smoke = args.includes("--smoke") || process.env.BENCH_SMOKE === "1";
const outIndex = args.indexOf("--out");
const out = outIndex >= 0 ? args[outIndex + 1]! : join(ROOT, "BENCHMARKS.md");

const results = await runBench({ smoke, worker: !smoke && !args.includes("--no-worker") });
const report = renderReport(results);
if (smoke && outIndex < 0) {
  log(
    `smoke run done in ${results.seconds.toFixed(1)} s (${report.length} characters of report, not written)`,
  );
} else {
  writeFileSync(out, report);
  log(`wrote ${out} in ${results.seconds.toFixed(0)} s`);
}
// Keep-alive sockets of the HTTP clients would hold the process open for a while.
process.exit(0);
