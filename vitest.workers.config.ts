import { cloudflareTest } from "@cloudflare/vitest-pool-workers";
import { defineProject } from "vitest/config";
import { dropWorkerdNoise } from "./test/workerd-noise.js";

// The Worker's tests, inside workerd. They call the Worker's fetch with an env built per test (origin,
// bridge and config), so one project covers every configuration. The bridge (and its redis-server)
// and a stand-in origin run in Node, started by the global setups; workerd reaches them on 127.0.0.1.
// workerd's verbose logs of deliberately refused connections and of the pool's own teardown: see there.
dropWorkerdNoise();

export default defineProject({
  plugins: [cloudflareTest({ wrangler: { configPath: "./wrangler.toml" } })],
  test: {
    name: "workers",
    include: ["test/adapters/worker/**/*.test.ts"],
    globalSetup: [
      "test/global-setup.ts",
      "test/adapters/worker/global-setup.ts",
      "test/adapters/worker/proxy-origin.ts",
      "test/adapters/worker/usage-origin.ts",
    ],
    testTimeout: 20_000,
    hookTimeout: 30_000,
  },
});
