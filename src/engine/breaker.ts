import { describe } from "./duration.js";
import { RedisCallError } from "./errors.js";

/** `breaker` option of a Limiter (and of anything else that talks to Redis through the transport). */
export interface BreakerOptions {
  /** Consecutive failed calls that open the breaker (default 5). */
  failures?: number;
  /** Ms the breaker stays open before one probe goes to Redis (default 1000). */
  cooldown?: number;
  /** Ceiling of the cooldown, which doubles after every failed probe (default 4000). */
  maxCooldown?: number;
}

export const BREAKER_DEFAULTS: Readonly<Required<BreakerOptions>> = Object.freeze({
  failures: 5,
  cooldown: 1000,
  maxCooldown: 4000,
});

const FIELDS = Object.keys(BREAKER_DEFAULTS);

/** The options with defaults filled in; throws an error naming the field when one is wrong. */
export function breakerOptions(options: BreakerOptions): Required<BreakerOptions> {
  if (options === null || typeof options !== "object") {
    throw new Error(
      `breaker: expected { failures, cooldown, maxCooldown } or false, got ${describe(options)}`,
    );
  }
  for (const field of Object.keys(options)) {
    if (!FIELDS.includes(field))
      throw new Error(`breaker.${field}: not a breaker option; it takes ${FIELDS.join(", ")}`);
  }
  const failures = options.failures ?? BREAKER_DEFAULTS.failures;
  if (typeof failures !== "number" || !Number.isInteger(failures) || failures < 1 || failures > 1_000_000) {
    throw new Error(`breaker.failures: must be a whole number from 1 to 1000000, got ${describe(failures)}`);
  }
  const cooldown = options.cooldown ?? BREAKER_DEFAULTS.cooldown;
  checkMs(cooldown, "breaker.cooldown");
  const maxCooldown = options.maxCooldown ?? Math.max(BREAKER_DEFAULTS.maxCooldown, cooldown);
  checkMs(maxCooldown, "breaker.maxCooldown");
  if (maxCooldown < cooldown) {
    throw new Error(
      `breaker.maxCooldown: must be at least breaker.cooldown (${cooldown}), got ${maxCooldown}`,
    );
  }
  return { failures, cooldown, maxCooldown };
}

function checkMs(value: unknown, field: string): void {
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0 || value > 86_400_000) {
    throw new Error(
      `${field}: must be a positive number of milliseconds up to 86400000, got ${describe(value)}`,
    );
  }
}

export type BreakerState = "closed" | "open" | "half-open";

/** What `admit()` grants: a call that may go to Redis, and whether it is the half-open probe. */
export interface Admission {
  readonly probe: boolean;
}

// the two grants, shared: admitting a call allocates nothing
const CALL: Admission = Object.freeze({ probe: false });
const PROBE: Admission = Object.freeze({ probe: true });

/**
 * A circuit breaker over calls to one Redis.
 *
 * closed ──(`failures` consecutive failed calls)──▶ open ──(cooldown elapsed)──▶ half-open: ONE call
 * goes to Redis as a probe, every other call is refused at once. The probe's success closes the
 * breaker (and resets the cooldown); its failure reopens it with the cooldown doubled, up to
 * `maxCooldown`. A success of any call, in any state, closes it: Redis answered. A probe that gets no
 * outcome within one cooldown (an infinite timeout) stops counting as in flight, so another call probes.
 *
 * Time comes from `now` (monotonic ms), never from the Limiter's `clock`, which is the caller's
 * wall-clock time for the scripts and may stand still in tests.
 *
 * @example
 * const breaker = new Breaker(breakerOptions({}), () => performance.now());
 * const admission = breaker.admit();
 * if (admission instanceof RedisCallError) return failFast(admission);
 */
export class Breaker {
  private consecutive = 0;
  private stateNow: BreakerState = "closed";
  private openedAt = 0;
  private cooldown: number;
  private probeSince: number | undefined;
  private lastFailure: RedisCallError | undefined;
  /** Times the breaker opened (from closed or after a failed probe), for tests and reports. */
  opened = 0;

  constructor(
    readonly options: Required<BreakerOptions>,
    private readonly now: () => number,
  ) {
    this.cooldown = options.cooldown;
  }

  get state(): BreakerState {
    return this.stateNow;
  }

  /** Whether a call may go to Redis now; the refusal, with why, when it may not. */
  admit(): Admission | RedisCallError {
    if (this.stateNow === "closed") return CALL;
    const now = this.now();
    if (this.stateNow === "open") {
      if (now - this.openedAt < this.cooldown) return this.refusal(this.openedAt + this.cooldown - now);
      this.stateNow = "half-open";
      this.probeSince = now;
      return PROBE;
    }
    // half-open: one probe at a time, unless the last one never came back
    if (this.probeSince !== undefined && now - this.probeSince < this.cooldown) return this.refusal(0);
    this.probeSince = now;
    return PROBE;
  }

  success(): void {
    this.consecutive = 0;
    this.stateNow = "closed";
    this.cooldown = this.options.cooldown;
    this.probeSince = undefined;
  }

  failure(error: RedisCallError, admission: Admission): void {
    this.lastFailure = error;
    if (admission.probe) {
      if (this.stateNow !== "half-open") return; // another call closed it meanwhile
      this.cooldown = Math.min(this.cooldown * 2, this.options.maxCooldown);
      this.open();
      return;
    }
    if (this.stateNow !== "closed") return; // a late failure of a call sent before the breaker opened
    this.consecutive += 1;
    if (this.consecutive >= this.options.failures) this.open();
  }

  private open(): void {
    this.stateNow = "open";
    this.openedAt = this.now();
    this.probeSince = undefined;
    this.opened += 1;
  }

  private refusal(wait: number): RedisCallError {
    const last = this.lastFailure;
    const why = last ? `last failure: ${last.kind}: ${last.message}` : "repeated failures";
    const when = wait > 0 ? `next probe in ${Math.ceil(wait)} ms` : "a probe is in flight";
    return new RedisCallError(
      "breaker-open",
      `edgelimit: circuit breaker open, Redis not asked (${when}; opens after ${this.options.failures} consecutive failures; ${why})`,
      { cause: last },
    );
  }
}
