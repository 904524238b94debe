// The Worker's "concurrency" route option inside workerd, against the real bridge and a stand-in
// origin whose /gate/ID responses stay open until the test opens them: a slot is held while a body
// streams, and given back when it has been read to the end or the client went away (cancelled it).
import { Redis } from "@upstash/redis/cloudflare";
import { describe, expect, inject, test, vi } from "vitest";
import worker, { type Env } from "../../../src/adapters/worker/index.js";
import { Lock } from "../../../src/engine/lock.js";
import { config, envFor } from "./support.js";

const QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded";
const generous = { perHour: { algorithm: "gcra", limit: 1000, period: "1h" } };

/**
 * One request through the Worker, without waiting for its background work (which, here, waits for the
 * body): `settled()` resolves once everything handed to waitUntil has.
 */
async function send(env: Env, path: string, ip = "192.0.2.1") {
  const pending: Promise<unknown>[] = [];
  const ctx = {
    waitUntil: (promise: Promise<unknown>) => void pending.push(promise),
    passThroughOnException: () => {},
    props: {},
  };
  const request = new Request(`https://edge.example${path}`, { headers: { "CF-Connecting-IP": ip } });
  const response = await worker.fetch(request, env, ctx);
  return { response, settled: () => Promise.all(pending) };
}

const openGate = async (id: string) => {
  const opened = await fetch(`${inject("originUrl")}/open/${id}`);
  expect(opened.status).toBe(204);
};

function routeEnv(limit: number) {
  return envFor(
    config([
      {
        name: "reports",
        match: { path: "/*" },
        key: "ip",
        rules: generous,
        concurrency: { limit, ttl: "30s" },
      },
    ]),
  );
}

describe('the "concurrency" route option', () => {
  test("holds a slot until the body has been streamed to the end; when full answers 429 with Retry-After", async () => {
    const env = routeEnv(2);
    const [a, b] = [crypto.randomUUID(), crypto.randomUUID()];
    const first = await send(env, `/gate/${a}`);
    const second = await send(env, `/gate/${b}`);
    expect([first.response.status, second.response.status]).toEqual([200, 200]);

    const full = await send(env, "/status/200");
    expect(full.response.status).toBe(429);
    expect(full.response.headers.get("content-type")).toBe("application/problem+json");
    const retryAfter = Number(full.response.headers.get("retry-after"));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(30);
    // RateLimit speaks of the route's rate rule only: a cap on requests in flight is no rate policy
    expect(full.response.headers.get("ratelimit")).toMatch(/^"perHour";r=99\d;t=\d+$/);
    const problem = (await full.response.json()) as Record<string, unknown>;
    expect(problem).toMatchObject({
      type: QUOTA_EXCEEDED,
      status: 429,
      "violated-policies": ["concurrency"],
    });
    // another client has slots of its own
    const other = await send(env, "/status/200", "192.0.2.2");
    expect(other.response.status).toBe(200);
    await other.response.text();

    // a: the first bytes have arrived, the rest is still with the origin: the slot stays held
    const reader = first.response.body!.getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toBe("first;");
    const stillFull = await send(env, "/status/200");
    expect(stillFull.response.status).toBe(429);
    await stillFull.response.text();

    await openGate(a);
    let rest = "";
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) {
      rest += new TextDecoder().decode(chunk.value);
    }
    expect(rest).toBe("rest");
    await first.settled(); // the release has landed
    const next = await send(env, "/status/200");
    expect(next.response.status).toBe(200);
    expect(await next.response.text()).toBe("origin says 200");
    await next.settled();

    await openGate(b);
    await second.response.text();
    await second.settled();
  });

  test("a request refused a slot consumes nothing of the rate rules", async () => {
    const env = routeEnv(1);
    const gate = crypto.randomUUID();
    const held = await send(env, `/gate/${gate}`, "192.0.2.40");
    expect(held.response.status).toBe(200);
    for (let i = 0; i < 3; i++) {
      const refused = await send(env, "/status/200", "192.0.2.40");
      expect(refused.response.status).toBe(429);
      await refused.response.text();
      await refused.settled(); // its reservation given back
    }
    await openGate(gate);
    await held.response.text();
    await held.settled();
    // 1000 an hour: the held request and this one are all that count (a unit comes back every 3.6 s)
    const next = await send(env, "/status/200", "192.0.2.40");
    expect(next.response.status).toBe(200);
    expect(next.response.headers.get("ratelimit")).toMatch(/^"perHour";r=99[89];t=\d+$/);
    await next.response.text();
    await next.settled();
  });

  test("gives the slot back when the client goes away mid-body", async () => {
    const env = routeEnv(1);
    const gate = crypto.randomUUID();
    const held = await send(env, `/gate/${gate}`);
    expect(held.response.status).toBe(200);
    const reader = held.response.body!.getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toBe("first;");
    const refused = await send(env, "/status/200");
    expect(refused.response.status).toBe(429);
    await refused.response.text();

    await reader.cancel("the client went away"); // what the runtime does when the client disconnects
    await held.settled();
    const after = await send(env, "/status/200");
    expect(after.response.status).toBe(200);
    await after.response.text();
    await after.settled();
    await openGate(gate);
  });

  test("frees every slot of a large streamed body once it is read", async () => {
    const env = routeEnv(1);
    for (let i = 0; i < 3; i++) {
      const big = await send(env, "/big?bytes=1000000");
      expect(big.response.status).toBe(200);
      expect((await big.response.arrayBuffer()).byteLength).toBe(1_000_000);
      await big.settled();
    }
  });

  test("a shadow route lets a request over the limit through, marked EdgeLimit-Shadow: denied", async () => {
    const env = envFor(
      config([
        {
          name: "reports",
          match: { path: "/*" },
          key: "ip",
          rules: generous,
          mode: "shadow",
          concurrency: { limit: 1, ttl: "30s" },
        },
      ]),
    );
    const warnings: string[] = [];
    const original = console.warn;
    console.warn = (message: string) => void warnings.push(message);
    try {
      const gate = crypto.randomUUID();
      const held = await send(env, `/gate/${gate}`);
      expect(held.response.status).toBe(200);
      const over = await send(env, "/status/200");
      expect([over.response.status, over.response.headers.get("edgelimit-shadow")]).toEqual([200, "denied"]);
      expect(await over.response.text()).toBe("origin says 200");
      await openGate(gate);
      await held.response.text();
      await held.settled();
    } finally {
      console.warn = original;
    }
    expect(warnings).toEqual([
      'edgelimit shadow: would refuse GET /status/200 (all 1 concurrency slots taken) [route "reports"]',
    ]);
  });

  test("a bad concurrency option is a configuration error naming the field", async () => {
    const env = envFor(
      config([{ name: "r", key: "ip", rules: generous, concurrency: { limit: 0, ttl: "soon" } }]),
    );
    const errors: string[] = [];
    const original = console.error;
    console.error = (message: string) => void errors.push(message);
    try {
      const { response } = await send(env, "/");
      expect(response.status).toBe(500);
    } finally {
      console.error = original;
    }
    expect(errors.join("\n")).toMatch(/routes\[0\]\.concurrency\.limit: must be a positive whole number/);
    expect(errors.join("\n")).toMatch(/routes\[0\]\.concurrency\.ttl: /);
  });
});

