// edgelimit/upstash beside @upstash/ratelimit itself: a rolling deploy shares one database and one
// prefix; analytics land where the peer's Analytics reads them; a stalled Redis answers the peer's
// timeout with the request behind it aborted.
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { Analytics as PeerAnalytics, Ratelimit as PeerRatelimit } from "@upstash/ratelimit";
import { Redis } from "@upstash/redis";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { Ratelimit } from "../../../src/adapters/upstash/index.js";
import { failOnUnhandledRejections, ownBridge } from "../../own-bridge.js";
import { uniquePrefix } from "../../support.js";

failOnUnhandledRejections();
const bridge = ownBridge();

function redis(url = bridge.url): Redis {
  return new Redis({ url, token: inject("bridgeToken"), enableTelemetry: false });
}

// Weekly windows: the epoch's weeks end on Thursdays 00:00 UTC, so a run on the real clock (the
// peer's) crosses a window's end only then.
const ALGORITHMS = [
  ["fixedWindow", (of: typeof Ratelimit | typeof PeerRatelimit) => of.fixedWindow(5, "1 w")],
  ["slidingWindow", (of: typeof Ratelimit | typeof PeerRatelimit) => of.slidingWindow(5, "1 w")],
  ["tokenBucket", (of: typeof Ratelimit | typeof PeerRatelimit) => of.tokenBucket(1, "1 w", 5)],
] as const;

describe("a rolling deploy: the peer and the entry on one database and one prefix", () => {
  for (const [name, algorithm] of ALGORITHMS) {
    it(`${name}: no WRONGTYPE, each admits exactly its limit, no more`, async () => {
      const client = redis();
      const prefix = uniquePrefix("rolling");
      // biome-ignore lint/suspicious/noExplicitAny: the two libraries' algorithm types differ by design
      const peer = new PeerRatelimit({ redis: client, prefix, limiter: algorithm(PeerRatelimit) as any });
      const entry = new Ratelimit({
        redis: client,
        prefix,
        // biome-ignore lint/suspicious/noExplicitAny: as above
        limiter: algorithm(Ratelimit) as any,
        timeout: 15_000,
      });
      const admitted = { peer: 0, entry: 0 };
      // interleaved, on the same identifiers, as old and new instances serve them during the deploy
      for (let i = 0; i < 8; i++) {
        for (const id of ["user:1", "user:1:1", "203.0.113.7"]) {
          if ((await peer.limit(id)).success) admitted.peer += 1;
          if ((await entry.limit(id)).success) admitted.entry += 1;
        }
      }
      expect(admitted).toEqual({ peer: 15, entry: 15 });
      // each library reads only its own state: counts start fresh at the switch
      expect((await entry.getRemaining("user:2")).remaining).toBe(5);
      expect((await peer.getRemaining("user:1")).remaining).toBe(0);
      expect((await entry.getRemaining("user:1")).remaining).toBe(0);
    });
  }
});

describe("analytics: counted in the isolate, written in the background, read by the peer's Analytics", () => {
  it("3 admitted and 2 limited land in <prefix>:events:<hour>", async () => {
    const client = redis();
    const prefix = uniquePrefix("analytics");
    const entry = new Ratelimit({
      redis: client,
      prefix,
      limiter: Ratelimit.fixedWindow(3, "1 w"),
      analytics: true,
      timeout: 15_000,
    });
    const before = bridge.stats.requests;
    const responses = [];
    for (let i = 0; i < 5; i++) responses.push(await entry.limit("user:a", { geo: { country: "DE" } }));
    // 5 decisions (the 5th from the deny cache), and no analytics command yet: it waits for `pending`
    expect(bridge.stats.requests - before).toBe(4);
    await Promise.all(responses.map((r) => r.pending));
    expect(bridge.stats.requests - before).toBe(5);
    const usage = await new PeerAnalytics({ redis: client, prefix }).getUsage(Date.now() - 3_600_000);
    expect(usage).toEqual({ "user:a": { success: 3, blocked: 2 } });
  });
});

describe("a stalled Redis", () => {
  let server: ReturnType<typeof createServer>;
  let url = "";
  const requests: IncomingMessage[] = [];
  const aborted: boolean[] = [];
  beforeAll(async () => {
    // accepts every request and never answers; notes when the caller gives up on one
    server = createServer((request) => {
      const index = requests.push(request) - 1;
      aborted[index] = false;
      request.on("close", () => {
        aborted[index] = true;
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  it('answers { success: true, reason: "timeout" } at the timeout, and aborts the request', async () => {
    const entry = new Ratelimit({
      redis: redis(url),
      limiter: Ratelimit.slidingWindow(5, "1 m"),
      timeout: 200,
    });
    const started = Date.now();
    const response = await entry.limit("user:1");
    expect(response).toMatchObject({ success: true, limit: 0, remaining: 0, reset: 0, reason: "timeout" });
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(requests.length).toBe(1);
    const deadline = Date.now() + 5_000;
    while (!aborted[0] && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(aborted[0]).toBe(true);
  });
});

describe("blockUntilReady, on the real clock", () => {
  it("waits for the window that admits, and gives up at its timeout", async () => {
    const entry = new Ratelimit({
      redis: redis(),
      prefix: uniquePrefix("block"),
      limiter: Ratelimit.fixedWindow(1, "1 s"),
    });
    // the first unit of a window, then one that has to wait for the next window
    const first = await entry.limit("user:b");
    expect(first.success).toBe(true);
    const started = Date.now();
    const waited = await entry.blockUntilReady("user:b", 5_000);
    expect(waited.success).toBe(true);
    expect(Date.now()).toBeGreaterThanOrEqual(first.reset - 5);
    expect(Date.now() - started).toBeLessThan(4_000);
    // a timeout shorter than the wait: denied once it has passed
    const short = await entry.blockUntilReady("user:b", 50);
    expect(short.success).toBe(false);
  });
});
