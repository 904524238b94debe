// The Worker under a custom override set through the admin API, on an IP route: the cached denial
// states the override's quota, never a 500 (the decision carries its rules). IPv4 and IPv6 clients.
import { describe, expect, test } from "vitest";
import { call, config, envFor } from "./support.js";

const TOKEN = "test-admin-token-0123456789";

describe("a custom override through the Worker", () => {
  test("6 × 200, then 429s stating the override's quota, for an IPv4 and an IPv6 client", async () => {
    const route = {
      name: "api",
      match: { path: "/api/*" },
      key: "ip",
      rules: { hourly: { algorithm: "gcra", limit: 3, period: "1h", burst: 3 } },
      overrides: true,
    };
    const env = envFor(config([route]), { EDGELIMIT_ADMIN_TOKEN: TOKEN });
    for (const ip of ["203.0.113.9", "2001:db8:1::7"]) {
      const put = await call(env, `/_edgelimit/overrides/api?key=${encodeURIComponent(ip)}`, {
        method: "PUT",
        headers: { Authorization: `Bearer ${TOKEN}`, "Content-Type": "application/json" },
        body: JSON.stringify({ rules: { hourly: { limit: 6, burst: 6 } } }),
      });
      expect(put.status).toBe(200);
      const seen: string[] = [];
      for (let i = 0; i < 9; i++) {
        const response = await call(env, "/api/x", { ip });
        await response.arrayBuffer();
        seen.push(`${response.status} ${response.headers.get("ratelimit-policy")}`);
      }
      const policy = '"hourly";q=6;w=3600';
      expect(seen).toEqual([...Array(6).fill(`200 ${policy}`), ...Array(3).fill(`429 ${policy}`)]);
    }
  });
});
