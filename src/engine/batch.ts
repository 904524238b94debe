// Shares one HTTP request among the commands issued in the same tick, as @upstash/redis's
// auto-pipelining does, but keeps a handle on that request: each caller can stop waiting on its own
// (a timeout), and once no caller waits any more the request is aborted, not left running.

/** The part of an @upstash/redis client's HTTP requester this module uses. */
export interface Requester {
  request(req: { path?: string[]; body?: unknown; signal?: () => AbortSignal }): Promise<unknown>;
}

/** One command's reply inside a pipeline. */
export interface Reply {
  result?: unknown;
  error?: string;
}

/** A command on its way: its reply, and a way to stop waiting for it. */
export interface Call {
  readonly reply: Promise<Reply>;
  abandon(): void;
}

interface Waiter {
  command: unknown[];
  waiting: boolean;
  resolve(reply: Reply): void;
  reject(error: unknown): void;
}

interface Batch {
  waiters: Waiter[];
  /** A command sent first, whose reply nobody waits for (see `sendAhead`). */
  ahead: unknown[] | undefined;
  controller: AbortController | undefined;
}

/**
 * Collects commands for `window` ms (0: until the end of the current tick) and sends them as one
 * `/pipeline` request.
 *
 * @example
 * const batcher = new Batcher(redis.client, 0);
 * const call = batcher.send(["PING"]);
 * const reply = await call.reply; // { result: "PONG" }
 */
export class Batcher {
  private open: Batch | undefined;

  constructor(
    private readonly requester: Requester,
    private readonly window: number,
  ) {}

  send(command: unknown[]): Call {
    const batch = this.openBatch();
    let waiter!: Waiter;
    const reply = new Promise<Reply>((resolve, reject) => {
      waiter = { command, waiting: true, resolve, reject };
    });
    batch.waiters.push(waiter);
    const owner = batch;
    return {
      reply,
      abandon: () => {
        if (!waiter.waiting) return;
        waiter.waiting = false;
        if (owner.controller && !owner.waiters.some((w) => w.waiting)) owner.controller.abort();
      },
    };
  }

  /**
   * Puts `command` at the head of the next request, once however often it is asked for in one batch,
   * and waits for no reply: what comes after it in the pipeline sees its effect (SCRIPT LOAD before
   * the EVALSHAs that need it). It is sent only along with commands someone waits for.
   */
  sendAhead(command: unknown[]): void {
    this.openBatch().ahead ??= command;
  }

  private openBatch(): Batch {
    if (this.open) return this.open;
    const batch: Batch = { waiters: [], ahead: undefined, controller: undefined };
    this.open = batch;
    if (this.window > 0) setTimeout(() => this.flush(batch), this.window);
    else queueMicrotask(() => this.flush(batch));
    return batch;
  }

  private flush(batch: Batch): void {
    if (this.open === batch) this.open = undefined;
    const waiters = batch.waiters.filter((w) => w.waiting);
    if (waiters.length === 0) return;
    const controller = new AbortController();
    batch.controller = controller;
    const body = waiters.map((w) => w.command);
    if (batch.ahead) body.unshift(batch.ahead);
    const skip = body.length - waiters.length;
    this.requester
      .request({ path: ["pipeline"], body, signal: () => controller.signal })
      .then((replies) => {
        if (!Array.isArray(replies) || replies.length !== body.length) {
          throw new Error(`pipeline answered ${describeReply(replies)} for ${body.length} commands`);
        }
        waiters.forEach((w, i) => {
          w.waiting = false;
          w.resolve(replies[i + skip] as Reply);
        });
      })
      .catch((error: unknown) => {
        for (const w of waiters) {
          if (!w.waiting) continue;
          w.waiting = false;
          w.reject(error);
        }
      });
  }
}

function describeReply(replies: unknown): string {
  return Array.isArray(replies) ? `${replies.length} replies` : typeof replies;
}
