// Setup a test file repeats: a REST bridge of the file's own, and a guard against unhandled rejections.
// Call both at the top level of the file, the guard first: hooks stack, so the bridge closes before
// the guard's check runs.
import { afterAll, beforeAll, expect, inject } from "vitest";
import { type Bridge, startBridge } from "../src/bridge/index.js";

/** Fails the calling file, after its last test, if any promise rejection went unhandled while it ran. */
export function failOnUnhandledRejections(): void {
  const reasons: unknown[] = [];
  const onUnhandled = (reason: unknown) => reasons.push(reason);
  beforeAll(() => {
    process.on("unhandledRejection", onUnhandled);
  });
  afterAll(() => {
    process.off("unhandledRejection", onUnhandled);
    expect(reasons).toEqual([]);
  });
}

/**
 * A REST bridge of the calling file's own on the global setup's redis-server (so its request counts
 * are the file's alone), started before the file's tests and closed after them. Read `url` and
 * `stats` inside hooks and tests, not at the top level.
 */
export function ownBridge(): Pick<Bridge, "url" | "stats"> {
  let bridge: Bridge | undefined;
  beforeAll(async () => {
    bridge = await startBridge({ redisUrl: inject("redisUrl"), port: 0, token: inject("bridgeToken") });
  });
  afterAll(async () => {
    await bridge?.close();
  });
  const started = (): Bridge => {
    if (!bridge)
      throw new Error("ownBridge(): the bridge starts in beforeAll; read it inside a hook or test");
    return bridge;
  };
  return {
    get url() {
      return started().url;
    },
    get stats() {
      return started().stats;
    },
  };
}
