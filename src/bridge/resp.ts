/**
 * A minimal RESP2 client: one socket, commands pipelined (write everything, read replies in order).
 *
 * Hand-written rather than a dependency because the bridge needs exact control of reply types: a bulk
 * string (bytes, `Buffer`) is not a status reply (`string`), errors can sit inside arrays (EXEC, Lua
 * tables), and integers above 2^53 must keep every digit (`bigint`).
 */
import net from "node:net";
import tls from "node:tls";

/** An error reply from Redis (`-ERR ...`). Returned as a value inside arrays, thrown by `call()`. */
export class RedisError extends Error {
  override name = "RedisError";
}

/**
 * One RESP2 reply: status → `string`, bulk → `Buffer`, integer → `number` (`bigint` when it would not
 * fit a double exactly), nil → `null`, error → `RedisError`, array → `Reply[]`.
 */
export type Reply = string | Buffer | number | bigint | null | RedisError | Reply[];

/** One command argument. Strings are sent as UTF-8 bytes. */
export type Arg = string | Buffer | number;

const CR = 13;
const LF = 10;
const MIN_SAFE = BigInt(Number.MIN_SAFE_INTEGER);
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/**
 * Encodes commands as RESP arrays of bulk strings, into a single buffer (one socket write).
 *
 * @example
 * encodeCommands([["GET", "k"]]).toString(); // "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"
 */
export function encodeCommands(commands: readonly (readonly Arg[])[]): Buffer {
  let size = 0;
  for (const cmd of commands) {
    size += 3 + digits(cmd.length);
    for (const arg of cmd) {
      const len = argLength(arg);
      size += 5 + digits(len) + len;
    }
  }
  const out = Buffer.allocUnsafe(size);
  let o = 0;
  for (const cmd of commands) {
    o += out.write(`*${cmd.length}\r\n`, o, "latin1");
    for (const arg of cmd) {
      if (typeof arg === "string") {
        const len = Buffer.byteLength(arg, "utf8");
        o += out.write(`$${len}\r\n`, o, "latin1");
        o += out.write(arg, o, "utf8");
      } else if (typeof arg === "number") {
        const s = String(arg);
        o += out.write(`$${s.length}\r\n${s}`, o, "latin1");
      } else {
        o += out.write(`$${arg.length}\r\n`, o, "latin1");
        o += arg.copy(out, o);
      }
      out[o++] = CR;
      out[o++] = LF;
    }
  }
  return out;
}

function argLength(arg: Arg): number {
  if (typeof arg === "string") return Buffer.byteLength(arg, "utf8");
  if (typeof arg === "number") return String(arg).length;
  return arg.length;
}

function digits(n: number): number {
  return n < 10 ? 1 : n < 100 ? 2 : String(n).length;
}

/** An array reply whose elements are still arriving. */
interface Frame {
  items: Reply[];
  filled: number;
}

/**
 * Streaming RESP2 parser, linear in the bytes it is fed: every line and every bulk string is read once,
 * arrays under construction wait on a stack, and only the bytes of the one element split across TCP
 * chunks are ever joined (a partial header line, or a bulk string's payload, joined once when complete).
 * A 400,000-element array arriving in 64 KB chunks is therefore parsed in one pass, never re-parsed.
 *
 * @example
 * const parser = new RespParser((reply) => console.log(reply));
 * parser.feed(Buffer.from("$5\r\nhel"));
 * parser.feed(Buffer.from("lo\r\n:42\r\n")); // logs <Buffer 68 65 6c 6c 6f>, then 42
 */
export class RespParser {
  /** Arrays being filled, innermost last. */
  private readonly stack: Frame[] = [];
  /** Start of a header line whose CRLF has not arrived yet. */
  private partialLine: Buffer[] = [];
  /** Payload length of a bulk string whose header was read, CRLF excluded; -1 when none is pending. */
  private bulkLength = -1;
  /** The pending bulk string's bytes received so far (CRLF included once it arrives). */
  private bulkChunks: Buffer[] = [];
  private bulkReceived = 0;

  constructor(private readonly onReply: (reply: Reply) => void) {}

