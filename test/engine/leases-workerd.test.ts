// What workerd does with one isolate's concurrent requests when their decisions share I/O: the fetch
// of a batch (batchWindow > 0), and the leases (answers, reservations, refunds through waitUntil).
// The fixture Worker (fixtures/leases-worker.ts) is bundled with esbuild and run by Miniflare, that
// is, by the real workerd; each dispatchFetch is a request of its own in one isolate.
import { createServer, request as httpRequest, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Redis } from "@upstash/redis";
import type { Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { fixedWindow, Limiter } from "../../src/index.js";
import { ownBridge } from "../own-bridge.js";
import { T0, uniquePrefix } from "../support.js";
import { startFixture } from "./fixtures/miniflare.js";

interface Answer {
  source: string;
  allowed: boolean;
  remaining: number;
  error?: string;
}

const bridge = ownBridge();
let slow: Server;
let mf: Miniflare;
const logged: string[] = [];

/** A hop in front of the bridge that holds every request 300 ms: Redis far away. */
function slowHop(target: URL): Promise<Server> {
  const server = createServer((req, res) => {
    setTimeout(() => {
      const forward = httpRequest(
        { host: target.hostname, port: target.port, path: req.url, method: req.method, headers: req.headers },
        (answer) => {
          res.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(res);
        },
      );
      forward.on("error", () => res.destroy());
      req.pipe(forward);
    }, 300);
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

beforeAll(async () => {
  slow = await slowHop(new URL(bridge.url));
  mf = await startFixture(
    "leases-worker",
    {
      URL: bridge.url,
      SLOW_URL: `http://127.0.0.1:${(slow.address() as AddressInfo).port}`,
      TOKEN: inject("bridgeToken"),
    },
    logged,
  );
}, 60_000);

afterAll(async () => {
  await mf?.dispose();
  slow?.closeAllConnections();
  await new Promise((resolve) => slow?.close(resolve));
});

/** One request to the Worker: its decision, or what workerd said instead of a response. */
async function ask(query: Record<string, string | number>): Promise<Answer | string> {
  const search = new URLSearchParams(Object.entries(query).map(([k, v]) => [k, String(v)]));
  const response = await mf.dispatchFetch(`http://worker.test/?${search}`);
  const text = await response.text();
  try {
    return JSON.parse(text) as Answer;
  } catch {
    return text.split("\n")[0]!;
  }
}

const sourceOf = (answer: Answer | string) => (typeof answer === "string" ? answer : answer.source);

describe("batchWindow > 0 across the requests of one isolate", () => {
  it("shares one fetch among concurrent requests while the one that sent it is alive", async () => {
    const prefix = uniquePrefix("wb");
    await ask({ limiter: "batch-fast", prefix, id: "warm" });
    bridge.stats.reset();
    const answers = await Promise.all(
      Array.from({ length: 6 }, (_, i) => ask({ limiter: "batch-fast", prefix, id: `c${i}` })),
    );
    expect(answers.map(sourceOf)).toEqual(Array(6).fill("redis"));
    expect(bridge.stats.requests).toBeLessThan(6);
  });

  it("loses the others' answers when the request that sent the shared fetch ends first", async () => {
    // The first request opens the batch, so the fetch is its I/O. Its own decision gives up at 50 ms
    // (a Limiter with a shorter timeout on the same client), it answers, and workerd cancels its
    // I/O, the shared fetch included: requests that joined the batch never get Redis's answer.
    const run = async (batch: boolean) => {
      const prefix = uniquePrefix("wb");
      const [short, long] = batch ? ["batch-short", "batch-long"] : ["solo-short", "solo-long"];
      await Promise.all([
        ask({ limiter: short, prefix, id: "warm" }),
        ask({ limiter: long, prefix, id: "warm" }),
      ]);
      const first = ask({ limiter: short, prefix, id: "first" });
      await new Promise((resolve) => setTimeout(resolve, 1));
      const others = await Promise.all([1, 2, 3].map((i) => ask({ limiter: long, prefix, id: `o${i}` })));
      return [sourceOf(await first), others.map(sourceOf)];
    };
    const [firstAlone, othersAlone] = await run(false);
    expect(firstAlone).toBe("error");
    expect(othersAlone).toEqual(["redis", "redis", "redis"]);

    const [firstBatched, othersBatched] = await run(true);
    expect(firstBatched).toBe("error");
    // each either waits out its own timeout ("error") or is cancelled by workerd as hung
    expect((othersBatched as string[]).filter((source) => source === "redis")).toEqual([]);
  });
});

describe("leases across the requests of one isolate", () => {
  it("answers concurrent requests from the lease, refunds through waitUntil, no cross-request I/O", async () => {
    const prefix = uniquePrefix("wl");
    const plain = new Limiter({
      redis: new Redis({ url: bridge.url, token: inject("bridgeToken"), enableTelemetry: false }),
      prefix,
      rules: { r: fixedWindow({ limit: 1000, window: "1h" }) },
      clock: () => T0,
    });
    bridge.stats.reset();
    const sources: Record<string, number> = {};
    let allowed = 0;
    for (let round = 0; round < 20; round++) {
      const answers = await Promise.all(
        Array.from({ length: 5 }, () => ask({ prefix, id: "hot", now: T0 + round })),
      );
      for (const answer of answers) {
        const source = sourceOf(answer);
        sources[source] = (sources[source] ?? 0) + 1;
        if (typeof answer !== "string" && answer.allowed) allowed += 1;
      }
    }
    expect(allowed).toBe(100);
    expect(Object.keys(sources).sort()).toEqual(["lease", "redis"]);
    expect(sources.lease).toBeGreaterThan(50);
    // the Redis decisions, and a refund now and then (concurrent reservations that crossed)
    expect(bridge.stats.requests).toBeLessThan(30);
    // Redis counted the 100 used and what the lease still holds; past its ttl, the next request
    // hands the refund to its waitUntil, and Redis is back to exactly the 100 used.
    expect((await plain.limit("hot", { cost: 0 })).remaining).toBeLessThan(1000 - 100);
    await ask({ prefix, id: "other", now: T0 + 2000 });
    expect((await plain.limit("hot", { cost: 0 })).remaining).toBe(1000 - 100);
    expect(logged.filter((line) => /different request|Cannot perform I\/O|hung/i.test(line))).toEqual([]);
  });
});

describe("a regional pool across the requests of one isolate", () => {
  it("answers from the pool, deposits and takes back through waitUntil, no cross-request I/O", async () => {
    const prefix = uniquePrefix("wr");
    const plain = new Limiter({
      redis: new Redis({ url: bridge.url, token: inject("bridgeToken"), enableTelemetry: false }),
      prefix,
      rules: { r: fixedWindow({ limit: 1000, window: "1h" }) },
      clock: () => T0,
    });
    const sources: Record<string, number> = {};
    let allowed = 0;
    for (let round = 0; round < 20; round++) {
      const answers = await Promise.all(
        Array.from({ length: 5 }, () => ask({ limiter: "region", prefix, id: "hot", now: T0 + round })),
      );
      for (const answer of answers) {
        const source = sourceOf(answer);
        sources[source] = (sources[source] ?? 0) + 1;
        if (typeof answer !== "string" && answer.allowed) allowed += 1;
      }
    }
    expect(allowed).toBe(100);
    expect(Object.keys(sources).sort()).toEqual(["redis", "region"]);
    expect(sources.region).toBeGreaterThan(50);
    // home counted the 100 used and what the pool still holds; past the pool's ttl, the next request
    // of the isolate that deposited takes the leftovers back (its waitUntil): home holds the 100 used
    expect((await plain.limit("hot", { cost: 0 })).remaining).toBeLessThan(1000 - 100);
    await ask({ limiter: "region", prefix, id: "other", now: T0 + 2000 });
    // (the refund may still be on its way in waitUntil when the response arrives)
    await expect.poll(async () => (await plain.limit("hot", { cost: 0 })).remaining).toBe(1000 - 100);
    expect(logged.filter((line) => /different request|Cannot perform I\/O|hung/i.test(line))).toEqual([]);
  });
});
