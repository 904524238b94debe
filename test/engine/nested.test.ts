// Budgets that nest: rules keyed by several identifiers (a rule's `by`), decided together, all or
// nothing, in one EVALSHA. Exact counts for users in orgs under a global limit, what a denial at each
// level leaves charged (nothing), a missing field, the deny cache on a shared identifier, settle,
// overrides per identifier, leases, and the requests and commands a decision costs (a server and
// bridge of this file's own, whose counters no other file disturbs).
import { describe, expect, it } from "vitest";
import { fixedWindow, gcra, Limiter, type LimiterOptions } from "../../src/index.js";
import { privateRedis } from "../own-bridge.js";
import { manualClock, sharedBridge, T0, uniquePrefix } from "../support.js";
import { expectWithin, nestedLoad } from "./nested-load.js";

const own = privateRedis();

const rules = {
  perUser: gcra({ limit: 10, period: "1m", by: "user" }),
  perOrg: fixedWindow({ limit: 25, window: "1h", by: "org" }),
  global: gcra({ limit: 40, period: "1m", by: "global" }),
};

function nested(options: Partial<LimiterOptions> = {}) {
  const clock = manualClock();
  const limiter = new Limiter({
    redis: own.redis,
    prefix: uniquePrefix("nested"),
    rules,
    denyCache: false,
    clock,
    ...options,
  });
  return { limiter, clock };
}

const who = (user: string, org: string) => ({ user, org, global: "all" });

/** How many EVALSHA and HTTP requests `run` costs, read from the server's and the bridge's counters. */
async function costOf(run: () => Promise<unknown>): Promise<{ evalsha: number; requests: number }> {
  const calls = async () => {
    const info = String(await own.conn.call("INFO", "commandstats"));
    return Number(/cmdstat_evalsha:calls=(\d+)/.exec(info)?.[1] ?? 0);
  };
  const beforeCalls = await calls();
  const beforeRequests = own.bridge.stats.requests;
  await run();
  return { evalsha: (await calls()) - beforeCalls, requests: own.bridge.stats.requests - beforeRequests };
}

