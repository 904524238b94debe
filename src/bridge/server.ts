/**
 * An Upstash-compatible REST server in front of a real redis-server, so @upstash/redis (and anything
 * built on it) runs unchanged against a local Redis: POST / (one command), /pipeline, /multi-exec,
 * the path form (/set/k/v), bearer or `_token` auth, `Upstash-Encoding: base64`, and pub/sub as
 * Server-Sent Events on /subscribe/<channel> and /psubscribe/<pattern>.
 */
import { timingSafeEqual } from "node:crypto";
import http, { type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { PoolExhaustedError, RedisPool } from "./pool.js";
import {
  errorJson,
  HttpError,
  isBlocking,
  JsonBody,
  parseCommand,
  parseCommands,
  refusal,
} from "./protocol.js";
import { type Arg, RedisError, type Reply, redactUrl } from "./resp.js";
import { ScriptRegistry } from "./scripts.js";

/** Options for {@link startBridge}. */
export interface BridgeOptions {
  /** Token clients must send as `Authorization: Bearer <token>` (or `?_token=`). Required. */
  token: string;
  /** Redis to forward to (default `redis://127.0.0.1:6379`). */
  redisUrl?: string;
  /** HTTP port; 0 picks a free one (default 8079). */
  port?: number;
  /** Interface to listen on (default `127.0.0.1`: the bridge is for local use unless you say so). */
  host?: string;
  /** Largest accepted request body, in bytes (default 64 MiB); a larger one is answered 413. */
  maxBodyBytes?: number;
  /**
   * Most dedicated Redis connections open at once (default 100): one per request holding a blocking
   * command (BLPOP, XREAD BLOCK, WAIT, …) and one per open subscription. Past it, such requests are
   * answered 503 at once. Ordinary commands, pipelines and transactions share one connection.
   */
  maxDedicatedConnections?: number;
}

/** Live counters of one bridge; read them any time, zero them with `reset()`. */
export interface BridgeStats {
  /** HTTP requests received, whatever their path or outcome (rejected ones included). */
  requests: number;
  /**
   * Redis commands sent on behalf of requests, MULTI and EXEC of a transaction included
   * (the bridge's own connection setup is not counted).
   */
  commands: number;
  /** Dedicated Redis connections in use right now (blocking requests, open subscriptions); not reset. */
  readonly dedicatedConnections: number;
  /** Zeroes `requests` and `commands`. */
  reset(): void;
}

/** A running bridge. */
export interface Bridge {
  /** Base URL for `new Redis({ url, token })`, like `http://127.0.0.1:8079`. */
  url: string;
  port: number;
  host: string;
  stats: BridgeStats;
  /** Stops accepting requests, lets in-flight ones finish (2 s at most), closes Redis connections. */
  close(): Promise<void>;
}

const METHODS = new Set(["GET", "HEAD", "POST", "PUT"]);

/** What startBridge (and the CLI) take when an option is left out. */
export const BRIDGE_DEFAULTS = {
  redisUrl: "redis://127.0.0.1:6379",
  port: 8079,
  host: "127.0.0.1",
  maxDedicatedConnections: 100,
  maxBodyBytes: 64 * 1024 * 1024,
} as const;

/**
 * Starts the REST bridge. Connects to Redis first, so an unreachable Redis fails here, not later.
 *
 * @example
 * import { Redis } from "@upstash/redis";
 * import { startBridge } from "edgelimit/bridge";
 *
 * const bridge = await startBridge({ redisUrl: "redis://127.0.0.1:6379", port: 0, token: "dev" });
 * const redis = new Redis({ url: bridge.url, token: "dev" });
 * await redis.set("greeting", "hello");
 * await bridge.close();
 */
export async function startBridge(options: BridgeOptions): Promise<Bridge> {
  if (typeof options.token !== "string" || options.token === "") {
    throw new Error("startBridge: `token` is required (the bearer token clients must send)");
  }
  const redisUrl = options.redisUrl ?? BRIDGE_DEFAULTS.redisUrl;
  const host = options.host ?? BRIDGE_DEFAULTS.host;
  const maxDedicated = options.maxDedicatedConnections ?? BRIDGE_DEFAULTS.maxDedicatedConnections;
  if (!Number.isInteger(maxDedicated) || maxDedicated < 1) {
    throw new Error(
      `startBridge: \`maxDedicatedConnections\` must be an integer of at least 1, got ${maxDedicated}`,
    );
  }
  const maxBodyBytes = options.maxBodyBytes ?? BRIDGE_DEFAULTS.maxBodyBytes;
  if (!Number.isInteger(maxBodyBytes) || maxBodyBytes < 1) {
    throw new Error(`startBridge: \`maxBodyBytes\` must be an integer of at least 1, got ${maxBodyBytes}`);
  }
  const pool = new RedisPool(redisUrl, { maxDedicated });
  let commandNames: Set<string>;
  try {
    commandNames = await loadCommandNames(pool);
  } catch (error) {
    await pool.close();
    throw new Error(
      `edgelimit-bridge: cannot use Redis at ${redactUrl(redisUrl)}: ${(error as Error).message}`,
      {
        cause: error,
      },
    );
  }
  const stats: BridgeStats = {
    requests: 0,
    commands: 0,
    get dedicatedConnections() {
      return pool.dedicatedInUse;
    },
    reset() {
      this.requests = 0;
      this.commands = 0;
    },
  };
  const handler = new Handler(pool, options.token, commandNames, stats, maxBodyBytes);
  const server = http.createServer({ noDelay: true }, (req, res) => handler.handle(req, res));
  server.keepAliveTimeout = 30_000;
  try {
    await listen(server, options.port ?? BRIDGE_DEFAULTS.port, host);
  } catch (error) {
    await pool.close();
    throw error;
  }
  const port = (server.address() as AddressInfo).port;
  let closing: Promise<void> | undefined;
  return {
    url: `http://${host.includes(":") ? `[${host}]` : host}:${port}`,
    port,
    host,
    stats,
    close() {
      closing ??= (async () => {
        handler.closing = true;
        handler.endStreams();
        await new Promise<void>((resolve) => {
          const force = setTimeout(() => server.closeAllConnections(), 2000);
          server.close(() => {
            clearTimeout(force);
            resolve();
          });
          server.closeIdleConnections();
        });
        await pool.close();
      })();
      return closing;
    },
  };
}

/** The command names Redis knows, so the path form can answer 404 for paths that are not commands. */
async function loadCommandNames(pool: RedisPool): Promise<Set<string>> {
  let [reply] = await pool.send([["COMMAND", "LIST"]]);
  if (reply instanceof RedisError) {
    // Redis before 7.0 has no COMMAND LIST: take the names from COMMAND's full table.
    [reply] = await pool.send([["COMMAND"]]);
    if (Array.isArray(reply)) reply = reply.map((entry) => (Array.isArray(entry) ? entry[0]! : null));
  }
  if (!Array.isArray(reply)) throw new Error(`unexpected reply to COMMAND: ${String(reply)}`);
  return new Set(reply.map((name) => String(name).toLowerCase()));
}

/**
 * Redis unreachable or gone mid-request: 502, as a gateway whose upstream failed. Every dedicated
 * connection in use: 503, and the caller may retry.
 */
function upstream<T>(work: Promise<T>): Promise<T> {
  return work.catch((error: Error) => {
    if (error instanceof PoolExhaustedError)
      throw new HttpError(`ERR edgelimit-bridge: ${error.message}`, 503);
    throw new HttpError(`ERR edgelimit-bridge: Redis unavailable: ${error.message}`, 502);
  });
}

/** Milliseconds between SSE comments on a quiet subscription, so a caller that vanished is noticed. */
const HEARTBEAT_MS = 15_000;

/**
 * One pub/sub push as an SSE event, in the form @upstash/redis's `subscribe()` reads: the reply's
 * parts joined by commas (`subscribe,<channel>,<count>`, `message,<channel>,<message>`,
 * `pmessage,<pattern>,<channel>,<message>`). A message holding line breaks spans several `data:`
 * lines, as SSE requires.
 */
function sseEvent(reply: Reply): string {
  const parts = Array.isArray(reply) ? reply : [reply];
  const text = parts.map((part) => (part instanceof RedisError ? part.message : String(part))).join(",");
  return `data: ${text.split(/\r\n|\r|\n/).join("\ndata: ")}\n\n`;
}

function listen(server: http.Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once("error", (error: NodeJS.ErrnoException) => {
      const hint = error.code === "EADDRINUSE" ? ` (port ${port} is in use; pick another or 0 for any)` : "";
      reject(new Error(`edgelimit-bridge: cannot listen on ${host}:${port}: ${error.message}${hint}`));
    });
    server.listen(port, host, () => resolve());
  });
}

