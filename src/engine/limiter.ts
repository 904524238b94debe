import {
  checkPlans,
  compileRule,
  fieldOf,
  type PlanConfig,
  type Rule,
  type RuleConfig,
} from "./algorithms/index.js";
import {
  type Analytics,
  type AnalyticsOptions,
  analyticsConfig,
  buildAnalytics,
  Counter,
  checkOnDecision,
  Flusher,
  type Observer,
  observerOf,
} from "./analytics.js";
import type { BreakerOptions } from "./breaker.js";
import { DenyCache } from "./deny-cache.js";
import { describe } from "./duration.js";
import { checkPrefix, Identities, type Identity, keyTag, RuleKeys, tagsOf } from "./keys.js";
import { type LeaseOptions, leaseConfig } from "./leases.js";
import { buildOverrides, type Overrides, type OverridesOptions, overridesConfig } from "./overrides.js";
import { type RegionOptions, regionPool } from "./region.js";
import { type Applied, type Counted, type PlanEncoding, RuleScripts } from "./scripts/limiter.js";
import { PoolScript } from "./scripts/pool.js";
import { type Answer, type Entry, Home, type WaitUntil } from "./tier.js";
import { IsolateTier } from "./tier-isolate.js";
import {
  deletePools,
  poolKey,
  poolsHolding,
  RegionalTier,
  RegionalTiers,
  servesRegion,
} from "./tier-region.js";
import { type Transport, transportFor } from "./transport.js";
import { type Decision, decidedBy, type RuleResult, type Settlement } from "./types.js";
import { checkClock, checkOptions, issueText, positiveMs, readClock } from "./validate.js";

/** What `new Limiter()` takes. Only `redis` and `rules` are required. */
export interface LimiterOptions {
  /** `{ url, token }` of an Upstash-compatible REST endpoint, or an @upstash/redis client (`new Redis({ url, token })`). */
  redis: unknown;
  /** Key namespace (default "edgelimit"): 1-64 characters of A-Z a-z 0-9 _ . : - */
  prefix?: string;
  /**
   * The rules every decision checks, by name; a request is admitted only if all of them admit it. A
   * rule's `by` names the field of the identifier record that keys it (default "id"): see docs/nested.md.
   */
  rules: Record<string, RuleConfig>;
  /**
   * Redis Cluster behind the REST endpoint (default false). With rules keyed by several fields, their
   * keys live in different slots: a decision is then one script call per field, sent together, and a
   * denial gives back what the other fields took (one more round trip). See docs/nested.md.
   */
  cluster?: boolean;
  /**
   * Plans by name: each changes fields of some rules (`{ pro: { perMinute: { limit: 1000 } } }`), the
   * fields left out keeping the base rule's. A call names its plan (`limit(id, { plan: "pro" })`); the
   * usage already counted carries over (see docs/plans.md). "default" and "custom" are reserved names.
   */
  plans?: Record<string, PlanConfig>;
  /**
   * The in-isolate cache of deny decisions (default `{ maxEntries: 10_000 }`), or `false`. It belongs to
   * this Limiter: build the Limiter once per isolate (module scope), not per request.
   */
  denyCache?: { maxEntries: number } | false;
  /** Ms a decision waits for Redis before following `onError` (default 1000). */
  timeout?: number;
  /** What a decision is when Redis fails or times out: "allow" (default, fail open) or "deny". */
  onError?: "allow" | "deny";
  /** The caller's clock, epoch ms (default `Date.now`). Sent to the script: Redis's clock is never used. */
  clock?: () => number;
  /**
   * Ms to collect decisions into one request (default 0: those issued in the same tick). A small
   * window (1-2 ms) lets independent requests in one isolate share a pipeline.
   */
  batchWindow?: number;
  /**
   * The circuit breaker (default `{ failures: 5, cooldown: 1000, maxCooldown: 4000 }`), or `false`.
   * After `failures` consecutive failed calls, decisions follow `onError` at once without asking Redis;
   * after `cooldown` ms one decision probes Redis: success closes the breaker, failure reopens it with
   * the cooldown doubled up to `maxCooldown`. It belongs to the connection, not to this Limiter: every
   * user of one Redis shares it (one per isolate). `redis: { url, token, breaker }` sets it; this option
   * sets it when the connection does not, first come first served, and is otherwise ignored with a
   * warning (see docs/failures.md). `false` keeps this Limiter's decisions out of it.
   */
  breaker?: BreakerOptions | false;
  /**
   * Leases (default off): `{ max: 50, ttl: "1s" }` lets this Limiter hold up to `max` units of a hot
   * identifier, already consumed in Redis, and answer its decisions from them with no request
   * (`source: "lease"`) for up to `ttl`; unused units are given back. See docs/leases.md.
   */
  lease?: LeaseOptions | false;
  /**
   * Per-identifier overrides stored in Redis (default off): `true`, or `{ maxStale: "1s" }`, the most a
   * cached denial or a lease is trusted before Redis is asked again. Then `limiter.overrides.set(id,
   * { plan: "pro" })` applies to the identifier's next decision that reaches Redis. See docs/overrides.md.
   */
  overrides?: boolean | OverridesOptions;
  /**
   * A database near this isolate (default none): `{ redis: nearby, pool: { max: 500, ttl: "5s" } }`.
   * Units consumed at home (`redis`) are pooled there per identifier, at most `max`, each deposit for
   * at most `ttl`, and decisions are answered from the pool with one round trip to `nearby` only
   * (`source: "region"`). See docs/regions.md.
   */
  region?: RegionOptions;
  /**
   * Decision analytics (default off): `true`, or `{ flushEvery: "10s", top: 20, retention: "7d", name }`.
   * Counted in the isolate and written to Redis in the background, never on a decision's request; read
   * with `limiter.analytics.report()`. See docs/analytics.md.
   */
  analytics?: boolean | AnalyticsOptions;
  /**
   * Called with every decision and its identifier, on every path (Redis, cache, lease, error): to send
   * metrics elsewhere. Called synchronously, never awaited; what it throws is caught and logged once.
   * With rules keyed by several fields, the identifier is the binding rule's, as `field=value`
   * (`org=acme`).
   */
  onDecision?: (decision: Decision, identifier: string) => void;
}

