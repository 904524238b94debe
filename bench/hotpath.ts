// Part 9: the client side of a decision, without any network. Run in its own process by bench/run.ts:
//   node --expose-gc --max-semi-space-size=128 --import tsx bench/hotpath.ts [--smoke]
// It prints one JSON document on stdout.
//
// Two stand-ins replace the network:
//  - a fake requester (`client.request`) under edgelimit's Limiter: only edgelimit's own code runs;
//  - a fake global `fetch` under a real @upstash/redis client: the whole client stack of each library
//    runs (auto-pipelining, JSON, base64 decoding), and only the socket is missing.
// Time is ns per decision (median of several runs); allocation is bytes per decision from the heap
// growth over a run in which no garbage collection happened (checked with a gc PerformanceObserver).
import { PerformanceObserver } from "node:perf_hooks";
import { Ratelimit } from "@upstash/ratelimit";
import { Redis } from "@upstash/redis";
import { edgelimit, generated, keys } from "./load.js";

const { fixedWindow, Limiter } = edgelimit;
const { keyTag } = keys;
const { SCRIPT_SHA1 } = generated;

const smoke = process.argv.includes("--smoke");
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error("run with --expose-gc");

let gcCount = 0;
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) {
    // flag 4: a collection we forced with gc() ourselves, not one the measured code caused
    if (((entry as { detail?: { flags?: number } }).detail?.flags ?? 0) & 4) continue;
    gcCount++;
  }
}).observe({ entryTypes: ["gc"] });

const flushObservers = () => new Promise((resolve) => setTimeout(resolve, 5));

export interface HotRow {
  name: string;
  what: string;
  nsPerOp: number;
  bytesPerOp: number | null;
}

type Op = (i: number) => unknown;

/** Runs `op` `n` times, `batch` at a time (batch > 1: issued together, then awaited together). */
async function drive(op: Op, n: number, batch: number): Promise<void> {
  if (batch === 1) {
    for (let i = 0; i < n; i++) {
      const r = op(i);
      if (r instanceof Promise) await r;
    }
    return;
  }
  const pending: unknown[] = new Array(batch);
  for (let i = 0; i < n; i += batch) {
    for (let k = 0; k < batch; k++) pending[k] = op(i + k);
    await Promise.all(pending);
  }
}

async function measure(name: string, what: string, op: Op, n: number, batch = 1): Promise<HotRow> {
  await drive(op, Math.min(n, 20_000), batch); // warm-up (JIT)
  const times: number[] = [];
  for (let run = 0; run < (smoke ? 1 : 5); run++) {
    const t0 = process.hrtime.bigint();
    await drive(op, n, batch);
    times.push(Number(process.hrtime.bigint() - t0) / n);
  }
  times.sort((a, b) => a - b);
  // allocation: a shorter run that must fit in the young generation without a collection
  let bytesPerOp: number | null = null;
  for (let m = Math.min(n, 5000); m >= 250 && bytesPerOp === null; m = Math.floor(m / 4)) {
    gc!();
    await flushObservers();
    const before = gcCount;
    const h0 = process.memoryUsage().heapUsed;
    await drive(op, m, batch);
    const h1 = process.memoryUsage().heapUsed;
    await flushObservers();
    if (gcCount === before) bytesPerOp = (h1 - h0) / m;
  }
  return { name, what, nsPerOp: times[times.length >> 1]!, bytesPerOp };
}

const now = Date.now();
/** What edgelimit's script answers for one allowed rule. */
const allowedReply = [1, 99, now + 60_000, 0];
const deniedReply = [0, 0, now + 60_000, 30_000];

function fakeRequester(reply: number[]) {
  return {
    del: async () => 0,
    client: {
      request: async (req: { body?: unknown }) => (req.body as unknown[]).map(() => ({ result: reply })),
    },
  };
}

/** A global fetch that answers the Upstash REST protocol from memory. */
function installFakeFetch(answer: (command: unknown[]) => unknown): void {
  const headers = { get: () => null };
  globalThis.fetch = (async (_url: string, init: { body: string }) => {
    const body = JSON.parse(init.body) as unknown[];
    const out = Array.isArray(body[0])
      ? (body as unknown[][]).map((c) => ({ result: answer(c) }))
      : { result: answer(body) };
    const text = JSON.stringify(out);
    return { ok: true, status: 200, headers, text: async () => text };
  }) as unknown as typeof fetch;
}

