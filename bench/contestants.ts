// The two libraries behind one small interface, so every part drives them the same way.
import { Ratelimit } from "@upstash/ratelimit";
import type { Redis } from "@upstash/redis";
import type { RuleConfig } from "../src/index.js";
import { edgelimit } from "./load.js";

const { fixedWindow, gcra, Limiter, slidingLog, slidingWindow, tokenBucket } = edgelimit;

export type Lib = "edgelimit" | "upstash";
/** cachedFixedWindow: the peer's experimental local-first fixed window. */
export type Algo =
  | "fixedWindow"
  | "slidingWindow"
  | "slidingLog"
  | "tokenBucket"
  | "gcra"
  | "cachedFixedWindow";

export const LIB_LABEL: Record<Lib, string> = { edgelimit: "edgelimit", upstash: "@upstash/ratelimit" };

/** The algorithm pairs compared side by side: edgelimit's, then the peer's nearest. */
export const PAIRS: [Algo, Algo][] = [
  ["fixedWindow", "fixedWindow"],
  ["slidingWindow", "slidingWindow"],
  ["tokenBucket", "tokenBucket"],
  ["gcra", "tokenBucket"],
  ["slidingLog", "slidingWindow"],
];

/**
 * `limit` units per `window` ms. Buckets get capacity `limit` and refill the same long-run rate in
 * tenths of the window when it divides evenly (100 per 10 s → capacity 100, 10 per 1 s).
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

function ruleOf(algo: Algo, p: Policy): RuleConfig {
  const b = bucketOf(p);
  if (algo === "fixedWindow") return fixedWindow({ limit: p.limit, window: p.window });
  if (algo === "slidingWindow") return slidingWindow({ limit: p.limit, window: p.window });
  if (algo === "slidingLog") return slidingLog({ limit: p.limit, window: p.window });
  if (algo === "tokenBucket") return tokenBucket(b);
  if (algo === "gcra") return gcra({ limit: b.refillRate, period: b.interval, burst: b.capacity });
  throw new Error(`edgelimit has no ${algo}`);
}

function peerAlgorithm(algo: Algo, p: Policy) {
  const b = bucketOf(p);
  if (algo === "fixedWindow") return Ratelimit.fixedWindow(p.limit, `${p.window} ms`);
  if (algo === "cachedFixedWindow") return Ratelimit.cachedFixedWindow(p.limit, `${p.window} ms`);
  if (algo === "slidingWindow") return Ratelimit.slidingWindow(p.limit, `${p.window} ms`);
  if (algo === "tokenBucket") return Ratelimit.tokenBucket(b.refillRate, `${b.interval} ms`, b.capacity);
  throw new Error(`@upstash/ratelimit has no ${algo}`);
}

export interface Entry {
  lib: Lib;
  algo: Algo;
  /** Several rules: one edgelimit Limiter with that many, or that many peer instances awaited in turn. */
  rules?: number;
  /** edgelimit's `lease` option. */
  lease?: { max: number; ttl: string };
}

/** Every algorithm of both libraries, once. */
export const ALL: Entry[] = [
  ...(["fixedWindow", "slidingWindow", "slidingLog", "tokenBucket", "gcra"] as const).map(
    (algo): Entry => ({ lib: "edgelimit", algo }),
  ),
  ...(["fixedWindow", "slidingWindow", "tokenBucket"] as const).map(
    (algo): Entry => ({ lib: "upstash", algo }),
  ),
];

export interface ContestantOptions {
  redis: Redis;
  prefix: string;
  policy: Policy;
  /** Deny cache (edgelimit) / ephemeralCache (peer): each library's default (both on), or off. */
  cache: "default" | "off";
  /** Time, epoch ms. edgelimit: `clock`; peer: Date.now replaced during the synchronous part of limit(). */
  clock?: () => number;
}

export interface Outcome {
  allowed: boolean;
  /** Answered in the isolate with no request on its path (edgelimit: source "cache" or "lease"). */
  local: boolean;
  /** Redis failed or timed out (edgelimit: source "error"; the peer: reason "timeout"). */
  error: boolean;
}

export interface Contestant {
  readonly label: string;
  limit(id: string): Promise<Outcome>;
  /** Gives leased units back (edgelimit's dispose, when it has one); the peer has nothing to do. */
  close(): Promise<void>;
}

export const labelOf = (e: Entry) =>
  `${LIB_LABEL[e.lib]} ${e.algo}${(e.rules ?? 1) > 1 ? ` ×${e.rules} rules` : ""}${e.lease ? ` + lease (max ${e.lease.max}, ttl ${e.lease.ttl})` : ""}`;

/** Throws "lease: not a Limiter option" until the Limiter has leases. */
export function contestant(e: Entry, o: ContestantOptions): Contestant {
  const n = e.rules ?? 1;
  const label = labelOf(e);
  if (e.lib === "edgelimit") {
    const rules: Record<string, RuleConfig> = {};
    for (let i = 0; i < n; i++)
      rules[`r${i}`] = ruleOf(e.algo, { ...o.policy, window: o.policy.window * (i + 1) });
    const limiter = new Limiter({
      redis: o.redis,
      prefix: o.prefix,
      rules,
      denyCache: o.cache === "off" ? false : undefined,
      clock: o.clock,
      ...(e.lease ? { lease: e.lease } : {}),
    });
    const disposable = limiter as unknown as { dispose?: () => unknown };
    return {
      label,
      limit: (id) =>
        limiter.limit(id).then((d) => ({
          allowed: d.allowed,
          local: d.source !== "redis" && d.source !== "error",
          error: d.source === "error",
        })),
      close: async () => {
        await disposable.dispose?.();
      },
    };
  }
  const instances = Array.from(
    { length: n },
    (_, i) =>
      new Ratelimit({
        redis: o.redis,
        limiter: peerAlgorithm(e.algo, { ...o.policy, window: o.policy.window * (i + 1) }),
        prefix: `${o.prefix}:r${i}`,
        ephemeralCache: o.cache === "off" ? false : undefined,
        enableTelemetry: false,
        analytics: false,
      }),
  );
  const clock = o.clock;
  const one = (rl: Ratelimit, id: string) => {
    // The peer reads Date.now() only before its first await: replace it for exactly that span.
    const real = Date.now;
    if (clock) {
      const now = clock();
      Date.now = () => now;
    }
    try {
      return rl.limit(id);
    } finally {
      Date.now = real;
    }
  };
  return {
    label,
    limit: async (id) => {
      let local = true;
      let error = false;
      for (const rl of instances) {
        // a decision answered from the library's cache settles within a few microtasks; one that
        // waits on I/O cannot settle before the event loop turns
        let settled = false;
        const pending = one(rl, id).then((r) => {
          settled = true;
          return r;
        });
        for (let i = 0; i < 64 && !settled; i++) await null;
        local &&= settled;
        const r = await pending;
        error ||= r.reason === "timeout";
        if (!r.success) return { allowed: false, local, error };
      }
      return { allowed: true, local, error };
    },
    close: async () => {},
  };
}