describe("rules keyed by several identifiers", () => {
  it("counts users in orgs under a global limit exactly: each level binds in turn", async () => {
    const { limiter } = nested();
    // u1 alone: its own 10, then perUser binds
    for (let i = 0; i < 10; i++) expect((await limiter.limit(who("u1", "acme"))).allowed).toBe(true);
    const user = await limiter.limit(who("u1", "acme"));
    expect(user).toMatchObject({ allowed: false, rule: "perUser", remaining: 0, retryAfter: 6000 });
    expect(user.rules.perOrg).toMatchObject({ allowed: true, remaining: 15 });
    expect(user.rules.global).toMatchObject({ allowed: true, remaining: 30 });
    // u2 and u3 in acme: 15 more, then the org's 25 bind
    for (let i = 0; i < 10; i++) expect((await limiter.limit(who("u2", "acme"))).allowed).toBe(true);
    for (let i = 0; i < 5; i++) expect((await limiter.limit(who("u3", "acme"))).allowed).toBe(true);
    const org = await limiter.limit(who("u3", "acme"));
    expect(org).toMatchObject({ allowed: false, rule: "perOrg", remaining: 0 });
    expect(org.rules.perUser).toMatchObject({ allowed: true, remaining: 5 });
    // another org: 15 more, then the global 40 bind
    for (let i = 0; i < 10; i++) expect((await limiter.limit(who("v1", "globex"))).allowed).toBe(true);
    for (let i = 0; i < 5; i++) expect((await limiter.limit(who("v2", "globex"))).allowed).toBe(true);
    const global = await limiter.limit(who("v2", "globex"));
    expect(global).toMatchObject({ allowed: false, rule: "global", remaining: 0, retryAfter: 1500 });
    expect(global.rules.perOrg).toMatchObject({ allowed: true, remaining: 10 });
  });

  it("charges nothing when any level denies: read back with peeks", async () => {
    const { limiter } = nested();
    const peek = async (user: string, org: string) => {
      const d = await limiter.limit(who(user, org), { cost: 0 });
      return [d.rules.perUser!.remaining, d.rules.perOrg!.remaining, d.rules.global!.remaining];
    };
    // the user level denies a cost of 11 (its burst is 10): nothing charged anywhere
    expect((await limiter.limit(who("u1", "acme"), { cost: 11 })).rule).toBe("perUser");
    expect(await peek("u1", "acme")).toEqual([10, 25, 40]);
    // fill acme to 24 with three users; then a cost of 2 is denied by the org alone
    await limiter.limit(who("u1", "acme"), { cost: 10 });
    await limiter.limit(who("u2", "acme"), { cost: 10 });
    await limiter.limit(who("u3", "acme"), { cost: 4 });
    const denied = await limiter.limit(who("u3", "acme"), { cost: 2 });
    expect(denied).toMatchObject({ allowed: false, rule: "perOrg" });
    expect(await peek("u3", "acme")).toEqual([6, 1, 16]);
    // the global level denies: 16 left globally, a cost of 10 by a fresh org passes, 7 more does not
    await limiter.limit(who("v1", "globex"), { cost: 10 });
    expect((await limiter.limit(who("v2", "globex"), { cost: 7 })).rule).toBe("global");
    expect(await peek("v2", "globex")).toEqual([10, 15, 6]);
  });

  it("decides in one HTTP request and one EVALSHA, however many identifiers", async () => {
    const { limiter } = nested();
    // the first call of a script loads it (NOSCRIPT, then EVAL): count from the next
    await limiter.limit(who("u0", "acme"));
    expect(await costOf(() => limiter.limit(who("u1", "acme")))).toEqual({ evalsha: 1, requests: 1 });
    expect(await costOf(() => limiter.limit(who("u1", "acme"), { cost: 100 }))).toEqual({
      evalsha: 1,
      requests: 1,
    });
    const keys = limiter.keys(who("u1", "acme"));
    expect(keys.map((key) => key.slice(key.indexOf(":{")))).toEqual([
      ":{user=u1}:perUser:gcra",
      `:{org=acme}:perOrg:fixedWindow:${Math.floor(T0 / 3_600_000)}`,
      ":{global=all}:global:gcra",
    ]);
  });

  it("refuses a record missing a field a rule needs, naming it, and charges nothing", async () => {
    const { limiter } = nested();
    expect(() => limiter.limit({ user: "u1", global: "all" })).toThrow(
      'identifier.org: missing; rule "perOrg" is keyed by it (by: "org"), so limit() takes a record such as { user: "...", org: "...", global: "..." }',
    );
    expect(() => limiter.limit("u1")).toThrow(/^identifier\.user: missing/);
    expect(() => limiter.limit({ user: "u1", org: "", global: "all" })).toThrow(
      /^identifier\.org: must not be empty/,
    );
    expect(() => limiter.limit({ user: "u1", org: 7 as unknown as string, global: "all" })).toThrow(
      "identifier.org: expected a string, got 7",
    );
    const d = await limiter.limit(who("u1", "acme"), { cost: 0 });
    expect([d.rules.perUser!.remaining, d.rules.perOrg!.remaining, d.rules.global!.remaining]).toEqual([
      10, 25, 40,
    ]);
    // a field the record only inherits is missing
    const inherited = new Limiter({
      redis: own.redis,
      rules: { r: gcra({ limit: 1, period: "1s", by: "toString" }) },
    });
    expect(() => inherited.limit({})).toThrow(/^identifier\.toString: missing/);
  });

  it("answers every user from the deny cache once the global limit is spent, until its retry moment", async () => {
    const { limiter, clock } = nested({ denyCache: { maxEntries: 100 } });
    for (let i = 0; i < 4; i++) await limiter.limit(who(`u${i}`, `org${i}`), { cost: 10 });
    const first = await limiter.limit(who("u9", "org9"));
    expect(first).toMatchObject({ allowed: false, rule: "global", source: "redis", retryAfter: 1500 });
    // another user in another org: answered here, with no request
    const cost = await costOf(async () => {
      const cached = await limiter.limit(who("u8", "org8"));
      expect(cached).toMatchObject({ allowed: false, rule: "global", source: "cache", retryAfter: 1500 });
    });
    expect(cost).toEqual({ evalsha: 0, requests: 0 });
    clock.set(T0 + 1000);
    expect(await limiter.limit(who("u7", "org7"))).toMatchObject({ source: "cache", retryAfter: 500 });
    // at the retry moment Redis is asked again, and admits
    clock.set(T0 + 1500);
    expect(await limiter.limit(who("u7", "org7"))).toMatchObject({ allowed: true, source: "redis" });
  });

  it("settles each rule back exactly what it charged", async () => {
    const { limiter } = nested();
    const d = await limiter.limit(who("u1", "acme"), { cost: 8 });
    expect(d.allowed).toBe(true);
    expect(await limiter.settle(d, 3)).toEqual({ difference: -5, via: "redis" });
    const peek = await limiter.limit(who("u1", "acme"), { cost: 0 });
    expect([
      peek.rules.perUser!.remaining,
      peek.rules.perOrg!.remaining,
      peek.rules.global!.remaining,
    ]).toEqual([7, 22, 37]);
    const more = await limiter.limit(who("u2", "acme"), { cost: 2 });
    expect(await limiter.settle(more, 6)).toEqual({ difference: 4, via: "redis" });
    const after = await limiter.limit(who("u2", "acme"), { cost: 0 });
    expect([
      after.rules.perUser!.remaining,
      after.rules.perOrg!.remaining,
      after.rules.global!.remaining,
    ]).toEqual([4, 16, 31]);
  });

  it("stores an override per identifier value, changing only the rules keyed by its field", async () => {
    const { limiter } = nested({ overrides: true });
    await limiter.overrides.set({ org: "acme" }, { rules: { perOrg: { limit: 30 } } });
    expect(await limiter.overrides.get({ org: "acme" })).toEqual({ rules: { perOrg: { limit: 30 } } });
    // acme: 30 for the org, spread over three users of 10; globex keeps 25
    for (const user of ["u1", "u2", "u3"]) await limiter.limit(who(user, "acme"), { cost: 10 });
    const acme = await limiter.limit(who("u4", "acme"));
    expect(acme).toMatchObject({ allowed: false, rule: "perOrg", plan: "custom", limit: 30 });
    expect(acme.rules.perUser).toMatchObject({ allowed: true, limit: 10, remaining: 10 });
    await limiter.limit(who("v1", "globex"), { cost: 4 });
    const globex = await limiter.limit(who("v2", "globex"), { cost: 0 });
    expect(globex).toMatchObject({ plan: "default" });
    expect(globex.rules.perOrg).toMatchObject({ limit: 25, remaining: 21 });
    // a user's own override and the org's apply together
    await limiter.overrides.set({ user: "v2" }, { rules: { perUser: { limit: 3 } } });
    const both = await limiter.limit(who("v2", "globex"), { cost: 0 });
    expect(both.rules.perUser).toMatchObject({ limit: 3, remaining: 3 });
    expect(both.rules.perOrg).toMatchObject({ limit: 25, remaining: 21 });
    await expect(
      limiter.overrides.set({ org: "acme" }, { rules: { perUser: { limit: 1 } } }),
    ).rejects.toThrow(
      'rules.perUser: keyed by "user", not "org": an override of { org: ... } changes only the rules keyed by org',
    );
    await expect(limiter.overrides.set({ team: "x" }, { rules: { perOrg: { limit: 1 } } })).rejects.toThrow(
      "identifier.team: no rule is keyed by it; the rules are keyed by user, org, global",
    );
    await expect(limiter.overrides.set({ org: "a", user: "b" }, { rules: {} })).rejects.toThrow(
      "identifier: name exactly one field (the rules are keyed by user, org, global), got org, user",
    );
    const listed = [];
    for await (const entry of limiter.overrides.list({ by: "org" })) listed.push(entry);
    expect(listed).toEqual([{ identifier: "acme", override: { rules: { perOrg: { limit: 30 } } } }]);
    await limiter.overrides.delete({ org: "acme" });
    expect(await limiter.overrides.get({ org: "acme" })).toBeUndefined();
  });

  it("resets one identifier in one field: only the rules keyed by it", async () => {
    const { limiter } = nested();
    await limiter.limit(who("u1", "acme"), { cost: 5 });
    await limiter.reset({ org: "acme" });
    const d = await limiter.limit(who("u1", "acme"), { cost: 0 });
    expect([d.rules.perUser!.remaining, d.rules.perOrg!.remaining, d.rules.global!.remaining]).toEqual([
      5, 25, 35,
    ]);
    await limiter.reset(who("u1", "acme"));
    const e = await limiter.limit(who("u1", "acme"), { cost: 0 });
    expect([e.rules.perUser!.remaining, e.rules.perOrg!.remaining, e.rules.global!.remaining]).toEqual([
      10, 25, 40,
    ]);
  });

  it("names each decision to onDecision and analytics by its binding rule's identifier", async () => {
    const seen: string[] = [];
    const { limiter } = nested({
      analytics: true,
      onDecision: (d, identifier) => seen.push(`${d.rule} ${identifier}`),
    });
    await limiter.limit(who("u1", "acme"), { cost: 10 }); // perUser binds: 0 left
    await limiter.limit(who("u2", "acme"), { cost: 10 });
    await limiter.limit(who("u3", "acme"), { cost: 6 }); // denied by perOrg (5 left)
    await limiter.limit(who("u/é {x}", "acme"), { cost: 1 });
    expect(seen).toEqual(["perUser user=u1", "perUser user=u2", "perOrg org=acme", "perOrg org=acme"]);
    await limiter.analytics.flush();
    const report = await limiter.analytics.report();
    // the most denied identifiers: acme, by the rule that denied it
    expect(report.top).toEqual([{ identifier: "org=acme", denied: 1, allowed: 1 }]);
    await limiter.dispose();
  });

  it("keeps a string identifier for rules keyed by id beside the others", async () => {
    const clock = manualClock();
    const limiter = new Limiter({
      redis: own.redis,
      prefix: uniquePrefix("nested"),
      rules: {
        perKey: gcra({ limit: 5, period: "1m" }),
        global: gcra({ limit: 7, period: "1m", by: "global" }),
      },
      denyCache: false,
      clock,
    });
    for (let i = 0; i < 5; i++) expect((await limiter.limit({ id: "k1", global: "all" })).allowed).toBe(true);
    expect(await limiter.limit({ id: "k1", global: "all" })).toMatchObject({
      allowed: false,
      rule: "perKey",
    });
    expect((await limiter.limit({ id: "k2", global: "all" }, { cost: 2 })).allowed).toBe(true);
    expect(await limiter.limit({ id: "k3", global: "all" })).toMatchObject({
      allowed: false,
      rule: "global",
    });
    expect(limiter.keys({ id: "k1", global: "all" })[0]!.endsWith(":{=k1}:perKey:gcra")).toBe(true);
  });

  it.each([
    ["without leases", {}],
    ["with leases", { lease: { max: 5, ttl: "1s" } }],
    // the region's database: the shared server's bridge (the pools there, the rule keys here)
    ["with a regional pool", { region: { redis: sharedBridge(), pool: { max: 6, ttl: "5s" } } }],
    [
      "with a regional pool and leases",
      { lease: { max: 5, ttl: "1s" }, region: { redis: sharedBridge(), pool: { max: 6, ttl: "5s" } } },
    ],
  ])(
    "holds 4 instances × 64 callers with random costs within every identifier's limit, %s",
    async (_, options) => {
      expectWithin(await nestedLoad(own.redis, options));
    },
  );
});
