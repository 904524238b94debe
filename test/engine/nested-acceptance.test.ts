// Nested budgets as a user meets them: the issue's literal rules, a client built as a user builds it
// (`new Redis({ url, token })`, every option left at its default) in front of a redis-server of this
// file's own (whose command counters no other file disturbs), the deny cache on unless a test says
// otherwise. Exact counts for users in orgs under a global limit, all or nothing at each level, one
// request and one EVALSHA per decision (overrides and plans on too), the load never over on any
// identifier, a missing field, the deny cache on `global`, settle, an override per org, leases; then
// nested identifiers where they meet the other features: plans, analytics, reset, extra and shared
// fields, odd characters in values, cost 0, the deny cache beside an override that raises a limit.
import { Redis } from "@upstash/redis";
import { describe, expect, it } from "vitest";
import { fixedWindow, gcra, Limiter, type LimiterOptions } from "../../src/index.js";
import { privateRedis } from "../own-bridge.js";
import { manualClock, T0, uniquePrefix } from "../support.js";

const own = privateRedis();

/** A client as the issue's user builds it: no option but the URL and the token. */
const defaultClient = () => new Redis({ url: own.bridge.url, token: own.token });

/** The issue's rules, verbatim. */
const issueRules = () => ({
  perUser: gcra({ limit: 10, period: "1m", by: "user" }),
  perOrg: fixedWindow({ limit: 25, window: "1h", by: "org" }),
  global: gcra({ limit: 40, period: "1m", by: "global" }),
});

function nested(options: Partial<LimiterOptions> = {}) {
  const clock = manualClock();
  const prefix = uniquePrefix("accept");
  const limiter = new Limiter({ redis: defaultClient(), prefix, rules: issueRules(), clock, ...options });
  // reads what Redis holds: no deny cache (whose answers carry what was true when they were cached)
  const reader = new Limiter({
    ...options,
    redis: defaultClient(),
    prefix,
    rules: issueRules(),
    clock,
    denyCache: false,
    lease: false,
  });
  return { limiter, clock, reader };
}

const who = (user: string, org: string) => ({ user, org, global: "all" });

/** What each rule has left for `user` in `org`, read with a peek (cost 0 consumes nothing). */
async function left(limiter: Limiter, user: string, org: string): Promise<number[]> {
  const d = await limiter.limit(who(user, org), { cost: 0 });
  return [d.rules.perUser!.remaining, d.rules.perOrg!.remaining, d.rules.global!.remaining];
}

/** The calls of one command the server counted (INFO commandstats), scripts' own calls included. */
async function commandCalls(command: string): Promise<number> {
  const info = String(await own.conn.call("INFO", "commandstats"));
  return Number(new RegExp(`cmdstat_${command}:calls=(\\d+)`).exec(info)?.[1] ?? 0);
}

/** The EVALSHA, EVAL and HTTP requests `run` costs. */
async function costOf(run: () => Promise<unknown>) {
  const before = { evalsha: await commandCalls("evalsha"), eval: await commandCalls("eval") };
  const requests = own.bridge.stats.requests;
  await run();
  return {
    evalsha: (await commandCalls("evalsha")) - before.evalsha,
    eval: (await commandCalls("eval")) - before.eval,
    requests: own.bridge.stats.requests - requests,
  };
}

