// The Worker's regional databases, inside workerd: each token read from the secret its tokenSecret
// names (a missing one named in the log, its value never), and the region of a request taken from
// request.cf, with home deciding alone where a route keeps no pool. The regional database here is the
// test bridge itself (as home is): which Limiter decided shows in whether a pool key was written.
import { Redis } from "@upstash/redis/cloudflare";
import { describe, expect, inject, test, vi } from "vitest";
import { call, config, envFor, limitHeaders } from "./support.js";

const perHour = { perHour: { algorithm: "fixedWindow", limit: 5, window: "1h" } };
const regions = (url: string) => ({
  pool: { max: 50, ttl: "5s" },
  default: "eu",
  databases: {
    eu: { url, tokenSecret: "EDGELIMIT_REGION_EU_TOKEN", match: { continent: ["EU"] } },
    ap: { url, tokenSecret: "EDGELIMIT_REGION_AP_TOKEN", match: { colo: ["SIN", "NRT"] } },
  },
});

describe("regional databases in the Worker", () => {
  test("a missing regional secret is named with the command that sets it; no token is logged", async () => {
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    const env = envFor(
      config([{ name: "api", key: "ip", rules: perHour }], { regions: regions(inject("bridgeUrl")) }),
      {
        EDGELIMIT_REGION_EU_TOKEN: "eu-secret-value",
      },
    );
    const response = await call(env, "/api/x");
    expect(response.status).toBe(500);
    expect(await response.text()).toBe("edgelimit is misconfigured");
    const logged = String(error.mock.calls[0]?.[0]);
    expect(logged).toBe(
      "edgelimit is misconfigured:\n" +
        "  EDGELIMIT_REGION_AP_TOKEN is not set (regions.databases.ap.tokenSecret): npx wrangler secret put EDGELIMIT_REGION_AP_TOKEN",
    );
    expect(logged).not.toContain("eu-secret-value");
    error.mockRestore();
  });

  test("a route with pool false is decided at home alone, one count for every region", async () => {
    const bridge = inject("bridgeUrl");
    const token = inject("bridgeToken");
    const env = envFor(
      config([{ name: "api", key: "ip", rules: perHour, pool: false }], { regions: regions(bridge) }),
      { EDGELIMIT_REGION_EU_TOKEN: token, EDGELIMIT_REGION_AP_TOKEN: token },
    );
    const places = [{ continent: "EU", colo: "FRA" }, { continent: "AS", colo: "SIN" }, undefined];
    const remaining: string[] = [];
    for (let i = 0; i < 6; i++) {
      const cf = places[i % places.length];
      const response = await call(env, "/api/x", cf === undefined ? {} : ({ cf } as RequestInit));
      await response.arrayBuffer();
      remaining.push(`${response.status} ${limitHeaders(response).ratelimit?.replace(/;t=\d+$/, "")}`);
    }
    expect(remaining).toEqual([
      '200 "perHour";r=4',
      '200 "perHour";r=3',
      '200 "perHour";r=2',
      '200 "perHour";r=1',
      '200 "perHour";r=0',
      '429 "perHour";r=0',
    ]);
  });

  test("a request's region is its colo's, else its continent's, else the default's; pools only there", async () => {
    const bridge = inject("bridgeUrl");
    const token = inject("bridgeToken");
    const redis = new Redis({ url: bridge, token, enableTelemetry: false });
    const route = { name: "api", key: "header:x-api-key", rules: perHour };
    const setups = [
      { regions: { ...regions(bridge), default: undefined } },
      { regions: regions(bridge) },
    ].map(({ regions }) => {
      const document = config([route], { regions });
      return {
        prefix: document.prefix as string,
        env: envFor(document, { EDGELIMIT_REGION_EU_TOKEN: token, EDGELIMIT_REGION_AP_TOKEN: token }),
      };
    });
    const pools = async (prefix: string) => (await redis.keys(`${prefix}:*pool*`)).length;
    const [noDefault, withDefault] = setups as [(typeof setups)[0], (typeof setups)[0]];
    // North America, no default: home alone, no pool anywhere
    const home = await call(noDefault.env, "/api/x", {
      headers: { "x-api-key": "k1" },
      cf: { continent: "NA", colo: "IAD" },
    } as RequestInit);
    await home.arrayBuffer();
    expect(home.status).toBe(200);
    expect(await pools(noDefault.prefix)).toBe(0);
    // a colo claimed by "ap" inside a continent claimed by "eu", and a continent claimed by "eu": a pool each
    for (const [key, cf] of [
      ["k2", { continent: "EU", colo: "NRT" }],
      ["k3", { continent: "EU", colo: "FRA" }],
    ] as const) {
      const response = await call(noDefault.env, "/api/x", {
        headers: { "x-api-key": key },
        cf,
      } as RequestInit);
      await response.arrayBuffer();
      expect(response.status).toBe(200);
    }
    expect(await pools(noDefault.prefix)).toBe(2);
    // with a default, North America asks the default's pool
    const byDefault = await call(withDefault.env, "/api/x", {
      headers: { "x-api-key": "k1" },
      cf: { continent: "NA", colo: "IAD" },
    } as RequestInit);
    await byDefault.arrayBuffer();
    expect(byDefault.status).toBe(200);
    expect(await pools(withDefault.prefix)).toBe(1);
  });
});
