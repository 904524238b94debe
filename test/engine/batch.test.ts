// The Batcher with a fake sender: which commands share a request, in what order, who gets which
// reply, and when a request is aborted. A window is waited out on fake timers, never slept.
import { afterEach, describe, expect, it, vi } from "vitest";
import { type Batch, Batcher, type Reply, type Waiter } from "../../src/engine/batch.js";

/** A sender whose requests the test answers by hand. */
function fakeSender() {
  const requests: {
    commands: unknown[][];
    signal: AbortSignal;
    answer(replies: Reply[]): void;
    fail(error: unknown): void;
  }[] = [];
  const sender = (commands: unknown[][], signal: AbortSignal) =>
    new Promise<Reply[]>((resolve, reject) => {
      requests.push({ commands: [...commands], signal, answer: resolve, fail: reject });
    });
  return { sender, requests };
}

/** A waiter that records what it got. */
function waiter(...command: unknown[]) {
  const got: { reply?: Reply; error?: unknown } = {};
  const w: Waiter & { got: typeof got } = {
    command,
    waiting: false,
    batch: undefined as Batch | undefined,
    got,
    receive(reply: Reply) {
      got.reply = reply;
    },
    fail(error: unknown) {
      got.error = error;
    },
  };
  return w;
}

/** Lets queued microtasks run (a tick ends): no time passes. */
const tick = () => Promise.resolve().then(() => Promise.resolve());

afterEach(() => {
  vi.useRealTimers();
});

