// Regions as a user sees them from outside: three regions, each a redis-server behind the bridge
// (`edgelimit/bridge`), reached through delay proxies of this file's own (home 0 ms one way from
// region A, 60 ms from B and C; each region's database 2 ms from its isolates), 4 Limiter instances
// per region built with @upstash/redis clients on default options and the real clock.
import net from "node:net";
import { Redis } from "@upstash/redis";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type Bridge, type RedisServer, startBridge, startRedisServer } from "../src/bridge/index.js";
import type { WaitUntil } from "../src/engine/leases.js";
import {
  type Decision,
  fixedWindow,
  gcra,
  Limiter,
  type RuleConfig,
  slidingWindow,
  tokenBucket,
} from "../src/index.js";
import { failOnUnhandledRejections } from "./own-bridge.js";
import { uniquePrefix } from "./support.js";

failOnUnhandledRejections();

const token = "regions-outside-token";
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A TCP proxy that holds every chunk `delay` ms each way, in order; "stall" stops forwarding (both ways). */
class DelayProxy {
  stalled = false;
  private readonly sockets = new Set<net.Socket>();
  private constructor(
    private readonly server: net.Server,
    readonly url: string,
  ) {}

  static async start(target: string, delay: number): Promise<DelayProxy> {
    const { hostname, port } = new URL(target);
    let proxy!: DelayProxy;
    const server = net.createServer((client) => {
      const upstream = net.connect(Number(port), hostname);
      for (const socket of [client, upstream]) {
        proxy.sockets.add(socket);
        socket.on("error", () => {});
        socket.once("close", () => {
          proxy.sockets.delete(socket);
          client.destroy();
          upstream.destroy();
        });
      }
      const pipe = (from: net.Socket, to: net.Socket) => {
        from.on("data", (chunk) => {
          if (proxy.stalled) return; // swallowed: the caller waits for an answer that never comes
          setTimeout(() => to.write(chunk), delay);
        });
      };
      pipe(client, upstream);
      pipe(upstream, client);
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    proxy = new DelayProxy(server, `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`);
    return proxy;
  }

  async close(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

interface Db {
  server: RedisServer;
  bridge: Bridge;
}
async function database(): Promise<Db> {
  const server = await startRedisServer();
  const bridge = await startBridge({ redisUrl: server.url, port: 0, token });
  return { server, bridge };
}

let home: Db;
const regionDbs: Db[] = [];
/** Per region: the way to home (0, 60, 60 ms one way) and the way to its own database (2 ms). */
const toHome: DelayProxy[] = [];
const toRegion: DelayProxy[] = [];

beforeAll(async () => {
  home = await database();
  for (let i = 0; i < 3; i++) {
    regionDbs.push(await database());
    toHome.push(await DelayProxy.start(home.bridge.url, i === 0 ? 0 : 60));
    toRegion.push(await DelayProxy.start(regionDbs[i]!.bridge.url, 2));
  }
}, 30_000);
afterAll(async () => {
  for (const proxy of [...toHome, ...toRegion]) await proxy.close();
  // (the region-down tests stopped one server and one bridge already)
  for (const db of [home, ...regionDbs]) {
    await db?.bridge.close().catch(() => {});
    await db?.server.stop().catch(() => {});
  }
});

const client = (url: string) => new Redis({ url, token });

/**
 * An instance of `region`: its home and regional databases through that region's proxies, as an
 * @upstash/redis client on default options, or (`plain`) as `{ url, token }`.
 */
function limiter(
  region: number,
  rules: Record<string, RuleConfig>,
  prefix: string,
  more: { plain?: boolean; [option: string]: unknown } = {},
  pool: { max: number; ttl: string } = { max: 40, ttl: "1s" },
): Limiter {
  const { plain, ...options } = more;
  const redis = (url: string) => (plain ? { url, token } : client(url));
  return new Limiter({
    redis: redis(toHome[region]!.url),
    region: { redis: redis(toRegion[region]!.url), pool },
    rules,
    prefix,
    ...options,
  });
}

/** A Limiter on home directly (no delay, no region), to read what home holds. */
const homeOnly = (rules: Record<string, RuleConfig>, prefix: string) =>
  new Limiter({ redis: client(home.bridge.url), rules, prefix });

/** Waits while the next whole day (UTC) starts within `ms`, so that a day-long window holds the whole test. */
async function clearOfDayBoundary(ms: number): Promise<void> {
  const left = 86_400_000 - (Date.now() % 86_400_000);
  if (left < ms) await sleep(left + 50);
}

const percentile = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))]!;
};

