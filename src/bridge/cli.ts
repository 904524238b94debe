#!/usr/bin/env node
/**
 * `edgelimit-bridge`: serves the Upstash REST API in front of a Redis server.
 * Exit status: 0 after SIGINT/SIGTERM, 1 when the bridge cannot start, 2 on a bad command line.
 */
import { parseCliArgs, USAGE, UsageError } from "./cli-args.js";
import { redactUrl } from "./resp.js";
import { startBridge } from "./server.js";

function fail(message: string, status: number): never {
  process.stderr.write(`edgelimit-bridge: ${message}\n`);
  process.exit(status);
}

let options: ReturnType<typeof parseCliArgs>;
try {
  options = parseCliArgs(process.argv.slice(2), process.env);
} catch (error) {
  if (error instanceof UsageError) fail(`${error.message}\nRun \`edgelimit-bridge --help\` for usage.`, 2);
  throw error;
}
if (options === "help") {
  process.stdout.write(USAGE);
  process.exit(0);
}

const bridge = await startBridge(options).catch((error: Error) =>
  fail(error.message.replace(/^edgelimit-bridge: /, ""), 1),
);
process.stdout.write(`edgelimit-bridge listening on ${bridge.url} (redis ${redactUrl(options.redisUrl)})\n`);

for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => {
    bridge.close().then(
      () => process.exit(0),
      (error: Error) => fail(`error while closing: ${error.message}`, 1),
    );
  });
}
