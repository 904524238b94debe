/**
 * Global setup of the Node test projects: a private redis-server on a free port and the REST bridge
 * in front of it, shared by every test file (tests use unique key names). Tests read the addresses
 * with `inject("redisUrl")`, `inject("bridgeUrl")` and `inject("bridgeToken")`.
 * The "slow" project first checks what its tests need beyond Node and redis-server (the browser), so
 * that a missing prerequisite fails the run at once, naming the fix, instead of a hook timing out.
 */
import { randomUUID } from "node:crypto";
import { accessSync, constants } from "node:fs";
import type { TestProject } from "vitest/node";
import { startBridge, startRedisServer } from "../src/bridge/index.js";

declare module "vitest" {
  export interface ProvidedContext {
    /** `redis://127.0.0.1:PORT` of the private redis-server. */
    redisUrl: string;
    /** `http://127.0.0.1:PORT` of the bridge in front of it. */
    bridgeUrl: string;
    /** The bearer token the bridge expects. */
    bridgeToken: string;
  }
}

/** Debian's chromium, which test/ops-browser.test.ts drives through playwright-core. */
export const CHROMIUM = "/usr/bin/chromium";

function checkPrerequisites(project: TestProject): void {
  if (project.name !== "slow") return;
  try {
    accessSync(CHROMIUM, constants.X_OK);
  } catch {
    throw new Error(
      `${CHROMIUM} is missing: the ops page's browser test (test/ops-browser.test.ts) needs Debian's chromium. ` +
        "Install it with `apt-get install -y chromium` (.ci/run does when it is missing), " +
        "or run `npm run test:fast`, which needs no browser.",
    );
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  checkPrerequisites(project);
  const redis = await startRedisServer();
  const token = `test-${randomUUID()}`;
  let bridge: Awaited<ReturnType<typeof startBridge>>;
  try {
    bridge = await startBridge({ redisUrl: redis.url, port: 0, token });
  } catch (error) {
    await redis.stop();
    throw error;
  }
  project.provide("redisUrl", redis.url);
  project.provide("bridgeUrl", bridge.url);
  project.provide("bridgeToken", token);
  return async () => {
    await bridge.close();
    await redis.stop();
  };
}
