import { describe, expect, it } from "vitest";
import { readDuration, toMs } from "../../src/engine/duration.js";

const UNITS = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

describe("toMs", () => {
  it("reads every two-decimal duration exactly: 0.01 to 9.99 in s, m, h and d", () => {
    const wrong: string[] = [];
    for (const [unit, ms] of Object.entries(UNITS)) {
      for (let hundredths = 1; hundredths < 1000; hundredths++) {
        const text = `${Math.floor(hundredths / 100)}.${String(hundredths % 100).padStart(2, "0")}${unit}`;
        // hundredths * ms is a multiple of 100 for every unit here: the exact answer, in integers
        const expected = (hundredths * ms) / 100;
        try {
          if (toMs(text, "window") !== expected) wrong.push(text);
        } catch {
          wrong.push(text);
        }
      }
    }
    expect(wrong).toEqual([]);
  });

  it("reads the cases float multiplication got wrong", () => {
    expect(toMs("2.01s", "window")).toBe(2010);
    expect(toMs("1.07m", "window")).toBe(64_200);
    expect(toMs("0.29s", "period")).toBe(290);
    expect(toMs("1.001h", "period")).toBe(3_603_600);
    expect(toMs("2.000000000000000000000d", "period")).toBe(172_800_000);
    expect(() => toMs("2.000000000000000000001d", "period")).toThrow(/^period: must be a positive whole/);
  });

  it("still refuses a decimal that is not a whole number of milliseconds, naming the field", () => {
    expect(() => toMs("0.5ms", "window")).toThrow(/^window: must be a positive whole number of milliseconds/);
    expect(() => toMs("1.0005s", "period")).toThrow(/^period: must be a positive whole number/);
    expect(() => toMs(2.5, "period")).toThrow(/^period: must be a positive whole number/);
    expect(() => toMs("0s", "window")).toThrow(/^window: must be a positive/);
    expect(() => toMs("1.s", "window")).toThrow(/^window: "1.s" is not a duration/);
    expect(() => toMs("99999999999999999999d", "window")).toThrow(
      /^window: "99999999999999999999d" is too long to count in milliseconds exactly$/,
    );
  });

  it("reads whole durations and numbers as before", () => {
    expect(toMs("500ms", "w")).toBe(500);
    expect(toMs("10 s", "w")).toBe(10_000);
    expect(toMs(" 1d ", "w")).toBe(86_400_000);
    expect(toMs(250, "w")).toBe(250);
  });
});

describe("readDuration", () => {
  it("gives the milliseconds, or what is wrong without naming a field (toMs adds the field)", () => {
    expect(readDuration("1.5s")).toEqual({ ms: 1500 });
    expect(readDuration(250)).toEqual({ ms: 250 });
    expect(readDuration("1 week")).toEqual({
      message:
        '"1 week" is not a duration; use milliseconds or a string like "500ms", "10s", "1m", "1h", "1d"',
    });
    expect(readDuration(-5)).toEqual({ message: "must be a positive whole number of milliseconds, got -5" });
    expect(readDuration("1.0005s")).toEqual({
      message: 'must be a positive whole number of milliseconds, got "1.0005s"',
    });
    expect(readDuration("99999999999999999999d")).toEqual({
      message: '"99999999999999999999d" is too long to count in milliseconds exactly',
    });
    expect(readDuration(null)).toEqual({
      message: 'expected a duration (milliseconds or a string like "10s"), got null',
    });
    expect(() => toMs(null, "window")).toThrow(
      new Error('window: expected a duration (milliseconds or a string like "10s"), got null'),
    );
  });
});
