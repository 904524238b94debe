// How the lock and the concurrency limit call their scripts: through the client's shared transport
// (batching, timeout, breaker, NOSCRIPT), with their replies checked and their failures told apart.
import { describe } from "./duration.js";
import { RedisCallError } from "./errors.js";
import type { Script, Transport } from "./transport.js";

/**
 * Runs `script` and resolves with its reply; rejects with the transport's RedisCallError on any
 * failure, for the caller's catch.
 *
 * @example
 * const reply = await runScript(transport, LOCK, [key], args, 1000);
 */
export async function runScript(
  transport: Transport,
  script: Script,
  keys: string[],
  args: string[],
  timeout: number,
): Promise<unknown> {
  const outcome = await transport.eval(script, keys, args, { timeout });
  if (!outcome.ok) throw outcome.error;
  return outcome.result;
}

/**
 * Whether a failed call is worth one more try: no answer (it may or may not have run), not a refusal.
 * Only for calls that are safe to run twice (a release carries one id for both tries).
 */
export function mayRetry(error: unknown): boolean {
  const kind = (error as RedisCallError | undefined)?.kind;
  return error instanceof RedisCallError && (kind === "timeout" || kind === "unreachable" || kind === "http");
}

/** A script's reply of 4 integers, or an Error. */
export function ints4(result: unknown): [number, number, number, number] {
  if (!Array.isArray(result) || result.length !== 4 || !result.every((x) => typeof x === "number")) {
    throw new Error(`edgelimit: unexpected script result ${describe(result)}`);
  }
  return result as [number, number, number, number];
}

/** A failure as results carry it: an Error, without the request body some clients append. */
export function asError(error: unknown): Error {
  const message = error instanceof Error ? error.message : String(error);
  // @upstash/redis appends the request body, which holds other calls' keys: never pass that on.
  const cut = message.indexOf(", command was:");
  if (cut !== -1) return new Error(message.slice(0, cut));
  return error instanceof Error ? error : new Error(message);
}
