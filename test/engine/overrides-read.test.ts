// The read path of overrides: with `overrides` on, each decision's one EVALSHA also reads the
// identifier's stored override (written here raw, as overrides.set() stores it: `<line>\n<json>`) and
// applies it: a stored override beats the plan the call names, which beats the base rules.
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { LIMITER_OVERRIDES } from "../../src/engine/generated/scripts.js";
import { RuleKeys } from "../../src/engine/keys.js";
import { limiterArgs } from "../../src/engine/scripts/limiter.js";
import { fixedWindow, gcra, Limiter, type RuleConfig, slidingWindow, tokenBucket } from "../../src/index.js";
import { type Cluster, startCluster } from "../cluster.js";
import { bridgeRedis, manualClock, T0, uniquePrefix } from "../support.js";

const HOUR = 3_600_000;
const redis = bridgeRedis();

function limiterOf(
  rules: Record<string, RuleConfig>,
  plans?: Record<string, Record<string, Record<string, unknown>>>,
  extra: Record<string, unknown> = {},
) {
  const clock = manualClock();
  const limiter = new Limiter({
    redis,
    prefix: uniquePrefix("ovr"),
    rules,
    plans: plans as never,
    denyCache: false,
    clock,
    overrides: true,
    ...extra,
  });
  return { limiter, clock };
}

/** Stores `line` as `identifier`'s override, with the intent JSON after it. */
async function store(limiter: Limiter, identifier: string, line: string, intent: unknown = {}) {
  const key = new RuleKeys(limiter.prefix, limiter.rules).override(identifier);
  await redis.set(key, `${line}\n${JSON.stringify(intent)}`);
  return key;
}