describe("the issue's API, with a default client", () => {
  it("decides a user's first try on the real clock, as the issue writes it", async () => {
    const limiter = new Limiter({
      redis: defaultClient(),
      prefix: uniquePrefix("plain"),
      rules: issueRules(),
    });
    const d = await limiter.limit({ user: "u1", org: "acme", global: "all" }, { cost: 1 });
    expect(d).toMatchObject({ allowed: true, source: "redis", plan: "default" });
    expect(d.rules.perUser).toMatchObject({ allowed: true, limit: 10, remaining: 9 });
    expect(d.rules.perOrg).toMatchObject({ allowed: true, limit: 25, remaining: 24 });
    expect(d.rules.global).toMatchObject({ allowed: true, limit: 40, remaining: 39 });
    // the binding rule: the one with least left
    expect(d).toMatchObject({ rule: "perUser", limit: 10, remaining: 9 });
    expect(await limiter.settle(d, 3)).toEqual({ difference: 2, via: "redis" });
    const after = await limiter.limit({ user: "u1", org: "acme", global: "all" }, { cost: 0 });
    expect([
      after.rules.perUser!.remaining,
      after.rules.perOrg!.remaining,
      after.rules.global!.remaining,
    ]).toEqual([7, 22, 37]);
    expect(() => limiter.limit("u1")).toThrow(/^identifier\.user: missing; rule "perUser" is keyed by it/);
  });

  it("counts 3 orgs × 5 users hammering one after another exactly: user, then org, then global binds", async () => {
    const { limiter, reader } = nested();
    const admitted = new Map<string, number>();
    const denials: string[] = [];
    for (const org of ["o0", "o1", "o2"]) {
      for (let u = 0; u < 5; u++) {
        const user = `${org}u${u}`;
        for (let i = 0; i < 12; i++) {
          const d = await limiter.limit(who(user, org));
          if (d.allowed) admitted.set(user, (admitted.get(user) ?? 0) + 1);
          else denials.push(`${user} ${d.rule} ${d.source}`);
        }
      }
    }
    // o0: 10, 10, 5 (the org's 25), then nothing; o1: 10, 5 (global's 40), then nothing
    expect(Object.fromEntries(admitted)).toEqual({ o0u0: 10, o0u1: 10, o0u2: 5, o1u0: 10, o1u1: 5 });
    // the first denials of each kind come from Redis, later ones of a cached identifier from the cache
    expect(denials.slice(0, 2)).toEqual(["o0u0 perUser redis", "o0u0 perUser cache"]);
    expect(denials.filter((d) => d.startsWith("o0u2"))[0]).toBe("o0u2 perOrg redis");
    expect(denials.filter((d) => d.startsWith("o0u3"))).toEqual(Array(12).fill("o0u3 perOrg cache"));
    expect(denials.filter((d) => d.startsWith("o1u1"))[0]).toBe("o1u1 global redis");
    expect(denials.filter((d) => d.startsWith("o2u4"))).toEqual(Array(12).fill("o2u4 global cache"));
    expect(await left(reader, "o0u2", "o0")).toEqual([5, 0, 0]);
    expect(await left(reader, "o1u1", "o1")).toEqual([5, 10, 0]);
    expect(await left(reader, "o2u0", "o2")).toEqual([10, 25, 0]);
    // a peek the deny cache answers carries what was true when the denial was cached: o0u2's own
    // denial by perOrg (global had 15 left then), and for a user never seen only the rule it shares
    const cached = await limiter.limit(who("o0u2", "o0"), { cost: 0 });
    expect(cached).toMatchObject({ source: "cache", rule: "perOrg" });
    expect(cached.rules.global!.remaining).toBe(15);
    const stranger = await limiter.limit(who("o2u9", "o2"), { cost: 0 });
    expect(stranger).toMatchObject({ source: "cache", rule: "global" });
    expect(Object.keys(stranger.rules)).toEqual(["global"]);
  });

  it("counts 3 orgs × 5 users hammering at once exactly: 40 in all, every peek what was admitted", async () => {
    const { limiter, reader } = nested();
    const orgs = ["o0", "o1", "o2"];
    const admitted = new Map<string, number>();
    await Promise.all(
      orgs.flatMap((org) =>
        Array.from({ length: 5 }, async (_, u) => {
          const user = `${org}u${u}`;
          for (let i = 0; i < 12; i++) {
            const d = await limiter.limit(who(user, org));
            expect(d.source).not.toBe("error");
            if (d.allowed) admitted.set(user, (admitted.get(user) ?? 0) + 1);
          }
        }),
      ),
    );
    const total = [...admitted.values()].reduce((a, b) => a + b, 0);
    // every user could take 10 and every org 25: the global 40 binds, exactly
    expect(total).toBe(40);
    for (const org of orgs) {
      let orgTotal = 0;
      for (let u = 0; u < 5; u++) {
        const user = `${org}u${u}`;
        const mine = admitted.get(user) ?? 0;
        orgTotal += mine;
        expect(mine).toBeLessThanOrEqual(10);
        const [perUser] = await left(reader, user, org);
        expect(perUser, user).toBe(10 - mine);
      }
      expect(orgTotal).toBeLessThanOrEqual(25);
      expect((await left(reader, `${org}u0`, org))[1], org).toBe(25 - orgTotal);
    }
    expect((await left(reader, "o0u0", "o0"))[2]).toBe(0);
  });

  it("charges nothing when each level denies, alone or together: every peek unchanged", async () => {
    const { limiter } = nested({ denyCache: false });
    const peeks = async () => [
      ...(await left(limiter, "u1", "acme")),
      ...(await left(limiter, "u2", "acme")),
      ...(await left(limiter, "v1", "globex")),
    ];
    const deniedBy = async (user: string, org: string, cost: number, rule: string, also: string[] = []) => {
      const before = await peeks();
      const d = await limiter.limit(who(user, org), { cost });
      expect(d).toMatchObject({ allowed: false, rule, source: "redis" });
      for (const name of [rule, ...also]) expect(d.rules[name]!.allowed, name).toBe(false);
      expect(await peeks()).toEqual(before);
    };
    // the user level: 11 is over perUser's 10 alone
    await deniedBy("u1", "acme", 11, "perUser");
    await limiter.limit(who("u1", "acme"), { cost: 10 });
    await limiter.limit(who("u2", "acme"), { cost: 10 });
    // the org level: acme has 5 left, u2's... u2 is spent: a fresh user of acme, 6 over the org alone
    await limiter.limit(who("u3", "acme"), { cost: 4 });
    await deniedBy("u4", "acme", 2, "perOrg");
    // the global level: 16 left; globex takes 10, then 7 is over global alone
    await limiter.limit(who("v1", "globex"), { cost: 5 });
    await limiter.limit(who("v2", "globex"), { cost: 5 });
    await deniedBy("v3", "globex", 7, "global");
    // user and org and global at once
    // all three deny: the binding rule is the one whose retry is latest, the window's end
    await deniedBy("u1", "acme", 7, "perOrg", ["perUser", "global"]);
    expect(await peeks()).toEqual([0, 1, 6, 0, 1, 6, 5, 15, 6]);
  });

  it("decides in 1 HTTP request and 1 EVALSHA: plain, with overrides on, with a plan, denied", async () => {
    const plain = nested({ denyCache: false }).limiter;
    const withOverrides = nested({ denyCache: false, overrides: true }).limiter;
    const withPlans = nested({ denyCache: false, plans: { pro: { perOrg: { limit: 100 } } } }).limiter;
    // the first call of each script on a Redis without it loads it (NOSCRIPT, SCRIPT LOAD, the call
    // again): count from the next
    await plain.limit(who("u0", "acme"));
    await withOverrides.limit(who("u0", "acme"));
    await withPlans.limit(who("u0", "acme"), { plan: "pro" });
    const one = { evalsha: 1, eval: 0, requests: 1 };
    expect(await costOf(() => plain.limit(who("u1", "acme")))).toEqual(one);
    expect(await costOf(() => plain.limit(who("u1", "acme"), { cost: 100 }))).toEqual(one);
    expect(await costOf(() => withOverrides.limit(who("u1", "acme")))).toEqual(one);
    await withOverrides.overrides.set({ org: "acme" }, { rules: { perOrg: { limit: 50 } } });
    expect(
      await costOf(async () =>
        expect((await withOverrides.limit(who("u1", "acme"))).rules.perOrg!.limit).toBe(50),
      ),
    ).toEqual(one);
    expect(await costOf(() => withOverrides.limit(who("u1", "acme"), { cost: 100 }))).toEqual(one);
    expect(await costOf(() => withPlans.limit(who("u1", "acme"), { plan: "pro" }))).toEqual(one);
    // a settle is one call too
    const d = await plain.limit(who("u2", "acme"), { cost: 3 });
    expect(await costOf(() => plain.settle(d, 1))).toEqual(one);
  });

  it.each([
    ["without leases", () => ({})],
    ["with leases", () => ({ lease: { max: 5, ttl: "1s" } })],
    ["with leases and overrides", () => ({ lease: { max: 5, ttl: "1s" }, overrides: true })],
    [
      "with a regional pool and leases",
      () => ({
        lease: { max: 5, ttl: "1s" },
        region: { redis: { url: own.bridge.url, token: own.token }, pool: { max: 6, ttl: "5s" } },
      }),
    ],
  ] as const)(
    "holds 4 instances × 64 callers within every identifier's limit, deny cache on, %s",
    async (_, options: () => Partial<LimiterOptions>) => {
      const clock = manualClock();
      const prefix = uniquePrefix("accept-load");
      const redis = defaultClient();
      const instances = Array.from(
        { length: 4 },
        () => new Limiter({ redis, prefix, rules: issueRules(), clock, timeout: 15_000, ...options() }),
      );
      let seed = 7;
      const next = () => {
        seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648;
        return seed / 2_147_483_648;
      };
      const orgOf = (user: number) => `org${user % 3}`;
      const byUser = new Map<number, number>();
      const byOrg = new Map<string, number>();
      let global = 0;
      let denied = 0;
      await Promise.all(
        Array.from({ length: 64 }, async (_, caller) => {
          for (let i = 0; i < 5; i++) {
            const user = Math.floor(next() * 15);
            const cost = 1 + Math.floor(next() * 3);
            const d = await instances[caller % 4]!.limit(
              { user: `u${user}`, org: orgOf(user), global: "g" },
              { cost },
            );
            if (d.source === "error") throw d.error;
            if (!d.allowed) {
              denied += 1;
              continue;
            }
            byUser.set(user, (byUser.get(user) ?? 0) + cost);
            byOrg.set(orgOf(user), (byOrg.get(orgOf(user)) ?? 0) + cost);
            global += cost;
          }
        }),
      );
      await Promise.all(instances.map((limiter) => limiter.dispose()));
      expect(denied).toBeGreaterThan(0);
      expect(global).toBeLessThanOrEqual(40);
      const reader = new Limiter({ redis, prefix, rules: issueRules(), clock, denyCache: false });
      for (let user = 0; user < 15; user++) {
        const d = await reader.limit({ user: `u${user}`, org: orgOf(user), global: "g" }, { cost: 0 });
        expect(byUser.get(user) ?? 0).toBeLessThanOrEqual(10);
        expect(10 - d.rules.perUser!.remaining, `u${user}`).toBe(byUser.get(user) ?? 0);
        expect(25 - d.rules.perOrg!.remaining, orgOf(user)).toBe(byOrg.get(orgOf(user)) ?? 0);
        expect(40 - d.rules.global!.remaining).toBe(global);
      }
      for (const units of byOrg.values()) expect(units).toBeLessThanOrEqual(25);
    },
  );

  it("refuses a record missing a field, naming it, before anything is sent", async () => {
    const { limiter } = nested();
    const cost = await costOf(async () => {
      expect(() => limiter.limit({ user: "u1", global: "all" })).toThrow(
        'identifier.org: missing; rule "perOrg" is keyed by it (by: "org"), so limit() takes a record such as { user: "...", org: "...", global: "..." }',
      );
      expect(() => limiter.limit({ org: "acme", global: "all" })).toThrow(/^identifier\.user: missing/);
      expect(() => limiter.limit({ user: "u1", org: "acme" })).toThrow(/^identifier\.global: missing/);
    });
    expect(cost).toEqual({ evalsha: 0, eval: 0, requests: 0 });
    expect(await left(limiter, "u1", "acme")).toEqual([10, 25, 40]);
    // limit("x") is limit({ id: "x" }): no rule here is keyed by id
    expect(() => limiter.limit("x")).toThrow(
      'identifier.user: missing; rule "perUser" is keyed by it (by: "user"), so limit() takes a record such as { user: "...", org: "...", global: "..." }',
    );
  });

  it("answers every other user from the deny cache (on by default) once global is spent, until its retry moment", async () => {
    const { limiter, clock } = nested();
    for (let i = 0; i < 40; i++) {
      const d = await limiter.limit(who(`u${i % 8}`, `org${i % 4}`));
      expect(d.allowed).toBe(true);
    }
    const first = await limiter.limit(who("u100", "org100"));
    expect(first).toMatchObject({ allowed: false, rule: "global", source: "redis", retryAfter: 1500 });
    const cost = await costOf(async () => {
      for (let i = 0; i < 20; i++) {
        const d = await limiter.limit(who(`x${i}`, `org${i}`));
        expect(d).toMatchObject({ allowed: false, rule: "global", source: "cache", retryAfter: 1500 });
        expect(d.rules.global).toMatchObject({ allowed: false, remaining: 0 });
      }
    });
    expect(cost).toEqual({ evalsha: 0, eval: 0, requests: 0 });
    clock.set(T0 + 1499);
    expect(await limiter.limit(who("x1", "org1"))).toMatchObject({ source: "cache", retryAfter: 1 });
    clock.set(T0 + 1500);
    expect(await limiter.limit(who("x1", "org1"))).toMatchObject({ allowed: true, source: "redis" });
    expect(await limiter.limit(who("x2", "org2"))).toMatchObject({
      allowed: false,
      rule: "global",
      source: "redis",
      retryAfter: 1500,
    });
  });

  it("settles each of the three rules exactly, above and below the cost", async () => {
    const { limiter } = nested();
    const d = await limiter.limit(who("u1", "acme"), { cost: 8 });
    expect(await limiter.settle(d, 3)).toEqual({ difference: -5, via: "redis" });
    expect(await left(limiter, "u1", "acme")).toEqual([7, 22, 37]);
    const e = await limiter.limit(who("u2", "acme"), { cost: 2 });
    expect(await limiter.settle(e, 6)).toEqual({ difference: 4, via: "redis" });
    expect(await left(limiter, "u2", "acme")).toEqual([4, 16, 31]);
    // settled to 0: everything back
    const f = await limiter.limit(who("u3", "acme"), { cost: 5 });
    expect(await limiter.settle(f, 0)).toEqual({ difference: -5, via: "redis" });
    expect(await left(limiter, "u3", "acme")).toEqual([10, 16, 31]);
    // past a limit: a debt the next decisions wait out (u4 owes 12 of its 10: 2 × 6 s)
    const g = await limiter.limit(who("u4", "acme"), { cost: 1 });
    expect(await limiter.settle(g, 12)).toEqual({ difference: 11, via: "redis" });
    expect(await left(limiter, "u4", "acme")).toEqual([0, 4, 19]);
    expect(await limiter.limit(who("u4", "acme"))).toMatchObject({
      allowed: false,
      rule: "perUser",
      retryAfter: 18_000,
    });
  });

  it("overrides one org (overrides: true), changing only perOrg, for every user of it", async () => {
    const { limiter } = nested({ overrides: true });
    await limiter.overrides.set({ org: "acme" }, { rules: { perOrg: { limit: 50 } } });
    // acme: 30, past the base 25, over three users of 10
    for (let u = 0; u < 3; u++) {
      for (let i = 0; i < 10; i++) expect((await limiter.limit(who(`u${u}`, "acme"))).allowed).toBe(true);
    }
    const acme = await limiter.limit(who("u3", "acme"), { cost: 0 });
    expect(acme).toMatchObject({ plan: "custom" });
    expect(acme.rules.perOrg).toMatchObject({ limit: 50, remaining: 20 });
    expect(acme.rules.perUser).toMatchObject({ limit: 10, remaining: 10 });
    expect(acme.rules.global).toMatchObject({ limit: 40, remaining: 10 });
    // globex keeps the base rules
    const globex = await limiter.limit(who("v1", "globex"), { cost: 0 });
    expect(globex).toMatchObject({ plan: "default" });
    expect(globex.rules.perOrg).toMatchObject({ limit: 25, remaining: 25 });
    await expect(
      limiter.overrides.set({ org: "acme" }, { rules: { global: { limit: 1000 } } }),
    ).rejects.toThrow(/^rules\.global: keyed by "global", not "org"/);
    await limiter.overrides.delete({ org: "acme" });
    const back = await limiter.limit(who("u3", "acme"), { cost: 0 });
    expect(back).toMatchObject({ plan: "default", allowed: false, rule: "perOrg" });
    expect(back.rules.perOrg).toMatchObject({ limit: 25, remaining: 0 });
  });
});