/** Options of one decision. */
export interface LimitOptions {
  /** Units this request takes (default 1); 0 peeks: it answers for a cost of 1 and consumes nothing. */
  cost?: number;
  /**
   * The plan whose rules decide (`undefined` or "default": the base rules). A name the Limiter has no
   * plan of throws a RangeError naming `plan`.
   */
  plan?: string | undefined;
  /**
   * The runtime's `waitUntil` (`ctx.waitUntil` on Workers, `waitUntil` of @vercel/functions): the work
   * a decision starts off its request path is handed to it, to finish after the response: lease and
   * pool refunds, top-ups, deposits into a regional pool, an analytics flush. Without it they run in
   * the background (refunds from a timer).
   */
  waitUntil?: WaitUntil;
}

/** Options of one settle. */
export interface SettleOptions {
  /**
   * The runtime's `waitUntil`: the settle call is handed to it and `settle()` resolves at once, so the
   * response need not wait for Redis.
   */
  waitUntil?: WaitUntil;
}

/**
 * What settling an admitted decision needs beside the decision, under a module-private symbol that is
 * not enumerable (no public field; a copy of the decision carries none; cheaper than a WeakMap entry).
 * A tier answers the caller a copy of home's decision, which carries no reply to read where its units
 * were counted from: the pipeline's answer it came from (its Reservation, its lease) goes with the
 * ticket, read only by a settle.
 */
interface Ticket {
  /** The Limiter that made the decision. */
  readonly owner: Limiter;
  readonly identifier: string;
  readonly cost: number;
  /**
   * The pipeline's answer the decision came from: where its units were counted, and the tier that
   * may take a settle back (Answer.held, home, absorber).
   */
  readonly answer: Answer;
  settled: boolean;
}

const TICKET: unique symbol = Symbol("edgelimit.ticket");
/** The descriptor every ticket is defined with (its value set each time). */
const ticketProperty: PropertyDescriptor = { value: undefined, enumerable: false };

/**
 * One plan of a Limiter ("default": the base rules): its encoding, and its pipeline past the deny
 * cache, entered at its first step: the isolate tier (with `lease`), then the regional tier (with
 * `region`), then home, each the next one's caller.
 */
interface Plan {
  readonly encoding: PlanEncoding;
  /** Where a decision goes past the deny cache and the lease. */
  readonly entry: Entry;
  /**
   * The tiers themselves: the isolate tier's lease answers first (fromLease); both for an override or
   * a reset ending leases and pools, and for dispose.
   */
  readonly isolate: IsolateTier | undefined;
  readonly region: RegionalTier | undefined;
}

/** How long a caller is told to wait after a decision denied by `onError: "deny"`. */
const ERROR_RETRY_MS = 1000;
const OPTIONS = [
  "redis",
  "prefix",
  "rules",
  "plans",
  "denyCache",
  "timeout",
  "onError",
  "clock",
  "batchWindow",
  "breaker",
  "lease",
  "overrides",
  "region",
  "analytics",
  "onDecision",
  "cluster",
];

/**
 * Decides whether an identifier may proceed under every rule, in one Redis round trip.
 *
 * @example
 * const limiter = new Limiter({
 *   redis: new Redis({ url, token }),
 *   rules: { burst: gcra({ limit: 10, period: "1s", burst: 20 }), daily: fixedWindow({ limit: 1000, window: "1d" }) },
 * });
 * const decision = await limiter.limit("user:42");
 * if (!decision.allowed) return new Response("slow down", { status: 429 });
 */