  feed(chunk: Buffer): void {
    let pos = 0;
    const size = chunk.length;
    while (pos < size) {
      if (this.bulkLength >= 0) {
        pos = this.bulkBytes(chunk, pos);
        continue;
      }
      if (this.partialLine.length === 0) {
        const next = this.numberLine(chunk, pos);
        if (next > 0) {
          pos = next;
          continue;
        }
      }
      const lf = chunk.indexOf(LF, pos);
      if (lf < 0) {
        this.partialLine.push(chunk.subarray(pos));
        return;
      }
      if (this.partialLine.length > 0) {
        this.partialLine.push(chunk.subarray(pos, lf + 1));
        const line = Buffer.concat(this.partialLine);
        this.partialLine = [];
        this.line(line, 0, line.length - 1);
      } else {
        this.line(chunk, pos, lf);
      }
      pos = lf + 1;
    }
  }

  /**
   * Fast path for the lines that dominate large replies (`$len`, `*len`, `:n` with up to 15 digits,
   * complete in this chunk): read in place. Returns where the next element starts, or 0 to fall back.
   */
  private numberLine(chunk: Buffer, pos: number): number {
    const type = chunk[pos];
    if (type !== 0x24 && type !== 0x2a && type !== 0x3a) return 0;
    let i = pos + 1;
    const negative = chunk[i] === 0x2d;
    if (negative) i++;
    const first = i;
    let n = 0;
    for (; i < chunk.length; i++) {
      const c = chunk[i]!;
      if (c === CR) break;
      if (c < 0x30 || c > 0x39 || i - first >= 15) return 0;
      n = n * 10 + (c - 0x30);
    }
    if (i === first || i + 1 >= chunk.length || chunk[i + 1] !== LF) return 0;
    this.header(type, negative ? -n : n);
    return i + 2;
  }

  /** One header line: `buf[start]` is the type byte, `buf[lf]` the LF ending it. */
  private line(buf: Buffer, start: number, lf: number) {
    if (lf - 1 <= start || buf[lf - 1] !== CR) {
      throw new Error("RESP protocol error: a line does not end with CRLF");
    }
    const end = lf - 1;
    const type = buf[start]!;
    switch (type) {
      case 0x2b: // '+' status
        return this.value(buf.toString("utf8", start + 1, end));
      case 0x2d: // '-' error
        return this.value(new RedisError(buf.toString("utf8", start + 1, end)));
      case 0x3a: // ':' integer
      case 0x24: // '$' bulk string: its payload follows
      case 0x2a: // '*' array
        return this.header(type, integer(buf, start + 1, end));
      default:
        throw new Error(`RESP protocol error: unexpected byte 0x${type.toString(16)}`);
    }
  }

  private header(type: number, n: number | bigint) {
    if (type === 0x3a) return this.value(n);
    const length = Number(n);
    if (length < 0) return this.value(null);
    if (type === 0x24) {
      this.bulkLength = length;
    } else if (length === 0) {
      this.value([]);
    } else {
      this.stack.push({ items: new Array(length), filled: 0 });
    }
  }

  /** Takes the pending bulk string's bytes from `chunk` at `pos`; returns where the next element starts. */
  private bulkBytes(chunk: Buffer, pos: number): number {
    const need = this.bulkLength + 2 - this.bulkReceived;
    const available = chunk.length - pos;
    if (this.bulkReceived === 0 && available >= need) {
      // The whole payload is in this chunk: a view, no copy.
      const end = pos + this.bulkLength;
      this.bulkLength = -1;
      this.value(chunk.subarray(pos, end));
      return end + 2;
    }
    const take = Math.min(need, available);
    this.bulkChunks.push(chunk.subarray(pos, pos + take));
    this.bulkReceived += take;
    if (take === need) {
      const whole = Buffer.concat(this.bulkChunks, this.bulkReceived);
      const length = this.bulkLength;
      this.bulkChunks = [];
      this.bulkReceived = 0;
      this.bulkLength = -1;
      this.value(whole.subarray(0, length));
    }
    return pos + take;
  }

  /** A complete value: it fills the innermost open array, or is a reply of its own. */
  private value(reply: Reply): void {
    let value = reply;
    for (;;) {
      const frame = this.stack[this.stack.length - 1];
      if (frame === undefined) {
        this.onReply(value);
        return;
      }
      frame.items[frame.filled++] = value;
      if (frame.filled < frame.items.length) return;
      this.stack.pop();
      value = frame.items;
    }
  }
}

