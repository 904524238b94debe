// The two libraries behind one small interface, so every part drives them the same way, and each
// library's rule for an algorithm, built in one place.
import { Ratelimit } from "@upstash/ratelimit";
import type { Redis } from "@upstash/redis";
import type { RuleConfig } from "../src/index.js";
import { atTime } from "./harness.js";
import { edgelimit, upstashEntry } from "./load.js";
import { bucketOf, type Policy } from "./scenarios.js";

export { bucketOf, type Policy };

const { fixedWindow, gcra, Limiter, slidingLog, slidingWindow, tokenBucket } = edgelimit;

const OURS = ["fixedWindow", "slidingWindow", "slidingLog", "tokenBucket", "gcra"] as const;
/** cachedFixedWindow: the peer's experimental fixed window that answers from memory first. */
const PEERS = ["fixedWindow", "slidingWindow", "tokenBucket", "cachedFixedWindow"] as const;
export type OurAlgo = (typeof OURS)[number];
export type PeerAlgo = (typeof PEERS)[number];
export type Algo = OurAlgo | PeerAlgo;
type Bucket = ReturnType<typeof bucketOf>;

/** Each edgelimit algorithm and the peer's it is measured against, in the order of the tables. */
export const PAIRS: readonly { algo: OurAlgo; peer?: PeerAlgo }[] = [
  { algo: "fixedWindow", peer: "fixedWindow" },
  { algo: "slidingWindow", peer: "slidingWindow" },
  { algo: "tokenBucket", peer: "tokenBucket" },
  { algo: "gcra", peer: "tokenBucket" },
  { algo: "slidingLog" },
];
/** "gcra (peer: tokenBucket)" where the two differ. */
export const pairName = (p: { algo: string; peer?: string }) =>
  p.peer && p.peer !== p.algo ? `${p.algo} (peer: ${p.peer})` : p.algo;

/** edgelimit's rule: windows of `p.limit` per `p.window` ms; buckets `b` (gcra: the same bucket). */
export function ourRule(algo: Algo, p: Policy, b: Bucket = bucketOf(p)): RuleConfig {
  if (algo === "tokenBucket") return tokenBucket(b);
  if (algo === "gcra") return gcra({ limit: b.refillRate, period: b.interval, burst: b.capacity });
  return { fixedWindow, slidingWindow, slidingLog }[algo as "fixedWindow"]({
    limit: p.limit,
    window: p.window,
  });
}

/** The peer's algorithm for the same rule. */
export function peerLimiter(algo: Algo, p: Policy, b: Bucket = bucketOf(p)) {
  if (algo === "tokenBucket") return Ratelimit.tokenBucket(b.refillRate, `${b.interval} ms`, b.capacity);
  return Ratelimit[algo as "fixedWindow"](p.limit, `${p.window} ms`);
}

/** The same algorithm from edgelimit/upstash's factories (the peer's API on edgelimit's engine). */
export function entryLimiter(algo: Algo, p: Policy, b: Bucket = bucketOf(p)) {
  const { Ratelimit: Entry } = upstashEntry;
  if (algo === "tokenBucket") return Entry.tokenBucket(b.refillRate, `${b.interval} ms`, b.capacity);
  return Entry[algo as "fixedWindow"](p.limit, `${p.window} ms`);
}

export interface Entry {
  /** "entry": edgelimit/upstash, the peer's API (and its algorithm names) on edgelimit's engine. */
  lib: "edgelimit" | "upstash" | "entry";
  algo: Algo;
  /** Several rules: one Limiter with that many, or that many peer limiters awaited in turn. */
  rules?: number;
  /** edgelimit's `lease` option. */
  lease?: { max: number; ttl: string };
}

/** Every algorithm of both libraries, once. */
export const ALL: Entry[] = [
  ...OURS.map((algo): Entry => ({ lib: "edgelimit", algo })),
  ...PEERS.slice(0, 3).map((algo): Entry => ({ lib: "upstash", algo })),
];

export const labelOf = (e: Entry) =>
  `${{ edgelimit: "edgelimit", upstash: "@upstash/ratelimit", entry: "edgelimit/upstash" }[e.lib]} ${e.algo}${(e.rules ?? 1) > 1 ? ` ×${e.rules} rules` : ""}${e.lease ? ` + lease (max ${e.lease.max}, ttl ${e.lease.ttl})` : ""}`;

export interface ContestantOptions {
  redis: Redis;
  prefix: string;
  policy: Policy;
  /** Deny cache (edgelimit) / ephemeralCache (peer): each library's default (both on), or off. */
  cache: "default" | "off";
  /** Time, epoch ms. edgelimit: `clock`; the peer: Date.now replaced during the synchronous part of limit(). */
  clock?: () => number;
}

export interface Outcome {
  allowed: boolean;
  /** Answered without waiting on Redis (edgelimit: source "cache" or "lease"). */
  local: boolean;
  /** Redis failed or timed out (edgelimit: source "error"; the peer: reason "timeout"). */
  error: boolean;
}

export interface Contestant {
  limit(id: string): Promise<Outcome>;
  /** Gives leased units back (edgelimit's dispose); the peer has nothing to give back. */
  close(): Promise<void>;
}

export function contestant(e: Entry, o: ContestantOptions): Contestant {
  const policies = Array.from({ length: e.rules ?? 1 }, (_, i) => ({
    ...o.policy,
    window: o.policy.window * (i + 1),
  }));
  if (e.lib === "edgelimit") {
    const limiter = new Limiter({
      redis: o.redis,
      prefix: o.prefix,
      rules: Object.fromEntries(policies.map((p, i) => [`r${i}`, ourRule(e.algo, p)])),
      denyCache: o.cache === "off" ? false : undefined,
      clock: o.clock,
      ...(e.lease ? { lease: e.lease } : {}),
    });
    return {
      limit: async (id) => {
        const { allowed, source } = await limiter.limit(id);
        return { allowed, local: source !== "redis" && source !== "error", error: source === "error" };
      },
      close: () => limiter.dispose(),
    };
  }
  if (e.lib === "entry") {
    // one instance per rule, awaited in turn, as code written against the peer does
    const entries = policies.map(
      (p, i) =>
        new upstashEntry.Ratelimit({
          redis: o.redis,
          limiter: entryLimiter(e.algo, p),
          prefix: `${o.prefix}:r${i}`,
          ephemeralCache: o.cache === "off" ? false : undefined,
          clock: o.clock,
        }),
    );
    return {
      limit: async (id) => {
        for (const rl of entries) {
          const r = await rl.limit(id);
          if (r.reason === "timeout") return { allowed: true, local: false, error: true };
          if (!r.success) return { allowed: false, local: r.reason === "cacheBlock", error: false };
        }
        return { allowed: true, local: false, error: false };
      },
      close: async () => {},
    };
  }
  const instances = policies.map(
    (p, i) =>
      new Ratelimit({
        redis: o.redis,
        limiter: peerLimiter(e.algo, p),
        prefix: `${o.prefix}:r${i}`,
        ephemeralCache: o.cache === "off" ? false : undefined,
        enableTelemetry: false,
        analytics: false,
      }),
  );
  return {
    limit: async (id) => {
      let local = true;
      let error = false;
      for (const rl of instances) {
        // an answer from the library's memory settles within a few microtasks; one that waits on I/O
        // cannot settle before the event loop turns
        let settled = false;
        const pending = atTime(o.clock?.(), () => rl.limit(id)).finally(() => {
          settled = true;
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
