// The Vercel middleware inside edge-runtime under a custom override: the cached denial states the
// override's quota, never a 500 (the decision carries its rules; nothing is looked up again).
import { describe, expect, it } from "vitest";
import { clientIp, createMiddleware } from "../../../src/adapters/vercel/index.js";
import { gcra, Limiter } from "../../../src/index.js";
import { bridgeRedis, manualClock, T0, uniquePrefix } from "../../support.js";

describe("vercel createMiddleware under a custom override", () => {
  it("6 × continue, then 429s stating the override's quota (IPv4 and IPv6)", async () => {
    const clock = manualClock();
    const limiter = new Limiter({
      redis: bridgeRedis(),
      prefix: uniquePrefix("vercel-custom"),
      rules: { hourly: gcra({ limit: 3, period: "1h", burst: 3 }) },
      overrides: true,
      clock,
      timeout: 15_000, // not about timeouts: a slow machine must not make a decision fail open
    });
    const middleware = createMiddleware({ limiter });
    for (const ip of ["203.0.113.7", "2001:db8::1"]) {
      clock.set(T0);
      // the identifier the middleware counts: an IPv6 client per /64
      const identifier = clientIp(new Request("https://app.example", { headers: { "x-real-ip": ip } }))!;
      await limiter.overrides.set(identifier, { rules: { hourly: { limit: 6, burst: 6 } } });
      const seen: string[] = [];
      for (let i = 0; i < 9; i++) {
        clock.set(T0 + i);
        const response = await middleware(
          new Request("https://app.example/api", { headers: { "x-real-ip": ip } }),
        );
        seen.push(`${response!.status} ${response!.headers.get("ratelimit-policy")}`);
      }
      const policy = '"hourly";q=6;w=3600';
      expect(seen).toEqual([...Array(6).fill(`200 ${policy}`), ...Array(3).fill(`429 ${policy}`)]);
    }
  });
});
