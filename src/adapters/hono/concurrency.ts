import type { Context, Env, MiddlewareHandler } from "hono";
import { Concurrency, type ConcurrencyDecision, type ConcurrencyOptions } from "../../engine/concurrency.js";
import { SHADOW_HEADER, tooManyInFlight, unauthorized } from "../../http/headers.js";

/** What the middleware puts in the context: `c.get("concurrency")`, the slot this request holds. */
export type ConcurrencyVariables = { concurrency: ConcurrencyDecision };

/**
 * Something worth a log line: an acquire Redis could not answer (`onError` decided), or a request shadow
 * mode let through although every slot was taken. `message` leaves the key out (it may be a secret).
 */
export interface ConcurrencyEvent {
  kind: "error" | "shadow-denied";
  message: string;
  key: string;
  decision: ConcurrencyDecision;
  method: string;
  path: string;
}

/** Options of {@link concurrencyLimit}: a Concurrency, or what to build one from, and `key`. */
export type ConcurrencyLimitOptions<E extends Env = Env> = (
  | { concurrency: Concurrency }
  | (ConcurrencyOptions & { concurrency?: undefined })
) & {
  /** Who is asking (user id, API key, IP). `undefined` or "" answers 401 (or `onMissingKey`). */
  key: (c: Context<E>) => string | undefined | Promise<string | undefined>;
  /**
   * "enforce" (default) refuses with 429 when every slot is taken; "shadow" lets the request through
   * (without a slot), marks the response `EdgeLimit-Shadow: denied` and logs it.
   */
  mode?: "enforce" | "shadow";
  /** Where events go (default: `console.warn(event.message)`). */
  log?: (event: ConcurrencyEvent) => void;
  /** The response when `key` gives undefined (default: a 401 problem). */
  onMissingKey?: (c: Context<E>) => Response | Promise<Response>;
  /**
   * Keeps the release alive after the response (default: `c.executionCtx.waitUntil` where there is
   * one, as on Cloudflare Workers; elsewhere the release simply runs on its own).
   */
  waitUntil?: (c: Context<E>, promise: Promise<unknown>) => void;
};

/**
 * Caps the requests in flight per key. A request takes a slot before the handler runs and holds it
 * until its response body has been streamed to the end, or the client went away (the body was
 * cancelled), or the handler threw; then the slot is given back off the request path. When every slot
 * is taken the answer is a 429 application/problem+json with Retry-After: the time until the oldest
 * holder's slot runs out (its `ttl`), the latest a slot is sure to be free. A holder that never gives
 * its slot back (a crashed isolate) loses it when its `ttl` runs out.
 *
 * @example
 * const app = new Hono<{ Variables: ConcurrencyVariables }>();
 * app.use("/reports/*", concurrencyLimit({ redis, limit: 2, ttl: "60s", key: (c) => c.req.header("x-api-key") }));
 */
export const concurrencyLimit = <E extends Env = Env>(
  options: ConcurrencyLimitOptions<E>,
): MiddlewareHandler<E & { Variables: ConcurrencyVariables }> => {
  const {
    key,
    log = (event: ConcurrencyEvent) => console.warn(event.message),
    onMissingKey,
    mode = "enforce",
    waitUntil = defaultWaitUntil as (c: Context<E>, promise: Promise<unknown>) => void,
  } = options;
  if (typeof key !== "function") throw new Error("key: expected a function (c) => string | undefined");
  if (mode !== "enforce" && mode !== "shadow") {
    throw new Error(`mode: must be "enforce" or "shadow", got ${JSON.stringify(mode)}`);
  }
  const concurrency =
    options.concurrency instanceof Concurrency
      ? options.concurrency
      : new Concurrency(engineOptions(options as unknown as Record<string, unknown>));
  return async function concurrencyLimit(c, next) {
    const ctx = c as unknown as Context<E>;
    const id = await key(ctx);
    // An empty key is no key: counting it would put every such caller in one set of slots.
    if (id === undefined || id === "") return onMissingKey ? onMissingKey(ctx) : unauthorized();
    const slot = await concurrency.acquire(id);
    c.set("concurrency", slot);
    if (slot.source === "error") {
      const { method, path } = c.req;
      const outcome = slot.allowed ? "allowed (onError: allow)" : "refused (onError: deny)";
      log({
        kind: "error",
        message: `edgelimit: no concurrency slot from Redis for ${method} ${path}, ${outcome}: ${slot.error?.message}`,
        key: id,
        decision: slot,
        method,
        path,
      });
    }
    if (!slot.allowed) {
      // Refused because Redis did not answer: the acquire may still have taken a slot. Give it back.
      if (slot.source === "error") {
        try {
          waitUntil(ctx, slot.release());
        } catch {
          // no waitUntil here: the release runs on its own
        }
      }
      if (mode === "enforce") return tooManyInFlight(slot);
      const { method, path } = c.req;
      log({
        kind: "shadow-denied",
        message: `edgelimit shadow: would refuse ${method} ${path} (${slot.source === "error" ? "no concurrency slot from Redis, onError: deny" : `all ${slot.limit} concurrency slots taken`})`,
        key: id,
        decision: slot,
        method,
        path,
      });
      await next();
      c.header(SHADOW_HEADER, "denied");
      return;
    }

    // The runtime must not drop the release: it is handed over now and settles once the slot is back.
    let settle!: () => void;
    const settled = new Promise<void>((resolve) => {
      settle = resolve;
    });
    let releasing = false;
    const release = () => {
      if (releasing) return;
      releasing = true;
      slot.release().then(settle, settle);
    };
    try {
      waitUntil(ctx, settled);
    } catch {
      // no waitUntil here: the release runs on its own
    }
    try {
      await next();
    } catch (error) {
      release();
      throw error;
    }
    const response = c.res;
    if (response.body === null || response.status === 101) {
      release();
      return;
    }
    c.res = new Response(untilDone(response.body, release), response);
  };
};

/** The Concurrency options among the middleware's, for `new Concurrency()`. */
function engineOptions(options: Record<string, unknown>): ConcurrencyOptions {
  const {
    key: _key,
    log: _log,
    onMissingKey: _missing,
    waitUntil: _wait,
    concurrency: _c,
    mode: _mode,
    ...rest
  } = options;
  return rest as unknown as ConcurrencyOptions;
}

function defaultWaitUntil(c: Context, promise: Promise<unknown>): void {
  c.executionCtx.waitUntil(promise); // throws where there is no execution context: caught above
}

/**
 * `body`, passed through chunk by chunk as the client reads it; `onDone` runs once, when the last chunk
 * has been read, the body failed, or the reader cancelled it (the client went away).
 */
function untilDone(body: ReadableStream<Uint8Array>, onDone: () => void): ReadableStream<Uint8Array> {
  const reader = body.getReader();
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        let chunk: ReadableStreamReadResult<Uint8Array>;
        try {
          chunk = await reader.read();
        } catch (error) {
          onDone();
          controller.error(error);
          return;
        }
        if (chunk.done) {
          onDone();
          controller.close();
        } else {
          controller.enqueue(chunk.value);
        }
      },
      cancel(reason) {
        onDone();
        return reader.cancel(reason);
      },
    },
    { highWaterMark: 0 },
  );
}
