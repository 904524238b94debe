// Part 4's tokens per minute: what a request costs is known only after its response (an LLM call's
// tokens); a fixed cost per request, or a reservation settled when the response ends (the section says how).
import { Ratelimit } from "@upstash/ratelimit";
import { ourRule, type Policy, peerLimiter } from "./contestants.js";
import { atTime, type BenchEnv, fmt, log, type Part, table } from "./harness.js";
import { edgelimit } from "./load.js";
import { rng, SIM_T0 as T0 } from "./scenarios.js";

/** 100,000 tokens a minute. Buckets: capacity 100,000, 10,000 back every 6 s. */
export const TOKENS_POLICY: Policy = { limit: 100_000, window: 60_000 };
/** What each request reserves (or is charged, with a fixed cost). */
export const RESERVATION = 1_000;
/** Requests a minute, evenly spaced. */
const RATE = 600;
const durationMs = (smoke: boolean) => (smoke ? 60_000 : 180_000);

interface Request {
  /** Arrival, ms after T0. */
  t: number;
  /** When its response has ended, ms after T0. */
  done: number;
  /** What it really cost. */
  tokens: number;
}

/**
 * The workload: RATE requests a minute; true costs log-normal around 300 tokens (mean about 400, from
 * 20 to 4,000), so a request reserving 1,000 usually gives most back and now and then runs into debt;
 * responses take 1 to 5 s.
 */
export function workload(durationMs: number, seed = 7): Request[] {
  const random = rng(seed);
  const normal = () => Math.sqrt(-2 * Math.log(1 - random())) * Math.cos(2 * Math.PI * random());
  const spacing = 60_000 / RATE;
  const out: Request[] = [];
  for (let t = 0; t < durationMs; t += spacing) {
    const tokens = Math.min(4_000, Math.max(20, Math.round(Math.exp(Math.log(300) + 0.8 * normal()))));
    out.push({ t, done: t + 1_000 + Math.floor(random() * 4_000), tokens });
  }
  return out;
}

type Lib = "edgelimit" | "@upstash/ratelimit";
type Algo = "fixedWindow" | "tokenBucket";
type Charging = "fixed cost" | "reserve, then settle";

/**
 * tokens: the true tokens of the admitted requests; allowance: what the rule allows over the run (the
 * limit per minute; buckets: plus their first fill); busiestMinute: the most true tokens admitted in
 * one clock minute; settleErrors: settles that failed, or extras the peer refused (`success: false`).
 */
type TokensRow = Record<
  "requests" | "admitted" | "tokens" | "allowance" | "busiestMinute" | "settleErrors",
  number
> & {
  lib: Lib;
  algo: Algo;
  charging: Charging;
};

/** One contestant: a decision at `now`, and a settle of it at `now` with its true cost. */
interface Contestant {
  limit(now: number): Promise<{ allowed: boolean; settle?: (now: number, tokens: number) => Promise<void> }>;
}

function ours(env: BenchEnv, prefix: string, algo: Algo, charging: Charging): Contestant {
  let clock = T0;
  const limiter = new edgelimit.Limiter({
    redis: env.client(),
    prefix,
    rules: { tokens: ourRule(algo, TOKENS_POLICY) },
    clock: () => clock,
    timeout: 10_000,
  });
  return {
    async limit(now) {
      clock = now;
      const decision = await limiter.limit("caller", { cost: RESERVATION });
      if (charging === "fixed cost" || !decision.allowed) return { allowed: decision.allowed };
      return {
        allowed: true,
        settle: async (at, tokens) => {
          clock = at;
          const settlement = await limiter.settle(decision, tokens);
          if (settlement.error) throw settlement.error;
        },
      };
    },
  };
}

function peer(env: BenchEnv, prefix: string, algo: Algo, charging: Charging): Contestant {
  const rl = new Ratelimit({
    redis: env.client(),
    limiter: peerLimiter(algo, TOKENS_POLICY),
    prefix,
    enableTelemetry: false,
    analytics: false,
  });
  const at = (now: number, rate: number) => atTime(now, () => rl.limit("caller", { rate }));
  return {
    async limit(now) {
      const { success } = await at(now, RESERVATION);
      if (charging === "fixed cost" || !success) return { allowed: success };
      return {
        allowed: true,
        settle: async (when, tokens) => {
          // the peer has no settle: the difference as a rate of its own, negative to give units back;
          // an extra it cannot fit is refused, not charged
          const { success } = await at(when, tokens - RESERVATION);
          if (!success) throw new Error("the extra was refused");
        },
      };
    },
  };
}