/** How many of `tries` decisions of `identifier` are admitted, at the clock's time. */
async function admitted(limiter: Limiter, identifier: string, tries: number, plan?: string) {
  let n = 0;
  const plans = new Set<string>();
  for (let i = 0; i < tries; i++) {
    const d = await limiter.limit(identifier, { plan });
    plans.add(d.plan);
    if (d.allowed) n++;
  }
  return { n, plans: [...plans] };
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe("overrides on: the override read in the decision's EVALSHA", () => {
  const rules = { perHour: gcra({ limit: 10, period: "1h" }) };
  const plans = { pro: { perHour: { limit: 20 } }, max: { perHour: { limit: 40 } } };

  it("decides by the base rules or the call's plan when none is stored", async () => {
    const { limiter, clock } = limiterOf(rules, plans);
    clock.set(T0);
    expect(await admitted(limiter, "none", 15)).toEqual({ n: 10, plans: ["default"] });
    expect(await admitted(limiter, "none-pro", 25, "pro")).toEqual({ n: 20, plans: ["pro"] });
  });

  it("applies a stored plan, which beats the plan the call names", async () => {
    const { limiter, clock } = limiterOf(rules, plans);
    clock.set(T0);
    await store(limiter, "up", "=max", { plan: "max" });
    expect(await admitted(limiter, "up", 50)).toEqual({ n: 40, plans: ["max"] });
    await store(limiter, "up2", "=max", { plan: "max" });
    expect(await admitted(limiter, "up2", 50, "pro")).toEqual({ n: 40, plans: ["max"] });
  });

  it("applies custom parameters, says 'custom' and keeps the rules it applied", async () => {
    const { limiter, clock } = limiterOf(rules, plans);
    clock.set(T0);
    await store(limiter, "c", "!gcra 5 3600000 7", { rules: { perHour: { limit: 5, burst: 7 } } });
    const first = await limiter.limit("c", { plan: "pro" });
    expect(first).toMatchObject({ allowed: true, plan: "custom", limit: 7, remaining: 6 });
    const applied = first.decidedBy!;
    expect(applied.map((r) => [r.name, r.algorithm, r.limit])).toEqual([["perHour", "gcra", 7]]);
    expect(applied[0]).toMatchObject({ rate: 5, period: HOUR, burst: 7 });
    expect(await admitted(limiter, "c", 10, "pro")).toEqual({ n: 6, plans: ["custom"] });
    // a base decision carries the base rules
    expect((await limiter.limit("other")).decidedBy).toBe(limiter.rules);
  });

  it("falls back to the base rules when the stored plan or rules do not fit, warning once per line", async () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const { limiter, clock } = limiterOf(rules, plans);
    clock.set(T0);
    await store(limiter, "gone", "=gone", { plan: "gone" });
    expect(await admitted(limiter, "gone", 15, "pro")).toEqual({ n: 10, plans: ["default"] });
    await store(limiter, "alg", "!fixedWindow 5 3600000 0", {});
    expect(await admitted(limiter, "alg", 15)).toEqual({ n: 10, plans: ["default"] });
    await store(limiter, "short", "!gcra 5 3600000", {});
    expect(await admitted(limiter, "short", 15)).toEqual({ n: 10, plans: ["default"] });
    const lines = warn.mock.calls.map((call) => String(call[0]));
    expect(lines.filter((line) => line.includes('"=gone"'))).toHaveLength(1);
    expect(lines.filter((line) => line.includes('"!fixedWindow 5 3600000 0"'))).toHaveLength(1);
  });

  it("applies an upgrade on the very next decision, keeping the usage counted", async () => {
    const { limiter, clock } = limiterOf(rules, plans);
    clock.set(T0);
    expect(await admitted(limiter, "u", 12)).toEqual({ n: 10, plans: ["default"] });
    const key = await store(limiter, "u", "=pro", { plan: "pro" });
    expect(await admitted(limiter, "u", 12)).toEqual({ n: 10, plans: ["pro"] });
    await redis.del(key);
    // 20 units used, above the base burst of 10: a unit comes back every 6 minutes
    clock.set(T0 + HOUR / 10);
    expect(await admitted(limiter, "u", 3)).toEqual({ n: 0, plans: ["default"] });
    clock.set(T0 + HOUR / 10 + HOUR); // 9 used
    expect((await limiter.limit("u")).allowed).toBe(true);
  });

  it("counts a plan's other fixed window in that window's key, declared beside the call's", async () => {
    const { limiter, clock } = limiterOf(
      { hourly: fixedWindow({ limit: 3, window: "1h" }), g: gcra({ limit: 100, period: "1h" }) },
      { long: { hourly: { limit: 5, window: "2h" } } },
    );
    clock.set(T0);
    await store(limiter, "w", "=long", { plan: "long" });
    expect(await admitted(limiter, "w", 8)).toEqual({ n: 5, plans: ["long"] });
    expect(await redis.get(limiter.keys("w", T0, "long")[0]!)).toBe(5);
    expect(await redis.get(limiter.keys("w", T0)[0]!)).toBeNull();
    // a custom limit in the long window's key too
    await store(limiter, "w2", "!fixedWindow 4 7200000 0 gcra 100 3600000 100", {});
    expect(await admitted(limiter, "w2", 8)).toEqual({ n: 4, plans: ["custom"] });
    expect(await redis.get(limiter.keys("w2", T0, "long")[0]!)).toBe(4);
    // a window no plan declares is stale: the base rules, in the base key
    vi.spyOn(console, "warn").mockImplementation(() => {});
    await store(limiter, "w3", "!fixedWindow 4 60000 0 gcra 100 3600000 100", {});
    expect(await admitted(limiter, "w3", 8)).toEqual({ n: 3, plans: ["default"] });
    expect(await redis.get(limiter.keys("w3", T0)[0]!)).toBe(3);
  });

  it.each([
    ["fixedWindow", fixedWindow({ limit: 3, window: "1h" }), "!fixedWindow 6 3600000 0"],
    ["slidingWindow", slidingWindow({ limit: 3, window: "1h" }), "!slidingWindow 6 3600000 0"],
    ["tokenBucket", tokenBucket({ capacity: 3, refillRate: 1, interval: "1h" }), "!gcra 1 3600000 6"],
  ] as const)("%s: exactly the override's limit, one rule", async (_, rule, line) => {
    const { limiter, clock } = limiterOf({ r: rule });
    clock.set(T0);
    expect(await admitted(limiter, "base", 10)).toEqual({ n: 3, plans: ["default"] });
    await store(limiter, "o", line, {});
    expect(await admitted(limiter, "o", 10)).toEqual({ n: 6, plans: ["custom"] });
    expect((await limiter.limit("o")).decidedBy![0]!.limit).toBe(6);
  });

  it.each([
    ["fixedWindow", fixedWindow({ limit: 3, window: "1h" })],
    ["slidingWindow", slidingWindow({ limit: 3, window: "1h" })],
    ["gcra", gcra({ limit: 3, period: "1h" })],
  ] as const)("%s, one rule: a value no writer stores reads as stale, the base rules", async (_, rule) => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const { limiter, clock } = limiterOf({ r: rule }, { pro: { r: { limit: 6 } } });
    clock.set(T0);
    const keys = new RuleKeys(limiter.prefix, limiter.rules);
    // empty, a line's end alone, the tail of a plan's line, a plan's name without its line's end,
    // a plan table's window line, another algorithm's custom line
    for (const [i, value] of [
      "",
      "\n",
      "o\n",
      "=pro",
      "#1 3600000 0\n",
      "!sliding 6 3600000 0\n{}",
    ].entries()) {
      await redis.set(keys.override(`id${i}`), value);
      expect(await admitted(limiter, `id${i}`, 5)).toEqual({ n: 3, plans: ["default"] });
    }
  });

  it.each([
    ["gcra", { r: gcra({ limit: 3, period: "1h" }) }],
    ["fixedWindow", { r: fixedWindow({ limit: 3, window: "1h" }) }],
    ["two rules", { r: gcra({ limit: 3, period: "1h" }), f: fixedWindow({ limit: 100, window: "1h" }) }],
  ] as const)("%s: the 62nd plan is answered by its tag, the 63rd by its name", async (_, rules) => {
    // plan i gives r a limit of i + 3
    const plans = Object.fromEntries(
      Array.from({ length: 64 }, (_, i) => [`p${i + 1}`, { r: { limit: i + 4 } }]),
    );
    const { limiter, clock } = limiterOf(rules, plans);
    clock.set(T0);
    for (const plan of ["p1", "p62", "p63", "p64"]) {
      await limiter.overrides.set(plan, { plan });
      const n = Number(plan.slice(1)) + 3;
      expect(await admitted(limiter, plan, n + 2)).toEqual({ n, plans: [plan] });
    }
  });

  it("one fixed window: a count INCRBY would refuse reads as a new window", async () => {
    const { limiter, clock } = limiterOf({ r: fixedWindow({ limit: 3, window: "1h" }) });
    clock.set(T0);
    const [count] = limiter.keys("id");
    for (const foreign of ["", "1.5", "1e3", " 3", "007", "-0", "x", "99999999999999999999"]) {
      await redis.set(count!, foreign, { px: HOUR });
      expect(await limiter.limit("id")).toMatchObject({ allowed: true, remaining: 2 });
      expect(await redis.get(count!)).toBe(1);
    }
    // a count as stored: the next one
    expect(await limiter.limit("id")).toMatchObject({ allowed: true, remaining: 1 });
  });

  it("one fixed window: its own script applies plans, windows and custom limits exactly", async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const { limiter, clock } = limiterOf(
      { r: fixedWindow({ limit: 3, window: "1h" }) },
      { pro: { r: { limit: 6 } }, long: { r: { limit: 5, window: "2h" } } },
    );
    const end = T0 - (T0 % HOUR) + HOUR;
    clock.set(T0);
    const key = await store(limiter, "f", "=long", { plan: "long" });
    expect(await admitted(limiter, "f", 8, "pro")).toEqual({ n: 5, plans: ["long"] });
    expect(await redis.get(limiter.keys("f", T0, "long")[0]!)).toBe(5); // the denials took their units back
    expect(await redis.pttl(limiter.keys("f", T0, "long")[0]!)).toBeGreaterThan(HOUR);
    // denials leave the count exact, so a raise admits exactly the difference
    await store(limiter, "g", "!fixedWindow 2 3600000 0", {});
    expect(await admitted(limiter, "g", 5)).toEqual({ n: 2, plans: ["custom"] });
    expect(await redis.get(limiter.keys("g", T0)[0]!)).toBe(2);
    await store(limiter, "g", "=pro", { plan: "pro" });
    expect(await admitted(limiter, "g", 6)).toEqual({ n: 4, plans: ["pro"] });
    // a cost above the applied limit: never, nothing kept
    await store(limiter, "g", "!fixedWindow 2 3600000 0", {});
    const never = await limiter.limit("h", { cost: 3 });
    expect(never).toMatchObject({ allowed: true, remaining: 0, resetAt: end, plan: "default" });
    await store(limiter, "h2", "!fixedWindow 2 3600000 0", {});
    expect(await limiter.limit("h2", { cost: 3 })).toMatchObject({
      allowed: false,
      remaining: 2,
      retryAfter: Number.POSITIVE_INFINITY,
      plan: "custom",
    });
    expect(await redis.get(limiter.keys("h2", T0)[0]!)).toBeNull(); // a denial writes nothing
    // a stale plan: the base rules
    await redis.set(key, "=gone\n{}");
    expect(await admitted(limiter, "f", 3)).toEqual({ n: 3, plans: ["default"] });
  });

  // One gcra, token bucket or sliding window rule runs its one-rule script's variant, which also reads
  // the override. That it decides what the model (and so limiterOverrides) decides, under every kind
  // of stored line, plans of other rates and windows, for costs the applied rule may refuse, is
  // test/engine/cross-feature.property.test.ts's; here, what each variant answers on the wire.
  // the last: what the one-rule variant answers for the custom line (two parameters changed: the line;
  // one: its integer, "!<which>=<value>")
  const lean: [
    string,
    RuleConfig,
    Record<string, Record<string, Record<string, unknown>>>,
    string,
    string,
  ][] = [
    [
      "gcra",
      gcra({ limit: 7, period: "1h", burst: 5 }),
      { pro: { r: { limit: 11, burst: 9 } }, slow: { r: { limit: 3, period: "2h" } } },
      "!gcra 5 3600000 3",
      "!gcra 5 3600000 3",
    ],
    [
      "tokenBucket",
      tokenBucket({ capacity: 5, refillRate: 7, interval: "1h" }),
      { pro: { r: { capacity: 9 } }, slow: { r: { refillRate: 3, interval: "2h" } } },
      "!gcra 7 3600000 3",
      "!3=3",
    ],
    [
      "slidingWindow",
      slidingWindow({ limit: 7, window: "1h" }),
      { pro: { r: { limit: 11 } }, long: { r: { limit: 9, window: "2h" } } },
      "!slidingWindow 3 3600000 0",
      "!1=3",
    ],
  ];

  /** The results of every EVALSHA `run` sends, through the Limiters' fetch. */
  async function replies(run: () => Promise<void>): Promise<unknown[]> {
    const answers: unknown[] = [];
    const realFetch = globalThis.fetch;
    globalThis.fetch = async (...args: Parameters<typeof fetch>) => {
      const response = await realFetch(...args);
      const body = (await response.clone().json()) as { result?: unknown }[];
      if (Array.isArray(body)) answers.push(...body.map((b) => b.result));
      return response;
    };
    try {
      await run();
    } finally {
      globalThis.fetch = realFetch;
    }
    // not a store's own SET's "OK", nor a first call's NOSCRIPT and SCRIPT LOAD
    return answers.filter(
      (a) => a !== "OK" && a !== undefined && !(typeof a === "string" && /^[0-9a-f]{40}$/.test(a)),
    );
  }
  /** What a reply says applied: its type when nothing, the plan of a tag, what a string says. */
  /** A custom line's integer answer (tag 63): which parameter of the call's it changed, and to what. */
  const packed = (a: number) => {
    const low = a - Math.floor(a / 2 ** 22) * 2 ** 22;
    return `!${Math.floor(low / 64) % 4}=${Math.floor(low / 256)}`;
  };
  const applied =
    (tags: string[]) =>
    (a: unknown): unknown =>
      typeof a === "number"
        ? ((a % 64) + 64) % 64 === 63
          ? packed(a)
          : tags.length > 0
            ? tags[((a % 64) + 64) % 64]
            : "number"
        : Array.isArray(a)
          ? [a.length, typeof a.at(-1) === "number" ? `=${["default", "pro"][a.at(-1) - 1]}` : a.at(-1)]
          : typeof a === "string"
            ? a.includes("#")
              ? tags[Number(a.slice(a.indexOf("#") + 1))]
              : a.slice(a.search(/[=!?]/))
            : a;

  it("one rule: the variant answers its integer * 64 + the tag of the plan applied, * 2^22 + a custom line's tag, a string for another custom or a stale line", async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    for (const [, rule, plans, custom, answered] of lean) {
      const { limiter, clock } = limiterOf({ r: rule }, plans);
      clock.set(T0);
      await limiter.limit("warm-up");
      const answers = await replies(async () => {
        await limiter.limit("id");
        await store(limiter, "id", "=pro");
        await limiter.limit("id", { cost: 2 });
        // a peek: limiterOverrides, whose table gains the tag of the plan (pro is the second)
        await limiter.limit("id", { cost: 0 });
        await store(limiter, "id", custom);
        await limiter.limit("id");
        await store(limiter, "id", "=gone");
        await limiter.limit("id");
      });
      expect(answers.map(applied(["", "=default", "=pro"]))).toEqual([
        "",
        "=pro",
        [6, "=pro"],
        answered,
        "?=gone",
      ]);
      // a plan's answer is an integer, the sliding window's too (mid-window, where its slots would
      // leave the tag no room: it answers them only once clocks disagreed)
      expect(typeof answers[1]).toBe("number");
    }
  });

  it("one fixed window: its variant answers count * 64 + the tag of the plan applied, * 2^22 + a custom line's tag, a string for another custom or a stale line", async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const { limiter, clock } = limiterOf(
      { r: fixedWindow({ limit: 5, window: "1h" }) },
      { pro: { r: { limit: 9 } } },
    );
    clock.set(T0);
    let custom: Awaited<ReturnType<typeof limiter.limit>> | undefined;
    const answers = await replies(async () => {
      await limiter.limit("id");
      await store(limiter, "id", "=pro");
      await limiter.limit("id", { cost: 2 });
      await store(limiter, "id", "!fixedWindow 7 3600000 0");
      custom = await limiter.limit("id");
      // a changed value of 5 digits leaves no room: the line
      await store(limiter, "id", "!fixedWindow 10000 3600000 0");
      await limiter.limit("id");
      await store(limiter, "id", "=gone");
      await limiter.limit("id");
    });
    expect(answers).toEqual([
      1 * 64,
      3 * 64 + 2,
      4 * 2 ** 22 + (7 * 4 + 1) * 64 + 63,
      "5!fixedWindow 10000 3600000 0",
      "6?=gone",
    ]);
    expect(answers.map(applied(["", "=default", "=pro"]))).toEqual([
      "",
      "=pro",
      "!1=7",
      "!fixedWindow 10000 3600000 0",
      "?=gone",
    ]);
    expect(custom).toMatchObject({ allowed: true, limit: 7, remaining: 3, plan: "custom" });
    expect(custom?.decidedBy?.map((r) => [r.algorithm, r.limit])).toEqual([["fixedWindow", 7]]);
  });

  it("one rule: a value written by hand that starts a plan's line reads as stale, not as an error or the plan", async () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const cases = [
      { rule: fixedWindow({ limit: 3, window: "1h" }), pro: { limit: 5 } },
      { rule: gcra({ limit: 3, period: "1h", burst: 3 }), pro: { burst: 5 } },
    ];
    for (const { rule, pro } of cases) {
      const { limiter, clock } = limiterOf({ r: rule }, { pro: { r: pro } });
      clock.set(T0);
      const key = new RuleKeys(limiter.prefix, limiter.rules).override("h");
      // a prefix of "=pro\n" with no line's end: not the engine's, and no plan's line
      for (const junk of ["=pr", "=pro", "=p"]) {
        await redis.set(key, junk);
        const d = await limiter.limit("h");
        expect(d).toMatchObject({ source: "redis", plan: "default", limit: 3 });
      }
      await redis.set(key, "=pro\n");
      expect(await limiter.limit("h")).toMatchObject({ plan: "pro", limit: 5 });
    }
    expect(warn.mock.calls.map((call) => String(call[0])).some((line) => line.includes('"=pr"'))).toBe(true);
  });

  it("one gcra: a plan stored alone (its line as the value) that changes the period applies it", async () => {
    const { limiter, clock } = limiterOf(
      { r: gcra({ limit: 7, period: "1h", burst: 5 }) },
      { pro: { r: { burst: 9 } }, slow: { r: { limit: 3, period: "2h" } } },
    );
    clock.set(T0);
    await limiter.overrides.set("s", { plan: "slow" });
    await limiter.overrides.set("p", { plan: "pro" });
    expect(await admitted(limiter, "s", 8)).toEqual({ n: 5, plans: ["slow"] });
    expect(await admitted(limiter, "p", 12)).toEqual({ n: 9, plans: ["pro"] });
    const slow = await limiter.limit("s");
    expect(
      slow.decidedBy?.map((r) => [(r as { rate?: number }).rate, (r as { period?: number }).period]),
    ).toEqual([[3, 7_200_000]]);
    // 5 units at 2 h / 3 each: back to the full burst after 10/3 h
    expect(slow.resetAt).toBe(T0 + Math.ceil((5 * 7_200_000) / 3));
  });

  it("one rule: a custom line's tag that the integer leaves no room for comes back as the line's parameters", async () => {
    const { limiter, clock } = limiterOf({ r: gcra({ limit: 1000, period: "1h", burst: 1000 }) });
    clock.set(T0);
    await store(limiter, "id", "!gcra 1000 3600000 999", {});
    let decisions: Awaited<ReturnType<typeof limiter.limit>>[] = [];
    const answers = await replies(async () => {
      // d = units * period: 3.6e6 fits beside the tag, 600 units more (2.16e9 in all) do not
      decisions = [await limiter.limit("id"), await limiter.limit("id", { cost: 600 })];
    });
    expect(answers).toEqual([3_600_000 * 2 ** 22 + (999 * 4 + 3) * 64 + 63, "2163600000!1000 3600000 999"]);
    for (const decision of decisions) {
      expect(decision).toMatchObject({ allowed: true, plan: "custom" });
      expect(decision.decidedBy?.map((r) => [r.algorithm, (r as { burst?: number }).burst])).toEqual([
        ["gcra", 999],
      ]);
    }
  });

  it("one sliding window: a plan's other window counts in its own key; a cost above the applied limit is never admitted", async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const { limiter, clock } = limiterOf(
      { r: slidingWindow({ limit: 3, window: "1h" }) },
      { long: { r: { limit: 5, window: "2h" } } },
    );
    clock.set(T0);
    await store(limiter, "s", "=long", { plan: "long" });
    expect(await admitted(limiter, "s", 8)).toEqual({ n: 5, plans: ["long"] });
    expect(await redis.exists(limiter.keys("s", T0, "long")[0]!)).toBe(1);
    expect(await redis.exists(limiter.keys("s", T0)[0]!)).toBe(0);
    await store(limiter, "c", "!slidingWindow 4 7200000 0", {});
    expect(await admitted(limiter, "c", 8)).toEqual({ n: 4, plans: ["custom"] });
    await store(limiter, "n", "!slidingWindow 2 3600000 0", {});
    expect(await limiter.limit("n", { cost: 3 })).toMatchObject({
      allowed: false,
      remaining: 2,
      retryAfter: Number.POSITIVE_INFINITY,
      plan: "custom",
    });
    expect(await redis.exists(limiter.keys("n", T0)[0]!)).toBe(0);
    // a limit across the packed state's bound (2^25) is stale: the base rules
    await store(limiter, "p", `!slidingWindow ${2 ** 25} 3600000 0`, {});
    expect(await admitted(limiter, "p", 5)).toEqual({ n: 3, plans: ["default"] });
  });

  it("one gcra: a cost above the applied burst is never admitted, and nothing is written", async () => {
    const { limiter, clock } = limiterOf(rules, plans);
    clock.set(T0);
    await store(limiter, "b", "!gcra 5 3600000 2", {});
    expect(await limiter.limit("b", { cost: 3 })).toMatchObject({
      allowed: false,
      remaining: 2,
      retryAfter: Number.POSITIVE_INFINITY,
      plan: "custom",
    });
    expect(await redis.exists(limiter.keys("b", T0)[0]!)).toBe(0);
    expect(await admitted(limiter, "b", 4)).toEqual({ n: 2, plans: ["custom"] });
  });

  it("applies the override to a lease's reservation too", async () => {
    const { limiter, clock } = limiterOf(rules, plans, { lease: { max: 4, ttl: "1s" } });
    clock.set(T0);
    await store(limiter, "l", "!gcra 6 3600000 6", {});
    const d = await limiter.limit("l");
    expect(d).toMatchObject({ allowed: true, plan: "custom" });
    await limiter.dispose();
  });

  it("keeps the override key in the identifier's hash tag", () => {
    const { limiter } = limiterOf(rules);
    const keys = new RuleKeys(limiter.prefix, limiter.rules);
    for (const id of ["user:42", "{a}", "}{", "x".repeat(500)]) {
      const override = keys.override(id);
      const [rule] = limiter.keys(id);
      const tag = (key: string) => key.slice(0, key.indexOf("}") + 1);
      expect(override).toBe(`${tag(rule!)}:override`);
    }
  });
});

