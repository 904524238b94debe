/**
 * `edgelimit/bridge`: an Upstash-compatible REST server in front of a real redis-server (local
 * development, tests, self-hosting), a helper that spawns a throwaway redis-server, and a small RESP
 * client for what a test asks Redis directly. Node only.
 */

export { freePort, type RedisServer, type RedisServerOptions, startRedisServer } from "./redis-server.js";
export {
  type Arg,
  type ConnectOptions,
  connectRedis,
  type RedisConnection,
  RedisError,
  type Reply,
} from "./resp.js";
export { type Bridge, type BridgeOptions, type BridgeStats, startBridge } from "./server.js";
