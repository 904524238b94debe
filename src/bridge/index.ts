/**
 * `edgelimit/bridge`: an Upstash-compatible REST server in front of a real redis-server (local
 * development, tests, self-hosting), and a helper that spawns a throwaway redis-server. Node only.
 */

export { freePort, type RedisServer, type RedisServerOptions, startRedisServer } from "./redis-server.js";
export { type Bridge, type BridgeOptions, type BridgeStats, startBridge } from "./server.js";
