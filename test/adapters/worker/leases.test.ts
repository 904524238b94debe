// A route with "lease" in the Worker's config, inside workerd: the headers are the ones Redis would give,
// units are held in the isolate (Redis counts them as taken), and a bad lease is a config error.
import { Redis } from "@upstash/redis/cloudflare";
import { describe, expect, inject, test, vi } from "vitest";
import { fixedWindow, Limiter } from "../../../src/index.js";
import { call, config, envFor, limitHeaders } from "./support.js";

const route = (lease: unknown) => ({
  name: "api",
  match: { path: "/api/*" },
  key: "ip",
  rules: { perHour: { algorithm: "fixedWindow", limit: 100, window: "1h" } },
  lease,
});

describe("a route with a lease", () => {
  test("answers with Redis's numbers while holding units of the hot key in the isolate", async () => {
    const document = config([route({ max: 50, ttl: "1m" })]);
    const env = envFor(document);
    const remaining: string[] = [];
    for (let i = 0; i < 10; i++) {
      const response = await call(env, "/api/x");
      await response.arrayBuffer();
      expect(response.status).toBe(200);
      remaining.push(limitHeaders(response).ratelimit!.replace(/;t=\d+$/, ""));
    }
    expect(remaining).toEqual(Array.from({ length: 10 }, (_, i) => `"perHour";r=${99 - i}`));
    // What Redis holds: the 10 used, and units still leased to this isolate (counted as taken).
    const peek = new Limiter({
      redis: new Redis({ url: inject("bridgeUrl"), token: inject("bridgeToken"), enableTelemetry: false }),
      prefix: document.prefix as string,
      rules: { perHour: fixedWindow({ limit: 100, window: "1h" }) },
    });
    const state = await peek.limit("api:192.0.2.1", { cost: 0 });
    expect(state.remaining).toBeLessThan(90);
  });

  test("a bad lease is a config error naming the field", async () => {
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    const response = await call(envFor(config([route({ max: 0, ttl: "1s" })])), "/api/x");
    expect(response.status).toBe(500);
    expect(await response.text()).toBe("edgelimit is misconfigured");
    expect(String(error.mock.calls[0]?.[0])).toContain(
      "routes[0].lease.max: must be a whole number of units from 1 to 100000, got 0",
    );
    error.mockRestore();
  });
});
