// Next.js middleware (Next 12-15, edge runtime) rate limiting /api per client IP.
// On Next 16+ name this file proxy.ts: the same default export works there (Node.js runtime).
import { Redis } from "@upstash/redis";
import { fixedWindow, gcra, Limiter } from "edgelimit";
import { createMiddleware } from "edgelimit/vercel";

// Built once per isolate, not per request: its deny cache then answers repeat offenders without Redis.
const limiter = new Limiter({
  redis: Redis.fromEnv(), // UPSTASH_REDIS_REST_URL and UPSTASH_REDIS_REST_TOKEN
  prefix: "myapp",
  rules: {
    burst: gcra({ limit: 10, period: "1s", burst: 20 }),
    daily: fixedWindow({ limit: 10_000, window: "1d" }),
  },
  timeout: 500, // ms; past it the request goes on (onError: "allow") rather than wait on Redis
  onError: "allow",
});

export default createMiddleware({
  limiter,
  routes: ["/api/*"],
  // Uploads cost more than reads.
  cost: (request: Request) => (request.method === "POST" ? 5 : 1),
});

// Run the middleware only where it limits anything.
export const config = { matcher: ["/api/:path*"] };
