// The windows' CountingOptions: `overshoot` counts a denied charge, `givesBack` makes every decision
// a refund (below zero: a credit). Exact tables on an injected clock, against the shared bridge.
import { describe, expect, it } from "vitest";
import {
  INTERVAL_BUCKET_ONE_RULE,
  INTERVAL_BUCKET_ONE_RULE_OVERRIDES,
  SCRIPTS,
} from "../../src/engine/generated/scripts.js";
import { templateOf } from "../../src/engine/scripts/overrides.js";
import { fixedWindow, intervalBucket, Limiter, type RuleConfig, slidingWindow } from "../../src/index.js";
import { bridgeRedis, manualClock, T0, uniquePrefix } from "../support.js";

/** A charging Limiter and a giving-back one on the same prefix and rule name: the same keys. */
function pair(make: (extra: { overshoot?: boolean; givesBack?: boolean }) => RuleConfig) {
  const clock = manualClock();
  const prefix = uniquePrefix("counting");
  const redis = bridgeRedis();
  // (overshoot is the windows' option: the interval bucket's charging rule takes none)
  // no deny cache: a refund changes what a cached denial said
  const charging = new Limiter({
    redis,
    prefix,
    rules: { r: make({ overshoot: true }) },
    clock,
    denyCache: false,
  });
  const giving = new Limiter({ redis, prefix, rules: { r: make({ givesBack: true }) }, clock });
  const charge = async (cost: number) => {
    const d = await charging.limit("id", { cost });
    return [d.allowed, d.remaining];
  };
  const give = async (cost: number) => {
    const d = await giving.limit("id", { cost });
    return [d.allowed, d.remaining];
  };
  const decide = (cost: number) => charging.limit("id", { cost });
  return { clock, charge, give, decide, charging, redis, prefix };
}

const WINDOWS = [
  ["fixedWindow", (extra: object) => fixedWindow({ limit: 10, window: "1h", ...extra })],
  ["slidingWindow", (extra: object) => slidingWindow({ limit: 10, window: "1h", ...extra })],
] as const;

