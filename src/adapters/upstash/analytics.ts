// The peer's analytics, where it and the Upstash console read them: per hour, a sorted set
// `<prefix>:events:<hour start ms>` whose members are the JSON of { identifier, success, ...geo } and
// whose scores are counts. The entry counts in the isolate and writes the counts in one background
// pipeline (ZINCRBY by the count): no command on a decision's request path.

import { eventsKey } from "./keys.js";
import type { Client } from "./ratelimit.js";

/** Where a request came from, as Vercel's `req.geo` or Cloudflare's `request.cf` say it. */
export interface Geo {
  country?: string;
  city?: string;
  region?: string;
  ip?: string;
}

/** `true` admitted, `false` limited, "denied" on the deny list. */
export type EventSuccess = boolean | "denied";

/** One request, as analytics record it. */
export type Event = Geo & { identifier: string; time: number; success: EventSuccess };

/** Options of `new Analytics()`. */
export interface AnalyticsConfig {
  redis: unknown;
  prefix?: string;
}

const HOUR = 3_600_000;
/** How long the counts of one hour are kept, as the peer's retention says. */
const RETENTION_MS = 90 * 24 * HOUR;
/** Counts are written this long after the first one of a batch. */
const FLUSH_MS = 1000;
/** Most hours a read goes back. */
const MAX_HOURS = 256;

const hourOf = (time: number) => Math.floor(time / HOUR) * HOUR;

/** The member an event is counted under: its JSON without the time, in the peer's field order. */
function memberOf(identifier: string, success: EventSuccess, geo: Geo | undefined): string {
  return JSON.stringify({ identifier, success, ...geo });
}

/** Counts decisions in the isolate and writes them in the background, one pipeline a batch. */
export class Recorder {
  private counts = new Map<string, Map<string, number>>();
  private flushing: Promise<void> | undefined;

  constructor(
    private readonly redis: unknown,
    private readonly prefix: string,
  ) {}

  /** Counts one decision; the promise resolves once its batch is written (the `pending` of it). */
  record(identifier: string, success: EventSuccess, time: number, geo: Geo | undefined): Promise<void> {
    const key = eventsKey(this.prefix, hourOf(time));
    let members = this.counts.get(key);
    if (members === undefined) {
      members = new Map();
      this.counts.set(key, members);
    }
    const member = memberOf(identifier, success, geo);
    members.set(member, (members.get(member) ?? 0) + 1);
    this.flushing ??= new Promise<void>((resolve) => setTimeout(resolve, FLUSH_MS)).then(() => this.flush());
    return this.flushing;
  }

  /** Writes every count held, in one pipeline. Never rejects: analytics do not fail a request. */
  private async flush(): Promise<void> {
    const counts = this.counts;
    this.counts = new Map();
    this.flushing = undefined;
    const pipeline = (this.redis as Client).pipeline();
    for (const [key, members] of counts) {
      for (const [member, count] of members) pipeline.zincrby(key, count, member);
      pipeline.pexpire(key, RETENTION_MS);
    }
    try {
      await pipeline.exec();
    } catch (error) {
      console.warn("edgelimit/upstash: analytics were not written", error);
    }
  }
}

/** One hour's counts of a field's values. */
export interface Aggregate {
  time: number;
  [field: string]: number | Record<string, number>;
}

/**
 * Reads the analytics the peer's format keeps (and writes one event at once, with `record`).
 *
 * @example
 * const usage = await new Analytics({ redis }).getUsage(Date.now() - 24 * 3_600_000);
 */
export class Analytics {
  private readonly redis: Client;
  private readonly prefix: string;

  constructor(config: AnalyticsConfig) {
    this.redis = config.redis as Client;
    this.prefix = config.prefix ?? "@upstash/ratelimit";
  }

  /** Vercel's `req.geo`, else Cloudflare's `request.cf`, else nothing. */
  extractGeo(req: { geo?: Geo; cf?: Geo }): Geo {
    return req.geo ?? req.cf ?? {};
  }