describe("nested identifiers beside the other features", () => {
  it("leases: exact counts from one instance, settled against the lease, given back on dispose", async () => {
    const { limiter, reader } = nested({ lease: { max: 5, ttl: "1s" } });
    const sources: string[] = [];
    let admitted = 0;
    for (let i = 0; i < 14; i++) {
      const d = await limiter.limit(who("u1", "acme"));
      sources.push(d.source);
      if (d.allowed) admitted += 1;
    }
    expect(admitted).toBe(10);
    expect(sources).toContain("lease");
    // u2 shares acme and global with u1's lease: what it reads counts u1's held units as taken
    const d = await limiter.limit(who("u2", "acme"), { cost: 4 });
    expect(d.allowed).toBe(true);
    expect(await left(reader, "u2", "acme")).toEqual([6, 11, 26]);
    expect(await limiter.settle(d, 1)).toEqual({ difference: -3, via: "redis" });
    await limiter.dispose();
    expect(await left(reader, "u1", "acme")).toEqual([0, 14, 29]);
    expect(await left(reader, "u2", "acme")).toEqual([9, 14, 29]);
  });

  it("leases: a decision answered from a lease settles each rule exactly", async () => {
    const { limiter, reader } = nested({ lease: { max: 5, ttl: "1s" } });
    // warm a lease: a second decision of the same record in one ttl reserves for it
    await limiter.limit(who("u1", "acme"));
    await limiter.limit(who("u1", "acme"));
    let leased = await limiter.limit(who("u1", "acme"));
    for (let i = 0; i < 3 && leased.source !== "lease"; i++) leased = await limiter.limit(who("u1", "acme"));
    expect(leased.source).toBe("lease");
    const settled = await limiter.settle(leased, 0);
    expect(settled.difference).toBe(-1);
    await limiter.dispose();
    const taken = 10 - (await left(reader, "u1", "acme"))[0]!;
    // every decision but the settled one stays charged, under every rule alike
    expect(await left(reader, "u1", "acme")).toEqual([10 - taken, 25 - taken, 40 - taken]);
  });

  it("plans: a plan raises the org's limit for the calls naming it, the usage counted carries", async () => {
    const { limiter } = nested({ denyCache: false, plans: { pro: { perOrg: { limit: 100 } } } });
    for (let u = 0; u < 3; u++) await limiter.limit(who(`u${u}`, "acme"), { cost: 8 });
    const base = await limiter.limit(who("u3", "acme"), { cost: 2 });
    expect(base).toMatchObject({ allowed: false, rule: "perOrg", plan: "default" });
    const pro = await limiter.limit(who("u3", "acme"), { cost: 2, plan: "pro" });
    expect(pro).toMatchObject({ allowed: true, plan: "pro" });
    expect(pro.rules.perOrg).toMatchObject({ limit: 100, remaining: 74 });
    expect(pro.rules.perUser).toMatchObject({ limit: 10, remaining: 8 });
    expect(pro.rules.global).toMatchObject({ limit: 40, remaining: 14 });
  });

  it("plans: an override naming a plan changes only its field's rules", async () => {
    const { limiter } = nested({
      overrides: true,
      plans: { pro: { perUser: { limit: 20 }, perOrg: { limit: 100 } } },
    });
    await limiter.overrides.set({ org: "acme" }, { plan: "pro" });
    const d = await limiter.limit(who("u1", "acme"), { cost: 12 });
    // the org's rule takes pro's 100; the user's keeps 10 (the override is acme's, not u1's)
    expect(d).toMatchObject({ allowed: false, rule: "perUser" });
    expect(d.rules.perUser).toMatchObject({ limit: 10 });
    expect(d.rules.perOrg).toMatchObject({ limit: 100 });
    await limiter.overrides.set({ user: "u1" }, { plan: "pro" });
    const e = await limiter.limit(who("u1", "acme"), { cost: 12 });
    expect(e).toMatchObject({ allowed: true });
    expect(e.rules.perUser).toMatchObject({ limit: 20, remaining: 8 });
    expect(e.rules.perOrg).toMatchObject({ limit: 100, remaining: 88 });
    expect(e.rules.global).toMatchObject({ limit: 40, remaining: 28 });
  });

  it("analytics and onDecision count each identifier by its rule", async () => {
    const seen: string[] = [];
    const { limiter } = nested({
      analytics: true,
      onDecision: (d, identifier) => seen.push(`${d.allowed ? "+" : "-"}${d.rule} ${identifier} ${d.source}`),
    });
    await limiter.limit(who("u1", "acme"), { cost: 10 });
    await limiter.limit(who("u1", "acme"));
    await limiter.limit(who("u1", "acme"));
    await limiter.limit(who("u2", "acme"), { cost: 10 });
    await limiter.limit(who("u3", "acme"), { cost: 6 });
    for (let i = 0; i < 4; i++) await limiter.limit(who(`v${i}`, "globex"), { cost: 5 });
    await limiter.limit(who("w1", "initech"));
    await limiter.limit(who("w2", "initech"));
    expect(seen).toEqual([
      "+perUser user=u1 redis",
      "-perUser user=u1 redis",
      "-perUser user=u1 cache",
      "+perUser user=u2 redis",
      "-perOrg org=acme redis",
      "+perUser user=v0 redis",
      "+perUser user=v1 redis",
      // a tie (5 left of each) binds the first rule
      "+perUser user=v2 redis",
      "+global global=all redis",
      "-global global=all redis",
      "-global global=all cache",
    ]);
    await limiter.analytics.flush();
    const report = await limiter.analytics.report();
    expect(report.decisions).toMatchObject({ allowed: 6, denied: 5, bySource: { redis: 9, cache: 2 } });
    expect(report.denials).toEqual({ perUser: 2, perOrg: 1, global: 2 });
    expect(report.top).toEqual([
      { identifier: "global=all", denied: 2, allowed: 1 },
      { identifier: "user=u1", denied: 2, allowed: 1 },
      { identifier: "org=acme", denied: 1, allowed: 0 },
    ]);
    await limiter.dispose();
  });

  it("reset: one org, the global identifier, a whole record; cached denials of them go too", async () => {
    const { limiter, reader } = nested();
    await limiter.limit(who("u1", "acme"), { cost: 10 });
    await limiter.limit(who("u2", "acme"), { cost: 10 });
    await limiter.limit(who("u3", "acme"), { cost: 5 });
    expect(await limiter.limit(who("u4", "acme"))).toMatchObject({ allowed: false, rule: "perOrg" });
    expect(await limiter.limit(who("u4", "acme"))).toMatchObject({ source: "cache" });
    await limiter.reset({ org: "acme" });
    expect(await limiter.limit(who("u4", "acme"))).toMatchObject({ allowed: true, source: "redis" });
    expect(await left(reader, "u4", "acme")).toEqual([9, 24, 14]);
    // the global identifier: every user's global budget back, their own kept
    await limiter.limit(who("v1", "globex"), { cost: 10 });
    expect(await limiter.limit(who("v2", "globex"), { cost: 5 })).toMatchObject({
      allowed: false,
      rule: "global",
    });
    expect(await limiter.limit(who("w1", "initech"), { cost: 5 })).toMatchObject({
      source: "cache",
      rule: "global",
    });
    await limiter.reset({ global: "all" });
    expect(await limiter.limit(who("w1", "initech"))).toMatchObject({ allowed: true, source: "redis" });
    expect(await left(reader, "v1", "globex")).toEqual([0, 15, 39]);
    // a whole record: each of its rules for its own identifier (global's too, for everyone)
    await limiter.reset(who("v1", "globex"));
    expect(await left(reader, "v1", "globex")).toEqual([10, 25, 40]);
    expect(await left(reader, "w1", "initech")).toEqual([9, 24, 40]);
  });

  // A reset of acme ends every lease holding acme, giving its units back before the DEL: perUser and
  // global, whose state was not reset, get back the units the lease held (3 of u1's 10 here), as a
  // regional pool's are (takeOutPools); acme's are then deleted with its state.
  it("reset of one org beside a lease: the user's and global's units the lease held come back", async () => {
    const { limiter, reader } = nested({ lease: { max: 5, ttl: "1s" } });
    let admitted = 0;
    for (let i = 0; i < 4; i++) if ((await limiter.limit(who("u1", "acme"))).allowed) admitted += 1;
    expect(admitted).toBe(4);
    // the lease holds units of u1, acme and global together: Redis counts them taken
    const held = 10 - (await left(reader, "u1", "acme"))[0]! - admitted;
    expect(held).toBeGreaterThan(0);
    await limiter.reset({ org: "acme" });
    await limiter.dispose();
    // acme starts afresh; u1 and global keep what was admitted, and no more
    expect(await left(reader, "u1", "acme")).toEqual([10 - admitted, 25, 40 - admitted]);
  });

  it("reset of one org while a lease's top-up is on its way: the top-up lands first, and comes back too", async () => {
    // limits wide enough for a top-up (it goes only while home has twice what it takes)
    const rules = {
      perUser: gcra({ limit: 1000, period: "1m", by: "user" }),
      perOrg: fixedWindow({ limit: 2500, window: "1h", by: "org" }),
      global: fixedWindow({ limit: 4000, window: "1h", by: "global" }),
    };
    const clock = manualClock();
    const prefix = uniquePrefix("reset-top-up");
    const options = { prefix, rules, clock, denyCache: false } as const;
    const limiter = new Limiter({ redis: defaultClient(), ...options, lease: { max: 50, ttl: "1s" } });
    const reader = new Limiter({ redis: defaultClient(), ...options });
    const read = async () => {
      const d = await reader.limit(who("u1", "acme"), { cost: 0 });
      return [d.rules.perUser!.remaining, d.rules.perOrg!.remaining, d.rules.global!.remaining];
    };
    const sources: string[] = [];
    for (let i = 0; i < 5; i++) {
      const background: Promise<unknown>[] = [];
      sources.push(
        (await limiter.limit(who("u1", "acme"), { waitUntil: (p) => void background.push(p) })).source,
      );
      await Promise.all(background);
      clock.set(clock.now + 1);
    }
    expect(sources).toEqual(["redis", "redis", "lease", "redis", "lease"]);
    // 5 admitted, 2 held (the 2nd reserved 1, the 4th 3)
    expect(await read()).toEqual([1000 - 7, 2500 - 7, 4000 - 7]);
    // the 6th, from the lease, leaves 1: a top-up of 4 (its own unit and 3 reserved) goes out
    const background: Promise<unknown>[] = [];
    const sixth = await limiter.limit(who("u1", "acme"), { waitUntil: (p) => void background.push(p) });
    expect([sixth.source, background.length]).toEqual(["lease", 1]);
    await limiter.reset({ org: "acme" });
    // the reset waited for the top-up: the lease held its 4 units and the 1 left, all given back before
    // the DEL; acme starts afresh, u1 and global keep the 6 admitted
    expect(await read()).toEqual([1000 - 6, 2500, 4000 - 6]);
    await Promise.all(background);
    // nothing is held any more: the next decision is home's, and the lease it starts comes back at dispose
    const next = await limiter.limit(who("u1", "acme"));
    expect([next.source, next.rules.perOrg!.remaining]).toEqual(["redis", 2500 - 1]);
    await limiter.dispose();
    expect(await read()).toEqual([1000 - 7, 2500 - 1, 4000 - 7]);
  });

  it("reset of a whole record beside another record's lease: never more than a limit afterwards", async () => {
    const { limiter, reader } = nested({ lease: { max: 5, ttl: "1s" } });
    for (let i = 0; i < 4; i++) expect((await limiter.limit(who("u1", "acme"))).allowed).toBe(true);
    const [userLeft, orgLeft, globalLeft] = await left(reader, "u1", "acme");
    expect(userLeft).toBeLessThan(6);
    // u2's record shares acme and global with u1's lease: both are reset
    await limiter.reset(who("u2", "acme"));
    await limiter.dispose();
    expect([orgLeft, globalLeft]).toEqual([25 - (10 - userLeft!), 40 - (10 - userLeft!)]);
    // u1's lease held units of acme and global, which were reset: it ends, its units given back before
    // the DEL (as a reset of acme alone ends it), so acme and global start afresh and u1 keeps what was
    // admitted, and no more
    expect(await left(reader, "u1", "acme")).toEqual([6, 25, 40]);
  });

  it("ignores fields no rule names: the same keys, the same counts", async () => {
    const { limiter, reader } = nested({ denyCache: false });
    const extra = { user: "u1", org: "acme", global: "all", plan: "pro", ip: "203.0.113.7", id: "k" };
    expect(limiter.keys(extra)).toEqual(limiter.keys(who("u1", "acme")));
    await limiter.limit(extra, { cost: 3 });
    expect(await left(reader, "u1", "acme")).toEqual([7, 22, 37]);
    // a record built as a class instance or with a null prototype reads its own fields alike
    await limiter.limit(Object.assign(Object.create(null), who("u1", "acme")), { cost: 1 });
    expect(await left(reader, "u1", "acme")).toEqual([6, 21, 36]);
  });

  it("two rules keyed by one field share its identifier, all or nothing", async () => {
    const prefix = uniquePrefix("shared-field");
    const clock = manualClock();
    const limiter = new Limiter({
      redis: defaultClient(),
      prefix,
      clock,
      denyCache: false,
      rules: {
        userBurst: gcra({ limit: 3, period: "1s", by: "user" }),
        userHour: fixedWindow({ limit: 5, window: "1h", by: "user" }),
        global: gcra({ limit: 40, period: "1m", by: "global" }),
      },
      overrides: true,
    });
    expect(limiter.keys({ user: "u1", global: "all" }).map((k) => k.slice(k.indexOf(":{")))).toEqual([
      ":{user=u1}:userBurst:gcra",
      `:{user=u1}:userHour:fixedWindow:${Math.floor(T0 / 3_600_000)}`,
      ":{global=all}:global:gcra",
    ]);
    const outcomes: string[] = [];
    for (let i = 0; i < 4; i++) {
      const d = await limiter.limit({ user: "u1", global: "all" });
      outcomes.push(d.allowed ? "+" : `-${d.rule}`);
    }
    clock.set(T0 + 3000);
    for (let i = 0; i < 4; i++) {
      const d = await limiter.limit({ user: "u1", global: "all" });
      outcomes.push(d.allowed ? "+" : `-${d.rule}`);
    }
    expect(outcomes).toEqual(["+", "+", "+", "-userBurst", "+", "+", "-userHour", "-userHour"]);
    const peek = await limiter.limit({ user: "u1", global: "all" }, { cost: 0 });
    // 5 taken; global refilled 2 in the 3 s (one per 1.5 s)
    expect(peek.rules.global!.remaining).toBe(37);
    // one override of the user changes both of its rules
    await limiter.overrides.set(
      { user: "u1" },
      { rules: { userHour: { limit: 6 }, userBurst: { limit: 4 } } },
    );
    const more = await limiter.limit({ user: "u1", global: "all" });
    expect(more).toMatchObject({ allowed: true, plan: "custom" });
    expect(more.rules.userHour).toMatchObject({ limit: 6, remaining: 0 });
  });

  it.each([
    ["braces", "{acme}", "%007bacme%007d"],
    ["a closing brace alone", "a}b", "a%007db"],
    ["colons", "acme:eu:1", "acme:eu"],
    ["equals and hash", "=x#y", "x#y"],
    ["unicode", "Ünïcødé 组织 🚀", "Unicode"],
    ["spaces and controls", "a b\tc\n", "a b c"],
    ["very long", `${"o".repeat(10_000)}1`, `${"o".repeat(10_000)}2`],
    ["long, one past the plain form", "x".repeat(129), "x".repeat(128)],
  ])("counts org values with %s apart from a look-alike, and names them back", async (_, odd, lookAlike) => {
    const seen: string[] = [];
    const { limiter, reader } = nested({
      denyCache: false,
      overrides: true,
      onDecision: (_, identifier) => seen.push(identifier),
    });
    const user = odd; // the same odd value as a user too
    await limiter.limit({ user, org: odd, global: odd }, { cost: 4 });
    await limiter.limit({ user: lookAlike, org: lookAlike, global: odd }, { cost: 2 });
    const a = await reader.limit({ user, org: odd, global: odd }, { cost: 0 });
    const b = await reader.limit({ user: lookAlike, org: lookAlike, global: odd }, { cost: 0 });
    expect([a.rules.perUser!.remaining, a.rules.perOrg!.remaining, a.rules.global!.remaining]).toEqual([
      6, 21, 34,
    ]);
    expect([b.rules.perUser!.remaining, b.rules.perOrg!.remaining, b.rules.global!.remaining]).toEqual([
      8, 23, 34,
    ]);
    // every key stays in one slot's form: one hash tag, no brace of the value in it
    for (const key of limiter.keys({ user, org: odd, global: odd })) {
      expect(key.split("{").length, key).toBe(2);
      expect(key.split("}").length, key).toBe(2);
    }
    // an override of the odd org reaches it alone
    await limiter.overrides.set({ org: odd }, { rules: { perOrg: { limit: 30 } } });
    expect((await limiter.limit({ user, org: odd, global: odd }, { cost: 0 })).rules.perOrg).toMatchObject({
      limit: 30,
      remaining: 26,
    });
    expect(
      (await limiter.limit({ user: lookAlike, org: lookAlike, global: odd }, { cost: 0 })).rules.perOrg,
    ).toMatchObject({ limit: 25, remaining: 23 });
    const listed: string[] = [];
    for await (const entry of limiter.overrides.list({ by: "org" })) listed.push(entry.identifier);
    expect(listed).toEqual([odd]);
    // the binding rule's identifier, named as given (a value past 128 characters by its hash)
    expect(seen[0]!.startsWith("user=")).toBe(true);
    if (odd.length <= 128) expect(seen[0]).toBe(`user=${odd}`);
    await limiter.reset({ org: odd });
    expect((await reader.limit({ user, org: odd, global: odd }, { cost: 0 })).rules.perOrg!.remaining).toBe(
      30,
    );
  });

  it("limit('x') on a Limiter keyed by other fields is the missing-field error; a string keys the id rules", async () => {
    const { limiter } = nested();
    expect(() => limiter.limit("x")).toThrow(/^identifier\.user: missing; rule "perUser" is keyed by it/);
    expect(() => limiter.keys("x")).toThrow(/^identifier\.user: missing/);
    await expect(limiter.reset("x")).rejects.toThrow(/^identifier: no rule is keyed by "id"/);
    const mixed = new Limiter({
      redis: defaultClient(),
      prefix: uniquePrefix("mixed"),
      rules: {
        perKey: gcra({ limit: 5, period: "1m" }),
        global: gcra({ limit: 40, period: "1m", by: "global" }),
      },
    });
    expect(() => mixed.limit("k1")).toThrow(/^identifier\.global: missing; rule "global" is keyed by it/);
    expect((await mixed.limit({ id: "k1", global: "all" })).allowed).toBe(true);
  });

  it("cost 0 peeks every rule for a cost of 1 and charges none, allowed or denied", async () => {
    const { limiter, reader } = nested();
    await limiter.limit(who("u1", "acme"), { cost: 10 });
    const peek = await limiter.limit(who("u1", "acme"), { cost: 0 });
    expect(peek).toMatchObject({ allowed: false, rule: "perUser", remaining: 0, retryAfter: 6000 });
    expect(peek.rules.perOrg).toMatchObject({ allowed: true, remaining: 15 });
    const fresh = await limiter.limit(who("u2", "acme"), { cost: 0 });
    expect(fresh).toMatchObject({ allowed: true });
    expect(await left(reader, "u2", "acme")).toEqual([10, 15, 30]);
    // settling a peek charges all of actual, under every rule
    expect(await limiter.settle(fresh, 2)).toEqual({ difference: 2, via: "redis" });
    expect(await left(reader, "u2", "acme")).toEqual([8, 13, 28]);
  });

  it("a cost no rule of one level can ever hold: denied for good by that level, nothing charged", async () => {
    const { limiter, reader } = nested();
    const d = await limiter.limit(who("u1", "acme"), { cost: 20 });
    expect(d).toMatchObject({ allowed: false, rule: "perUser", retryAfter: Number.POSITIVE_INFINITY });
    expect(d.rules.perOrg).toMatchObject({ allowed: true, remaining: 25 });
    // the same cost is answered here from then on: no wait would help
    expect(await limiter.limit(who("u1", "acme"), { cost: 20 })).toMatchObject({
      source: "cache",
      allowed: false,
    });
    const all = await limiter.limit(who("u1", "acme"), { cost: 41 });
    expect(all).toMatchObject({ allowed: false, retryAfter: Number.POSITIVE_INFINITY });
    expect(Object.values(all.rules).map((rule) => rule.allowed)).toEqual([false, false, false]);
    expect(await left(reader, "u1", "acme")).toEqual([10, 25, 40]);
    // the others still pass
    expect(await limiter.limit(who("u1", "acme"), { cost: 10 })).toMatchObject({ allowed: true });
  });

  it("the deny cache beside an override raising a limit: this isolate at once, another within maxStale", async () => {
    const clock = manualClock();
    const prefix = uniquePrefix("cache-override");
    const make = () =>
      new Limiter({ redis: defaultClient(), prefix, rules: issueRules(), clock, overrides: true });
    const here = make();
    const there = make();
    for (let u = 0; u < 3; u++) await here.limit(who(`u${u}`, "acme"), { cost: u < 2 ? 10 : 5 });
    for (const limiter of [here, there]) {
      expect(await limiter.limit(who("u3", "acme"))).toMatchObject({ allowed: false, rule: "perOrg" });
      expect(await limiter.limit(who("u4", "acme"))).toMatchObject({ source: "cache", rule: "perOrg" });
    }
    clock.set(T0 + 200);
    await here.overrides.set({ org: "acme" }, { rules: { perOrg: { limit: 50 } } });
    expect(await here.limit(who("u3", "acme"))).toMatchObject({
      allowed: true,
      source: "redis",
      plan: "custom",
    });
    // the other isolate trusts its cached denial at most maxStale (1 s) after it was decided
    clock.set(T0 + 999);
    expect(await there.limit(who("u4", "acme"))).toMatchObject({ allowed: false, source: "cache" });
    clock.set(T0 + 1000);
    const after = await there.limit(who("u4", "acme"));
    expect(after).toMatchObject({ allowed: true, source: "redis", plan: "custom" });
    expect(after.rules.perOrg).toMatchObject({ limit: 50, remaining: 23 });
  });

  it("headers state the binding rule", async () => {
    const { rateLimitHeaders } = await import("../../src/http/index.js");
    const { limiter } = nested();
    await limiter.limit(who("u1", "acme"), { cost: 10 });
    await limiter.limit(who("u2", "acme"), { cost: 10 });
    const d = await limiter.limit(who("u3", "acme"), { cost: 6 });
    expect(d).toMatchObject({ allowed: false, rule: "perOrg" });
    const headers = rateLimitHeaders(d, { now: T0 });
    expect(headers.RateLimit ?? headers.ratelimit).toBe('"perOrg";r=5;t=2760');
    expect(headers["RateLimit-Policy"] ?? headers["ratelimit-policy"]).toBe(
      '"perUser";q=10;w=60, "perOrg";q=25;w=3600, "global";q=40;w=60',
    );
  });
});

