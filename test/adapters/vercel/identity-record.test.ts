// The Vercel middleware's key answering a record, inside edge-runtime on the real bridge: every
// identifier decided in one call, all or nothing; a field missing answers 401 and charges none.
import { describe, expect, it } from "vitest";
import { clientIp, createMiddleware } from "../../../src/adapters/vercel/index.js";
import { fixedWindow, Limiter } from "../../../src/index.js";
import { bridgeRedis, manualClock, uniquePrefix } from "../../support.js";

function setup() {
  const options = {
    redis: bridgeRedis(),
    prefix: uniquePrefix("vercel-record"),
    rules: {
      perUser: fixedWindow({ limit: 2, window: "1h", by: "user" }),
      perIp: fixedWindow({ limit: 3, window: "1h", by: "ip" }),
    },
    clock: manualClock(),
    timeout: 15_000,
  };
  const limiter = new Limiter(options);
  // peeks through a Limiter of its own, without a deny cache: every rule's count read from Redis
  const peeker = new Limiter({ ...options, denyCache: false });
  const middleware = createMiddleware({
    limiter,
    key: (request) => ({ user: request.headers.get("x-user") ?? undefined, ip: clientIp(request) }),
  });
  const call = (user: string | undefined, ip: string) =>
    middleware(
      new Request("https://app.example/api", {
        headers: { "x-real-ip": ip, ...(user === undefined ? {} : { "x-user": user }) },
      }),
    );
  const left = async (user: string, ip: string) => {
    const d = await peeker.limit({ user, ip }, { cost: 0 });
    return Object.fromEntries(Object.entries(d.rules).map(([name, rule]) => [name, rule.remaining]));
  };
  return { call, left };
}

describe("vercel createMiddleware with a record key", () => {
  it("counts the user and the address each by its rule; a denial charges neither", async () => {
    const { call, left } = setup();
    expect((await call("u1", "203.0.113.7"))!.status).toBe(200);
    expect((await call("u1", "203.0.113.7"))!.status).toBe(200);
    const byUser = await call("u1", "203.0.113.7");
    expect(byUser!.status).toBe(429);
    expect(byUser!.headers.get("ratelimit")).toMatch(/^"perUser";r=0;/);
    expect(await left("u1", "203.0.113.7")).toEqual({ perUser: 0, perIp: 1 });
    expect((await call("u2", "203.0.113.7"))!.status).toBe(200);
    const byIp = await call("u2", "203.0.113.7");
    expect(byIp!.status).toBe(429);
    expect(byIp!.headers.get("ratelimit")).toMatch(/^"perIp";r=0;/);
    expect(await left("u2", "203.0.113.7")).toEqual({ perUser: 1, perIp: 0 });
  });

  it("a record with a field missing answers 401 and charges nothing", async () => {
    const { call, left } = setup();
    expect((await call(undefined, "203.0.113.7"))!.status).toBe(401);
    expect((await call("u1", "not-an-ip"))!.status).toBe(401);
    expect(await left("u1", "203.0.113.7")).toEqual({ perUser: 2, perIp: 3 });
  });
});