class Handler {
  closing = false;
  private readonly scripts = new ScriptRegistry();
  /** Ends each open SSE stream (and closes its Redis connection). */
  private readonly streams = new Set<() => void>();
  private syncToken = 0;
  private readonly token: Buffer;

  constructor(
    private readonly pool: RedisPool,
    token: string,
    private readonly commandNames: Set<string>,
    private readonly stats: BridgeStats,
    private readonly maxBodyBytes: number,
  ) {
    this.token = Buffer.from(token, "utf8");
  }

  handle(req: IncomingMessage, res: ServerResponse): void {
    this.stats.requests++;
    // Aborts when the caller goes away before its answer is written: a blocking command it sent must
    // not stay blocked (and then swallow the next pushed item) on its behalf. The socket's end or error
    // is seen in the same event-loop turn as the packet, before the response's close (which comes after
    // this turn's Redis writes are flushed): a command read after it then reaches Redis after the kill.
    const gone = new AbortController();
    const socket = req.socket;
    const left = () => {
      if (!res.writableFinished) gone.abort();
    };
    socket.once("end", left); // FIN
    socket.once("error", left); // RST (a killed client), which ends no stream
    res.once("close", () => {
      socket.off("end", left);
      socket.off("error", left);
      left();
    });
    this.route(req, res, gone.signal).catch((error: unknown) => {
      if (error instanceof HttpError) this.send(res, error.status, errorJson(error.message));
      else this.send(res, 500, errorJson(`ERR edgelimit-bridge internal error: ${(error as Error).message}`));
    });
  }

