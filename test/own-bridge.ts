// Setup a test file repeats, in Node (see test/support.ts for which Redis to use when): a REST bridge
// of the file's own, a direct connection to the shared redis-server, a redis-server of the file's
// own, and a guard against unhandled rejections. Call them at the top level of the file (or of a
// describe), the guard first: hooks stack, so the bridge closes before the guard's check runs.
import { Redis } from "@upstash/redis";
import { afterAll, beforeAll, expect, inject } from "vitest";
import {
  type Bridge,
  type BridgeOptions,
  type RedisServer,
  startBridge,
  startRedisServer,
} from "../src/bridge/index.js";
import { connectRedis, type RedisConnection } from "../src/bridge/resp.js";

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

/** Reads a fixture started in beforeAll, with a clear error where it is read too early. */
function started<T>(value: T | undefined, what: string): T {
  if (value === undefined) throw new Error(`${what} starts in beforeAll; read it inside a hook or test`);
  return value;
}

/**
 * A direct RESP connection to the shared redis-server, opened before the calling file's (or
 * describe's) tests and closed after them. Read `conn` inside hooks and tests.
 */
export function sharedRedis(): { readonly conn: RedisConnection } {
  let conn: RedisConnection | undefined;
  beforeAll(async () => {
    conn = await connectRedis(inject("redisUrl"));
  });
  afterAll(async () => {
    await conn?.close();
  });
  return {
    get conn() {
      return started(conn, "sharedRedis()");
    },
  };
}

/** A redis-server of the caller's own, the bridge in front of it, a client of each. */
export interface PrivateRedis {
  readonly server: RedisServer;
  readonly bridge: Bridge;
  /** A direct RESP connection to the server. */
  readonly conn: RedisConnection;
  /** An @upstash/redis client of the bridge. */
  readonly redis: Redis;
  readonly token: string;
}

/**
 * A redis-server and REST bridge of the calling file's (or describe's) own, started before its tests
 * and stopped after them: only for tests that read what is server-wide (INFO commandstats, connection
 * counts) or change the server (SCRIPT FLUSH), which other files running beside them would disturb.
 * `bridge`: more of the bridge's options. Read the fields inside hooks and tests.
 */
export function privateRedis(
  options: { token?: string; bridge?: Omit<BridgeOptions, "redisUrl" | "token" | "port"> } = {},
): PrivateRedis {
  const token = options.token ?? `private-${crypto.randomUUID().slice(0, 8)}`;
  let own: Omit<PrivateRedis, "token"> | undefined;
  let server: RedisServer | undefined;
  let bridge: Bridge | undefined;
  let conn: RedisConnection | undefined;
  beforeAll(async () => {
    server = await startRedisServer();
    bridge = await startBridge({ ...options.bridge, redisUrl: server.url, port: 0, token });
    conn = await connectRedis(server.url);
    const redis = new Redis({ url: bridge.url, token, enableTelemetry: false });
    own = { server, bridge, conn, redis };
  });
  afterAll(async () => {
    await conn?.close();
    await bridge?.close();
    await server?.stop();
  });
  const get = () => started(own, "privateRedis()");
  return {
    get server() {
      return get().server;
    },
    get bridge() {
      return get().bridge;
    },
    get conn() {
      return get().conn;
    },
    get redis() {
      return get().redis;
    },
    token,
  };
}
