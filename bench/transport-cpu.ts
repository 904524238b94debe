// CPU µs per sequential fixed-window decision with `fetch` answered in-process (no network): what the
// client itself spends, edgelimit and @upstash/ratelimit in turns. Not part of `npm run bench`.
//   node --import tsx bench/transport-cpu.ts [decisions=20000] [rounds=5]
import { Ratelimit } from "@upstash/ratelimit";
import { Redis } from "@upstash/redis";
import { fixedWindow, Limiter } from "../src/index.js";

const decisions = Number(process.argv[2] ?? 20_000);
const rounds = Number(process.argv[3] ?? 5);
const url = "http://redis.invalid";
const token = "t";

// Both scripts answer the window's count (the peer's also its limit); 1 keeps every decision an admission.
globalThis.fetch = (async (input: RequestInfo | URL) =>
  new Response(String(input).endsWith("/pipeline") ? '[{"result":1}]' : '{"result":[1,1000000]}', {
    headers: { "content-type": "application/json" },
  })) as typeof fetch;

const client = () => new Redis({ url, token, enableTelemetry: false, enableAutoPipelining: false });
const rules = { perMinute: fixedWindow({ limit: 1_000_000, window: "1m" }) };
const contestants: Record<string, () => Promise<unknown>> = {};
let n = 0;
const ours = new Limiter({ redis: client(), rules, denyCache: false });
contestants["edgelimit (client)"] = () => ours.limit(`u${n++ % 1000}`);
let literal: Limiter | undefined;
try {
  literal = new Limiter({ redis: { url, token }, rules, denyCache: false });
} catch {
  // before `{ url, token }` was accepted
}
if (literal) contestants["edgelimit ({ url, token })"] = () => literal.limit(`u${n++ % 1000}`);
const peer = new Ratelimit({ redis: client(), limiter: Ratelimit.fixedWindow(1_000_000, "60 s") });
contestants["@upstash/ratelimit"] = () => peer.limit(`u${n++ % 1000}`);

async function run(decide: () => Promise<unknown>, count: number): Promise<number> {
  const start = process.cpuUsage();
  for (let i = 0; i < count; i++) await decide();
  const used = process.cpuUsage(start);
  return (used.user + used.system) / count;
}

for (const decide of Object.values(contestants)) await run(decide, decisions / 4); // warm up
const results: Record<string, number[]> = Object.fromEntries(
  Object.keys(contestants).map((name) => [name, []]),
);
for (let round = 0; round < rounds; round++) {
  for (const [name, decide] of Object.entries(contestants)) results[name]!.push(await run(decide, decisions));
}
for (const [name, values] of Object.entries(results)) {
  const sorted = [...values].sort((a, b) => a - b);
  const median = sorted[Math.floor(sorted.length / 2)]!;
  console.log(
    `${name.padEnd(28)} median ${median.toFixed(2)} µs  (${sorted.map((v) => v.toFixed(1)).join(" ")})`,
  );
}
