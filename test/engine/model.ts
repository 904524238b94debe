// The reference model of every algorithm, for test/engine/cross-feature.property.test.ts: what one
// identifier's state in Redis means, as a pure function of (state, now, cost, rule), written from
// docs/algorithms.md and lua/algorithms/*.lua with the structure of the state instead of its bytes
// (a TAT in 1/rate ms, an interval bucket's tokens and last refill, a window's count, a sliding
// window's counts and slots, a log's entries). It answers what the limiter script answers (allowed,
// remaining, resetAt, retryAfter: lua/dispatcher.lua) and settles as lua/settle.lua does. Nothing here imports the engine: it is the second opinion.

/** A rule as the model reads it: a token bucket is GCRA (rate = refillRate, period = interval, burst = capacity). */
export type ModelRule =
  | { readonly algorithm: "gcra"; readonly rate: number; readonly period: number; readonly burst: number }
  | {
      readonly algorithm: "intervalBucket";
      readonly capacity: number;
      readonly refillRate: number;
      readonly interval: number;
    }
  | Windowed<"fixedWindow">
  | Windowed<"slidingWindow">
  | Windowed<"slidingLog">;

type Windowed<A extends string> = { readonly algorithm: A; readonly limit: number; readonly window: number };

/** What the limiter script answers for one rule. */
export interface Outcome {
  allowed: boolean;
  limit: number;
  remaining: number;
  resetAt: number;
  retryAfter: number;
}

/** Where an admission counted its units: a window's start, a log's stamp and the count before its entries. */
export interface Counted {
  readonly start: number;
  readonly mark: number;
}

/** A debt takes a rule at most this many times its limit (lua/settle.lua's DEBT_CAP). */
const DEBT_CAP = 4;
const SLOTS = 64;
/** How many bursts (burst*T) GCRA's ledger of refunds keeps (lua/algorithms/gcra.lua's GIVEN_SPANS). */
const GIVEN_SPANS = 4;

/** GCRA's state: TAT in 1/rate ms, and the rate it was written under; `fragile` when its key's TTL was short. */
interface GcraState {
  tat: number;
  rate: number;
  period: number;
  fragile: boolean;
}

/**
 * An interval bucket's state: its tokens (below zero a debt, above capacity a credit), when it was last
 * refilled, when it reads full again (its key's expiry), and `fragile` when that was under 10 s away.
 */
interface BucketState {
  tokens: number;
  at: number;
  fullAt: number;
  fragile: boolean;
}

/** A sliding window's state: its window's index, its two counts, the slots of their latest units, and skew. */
interface SlidingState {
  index: number;
  current: number;
  previous: number;
  latest: number;
  earlier: number;
  skewed: boolean;
}

interface Counting {
  start: number;
  current: number;
  previous: number;
  room: number;
  spread: number;
  /** latest * 64 + earlier, + 4096 when read as this window's, + 8192 once clocks disagreed (as the Lua's). */
  slots: number;
  /** A unit in a later slot than the latest would spread the window's units too late (the Lua's `late`). */
  late: boolean;
}

const mod = (a: number, b: number) => ((a % b) + b) % b;
const ceilDiv = (a: number, b: number) => Math.floor((a + b - 1) / b);

/** One identifier's state under every rule of one name (its plans share a key, but a window of another length). */
export class Model {
  private gcraState: GcraState | undefined;
  /** GCRA's ledger of refunds: ms given back (rounded up), when, and when their units were counted. */
  private given: { at: number; counted: number; ms: number }[] = [];
  private readonly fixed = new Map<string, number>();
  private readonly sliding = new Map<number, SlidingState>();
  private log: { stamp: number; n: number }[] = [];
  private bucket: BucketState | undefined;

  /** The TAT (epoch ms, rounded down) of a GCRA state whose key may expire on Redis's clock any moment. */
  fragileTat(): number | undefined {
    const state = this.gcraState;
    return state?.fragile ? Math.floor(state.tat / state.rate) : undefined;
  }

  /**
   * When an interval bucket whose key may expire on Redis's clock any moment reads full (its key's
   * expiry on the callers' clocks), else undefined.
   */
  fragileBucket(): number | undefined {
    return this.bucket?.fragile ? this.bucket.fullAt : undefined;
  }

  /** Forgets the interval bucket's state, as its key's expiry does in Redis. */
  expireBucket(): void {
    this.bucket = undefined;
  }

