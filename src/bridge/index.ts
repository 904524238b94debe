/**
 * `edgelimit/bridge`: an Upstash-compatible REST server in front of a real redis-server (local
 * development, tests, self-hosting), and a helper that spawns a throwaway redis-server. Node only.
 */

export { type RedisServer, type RedisServerOptions, startRedisServer } from "./redis-server.js";
export {
  type Arg,
  type ConnectOptions,
  connectRedis,
  type RedisConnection,
  RedisError,
  type Reply,
} from "./resp.js";
export { type Bridge, type BridgeOptions, type BridgeStats, startBridge } from "./server.js";