  /** Ends every open subscription (the bridge is closing). */
  endStreams(): void {
    for (const end of [...this.streams]) end();
  }

  private async route(req: IncomingMessage, res: ServerResponse, gone: AbortSignal): Promise<void> {
    const method = req.method ?? "GET";
    if (!METHODS.has(method)) throw new HttpError(`ERR HTTP method ${method} is not allowed`, 405);
    const url = req.url ?? "/";
    const q = url.indexOf("?");
    let path = q < 0 ? url : url.slice(0, q);
    const query = q < 0 ? undefined : new URLSearchParams(url.slice(q + 1));
    if (!this.authorized(req, query)) throw new HttpError("Unauthorized", 401);
    const format = req.headers["upstash-response-format"];
    if (format !== undefined && format !== "json") {
      throw new HttpError(`ERR Upstash-Response-Format ${format} is not supported by edgelimit-bridge`);
    }
    const base64 = String(req.headers["upstash-encoding"]).toLowerCase() === "base64";
    if (path === "/pipeline/" || path === "/multi-exec/") path = path.slice(0, -1);
    const hasBody = method === "POST" || method === "PUT";
    if (path === "/" || path === "/pipeline" || path === "/multi-exec") {
      if (!hasBody) throw new HttpError(`ERR ${path} takes the command(s) as a JSON body: use POST`, 405);
      const body = await this.readBody(req);
      if (path === "/") return this.single(res, parseCommand(body), base64, gone);
      if (path === "/pipeline") return this.pipeline(res, parseCommands(body), base64, gone);
      return this.multiExec(res, parseCommands(body), base64);
    }
    const lower = path.toLowerCase();
    if (lower.startsWith("/subscribe/") || lower.startsWith("/psubscribe/")) {
      if (hasBody) await this.readBody(req); // @upstash/redis sends "[]": nothing to use
      return this.stream(res, lower.startsWith("/p") ? "PSUBSCRIBE" : "SUBSCRIBE", path);
    }
    const cmd = this.pathCommand(path);
    if (hasBody) {
      // Upstash appends a POST body to the path command as its last argument (raw bytes).
      const body = await this.readBody(req);
      if (body.length > 0) cmd.push(body);
    }
    if (query) {
      for (const [key, value] of query) {
        if (key === "_token") continue;
        cmd.push(key);
        if (value !== "") cmd.push(value);
      }
    }
    return this.single(res, cmd, base64, gone);
  }

