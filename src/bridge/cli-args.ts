/** Argument parsing for the `edgelimit-bridge` CLI, apart from cli.ts so it can be tested in-process. */
import { parseArgs } from "node:util";
import { parseRedisUrl } from "./resp.js";
import { BRIDGE_DEFAULTS, type BridgeOptions } from "./server.js";

export const USAGE = `Usage: edgelimit-bridge [--redis URL] [--port N] [--host H] [--token T] [--max-dedicated N]
                        [--max-body-bytes N]

An Upstash-compatible REST API in front of a Redis server (local development, tests, self-hosting).

Options:
  --redis URL   Redis to forward to (default ${BRIDGE_DEFAULTS.redisUrl})
  --port N      HTTP port, 0 for any free port (default ${BRIDGE_DEFAULTS.port})
  --host H      interface to listen on (default ${BRIDGE_DEFAULTS.host}; 0.0.0.0 exposes it to the network)
  --token T     bearer token clients must send; defaults to $EDGELIMIT_BRIDGE_TOKEN,
                one of the two is required
  --max-dedicated N
                most Redis connections held by blocking commands (BLPOP, XREAD BLOCK, …) and
                /subscribe streams at once; past it they are answered 503 (default ${BRIDGE_DEFAULTS.maxDedicatedConnections})
  --max-body-bytes N
                largest request body; a larger one is answered 413 (default ${BRIDGE_DEFAULTS.maxBodyBytes}, ${BRIDGE_DEFAULTS.maxBodyBytes / 2 ** 20} MiB)
  -h, --help    show this help

Then: new Redis({ url: "http://${BRIDGE_DEFAULTS.host}:${BRIDGE_DEFAULTS.port}", token: T })  (from @upstash/redis)
`;

/** A command line the CLI cannot run; it prints the message and exits with status 2. */
export class UsageError extends Error {
  override name = "UsageError";
}

/** The bridge options a CLI invocation asks for. */
export type CliOptions = Required<
  Pick<BridgeOptions, "redisUrl" | "port" | "host" | "token" | "maxDedicatedConnections" | "maxBodyBytes">
>;

/**
 * Parses `edgelimit-bridge` arguments; `"help"` when help was asked for.
 *
 * @example
 * parseCliArgs(["--port", "0", "--token", "dev"], {});
 * // { redisUrl: "redis://127.0.0.1:6379", port: 0, host: "127.0.0.1", token: "dev",
 * //   maxDedicatedConnections: 100, maxBodyBytes: 67108864 }
 */
export function parseCliArgs(argv: string[], env: Record<string, string | undefined>): CliOptions | "help" {
  let values: {
    redis?: string;
    port?: string;
    host?: string;
    token?: string;
    "max-dedicated"?: string;
    "max-body-bytes"?: string;
    help?: boolean;
  };
  try {
    ({ values } = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: {
        redis: { type: "string" },
        port: { type: "string" },
        host: { type: "string" },
        token: { type: "string" },
        "max-dedicated": { type: "string" },
        "max-body-bytes": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    }));
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  if (values.help) return "help";
  const redisUrl = values.redis ?? BRIDGE_DEFAULTS.redisUrl;
  try {
    parseRedisUrl(redisUrl);
  } catch (error) {
    throw new UsageError(`--redis: ${(error as Error).message}`);
  }
  const portText = values.port ?? String(BRIDGE_DEFAULTS.port);
  const port = Number(portText);
  if (!/^\d+$/.test(portText) || port > 65535) {
    throw new UsageError(`--port must be an integer from 0 to 65535, got ${JSON.stringify(portText)}`);
  }
  const host = values.host ?? BRIDGE_DEFAULTS.host;
  if (host === "") throw new UsageError("--host must not be empty");
  const token = values.token ?? env.EDGELIMIT_BRIDGE_TOKEN ?? "";
  if (token === "") throw new UsageError("--token is required (or set EDGELIMIT_BRIDGE_TOKEN)");
  const maxDedicatedConnections = positiveInteger(
    "--max-dedicated",
    values["max-dedicated"],
    BRIDGE_DEFAULTS.maxDedicatedConnections,
  );
  const maxBodyBytes = positiveInteger(
    "--max-body-bytes",
    values["max-body-bytes"],
    BRIDGE_DEFAULTS.maxBodyBytes,
  );
  return { redisUrl, port, host, token, maxDedicatedConnections, maxBodyBytes };
}

function positiveInteger(flag: string, text: string | undefined, fallback: number): number {
  if (text === undefined) return fallback;
  const n = Number(text);
  if (!/^\d+$/.test(text) || n < 1 || !Number.isSafeInteger(n)) {
    throw new UsageError(`${flag} must be a positive integer, got ${JSON.stringify(text)}`);
  }
  return n;
}