  /**
   * Forgets the sliding window states that every clock has seen fade out (`now` at or past their
   * window's start + 2 windows), as their keys' expiry does in Redis; returns their windows. (Redis
   * expires them on its own clock, which the tests' clocks do not move: left, a state four windows
   * old would read, by its window's index mod 4, as now's.)
   */
  expireSliding(now: number): number[] {
    const expired: number[] = [];
    for (const [window, state] of this.sliding) {
      if (now >= (state.index + 2) * window) {
        this.sliding.delete(window);
        expired.push(window);
      }
    }
    return expired;
  }

  /**
   * The answer of the limiter script for `cost` at `now` (0 peeks); with `write`, the state it leaves
   * (an admission's units, and a GCRA state read under another rate converted, even by a denial).
   */
  decide(
    rule: ModelRule,
    now: number,
    cost: number,
    write: boolean,
  ): { outcome: Outcome; counted?: Counted } {
    switch (rule.algorithm) {
      case "gcra":
        return this.gcra(rule, now, cost, write);
      case "intervalBucket":
        return this.intervalBucket(rule, now, cost, write);
      case "fixedWindow":
        return this.fixedWindow(rule, now, cost, write);
      case "slidingWindow":
        return this.slidingWindow(rule, now, cost, write);
      case "slidingLog":
        return this.slidingLog(rule, now, cost, write);
    }
  }

  /**
   * lua/settle.lua for an admission of `cost` counted at `counted` under `rule`, really costing
   * `actual`; above the cost, at most `most` units more (a debt is also capped: DEBT_CAP). Returns the
   * units a debt charged (a fraction for GCRA, whose cap is in time), 0 when giving back.
   */
  settle(
    rule: ModelRule,
    now: number,
    cost: number,
    actual: number,
    counted: Counted,
    most = Infinity,
  ): number {
    if (actual === cost) return 0;
    const charge = Math.min(actual, cost + most);
    switch (rule.algorithm) {
      case "gcra":
        return this.settleGcra(rule, now, cost, charge, most, counted);
      case "intervalBucket":
        return this.settleBucket(rule, now, cost, charge, counted);
      case "fixedWindow":
        return this.settleFixed(rule, now, cost, charge, counted);
      case "slidingWindow":
        return this.settleSliding(rule, now, cost, charge, counted);
      case "slidingLog":
        return this.settleLog(rule, now, cost, charge, counted);
    }
  }

  // GCRA: admitted iff max(TAT, t) + n*T - t <= burst*T; in 1/rate ms, T is `period`. A state written
  // under another rate carries its units used (partly earned back: used), at most burst.
  private readGcra(rule: Extract<ModelRule, { algorithm: "gcra" }>, now: number, write: boolean) {
    const { rate, period, burst } = rule;
    const state = this.gcraState;
    let d = 0;
    let raw: number | undefined;
    if (state !== undefined) {
      if (state.rate === rate && state.period === period) {
        d = state.tat - now * rate;
        raw = d;
        if (d < 0) d = 0;
      } else {
        const old = state.tat - now * state.rate;
        if (old > 0) {
          d = Math.min(ceilDiv(old, state.period), burst) * period;
          if (write) this.writeGcra(rule, now, d);
        }
      }
    }
    return { exists: state !== undefined, d, raw, room: Math.floor((burst * period - d) / period) };
  }

  private writeGcra(rule: { rate: number; period: number }, now: number, d: number, keepTtl = false): void {
    const fragile = keepTtl ? (this.gcraState?.fragile ?? false) : ceilDiv(d, rule.rate) < 10_000;
    this.gcraState = { tat: now * rule.rate + d, rate: rule.rate, period: rule.period, fragile };
  }