describe("on a 3-node Redis Cluster", () => {
  let cluster: Cluster;
  beforeAll(async () => {
    cluster = await startCluster();
  }, 30_000);
  afterAll(async () => {
    await cluster?.stop();
  });

  it("reads the override in the slot of the identifier's rule keys, for any identifier", async () => {
    const { limiter } = limiterOf({
      g: gcra({ limit: 10, period: "10m" }),
      m: fixedWindow({ limit: 100, window: "1m" }),
    });
    const keys = new RuleKeys(limiter.prefix, limiter.rules);
    // the table of a call under the base rules, the Limiter's only plan
    const table = "\n=default\nA0 10 600000 10 0 100 60000 0 \n#2 60000 0\n";
    for (const id of ["user:42", "{a}", "\u{1F600}", "x".repeat(10_000)]) {
      const override = keys.override(id);
      const all = [...limiter.keys(id, T0), override];
      const slots = await Promise.all(all.map((key) => cluster.call(["CLUSTER", "KEYSLOT", key])));
      expect(new Set(slots).size).toBe(1);
      await cluster.call(["SET", override, "!gcra 3 600000 3 fixedWindow 100 60000 0\n{}"]);
      const decide = () =>
        cluster.call([
          "EVAL",
          LIMITER_OVERRIDES.text,
          all.length,
          ...all,
          ...limiterArgs(limiter.rules, T0, 3),
          "",
          table,
        ]);
      // the custom burst of 3 takes the cost of 3, then nothing more; the parameters applied come back
      const reply = (await decide()) as unknown[];
      // as a bulk string (bytes on this connection)
      expect([...reply.slice(0, -1), String(reply.at(-1))]).toEqual([
        ...[1, 0, T0 + 600_000, 0, T0 + 600_000],
        ...[1, 97, T0 - (T0 % 60_000) + 60_000, 0, T0 - (T0 % 60_000)],
        "!3 600000 3 100 60000 0",
      ]);
      expect(((await decide()) as unknown[])[0]).toBe(0);
    }
  });
});

describe("an upgrade after denials, through limiter.overrides.set", () => {
  for (const [name, rule, pro] of [
    ["fixedWindow", fixedWindow({ limit: 10, window: "1h" }), { limit: 100 }],
    ["slidingWindow", slidingWindow({ limit: 10, window: "1h" }), { limit: 100 }],
    ["gcra", gcra({ limit: 10, period: "1h" }), { limit: 100 }],
  ] as const) {
    it(`${name}: 10 admitted and 5 denied under the base rules, then exactly 90 more under pro`, async () => {
      const { limiter } = limiterOf({ r: rule }, { pro: { r: pro } });
      expect((await admitted(limiter, "up", 15)).n).toBe(10);
      await limiter.overrides.set("up", { plan: "pro" });
      expect(await admitted(limiter, "up", 120)).toEqual({ n: 90, plans: ["pro"] });
    });
  }
});