/** The integer in `buf[start..end)`; a bigint only when a double would lose digits. */
function integer(buf: Buffer, start: number, end: number): number | bigint {
  let i = start;
  const negative = buf[i] === 0x2d;
  if (negative) i++;
  if (end - i > 15) {
    const big = BigInt(buf.toString("latin1", start, end));
    return big >= MIN_SAFE && big <= MAX_SAFE ? Number(big) : big;
  }
  let n = 0;
  for (; i < end; i++) {
    const digit = buf[i]! - 48;
    if (digit < 0 || digit > 9) {
      throw new Error(
        `RESP protocol error: bad integer ${JSON.stringify(buf.toString("latin1", start, end))}`,
      );
    }
    n = n * 10 + digit;
  }
  return negative ? -n : n;
}

interface Pending {
  replies: Reply[];
  count: number;
  resolve: (replies: Reply[]) => void;
  reject: (error: Error) => void;
}

/** Options for {@link connectRedis}. */
export interface ConnectOptions {
  /** Give up connecting after this many ms (default 5000). */
  connectTimeout?: number;
}

/**
 * One Redis connection. `send()` pipelines: every call writes its commands at once and its replies are
 * matched in order, so many callers can share the connection without waiting for each other.
 *
 * @example
 * const conn = await connectRedis("redis://127.0.0.1:6379");
 * const [ok, n] = await conn.send([["SET", "n", "1"], ["INCR", "n"]]); // ["OK", 2]
 */
export class RedisConnection {
  private readonly pending: (Pending | undefined)[] = [];
  private head = 0;
  private corked = false;
  private error: Error | undefined;
  private isClosed = false;
  private readonly closeListeners: (() => void)[] = [];
  private onPush: ((reply: Reply) => void) | undefined;

  constructor(private readonly socket: net.Socket) {
    const parser = new RespParser((reply) => this.onReply(reply));
    socket.setNoDelay(true);
    socket.on("data", (chunk: Buffer) => {
      try {
        parser.feed(chunk);
      } catch (error) {
        socket.destroy(error as Error);
      }
    });
    socket.on("error", (error) => {
      this.error = error;
    });
    socket.on("close", () => this.onClose());
  }

  /** True once the socket is gone; a closed connection rejects every `send()`. */
  get closed(): boolean {
    return this.isClosed;
  }

  /** Calls `listener` once when the connection closes (for any reason). */
  onClosed(listener: () => void): void {
    if (this.isClosed) listener();
    else this.closeListeners.push(listener);
  }

  /**
   * Sends commands in one write and resolves to their replies, in order. Error replies are values
   * (`RedisError`), not rejections; the promise rejects only when the connection fails.
   */
  send(commands: readonly (readonly Arg[])[]): Promise<Reply[]> {
    if (this.isClosed) return Promise.reject(this.closedError());
    if (commands.length === 0) return Promise.resolve([]);
    return new Promise((resolve, reject) => {
      this.pending.push({ replies: [], count: commands.length, resolve, reject });
      // Writes issued in the same event-loop turn leave as one syscall.
      if (!this.corked) {
        this.corked = true;
        this.socket.cork();
        setImmediate(() => {
          this.corked = false;
          this.socket.uncork();
        });
      }
      this.socket.write(encodeCommands(commands));
    });
  }

  /**
   * Turns this connection into a subscriber: writes `command` (SUBSCRIBE or PSUBSCRIBE with its
   * channels or patterns) and hands every reply from then on to `onPush`, confirmations included. A
   * subscribed connection takes no other command; close it to end the subscription.
   */
  subscribe(command: readonly Arg[], onPush: (reply: Reply) => void): void {
    if (this.isClosed) throw this.closedError();
    if (this.head < this.pending.length) throw new Error("subscribe(): commands are still in flight");
    this.onPush = onPush;
    this.socket.write(encodeCommands([command]));
  }

  /** Sends one command; resolves to its reply and throws `RedisError` on an error reply. */
  async call(...args: Arg[]): Promise<Reply> {
    const [reply] = await this.send([args]);
    if (reply instanceof RedisError) throw reply;
    return reply as Reply;
  }

  /** Closes the socket; pending commands are rejected. */
  close(): Promise<void> {
    if (this.isClosed) return Promise.resolve();
    return new Promise((resolve) => {
      this.onClosed(resolve);
      this.socket.destroy();
    });
  }