  private gcra(rule: Extract<ModelRule, { algorithm: "gcra" }>, now: number, cost: number, write: boolean) {
    const { rate, period, burst } = rule;
    const units = cost === 0 ? 1 : cost;
    const { d, room } = this.readGcra(rule, now, write);
    const resetAt = now + ceilDiv(d, rate);
    const denied = (retryAfter: number) => ({
      outcome: { allowed: false, limit: burst, remaining: Math.max(0, room), resetAt, retryAfter },
    });
    if (units > burst) return denied(Number.POSITIVE_INFINITY);
    if (units > room) return denied(ceilDiv(d + units * period - burst * period, rate));
    if (cost === 0)
      return { outcome: { allowed: true, limit: burst, remaining: room, resetAt, retryAfter: 0 } };
    const after = d + units * period;
    if (write) this.writeGcra(rule, now, after);
    return {
      outcome: {
        allowed: true,
        limit: burst,
        remaining: room - units,
        resetAt: now + ceilDiv(after, rate),
        retryAfter: 0,
      },
      // the TAT its units hold (rounded up to a ms: its resetAt) and when it counted
      counted: { start: now + ceilDiv(after, rate), mark: now },
    };
  }

  private settleGcra(
    rule: Extract<ModelRule, { algorithm: "gcra" }>,
    now: number,
    cost: number,
    actual: number,
    most: number,
    counted: Counted,
  ): number {
    const { rate, period, burst } = rule;
    if (actual < cost) {
      // the refund: TAT back by the units, but never by more than they still hold: the TAT they held
      // (`start`, rounded up to a ms) less what refunds gave back since of units counted at or before
      // `mark`, or mark + cost*T; from the decision's time at the earliest. Back at idle the state
      // stays (KEEPTTL).
      const units = cost - actual;
      const since = counted.mark;
      const at = Math.max(now, since);
      const span = ceilDiv(burst * period, rate);
      let g = rate;
      for (let r = period; r > 0; ) [g, r] = [r, g % r];
      let give = (since - at) * rate + cost * period;
      if ((counted.start - at) * rate - rate + g > give) {
        const from = Math.max(counted.start - span, since);
        let given = 0;
        const upto = since > 0 ? since : counted.start;
        for (const entry of this.given) if (entry.at >= from && entry.counted <= upto) given += entry.ms;
        give = Math.max(give, (counted.start - given - at) * rate - rate + g);
      }
      give = Math.min(units * period, give);
      if (give <= 0) return 0;
      const read = this.readGcra(rule, now, true);
      if (!read.exists) return 0;
      let d = (read.raw ?? read.d) - give;
      if (d > 0) this.writeGcra(rule, now, d);
      else {
        if (read.raw === undefined) d = 0;
        this.writeGcra(rule, now, d, true);
      }
      // the ledger: ms given back (rounded up) per instant and time counted, kept GIVEN_SPANS bursts
      this.given.push({
        at: now,
        counted: since > 0 ? since : counted.start - span,
        ms: ceilDiv(give, rate),
      });
      this.given = this.given.filter((entry) => entry.at >= now - GIVEN_SPANS * span);
      return 0;
    }
    const d = this.readGcra(rule, now, true).d;
    const extra = Math.min((actual - cost) * period, most * period);
    const after = Math.max(d, Math.min(d + extra, DEBT_CAP * burst * period));
    this.writeGcra(rule, now, after);
    return (after - d) / period;
  }

  // Interval bucket: `capacity` tokens, `refillRate` more at the end of each `interval` from the last
  // refill (from the first decision on), never past capacity (a credit above it is cut to capacity by
  // the next refill); a charge is admitted iff it is at most the tokens. A lagging clock refills
  // nothing. A new (or expired) bucket is full, last refilled at its first reading.
  private readBucket(rule: Extract<ModelRule, { algorithm: "intervalBucket" }>, now: number) {
    const { capacity, refillRate, interval } = rule;
    const state = this.bucket;
    if (state === undefined) return { tokens: capacity, at: now, stored: undefined };
    let { tokens, at } = state;
    if (now >= at + interval) {
      const refills = Math.floor((now - at) / interval);
      tokens = Math.min(capacity, tokens + refills * refillRate);
      at += refills * interval;
    }
    return { tokens, at, stored: state.at };
  }

  /** When a bucket holding `tokens`, last refilled at `at`, is full again (at least one refill on). */
  private bucketFull(rule: Extract<ModelRule, { algorithm: "intervalBucket" }>, tokens: number, at: number) {
    const { capacity, refillRate, interval } = rule;
    if (tokens >= capacity) return at + interval;
    return at + ceilDiv(capacity - tokens, refillRate) * interval;
  }

  /** Stores the bucket; its reset: now when it holds capacity or more, else when it is full again. */
  private writeBucket(
    rule: Extract<ModelRule, { algorithm: "intervalBucket" }>,
    now: number,
    tokens: number,
    at: number,
  ): number {
    const fullAt = this.bucketFull(rule, tokens, at);
    this.bucket = { tokens, at, fullAt, fragile: fullAt - now < 10_000 };
    return tokens >= rule.capacity ? now : fullAt;
  }

