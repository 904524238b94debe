// The windows' CountingOptions: `overshoot` counts a denied charge, `givesBack` makes every decision
// a refund (below zero: a credit). Exact tables on an injected clock, against the shared bridge.
import { describe, expect, it } from "vitest";
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
  });
});
