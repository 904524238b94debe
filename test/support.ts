// What test files share: the clock they move by hand, unique key prefixes, and the Redis they run on.
//
// The Redis: one redis-server and one REST bridge in front of it, started once by the global setup
// (test/global-setup.ts) for the whole run and shared by every file of the node, slow and edge
// projects. Files never share state on it: every key a test writes is under a prefix of its own
// (`uniquePrefix`, random per call), and no file flushes or reconfigures the shared server or reads
// keys beyond its own prefix.
//  - `bridgeRedis()`, `sharedBridge()`: an @upstash/redis client of the shared bridge, or its address;
//  - `sharedRedis()`: a direct RESP connection to the shared redis-server, for what a test checks in
//    Redis itself;
//  - `ownBridge()`: a bridge of the file's own on the shared server, where a file counts the
//    requests its own code sends;
//  - `privateRedis()`: a redis-server and bridge of the file's own, only where what a test reads is
//    server-wide (INFO commandstats, client counts) or it changes the server (SCRIPT FLUSH).
// The last three start sockets or processes: they are Node's own, in test/own-bridge.ts (this file
// runs in workerd and edge-runtime too). Files that kill, stop or restart servers, or need several
// or a Cluster, start their own (test/faults, test/cluster.ts, the region tests).
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

/** The shared bridge's address and token, for a client or a Worker a test configures itself. */
export function sharedBridge(): { url: string; token: string } {
  return { url: inject("bridgeUrl"), token: inject("bridgeToken") };
}

let counter = 0;
/** A key prefix no other test uses, so tests can share one Redis. */
export function uniquePrefix(name: string): string {
  counter += 1;
  return `t-${name}-${counter}-${crypto.randomUUID().slice(0, 8)}`;
}