  private intervalBucket(
    rule: Extract<ModelRule, { algorithm: "intervalBucket" }>,
    now: number,
    cost: number,
    write: boolean,
  ) {
    const { capacity, refillRate } = rule;
    const units = cost === 0 ? 1 : cost;
    const { tokens, at } = this.readBucket(rule, now);
    const resetAt = tokens >= capacity ? now : this.bucketFull(rule, tokens, at);
    if (units > tokens) {
      // the first refill after which the bucket holds the units (none holds more than capacity)
      const retryAfter =
        units > capacity
          ? Number.POSITIVE_INFINITY
          : at + ceilDiv(units - tokens, refillRate) * rule.interval - now;
      return {
        outcome: { allowed: false, limit: capacity, remaining: Math.max(0, tokens), resetAt, retryAfter },
      };
    }
    if (cost === 0)
      return { outcome: { allowed: true, limit: capacity, remaining: tokens, resetAt, retryAfter: 0 } };
    const left = tokens - units;
    const reset = write
      ? this.writeBucket(rule, now, left, at)
      : left >= capacity
        ? now
        : this.bucketFull(rule, left, at);
    return {
      outcome: { allowed: true, limit: capacity, remaining: left, resetAt: reset, retryAfter: 0 },
      // counted from its last refill (a lagging caller: from its own clock, before it)
      counted: { start: Math.min(at, now), mark: 0 },
    };
  }

  private settleBucket(
    rule: Extract<ModelRule, { algorithm: "intervalBucket" }>,
    now: number,
    cost: number,
    actual: number,
    counted: Counted,
  ): number {
    const { capacity } = rule;
    const { tokens, at, stored } = this.readBucket(rule, now);
    if (actual < cost) {
      // back up to capacity, while no refill after the decision's is stored: until one is, the tokens
      // only moved by what was taken and given, so the difference back leaves the bucket as if only
      // `actual` had been taken; after one (which a full bucket may have cut), nothing
      if (stored === undefined || stored > counted.start) return 0;
      const given = Math.max(tokens, Math.min(capacity, tokens + cost - actual));
      if (given !== tokens) this.writeBucket(rule, now, given, at);
      return 0;
    }
    // (DEBT_CAP capacities taken in all: DEBT_CAP - 1 below zero)
    const left = Math.min(tokens, Math.max(tokens - (actual - cost), (1 - DEBT_CAP) * capacity));
    if (left === tokens) return 0;
    this.writeBucket(rule, now, left, at);
    return tokens - left;
  }

  // Fixed window: a count per window (of its own length), epoch-aligned.
  private fixedWindow(
    rule: Extract<ModelRule, { algorithm: "fixedWindow" }>,
    now: number,
    cost: number,
    write: boolean,
  ) {
    const { limit, window } = rule;
    const units = cost === 0 ? 1 : cost;
    const start = now - (now % window);
    const key = `${window}:${start}`;
    const count = this.fixed.get(key) ?? 0;
    const ends = start + window;
    const room = limit - count;
    const resetAt = count > 0 ? ends : now;
    const denied = (retryAfter: number) => ({
      outcome: { allowed: false, limit, remaining: Math.max(0, room), resetAt, retryAfter },
    });
    if (units > limit) return denied(Number.POSITIVE_INFINITY);
    if (units > room) return denied(ends - now);
    if (cost === 0) return { outcome: { allowed: true, limit, remaining: room, resetAt, retryAfter: 0 } };
    if (write) this.fixed.set(key, count + units);
    return {
      outcome: { allowed: true, limit, remaining: room - units, resetAt: ends, retryAfter: 0 },
      counted: { start, mark: 0 },
    };
  }

  private settleFixed(
    rule: Extract<ModelRule, { algorithm: "fixedWindow" }>,
    now: number,
    cost: number,
    actual: number,
    counted: Counted,
  ): number {
    const { limit, window } = rule;
    if (actual < cost) {
      if (now >= counted.start + window) return 0;
      const key = `${window}:${counted.start}`;
      const count = this.fixed.get(key);
      if (count === undefined) return 0;
      this.fixed.set(key, Math.max(0, Math.min(count, limit) - (cost - actual)));
      return 0;
    }
    const key = `${window}:${now - (now % window)}`;
    const count = this.fixed.get(key) ?? 0;
    const units = Math.min(actual - cost, DEBT_CAP * limit - count);
    if (units <= 0) return 0;
    this.fixed.set(key, count + units);
    return units;
  }

