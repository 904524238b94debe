// Part 9: what analytics cost in Redis commands and HTTP requests, beside @upstash/ratelimit with
// `analytics: true`: 1,000 decisions one at a time through a private bridge, each library on its own
// @upstash/redis client; edgelimit's flushes counted apart from its decisions.
import { Ratelimit } from "@upstash/ratelimit";
import { ourRule, peerLimiter } from "./contestants.js";
import { type BenchEnv, check, log, type Part, startEnv, table } from "./harness.js";
import { edgelimit } from "./load.js";

const DECISIONS = 1000;
const IDS = 200;
/** A fixed window of 4 an hour: each identifier's fifth decision is denied. */
const POLICY = { limit: 4, window: 3_600_000 };

/** Redis commands (a script's inner commands included), by name, and HTTP requests. */
type Count = { commands: Record<string, number>; requests: number };
/** What the decisions sent, and apart, what edgelimit's flushes sent. */
type Cost = Count & { background?: Count };
type AnalyticsCostRow = { contestant: string; analytics: string; cost: Cost };

const total = (c: Record<string, number>) => Object.values(c).reduce((a, b) => a + b, 0);

/** Runs `decide` over the traffic, with `flush` after every `flushEvery` decisions, counted apart. */
async function measure(
  env: BenchEnv,
  decide: (id: string) => Promise<unknown>,
  flushEvery = DECISIONS,
  flush?: () => Promise<void>,
): Promise<Cost> {
  await decide(`warm-${Math.random()}`); // the script loaded, the client's first request made
  await flush?.();
  const decisions: Count = { commands: {}, requests: 0 };
  const background: Count = { commands: {}, requests: 0 };
  const span = async (into: Count, run: () => Promise<void>) => {
    await env.resetCounts();
    await run();
    const { http, byName } = await env.counts();
    for (const [name, n] of Object.entries(byName)) into.commands[name] = (into.commands[name] ?? 0) + n;
    into.requests += http;
  };
  for (let at = 0; at < DECISIONS; at += flushEvery) {
    await span(decisions, async () => {
      for (let i = at; i < at + flushEvery; i++) await decide(`u${i % IDS}`);
    });
    if (flush) await span(background, flush);
  }
  return flush ? { ...decisions, background } : decisions;
}

async function measureAnalyticsCost(): Promise<AnalyticsCostRow[]> {
  const env = await startEnv();
  const rows: AnalyticsCostRow[] = [];
  try {
    let n = 0;
    const ours = (analytics: boolean) =>
      new edgelimit.Limiter({
        redis: env.client(),
        prefix: `ac-${++n}`,
        rules: { perHour: ourRule("fixedWindow", POLICY) },
        denyCache: false,
        analytics,
      });
    log("analytics-cost: edgelimit, analytics off");
    const off = ours(false);
    rows.push({ contestant: "edgelimit", analytics: "off", cost: await measure(env, (id) => off.limit(id)) });
    for (const every of [DECISIONS, 100]) {
      log(`analytics-cost: edgelimit, analytics on, a flush per ${every}`);
      const on = ours(true);
      const cost = await measure(
        env,
        (id) => on.limit(id),
        every,
        () => on.analytics.flush(),
      );
      rows.push({
        contestant: "edgelimit",
        analytics: `on, a flush per ${every.toLocaleString("en")} decisions`,
        cost,
      });
      await on.dispose();
    }
    for (const analytics of [false, true]) {
      log(`analytics-cost: @upstash/ratelimit, analytics ${analytics}`);
      const peer = new Ratelimit({
        redis: env.client(),
        limiter: peerLimiter("fixedWindow", POLICY),
        prefix: `ac-peer-${++n}`,
        analytics,
        enableTelemetry: false,
      });
      const cost = await measure(env, async (id) => {
        const r = await peer.limit(id);
        await r.pending; // its analytics write, which it leaves running after the answer
      });
      rows.push({
        contestant: "@upstash/ratelimit",
        analytics: analytics ? "`analytics: true`" : "off",
        cost,
      });
    }
    return rows;
  } finally {
    await env.close();
  }
}

const names = (c: Record<string, number>) =>
  Object.entries(c)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([name, k]) => `${name}×${k}`)
    .join(" ") || "–";

/** What analytics on add to the decisions' own commands and requests: edgelimit's most, and the peer's. */
function added(rows: AnalyticsCostRow[]) {
  const of = (contestant: string, analytics: string) =>
    rows.find((r) => r.contestant === contestant && r.analytics === analytics)!.cost;
  const off = of("edgelimit", "off");
  const ons = rows.filter((r) => r.contestant === "edgelimit" && r.analytics !== "off").map((r) => r.cost);
  const [peerOff, peerOn] = [of("@upstash/ratelimit", "off"), of("@upstash/ratelimit", "`analytics: true`")];
  return {
    commands: Math.max(...ons.map((c) => total(c.commands) - total(off.commands))),
    requests: Math.max(...ons.map((c) => c.requests - off.requests)),
    peerCommands: total(peerOn.commands) - total(peerOff.commands),
    peerRequests: peerOn.requests - peerOff.requests,
  };
}

export const analytics: Part<AnalyticsCostRow[]> = {
  name: "analytics",
  title: "## 9. Analytics",
  alone: true,
  run: () => measureAnalyticsCost(),
  render(rows, { versions }) {
    const body = rows.map(({ contestant, analytics, cost: c }) => {
      const b = c.background;
      return [
        contestant,
        analytics,
        `${total(c.commands)} (${names(c.commands)})`,
        String(c.requests),
        b ? `${total(b.commands)} (${names(b.commands)})` : "–",
        b ? String(b.requests) : "–",
        String(total(c.commands) + (b ? total(b.commands) : 0)),
        String(c.requests + (b?.requests ?? 0)),
      ];
    });
    const head = [
      "library | analytics | decisions: Redis commands | decisions: HTTP requests | flushes: Redis commands",
      "flushes: HTTP requests | total commands | total requests",
    ];
    const a = added(rows);
    const thousand = DECISIONS.toLocaleString("en");
    return `bench/analytics-cost.ts: 1,000 decisions through the REST bridge to one private redis-server, each library
with its own @upstash/redis client; commands as INFO commandstats counts them (a script's inner commands
included), requests as the bridge counts them. edgelimit: \`analytics\` off, and \`analytics: true\` with
its flushes (\`limiter.analytics.flush()\`, what a \`flushEvery\` does) counted apart from the decisions:
one for the 1,000, or one every 100. Its deny cache is off, so that every decision reaches Redis as the
peer's do. The peer: \`analytics: false\` and \`analytics: true\` (@upstash/ratelimit ${versions.ratelimit}, which
writes one ZINCRBY per decision, awaited here through the answer's \`pending\`).

Per ${thousand} decisions (${IDS} identifiers × ${DECISIONS / IDS}, a fixed window of ${POLICY.limit} an hour: ${DECISIONS - IDS * POLICY.limit} denied), one at a time:

${table(head, body, 2)}

Analytics on add +${a.commands} Redis commands and +${a.requests} HTTP requests to the decisions' own requests per ${thousand} decisions; the peer's \`analytics: true\` adds +${a.peerCommands} commands and +${a.peerRequests} requests.`;
  },
  goals(rows) {
    const a = rows && added(rows);
    return [
      [
        "0 Redis commands and 0 HTTP requests added to the decisions' own requests by analytics (part 9)",
        a ? `+${a.commands} commands, +${a.requests} requests per 1,000 decisions` : "–",
        check(a ? a.commands === 0 && a.requests === 0 : undefined),
      ],
    ];
  },
};
