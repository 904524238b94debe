/**
 * Global setup of the "node" test project: a private redis-server on a free port and the REST bridge
 * in front of it, shared by every test file (tests use unique key names). Tests read the addresses
 * with `inject("redisUrl")`, `inject("bridgeUrl")` and `inject("bridgeToken")`.
 */
import { randomUUID } from "node:crypto";
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

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
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
