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
 * Commands that would change the shared connection's state for every caller after them, so they are
 * refused: transactions (Upstash documents MULTI/EXEC as TCP-only; /multi-exec is the REST way),
 * pub/sub and MONITOR (pub/sub is served as SSE on /subscribe and /psubscribe), the database, the
 * protocol, the user, cluster read modes, and replication.
 */
const REFUSED = new Set(
  (
    "multi exec discard watch unwatch select auth hello reset quit monitor sync psync replconf " +
    "subscribe psubscribe ssubscribe unsubscribe punsubscribe sunsubscribe readonly readwrite asking"
  ).split(" "),
);

/** CLIENT subcommands that set per-connection state (name, library info, tracking, reply mode, flags). */
const REFUSED_CLIENT = new Set("reply setname setinfo tracking caching no-evict no-touch".split(" "));

/** Commands that may block the connection: they get a connection of their own, not the shared one. */
const BLOCKING = new Set(
  "blpop brpop brpoplpush blmove blmpop bzpopmin bzpopmax bzmpop wait waitaof".split(" "),
);

/**
 * Why a command is refused, or undefined when it may run.
 *
 * @example
 * refusal(["MULTI"]); // "ERR Command is not available over REST: 'multi'"
 * refusal(["CLIENT", "SETNAME", "x"]); // "ERR Command is not available over REST: 'client setname'"
 * refusal(["GET", "k"]); // undefined
 */
export function refusal(cmd: readonly Arg[]): string | undefined {
  const name = String(cmd[0]).toLowerCase();
  if (REFUSED.has(name)) return `ERR Command is not available over REST: '${name}'`;
  if (name === "client") {
    const sub = String(cmd[1]).toLowerCase();
    if (REFUSED_CLIENT.has(sub)) return `ERR Command is not available over REST: 'client ${sub}'`;
  }
  return undefined;
}

/**
 * True when the command may block, so it must not hold up the shared connection. XREAD and XREADGROUP
 * block only with a BLOCK option.
 *
 * @example
 * isBlocking(["BLPOP", "queue", "5"]); // true
 * isBlocking(["XREAD", "STREAMS", "s", "0"]); // false
 */
export function isBlocking(cmd: readonly Arg[]): boolean {
  const name = String(cmd[0]).toLowerCase();
  if (BLOCKING.has(name)) return true;
  if (name !== "xread" && name !== "xreadgroup") return false;
  for (let i = 1; i < cmd.length; i++) {
    const arg = String(cmd[i]).toLowerCase();
    if (arg === "block") return true;
    if (arg === "streams") return false;
  }
  return false;
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
 * A JSON response body written straight into bytes. Bulk strings that are plain printable ASCII (the
 * usual case: keys, numbers, JSON values) are copied as they are, without becoming JS strings first, so
 * a reply of 400,000 elements costs one pass over its bytes.
 *
 * @example
 * const body = new JsonBody();
 * body.raw("[");
 * body.result(Buffer.from("bar"), false);
 * body.raw("]");
 * body.toBuffer().toString(); // '[{"result":"bar"}]'
 */
export class JsonBody {
  private buf = Buffer.allocUnsafe(1024);
  private length = 0;

  /** `{"result": …}` for a reply, `{"error": …}` for an error reply. */
  result(reply: Reply, base64: boolean) {
    if (reply instanceof RedisError) return this.error(reply.message);
    this.raw('{"result":');
    this.value(reply, base64, true);
    this.raw("}");
  }

  /** `{"error": message}` */
  error(message: string): void {
    this.raw('{"error":');
    this.utf8(JSON.stringify(message));
    this.raw("}");
  }

  /** Appends ASCII text as it is. */
  raw(text: string): void {
    this.reserve(text.length);
    this.length += this.buf.write(text, this.length, "latin1");
  }

  toBuffer(): Buffer {
    return this.buf.subarray(0, this.length);
  }

  private value(reply: Reply, base64: boolean, top = false) {
    if (reply === null) return this.raw("null");
    switch (typeof reply) {
      case "number":
      case "bigint":
        return this.raw(String(reply));
      case "string":
        return this.utf8(stringJson(reply, base64, top));
    }
    if (Array.isArray(reply)) {
      this.raw("[");
      for (let i = 0; i < reply.length; i++) {
        if (i > 0) this.byte(0x2c);
        this.value(reply[i]!, base64);
      }
      return this.raw("]");
    }
    // An error inside an array (a Lua table holding redis.error_reply): its message, as a string.
    if (reply instanceof RedisError) return this.utf8(stringJson(reply.message, base64, false));
    if (base64) return this.base64(reply);
    if (!isPlainAscii(reply)) return this.utf8(JSON.stringify(reply.toString("utf8")));
    this.reserve(reply.length + 2);
    const buf = this.buf;
    buf[this.length++] = 0x22;
    buf.set(reply, this.length);
    this.length += reply.length;
    buf[this.length++] = 0x22;
  }

  /** A quoted base64 string; short values are encoded in place rather than through a JS string. */
  private base64(bytes: Buffer): void {
    const size = 4 * Math.ceil(bytes.length / 3);
    this.reserve(size + 2);
    const out = this.buf;
    let o = this.length;
    out[o++] = 0x22;
    if (bytes.length > 256) {
      o += out.write(bytes.toString("base64"), o, "latin1");
    } else {
      const whole = bytes.length - (bytes.length % 3);
      let i = 0;
      for (; i < whole; i += 3) {
        const n = (bytes[i]! << 16) | (bytes[i + 1]! << 8) | bytes[i + 2]!;
        out[o++] = B64[n >> 18]!;
        out[o++] = B64[(n >> 12) & 63]!;
        out[o++] = B64[(n >> 6) & 63]!;
        out[o++] = B64[n & 63]!;
      }
      if (i < bytes.length) {
        const two = i + 1 < bytes.length;
        const n = (bytes[i]! << 16) | (two ? bytes[i + 1]! << 8 : 0);
        out[o++] = B64[n >> 18]!;
        out[o++] = B64[(n >> 12) & 63]!;
        out[o++] = two ? B64[(n >> 6) & 63]! : 0x3d;
        out[o++] = 0x3d;
      }
    }
    out[o++] = 0x22;
    this.length = o;
  }

  private utf8(text: string): void {
    this.reserve(Buffer.byteLength(text, "utf8"));
    this.length += this.buf.write(text, this.length, "utf8");
  }

  private byte(b: number): void {
    this.reserve(1);
    this.buf[this.length++] = b;
  }

  private reserve(n: number): void {
    if (this.length + n <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.length + n));
    this.buf.copy(next, 0, 0, this.length);
    this.buf = next;
  }
}

const B64 = Buffer.from("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", "latin1");

/** True when the bytes can sit inside a JSON string as they are: printable ASCII except `"` and `\`. */
function isPlainAscii(bytes: Buffer): boolean {
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i]!;
    if (b < 0x20 || b > 0x7e || b === 0x22 || b === 0x5c) return false;
  }
  return true;
}

/**
 * `{"result": …}` for a reply, `{"error": …}` for an error reply.
 *
 * @example
 * resultJson(Buffer.from("bar"), true); // '{"result":"YmFy"}'
 * resultJson("OK", true); // '{"result":"OK"}'
 */
export function resultJson(reply: Reply, base64: boolean): string {
  const body = new JsonBody();
  body.result(reply, base64);
  return body.toBuffer().toString("utf8");
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

function stringJson(s: string, base64: boolean, top: boolean): string {
  if (!base64 || (top && s === "OK")) return JSON.stringify(s);
  return `"${Buffer.from(s, "utf8").toString("base64")}"`;
}
