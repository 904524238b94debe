import { describe, expect, it } from "vitest";
import {
  checkClock,
  checkOptions,
  checkString,
  durationMs,
  MAX_TIMER_MS,
  positiveMs,
  readClock,
} from "../../src/engine/validate.js";

describe("validate", () => {
  it("the timer bound is 2^31 - 1 ms: setTimeout's largest delay", async () => {
    expect(MAX_TIMER_MS).toBe(2_147_483_647);
    // one past it, a timer fires at once (Node warns and uses 1 ms)
    const warn = process.emitWarning;
    process.emitWarning = () => {};
    try {
      const started = performance.now();
      await new Promise((resolve) => setTimeout(resolve, MAX_TIMER_MS + 1));
      expect(performance.now() - started).toBeLessThan(1000);
    } finally {
      process.emitWarning = warn;
    }
  });

  it("reads a clock by one rule: a finite number of 0 or more, floored", () => {
    expect(readClock(() => 1_700_000_040_000.9)).toBe(1_700_000_040_000);
    expect(readClock(() => 0)).toBe(0);
    for (const now of [-1, -0.5, Number.NaN, Number.POSITIVE_INFINITY, "5", undefined]) {
      expect(() => readClock(() => now as number)).toThrow(
        /^clock: returned .*, expected epoch milliseconds \(0 or more\)$/,
      );
    }
    expect(() => readClock(() => -1)).toThrow(TypeError);
    expect(checkClock(Date.now)).toBe(Date.now);
    expect(() => checkClock(5)).toThrow("clock: must be a function returning epoch ms");
  });

  it("positiveMs: above 0, at most max, Infinity only where allowed", () => {
    expect(positiveMs(0.5, "timeout")).toBe(0.5);
    expect(positiveMs(MAX_TIMER_MS, "timeout")).toBe(MAX_TIMER_MS);
    expect(positiveMs(Number.POSITIVE_INFINITY, "timeout", { infinite: true })).toBe(
      Number.POSITIVE_INFINITY,
    );
    expect(() => positiveMs(MAX_TIMER_MS + 1, "timeout", { infinite: true })).toThrow(
      "timeout: must be a positive number of milliseconds up to 2147483647 (or Infinity), got 2147483648",
    );
    expect(() => positiveMs(Number.POSITIVE_INFINITY, "batchWindow")).toThrow(
      "batchWindow: must be a positive number of milliseconds up to 2147483647, got Infinity",
    );
    expect(() => positiveMs(86_400_001, "breaker.cooldown", { max: 86_400_000 })).toThrow(
      "breaker.cooldown: must be a positive number of milliseconds up to 86400000, got 86400001",
    );
    for (const value of [0, -1, Number.NaN, "10", null]) {
      expect(() => positiveMs(value, "timeout")).toThrow(/^timeout: must be a positive number/);
    }
  });

  it("durationMs: a whole, positive duration a timer can wait out", () => {
    expect(durationMs("30s", "lease")).toBe(30_000);
    expect(durationMs(MAX_TIMER_MS, "lease")).toBe(MAX_TIMER_MS);
    expect(() => durationMs(MAX_TIMER_MS + 1, "lease")).toThrow(
      "lease: must be at most 2147483647 ms (about 24.8 days), got 2147483648",
    );
    expect(() => durationMs("25d", "wait")).toThrow(/^wait: must be at most 2147483647 ms/);
    for (const value of [0, -1, Number.NaN, Number.POSITIVE_INFINITY, 1.5, "0s", "soon", null]) {
      expect(() => durationMs(value, "lease")).toThrow(/^lease: /);
    }
  });

  it("checkString: a non-empty string, else a TypeError or RangeError naming the field", () => {
    expect(checkString("invoice:42", "name")).toBe("invoice:42");
    expect(() => checkString(5, "owner")).toThrow(new TypeError("owner: expected a string, got 5"));
    expect(() => checkString("", "owner")).toThrow(RangeError);
    expect(() => checkString("", "owner")).toThrow(/^owner: must not be empty/);
  });

  it("checkOptions: an object whose fields are all known", () => {
    expect(() => checkOptions({ a: 1 }, "Thing", ["a", "b"])).not.toThrow();
    expect(() => checkOptions(null, "Thing", ["a"])).toThrow("Thing: expected an options object");
    expect(() => checkOptions({ c: 1 }, "Thing", ["a", "b"])).toThrow("c: not a Thing option; it takes a, b");
  });
});
