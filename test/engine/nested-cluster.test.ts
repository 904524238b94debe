// Budgets that nest on a 3-node Redis Cluster, behind a REST endpoint that routes each command as a
// cluster client does: the identifiers' keys live in different slots, so a Limiter with
// `cluster: true` decides one script call per field, in one request, and gives back what the other
// fields took when one denies. Exact counts, all or nothing read back with peeks, what a decision
// costs, 4 instances × 64 callers never over, the deny cache, settle and overrides per identifier.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fixedWindow, gcra, Limiter, type LimiterOptions } from "../../src/index.js";
import { type Cluster, type ClusterRest, clusterRest, startCluster } from "../cluster.js";
import { manualClock, uniquePrefix } from "../support.js";
import { expectWithin, nestedLoad } from "./nested-load.js";

let cluster: Cluster;
let rest: ClusterRest;
beforeAll(async () => {
  cluster = await startCluster();
  rest = await clusterRest(cluster);
}, 30_000);
afterAll(async () => {
  await rest?.close();
  await cluster?.stop();
});

const rules = {
  perUser: gcra({ limit: 10, period: "1m", by: "user" }),
  perOrg: fixedWindow({ limit: 25, window: "1h", by: "org" }),
  global: gcra({ limit: 40, period: "1m", by: "global" }),
};
const who = (user: string, org: string) => ({ user, org, global: "all" });

function nested(options: Partial<LimiterOptions> = {}) {
  const clock = manualClock();
  const limiter = new Limiter({
    redis: { url: rest.url, token: rest.token },
    prefix: uniquePrefix("nested-cluster"),
    rules,
    denyCache: false,
    cluster: true,
    clock,
    ...options,
  });
  return { limiter, clock };
}

const remaining = async (limiter: Limiter, user: string, org: string) => {
  const d = await limiter.limit(who(user, org), { cost: 0 });
  return [d.rules.perUser!.remaining, d.rules.perOrg!.remaining, d.rules.global!.remaining];
};

/** What `run` costs the REST endpoint: requests, and script calls by command. */
async function costOf(run: () => Promise<unknown>) {
  const before = { requests: rest.requests, evalsha: rest.commands.get("EVALSHA") ?? 0 };
  await run();
  return {
    requests: rest.requests - before.requests,
    evalsha: (rest.commands.get("EVALSHA") ?? 0) - before.evalsha,
  };
}