async function runTokens(env: BenchEnv, tag: string, durationMs: number): Promise<TokensRow[]> {
  const requests = workload(durationMs);
  const rows: TokensRow[] = [];
  let run = 0;
  for (const lib of ["edgelimit", "@upstash/ratelimit"] as const) {
    for (const algo of ["fixedWindow", "tokenBucket"] as const) {
      for (const charging of ["fixed cost", "reserve, then settle"] as const) {
        log(`tokens per minute: ${lib} ${algo}, ${charging}`);
        const prefix = `tok-${tag}-${run++}`;
        const c = lib === "edgelimit" ? ours(env, prefix, algo, charging) : peer(env, prefix, algo, charging);
        // settles due, in time order: a response that has ended is settled before a later arrival
        const due: { at: number; tokens: number; settle: (now: number, tokens: number) => Promise<void> }[] =
          [];
        const perMinute = new Map<number, number>();
        let admitted = 0;
        let tokens = 0;
        let settleErrors = 0;
        const settleUntil = async (t: number) => {
          due.sort((a, b) => a.at - b.at);
          while (due.length > 0 && due[0]!.at <= t) {
            const next = due.shift()!;
            await next.settle(T0 + next.at, next.tokens).catch(() => {
              settleErrors += 1;
            });
          }
        };
        for (const request of requests) {
          await settleUntil(request.t);
          const decision = await c.limit(T0 + request.t);
          if (!decision.allowed) continue;
          admitted += 1;
          tokens += request.tokens;
          const minute = Math.floor(request.t / 60_000);
          perMinute.set(minute, (perMinute.get(minute) ?? 0) + request.tokens);
          if (decision.settle)
            due.push({ at: request.done, tokens: request.tokens, settle: decision.settle });
        }
        await settleUntil(Number.POSITIVE_INFINITY);
        const minutes = durationMs / 60_000;
        rows.push({
          lib,
          algo,
          charging,
          requests: requests.length,
          admitted,
          tokens,
          allowance: TOKENS_POLICY.limit * minutes + (algo === "tokenBucket" ? TOKENS_POLICY.limit : 0),
          busiestMinute: Math.max(...perMinute.values()),
          settleErrors,
        });
      }
    }
  }
  return rows;
}

export const tokens: Part<TokensRow[]> = {
  name: "tokens",
  title: "### Tokens per minute",
  run: ({ env, smoke, tag }) => runTokens(env, tag, durationMs(smoke)),
  render(rows, { smoke }) {
    const demand = workload(durationMs(smoke)).reduce((n, r) => n + r.tokens, 0);
    const body = rows.map((r) => [
      `${r.lib} ${r.algo}`,
      r.charging,
      `${fmt(r.admitted)} / ${fmt(r.requests)}`,
      fmt(r.tokens),
      `${fmt(r.allowance)}`,
      `${((100 * r.tokens) / r.allowance).toFixed(1)} %`,
      fmt(r.busiestMinute),
      r.settleErrors === 0 ? "" : fmt(r.settleErrors),
    ]);
    return `A limit of ${fmt(TOKENS_POLICY.limit)} tokens a minute (buckets: capacity ${fmt(TOKENS_POLICY.limit)}, refilled continuously)
for one caller sending ${RATE} requests a minute for ${durationMs(smoke) / 60_000} simulated minutes, ${fmt(demand)} tokens
of demand in all. A request's true cost (seeded, log-normal, 20 to 4,000 tokens) is known only when its
response ends, 1 to 5 s after it was admitted. "Fixed cost" charges ${fmt(RESERVATION)} a request; "reserve,
then settle" reserves ${fmt(RESERVATION)} and charges the true cost when the response ends (edgelimit:
\`limiter.settle\`; the peer: \`limit()\` again with the difference as its \`rate\`, negative to give back).
Allowed: the limit over the run (buckets: plus their first fill). Busiest minute: true tokens admitted in
one clock minute (a fixed window's limit is ${fmt(TOKENS_POLICY.limit)} there). A fixed window gives nothing back for a
reservation settled after the window it was counted in has ended. Extras refused: the peer answers an extra
past its limit with \`success: false\` (its fixed window counts it all the same, its token bucket does not);
edgelimit charges it as a debt.

${table(["contestant", "charging", "admitted", "true tokens admitted", "allowed", "of allowed", "busiest minute", "extras refused"], body)}`;
  },
};