  private onReply(reply: Reply): void {
    if (this.onPush) {
      this.onPush(reply);
      return;
    }
    const p = this.pending[this.head];
    if (!p) {
      this.socket.destroy(new Error("RESP protocol error: reply without a pending command"));
      return;
    }
    p.replies.push(reply);
    if (p.replies.length < p.count) return;
    this.pending[this.head++] = undefined;
    if (this.head === this.pending.length) {
      this.pending.length = 0;
      this.head = 0;
    } else if (this.head > 1024 && this.head * 2 > this.pending.length) {
      this.pending.splice(0, this.head);
      this.head = 0;
    }
    p.resolve(p.replies);
  }

  private onClose(): void {
    this.isClosed = true;
    const error = this.closedError();
    for (let i = this.head; i < this.pending.length; i++) this.pending[i]?.reject(error);
    this.pending.length = 0;
    this.head = 0;
    for (const listener of this.closeListeners.splice(0)) listener();
  }

  private closedError(): Error {
    return new Error(`Redis connection closed${this.error ? `: ${this.error.message}` : ""}`, {
      cause: this.error,
    });
  }
}

/**
 * Opens a connection to `redis://[user:password@]host[:port][/db]` (or `rediss://` for TLS), sends
 * AUTH and SELECT when the URL asks for them, and resolves once Redis has answered.
 *
 * @example
 * const redis = await connectRedis("redis://127.0.0.1:6379");
 * await redis.call("SET", "greeting", "hello");
 * const value = await redis.call("GET", "greeting"); // Buffer "hello"
 * await redis.close();
 */
export async function connectRedis(url: string, options: ConnectOptions = {}): Promise<RedisConnection> {
  const target = parseRedisUrl(url);
  const socket = await openSocket(target, options.connectTimeout ?? 5000);
  const conn = new RedisConnection(socket);
  const setup: Arg[][] = [];
  if (target.password !== undefined) {
    setup.push(target.username ? ["AUTH", target.username, target.password] : ["AUTH", target.password]);
  }
  if (target.db !== 0) setup.push(["SELECT", target.db]);
  setup.push(["PING"]);
  const replies = await conn.send(setup);
  const failed = replies.find((r) => r instanceof RedisError);
  if (failed) {
    await conn.close();
    throw new Error(`Redis at ${redactUrl(url)} refused the connection: ${(failed as RedisError).message}`);
  }
  return conn;
}

interface RedisTarget {
  host: string;
  port: number;
  tls: boolean;
  username: string;
  password: string | undefined;
  db: number;
}

/**
 * Parses a redis:// or rediss:// URL; throws a readable error on anything else.
 *
 * @example
 * parseRedisUrl("redis://:secret@localhost:6380/2");
 * // { host: "localhost", port: 6380, tls: false, username: "", password: "secret", db: 2 }
 */
export function parseRedisUrl(url: string): RedisTarget {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new Error(`Invalid Redis URL: ${JSON.stringify(url)} (expected redis://host:port)`);
  }
  if (u.protocol !== "redis:" && u.protocol !== "rediss:") {
    throw new Error(`Invalid Redis URL: ${JSON.stringify(url)} (expected redis:// or rediss://)`);
  }
  const db = u.pathname.length > 1 ? Number(u.pathname.slice(1)) : 0;
  if (!Number.isInteger(db) || db < 0) throw new Error(`Invalid Redis database in URL: ${u.pathname}`);
  return {
    host: u.hostname.replace(/^\[(.*)\]$/, "$1") || "127.0.0.1",
    port: u.port ? Number(u.port) : 6379,
    tls: u.protocol === "rediss:",
    username: decodeURIComponent(u.username),
    password: u.password ? decodeURIComponent(u.password) : undefined,
    db,
  };
}

/**
 * The URL without its password, for error messages.
 *
 * @example
 * redactUrl("redis://:secret@localhost:6379"); // "redis://:***@localhost:6379"
 */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = "***";
    return u.toString();
  } catch {
    return url;
  }
}

function openSocket(target: RedisTarget, timeout: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = target.tls
      ? tls.connect({ host: target.host, port: target.port, servername: target.host })
      : net.connect({ host: target.host, port: target.port });
    const fail = (error: Error) => {
      socket.destroy();
      reject(new Error(`Cannot connect to Redis at ${target.host}:${target.port}: ${error.message}`));
    };
    socket.setTimeout(timeout, () => fail(new Error(`timed out after ${timeout} ms`)));
    socket.once("error", fail);
    socket.once(target.tls ? "secureConnect" : "connect", () => {
      socket.setTimeout(0);
      socket.off("error", fail);
      resolve(socket);
    });
  });
}