  // Sliding window: previous * max(0, spread - elapsed) / spread + current <= limit, in integers; the
  // stored window is its index mod 4 (now's, the next: a lagging caller's, the previous, or none).
  private counting(limit: number, window: number, now: number): Counting {
    let start = now - (now % window);
    let current = 0;
    let previous = 0;
    let slots = 0;
    const state = this.sliding.get(window);
    if (state !== undefined) {
      const at = mod(state.index - start / window, 4);
      if (at !== 2) {
        const stored = start + (at === 3 ? -1 : at) * window;
        const k = state.latest * SLOTS + state.earlier + (state.skewed ? 8192 : 0);
        if (stored >= start) {
          [start, current, previous, slots] = [stored, state.current, state.previous, k + 4096];
        } else {
          // the stored window is the previous one: its latest slot is now the earlier one
          previous = state.current;
          slots = state.latest + (state.skewed ? 8192 : 0);
        }
      }
    }
    // late: once clocks disagreed, a unit in a later slot than this window's latest spreads all its
    // units up to that slot: refused when that weighs on the next window more than this one's room
    let late = false;
    if (slots >= 8192 && current > 0 && now > start) {
      const latest = Math.floor((slots % 4096) / SLOTS);
      const slot = Math.floor(((now - start) * SLOTS) / window);
      if (slot > latest) {
        const from = (latest + 1) * window + 63;
        const to = (slot + 1) * window + 63;
        late = (current * (to - (to % 64) - (from - (from % 64)))) / 64 > (limit - current) * window;
      }
    }
    if (previous === 0) {
      const room = late ? Math.min(0, limit - current) : limit - current;
      return { start, current, previous, room, spread: window, slots, late };
    }
    let spread = window;
    if (slots >= 8192) spread = Math.floor((((slots % SLOTS) + 1) * window + 63) / SLOTS);
    const weight = now > start ? Math.max(0, spread - now + start) : spread;
    let room = Math.floor((limit * spread - previous * weight - current * spread) / spread);
    if (late && room > 0) room = 0;
    return { start, current, previous, room, spread, slots, late };
  }

  private commitSliding(limit: number, window: number, now: number, units: number, c: Counting): number {
    let slots = c.slots;
    let skewed = slots >= 8192;
    if (skewed) slots -= 8192;
    if (slots >= 4096) slots -= 4096;
    const earlier = slots % SLOTS;
    const latest = Math.floor(slots / SLOTS);
    let slot = latest;
    if (c.current === 0 || (now - c.start) * SLOTS >= (latest + 1) * window) {
      slot = now > c.start ? Math.floor(((now - c.start) * SLOTS) / window) : 0;
    }
    if (now < c.start && limit < 2 ** 18) skewed = true;
    this.sliding.set(window, {
      index: c.start / window,
      current: c.current + units,
      previous: c.previous,
      latest: slot,
      earlier,
      skewed,
    });
    return c.start + 2 * window;
  }

  private slidingWindow(
    rule: Extract<ModelRule, { algorithm: "slidingWindow" }>,
    now: number,
    cost: number,
    write: boolean,
  ) {
    const { limit, window } = rule;
    const units = cost === 0 ? 1 : cost;
    const c = this.counting(limit, window, now);
    const { start, current, previous, room, spread, slots, late } = c;
    const resetAt = current > 0 ? start + 2 * window : previous > 0 ? start + window : now;
    const denied = (retryAfter: number) => ({
      outcome: { allowed: false, limit, remaining: Math.max(0, room), resetAt, retryAfter },
    });
    if (units > limit) return denied(Number.POSITIVE_INFINITY);
    if (units > room) {
      if (current + units <= limit && !late) {
        const fade = spread - Math.floor(((limit - current - units) * spread) / previous);
        return denied(Math.max(1, start + fade - now));
      }
      let own = window;
      if (slots >= 8192) own = Math.floor(((Math.floor((slots % 4096) / SLOTS) + 1) * window + 63) / SLOTS);
      const fade = Math.max(0, own - Math.floor(((limit - units) * own) / current));
      return denied(start + window - now + fade);
    }
    if (cost === 0) return { outcome: { allowed: true, limit, remaining: room, resetAt, retryAfter: 0 } };
    const fades = write ? this.commitSliding(limit, window, now, units, c) : start + 2 * window;
    return {
      outcome: { allowed: true, limit, remaining: room - units, resetAt: fades, retryAfter: 0 },
      counted: { start, mark: 0 },
    };
  }