export class Limiter {
  readonly prefix: string;
  /** The validated rules, in the order they were given. */
  readonly rules: readonly Rule[];
  private readonly transport: Transport;
  /** Ms a reset waits for Redis. */
  private readonly timeout: number;
  private readonly cache: DenyCache | undefined;
  /**
   * How many overrides this Limiter has changed (set, delete): a denial answered to a decision sent
   * before the latest change is not cached (it may have been decided under the override replaced).
   */
  private changes = 0;
  private readonly failOpen: boolean;
  /** The caller's clock this limiter decides by (epoch ms); each Decision says what it read (`decidedAt`). */
  readonly clock: () => number;
  private readonly ruleKeys: RuleKeys;
  /** What a call's identifier or record of identifiers is made into: the subject its keys, caches and leases go by. */
  private readonly identities: Identities;
  /** Per rule name, the field it is keyed by (its `by`). */
  private readonly fields: ReadonlyMap<string, string>;
  private readonly scripts: RuleScripts;
  /** Redis Cluster: one call per field, and a reset's DEL per slot. */
  private readonly cluster: boolean;
  /** Per plan ("default" included): what its decisions send, and its tiers. */
  private readonly plans: ReadonlyMap<string, Plan>;
  /** Every plan of this Limiter, for the message of an unknown one. */
  private readonly planNames: string;
  /**
   * The identifiers' overrides in Redis: `set`, `get`, `delete`, `list`, `page` (each rejects when the
   * Limiter was built without `overrides`).
   */
  readonly overrides: Overrides;
  /** With `region`: the region's database (for `reset`) and its tiers. */
  private readonly regional: { readonly transport: Transport; readonly tiers: RegionalTiers } | undefined;

  /**
   * With `region`, its counters (for tests and reports): answers from the pool, misses, failed asks,
   * units deposited, units given back to home, refunds that failed, units reserved that never reached
   * a pool (they stay consumed at home until its state expires).
   */
  get region():
    | {
        readonly stats: {
          readonly hits: number;
          readonly misses: number;
          readonly errors: number;
          readonly deposited: number;
          readonly refunded: number;
          readonly refundsFailed: number;
          readonly lost: number;
        };
      }
    | undefined {
    return this.regional && { stats: this.regional.tiers.stats };
  }

  /** The decisions' counts: `report()` reads them, `flush()` writes this isolate's (see docs/analytics.md). */
  readonly analytics: Analytics;
  /** Counts each decision and calls `onDecision`; undefined when both are off. */
  private readonly observe: Observer | undefined;
  private readonly counter: Counter | undefined;