const N = smoke ? 2_000 : 200_000;
const NA = smoke ? 2_000 : 50_000;
const rows: HotRow[] = [];
const ids = Array.from({ length: 1000 }, (_, i) => `user:${i}`);
const rule = { a: fixedWindow({ limit: 1_000_000_000, window: 60_000 }) };

// --- edgelimit, its own code only ---
{
  const limiter = new Limiter({ redis: fakeRequester(deniedReply), prefix: "hot-deny", rules: rule });
  await Promise.all(ids.map((id) => limiter.limit(id))); // every id now has a cached denial
  rows.push(
    await measure(
      "edgelimit: deny-cache hit",
      "limit() answered from the deny cache",
      (i) => limiter.limit(ids[i % 1000]!),
      N,
    ),
  );
}
{
  const limiter = new Limiter({
    redis: fakeRequester(allowedReply),
    prefix: "hot-ok",
    rules: rule,
    denyCache: false,
  });
  rows.push(
    await measure(
      "edgelimit: decision, fake requester, 64 per batch",
      "keys + args + batcher + timer + decode; no HTTP client",
      (i) => limiter.limit(ids[i % 1000]!),
      NA,
      64,
    ),
  );
  rows.push(
    await measure(
      "edgelimit: decision, fake requester, 1 per batch",
      "the same, one decision per pipeline",
      (i) => limiter.limit(ids[i % 1000]!),
      NA / 4,
      1,
    ),
  );
  rows.push(
    await measure(
      "edgelimit: keyTag(id)",
      "the hash-tagged part of the key",
      (i) => keyTag(ids[i % 1000]!),
      N,
    ),
  );
  rows.push(
    await measure(
      "edgelimit: limiter.keys(id)",
      "every key of a decision",
      (i) => limiter.keys(ids[i % 1000]!),
      N,
    ),
  );
  const decode = (limiter as unknown as { decode(r: unknown): unknown }).decode.bind(limiter);
  rows.push(
    await measure("edgelimit: decode(reply)", "script reply → Decision", () => decode(allowedReply), N),
  );
}

// --- both libraries over a real @upstash/redis client, fetch faked ---
installFakeFetch((cmd) => {
  const name = String(cmd[0]).toLowerCase();
  if (name === "evalsha") return cmd[1] === SCRIPT_SHA1 ? allowedReply : [1, 1_000_000_000];
  return "OK";
});
const client = () =>
  new Redis({ url: "http://fake.invalid", token: "t", enableTelemetry: false, enableAutoPipelining: true });
{
  const limiter = new Limiter({ redis: client(), prefix: "hot-stack", rules: rule, denyCache: false });
  rows.push(
    await measure(
      "edgelimit: decision, whole client stack, 64 per batch",
      "Limiter + @upstash/redis HttpClient, fetch faked",
      (i) => limiter.limit(ids[i % 1000]!),
      NA,
      64,
    ),
  );
}
{
  const rl = new Ratelimit({
    redis: client(),
    limiter: Ratelimit.fixedWindow(1_000_000_000, "60 s"),
    ephemeralCache: false,
    enableTelemetry: false,
  });
  rows.push(
    await measure(
      "@upstash/ratelimit: decision, whole client stack, 64 per batch",
      "Ratelimit + auto-pipelining + HttpClient, fetch faked",
      (i) => rl.limit(ids[i % 1000]!),
      NA,
      64,
    ),
  );
}
{
  // the peer's ephemeral cache: deny every id once, then measure the cached answer
  installFakeFetch(() => [2_000_000_000, 1]);
  const rl = new Ratelimit({
    redis: client(),
    limiter: Ratelimit.fixedWindow(1, "60 s"),
    enableTelemetry: false,
  });
  await Promise.all(ids.map((id) => rl.limit(id)));
  rows.push(
    await measure(
      "@upstash/ratelimit: ephemeralCache hit",
      "limit() answered from its cache",
      (i) => rl.limit(ids[i % 1000]!),
      N,
    ),
  );
}

process.stdout.write(`${JSON.stringify({ node: process.version, rows })}\n`);