  private settleSliding(
    rule: Extract<ModelRule, { algorithm: "slidingWindow" }>,
    now: number,
    cost: number,
    actual: number,
    counted: Counted,
  ): number {
    const { limit, window } = rule;
    if (actual < cost) {
      // nothing once the window the units were counted in has faded out (a state four windows later
      // has the same index mod 4: lua/algorithms/sliding_window.lua's refund looks at `now` first)
      if (now >= counted.start + 2 * window) return 0;
      const state = this.sliding.get(window);
      if (state === undefined) return 0;
      const at = mod(state.index - counted.start / window, 4);
      const units = cost - actual;
      if (at === 0) state.current = Math.max(0, state.current - units);
      else if (at === 1) state.previous = Math.max(0, state.previous - units);
      return 0;
    }
    const c = this.counting(limit, window, now);
    const units = Math.min(actual - cost, Math.min(DEBT_CAP * limit, 2 ** 25 - 1) - c.current);
    if (units <= 0) return 0;
    this.commitSliding(limit, window, now, units, c);
    return units;
  }

  // Sliding log: entries stamped max(now, newest stamp); at most `limit` with stamps in (stamp - window, ...].
  private stamped(window: number, now: number) {
    let newest: number | undefined;
    for (const entry of this.log) newest = newest === undefined ? entry.stamp : Math.max(newest, entry.stamp);
    const stamp = newest === undefined ? now : Math.max(now, newest);
    const inWindow = this.log.filter((entry) => entry.stamp > stamp - window);
    return { newest, stamp, inWindow };
  }

  private commitLog(window: number, stamp: number, count: number, units: number): void {
    this.log = this.log.filter((entry) => entry.stamp > stamp - window);
    let n = count;
    for (let added = 0; added < units; ) {
      n++;
      if (this.log.some((entry) => entry.stamp === stamp && entry.n === n)) continue;
      this.log.push({ stamp, n });
      added++;
    }
  }

  private slidingLog(
    rule: Extract<ModelRule, { algorithm: "slidingLog" }>,
    now: number,
    cost: number,
    write: boolean,
  ) {
    const { limit, window } = rule;
    const units = cost === 0 ? 1 : cost;
    const { newest, stamp, inWindow } = this.stamped(window, now);
    const count = inWindow.length;
    const room = limit - count;
    const resetAt = count > 0 ? newest! + window : now;
    const denied = (retryAfter: number) => ({
      outcome: { allowed: false, limit, remaining: Math.max(0, room), resetAt, retryAfter },
    });
    if (units > limit) return denied(Number.POSITIVE_INFINITY);
    if (units > room) {
      const stamps = inWindow.map((entry) => entry.stamp).sort((a, b) => a - b);
      return denied(stamps[count + units - limit - 1]! + window - now);
    }
    if (cost === 0) return { outcome: { allowed: true, limit, remaining: room, resetAt, retryAfter: 0 } };
    if (write) this.commitLog(window, stamp, count, units);
    return {
      outcome: { allowed: true, limit, remaining: room - units, resetAt: stamp + window, retryAfter: 0 },
      counted: { start: stamp, mark: count },
    };
  }

  private settleLog(
    rule: Extract<ModelRule, { algorithm: "slidingLog" }>,
    now: number,
    cost: number,
    actual: number,
    counted: Counted,
  ): number {
    const { limit, window } = rule;
    if (actual < cost) {
      const { start: stamp, mark } = counted;
      this.log = this.log.filter((e) => !(e.stamp === stamp && e.n > mark + actual && e.n <= mark + cost));
      return 0;
    }
    const { stamp, inWindow } = this.stamped(window, now);
    const units = Math.min(actual - cost, DEBT_CAP * limit - inWindow.length);
    if (units <= 0) return 0;
    this.commitLog(window, stamp, inWindow.length, units);
    return units;
  }
}
