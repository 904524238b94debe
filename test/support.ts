import { Redis } from "@upstash/redis";
import { inject } from "vitest";

/** 2023-11-14T22:14:00Z: a round minute, so every window in the tests starts exactly here. */
export const T0 = 1_700_000_040_000;

/** A clock the test moves by hand. */
export function manualClock(start = T0) {
  const clock = () => clock.now;
  clock.now = start;
  clock.set = (now: number) => {
    clock.now = now;
  };
  return clock;
}

/** A real @upstash/redis client talking to the bridge the global setup started. */
export function bridgeRedis(url = inject("bridgeUrl")): Redis {
  return new Redis({ url, token: inject("bridgeToken"), enableTelemetry: false });
}

let counter = 0;
/** A key prefix no other test uses, so tests can share one Redis. */
export function uniquePrefix(name: string): string {
  counter += 1;
  return `t-${name}-${counter}-${crypto.randomUUID().slice(0, 8)}`;
}
