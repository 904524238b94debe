// A load of nested decisions for the tests on one redis-server and on the 3-node cluster: 4 instances
// (Limiters on one Redis, each with its own deny cache and leases, as isolates are) × 64 callers in
// flight, random users in random orgs under one global limit, random costs, on a clock that does not
// move (so every limit is exact: nothing refills). Returns what each identifier was admitted, and
// what each rule's state says it took (read back with a peek once every decision and refund is done).
import { expect } from "vitest";
import { fixedWindow, gcra, Limiter, type LimiterOptions } from "../../src/index.js";
import { manualClock, uniquePrefix } from "../support.js";

export const LOAD_RULES = {
  perUser: gcra({ limit: 10, period: "1m", by: "user" }),
  perOrg: fixedWindow({ limit: 25, window: "1h", by: "org" }),
  global: gcra({ limit: 60, period: "1m", by: "global" }),
};
export const LIMITS = { perUser: 10, perOrg: 25, global: 60 };

export interface LoadResult {
  admitted: { perUser: Map<string, number>; perOrg: Map<string, number>; global: number };
  /** Units each identifier's rule holds as taken, after the run (limit - remaining of a peek). */
  taken: { perUser: Map<string, number>; perOrg: Map<string, number>; global: number };
  decisions: number;
  denied: number;
}

/** A seeded generator (mulberry32): the run is the same every time. */
function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export async function nestedLoad(
  redis: LimiterOptions["redis"],
  options: Partial<LimiterOptions> = {},
  decisionsPerCaller = 6,
): Promise<LoadResult> {
  const clock = manualClock();
  const prefix = uniquePrefix("nested-load");
  const instances = Array.from(
    { length: 4 },
    // Not about timeouts: a background top-up or refund that outlives its timeout on a loaded machine
    // may still have landed, so its units stay consumed (fewer admitted, never more, by design), which
    // the exact accounting below would read as a unit charged for nothing.
    () => new Limiter({ redis, prefix, rules: LOAD_RULES, clock, timeout: 15_000, ...options }),
  );
  const next = random(42);
  const users = Array.from({ length: 12 }, (_, i) => `u${i}`);
  const orgOf = (user: string) => `org${Number(user.slice(1)) % 4}`;
  const admitted = { perUser: new Map<string, number>(), perOrg: new Map<string, number>(), global: 0 };
  const add = (map: Map<string, number>, key: string, units: number) =>
    map.set(key, (map.get(key) ?? 0) + units);
  let decisions = 0;
  let denied = 0;
  await Promise.all(
    Array.from({ length: 64 }, async (_, caller) => {
      const limiter = instances[caller % 4]!;
      for (let i = 0; i < decisionsPerCaller; i++) {
        const user = users[Math.floor(next() * users.length)]!;
        const cost = 1 + Math.floor(next() * 3);
        const d = await limiter.limit({ user, org: orgOf(user), global: "all" }, { cost });
        decisions += 1;
        if (d.source === "error") throw d.error;
        if (!d.allowed) {
          denied += 1;
          continue;
        }
        add(admitted.perUser, user, cost);
        add(admitted.perOrg, orgOf(user), cost);
        admitted.global += cost;
      }
    }),
  );
  await Promise.all(instances.map((limiter) => limiter.dispose()));
  const reader = new Limiter({
    redis,
    prefix,
    rules: LOAD_RULES,
    clock,
    denyCache: false,
    cluster: options.cluster,
  });
  const taken = { perUser: new Map<string, number>(), perOrg: new Map<string, number>(), global: 0 };
  for (const user of users) {
    const d = await reader.limit({ user, org: orgOf(user), global: "all" }, { cost: 0 });
    taken.perUser.set(user, LIMITS.perUser - d.rules.perUser!.remaining);
    taken.perOrg.set(orgOf(user), LIMITS.perOrg - d.rules.perOrg!.remaining);
    taken.global = LIMITS.global - d.rules.global!.remaining;
  }
  return { admitted, taken, decisions, denied };
}

/**
 * Never over on any identifier, and nothing charged for a denial: what each identifier's rules hold
 * as taken is exactly what was admitted.
 */
export function expectWithin(result: LoadResult): void {
  const { admitted, taken } = result;
  expect(result.denied).toBeGreaterThan(0);
  for (const [user, units] of admitted.perUser) expect(units, user).toBeLessThanOrEqual(LIMITS.perUser);
  for (const [org, units] of admitted.perOrg) expect(units, org).toBeLessThanOrEqual(LIMITS.perOrg);
  expect(admitted.global).toBeLessThanOrEqual(LIMITS.global);
  expect(Object.fromEntries(taken.perUser)).toEqual(
    Object.fromEntries([...taken.perUser.keys()].map((user) => [user, admitted.perUser.get(user) ?? 0])),
  );
  expect(Object.fromEntries(taken.perOrg)).toEqual(
    Object.fromEntries([...taken.perOrg.keys()].map((org) => [org, admitted.perOrg.get(org) ?? 0])),
  );
  expect(taken.global).toBe(admitted.global);
}
