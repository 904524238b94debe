import { defineConfig } from "vitest/config";

// Three environments, one command (`npm test`):
//  - node:  the engine, the bridge, the Hono middleware (test/**/*.test.ts)
//  - edge:  the Vercel middleware inside edge-runtime (test/adapters/vercel/**/*.test.ts)
//  - workers: the Cloudflare Worker inside workerd (vitest.workers.config.ts)
export default defineConfig({
  test: {
    reporters: ["default", "./test/summary-reporter.ts"],
    projects: [
      {
        test: {
          name: "node",
          include: ["test/**/*.test.ts"],
          exclude: ["test/adapters/vercel/**", "test/adapters/worker/**"],
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