describe("the deny cache beside overrides of other identifiers", () => {
  it("answers a user without an override from another's cached global denial as the base rules", async () => {
    const { rateLimitHeaders } = await import("../../src/http/index.js");
    const { limiter } = nested({ overrides: true });
    await limiter.overrides.set({ user: "u1" }, { rules: { perUser: { limit: 3 } } });
    for (let i = 0; i < 4; i++) await limiter.limit(who(`v${i}`, `org${i}`), { cost: 10 });
    const own = await limiter.limit(who("u1", "acme"));
    expect(own).toMatchObject({ allowed: false, rule: "global", source: "redis", plan: "custom" });
    expect(own.rules.perUser).toMatchObject({ limit: 3 });
    // u2 has no override: the global denial it shares is answered here, under the base rules
    const other = await limiter.limit(who("u2", "acme"));
    expect(other).toMatchObject({ allowed: false, rule: "global", source: "cache" });
    expect(other.plan).toBe("default");
    expect(rateLimitHeaders(other)["RateLimit-Policy"]).toBe(
      '"perUser";q=10;w=60, "perOrg";q=25;w=3600, "global";q=40;w=60',
    );
  });
});

describe("the deny cache beside an override of the shared identifier", () => {
  it("answers another user with the shared rule as overridden and its own rules as the base", async () => {
    const { rateLimitHeaders } = await import("../../src/http/index.js");
    const { limiter } = nested({ overrides: true });
    await limiter.overrides.set({ global: "all" }, { rules: { global: { limit: 45 } } });
    await limiter.overrides.set({ user: "u1" }, { rules: { perUser: { limit: 3 } } });
    for (let i = 0; i < 4; i++) await limiter.limit(who(`v${i}`, `org${i}`), { cost: 10 });
    await limiter.limit(who("v4", "org4"), { cost: 5 });
    expect(await limiter.limit(who("u1", "acme"))).toMatchObject({
      allowed: false,
      rule: "global",
      plan: "custom",
    });
    const other = await limiter.limit(who("u2", "acme"));
    expect(other).toMatchObject({
      allowed: false,
      rule: "global",
      source: "cache",
      plan: "custom",
      limit: 45,
    });
    expect(rateLimitHeaders(other)["RateLimit-Policy"]).toBe(
      '"perUser";q=10;w=60, "perOrg";q=25;w=3600, "global";q=45;w=60',
    );
  });
});

