// The windows' CountingOptions: `overshoot` counts a denied charge, `givesBack` makes every decision
// a refund (below zero: a credit). Exact tables on an injected clock, against the shared bridge.
import { describe, expect, it } from "vitest";
import { fixedWindow, Limiter, type RuleConfig, slidingWindow } from "../../src/index.js";
import { bridgeRedis, manualClock, T0, uniquePrefix } from "../support.js";

/** A charging Limiter and a giving-back one on the same prefix and rule name: the same keys. */
function pair(make: (extra: { overshoot?: boolean; givesBack?: boolean }) => RuleConfig) {
  const clock = manualClock();
  const prefix = uniquePrefix("counting");
  const redis = bridgeRedis();
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
  return { clock, charge, give };
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
});