  constructor(options: LimiterOptions) {
    checkOptions(options, "Limiter", OPTIONS);
    // `{ url, token }` or an @upstash/redis client; checked first, naming the field (redis.url: ...)
    const redis = options.redis;
    transportFor(redis);
    this.prefix = checkPrefix(options.prefix ?? "edgelimit");

    const rules = options.rules;
    if (rules === null || typeof rules !== "object" || Object.keys(rules).length === 0) {
      throw new Error("rules: give at least one rule, e.g. { perMinute: gcra({ limit: 60, period: '1m' }) }");
    }
    this.rules = Object.entries(rules).map(([name, config]) => compileRule(name, config));
    this.ruleKeys = new RuleKeys(this.prefix, this.rules);
    this.identities = new Identities(this.rules);
    this.fields = new Map(this.rules.map((rule) => [rule.name, fieldOf(rule)]));
    const planRules: { name: string; rules: readonly Rule[]; keys: RuleKeys }[] = [];
    if (options.plans !== undefined) {
      const checked = checkPlans(rules, options.plans);
      if (checked.issues !== undefined) throw new Error(checked.issues.map(issueText).join("; "));
      for (const [name, compiled] of checked.plans) {
        planRules.push({ name, rules: compiled, keys: new RuleKeys(this.prefix, compiled, this.rules) });
      }
    }
    this.planNames = planRules.map((plan) => plan.name).join(", ");

    const overrides = overridesConfig(options.overrides);
    const maxStale = overrides?.maxStale ?? Number.POSITIVE_INFINITY;

    const timeout = positiveMs(options.timeout ?? 1000, "timeout", { infinite: true });
    const analytics = analyticsConfig(options.analytics);
    const onDecision = checkOnDecision(options.onDecision);
    const onError = options.onError ?? "allow";
    if (onError !== "allow" && onError !== "deny") {
      throw new Error(`onError: must be "allow" or "deny", got ${describe(onError)}`);
    }
    this.failOpen = onError === "allow";
    this.clock = checkClock(options.clock ?? Date.now);
    const cluster = options.cluster ?? false;
    if (typeof cluster !== "boolean")
      throw new TypeError(`cluster: must be true or false, got ${describe(cluster)}`);
    this.cluster = cluster;
    const batchWindow = options.batchWindow ?? 0;
    if (batchWindow !== 0) positiveMs(batchWindow, "batchWindow");
    const breaker = options.breaker;
    const transport = transportFor(redis, { breaker: breaker === false ? undefined : breaker });
    this.transport = transport;
    this.timeout = timeout;
    this.scripts = new RuleScripts(
      this.rules,
      this.ruleKeys,
      transport,
      { timeout, batchWindow, breaker: breaker !== false },
      planRules,
      options.overrides !== undefined && options.overrides !== false,
      cluster,
    );

    const denyCache = options.denyCache ?? { maxEntries: 10_000 };
    if (denyCache !== false) {
      const maxEntries = (denyCache as { maxEntries?: unknown })?.maxEntries;
      if (typeof maxEntries !== "number" || !Number.isInteger(maxEntries) || maxEntries <= 0) {
        throw new Error(`denyCache.maxEntries: must be a positive whole number, got ${describe(maxEntries)}`);
      }
      this.cache = new DenyCache(maxEntries, maxStale);
    }
    const lease =
      options.lease === undefined || options.lease === false ? undefined : leaseConfig(options.lease);
    let pools: { script: PoolScript; config: { max: number; ttl: number } } | undefined;
    if (options.region !== undefined) {
      const pool = regionPool(options.region);
      const nearby = options.region.redis;
      let regional: Transport;
      try {
        regional = transportFor(nearby, { breaker: breaker === false ? undefined : breaker });
      } catch (error) {
        throw new Error(`region.${(error as Error).message}`);
      }
      pools = {
        script: new PoolScript(regional, pool, { timeout, batchWindow, breaker: breaker !== false }),
        config: pool,
      };
      this.regional = { transport: regional, tiers: new RegionalTiers() };
    }
    // the tiers read the caller's clock as decisions do
    const clock = this.clock;
    const now = () => readClock(clock);
    const plans = new Map<string, Plan>();
    const isolates: IsolateTier[] = [];
    for (const [name, encoding] of this.scripts.plans) {
      const home = new Home(this.scripts, encoding);
      const region =
        pools && servesRegion(encoding.rules, maxStale)
          ? new RegionalTier(pools.script, pools.config, home, this.regional!.tiers, now, maxStale)
          : undefined;
      const isolate = lease && new IsolateTier(lease, home, region ?? home, now, maxStale, isolates);
      plans.set(name, { encoding, entry: isolate ?? region ?? home, isolate, region });
    }
    this.plans = plans;
    // the configs as given, copied: set() resolves an override's fields over them
    const configs = Object.fromEntries(Object.entries(rules).map(([name, config]) => [name, { ...config }]));
    const planConfigs =
      options.plans &&
      Object.fromEntries(
        Object.entries(options.plans).map(([name, plan]) => [
          name,
          Object.fromEntries(Object.entries(plan).map(([rule, fields]) => [rule, { ...fields }])),
        ]),
      );
    // a flush or a report is off the request path: it waits 5 to 30 s (one in flight holds the next)
    const background = Math.min(Math.max(timeout, 5000), 30_000);
    this.counter = analytics && new Counter(analytics, this.prefix, Flusher.of(transport, redis), background);
    this.observe = observerOf(this.counter, onDecision);
    this.analytics = buildAnalytics(
      this.counter,
      transport,
      () => this.now(),
      this.rules.map((rule) => rule.name),
      background,
      breaker !== false,
    );
    this.overrides = buildOverrides(
      overrides && {
        config: overrides,
        transport,
        prefix: this.prefix,
        keys: this.ruleKeys,
        rules: configs,
        plans: planConfigs,
        timeout,
        clock: () => this.now(),
        identities: this.identities,
        forget: (value, field) => this.releaseHere(value, field),
      },
    );
  }

  /**
   * The rules a plan decides by ("default", or no plan: the base rules), in rule order; given a
   * Decision, the rules that decided it (a custom override's own included): what the RateLimit-Policy
   * of that decision states (`limiter.rulesOf(decision)`).
   *
   * @example
   * policyHeader(limiter.rulesOf("pro")) // what the pro plan states
   */
  rulesOf(plan?: string | Decision): readonly Rule[] {
    if (typeof plan === "object" && plan !== null) {
      // every decision this Limiter returns carries its rules; a copy made with a spread does not, and
      // gets its plan's (the base rules for "custom" or a plan this Limiter does not have): never a throw
      return plan.decidedBy ?? (this.plans.get(plan.plan) ?? this.plans.get("default")!).encoding.rules;
    }
    return this.planOf(plan).encoding.rules;
  }

  /**
   * Decides one request of `identifier`. Never rejects for Redis trouble: on a failure or timeout the
   * decision follows `onError`, with `source: "error"`.
   *
   * @example
   * const { allowed, remaining, retryAfter } = await limiter.limit("203.0.113.7", { cost: 1 });
   */
  limit(identifier: Identity, options?: LimitOptions): Promise<Decision> {
    const subject = this.identities.subject(identifier);
    const decision = this.decideOne(subject, options);
    const observe = this.observe;
    if (observe === undefined) return decision;
    const waitUntil = options?.waitUntil;
    const identities = this.identities;
    return decision.then((d) => {
      observe(
        d,
        identities.nested ? identities.label(subject, this.fields.get(d.rule) ?? "id") : subject,
        waitUntil,
      );
      return d;
    });
  }

