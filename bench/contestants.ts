// The two libraries behind one small interface, so every part of the benchmark drives them the same way.
import { Ratelimit } from "@upstash/ratelimit";
import type { Redis } from "@upstash/redis";
import type { Decision, RuleConfig } from "../src/index.js";
import { edgelimit } from "./load.js";

const { fixedWindow, gcra, Limiter, slidingLog, slidingWindow, tokenBucket } = edgelimit;
const allowedOf = (d: Decision) => d.allowed;
const successOf = (r: { success: boolean }) => r.success;

export type Lib = "edgelimit" | "upstash";
export type Algo = "fixedWindow" | "slidingWindow" | "slidingLog" | "tokenBucket" | "gcra";

export const LIB_LABEL: Record<Lib, string> = { edgelimit: "edgelimit", upstash: "@upstash/ratelimit" };

/** The algorithms each library has (the peer has no sliding log and no GCRA). */
export const ALGOS: Record<Lib, readonly Algo[]> = {
  edgelimit: ["fixedWindow", "slidingWindow", "slidingLog", "tokenBucket", "gcra"],
  upstash: ["fixedWindow", "slidingWindow", "tokenBucket"],
};

/**
 * One policy, stated once: `limit` units per `window` ms. Buckets get capacity `limit` and refill the
 * same long-run rate, in tenths of the window when it divides evenly (100 per 10 s → capacity 100,
 * 10 per 1 s), else `limit` per `window`.
 */
export interface Policy {
  limit: number;
  window: number;
}

export function bucketOf(p: Policy): { capacity: number; refillRate: number; interval: number } {
  if (p.limit % 10 === 0 && p.window % 10 === 0) {
    return { capacity: p.limit, refillRate: p.limit / 10, interval: p.window / 10 };
  }
  return { capacity: p.limit, refillRate: p.limit, interval: p.window };
}

export function ruleOf(algo: Algo, p: Policy): RuleConfig {
  const b = bucketOf(p);
  switch (algo) {
    case "fixedWindow":
      return fixedWindow({ limit: p.limit, window: p.window });
    case "slidingWindow":
      return slidingWindow({ limit: p.limit, window: p.window });
    case "slidingLog":
      return slidingLog({ limit: p.limit, window: p.window });
    case "tokenBucket":
      return tokenBucket({ capacity: b.capacity, refillRate: b.refillRate, interval: b.interval });
    case "gcra":
      return gcra({ limit: b.refillRate, period: b.interval, burst: b.capacity });
  }
}

type PeerLimiter = ReturnType<typeof Ratelimit.fixedWindow>;

function peerLimiter(algo: Algo, p: Policy): PeerLimiter {
  const b = bucketOf(p);
  switch (algo) {
    case "fixedWindow":
      return Ratelimit.fixedWindow(p.limit, `${p.window} ms`);
    case "slidingWindow":
      return Ratelimit.slidingWindow(p.limit, `${p.window} ms`);
    case "tokenBucket":
      return Ratelimit.tokenBucket(b.refillRate, `${b.interval} ms`, b.capacity);
    default:
      throw new Error(`@upstash/ratelimit has no ${algo}`);
  }
}

export interface ContestantOptions {
  redis: Redis;
  prefix: string;
  /** One policy per rule (several: one edgelimit Limiter with that many rules, or that many peer instances). */
  policies: Policy[];
  /** Deny cache (edgelimit) / ephemeralCache (peer): "default" leaves each library's default (both on). */
  cache: "default" | "off";
  /** Injected time, epoch ms. edgelimit: the `clock` option; peer: Date.now replaced during the synchronous part of limit(). */
  clock?: () => number;
  /** edgelimit's `batchWindow` (ms to collect decisions into one request; default 0: one tick). */
  batchWindow?: number;
  /** Several peer instances: call them all at once (Promise.all, auto-pipelined) or one after another, stopping at the first deny. */
  peerMulti?: "parallel" | "sequential";
}

export interface Contestant {
  readonly label: string;
  readonly lib: Lib;
  readonly algo: Algo;
  /** One decision; resolves to whether it was admitted. */
  limit(id: string): Promise<boolean>;
  /** The Redis key patterns (for SCAN MATCH) holding `id`'s state. */
  keyPatterns(id: string): string[];
}

export function contestant(lib: Lib, algo: Algo, o: ContestantOptions): Contestant {
  const n = o.policies.length;
  const label = `${LIB_LABEL[lib]} ${algo}${n > 1 ? ` ×${n} rules` : ""}${lib === "upstash" && n > 1 ? ` (${o.peerMulti ?? "parallel"})` : ""}${o.batchWindow ? ` (batchWindow ${o.batchWindow} ms)` : ""}`;
  if (lib === "edgelimit") {
    const rules: Record<string, RuleConfig> = {};
    o.policies.forEach((p, i) => {
      rules[`r${i}`] = ruleOf(algo, p);
    });
    const limiter = new Limiter({
      redis: o.redis,
      prefix: o.prefix,
      rules,
      denyCache: o.cache === "off" ? false : undefined,
      clock: o.clock,
      batchWindow: o.batchWindow,
    });
    return {
      label,
      lib,
      algo,
      limit: (id) => limiter.limit(id).then(allowedOf),
      keyPatterns: (id) => limiter.keys(id).map(globEscape),
    };
  }
  const instances = o.policies.map(
    (p, i) =>
      new Ratelimit({
        redis: o.redis,
        limiter: peerLimiter(algo, p),
        prefix: n > 1 ? `${o.prefix}:r${i}` : o.prefix,
        ephemeralCache: o.cache === "off" ? false : undefined,
        enableTelemetry: false,
        analytics: false,
      }),
  );
  const clock = o.clock;
  const one = (rl: Ratelimit, id: string): Promise<boolean> => {
    if (clock === undefined) return rl.limit(id).then(successOf);
    // @upstash/ratelimit reads Date.now() only in the synchronous part of limit() (before its first
    // await): replacing it for exactly that span injects the time without touching anything else.
    const real = Date.now;
    Date.now = clock;
    let pending: Promise<{ success: boolean }>;
    try {
      pending = rl.limit(id);
    } finally {
      Date.now = real;
    }
    return pending.then(successOf);
  };
  const first = instances[0]!;
  const limit =
    n === 1
      ? (id: string) => one(first, id)
      : o.peerMulti === "sequential"
        ? async (id: string) => {
            for (const rl of instances) if (!(await one(rl, id))) return false;
            return true;
          }
        : (id: string) => Promise.all(instances.map((rl) => one(rl, id))).then((all) => all.every(Boolean));
  return {
    label,
    lib,
    algo,
    limit,
    keyPatterns: (id) =>
      instances.map((_, i) => {
        const base = globEscape(`${n > 1 ? `${o.prefix}:r${i}` : o.prefix}:${id}`);
        return algo === "tokenBucket" ? base : `${base}:*`;
      }),
  };
}

function globEscape(s: string): string {
  return s.replace(/[*?[\]\\]/g, (c) => `\\${c}`);
}