describe("nested identifiers beside overrides, settle and pools", () => {
  it("an override of the org ends a lease holding it: every unit comes back to the user and global", async () => {
    const { limiter, reader } = nested({ lease: { max: 5, ttl: "1s" }, overrides: true });
    let admitted = 0;
    for (let i = 0; i < 4; i++) if ((await limiter.limit(who("u1", "acme"))).allowed) admitted += 1;
    expect(admitted).toBe(4);
    expect((await left(reader, "u1", "acme"))[0]).toBeLessThan(10 - admitted);
    await limiter.overrides.set({ org: "acme" }, { rules: { perOrg: { limit: 50 } } });
    await limiter.dispose();
    expect(await left(reader, "u1", "acme")).toEqual([10 - admitted, 50 - admitted, 40 - admitted]);
  });

  it("settles a decision made under an org's override exactly, each rule under its own limit", async () => {
    const { limiter, reader } = nested({ overrides: true });
    await limiter.overrides.set({ org: "acme" }, { rules: { perOrg: { limit: 50 } } });
    const d = await limiter.limit(who("u1", "acme"), { cost: 8 });
    expect(d).toMatchObject({ allowed: true, plan: "custom" });
    expect(await limiter.settle(d, 3)).toEqual({ difference: -5, via: "redis" });
    expect(await left(reader, "u1", "acme")).toEqual([7, 47, 37]);
    const e = await limiter.limit(who("u2", "acme"), { cost: 2 });
    expect(await limiter.settle(e, 9)).toEqual({ difference: 7, via: "redis" });
    expect(await left(reader, "u2", "acme")).toEqual([1, 38, 28]);
  });

  it("settles a decision made under a plan exactly", async () => {
    const { limiter, reader } = nested({
      plans: { pro: { perUser: { limit: 20 }, perOrg: { limit: 100 } } },
    });
    const d = await limiter.limit(who("u1", "acme"), { cost: 15, plan: "pro" });
    expect(d).toMatchObject({ allowed: true, plan: "pro" });
    expect(await limiter.settle(d, 4)).toEqual({ difference: -11, via: "redis" });
    const peek = await reader.limit(who("u1", "acme"), { cost: 0, plan: "pro" });
    expect([
      peek.rules.perUser!.remaining,
      peek.rules.perOrg!.remaining,
      peek.rules.global!.remaining,
    ]).toEqual([16, 96, 36]);
  });

  it("reset of one org beside a regional pool: the user's and global's pooled units come back", async () => {
    const region = { redis: { url: own.bridge.url, token: own.token }, pool: { max: 6, ttl: "5s" } };
    const { limiter, reader } = nested({ region });
    let admitted = 0;
    for (let i = 0; i < 5; i++) if ((await limiter.limit(who("u1", "acme"))).allowed) admitted += 1;
    expect(admitted).toBe(5);
    await limiter.reset({ org: "acme" });
    await limiter.dispose();
    expect(await left(reader, "u1", "acme")).toEqual([10 - admitted, 25, 40 - admitted]);
  });

  it("the first decision on a Redis that has not seen the script: 2 requests, then 1", async () => {
    const { limiter } = nested({ overrides: true });
    await own.conn.call("SCRIPT", "FLUSH");
    expect(await costOf(() => limiter.limit(who("u1", "acme")))).toEqual({
      evalsha: 2,
      eval: 0,
      requests: 2,
    });
    expect(await costOf(() => limiter.limit(who("u1", "acme")))).toEqual({
      evalsha: 1,
      eval: 0,
      requests: 1,
    });
  });
});