  /**
   * `limit()` before its observer: the pipeline. Each step answers or passes on: the deny cache, the
   * isolate tier (a lease in this isolate's memory), then the plan's entry: the isolate tier reserving
   * for its lease, the regional tier (a pool in the region's database) and home, one call each. The
   * answer becomes the caller's Decision once, here.
   */
  private decideOne(identifier: string, options: LimitOptions | undefined): Promise<Decision> {
    const cost = options?.cost ?? 1;
    if (typeof cost !== "number" || !Number.isInteger(cost) || cost < 0) {
      throw new RangeError(`cost: must be a whole number of units, 0 or more, got ${describe(cost)}`);
    }
    const waitUntil = options?.waitUntil;
    if (waitUntil !== undefined && typeof waitUntil !== "function") {
      throw new TypeError(`waitUntil: expected a function such as ctx.waitUntil, got ${describe(waitUntil)}`);
    }
    const plan = this.planOf(options?.plan);
    const now = this.now();
    const cached = this.identities.nested
      ? this.cache?.getEach(
          this.cacheKeys(identifier),
          Math.max(cost, 1),
          now,
          plan.encoding.name,
          plan.encoding.rules,
        )
      : this.cache?.get(identifier, Math.max(cost, 1), now, plan.encoding.name);
    if (cached) return Promise.resolve(cached);
    // the lease answers on the spot, in this promise alone
    const leased = plan.isolate?.fromLease(identifier, cost, now, waitUntil);
    const changes = this.changes;
    if (leased !== undefined)
      return Promise.resolve(this.answered(leased, identifier, cost, now, plan, changes));
    return plan.entry
      .decide(identifier, cost, now, waitUntil)
      .then((answer) => this.answered(answer, identifier, cost, now, plan, changes));
  }

  /**
   * Gives back the unused units of every lease (one request each, sent now) and stops leasing; with
   * `region`, drains the pools this Limiter deposited into and gives their units back; writes this isolate's unflushed analytics; resolves once they are done. `Symbol.asyncDispose` does
   * the same (`await using`).
   *
   * @example
   * process.on("SIGTERM", () => limiter.dispose());
   */
  async dispose(): Promise<void> {
    await Promise.all([
      ...[...this.plans.values()].flatMap((plan) => [plan.isolate?.dispose(), plan.region?.dispose()]),
      this.counter?.dispose(),
    ]);
  }

  /**
   * Forgets everything about `identifier`, for every rule under every plan (one request), and its
   * cached denial and leases here.
   *
   * @example
   * await limiter.reset("user:42");
   */
  async reset(identifier: Identity): Promise<void> {
    const now = this.now();
    const keys = new Set<string>();
    // every tier holds off the reset identifiers' reservations until the DEL is done (holdOff)
    const resumes: (() => void)[] = [];
    try {
      if (this.identities.nested) {
        // of one field, every rule keyed by it; a record of several resets each of its identifiers so:
        // their rules' state is shared by every subject holding one of them (an org's users, global's
        // everyone), so every such subject's cached denials, leases and pools go, not the record's alone
        const whole =
          typeof identifier === "object" && identifier !== null && Object.keys(identifier).length > 1;
        let identities: readonly { readonly field: string; readonly value: string }[];
        if (whole) {
          // checks every field, naming the one missing or wrong
          this.identities.subject(identifier);
          const record = identifier as Readonly<Record<string, string>>;
          identities = this.identities.fields.map((field) => ({ field, value: record[field]! }));
        } else {
          identities = [this.identities.one(identifier)];
        }
        for (const { field, value } of identities) {
          this.uncache(value, field);
          // a lease's units were taken under every field's rules: given back before the DEL, the
          // rules keyed by the other fields get theirs back, and the reset ones end fresh
          await this.takeOutLeases(this.holders(value, field), true, now, resumes);
          await this.takeOutPools(field, value, now);
          for (const { encoding } of this.plans.values()) {
            for (const key of encoding.keys.allOfTag(keyTag(value, field), field, encoding.rules, now))
              keys.add(key);
          }
        }
        await this.delete(keys);
        return;
      }
      const subject = this.identities.subject(identifier);
      this.cache?.delete(subject);
      // every rule of the subject is reset: its leases' units go with the state the DEL deletes
      await this.takeOutLeases((held) => held === subject, false, now, resumes);
      for (const { encoding } of this.plans.values()) {
        for (const key of encoding.keys.all(subject, now)) keys.add(key);
      }
      await this.delete(keys);
      if (this.regional !== undefined) {
        const pools = [...this.plans.values()].map((plan) => poolKey(plan.encoding, subject));
        await deletePools(this.regional.transport, pools, this.timeout);
      }
    } finally {
      for (const resume of resumes) resume();
    }
  }

