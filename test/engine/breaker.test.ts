import { describe, expect, it } from "vitest";
import { type Admission, BREAKER_DEFAULTS, Breaker, breakerOptions } from "../../src/engine/breaker.js";
import { RedisCallError } from "../../src/engine/errors.js";

function clock(start = 0) {
  const now = () => now.t;
  now.t = start;
  return now;
}
const timeout = new RedisCallError("timeout", "edgelimit: Redis did not answer within 1000 ms");

function make(options = {}) {
  const now = clock();
  const breaker = new Breaker(breakerOptions(options), now);
  /** One call: admitted or refused; an admitted one then fails or succeeds. */
  const call = (outcome: "fail" | "ok"): "sent" | "refused" => {
    const admission = breaker.admit();
    if (admission instanceof RedisCallError) return "refused";
    if (outcome === "ok") breaker.success();
    else breaker.failure(timeout, admission);
    return "sent";
  };
  return { breaker, now, call };
}

describe("circuit breaker", () => {
  it("has the documented defaults", () => {
    expect(BREAKER_DEFAULTS).toEqual({ failures: 5, cooldown: 1000, maxCooldown: 4000 });
    expect(breakerOptions({})).toEqual({ failures: 5, cooldown: 1000, maxCooldown: 4000 });
    expect(breakerOptions({ cooldown: 10_000 })).toEqual({
      failures: 5,
      cooldown: 10_000,
      maxCooldown: 10_000,
    });
  });

  it("opens after `failures` consecutive failures, and a success in between starts the count again", () => {
    const { breaker, call } = make({ failures: 3 });
    expect([call("fail"), call("fail"), call("ok"), call("fail"), call("fail")]).toEqual(
      Array(5).fill("sent"),
    );
    expect(breaker.state).toBe("closed");
    expect(call("fail")).toBe("sent");
    expect(breaker.state).toBe("open");
    expect([call("ok"), call("ok"), call("ok")]).toEqual(["refused", "refused", "refused"]);
    expect(breaker.opened).toBe(1);
  });

  it("refuses with an error that says it is open, why, and when it probes", () => {
    const { breaker, now, call } = make({ failures: 1, cooldown: 500 });
    call("fail");
    now.t = 120;
    const refusal = breaker.admit() as RedisCallError;
    expect(refusal).toBeInstanceOf(RedisCallError);
    expect(refusal.kind).toBe("breaker-open");
    expect(refusal.message).toMatch(/circuit breaker open, Redis not asked \(next probe in 380 ms/);
    expect(refusal.message).toMatch(/last failure: timeout: edgelimit: Redis did not answer within 1000 ms/);
    expect(refusal.cause).toBe(timeout);
  });

  it("lets one probe through after the cooldown; its success closes the breaker", () => {
    const { breaker, now, call } = make({ failures: 1, cooldown: 1000 });
    call("fail");
    now.t = 999;
    expect(breaker.admit()).toBeInstanceOf(RedisCallError);
    now.t = 1000;
    const probe = breaker.admit() as Admission;
    expect(probe).toEqual({ probe: true });
    expect(breaker.state).toBe("half-open");
    expect(breaker.admit()).toBeInstanceOf(RedisCallError); // one probe at a time
    expect((breaker.admit() as RedisCallError).message).toMatch(/a probe is in flight/);
    breaker.success();
    expect(breaker.state).toBe("closed");
    expect(breaker.admit()).toEqual({ probe: false });
  });

  it("reopens after a failed probe with the cooldown doubled, up to maxCooldown, and resets it on success", () => {
    const { breaker, now, call } = make({ failures: 1, cooldown: 1000, maxCooldown: 3000 });
    call("fail"); // opens at 0
    const probeTimes: number[] = [];
    for (let t = 0; t <= 12_000; t += 100) {
      now.t = t;
      const admission = breaker.admit();
      if (admission instanceof RedisCallError) continue;
      probeTimes.push(t);
      breaker.failure(timeout, admission);
    }
    // cooldowns 1000, 2000, 3000 (capped), 3000, ...
    expect(probeTimes).toEqual([1000, 3000, 6000, 9000, 12_000]);
    now.t = 15_000;
    expect(call("ok")).toBe("sent");
    call("fail");
    now.t = 15_999;
    expect(breaker.admit()).toBeInstanceOf(RedisCallError);
    now.t = 16_000;
    expect(breaker.admit()).toEqual({ probe: true }); // back to the first cooldown
  });

  it("ignores late failures of calls sent before it opened, and closes on any success", () => {
    const { breaker, now } = make({ failures: 2, cooldown: 1000 });
    const early = [breaker.admit(), breaker.admit(), breaker.admit()] as Admission[];
    breaker.failure(timeout, early[0]!);
    breaker.failure(timeout, early[1]!);
    expect(breaker.state).toBe("open");
    now.t = 500;
    breaker.failure(timeout, early[2]!); // does not push the probe back
    now.t = 1000;
    expect(breaker.admit()).toEqual({ probe: true });
    breaker.failure(timeout, early[2]!); // a non-probe failure does not reopen a half-open breaker
    expect(breaker.state).toBe("half-open");
    breaker.success();
    expect(breaker.state).toBe("closed");
  });

  it("lets another probe through when one never came back within a cooldown", () => {
    const { breaker, now, call } = make({ failures: 1, cooldown: 1000 });
    call("fail");
    now.t = 1000;
    expect(breaker.admit()).toEqual({ probe: true });
    now.t = 1999;
    expect(breaker.admit()).toBeInstanceOf(RedisCallError);
    now.t = 2000;
    expect(breaker.admit()).toEqual({ probe: true });
  });

  it.each([
    [{ failures: 0 }, /breaker\.failures: must be a whole number from 1/],
    [{ failures: 2.5 }, /breaker\.failures/],
    [{ cooldown: -1 }, /breaker\.cooldown: must be a positive number of milliseconds/],
    [{ cooldown: Number.NaN }, /breaker\.cooldown/],
    [
      { cooldown: 2000, maxCooldown: 1000 },
      /breaker\.maxCooldown: must be at least breaker\.cooldown \(2000\)/,
    ],
    [{ failure: 3 }, /breaker\.failure: not a breaker option; it takes failures, cooldown, maxCooldown/],
    [true, /breaker: expected \{ failures, cooldown, maxCooldown \} or false/],
  ])("rejects %j, naming the field", (options, message) => {
    expect(() => breakerOptions(options as never)).toThrow(message);
  });
});
