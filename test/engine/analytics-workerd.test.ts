// Analytics in workerd, where a timer cannot outlive its request (no `unref`): counts are written by a
// flush handed to the decision's waitUntil once flushEvery has passed, from inside that request, and
// never from a timer. The fixture Worker (fixtures/analytics-worker.ts) is bundled with esbuild and run
// by Miniflare, that is, by the real workerd; each dispatchFetch is a request of its own in one isolate.
import type { Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, inject, it, vi } from "vitest";
import { fixedWindow, Limiter } from "../../src/index.js";
import { ownBridge } from "../own-bridge.js";
import { T0, uniquePrefix } from "../support.js";
import { startFixture } from "./fixtures/miniflare.js";

const bridge = ownBridge();
let mf: Miniflare;
const logged: string[] = [];
const prefix = uniquePrefix("awd");

beforeAll(async () => {
  mf = await startFixture(
    "analytics-worker",
    { URL: bridge.url, TOKEN: inject("bridgeToken"), PREFIX: prefix },
    logged,
  );
}, 60_000);

afterAll(async () => {
  await mf?.dispose();
});

async function ask(query: Record<string, string | number>): Promise<{ source: string; allowed: boolean }> {
  const search = new URLSearchParams(Object.entries(query).map(([k, v]) => [k, String(v)]));
  const response = await mf.dispatchFetch(`http://worker.test/?${search}`);
  return (await response.json()) as { source: string; allowed: boolean };
}

describe("analytics in workerd", () => {
  it("flushes through waitUntil once flushEvery has passed, never from a timer", async () => {
    // a reader in Node with the same prefix and name: its report reads what the Worker flushed
    const reader = new Limiter({
      redis: { url: bridge.url, token: inject("bridgeToken") },
      prefix,
      rules: { perMinute: fixedWindow({ limit: 3, window: "1m" }) },
      analytics: true,
      clock: () => T0,
    });
    const flushes = async () => (await reader.analytics.report({ from: T0, to: T0 })).decisions;
    // 5 decisions at T0 (3 allowed, 2 denied), 2 of them without waitUntil: nothing is written
    for (let i = 0; i < 5; i++) await ask({ now: T0, id: "a", ...(i < 2 ? { nowait: 1 } : {}) });
    await new Promise((resolve) => setTimeout(resolve, 1200)); // longer than flushEvery, in real time
    expect(await flushes()).toMatchObject({ allowed: 0, denied: 0 });
    // a second later by the Limiter's clock: this request's waitUntil carries the flush of all 6
    expect(await ask({ now: T0 + 1000, id: "b" })).toEqual({ source: "redis", allowed: true });
    await vi.waitFor(async () => expect(await flushes()).toMatchObject({ allowed: 4, denied: 2 }), {
      timeout: 5000,
    });
    const r = await reader.analytics.report({ from: T0, to: T0 });
    expect(r.top).toEqual([{ identifier: "a", denied: 2, allowed: 3 }]);
    expect(r.decisions.bySource).toEqual({ redis: 6, cache: 0, lease: 0, region: 0, error: 0 });
    expect(
      logged.filter((line) => /different request|Cannot perform I\/O|hung|flush failed/i.test(line)),
    ).toEqual([]);
  }, 20_000);

  it("sends at most one flush request per flushEvery (1 s) however many decisions, counted at the bridge", async () => {
    const reader = new Limiter({
      redis: { url: bridge.url, token: inject("bridgeToken") },
      prefix,
      rules: { perMinute: fixedWindow({ limit: 3, window: "1m" }) },
      analytics: true,
      clock: () => T0,
    });
    const T1 = T0 + 10 * 60_000;
    // each read is one bridge request of the reader's (it has nothing of its own to flush)
    let reads = 0;
    const counted = async () => {
      reads += 1;
      return (await reader.analytics.report({ from: T1, to: T1 })).decisions;
    };
    const before = bridge.stats.requests;
    // 16 decisions over 3.75 s of the Limiter's clock: one request each, and flushes at T1, +1 s, +2 s, +3 s
    for (let i = 0; i < 16; i++) await ask({ now: T1 + i * 250, id: "c" });
    await vi.waitFor(async () => expect(await counted()).toMatchObject({ allowed: 3, denied: 10 }), {
      timeout: 5000,
    });
    expect(bridge.stats.requests - before - reads - 16).toBe(4);
    // the three decisions after the last flush are held in the isolate, and go with the next one
    await ask({ now: T1 + 4000, id: "c" });
    await vi.waitFor(async () => expect(await counted()).toMatchObject({ allowed: 3, denied: 14 }), {
      timeout: 5000,
    });
    expect(bridge.stats.requests - before - reads - 17).toBe(5);
    await reader.dispose();
  }, 20_000);
});