describe("Lock.withLock inside workerd", () => {
  // The renewal timers are faked and the Lock's clock moved with them (real I/O still goes to Redis):
  // every renewal lands at an exact moment, with no sleeping through ttls.
  test("renewal keeps running after the response through ctx.waitUntil, then the lock is released", async () => {
    const redis = new Redis({
      url: inject("bridgeUrl"),
      token: inject("bridgeToken"),
      enableTelemetry: false,
    });
    const prefix = `tw-lock-${crypto.randomUUID().slice(0, 8)}`;
    const T0 = 1_700_000_040_000;
    let now = T0;
    const clock = () => now;
    const lock = new Lock({ redis, prefix, ttl: 600, clock });
    const rival = new Lock({ redis, prefix, ttl: 600, clock });
    const extend = vi.spyOn(lock, "extend");
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    try {
      const pending: Promise<unknown>[] = [];
      let fence = 0;
      let signal: AbortSignal | undefined;
      let finish!: () => void;
      const done = new Promise<void>((resolve) => {
        finish = resolve;
      });
      // What a fetch handler does: start the work, hand it to waitUntil, answer at once.
      const handler = () => {
        void lock
          .withLock(
            "job",
            async (s, f) => {
              signal = s;
              fence = f;
              await done; // the work outlives the response, over three ttls
            },
            { waitUntil: (p) => void pending.push(p) },
          )
          .catch(() => {});
        return new Response("accepted", { status: 202 });
      };
      expect(handler().status).toBe(202);
      expect(pending.length).toBe(1);
      await vi.waitFor(() => expect(signal).toBeDefined());
      expect(fence).toBe(T0);
      // a renewal every 200 ms (a third of the ttl); the rival is refused until each renewal's end
      const ends: number[] = [];
      for (let step = 1; step <= 9; step++) {
        now = T0 + step * 200;
        await vi.advanceTimersByTimeAsync(200);
        await extend.mock.results.at(-1)!.value;
        const tried = await rival.acquire("job", { owner: "rival" });
        ends.push(tried.acquired ? 0 : tried.expiresAt);
      }
      expect(ends).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9].map((step) => T0 + step * 200 + 600));
      finish();
      await Promise.all(pending);
      expect(signal?.aborted).toBe(false);
      expect(await rival.acquire("job", { owner: "rival" })).toMatchObject({
        acquired: true,
        fence: T0 + 1800,
      });
    } finally {
      vi.useRealTimers();
    }
  });
});