  /** Counts one event now (one request). */
  async record(event: Event): Promise<void> {
    const { identifier, success, time, ...geo } = event;
    await (
      this.redis as unknown as { zincrby(key: string, by: number, member: string): Promise<unknown> }
    ).zincrby(eventsKey(this.prefix, hourOf(time)), 1, memberOf(identifier, success, geo));
  }

  /** Per identifier: requests admitted and blocked (limited or denied) since `cutoff`. */
  async getUsage(cutoff = 0): Promise<Record<string, { success: number; blocked: number }>> {
    const usage: Record<string, { success: number; blocked: number }> = {};
    for (const { events } of await this.hours(this.hoursSince(cutoff))) {
      for (const [event, count] of events) {
        const entry = usage[event.identifier] ?? { success: 0, blocked: 0 };
        usage[event.identifier] = entry;
        if (event.success === true) entry.success += count;
        else entry.blocked += count;
      }
    }
    return usage;
  }

  /** Per hour since `cutoff`, the counts of each value of `filter`. */
  async series(filter: keyof Omit<Event, "time">, cutoff: number): Promise<Aggregate[]> {
    return this.getUsageOverTime(this.hoursSince(cutoff), filter);
  }

  /** Per hour, the last `timestampCount` hours, the counts of each value of `groupby`. */
  async getUsageOverTime(timestampCount: number, groupby: keyof Omit<Event, "time">): Promise<Aggregate[]> {
    return (await this.hours(timestampCount)).map(({ time, events }) => {
      const values: Record<string, number> = {};
      for (const [event, count] of events) {
        const value = String((event as unknown as Record<string, unknown>)[groupby] ?? "null");
        values[value] = (values[value] ?? 0) + count;
      }
      return { time, [groupby]: values };
    });
  }

  /** The identifiers most admitted, limited and denied over the last `timestampCount` hours. */
  async getMostAllowedBlocked(
    timestampCount: number,
    getTop = 5,
  ): Promise<Record<"allowed" | "ratelimited" | "denied", { identifier: string; count: number }[]>> {
    const tallies = {
      allowed: new Map<string, number>(),
      ratelimited: new Map<string, number>(),
      denied: new Map<string, number>(),
    };
    for (const { events } of await this.hours(timestampCount)) {
      for (const [event, count] of events) {
        const tally =
          event.success === true
            ? tallies.allowed
            : event.success === "denied"
              ? tallies.denied
              : tallies.ratelimited;
        tally.set(event.identifier, (tally.get(event.identifier) ?? 0) + count);
      }
    }
    const top = (tally: Map<string, number>) =>
      [...tally]
        .sort((a, b) => b[1] - a[1])
        .slice(0, getTop)
        .map(([identifier, count]) => ({ identifier, count }));
    return {
      allowed: top(tallies.allowed),
      ratelimited: top(tallies.ratelimited),
      denied: top(tallies.denied),
    };
  }

  private hoursSince(cutoff: number): number {
    return Math.min(Math.max(1, (hourOf(Date.now()) - hourOf(cutoff)) / HOUR + 1), MAX_HOURS);
  }

  /** The last `count` hours (this one first), each with its events and counts. */
  private async hours(count: number): Promise<{ time: number; events: [Event, number][] }[]> {
    const now = hourOf(Date.now());
    const times = Array.from(
      { length: Math.min(Math.max(0, Math.floor(count)), MAX_HOURS) },
      (_, i) => now - i * HOUR,
    );
    const read = this.redis as unknown as {
      zrange(key: string, start: number, stop: number, options: { withScores: true }): Promise<unknown[]>;
    };
    const replies = await Promise.all(
      times.map((time) => read.zrange(eventsKey(this.prefix, time), 0, -1, { withScores: true })),
    );
    return times.map((time, i) => {
      const reply = replies[i] ?? [];
      const events: [Event, number][] = [];
      for (let j = 0; j + 1 < reply.length; j += 2) {
        const member = reply[j];
        // @upstash/redis parses a JSON member for us unless told not to
        const event = (typeof member === "string" ? JSON.parse(member) : member) as Event;
        events.push([event, Number(reply[j + 1])]);
      }
      return { time, events };
    });
  }
}
