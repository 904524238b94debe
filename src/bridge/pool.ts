/**
 * The bridge's Redis connections: one shared connection that every ordinary command is pipelined on
 * (Redis is single-threaded, so one busy connection is as fast as many), plus dedicated connections
 * lent to one transaction or blocking command at a time, so a MULTI…EXEC never shares a connection
 * with anything else. Connections that drop are replaced on next use.
 */
import { type Arg, connectRedis, type RedisConnection, type Reply } from "./resp.js";

/**
 * @example
 * const pool = new RedisPool("redis://127.0.0.1:6379");
 * const [pong] = await pool.send([["PING"]]);
 * const replies = await pool.withDedicated((conn) => conn.send([["MULTI"], ["INCR", "n"], ["EXEC"]]));
 * await pool.close();
 */
export class RedisPool {
  private shared: RedisConnection | undefined;
  private connecting: Promise<RedisConnection> | undefined;
  private readonly idle: RedisConnection[] = [];
  private readonly lent = new Set<RedisConnection>();
  private closed = false;

  constructor(
    private readonly url: string,
    private readonly maxIdle = 16,
  ) {}

  /** Sends commands on the shared connection (pipelined with everyone else's). */
  async send(commands: readonly (readonly Arg[])[]): Promise<Reply[]> {
    const conn = this.shared && !this.shared.closed ? this.shared : await this.connectShared();
    return conn.send(commands);
  }

  /** Runs `fn` with a connection nobody else uses meanwhile. */
  async withDedicated<T>(fn: (conn: RedisConnection) => Promise<T>): Promise<T> {
    const conn = await this.acquire();
    try {
      return await fn(conn);
    } finally {
      this.release(conn);
    }
  }

  /** Closes every connection; commands still in flight are rejected. */
  async close(): Promise<void> {
    this.closed = true;
    const all = [...this.idle, ...this.lent];
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

  private async acquire(): Promise<RedisConnection> {
    if (this.closed) throw new Error("The bridge is closed");
    let conn = this.idle.pop();
    while (conn?.closed) conn = this.idle.pop();
    conn ??= await connectRedis(this.url);
    this.lent.add(conn);
    return conn;
  }

  private release(conn: RedisConnection): void {
    this.lent.delete(conn);
    if (conn.closed) return;
    if (this.closed || this.idle.length >= this.maxIdle) void conn.close();
    else this.idle.push(conn);
  }
}