describe("CountingOptions", () => {
  for (const [name, make] of WINDOWS) {
    it(`${name}: a rule that gives back is never leased: 5 given back through a lease, 5 back`, async () => {
      const { charge, redis, prefix, clock } = pair(make);
      for (let i = 0; i < 9; i++) await charge(1);
      const giving = new Limiter({
        redis,
        prefix,
        rules: { r: make({ givesBack: true }) },
        clock,
        lease: { max: 50, ttl: "1s" },
      });
      // a lease would reserve units beside a give-back (giving them back at once), then give them
      // back again when it ended
      for (let i = 0; i < 5; i++) expect((await giving.limit("id")).source).toBe("redis");
      await giving.dispose();
      expect(await charge(0)).toEqual([true, 6]);
    });

    it(`${name}: a rule that gives back, with overrides on, admits every decision and gives back each cost`, async () => {
      const { charge, redis, prefix, clock } = pair(make);
      for (let i = 0; i < 3; i++) await charge(1);
      const giving = new Limiter({
        redis,
        prefix,
        rules: { r: make({ givesBack: true }) },
        plans: { pro: { r: { limit: 20 } } },
        clock,
        denyCache: false,
        overrides: true,
      });
      // 3 charged, then 5 given back: 2 below zero, a credit (remaining above the limit)
      const answers = [];
      for (let i = 0; i < 5; i++) answers.push((await giving.limit("id")).allowed);
      expect(answers).toEqual([true, true, true, true, true]);
      expect(await charge(0)).toEqual([true, 12]);
    });

    it(`${name} with overshoot and overrides: a custom override and a plan it names apply, overshoot kept`, async () => {
      const clock = manualClock();
      const limiter = new Limiter({
        redis: bridgeRedis(),
        prefix: uniquePrefix("counting-overrides"),
        rules: { r: make({ overshoot: true }) },
        plans: { pro: { r: { limit: 20 } } },
        clock,
        denyCache: false,
        overrides: true,
      });
      await limiter.overrides.set("custom", { rules: { r: { limit: 20 } } });
      expect(await limiter.limit("custom", { cost: 8 })).toMatchObject({
        allowed: true,
        limit: 20,
        remaining: 12,
      });
      expect(await limiter.limit("custom", { cost: 8 })).toMatchObject({
        allowed: true,
        plan: "custom",
        remaining: 4,
      });
      await limiter.overrides.set("pro", { plan: "pro" });
      expect(await limiter.limit("pro", { cost: 15 })).toMatchObject({
        allowed: true,
        plan: "pro",
        remaining: 5,
      });
      // denied: a sliding window counts it (it finds room left); a fixed window's one-rule variant with
      // overrides on counts admissions only (CountingOptions' overshoot says so)
      expect((await limiter.limit("pro", { cost: 10 })).allowed).toBe(false);
      const left = name === "slidingWindow" ? 0 : 5;
      expect(await limiter.limit("pro", { cost: 0 })).toMatchObject({ plan: "pro", remaining: left });
    });

    it(`${name}: a plan or an override cannot change how the rule counts, and says so before storing`, async () => {
      const rules = { r: make({ limit: 10, window: "1m" }) };
      expect(
        () => new Limiter({ redis: bridgeRedis(), rules, plans: { pro: { r: { givesBack: true } } } }),
      ).toThrow(
        "plans.pro.r.givesBack: a plan cannot change how a window rule counts (overshoot, givesBack)",
      );
      const prefix = uniquePrefix("counting-override");
      const limiter = new Limiter({
        redis: bridgeRedis(),
        prefix,
        rules,
        overrides: true,
        clock: manualClock(),
      });
      for (const change of [{ givesBack: true }, { overshoot: true }]) {
        await expect(
          limiter.overrides.set("id", { rules: { r: change as { givesBack: true } } }),
        ).rejects.toThrow(
          `rules.r.${Object.keys(change)[0]}: an override cannot change how a window rule counts`,
        );
      }
      // nothing stored: the base rule decides
      expect(await limiter.overrides.get("id")).toBeUndefined();
      expect((await limiter.limit("id", { cost: 4 })).remaining).toBe(6);
    });

    it(`${name}: an overshoot is counted though denied; a peek counts nothing; refunds go below zero`, async () => {
      const { charge, give } = pair(make);
      expect(await charge(8)).toEqual([true, 2]);
      // denied, and counted: 13 of 10
      expect(await charge(5)).toEqual([false, 2]);
      expect(await charge(0)).toEqual([false, 0]);
      expect(await charge(0)).toEqual([false, 0]);
      expect(await give(4)).toEqual([true, 1]);
      expect(await charge(1)).toEqual([true, 0]);
      // past what was charged: a credit
      expect(await give(20)).toEqual([true, 20]);
      expect(await charge(0)).toEqual([true, 20]);
      // a credit leaves room for more than the limit
      expect(await charge(15)).toEqual([true, 5]);
      expect(await charge(10)).toEqual([false, 5]);
      expect(await charge(0)).toEqual([false, 0]);
    });
  }

  it("fixedWindow: a credit lasts until its window ends", async () => {
    const { clock, charge, give } = pair(WINDOWS[0][1]);
    expect(await give(3)).toEqual([true, 13]);
    expect(await charge(1)).toEqual([true, 12]);
    clock.set(Math.floor(T0 / 3_600_000) * 3_600_000 + 3_600_000);
    expect(await charge(1)).toEqual([true, 9]);
  });

  it("slidingWindow: a credit fades through the next window, as a count does", async () => {
    const { clock, charge, give } = pair(WINDOWS[1][1]);
    const start = Math.floor(T0 / 3_600_000) * 3_600_000;
    clock.set(start);
    expect(await give(10)).toEqual([true, 20]);
    // halfway through the next window, half the credit is left
    clock.set(start + 3_600_000 + 1_800_000);
    expect(await charge(0)).toEqual([true, 15]);
    expect(await charge(15)).toEqual([true, 0]);
    expect(await charge(1)).toEqual([false, 0]);
  });

  it("refuses both at once, and a value that is no boolean, naming the field", () => {
    expect(
      () =>
        new Limiter({
          redis: bridgeRedis(),
          rules: { r: fixedWindow({ limit: 1, window: "1s", overshoot: true, givesBack: true }) },
        }),
    ).toThrow(/rules\.r\.givesBack: a rule that gives back denies nothing/);
    expect(
      () =>
        new Limiter({
          redis: bridgeRedis(),
          rules: { r: slidingWindow({ limit: 1, window: "1s", overshoot: "yes" as unknown as boolean }) },
        }),
    ).toThrow(/rules\.r\.overshoot: must be true or false/);
  });

  describe("intervalBucket: the refill at each interval's end, refunds past capacity", () => {
    // 10 tokens, 3 more at the end of each 10 s, counted from the first decision (T0)
    const bucket = (extra: { givesBack?: boolean }) =>
      intervalBucket({ capacity: 10, refillRate: 3, interval: "10s", ...(extra.givesBack ? extra : {}) });

    it("refills whole intervals only, up to capacity; a denied charge takes nothing", async () => {
      const { clock, charge, decide } = pair(bucket);
      expect(await charge(4)).toEqual([true, 6]);
      // 7 of 6: denied, nothing taken; the first refill (T0 + 10 s) holds it
      const denied = await decide(7);
      expect([denied.allowed, denied.remaining, denied.retryAfter]).toEqual([false, 6, 10_000]);
      clock.set(T0 + 9_999);
      expect(await charge(0)).toEqual([true, 6]);
      clock.set(T0 + 10_000);
      expect(await charge(0)).toEqual([true, 9]);
      // two more refills would make 15: capped at 10
      clock.set(T0 + 25_000);
      expect(await charge(0)).toEqual([true, 10]);
      expect(await charge(10)).toEqual([true, 0]);
      // refills stay on the first decision's grid: T0 + 30 s, not 10 s after the last charge
      clock.set(T0 + 30_000);
      const after = await decide(3);
      // 10 missing at 3 per refill: full 4 refills on
      expect([after.allowed, after.remaining, after.resetAt]).toEqual([true, 0, T0 + 70_000]);
      expect((await decide(11)).retryAfter).toBe(Number.POSITIVE_INFINITY);
    });

    it("a refund goes past capacity (a credit) until the next refill cuts it to capacity", async () => {
      const { clock, charge, give } = pair(bucket);
      // a fresh bucket given 3 back holds 13
      expect(await give(3)).toEqual([true, 13]);
      expect(await charge(0)).toEqual([true, 13]);
      expect(await charge(12)).toEqual([true, 1]);
      expect(await give(1000)).toEqual([true, 1001]);
      expect(await charge(1001)).toEqual([true, 0]);
      expect(await give(20)).toEqual([true, 20]);
      clock.set(T0 + 10_000);
      expect(await charge(0)).toEqual([true, 10]);
    });

    it("its key lives until the bucket is full again", async () => {
      const { charge, redis, prefix } = pair(bucket);
      expect(await charge(4)).toEqual([true, 6]);
      const keys = await redis.keys(`${prefix}*`);
      expect(keys).toHaveLength(1);
      expect(await redis.get(keys[0]!)).toBe(`6:${T0}`);
      // 4 missing at 3 per refill: full at T0 + 20 s
      const ttl = await redis.pttl(keys[0]!);
      expect(ttl).toBeGreaterThan(19_000);
      expect(ttl).toBeLessThanOrEqual(20_000);
    });

    it("a settle gives back up to capacity, or takes the extra below zero", async () => {
      const { clock, decide, charge, charging } = pair(bucket);
      const five = await decide(5);
      expect(five.remaining).toBe(5);
      // it cost 2: 3 back
      expect((await charging.settle(five, 2)).via).toBe("redis");
      expect(await charge(0)).toEqual([true, 8]);
      const two = await decide(2);
      // it cost 10: 8 more, to -2
      expect((await charging.settle(two, 10)).via).toBe("redis");
      expect(await charge(0)).toEqual([false, 0]);
      // -2 + 3 at the first refill
      clock.set(T0 + 10_000);
      expect(await charge(0)).toEqual([true, 1]);
    });

    it("a settle gives back nothing once a later refill is stored, all before it (its own refill included)", async () => {
      // Found writing the interval bucket's reference model (test/engine/model.ts): a settle gave the
      // difference back after a refill that the bucket, full, had cut to capacity, handing out tokens
      // taken again since.
      // 10 tokens, 10 more each 10 s: every refill fills the bucket
      const { clock, decide, charge, charging } = pair((extra) =>
        intervalBucket({ capacity: 10, refillRate: 10, interval: "10s", ...(extra.givesBack ? extra : {}) }),
      );
      const first = await decide(10);
      clock.set(T0 + 10_000);
      // the refill fills it: 10 taken again
      expect((await decide(10)).remaining).toBe(0);
      // the first cost nothing: as if so, the refill at T0 + 10 s was cut to 10 all the same
      expect((await charging.settle(first, 0)).via).toBe("redis");
      expect(await charge(0)).toEqual([false, 0]);
      const denied = await decide(10);
      expect([denied.allowed, denied.retryAfter]).toEqual([false, 10_000]);

      // 3 each 10 s: 8 taken at T0 leave 2; settled at 6 at T0 + 10 s, before any refill was stored,
      // 2 back after the settle's own refill: 2 + 3 + 2 = 7, as 10 - 6 + 3
      const other = pair(bucket);
      const eight = await other.decide(8);
      expect(eight.remaining).toBe(2);
      other.clock.set(T0 + 10_000);
      expect((await other.charging.settle(eight, 6)).via).toBe("redis");
      expect(await other.charge(0)).toEqual([true, 7]);
    });

    it("a lagging clock refills nothing and never moves the last refill back", async () => {
      const { clock, charge, redis, prefix } = pair(bucket);
      expect(await charge(10)).toEqual([true, 0]);
      clock.set(T0 + 20_000);
      expect(await charge(1)).toEqual([true, 5]);
      // a caller 15 s behind: no refill, the stored refill time stays
      clock.set(T0 + 5_000);
      expect(await charge(2)).toEqual([true, 3]);
      const [key] = await redis.keys(`${prefix}*`);
      expect(await redis.get(key!)).toBe(`3:${T0 + 20_000}`);
      clock.set(T0 + 30_000);
      expect(await charge(0)).toEqual([true, 6]);
    });

    it("reads a value of another format as a full bucket", async () => {
      const { charge, redis, prefix } = pair(bucket);
      expect(await charge(1)).toEqual([true, 9]);
      const [key] = await redis.keys(`${prefix}*`);
      await redis.set(key!, "12.5:x");
      expect(await charge(1)).toEqual([true, 9]);
    });
    it("its one-rule script answers one integer, packed exactly (lua/algorithms/interval_bucket.lua)", async () => {
      const redis = bridgeRedis();
      const key = `${uniquePrefix("ib-one")}:r`;
      // capacity 10, interval 10 s, refill 3 (sent as 3 * 2); a = at + 9999 - now, D = 40, span = 51
      const one = (now: number, cost: number) =>
        redis.eval(
          INTERVAL_BUCKET_ONE_RULE.text,
          [key],
          [now.toString(16), String(cost), "10", "10000", "6"],
        );
      // fresh, 4 taken: 6 left, a = 9999
      expect(await one(T0, 4)).toBe(2 * (9999 * 10 + 6));
      expect(await redis.get(key)).toBe(`6:${T0}`);
      // 7 of 6 denied: t = 6, a = 8999
      expect(await one(T0 + 1_000, 7)).toBe(-2 * (8999 * 51 + 6 + 40) - 1);
      expect(await redis.get(key)).toBe(`6:${T0}`);
      // a debt of 12 (a settle's), denied
      await redis.set(key, `-12:${T0}`);
      expect(await one(T0 + 1_000, 1)).toBe(-2 * (8999 * 51 - 12 + 40) - 1);
      // a credit: 5 of 25 leaves 20, at or above capacity (odd)
      await redis.set(key, `25:${T0}`);
      expect(await one(T0 + 1_000, 5)).toBe(2 * (20 - 10) + 1);
      // 30 of a credit of 20, above capacity: denied (even)
      expect(await one(T0 + 1_000, 30)).toBe(-2 * (20 - 10) - 2);
      // a caller 15 s behind the last refill: a = 24999, no refill
      await redis.set(key, `3:${T0 + 20_000}`);
      expect(await one(T0 + 5_000, 2)).toBe(2 * (24999 * 10 + 1));
    });

    it("decides as the limiter script does: a charging rule alone, beside one that never binds", async () => {
      // the same history on two prefixes: the rule alone (its one-rule script) and the rule beside a
      // limit never reached (the limiter script); credits, debts and a lagging clock included
      const redis = bridgeRedis();
      const clock = manualClock();
      const never = fixedWindow({ limit: 1_000_000, window: "1h" });
      const both: Record<string, RuleConfig>[] = [{ r: bucket({}) }, { r: bucket({}), never }];
      const sides = both.map((rules) => {
        const prefix = uniquePrefix("ib-paths");
        return {
          charging: new Limiter({ redis, prefix, rules, clock, denyCache: false }),
          giving: new Limiter({ redis, prefix, rules: { r: bucket({ givesBack: true }) }, clock }),
        };
      });
      const shas: unknown[] = [];
      const realFetch = globalThis.fetch;
      globalThis.fetch = async (...args: Parameters<typeof fetch>) => {
        for (const command of JSON.parse(String(args[1]?.body)) as unknown[][]) shas.push(command[1]);
        return realFetch(...args);
      };
      let seed = 7;
      const next = (n: number) => {
        seed = (seed * 1103515245 + 12345) % 2147483648;
        return seed % n;
      };
      try {
        for (let step = 0; step < 120; step++) {
          clock.set(clock.now + [1_000, 3_000, -6_000, 0, 12_000][next(5)]!);
          const cost = [1, 2, 3, 5, 11][next(5)]!;
          const kind = next(10);
          const got = [];
          for (const side of sides) {
            if (kind === 0) {
              got.push((await side.giving.limit("id", { cost: cost * 3 })).remaining);
              continue;
            }
            const d = await side.charging.limit("id", { cost });
            if (kind <= 2 && d.allowed) await side.charging.settle(d, cost + 12);
            const r = d.rules.r!;
            got.push([r.allowed, r.remaining, r.resetAt - clock.now, r.retryAfter]);
          }
          expect(got[0], `step ${step}`).toEqual(got[1]);
        }
      } finally {
        globalThis.fetch = realFetch;
      }
      expect(shas).toContain(INTERVAL_BUCKET_ONE_RULE.sha1);
      expect(shas).toContain(SCRIPTS.limiter.sha1);
    });

    it("with overrides on, its one-rule variant decides as limiterOverrides does, a line that gives back included", async () => {
      // the rule alone (intervalBucketOneRuleOverrides) and beside a limit never reached
      // (limiterOverrides), the same history: overrides that change capacity and refill, one that
      // gives back (the cost added: past capacity, or still in debt, its reset that of the debt), debts
      const redis = bridgeRedis();
      const clock = manualClock();
      const never = fixedWindow({ limit: 1_000_000, window: "1h" });
      const both: Record<string, RuleConfig>[] = [{ r: bucket({}) }, { r: bucket({}), never }];
      const limiters = both.map(
        (rules) =>
          new Limiter({
            redis,
            prefix: uniquePrefix("ib-over"),
            rules,
            clock,
            denyCache: false,
            overrides: true,
          }),
      );
      const shas: unknown[] = [];
      const realFetch = globalThis.fetch;
      globalThis.fetch = async (...args: Parameters<typeof fetch>) => {
        for (const command of JSON.parse(String(args[1]?.body)) as unknown[][]) shas.push(command[1]);
        return realFetch(...args);
      };
      const lines = [
        undefined,
        { capacity: 4 },
        { givesBack: true },
        { refillRate: 7, interval: "3s" },
        { capacity: 30, givesBack: true },
      ];
      let seed = 11;
      const next = (n: number) => {
        seed = (seed * 1103515245 + 12345) % 2147483648;
        return seed % n;
      };
      const got: unknown[][] = [[], []];
      try {
        for (let step = 0; step < 90; step++) {
          clock.set(clock.now + [1_000, 4_000, -6_000, 0, 12_000][next(5)]!);
          const cost = [1, 2, 3, 5, 11][next(5)]!;
          const kind = next(12);
          const line = lines[next(lines.length)];
          const row: unknown[] = [];
          for (const [i, limiter] of limiters.entries()) {
            if (kind === 0) {
              if (line === undefined) await limiter.overrides.delete("id");
              else await limiter.overrides.set("id", { rules: { r: line } as never });
              continue;
            }
            const d = await limiter.limit("id", { cost });
            if (kind <= 3 && d.allowed) await limiter.settle(d, cost + 9);
            const r = d.rules.r!;
            row.push([d.plan, r.allowed, r.remaining, r.resetAt - clock.now, r.retryAfter]);
            got[i]!.push(r.remaining);
          }
          expect(row[0], `step ${step}`).toEqual(row[1]);
        }
      } finally {
        globalThis.fetch = realFetch;
      }
      // (the variant as built for the call's plan: planScript)
      expect(shas.map((sha) => templateOf(String(sha)) ?? sha)).toContain(INTERVAL_BUCKET_ONE_RULE_OVERRIDES);
      expect(shas).toContain(SCRIPTS.limiterOverrides.sha1);
      // the history reached a credit and a debt
      expect(Math.max(...(got[0] as number[]))).toBeGreaterThan(10);
    });

    it("its one-rule variant answers a give-back that leaves a debt with the debt's reset", async () => {
      const clock = manualClock();
      const limiter = new Limiter({
        redis: bridgeRedis(),
        prefix: uniquePrefix("ib-debt"),
        rules: { r: bucket({}) },
        clock,
        denyCache: false,
        overrides: true,
      });
      clock.set(T0);
      // 10 taken, 30 more in debt, to -30: the most a settle takes (DEBT_CAP capacities in all)
      // (asked for 50, it takes no more)
      await limiter.settle(await limiter.limit("id", { cost: 10 }), 50);
      await limiter.overrides.set("id", { rules: { r: { givesBack: true } } });
      // 4 given back: -26, full after ceil(36 / 3) = 12 refills
      const d = await limiter.limit("id", { cost: 4 });
      expect([d.plan, d.allowed, d.remaining, d.resetAt]).toEqual(["custom", true, 0, T0 + 120_000]);
    });
  });
});
