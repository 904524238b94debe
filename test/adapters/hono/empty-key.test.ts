import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import { rateLimit } from "../../../src/adapters/hono/index.js";
import { fixedWindow, Limiter } from "../../../src/index.js";
import { bridgeRedis, manualClock, uniquePrefix } from "../../support.js";

// A header sent empty (`x-api-key:`) is no key: it answers 401, never a bucket shared by every caller
// who sends it empty (the Limiter itself refuses "" as an identifier).
describe("hono rateLimit with an empty key", () => {
  it("answers 401 and consumes nothing, like a missing key", async () => {
    const limiter = new Limiter({
      redis: bridgeRedis(),
      prefix: uniquePrefix("hono-empty"),
      rules: { hourly: fixedWindow({ limit: 5, window: "1h" }) },
      clock: manualClock(),
    });
    const app = new Hono();
    app.use("/api/*", rateLimit({ limiter, key: (c) => c.req.header("x-api-key") }));
    app.get("/api/x", (c) => c.text("ok"));

    const empty = await app.request("/api/x", { headers: { "x-api-key": "" } });
    expect(empty.status).toBe(401);
    expect(empty.headers.get("content-type")).toBe("application/problem+json");
    const keyed = await app.request("/api/x", { headers: { "x-api-key": "k1" } });
    expect(keyed.status).toBe(200);
    expect(keyed.headers.get("ratelimit")).toBe('"hourly";r=4;t=2760');
  });
});
