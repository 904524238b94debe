// What analytics cost in Redis commands and HTTP requests per 1,000 decisions, beside @upstash/ratelimit
// with `analytics: true`, both through the project's REST bridge to one private redis-server, each with
// its own @upstash/redis client. Commands: INFO commandstats (a script's inner commands included) after
// CONFIG RESETSTAT; requests: the bridge's counter.
//
// The traffic: 1,000 decisions one at a time, 200 identifiers × 5, a fixed window of 4 an hour (so 200
// of them denied), all in one minute. edgelimit's deny cache is off, so that every decision reaches
// Redis as the peer's do. Its flushes are counted apart from the decisions: once for the 1,000 (one
// `flushEvery` holds them all) and once every 100 decisions (a flush per 100).
//
//   node --import tsx bench/analytics-cost.ts
import { Ratelimit } from "@upstash/ratelimit";
import { Redis } from "@upstash/redis";
import { type Bridge, startBridge, startRedisServer } from "../src/bridge/index.js";
import { connectRedis, type RedisConnection } from "../src/bridge/resp.js";
import { fixedWindow, Limiter } from "../src/index.js";

const DECISIONS = 1000;
const IDS = 200;
const LIMIT = 4;
const TOKEN = "analytics-cost";

export interface Cost {
  /** Redis commands on the decisions' requests (a script's inner commands included), by name. */
  commands: Record<string, number>;
  /** HTTP requests the decisions sent. */
  requests: number;
  /** Commands and requests off the decisions' path (edgelimit's flushes). */
  background?: { commands: Record<string, number>; requests: number };
}

export interface AnalyticsCostRow {
  contestant: string;
  analytics: string;
  cost: Cost;
}

const total = (c: Record<string, number>) => Object.values(c).reduce((a, b) => a + b, 0);

async function commandStats(conn: RedisConnection): Promise<Record<string, number>> {
  const info = String(await conn.call("INFO", "commandstats"));
  const out: Record<string, number> = {};
  for (const [, name, calls] of info.matchAll(/^cmdstat_([a-z|]+):calls=(\d+)/gm)) {
    if (name === "info" || name!.startsWith("config")) continue;
    out[name!.toUpperCase()] = Number(calls);
  }
  return out;
}

/** Runs `decide` over the traffic; counts what the decisions sent and, apart, what `flushAt` sent. */
async function measure(
  conn: RedisConnection,
  bridge: Bridge,
  decide: (id: string) => Promise<unknown>,
  flushEvery?: number,
  flush?: () => Promise<void>,
): Promise<Cost> {
  const warm = `warm-${Math.random()}`;
  await decide(warm); // the script loaded, the client's first request made
  await flush?.();
  const decisions = { commands: {} as Record<string, number>, requests: 0 };
  const background = { commands: {} as Record<string, number>, requests: 0 };
  const add = (into: typeof decisions, commands: Record<string, number>, requests: number) => {
    for (const [name, n] of Object.entries(commands)) into.commands[name] = (into.commands[name] ?? 0) + n;
    into.requests += requests;
  };
  const span = async (into: typeof decisions, run: () => Promise<void>) => {
    await conn.call("CONFIG", "RESETSTAT");
    const before = bridge.stats.requests;
    await run();
    add(into, await commandStats(conn), bridge.stats.requests - before);
  };
  const every = flushEvery ?? DECISIONS;
  for (let at = 0; at < DECISIONS; at += every) {
    await span(decisions, async () => {
      for (let i = at; i < at + every; i++) await decide(`u${i % IDS}`);
    });
    if (flush) await span(background, flush);
  }
  return flush ? { ...decisions, background } : decisions;
}