describe("an override of the global identifier", () => {
  it("raises global for every user at once, the cached global denial dropped here", async () => {
    const { limiter, reader } = nested({ overrides: true });
    for (let i = 0; i < 4; i++) await limiter.limit(who(`v${i}`, `org${i}`), { cost: 10 });
    expect(await limiter.limit(who("u1", "acme"))).toMatchObject({ allowed: false, rule: "global" });
    expect(await limiter.limit(who("u2", "acme"))).toMatchObject({ source: "cache", rule: "global" });
    await limiter.overrides.set({ global: "all" }, { rules: { global: { limit: 100 } } });
    const d = await limiter.limit(who("u2", "acme"));
    expect(d).toMatchObject({ allowed: true, source: "redis", plan: "custom" });
    expect(d.rules.global).toMatchObject({ limit: 100, remaining: 59 });
    expect(d.rules.perUser).toMatchObject({ limit: 10, remaining: 9 });
    expect(await left(reader, "w1", "initech")).toEqual([10, 25, 59]);
    await expect(
      limiter.overrides.set({ global: "all" }, { rules: { perOrg: { limit: 1 } } }),
    ).rejects.toThrow(/^rules\.perOrg: keyed by "org", not "global"/);
  });
});

describe("settle of decisions a lease or a regional pool answered", () => {
  it.each([
    ["a lease", () => ({ lease: { max: 5, ttl: "1s" } })],
    [
      "a regional pool",
      () => ({ region: { redis: { url: own.bridge.url, token: own.token }, pool: { max: 6, ttl: "5s" } } }),
    ],
    [
      "a regional pool and a lease",
      () => ({
        lease: { max: 5, ttl: "1s" },
        region: { redis: { url: own.bridge.url, token: own.token }, pool: { max: 6, ttl: "5s" } },
      }),
    ],
  ] as const)(
    "through %s: each rule ends charged exactly what was settled",
    async (_, options: () => Partial<LimiterOptions>) => {
      const { limiter, reader } = nested(options());
      const actuals = [0, 2, 1, 3, 0, 1];
      const sources = new Set<string>();
      let charged = 0;
      for (const actual of actuals) {
        const d = await limiter.limit(who("u1", "acme"));
        expect(d.allowed).toBe(true);
        sources.add(d.source);
        await limiter.settle(d, actual);
        charged += actual;
      }
      expect(sources.size).toBeGreaterThan(1);
      await limiter.dispose();
      expect(await left(reader, "u1", "acme")).toEqual([10 - charged, 25 - charged, 40 - charged]);
    },
  );
});

describe("reset of a whole record beside another record's lease or pool", () => {
  it.each([
    ["lease", () => ({ lease: { max: 5, ttl: "1s" } }), "lease"],
    [
      "regional pool",
      () => ({ region: { redis: { url: own.bridge.url, token: own.token }, pool: { max: 6, ttl: "5s" } } }),
      "region",
    ],
  ] as const)(
    "admits no more than the org's limit after the reset, a %s's units included",
    async (_, options: () => Partial<LimiterOptions>, held) => {
      const { limiter } = nested({ ...options(), denyCache: false });
      for (let i = 0; i < 4; i++) expect((await limiter.limit(who("u1", "acme"))).allowed).toBe(true);
      // u2's record resets perUser of u2, perOrg of acme and global: u1's lease was counted in the old state
      await limiter.reset(who("u2", "acme"));
      let acme = 0;
      const sources: string[] = [];
      for (const user of ["u1", "u3", "u4", "u5"]) {
        for (let i = 0; i < 10; i++) {
          const d = await limiter.limit(who(user, "acme"));
          if (d.allowed) {
            acme += 1;
            sources.push(d.source);
          }
        }
      }
      expect(sources).toContain(held);
      expect(acme).toBe(25);
    },
  );
});