describe("Batcher", () => {
  it("sends the commands of one tick as one request, and each reply to its own waiter", async () => {
    const { sender, requests } = fakeSender();
    const batcher = new Batcher(sender, 0);
    const a = waiter("GET", "a");
    const b = waiter("GET", "b");
    const c = waiter("GET", "c");
    batcher.send(a);
    batcher.send(b);
    batcher.send(c);
    expect(requests).toHaveLength(0);
    await tick();
    expect(requests.map((r) => r.commands)).toEqual([
      [
        ["GET", "a"],
        ["GET", "b"],
        ["GET", "c"],
      ],
    ]);
    expect(batcher.requests).toBe(1);
    requests[0]!.answer([{ result: "1" }, { error: "ERR b" }, { result: 3 }]);
    await tick();
    expect([a.got, b.got, c.got]).toEqual([
      { reply: { result: "1" } },
      { reply: { error: "ERR b" } },
      { reply: { result: 3 } },
    ]);
    expect([a.waiting, b.waiting, c.waiting]).toEqual([false, false, false]);
    // the next tick opens another request
    const d = waiter("GET", "d");
    batcher.send(d);
    await tick();
    expect(requests).toHaveLength(2);
    expect(batcher.requests).toBe(2);
  });

  it("puts a command sent ahead at the head once, and skips its reply", async () => {
    const { sender, requests } = fakeSender();
    const batcher = new Batcher(sender, 0);
    const a = waiter("EVALSHA", "x");
    batcher.send(a);
    batcher.sendAhead(["SCRIPT", "LOAD", "x"]);
    batcher.sendAhead(["SCRIPT", "LOAD", "x"]);
    batcher.sendAhead(["SCRIPT", "LOAD", "y"]);
    const b = waiter("EVALSHA", "y");
    batcher.send(b);
    await tick();
    expect(requests[0]!.commands).toEqual([
      ["SCRIPT", "LOAD", "x"],
      ["SCRIPT", "LOAD", "y"],
      ["EVALSHA", "x"],
      ["EVALSHA", "y"],
    ]);
    requests[0]!.answer([{ result: "x" }, { result: "y" }, { result: 1 }, { result: 2 }]);
    await tick();
    expect([a.got.reply, b.got.reply]).toEqual([{ result: 1 }, { result: 2 }]);
  });

  it("sends nothing ahead alone: with nobody waiting there is no request", async () => {
    const { sender, requests } = fakeSender();
    const batcher = new Batcher(sender, 0);
    batcher.sendAhead(["SCRIPT", "LOAD", "x"]);
    const a = waiter("GET", "a");
    batcher.send(a);
    Batcher.abandon(a);
    await tick();
    expect(requests).toHaveLength(0);
    expect(batcher.requests).toBe(0);
  });

  it("leaves out a waiter that stopped waiting before the request left", async () => {
    const { sender, requests } = fakeSender();
    const batcher = new Batcher(sender, 0);
    const a = waiter("GET", "a");
    const b = waiter("GET", "b");
    batcher.send(a);
    batcher.send(b);
    Batcher.abandon(a);
    await tick();
    expect(requests[0]!.commands).toEqual([["GET", "b"]]);
    requests[0]!.answer([{ result: "b" }]);
    await tick();
    expect(a.got).toEqual({});
    expect(b.got).toEqual({ reply: { result: "b" } });
  });

  it("aborts a request once nobody waits for it, and answers nobody late", async () => {
    const { sender, requests } = fakeSender();
    const batcher = new Batcher(sender, 0);
    const a = waiter("GET", "a");
    const b = waiter("GET", "b");
    batcher.send(a);
    batcher.send(b);
    await tick();
    const request = requests[0]!;
    Batcher.abandon(a);
    expect(request.signal.aborted).toBe(false);
    Batcher.abandon(b);
    expect(request.signal.aborted).toBe(true);
    Batcher.abandon(b); // a second time changes nothing
    request.answer([{ result: "a" }, { result: "b" }]);
    await tick();
    expect([a.got, b.got]).toEqual([{}, {}]);
  });

  it("fails every waiter still waiting when the request fails, or the sender throws", async () => {
    const { sender, requests } = fakeSender();
    const batcher = new Batcher(sender, 0);
    const a = waiter("GET", "a");
    const b = waiter("GET", "b");
    batcher.send(a);
    batcher.send(b);
    await tick();
    Batcher.abandon(a);
    const error = new Error("unreachable");
    requests[0]!.fail(error);
    await tick();
    expect(a.got).toEqual({});
    expect(b.got).toEqual({ error });

    const thrown = new Error("bad body");
    const throwing = new Batcher(() => {
      throw thrown;
    }, 0);
    const c = waiter("GET", "c");
    throwing.send(c);
    await tick();
    await tick();
    expect(c.got).toEqual({ error: thrown });
    expect(throwing.requests).toBe(1);
  });

  it("gives a reply only to a waiter still in that request: one sent again is answered by its new one", async () => {
    const { sender, requests } = fakeSender();
    const batcher = new Batcher(sender, 0);
    const a = waiter("EVALSHA", "x");
    batcher.send(a);
    await tick();
    // answered elsewhere (NOSCRIPT) and sent again, into the next request, before the first replies
    a.waiting = false;
    batcher.send(a);
    await tick();
    expect(requests).toHaveLength(2);
    requests[0]!.answer([{ result: "old" }]);
    await tick();
    expect(a.got).toEqual({});
    requests[1]!.answer([{ result: "new" }]);
    await tick();
    expect(a.got).toEqual({ reply: { result: "new" } });
  });

  it("with a window, collects the commands of that many ms into one request", async () => {
    vi.useFakeTimers();
    const { sender, requests } = fakeSender();
    const batcher = new Batcher(sender, 5);
    batcher.send(waiter("GET", "a"));
    await vi.advanceTimersByTimeAsync(4);
    expect(requests).toHaveLength(0);
    batcher.send(waiter("GET", "b"));
    await vi.advanceTimersByTimeAsync(1);
    expect(requests.map((r) => r.commands)).toEqual([
      [
        ["GET", "a"],
        ["GET", "b"],
      ],
    ]);
    // a command after the window opens the next one
    batcher.send(waiter("GET", "c"));
    await vi.advanceTimersByTimeAsync(4);
    expect(requests).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(requests.map((r) => r.commands)).toEqual([
      [
        ["GET", "a"],
        ["GET", "b"],
      ],
      [["GET", "c"]],
    ]);
  });
});