  /**
   * Holds off every plan's reservations of the subjects `holds` matches (until `resumes` are called):
   * the isolate tiers' for a lease or a top-up, the regional tiers' for a pool's deposit or top-up;
   * and ends their leases, with `refund` giving their units back. Resolves once every such
   * reservation on its way has landed (the regional tiers' in their pools: RegionalTier.landed) and
   * every refund is done (IsolateTier.takeOut): before the reset takes the pools out and runs its DEL.
   */
  private async takeOutLeases(
    holds: (subject: string) => boolean,
    refund: boolean,
    now: number,
    resumes: (() => void)[],
  ): Promise<void> {
    const taken: Promise<void>[] = [];
    for (const { isolate, region } of this.plans.values()) {
      if (region !== undefined) {
        resumes.push(region.holdOff(holds));
        taken.push(region.landed(holds));
      }
      if (isolate === undefined) continue;
      resumes.push(isolate.holdOff(holds));
      taken.push(isolate.takeOut(holds, refund, now));
    }
    await Promise.all(taken);
  }

  /**
   * With `region`, takes out what the region's pools hold for every subject with `value` in `field`
   * and gives it back at home, before a reset of that field deletes its rules' state: the subjects'
   * rules keyed by other fields get their units back, and none of them is handed out against the
   * reset rules' new state. Pools in other regions, and deposits other isolates still have on their way,
   * are not found (this isolate's landed first: takeOutLeases).
   */
  private async takeOutPools(field: string, value: string, now: number): Promise<void> {
    if (this.regional === undefined) return;
    const tag = keyTag(value, field);
    const place = this.identities.fields.indexOf(field);
    const found = await poolsHolding(this.regional.transport, this.prefix, tag, this.timeout);
    const drained: Promise<void>[] = [];
    for (const { subject, plan } of found) {
      const tier = this.plans.get(plan)?.region;
      const tags = tagsOf(subject);
      if (tier !== undefined && tags.length === this.identities.fields.length && tags[place] === tag)
        drained.push(tier.takeOut(subject, now));
    }
    await Promise.all(drained);
  }

  /**
   * The Redis keys of `identifier` at `now` (default: this Limiter's clock) under `plan` (default: the
   * base rules), one per rule, in rule order. A fixed window has a key per window: the rule's key, ":",
   * the window's index. A plan shares the base rule's key, except where it changes a fixed or sliding
   * window's `window`: the rule's key then ends in ".<window ms>".
   */
  keys(identifier: Identity, now: number = this.now(), plan?: string): string[] {
    const subject =
      typeof identifier === "string" && !this.identities.nested
        ? identifier
        : this.identities.subject(identifier);
    return this.planOf(plan).encoding.keys.of(subject, now);
  }

  /** Deletes `keys`: one DEL, or on Redis Cluster one per hash tag (a slot each), in one request. */
  private async delete(keys: ReadonlySet<string>): Promise<void> {
    const options = { timeout: this.timeout, breaker: false };
    if (!this.cluster) {
      const reply = await this.transport.call(["DEL", ...keys], options);
      if (!reply.ok) throw reply.error;
      return;
    }
    const bySlot = new Map<string, string[]>();
    for (const key of keys) {
      const tag = key.slice(key.indexOf("{"), key.indexOf("}") + 1);
      const group = bySlot.get(tag);
      if (group === undefined) bySlot.set(tag, [key]);
      else group.push(key);
    }
    const replies = await this.transport.pipeline(
      [...bySlot.values()].map((group) => ["DEL", ...group]),
      { timeout: this.timeout },
    );
    if (replies instanceof Error) throw replies;
    const failed = replies.find((reply) => reply.error !== undefined);
    if (failed !== undefined) throw new Error(`reset: Redis answered ${String(failed.error)}`);
  }

  /**
   * With rules keyed by several fields, the deny cache's keys of a subject: one per rule, its place and
   * its field's tag, so a denial by a shared identifier (a global quota) answers every subject sharing it.
   */
  private cacheKeys(subject: string): Record<string, string> {
    const tags = tagsOf(subject);
    const fields = this.identities.fields;
    const keys: Record<string, string> = {};
    this.rules.forEach((rule, i) => {
      keys[rule.name] = `${i}${tags[fields.indexOf(fieldOf(rule))]}`;
    });
    return keys;
  }

  /**
   * Drops this Limiter's cached denials of `value` in `field`, ends its leases with a refund and takes
   * its region's pools of it out, their units given back (an override of it changed what they were
   * decided under). A pool the region fails to give up is handed out for at most `maxStale`, as
   * another region's is.
   */
  private async releaseHere(value: string, field: string): Promise<void> {
    this.changes += 1;
    this.uncache(value, field);
    const now = this.now();
    const resumes: (() => void)[] = [];
    try {
      // held off, with what was on its way landed first (as for a reset): no reservation decided
      // under the override replaced starts a lease or fills a pool after this
      await this.takeOutLeases(this.holders(value, field), true, now, resumes);
      if (this.regional === undefined) return;
      if (this.identities.nested) await this.takeOutPools(field, value, now);
      else await Promise.all([...this.plans.values()].map((plan) => plan.region?.takeOut(value, now)));
    } catch {
      // the region failed: what its pools hold of the identifier is handed out for at most maxStale
    } finally {
      for (const resume of resumes) resume();
    }
  }