describe("never above the limit: 3 regions × 4 instances, concurrent, real clock", () => {
  // Rules whose refill over the test's ~1 s adds at most a unit or two: the bound is near the limit.
  const cases: [string, RuleConfig, (elapsed: number) => number][] = [
    ["gcra", gcra({ limit: 60, period: "1m" }), (elapsed) => 60 + Math.floor(elapsed / 1000) + 1],
    [
      "tokenBucket",
      tokenBucket({ capacity: 60, refillRate: 1, interval: "1s" }),
      (elapsed) => 60 + Math.floor(elapsed / 1000) + 1,
    ],
    ["fixedWindow", fixedWindow({ limit: 60, window: "1d" }), () => 60],
    ["slidingWindow", slidingWindow({ limit: 60, window: "1d" }), () => 60],
  ];
  for (const lease of [false, true]) {
    for (const [name, rule, most] of cases) {
      it(`${name}, lease ${lease ? "on" : "off"}`, async () => {
        await clearOfDayBoundary(10_000);
        // A run where a decision waited out the Limiter's default 1 s timeout (a busy machine: 36 callers
        // through delay proxies, 4 bridges in this process) failed open and says nothing about the
        // limit: it is run again, on an identifier of its own, up to 3 times.
        for (let attempt = 1; ; attempt++) {
          const errors = await run(attempt);
          if (errors === 0 || attempt === 3) {
            expect(errors).toBe(0);
            return;
          }
        }
      }, 20_000);

      async function run(attempt: number): Promise<number> {
        const prefix = uniquePrefix("outside");
        const rules = { r: rule };
        const fleet = [0, 1, 2].flatMap((region) =>
          Array.from({ length: 4 }, () =>
            // with leases, `{ url, token }` (one transport per URL: the region's instances share it)
            limiter(region, rules, prefix, lease ? { lease: { max: 5, ttl: "500ms" }, plain: true } : {}),
          ),
        );
        const start = Date.now();
        const decisions: Decision[] = [];
        // every instance: 3 callers in a loop for 1 s, identifier "hot" (2 000+ asks against 60)
        await Promise.all(
          fleet.flatMap((l) =>
            Array.from({ length: 3 }, async () => {
              while (Date.now() - start < 1000) {
                decisions.push(await l.limit("hot"));
                await sleep(2); // a denial cached in the isolate answers at once: let the event loop run
              }
            }),
          ),
        );
        const elapsed = Date.now() - start;
        const admitted = decisions.filter((d) => d.allowed).length;
        const errors = decisions.filter((d) => d.source === "error").length;
        const pooled = decisions.filter((d) => d.source === "region" || d.source === "lease").length;
        for (const l of fleet) await l.dispose();
        if (process.env.REGION_REPORT)
          console.log(name, { lease, asked: decisions.length, admitted, errors, pooled, elapsed });
        if (errors) {
          console.log(name, lease, attempt, decisions.find((d) => d.source === "error")?.error);
          return errors;
        }
        expect(admitted).toBeLessThanOrEqual(most(elapsed));
        // and not far under: at most what pools (3 × 40) and leases (12 × 5) can hold
        expect(admitted).toBeGreaterThanOrEqual(60 - 3 * 40 - (lease ? 12 * 5 : 0));
        expect(admitted).toBeGreaterThan(0);
        return 0;
      }
    }
  }
});

describe("short windows under the real clock: at most the limit in every window", () => {
  for (const [name, rule] of [
    ["fixedWindow", fixedWindow({ limit: 30, window: "1s" })],
    ["slidingWindow", slidingWindow({ limit: 30, window: "1s" })],
  ] as const) {
    it(`${name} 30 a second, with leases, for 2.1 s`, async () => {
      const prefix = uniquePrefix("short");
      const fleet = [0, 1, 2].flatMap((region) =>
        Array.from({ length: 4 }, () =>
          limiter(region, { r: rule }, prefix, { lease: { max: 5, ttl: "500ms" } }),
        ),
      );
      const perWindow = new Map<number, number>();
      let errors = 0;
      const start = Date.now();
      await Promise.all(
        fleet.flatMap((l) =>
          Array.from({ length: 2 }, async () => {
            while (Date.now() - start < 2100) {
              const d = await l.limit("short");
              if (d.source === "error") errors += 1;
              else if (d.allowed) {
                const w = d.decidedAt - (d.decidedAt % 1000);
                perWindow.set(w, (perWindow.get(w) ?? 0) + 1);
              }
              await sleep(2);
            }
          }),
        ),
      );
      for (const l of fleet) await l.dispose();
      if (process.env.REGION_REPORT) console.log(name, errors, [...perWindow.values()]);
      expect(errors).toBe(0);
      expect(perWindow.size).toBeGreaterThanOrEqual(2);
      for (const count of perWindow.values()) expect(count).toBeLessThanOrEqual(30);
    }, 20_000);
  }
});

