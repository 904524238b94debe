/**
 * The bridge's Redis connections: one shared connection that every ordinary command, and every
 * MULTI…EXEC block, is pipelined on (Redis is single-threaded, so one busy connection is as fast as
 * many), plus dedicated connections, at most `maxDedicated` at a time: lent to one request whose
 * commands may block (BLPOP, XREAD BLOCK, WAIT, …), or held by one subscriber. Connections that drop
 * are replaced on next use.
 */
import { type Arg, connectRedis, type RedisConnection, type Reply } from "./resp.js";

/** Every dedicated connection is in use; the request should be answered 503. */
export class PoolExhaustedError extends Error {
  override name = "PoolExhaustedError";
  constructor(readonly max: number) {
    super(
      `all ${max} dedicated Redis connections are in use (blocking commands and subscriptions); ` +
        "retry later, or raise maxDedicatedConnections (--max-dedicated)",
    );
  }
}

/** Options for {@link RedisPool}. */
export interface PoolOptions {
  /** Most dedicated connections open at once, lent or subscribed (default 100). */
  maxDedicated?: number;
  /** Most idle dedicated connections kept for reuse (default 16). */
  maxIdle?: number;
}

/** A dedicated connection held by one subscriber; `close()` closes it and frees its slot. */
export interface Subscriber {
  conn: RedisConnection;
  close(): void;
}

/**
 * @example
 * const pool = new RedisPool("redis://127.0.0.1:6379");
 * const [pong] = await pool.send([["PING"]]);
 * const [popped] = await pool.withDedicated((conn) => conn.send([["BLPOP", "queue", "1"]]));
 * await pool.close();
 */
export class RedisPool {
  private shared: RedisConnection | undefined;
  private connecting: Promise<RedisConnection> | undefined;
  private readonly idle: RedisConnection[] = [];
  private readonly open = new Set<RedisConnection>();
  /** Redis's CLIENT ID of each dedicated connection, to kill it from the shared one. */
  private readonly ids = new WeakMap<RedisConnection, number>();
  private readonly abandoned = new WeakSet<RedisConnection>();
  /** Dedicated connections lent, subscribed or being opened: the figure the cap applies to. */
  private busy = 0;
  private closed = false;
  readonly maxDedicated: number;
  private readonly maxIdle: number;

  constructor(
    private readonly url: string,
    options: PoolOptions = {},
  ) {
    this.maxDedicated = options.maxDedicated ?? 100;
    this.maxIdle = Math.min(options.maxIdle ?? 16, this.maxDedicated);
  }

  /** Dedicated connections in use right now (lent, subscribed or being opened). */
  get dedicatedInUse(): number {
    return this.busy;
  }

  /** Sends commands on the shared connection (pipelined with everyone else's). */
  async send(commands: readonly (readonly Arg[])[]): Promise<Reply[]> {
    const conn = this.shared && !this.shared.closed ? this.shared : await this.connectShared();
    return conn.send(commands);
  }

  /**
   * Runs `fn` with a connection nobody else uses meanwhile. When `signal` aborts while `fn` runs (the
   * HTTP caller went away), the connection is killed from the shared connection and closed: a blocked
   * command then pops nothing, and any command this bridge sends later reaches Redis after the kill.
   * Throws {@link PoolExhaustedError} when `maxDedicated` connections are already in use.
   */
  async withDedicated<T>(fn: (conn: RedisConnection) => Promise<T>, signal?: AbortSignal): Promise<T> {
    this.reserve();
    let conn: RedisConnection;
    try {
      conn = await this.takeIdleOrConnect();
    } catch (error) {
      this.busy--;
      throw error;
    }
    const abandon = () => this.abandon(conn);
    try {
      if (signal?.aborted) throw new Error("The HTTP caller went away");
      signal?.addEventListener("abort", abandon, { once: true });
      return await fn(conn);
    } finally {
      signal?.removeEventListener("abort", abandon);
      this.busy--;
      if (this.closed || conn.closed || this.abandoned.has(conn) || this.idle.length >= this.maxIdle) {
        this.discard(conn);
      } else {
        this.idle.push(conn);
      }
    }
  }

  /** Opens a connection of its own for a subscriber (never reused: a subscribed connection is spent). */
  async subscriber(): Promise<Subscriber> {
    this.reserve();
    let conn: RedisConnection;
    try {
      conn = await this.connect();
    } catch (error) {
      this.busy--;
      throw error;
    }
    let done = false;
    const close = () => {
      if (done) return;
      done = true;
      this.busy--;
      this.discard(conn);
    };
    conn.onClosed(close);
    return { conn, close };
  }

  /** Closes every connection; commands still in flight are rejected. */
  async close(): Promise<void> {
    this.closed = true;
    const all = [...this.open];
    if (this.shared) all.push(this.shared);
    this.idle.length = 0;
    await Promise.all(all.map((c) => c.close()));
  }

  /** Connects the shared connection now (startup: fail fast when Redis is unreachable). */
  async connectShared(): Promise<RedisConnection> {
    if (this.closed) throw new Error("The bridge is closed");
    this.connecting ??= connectRedis(this.url).then(
      (conn) => {
        this.connecting = undefined;
        if (this.closed) void conn.close();
        this.shared = conn;
        return conn;
      },
      (error: unknown) => {
        this.connecting = undefined;
        throw error;
      },
    );
    return this.connecting;
  }

  private reserve(): void {
    if (this.closed) throw new Error("The bridge is closed");
    if (this.busy >= this.maxDedicated) throw new PoolExhaustedError(this.maxDedicated);
    this.busy++;
  }

  private async takeIdleOrConnect(): Promise<RedisConnection> {
    let conn = this.idle.pop();
    while (conn?.closed) conn = this.idle.pop();
    return conn ?? this.connect();
  }

  private async connect(): Promise<RedisConnection> {
    const conn = await connectRedis(this.url);
    this.open.add(conn);
    conn.onClosed(() => this.open.delete(conn));
    // Without its id (an ACL may deny CLIENT ID) an abandoned connection is still closed, only later.
    const [id] = await conn.send([["CLIENT", "ID"]]).catch(() => [undefined]);
    if (typeof id === "number") this.ids.set(conn, id);
    if (this.closed) await conn.close();
    return conn;
  }

  private abandon(conn: RedisConnection): void {
    this.abandoned.add(conn);
    const id = this.ids.get(conn);
    // On the shared connection, so Redis runs the kill before anything this bridge sends afterwards.
    if (id !== undefined) this.send([["CLIENT", "KILL", "ID", id]]).catch(() => {});
    void conn.close();
  }

  private discard(conn: RedisConnection): void {
    void conn.close();
  }
}
