/**
 * The Upstash REST wire format: request bodies in, JSON replies out.
 *
 * Replies follow what @upstash/redis's `decode()` expects. With `Upstash-Encoding: base64` every
 * string (bulk or status, nested too) is base64 of its raw bytes, except a top-level status "OK",
 * which stays "OK" as Upstash documents. Integers stay numbers (all digits kept, even past 2^53),
 * nil is null, arrays stay arrays. Without the header strings are UTF-8, invalid bytes becoming U+FFFD.
 */
import { type Arg, RedisError, type Reply } from "./resp.js";

/** A failed request: its HTTP status (400 unless said otherwise) and the `{"error"}` text. */
export class HttpError extends Error {
  constructor(
    message: string,
    readonly status = 400,
  ) {
    super(message);
  }
}

/**
 * Commands that would change the shared connection's state: transactions (Upstash documents MULTI/EXEC
 * as TCP-only; /multi-exec is the REST way), pub/sub and MONITOR (Upstash serves those as SSE
 * endpoints, which the bridge does not), connection and replication commands.
 */
const REFUSED = new Set(
  (
    "multi exec discard watch unwatch select auth hello reset quit monitor sync psync replconf " +
    "subscribe psubscribe ssubscribe unsubscribe punsubscribe sunsubscribe"
  ).split(" "),
);

/** Commands that may block the connection: they get a connection of their own, not the shared one. */
const BLOCKING = new Set(
  "blpop brpop brpoplpush blmove blmpop bzpopmin bzpopmax bzmpop xread xreadgroup wait waitaof".split(" "),
);

/**
 * Why a command is refused, or undefined when it may run.
 *
 * @example
 * refusal(["MULTI"]); // "ERR Command is not available over REST: 'multi'"
 * refusal(["GET", "k"]); // undefined
 */
export function refusal(cmd: readonly Arg[]): string | undefined {
  const name = String(cmd[0]).toLowerCase();
  if (REFUSED.has(name)) return `ERR Command is not available over REST: '${name}'`;
  if (name === "client" && String(cmd[1]).toLowerCase() === "reply") {
    return "ERR Command is not available over REST: 'client reply'";
  }
  return undefined;
}

/**
 * True when the command may block, so it must not hold up the shared connection.
 *
 * @example
 * isBlocking(["BLPOP", "queue", "5"]); // true
 */
export function isBlocking(cmd: readonly Arg[]): boolean {
  return BLOCKING.has(String(cmd[0]).toLowerCase());
}

/**
 * Parses a JSON body holding one command; numbers and booleans become strings.
 *
 * @example
 * parseCommand(Buffer.from('["SET","k",1]')); // ["SET", "k", "1"]
 */
export function parseCommand(body: Buffer): Arg[] {
  return toCommand(parseJson(body), "the request body");
}

/**
 * Parses a JSON body holding commands, for /pipeline and /multi-exec.
 *
 * @example
 * parseCommands(Buffer.from('[["SET","k","v"],["GET","k"]]')); // [["SET","k","v"], ["GET","k"]]
 */
export function parseCommands(body: Buffer): Arg[][] {
  const value = parseJson(body);
  if (!Array.isArray(value) || value.length === 0) {
    throw new HttpError("ERR the request body must be a non-empty JSON array of commands");
  }
  return value.map((cmd, i) => toCommand(cmd, `command ${i + 1}`));
}

function parseJson(body: Buffer): unknown {
  try {
    return JSON.parse(body.toString("utf8"));
  } catch (error) {
    throw new HttpError(`ERR failed to parse the request body as JSON: ${(error as Error).message}`);
  }
}

function toCommand(value: unknown, what: string): Arg[] {
  if (!Array.isArray(value) || value.length === 0) {
    throw new HttpError(`ERR ${what} must be a non-empty JSON array, like ["SET","key","value"]`);
  }
  if (typeof value[0] !== "string") throw new HttpError(`ERR ${what}: the command name must be a string`);
  for (let i = 1; i < value.length; i++) {
    const arg = value[i];
    const t = typeof arg;
    if (t === "number" || t === "boolean") value[i] = String(arg);
    else if (t !== "string") {
      throw new HttpError(
        `ERR ${what}: argument ${i} must be a string, number or boolean, got ${JSON.stringify(arg)}`,
      );
    }
  }
  return value as Arg[];
}

/**
 * `{"result": …}` for a reply, `{"error": …}` for an error reply.
 *
 * @example
 * resultJson(Buffer.from("bar"), true); // '{"result":"YmFy"}'
 * resultJson("OK", true); // '{"result":"OK"}'
 */
export function resultJson(reply: Reply, base64: boolean): string {
  return reply instanceof RedisError
    ? errorJson(reply.message)
    : `{"result":${valueJson(reply, base64, true)}}`;
}

/**
 * `{"error": message}`
 *
 * @example
 * errorJson("Unauthorized"); // '{"error":"Unauthorized"}'
 */
export function errorJson(message: string): string {
  return `{"error":${JSON.stringify(message)}}`;
}

/**
 * One reply as JSON text, without building an intermediate object tree.
 *
 * @example
 * valueJson([1, Buffer.from("a"), null], false); // '[1,"a",null]'
 */
export function valueJson(reply: Reply, base64: boolean, top = false): string {
  if (reply === null) return "null";
  switch (typeof reply) {
    case "number":
    case "bigint":
      return String(reply);
    case "string":
      return stringJson(reply, base64, top);
  }
  if (Array.isArray(reply)) {
    let out = "[";
    for (let i = 0; i < reply.length; i++) {
      if (i > 0) out += ",";
      out += valueJson(reply[i]!, base64);
    }
    return `${out}]`;
  }
  // An error inside an array (a Lua table holding redis.error_reply): its message, as a string.
  if (reply instanceof RedisError) return stringJson(reply.message, base64, false);
  return base64 ? `"${reply.toString("base64")}"` : JSON.stringify(reply.toString("utf8"));
}

function stringJson(s: string, base64: boolean, top: boolean): string {
  if (!base64 || (top && s === "OK")) return JSON.stringify(s);
  return `"${Buffer.from(s, "utf8").toString("base64")}"`;
}