describe("a warm identifier in a far region", () => {
  it("is answered from the region's pool at about the regional round trip", async () => {
    const prefix = uniquePrefix("warm");
    const rules = { r: gcra({ limit: 100_000, period: "1m" }) };
    const fleet = Array.from({ length: 4 }, () => limiter(1, rules, prefix, {}, { max: 500, ttl: "5s" }));
    const latencies: number[] = [];
    const sources = new Map<string, number>();
    const start = Date.now();
    // 4 instances of region B, each one decision every ~20 ms: warm for 1 s (the pool learns the
    // region's demand), then measured for 1.5 s
    await Promise.all(
      fleet.map(async (l) => {
        while (Date.now() - start < 2500) {
          const t = performance.now();
          const d = await l.limit("warm");
          const ms = performance.now() - t;
          expect(d.allowed).toBe(true);
          if (Date.now() - start > 1000) {
            latencies.push(ms);
            sources.set(d.source, (sources.get(d.source) ?? 0) + 1);
          }
          await sleep(20);
        }
      }),
    );
    for (const l of fleet) await l.dispose();
    const regional = sources.get("region") ?? 0;
    if (process.env.REGION_REPORT)
      console.log({ sources, p50: percentile(latencies, 50), p90: percentile(latencies, 90) });
    expect(regional / latencies.length).toBeGreaterThan(0.8);
    // the regional round trip is ~4 ms; home's is ~120 ms
    expect(percentile(latencies, 50)).toBeLessThan(30);
  }, 20_000);
});

describe("what home holds after the pools expire", () => {
  const rules = { r: fixedWindow({ limit: 10_000, window: "1d" }) };
  // The whole test inside one day-long window: waited for in a hook, not out of the test's own 20 s
  // (a test starting 20 s before midnight UTC slept past its timeout).
  beforeEach(() => clearOfDayBoundary(20_000), 30_000);

  async function traffic(fleet: Limiter[], id: string, ms: number, waitUntil?: WaitUntil): Promise<number> {
    let admitted = 0;
    const start = Date.now();
    await Promise.all(
      fleet.map(async (l) => {
        while (Date.now() - start < ms) {
          if ((await l.limit(id, { waitUntil })).allowed) admitted += 1;
          await sleep(5);
        }
      }),
    );
    return admitted;
  }

  /** 3 regions × 4 instances on one identifier of their own, with or without leases. */
  const fleetOf = (prefix: string, lease: boolean) =>
    [0, 1, 2].flatMap((region) =>
      Array.from({ length: 4 }, () =>
        limiter(region, rules, prefix, lease ? { lease: { max: 5, ttl: "500ms" } } : {}),
      ),
    );

  it("exactly what was admitted once the pools expired: Node's timers, or the next decision with waitUntil", async () => {
    const prefix = uniquePrefix("expire");
    // three fleets at once: no waitUntil (timers) without and with leases; waitUntil (Workers)
    const scenarios = [
      { id: "timers", lease: false, work: undefined as Promise<unknown>[] | undefined },
      { id: "timers-leases", lease: true, work: undefined },
      { id: "wait-until", lease: false, work: [] as Promise<unknown>[] },
    ].map((scenario) => ({ ...scenario, fleet: fleetOf(prefix, scenario.lease) }));
    const results = await Promise.all(
      scenarios.map(async ({ id, fleet, work }) => {
        const waitUntil = work && ((promise: Promise<unknown>) => void work.push(promise));
        const admitted = await traffic(fleet, id, 1000, waitUntil);
        expect(fleet.reduce((sum, l) => sum + l.region!.stats.deposited, 0)).toBeGreaterThan(0);
        // a little over the pool ttl: every pool expired. Without waitUntil, its last depositor's
        // timer took it back; with waitUntil no timer runs: each instance's next decision (of any
        // identifier) asks the expired pools it deposited into, and the refunds go through waitUntil
        await sleep(1500);
        if (work) {
          for (const l of fleet) await l.limit("next", { waitUntil });
          while (work.length > 0) await Promise.all(work.splice(0));
        }
        const peek = await homeOnly(rules, prefix).limit(id, { cost: 0 });
        return { id, admitted, remaining: peek.remaining };
      }),
    );
    if (process.env.REGION_REPORT) console.log(results);
    for (const { admitted, remaining } of results) expect(remaining).toBe(10_000 - admitted);
    for (const { fleet } of scenarios) for (const l of fleet) await l.dispose();
  }, 20_000);

  it("dispose() gives the units back at once: home holds exactly what was admitted", async () => {
    const prefix = uniquePrefix("dispose");
    const results = await Promise.all(
      [false, true].map(async (lease) => {
        const id = `d-${lease}`;
        const fleet = fleetOf(prefix, lease);
        const admitted = await traffic(fleet, id, 1000);
        expect(fleet.reduce((sum, l) => sum + l.region!.stats.deposited, 0)).toBeGreaterThan(0);
        // right away, pools not expired: dispose() of every instance gives back what they hold
        for (const l of fleet) await l.dispose();
        const peek = await homeOnly(rules, prefix).limit(id, { cost: 0 });
        return { lease, admitted, remaining: peek.remaining };
      }),
    );
    if (process.env.REGION_REPORT) console.log(results);
    for (const { admitted, remaining } of results) expect(remaining).toBe(10_000 - admitted);
  }, 20_000);
});

