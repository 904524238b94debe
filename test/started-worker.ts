// `npm start`'s script (scripts/start.mjs: redis-server or the database the env names, the REST bridge,
// `wrangler dev`) run as a child of a test, for tests that check the Worker as a user deploys it.
import { type ChildProcess, spawn } from "node:child_process";
import { join } from "node:path";

const root = join(import.meta.dirname, "..");

/** A running scripts/start.mjs: what it printed so far, a wait on it, and its stop. */
export interface StartedWorker {
  /** Everything it printed, stdout and stderr. */
  output(): string;
  /**
   * Polls `probe` with the output every 100 ms until it returns a value; throws with the output when the
   * script exits first or `timeout` ms pass.
   */
  until<T>(what: string, probe: (output: string) => T | undefined, timeout?: number): Promise<T>;
  /** SIGTERM (SIGKILL after 20 s), resolved once it exited. */
  stop(): Promise<void>;
}

/** Starts scripts/start.mjs on `configFile` with `env` (PORT and EDGELIMIT_ADMIN_TOKEN left out). */
export function startWorker(configFile: string, env: NodeJS.ProcessEnv): StartedWorker {
  const childEnv = { ...env };
  delete childEnv.PORT;
  delete childEnv.EDGELIMIT_ADMIN_TOKEN;
  const child: ChildProcess = spawn(process.execPath, [join(root, "scripts/start.mjs"), configFile], {
    cwd: root,
    env: childEnv,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout?.on("data", (chunk) => {
    output += chunk;
  });
  child.stderr?.on("data", (chunk) => {
    output += chunk;
  });
  return {
    output: () => output,
    async until(what, probe, timeout = 90_000) {
      const deadline = Date.now() + timeout;
      for (;;) {
        const value = probe(output);
        if (value !== undefined) return value;
        if (child.exitCode !== null) {
          throw new Error(`scripts/start.mjs exited early while waiting for ${what}:\n${output}`);
        }
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}:\n${output}`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    },
    async stop() {
      if (child.exitCode !== null) return;
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 20_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/**
 * Starts scripts/start.mjs on `configFile` against the REST bridge at `url` (its `token`) and waits for
 * its banner: the running Worker and its address.
 */
export async function startOnBridge(
  configFile: string,
  url: string,
  token: string,
): Promise<{ start: StartedWorker; base: string }> {
  const start = startWorker(configFile, {
    ...process.env,
    UPSTASH_REDIS_REST_URL: url,
    UPSTASH_REDIS_REST_TOKEN: token,
  });
  const base = await start.until(
    "the banner",
    (output) => /edgelimit is running at (http:\/\/127\.0\.0\.1:\d+) /.exec(output)?.[1],
  );
  return { start, base };
}