  /** Drops this Limiter's cached denials of `value` in `field`. */
  private uncache(value: string, field: string): void {
    if (!this.identities.nested) {
      this.cache?.delete(value);
      return;
    }
    const tag = keyTag(value, field);
    this.rules.forEach((rule, i) => {
      if (fieldOf(rule) === field) this.cache?.delete(`${i}${tag}`);
    });
  }

  /** Whether a subject holds `value` in `field` (with rules keyed by several fields, every subject sharing it). */
  private holders(value: string, field: string): (subject: string) => boolean {
    if (!this.identities.nested) return (subject) => subject === value;
    const tag = keyTag(value, field);
    const place = this.identities.fields.indexOf(field);
    return (subject) => tagsOf(subject)[place] === tag;
  }

  private now(): number {
    return readClock(this.clock);
  }

  /** The plan a call names (undefined: the base rules), or a RangeError naming `plan`. */
  private planOf(name: string | undefined): Plan {
    const plan = this.plans.get(name ?? "default");
    if (plan !== undefined) return plan;
    throw new RangeError(
      `plan: unknown plan ${describe(name)}; ${this.planNames ? `the plans are ${this.planNames}` : "this Limiter has no plans"}`,
    );
  }

  /**
   * The end of a decision past the deny cache: a failure follows `onError`, a denial is cached, an
   * admission ticketed (a lease's, to settle against its lease).
   */
  private answered(
    answer: Answer,
    identifier: string,
    cost: number,
    now: number,
    plan: Plan,
    /** `changes` when the decision was sent: an override changed since, its denial is not cached. */
    changes: number,
  ): Decision {
    const { decision } = answer;
    if (decision === undefined)
      return this.ticket(this.failure(answer.error, now, plan.encoding), identifier, cost, answer);
    if (!decision.allowed) {
      if (changes !== this.changes) return decision;
      const name = plan.encoding.name;
      if (!this.identities.nested) this.cache?.set(identifier, Math.max(cost, 1), now, decision, name);
      else this.cache?.setEach(this.cacheKeys(identifier), Math.max(cost, 1), now, decision, name);
      return decision;
    }
    return this.ticket(decision, identifier, cost, answer);
  }

  /** Remembers, on an admitted `decision`, whose it is and what it cost, for settle(). */
  private ticket(decision: Decision, identifier: string, cost: number, answer: Answer): Decision {
    if (!decision.allowed) return decision;
    ticketProperty.value = { owner: this, identifier, cost, answer, settled: false };
    return Object.defineProperty(decision, TICKET, ticketProperty);
  }