describe("rules keyed by several identifiers on Redis Cluster", () => {
  it("refuses a decision across slots without cluster: true (CROSSSLOT), and decides with it", async () => {
    const plain = new Limiter({
      redis: { url: rest.url, token: rest.token },
      prefix: uniquePrefix("nested-cluster"),
      rules,
      onError: "deny",
      clock: manualClock(),
    });
    const refused = await plain.limit(who("u1", "acme"));
    expect(refused.source).toBe("error");
    expect(String(refused.error?.message)).toMatch(/CROSSSLOT/);
    const { limiter } = nested();
    expect(await limiter.limit(who("u1", "acme"))).toMatchObject({
      allowed: true,
      source: "redis",
      remaining: 9,
    });
  });

  it("counts users in orgs under a global limit exactly, all or nothing at each level", async () => {
    const { limiter } = nested();
    for (let i = 0; i < 10; i++) expect((await limiter.limit(who("u1", "acme"))).allowed).toBe(true);
    expect(await limiter.limit(who("u1", "acme"))).toMatchObject({
      allowed: false,
      rule: "perUser",
      retryAfter: 6000,
    });
    // the user denied: the org and the global limit keep what they had
    expect(await remaining(limiter, "u1", "acme")).toEqual([0, 15, 30]);
    await limiter.limit(who("u2", "acme"), { cost: 10 });
    await limiter.limit(who("u3", "acme"), { cost: 4 });
    // the org denies a cost of 2: the user and the global limit took it, and gave it back
    expect(await limiter.limit(who("u3", "acme"), { cost: 2 })).toMatchObject({
      allowed: false,
      rule: "perOrg",
    });
    expect(await remaining(limiter, "u3", "acme")).toEqual([6, 1, 16]);
    await limiter.limit(who("v1", "globex"), { cost: 10 });
    const global = await limiter.limit(who("v2", "globex"), { cost: 7 });
    expect(global).toMatchObject({ allowed: false, rule: "global", retryAfter: 1500 });
    expect(global.rules.perUser).toMatchObject({ allowed: true, remaining: 10 });
    expect(await remaining(limiter, "v2", "globex")).toEqual([10, 15, 6]);
  });

  it("costs one request of one call per field; a denial one request more, the refunds", async () => {
    const { limiter } = nested();
    await limiter.limit(who("u0", "acme")); // loads the scripts on the nodes
    expect(await costOf(() => limiter.limit(who("u1", "acme")))).toEqual({ requests: 1, evalsha: 3 });
    await limiter.limit(who("u2", "acme"), { cost: 10 });
    // u2 denied by perUser: perOrg and global admitted, and are refunded (2 calls, one request)
    expect(await costOf(() => limiter.limit(who("u2", "acme")))).toEqual({ requests: 2, evalsha: 5 });
  });

  it("holds 4 instances × 64 callers with random costs within every identifier's limit", async () => {
    expectWithin(await nestedLoad({ url: rest.url, token: rest.token }, { cluster: true }));
  });

  it("holds them with leases too", async () => {
    expectWithin(
      await nestedLoad({ url: rest.url, token: rest.token }, { cluster: true, lease: { max: 5, ttl: "1s" } }),
    );
  });

  it("answers other users from the deny cache once the global limit is spent", async () => {
    const { limiter } = nested({ denyCache: { maxEntries: 100 } });
    for (let i = 0; i < 4; i++) await limiter.limit(who(`u${i}`, `org${i}`), { cost: 10 });
    expect(await limiter.limit(who("u9", "org9"))).toMatchObject({
      allowed: false,
      rule: "global",
      source: "redis",
    });
    const cost = await costOf(async () => {
      expect(await limiter.limit(who("u8", "org8"))).toMatchObject({
        source: "cache",
        rule: "global",
        retryAfter: 1500,
      });
    });
    expect(cost).toEqual({ requests: 0, evalsha: 0 });
  });

  it("settles each rule back exactly what it charged", async () => {
    const { limiter } = nested();
    const d = await limiter.limit(who("u1", "acme"), { cost: 8 });
    expect(await limiter.settle(d, 3)).toEqual({ difference: -5, via: "redis" });
    expect(await remaining(limiter, "u1", "acme")).toEqual([7, 22, 37]);
    const more = await limiter.limit(who("u2", "acme"), { cost: 2 });
    expect(await limiter.settle(more, 6)).toEqual({ difference: 4, via: "redis" });
    expect(await remaining(limiter, "u2", "acme")).toEqual([4, 16, 31]);
  });

  it("applies an override per org to the org's rules only", async () => {
    const { limiter } = nested({ overrides: true });
    await limiter.overrides.set({ org: "acme" }, { rules: { perOrg: { limit: 30 } } });
    for (const user of ["u1", "u2", "u3"]) await limiter.limit(who(user, "acme"), { cost: 10 });
    const acme = await limiter.limit(who("u4", "acme"));
    expect(acme).toMatchObject({ allowed: false, rule: "perOrg", plan: "custom", limit: 30 });
    expect(await remaining(limiter, "u4", "acme")).toEqual([10, 0, 10]);
    const globex = await limiter.limit(who("v1", "globex"), { cost: 0 });
    expect(globex.rules.perOrg).toMatchObject({ limit: 25, remaining: 25 });
    expect(globex.plan).toBe("default");
  });

  it("resets across slots", async () => {
    const { limiter } = nested();
    await limiter.limit(who("u1", "acme"), { cost: 5 });
    await limiter.reset(who("u1", "acme"));
    expect(await remaining(limiter, "u1", "acme")).toEqual([10, 25, 40]);
  });
});
