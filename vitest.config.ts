import { defineConfig } from "vitest/config";

// Four projects, one command (`npm test` runs them all; `npm run test:fast` all but "slow"):
//  - node:  the engine, the bridge, the Hono middleware (test/**/*.test.ts)
//  - edge:  the Vercel middleware inside edge-runtime (test/adapters/vercel/**/*.test.ts)
//  - workers: the Cloudflare Worker inside workerd (vitest.workers.config.ts)
//  - slow:  in Node too, the tests that start processes (`npm start`'s script, wrangler dev, the
//           browser, workerd through Miniflare, node, tsc, several redis-servers, a Cluster), kill
//           and restart them, wait on the real clock, or measure for long. Its global setup checks
//           their prerequisites first (test/global-setup.ts), so a missing one fails the run at once.
const SLOW = [
  // npm start's script, wrangler dev, the browser
  "test/start.test.ts",
  "test/ops-browser.test.ts",
  "test/settle-wrangler.test.ts",
  "test/adapters/worker-config/nested-wrangler.test.ts",
  // tsc, wrangler deploy --dry-run, a package build, node children
  "test/readme.test.ts",
  "test/consumer.test.ts",
  "test/adapters/worker-config/check-config.test.ts",
  // the TypeScript compiler and esbuild over a consumer's view of the built package
  "test/exports.test.ts",
  // several redis-servers, delay proxies and the real clock; processes killed, stopped, restarted
  "test/regions-outside.test.ts",
  "test/engine/region.test.ts",
  "test/faults/**/*.test.ts",
  "test/engine/lock.test.ts",
  // a 3-node Redis Cluster
  "test/engine/cluster.test.ts",
  "test/engine/nested-cluster.test.ts",
  "test/engine/overrides-read.test.ts",
  "test/engine/analytics.test.ts",
  // a measurement: 15 to 30 simulated seconds at 200 decisions a second, on 1, 4 and 16 isolates
  "test/engine/leases-admission.test.ts",
  // the peer beside edgelimit/upstash on one database: its analytics flush and a stalled Redis's
  // timeout wait on the real clock; several databases behind delay proxies
  "test/adapters/upstash/beside-the-peer.test.ts",
  "test/adapters/upstash/multi-region.test.ts",
  // workerd through Miniflare
  "test/engine/analytics-workerd.test.ts",
  "test/engine/leases-workerd.test.ts",
];

export default defineConfig({
  test: {
    reporters: ["default", "./test/summary-reporter.ts"],
    projects: [
      {
        test: {
          name: "node",
          include: ["test/**/*.test.ts"],
          exclude: ["test/adapters/vercel/**", "test/adapters/worker/**", ...SLOW],
          globalSetup: ["test/global-setup.ts"],
          testTimeout: 20_000,
          hookTimeout: 30_000,
        },
      },
      {
        test: {
          name: "slow",
          include: SLOW,
          globalSetup: ["test/global-setup.ts"],
          testTimeout: 20_000,
          hookTimeout: 30_000,
        },
      },
      {
        test: {
          name: "edge",
          include: ["test/adapters/vercel/**/*.test.ts"],
          environment: "edge-runtime",
          globalSetup: ["test/global-setup.ts"],
          testTimeout: 20_000,
          hookTimeout: 30_000,
        },
      },
      "./vitest.workers.config.ts",
    ],
  },
});