  /**
   * Charges an admitted decision of this Limiter what it really cost, `actual` units, instead of the
   * `cost` it reserved: below it the difference goes back where it was counted, above it the extra is
   * charged even past the limit (a debt later decisions wait out). Under every rule at once, in one
   * Redis call (none when the decision's lease takes it), at most once per decision. Rejects for a
   * second settle of one decision, a denied decision, one this Limiter did not make, or an `actual`
   * that is not a whole number >= 0; never for Redis trouble (the Settlement's `error` says it). A
   * decision that failed open (`source: "error"`) settles to nothing. See docs/settle.md.
   *
   * @example
   * const d = await limiter.limit("user:42", { cost: 1_000 });
   * if (d.allowed) await limiter.settle(d, 370, { waitUntil: ctx.waitUntil.bind(ctx) });
   */
  settle(decision: Decision, actual: number, options?: SettleOptions): Promise<Settlement> {
    try {
      return this.settleChecked(decision, actual, options?.waitUntil);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  private settleChecked(
    decision: Decision,
    actual: number,
    waitUntil: WaitUntil | undefined,
  ): Promise<Settlement> {
    if (typeof actual !== "number" || !Number.isSafeInteger(actual) || actual < 0) {
      throw new RangeError(`actual: must be a whole number of units, 0 or more, got ${describe(actual)}`);
    }
    if (waitUntil !== undefined && typeof waitUntil !== "function") {
      throw new TypeError(`waitUntil: expected a function such as ctx.waitUntil, got ${describe(waitUntil)}`);
    }
    if (decision === null || typeof decision !== "object") {
      throw new TypeError(`decision: expected the Decision limit() returned, got ${describe(decision)}`);
    }
    const ticket = (decision as { [TICKET]?: Ticket })[TICKET];
    const of = ticket === undefined ? "" : ` for ${JSON.stringify(ticket.identifier)}`;
    const name = `the decision${of} (plan ${JSON.stringify(decision.plan)}, decidedAt ${decision.decidedAt})`;
    if (!decision.allowed) {
      throw new Error(`settle: ${name} was denied: nothing was reserved, so there is nothing to settle`);
    }
    if (ticket === undefined || ticket.owner !== this) {
      throw new Error(
        "decision: not one this Limiter made (settle the Decision object its limit() returned, not a copy)",
      );
    }
    if (ticket.settled)
      throw new Error(`settle: ${name} was already settled; a decision settles at most once`);
    // The runtime's waitUntil is called before anything is settled or sent: one that throws (Workers'
    // ctx.waitUntil passed unbound) rejects here, and the decision can still be settled.
    const handOff = waitUntil === undefined ? undefined : handOver(waitUntil);
    ticket.settled = true;
    try {
      const { identifier, cost } = ticket;
      const difference = actual - cost;
      const done = (settlement: Settlement): Promise<Settlement> => {
        handOff?.(Promise.resolve(settlement));
        return Promise.resolve(settlement);
      };
      // failed open: nothing was charged as far as this isolate knows, and the call that timed out may
      // still be charged late: settling it would risk charging it twice
      if (difference === 0 || decision.source === "error") return done({ difference, via: "none" });
      const now = this.now();
      // units given back may admit what a cached denial would refuse
      if (difference < 0) {
        if (this.identities.nested)
          for (const key of Object.values(this.cacheKeys(identifier))) this.cache?.delete(key);
        else this.cache?.delete(identifier);
      }
      const { answer } = ticket;
      // the tier whose units answered it takes it back into them if it can (a live lease)
      if (answer.absorber?.charge(identifier, answer, difference, now))
        return done({ difference, via: "lease" });
      // else one settle at home, where the units were counted: where a tier held them, or home's own
      // decision, the one its script answered (the caller may hold a copy)
      const counted =
        answer.held !== undefined
          ? held(this.scripts.applied(decision), answer.held.countedAt)
          : this.scripts.counted(answer.home ?? decision);
      const sent = this.scripts
        .settle(identifier, counted, cost, actual, now)
        .then(
          (reply): Settlement =>
            reply.ok ? { difference, via: "redis" } : { difference, via: "redis", error: reply.error },
        );
      if (handOff === undefined) return sent;
      handOff(sent);
      return Promise.resolve({ difference, via: "redis", pending: true });
    } catch (error) {
      // nothing to wait for: the promise waitUntil holds ends too
      handOff?.(Promise.reject(error));
      throw error;
    }
  }

  private failure(error: unknown, now: number, plan: PlanEncoding): Decision {
    const allowed = this.failOpen;
    const rules: Record<string, RuleResult> = {};
    for (const rule of plan.rules) {
      rules[rule.name] = {
        allowed,
        limit: rule.limit,
        remaining: allowed ? rule.limit : 0,
        resetAt: now,
        retryAfter: allowed ? 0 : ERROR_RETRY_MS,
      };
    }
    const first = plan.rules[0]!;
    const outcome = rules[first.name]!;
    const decision: Decision = {
      allowed: outcome.allowed,
      limit: outcome.limit,
      remaining: outcome.remaining,
      resetAt: outcome.resetAt,
      retryAfter: outcome.retryAfter,
      rule: first.name,
      source: "error",
      plan: plan.name,
      decidedAt: now,
      rules,
      error: error instanceof Error ? error : new Error(String(error)),
    };
    return decidedBy(decision, plan.rules);
  }
}

// `await using limiter = new Limiter(...)` disposes it. Set on the prototype, not declared in the class,
// so that the published types need no `Symbol.asyncDispose` in the consumer's lib.
const asyncDispose = (Symbol as { asyncDispose?: symbol }).asyncDispose ?? Symbol.for("Symbol.asyncDispose");
Object.defineProperty(Limiter.prototype, asyncDispose, {
  value(this: Limiter) {
    return this.dispose();
  },
  writable: true,
  configurable: true,
});

/**
 * Where units a tier held were counted, for a settle: under the rules the decision was decided by (a
 * custom override's too), at `countedAt` (the lease's or the pool's windows), with no count of their
 * own (they were counted with the reservation that took them).
 */
function held(applied: Applied, countedAt: readonly number[]): Counted {
  return { applied, countedAt, counts: applied.rules.map(() => 0) };
}

/**
 * Calls `waitUntil` at once with a promise that ends as the one later given to the returned
 * function; throws, naming the option, when `waitUntil` itself throws.
 */
function handOver(waitUntil: WaitUntil): (settlement: Promise<Settlement>) => void {
  let hand!: (settlement: Promise<Settlement>) => void;
  const handed = new Promise<Settlement>((resolve) => {
    hand = resolve;
  });
  // a rejection is the caller's (settle() rejects with it), not the runtime's to report unhandled
  handed.catch(() => {});
  try {
    waitUntil(handed);
  } catch (error) {
    throw new TypeError(
      `waitUntil: calling it threw (${(error as Error)?.message ?? String(error)}); on Workers pass (p) => ctx.waitUntil(p) or ctx.waitUntil.bind(ctx), not ctx.waitUntil alone`,
    );
  }
  return hand;
}
