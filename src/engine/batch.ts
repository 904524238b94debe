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

/**
 * A command on its way, and who waits for it. The batcher calls `receive` or `fail` at most once per
 * `send`, and only while `waiting`; the caller stops waiting with `abandon`. A waiter can be sent again
 * once answered (NOSCRIPT), into a later request.
 */
export interface Waiter {
  command: unknown[];
  waiting: boolean;
  /** The request it is in (set by the batcher). */
  batch: Batch | undefined;
  receive(reply: Reply): void;
  fail(error: unknown): void;
}

/** The commands of one request. */
export class Batch {
  readonly waiters: Waiter[] = [];
  /** Commands sent first, whose replies nobody waits for (see `sendAhead`). */
  readonly ahead: unknown[][] = [];
  /** Waiters still waiting; the request is aborted when this falls to 0 while it runs. */
  waiting = 0;
  controller: AbortController | undefined;
}

/**
 * Collects commands for `window` ms (0: until the end of the current tick) and sends them as one
 * `/pipeline` request.
 *
 * @example
 * const batcher = new Batcher(sender, 0);
 * batcher.send({ command: ["PING"], waiting: true, batch: undefined, receive: console.log, fail: console.error });
 */
export class Batcher {
  private open: Batch | undefined;
  /** Pipeline requests sent so far (tests count them). */
  requests = 0;
  private readonly flushOpen = () => this.flush();

  constructor(
    private readonly sender: Sender,
    readonly window: number,
  ) {}

  /** Queues `waiter.command` for the next request; its reply goes to `waiter.receive`. */
  send(waiter: Waiter): void {
    const batch = this.open ?? this.openBatch();
    waiter.waiting = true;
    waiter.batch = batch;
    batch.waiting += 1;
    batch.waiters.push(waiter);
  }

  /**
   * Puts `command` at the head of the next request, once however often it is asked for in one batch,
   * and waits for no reply: what comes after it in the pipeline sees its effect (SCRIPT LOAD before
   * the EVALSHAs that need it). It is sent only along with commands someone waits for.
   */
  sendAhead(command: unknown[]): void {
    const batch = this.open ?? this.openBatch();
    const same = (c: unknown[]) => c.length === command.length && c.every((part, i) => part === command[i]);
    if (!batch.ahead.some(same)) batch.ahead.push(command);
  }

  /** Stops waiting for `waiter`'s reply; aborts its request once nobody waits on it. */
  static abandon(waiter: Waiter): void {
    if (!waiter.waiting) return;
    waiter.waiting = false;
    const batch = waiter.batch!;
    batch.waiting -= 1;
    if (batch.waiting === 0 && batch.controller) batch.controller.abort();
  }

  private openBatch(): Batch {
    const batch = new Batch();
    this.open = batch;
    if (this.window > 0) setTimeout(this.flushOpen, this.window);
    else queueMicrotask(this.flushOpen);
    return batch;
  }

  private flush(): void {
    const batch = this.open!;
    this.open = undefined;
    if (batch.waiting === 0) return;
    const skip = batch.ahead.length;
    const body = batch.ahead;
    // those that stopped waiting before the request left are not sent (no copy when all still wait)
    const waiters =
      batch.waiting === batch.waiters.length ? batch.waiters : batch.waiters.filter((w) => w.waiting);
    for (let i = 0; i < waiters.length; i++) body.push(waiters[i]!.command);
    const controller = new AbortController();
    batch.controller = controller;
    this.requests += 1;
    let sent: Promise<Reply[]>;
    try {
      sent = this.sender(body, controller.signal);
    } catch (error) {
      sent = Promise.reject(error);
    }
    sent.then(
      (replies) => {
        for (let i = 0; i < waiters.length; i++) {
          const waiter = waiters[i]!;
          if (!waiter.waiting || waiter.batch !== batch) continue;
          waiter.waiting = false;
          waiter.receive(replies[i + skip] as Reply);
        }
      },
      (error: unknown) => {
        for (let i = 0; i < waiters.length; i++) {
          const waiter = waiters[i]!;
          if (!waiter.waiting || waiter.batch !== batch) continue;
          waiter.waiting = false;
          waiter.fail(error);
        }
      },
    );
  }
}
