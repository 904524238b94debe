// Shares one HTTP request among the commands issued in the same tick (or batching window), as
// @upstash/redis's auto-pipelining does, but keeps a handle on that request: each caller can stop
// waiting on its own (a timeout), and once no caller waits any more the request is aborted, not left
// running.

/** One command's reply inside a pipeline. */
export interface Reply {
  result?: unknown;
  error?: string;
}

/**
 * Sends one `/pipeline` request: the replies, one per command, in order. Rejects when there is no
 * usable answer. Sends at most once: it never repeats a request that may have reached Redis.
 */
export type Sender = (commands: unknown[][], signal: AbortSignal) => Promise<Reply[]>;

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
  /** Commands sent first, whose replies nobody waits for (see `sendAhead`). */
  ahead: unknown[][];
  controller: AbortController | undefined;
}

/**
 * Collects commands for `window` ms (0: until the end of the current tick) and sends them as one
 * `/pipeline` request.
 *
 * @example
 * const batcher = new Batcher(sender, 0);
 * const call = batcher.send(["PING"]);
 * const reply = await call.reply; // { result: "PONG" }
 */
export class Batcher {
  private open: Batch | undefined;
  /** Pipeline requests sent so far (tests count them). */
  requests = 0;

  constructor(
    private readonly sender: Sender,
    readonly window: number,
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
    const batch = this.openBatch();
    const same = (c: unknown[]) => c.length === command.length && c.every((part, i) => part === command[i]);
    if (!batch.ahead.some(same)) batch.ahead.push(command);
  }

  private openBatch(): Batch {
    if (this.open) return this.open;
    const batch: Batch = { waiters: [], ahead: [], controller: undefined };
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
    const body = [...batch.ahead, ...waiters.map((w) => w.command)];
    const skip = batch.ahead.length;
    this.requests += 1;
    let sent: Promise<Reply[]>;
    try {
      sent = this.sender(body, controller.signal);
    } catch (error) {
      sent = Promise.reject(error);
    }
    sent
      .then((replies) => {
        waiters.forEach((w, i) => {
          if (!w.waiting) return;
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
