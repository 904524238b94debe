// The Hono middleware's key answering a record: one decision over every identifier it names (the API
// key, the client address, one global), all or nothing, on the real bridge. A record with a field
// missing is no key: 401, nothing charged on any identifier.
import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import { type RateLimitVariables, rateLimit } from "../../../src/adapters/hono/index.js";
import { fixedWindow, Limiter } from "../../../src/index.js";
import { bridgeRedis, manualClock, uniquePrefix } from "../../support.js";

function setup() {
  const options = {
    redis: bridgeRedis(),
    prefix: uniquePrefix("hono-record"),
    rules: {
      perKey: fixedWindow({ limit: 3, window: "1h", by: "key" }),
      perIp: fixedWindow({ limit: 5, window: "1h", by: "ip" }),
      global: fixedWindow({ limit: 7, window: "1h", by: "global" }),
    },
    clock: manualClock(),
    timeout: 15_000,
  };
  const limiter = new Limiter(options);
  // peeks through a Limiter of its own, without a deny cache: every rule's count read from Redis
  const peeker = new Limiter({ ...options, denyCache: false });
  const app = new Hono<{ Variables: RateLimitVariables }>();
  app.use(
    "/api/*",
    rateLimit({
      limiter,
      key: (c) => ({ key: c.req.header("x-api-key"), ip: c.req.header("x-client"), global: "all" }),
    }),
  );
  app.get("/api/x", (c) => c.json({ rule: c.get("rateLimit").rule }));
  const send = (key: string | undefined, ip: string) =>
    app.request("/api/x", {
      headers: { "x-client": ip, ...(key === undefined ? {} : { "x-api-key": key }) },
    });
  /** Units left on each rule for `key` from `ip`, read with a peek (cost 0: nothing charged). */
  const left = async (key: string, ip: string) => {
    const d = await peeker.limit({ key, ip, global: "all" }, { cost: 0 });
    return Object.fromEntries(Object.entries(d.rules).map(([name, rule]) => [name, rule.remaining]));
  };
  return { send, left };
}

describe("hono rateLimit with a record key", () => {
  it("counts each identifier by its rule, and a denial charges none of them", async () => {
    const { send, left } = setup();
    // k1 from A: 3 admitted, the 4th refused by perKey
    for (let i = 0; i < 3; i++) expect((await send("k1", "A")).status).toBe(200);
    const byKey = await send("k1", "A");
    expect(byKey.status).toBe(429);
    expect(byKey.headers.get("ratelimit")).toMatch(/^"perKey";r=0;/);
    expect(await left("k1", "A")).toEqual({ perKey: 0, perIp: 2, global: 4 });
    // k2 from A: 2 admitted (A has 5), the 3rd refused by perIp, k2 and global untouched by it
    for (let i = 0; i < 2; i++) expect((await send("k2", "A")).status).toBe(200);
    const byIp = await send("k2", "A");
    expect(byIp.status).toBe(429);
    expect(byIp.headers.get("ratelimit")).toMatch(/^"perIp";r=0;/);
    expect(await left("k2", "A")).toEqual({ perKey: 1, perIp: 0, global: 2 });
    // k3 from B: 2 admitted (7 in all), the 3rd refused by global
    for (let i = 0; i < 2; i++) expect((await send("k3", "B")).status).toBe(200);
    const byGlobal = await send("k3", "B");
    expect(byGlobal.status).toBe(429);
    expect(byGlobal.headers.get("ratelimit")).toMatch(/^"global";r=0;/);
    expect(await left("k3", "B")).toEqual({ perKey: 1, perIp: 3, global: 0 });
  });

  it("a record with a field missing or empty answers 401 and charges no identifier", async () => {
    const { send, left } = setup();
    expect((await send(undefined, "A")).status).toBe(401);
    expect((await send("", "A")).status).toBe(401);
    expect((await send("k1", "")).status).toBe(401);
    expect(await left("k1", "A")).toEqual({ perKey: 3, perIp: 5, global: 7 });
  });
});