  private authorized(req: IncomingMessage, query: URLSearchParams | undefined): boolean {
    const header = req.headers.authorization;
    if (header !== undefined) {
      return header.slice(0, 7).toLowerCase() === "bearer " && this.isToken(header.slice(7));
    }
    const token = query?.get("_token");
    return token != null && this.isToken(token);
  }

  private isToken(candidate: string): boolean {
    const given = Buffer.from(candidate, "utf8");
    return given.length === this.token.length && timingSafeEqual(given, this.token);
  }

  /** `/set/k/v` → ["set","k","v"]; a first segment that is no Redis command is a 404. */
  private pathCommand(path: string): Arg[] {
    let segments: string[];
    try {
      segments = path.slice(1).split("/").map(decodeURIComponent);
    } catch {
      throw new HttpError(`ERR malformed URL path: ${path}`);
    }
    if (!this.commandNames.has(segments[0]!.toLowerCase())) {
      throw new HttpError(
        `ERR not found: ${path} (use POST /, /pipeline or /multi-exec, or /<command>/<args>)`,
        404,
      );
    }
    if (segments.length > 1 && segments[segments.length - 1] === "") segments.pop();
    return segments;
  }

  private async single(res: ServerResponse, cmd: Arg[], base64: boolean, gone: AbortSignal): Promise<void> {
    const refused = refusal(cmd);
    if (refused) throw new HttpError(refused);
    const [reply] = await this.run([cmd], gone);
    const body = new JsonBody();
    body.result(reply!, base64);
    this.send(res, reply instanceof RedisError ? 400 : 200, body.toBuffer());
  }

  private async pipeline(
    res: ServerResponse,
    cmds: Arg[][],
    base64: boolean,
    gone: AbortSignal,
  ): Promise<void> {
    const refused = cmds.map(refusal);
    const allowed = cmds.filter((_, i) => refused[i] === undefined);
    const replies = allowed.length > 0 ? await this.run(allowed, gone) : [];
    let next = 0;
    const body = new JsonBody();
    body.raw("[");
    for (let i = 0; i < cmds.length; i++) {
      if (i > 0) body.raw(",");
      const why = refused[i];
      if (why === undefined) body.result(replies[next++]!, base64);
      else body.error(why);
    }
    body.raw("]");
    this.send(res, 200, body.toBuffer());
  }

  /**
   * MULTI … EXEC on the shared connection, written as one block: Redis reads a connection's commands in
   * order, so no other request's command can slip in between, and inside MULTI nothing blocks.
   */
  private async multiExec(res: ServerResponse, cmds: Arg[][], base64: boolean): Promise<void> {
    for (const cmd of cmds) {
      const refused = refusal(cmd);
      if (refused) throw new HttpError(refused);
    }
    const prepared = cmds.map((cmd) => this.scripts.prepare(cmd));
    this.stats.commands += cmds.length + 2;
    const replies = await upstream(this.pool.send([["MULTI"], ...prepared, ["EXEC"]]));
    // A command Redis refused to queue (syntax, arity, unknown command) discards the transaction:
    // report that command's error rather than the generic EXECABORT.
    const queueError = replies.find((r, i) => i > 0 && i <= cmds.length && r instanceof RedisError);
    const exec = replies[replies.length - 1];
    if (queueError) throw new HttpError((queueError as RedisError).message);
    if (exec instanceof RedisError) throw new HttpError(exec.message);
    if (!Array.isArray(exec)) throw new HttpError("ERR transaction aborted");
    const body = new JsonBody();
    body.raw("[");
    for (let i = 0; i < exec.length; i++) {
      if (i > 0) body.raw(",");
      body.result(this.scripts.fixReply(cmds[i]!, exec[i]!), base64);
    }
    body.raw("]");
    this.send(res, 200, body.toBuffer());
  }