export async function measureAnalyticsCost(
  options: { log?: (line: string) => void } = {},
): Promise<AnalyticsCostRow[]> {
  const log = options.log ?? (() => {});
  const server = await startRedisServer();
  const bridge = await startBridge({ redisUrl: server.url, port: 0, token: TOKEN });
  const conn = await connectRedis(server.url);
  const client = () => new Redis({ url: bridge.url, token: TOKEN, enableTelemetry: false });
  const rows: AnalyticsCostRow[] = [];
  try {
    let n = 0;
    const ours = (analytics: boolean) =>
      new Limiter({
        redis: client(),
        prefix: `ac-${++n}`,
        rules: { perHour: fixedWindow({ limit: LIMIT, window: "1h" }) },
        denyCache: false,
        analytics,
      });
    log("analytics-cost: edgelimit, analytics off");
    const off = ours(false);
    rows.push({
      contestant: "edgelimit",
      analytics: "off",
      cost: await measure(conn, bridge, (id) => off.limit(id)),
    });
    for (const every of [DECISIONS, 100]) {
      log(`analytics-cost: edgelimit, analytics on, a flush per ${every}`);
      const on = ours(true);
      rows.push({
        contestant: "edgelimit",
        analytics: `on, a flush per ${every.toLocaleString("en")} decisions`,
        cost: await measure(
          conn,
          bridge,
          (id) => on.limit(id),
          every,
          () => on.analytics.flush(),
        ),
      });
      await on.dispose();
    }
    for (const analytics of [false, true]) {
      log(`analytics-cost: @upstash/ratelimit, analytics ${analytics}`);
      const peer = new Ratelimit({
        redis: client(),
        limiter: Ratelimit.fixedWindow(LIMIT, "1 h"),
        prefix: `ac-peer-${++n}`,
        analytics,
        enableTelemetry: false,
      });
      const cost = await measure(conn, bridge, async (id) => {
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
    await conn.close();
    await bridge.close();
    await server.stop();
  }
}

const names = (c: Record<string, number>) =>
  Object.entries(c)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([name, k]) => `${name}×${k}`)
    .join(" ") || "–";

/** A Markdown table, and the summary line bench/report.ts reads its goal from. */
export function analyticsCostTable(rows: AnalyticsCostRow[]): string {
  const head = [
    "library",
    "analytics",
    "decisions: Redis commands",
    "decisions: HTTP requests",
    "flushes: Redis commands",
    "flushes: HTTP requests",
    "total commands",
    "total requests",
  ];
  const lines = [
    `| ${head.join(" | ")} |`,
    `|---|---|${head
      .slice(2)
      .map(() => "---:")
      .join("|")}|`,
  ];
  for (const r of rows) {
    const c = r.cost;
    const b = c.background;
    lines.push(
      `| ${[
        r.contestant,
        r.analytics,
        `${total(c.commands)} (${names(c.commands)})`,
        String(c.requests),
        b ? `${total(b.commands)} (${names(b.commands)})` : "–",
        b ? String(b.requests) : "–",
        String(total(c.commands) + (b ? total(b.commands) : 0)),
        String(c.requests + (b?.requests ?? 0)),
      ].join(" | ")} |`,
    );
  }
  const off = rows.find((r) => r.contestant === "edgelimit" && r.analytics === "off")!.cost;
  const ons = rows.filter((r) => r.contestant === "edgelimit" && r.analytics !== "off");
  const addedCommands = Math.max(...ons.map((r) => total(r.cost.commands) - total(off.commands)));
  const addedRequests = Math.max(...ons.map((r) => r.cost.requests - off.requests));
  const [peerOff, peerOn] = ["off", "`analytics: true`"].map(
    (a) => rows.find((r) => r.contestant === "@upstash/ratelimit" && r.analytics === a)!.cost,
  );
  const peerAdded = total(peerOn!.commands) - total(peerOff!.commands);
  const peerRequests = peerOn!.requests - peerOff!.requests;
  return `Per ${DECISIONS.toLocaleString("en")} decisions (${IDS} identifiers × ${DECISIONS / IDS}, a fixed window of ${LIMIT} an hour: ${DECISIONS - IDS * LIMIT} denied), one at a time:

${lines.join("\n")}

Analytics on add +${addedCommands} Redis commands and +${addedRequests} HTTP requests to the decisions' own requests per ${DECISIONS.toLocaleString("en")} decisions; the peer's \`analytics: true\` adds +${peerAdded} commands and +${peerRequests} requests.`;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const rows = await measureAnalyticsCost({ log: (line) => process.stderr.write(`${line}\n`) });
  console.log(analyticsCostTable(rows));
}