describe("failures", () => {
  it("home stalled: the region answers from its pool until it runs out, then onError without waiting", async () => {
    const prefix = uniquePrefix("stall");
    const rules = { r: gcra({ limit: 100_000, period: "1m" }) };
    // a pool ttl longer than the test: the pool cannot expire between the warm-up and the stall
    const fleet = Array.from({ length: 4 }, () =>
      limiter(2, rules, prefix, { onError: "deny", timeout: 300 }, { max: 40, ttl: "30s" }),
    );
    // warm: the pool fills
    const start = Date.now();
    await Promise.all(
      fleet.map(async (l) => {
        while (Date.now() - start < 1000) {
          await l.limit("s");
          await sleep(10);
        }
      }),
    );
    // The stall must find units in the pool (a deposit or top-up may still be on its way when the
    // warm-up ends): wait until it holds 8, asking once more (a low pool asks for a top-up) meanwhile.
    const regionDb = client(toRegion[2]!.url);
    const [poolKey] = await regionDb.keys(`${prefix}*pool*`);
    expect(poolKey, "the pool's key in the region's database").toBeDefined();
    for (let tries = 0; Number((await regionDb.hget<string>(poolKey!, "u")) ?? 0) < 8; tries++) {
      expect(tries, "the pool never held 8 units").toBeLessThan(100);
      await fleet[0]!.limit("s");
      await sleep(50);
    }
    toHome[2]!.stalled = true;
    try {
      const seen: { source: string; ms: number }[] = [];
      const until = Date.now() + 6000;
      while (Date.now() < until) {
        const rounds = await Promise.all(
          fleet.map(async (l) => {
            const t = performance.now();
            const d = await l.limit("s");
            return { source: d.source, ms: performance.now() - t, allowed: d.allowed };
          }),
        );
        for (const r of rounds) {
          expect(r.allowed).toBe(r.source !== "error");
          seen.push(r);
        }
        if (seen.filter((s) => s.source === "error").length >= 40) break;
      }
      const firstError = seen.findIndex((s) => s.source === "error");
      if (process.env.REGION_REPORT)
        console.log(seen.map((s) => `${s.source[0]}${Math.round(s.ms)}`).join(" "));
      // the pool answered first, at regional latency
      expect(firstError).toBeGreaterThan(0);
      expect(seen.slice(0, firstError).every((s) => s.source === "region")).toBe(true);
      // then onError; once the breakers opened, at once
      const errors = seen.slice(firstError);
      expect(errors.length).toBeGreaterThanOrEqual(40);
      const last = errors.slice(-20);
      expect(last.every((s) => s.source === "error")).toBe(true);
      expect(
        percentile(
          last.map((s) => s.ms),
          50,
        ),
      ).toBeLessThan(100);
    } finally {
      toHome[2]!.stalled = false;
      for (const l of fleet) await l.dispose();
    }
  }, 20_000);

  for (const [region, what] of [
    [0, "its redis-server killed"],
    [1, "its bridge closed"],
  ] as const) {
    it(`region down (${what}): decisions go home`, async () => {
      const prefix = uniquePrefix("down");
      const rules = { r: gcra({ limit: 100_000, period: "1m" }) };
      const fleet = Array.from({ length: 4 }, () => limiter(region, rules, prefix));
      const start = Date.now();
      await Promise.all(
        fleet.map(async (l) => {
          while (Date.now() - start < 500) await l.limit("d");
        }),
      );
      expect(fleet.some((l) => l.region!.stats.hits > 0)).toBe(true);
      if (region === 0) await regionDbs[0]!.server.stop();
      else await regionDbs[1]!.bridge.close();
      const sources = new Map<string, number>();
      const latencies: number[] = [];
      for (let i = 0; i < 10; i++) {
        await Promise.all(
          fleet.map(async (l) => {
            const t = performance.now();
            const d = await l.limit("d");
            latencies.push(performance.now() - t);
            expect(d.allowed).toBe(true);
            sources.set(d.source, (sources.get(d.source) ?? 0) + 1);
          }),
        );
      }
      for (const l of fleet) await l.dispose();
      if (process.env.REGION_REPORT) console.log(what, { sources, p50: percentile(latencies, 50) });
      expect([...sources.keys()]).toEqual(["redis"]);
      // home's round trip (0 ms one way from A, 60 from B), not a timeout
      expect(percentile(latencies, 50)).toBeLessThan(region === 0 ? 100 : 300);
    }, 20_000);
  }
});