  /**
   * Sends non-transaction commands: on the shared connection, or on a dedicated one if any may block,
   * which is killed if the caller goes away first.
   */
  private async run(cmds: Arg[][], gone: AbortSignal): Promise<Reply[]> {
    const prepared = cmds.map((cmd) => this.scripts.prepare(cmd));
    this.stats.commands += cmds.length;
    const replies = await upstream(
      cmds.some(isBlocking)
        ? this.pool.withDedicated((conn) => conn.send(prepared), gone)
        : this.pool.send(prepared),
    );
    for (let i = 0; i < replies.length; i++) replies[i] = this.scripts.fixReply(cmds[i]!, replies[i]!);
    return replies;
  }

  /**
   * Pub/sub as Server-Sent Events on a Redis connection of its own, closed when the caller goes away,
   * and the stream ended when Redis goes away.
   */
  private async stream(res: ServerResponse, kind: "SUBSCRIBE" | "PSUBSCRIBE", path: string): Promise<void> {
    let names: string[];
    try {
      names = path
        .slice(kind.length + 2)
        .split("/")
        .filter((s) => s !== "")
        .map(decodeURIComponent);
    } catch {
      throw new HttpError(`ERR malformed URL path: ${path}`);
    }
    const what = kind === "SUBSCRIBE" ? "channel" : "pattern";
    if (names.length === 0)
      throw new HttpError(`ERR ${path} names no ${what}: use /${kind.toLowerCase()}/<${what}>`);
    const sub = await upstream(this.pool.subscriber());
    if (res.destroyed) return sub.close();
    this.stats.commands++;
    // The first confirmation (or error) decides the status; every reply is an event once the headers
    // are out, and the ones arriving before that (more confirmations, early messages) wait in order.
    let first: ((reply: Reply) => void) | undefined;
    const confirmed = new Promise<Reply>((resolve) => {
      first = resolve;
    });
    let early: string[] | undefined = [];
    sub.conn.subscribe([kind, ...names], (reply) => {
      if (first) {
        first(reply);
        first = undefined;
      } else if (early) {
        early.push(sseEvent(reply));
      } else if (!res.destroyed) {
        res.write(sseEvent(reply));
      }
    });
    const reply = await Promise.race([
      confirmed,
      new Promise<undefined>((r) => sub.conn.onClosed(() => r(undefined))),
    ]);
    if (reply === undefined || reply instanceof RedisError || res.destroyed) {
      sub.close();
      if (reply instanceof RedisError) throw new HttpError(reply.message);
      if (reply === undefined)
        throw new HttpError("ERR edgelimit-bridge: Redis unavailable: connection closed", 502);
      return;
    }
    res.writeHead(200, {
      "content-type": "text/event-stream",
      "cache-control": "no-cache",
      connection: "keep-alive",
      "x-accel-buffering": "no",
    });
    res.write(sseEvent(reply) + early.join(""));
    early = undefined;
    const heartbeat = setInterval(() => res.write(": keep-alive\n\n"), HEARTBEAT_MS);
    heartbeat.unref();
    const end = () => {
      this.streams.delete(end);
      clearInterval(heartbeat);
      sub.close();
      res.end();
    };
    this.streams.add(end);
    res.once("close", end);
    sub.conn.onClosed(end);
  }

  private readBody(req: IncomingMessage): Promise<Buffer> {
    const limit = this.maxBodyBytes;
    if (Number(req.headers["content-length"]) > limit) {
      return Promise.reject(new HttpError(`ERR request body is larger than ${limit} bytes`, 413));
    }
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      let size = 0;
      req.on("data", (chunk: Buffer) => {
        size += chunk.length;
        if (size <= limit) chunks.push(chunk);
      });
      req.on("end", () => {
        if (size > limit) reject(new HttpError(`ERR request body is larger than ${limit} bytes`, 413));
        else resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size));
      });
      req.on("error", reject);
    });
  }

  private send(res: ServerResponse, status: number, body: string | Buffer): void {
    if (res.headersSent || res.destroyed) return;
    const headers: http.OutgoingHttpHeaders = {
      "content-type": "application/json",
      "content-length": typeof body === "string" ? Buffer.byteLength(body, "utf8") : body.length,
      // @upstash/redis's read-your-writes sends back the last token it saw. One Redis has no replica to
      // lag behind, so a fresh number per answer is all the token needs to be.
      "upstash-sync-token": String(++this.syncToken),
    };
    if (this.closing) headers.connection = "close";
    res.writeHead(status, headers);
    res.end(body);
  }
}
