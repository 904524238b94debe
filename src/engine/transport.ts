// The one way this library talks to Redis. One Transport per @upstash/redis client object (a WeakMap
// keyed by the client), shared by every Limiter, Lock and concurrency limiter built on that client;
// on Workers that is one per isolate. It
//  - batches the commands issued in one tick (or batching window) into one `/pipeline` request;
//  - sends that request at most once: its own `fetch` to the client's URL with the client's headers,
//    without the client's retries (@upstash/redis retries a failed POST 5 times by default, which
//    can run a script 6 times when an answer is lost after Redis ran it);
//  - gives every call its own timeout, and aborts the request once no call waits on it;
//  - runs the circuit breaker: after repeated failures calls are refused at once, without a request;
//  - recovers from NOSCRIPT (script cache flushed, Redis restarted) by loading the script once ahead
//    of the calls that need it and asking again: NOSCRIPT means the script did not run;
//  - never rejects: a call resolves to its result or to a typed failure (RedisCallError, by kind).

import { Batcher, type Reply, type Sender } from "./batch.js";
import { BREAKER_DEFAULTS, Breaker, type BreakerOptions, breakerOptions } from "./breaker.js";
import { RedisCallError } from "./errors.js";

/** A Lua script the transport can load when Redis answers NOSCRIPT. */
export interface Script {
  text: string;
  sha1: string;
}

/** Options of one call. */
export interface CallOptions {
  /** Ms to wait for the reply (Infinity: no limit). The call then fails with kind "timeout". */
  timeout: number;
  /** Ms to collect calls into one request (default 0: those issued in the same tick). */
  batchWindow?: number;
  /** `false`: this call neither consults nor feeds the breaker (default true). */
  breaker?: boolean;
  /** For an EVALSHA: the script to load if Redis does not have it (NOSCRIPT), then ask once more. */
  script?: Script;
}

/** The outcome of one call: never a rejection. */
export type CallResult = { ok: true; result: unknown } | { ok: false; error: RedisCallError };

/** Counters, for tests and reports. */
export interface TransportStats {
  /** HTTP `/pipeline` requests sent. */
  requests: number;
  /** Calls sent to Redis (NOSCRIPT retries included). */
  sent: number;
  /** Calls refused by the open breaker, without a request. */
  refused: number;
}

/** The part of an @upstash/redis client this module reads. */
interface UpstashClient {
  client?: {
    baseUrl?: unknown;
    headers?: unknown;
    options?: { cache?: RequestCache; backend?: string };
    readYourWrites?: boolean;
    upstashSyncToken?: string;
    request?(req: { path?: string[]; body?: unknown; signal?: () => AbortSignal }): Promise<unknown>;
  };
}

/**
 * Sends commands to one Redis: batched, at most once, with a timeout per call and a circuit breaker.
 * Get the shared one of a client with `transportFor(redis)`.
 *
 * @example
 * const transport = transportFor(redis);
 * const r = await transport.call(["EVALSHA", sha1, "1", key, "5"], { timeout: 1000, script: { text, sha1 } });
 * if (r.ok) use(r.result); else console.warn(r.error.kind, r.error.message);
 */
export class Transport {
  readonly stats: TransportStats = { requests: 0, sent: 0, refused: 0 };
  /** The breaker of this client; `undefined` only for a transport built with `breaker: false`. */
  breaker: Breaker | undefined;
  private breakerExplicit = false;
  private readonly batchers = new Map<number, Batcher>();
  private readonly sender: Sender;

  constructor(
    redis: unknown,
    private readonly options: { breaker?: BreakerOptions | false; now?: () => number } = {},
  ) {
    this.sender = senderFor(redis as UpstashClient, this.stats);
    const breaker = options.breaker;
    this.breaker = breaker === false ? undefined : new Breaker(breakerOptions(breaker ?? {}), this.now);
    this.breakerExplicit = breaker !== undefined;
  }

  /**
   * Sets the breaker's options for every user of this client. Options left undefined accept what is
   * there; two different explicit settings on one client are a configuration error.
   */
  configureBreaker(options: BreakerOptions | undefined): void {
    if (options === undefined) return;
    const wanted = breakerOptions(options);
    const current = this.breaker?.options;
    if (current && sameOptions(current, wanted)) {
      this.breakerExplicit = true;
      return;
    }
    if (this.breakerExplicit) {
      throw new Error(
        `breaker: this Redis client already has a breaker with ${JSON.stringify(current)}; the breaker belongs to the client, so give every Limiter on one client the same breaker options (or build another client)`,
      );
    }
    this.breaker = new Breaker(wanted, this.now);
    this.breakerExplicit = true;
  }

  /** Sends one command and resolves with its result or a typed failure; never rejects. */
  call(command: unknown[], options: CallOptions): Promise<CallResult> {
    const breaker = options.breaker === false ? undefined : this.breaker;
    const admission = breaker ? breaker.admit() : { probe: false };
    if (admission instanceof RedisCallError) {
      this.stats.refused += 1;
      return Promise.resolve({ ok: false, error: admission });
    }
    const batcher = this.batcher(options.batchWindow ?? 0);
    return new Promise<CallResult>((resolve) => {
      let done = false;
      let call = batcher.send(command);
      this.stats.sent += 1;
      const settle = (result: CallResult) => {
        if (done) return;
        done = true;
        if (timer !== undefined) clearTimeout(timer);
        if (breaker) {
          if (result.ok) breaker.success();
          else breaker.failure(result.error, admission);
        }
        resolve(result);
      };
      const fail = (error: unknown) => settle({ ok: false, error: asCallError(error) });
      const onReply = (reply: Reply | undefined, attempt: number) => {
        if (done) return;
        if (reply === null || typeof reply !== "object") {
          return fail(
            new RedisCallError("http", "edgelimit: the pipeline reply is missing a command's answer"),
          );
        }
        if (reply.error !== undefined) {
          const message = String(reply.error);
          if (attempt < 2 && options.script && message.startsWith("NOSCRIPT")) {
            // The script did not run. Load it once, ahead of every call that met NOSCRIPT in this
            // batch, and ask again within the same timeout. Should the cache be flushed again between
            // that SCRIPT LOAD and the EVALSHA (SCRIPT FLUSH from elsewhere), the last try is an EVAL
            // with the text, which needs no cache.
            let again = command;
            if (attempt === 0) batcher.sendAhead(["SCRIPT", "LOAD", options.script.text]);
            else if (command[0] === "EVALSHA") again = ["EVAL", options.script.text, ...command.slice(2)];
            call = batcher.send(again);
            this.stats.sent += 1;
            call.reply.then((reply) => onReply(reply, attempt + 1), fail);
            return;
          }
          return fail(new RedisCallError("redis", `edgelimit: Redis answered an error: ${message}`));
        }
        settle({ ok: true, result: reply.result });
      };
      const timer =
        options.timeout === Number.POSITIVE_INFINITY
          ? undefined
          : setTimeout(() => {
              call.abandon();
              fail(
                new RedisCallError("timeout", `edgelimit: Redis did not answer within ${options.timeout} ms`),
              );
            }, options.timeout);
      call.reply.then((reply) => onReply(reply, 0), fail);
    });
  }

  /**
   * EVALSHA of `script` with its keys and arguments, loading the script once if Redis lacks it.
   *
   * @example
   * const r = await transport.eval(SCRIPTS.lock, [key], [token, "5000"], { timeout: 1000 });
   */
  eval(script: Script, keys: string[], args: (string | number)[], options: CallOptions): Promise<CallResult> {
    const command = ["EVALSHA", script.sha1, String(keys.length), ...keys, ...args.map(String)];
    return this.call(command, { ...options, script });
  }

  private readonly now = (): number => (this.options.now ?? monotonic)();

  private batcher(window: number): Batcher {
    let batcher = this.batchers.get(window);
    if (!batcher) {
      batcher = new Batcher(this.sender, window);
      this.batchers.set(window, batcher);
    }
    return batcher;
  }
}

const transports = new WeakMap<object, Transport>();

/**
 * The transport shared by everything built on this @upstash/redis client (one per client object, so
 * one per isolate on Workers). `breaker` sets the client's breaker options (see `configureBreaker`).
 *
 * @example
 * const transport = transportFor(redis, { breaker: { failures: 5, cooldown: 1000 } });
 */
export function transportFor(redis: object, options: { breaker?: BreakerOptions } = {}): Transport {
  let transport = transports.get(redis);
  if (!transport) {
    transport = new Transport(redis);
    transports.set(redis, transport);
  }
  transport.configureBreaker(options.breaker);
  return transport;
}

function sameOptions(a: Required<BreakerOptions>, b: Required<BreakerOptions>): boolean {
  return a.failures === b.failures && a.cooldown === b.cooldown && a.maxCooldown === b.maxCooldown;
}

function monotonic(): number {
  return typeof performance !== "undefined" ? performance.now() : Date.now();
}

export { BREAKER_DEFAULTS };

let unauthorizedLogged = false;

/** The first 401/403 is logged once per isolate, with the fix; every call still says it in its error. */
function unauthorized(status: number, origin: string): RedisCallError {
  const error = new RedisCallError(
    "unauthorized",
    `edgelimit: Redis at ${origin} refused the token (HTTP ${status}): check UPSTASH_REDIS_REST_TOKEN (on Workers: npx wrangler secret put UPSTASH_REDIS_REST_TOKEN)`,
    { status },
  );
  if (!unauthorizedLogged) {
    unauthorizedLogged = true;
    console.error(`${error.message}. Decisions follow onError until it is fixed.`);
  }
  return error;
}

/**
 * How a client's requests go out. An @upstash/redis HTTP client (baseUrl + headers): a plain `fetch`
 * to `<baseUrl>/pipeline` with its headers, once, no retries, plain JSON (no base64 encoding, so the
 * replies need no decoding). Anything else: the client's own `request`, whose retries this cannot
 * switch off (documented).
 */
function senderFor(redis: UpstashClient, stats: TransportStats): Sender {
  const client = redis.client;
  if (!client) throw new Error("redis: expected an @upstash/redis client, e.g. new Redis({ url, token })");
  const baseUrl = client.baseUrl;
  const headers = client.headers;
  if (typeof baseUrl === "string" && baseUrl !== "" && headers !== null && typeof headers === "object") {
    const url = `${baseUrl.replace(/\/$/, "")}/pipeline`;
    const origin = originOf(baseUrl);
    return async (commands, signal) => {
      stats.requests += 1;
      const sent: Record<string, string> = {};
      for (const [name, value] of Object.entries(headers as Record<string, unknown>)) {
        if (typeof value === "string" && name.toLowerCase() !== "upstash-encoding") sent[name] = value;
      }
      if (client.readYourWrites && client.upstashSyncToken)
        sent["upstash-sync-token"] = client.upstashSyncToken;
      const init: RequestInit & { backend?: string } = {
        method: "POST",
        headers: sent,
        body: JSON.stringify(commands),
        signal,
      };
      if (client.options?.cache !== undefined) init.cache = client.options.cache;
      if (client.options?.backend !== undefined) init.backend = client.options.backend;
      let response: Response;
      let text: string;
      try {
        response = await fetch(url, init);
        text = await response.text();
      } catch (error) {
        throw new RedisCallError(
          "unreachable",
          `edgelimit: no answer from Redis at ${origin} (${detail(error)})`,
          {
            cause: error,
          },
        );
      }
      if (response.status === 401 || response.status === 403) throw unauthorized(response.status, origin);
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch {
        throw new RedisCallError(
          statusKind(response.status),
          `edgelimit: Redis at ${origin} answered HTTP ${response.status} with a body that is not JSON`,
          { status: response.status },
        );
      }
      if (!response.ok) {
        const message = (body as { error?: unknown } | null)?.error;
        const said = typeof message === "string" ? message : `HTTP ${response.status}`;
        // 400 with an error: Redis (or the REST layer) refused the command itself
        const kind =
          response.status === 400 && typeof message === "string" ? "redis" : statusKind(response.status);
        throw new RedisCallError(
          kind,
          `edgelimit: Redis at ${origin} answered HTTP ${response.status}: ${said}`,
          {
            status: response.status,
          },
        );
      }
      const token = response.headers.get("upstash-sync-token");
      if (client.readYourWrites && token) client.upstashSyncToken = token;
      if (!Array.isArray(body) || body.length !== commands.length) {
        throw new RedisCallError(
          "http",
          `edgelimit: Redis at ${origin} answered ${Array.isArray(body) ? `${body.length} replies` : typeof body} for ${commands.length} commands`,
          { status: response.status },
        );
      }
      return body as Reply[];
    };
  }
  const request = client.request;
  if (typeof request !== "function") {
    throw new Error("redis: expected an @upstash/redis client, e.g. new Redis({ url, token })");
  }
  return async (commands, signal) => {
    stats.requests += 1;
    let replies: unknown;
    try {
      replies = await request.call(client, { path: ["pipeline"], body: commands, signal: () => signal });
    } catch (error) {
      throw new RedisCallError("unreachable", `edgelimit: ${scrub(error)}`, { cause: error });
    }
    if (!Array.isArray(replies) || replies.length !== commands.length) {
      throw new RedisCallError(
        "http",
        `edgelimit: the pipeline answered ${typeof replies} for ${commands.length} commands`,
      );
    }
    return replies as Reply[];
  };
}

/** A gateway in front of Redis that could not reach it (502, 503, 504) is "unreachable"; the rest "http". */
function statusKind(status: number): "unreachable" | "http" {
  return status === 502 || status === 503 || status === 504 ? "unreachable" : "http";
}

function asCallError(error: unknown): RedisCallError {
  if (error instanceof RedisCallError) return error;
  return new RedisCallError("unreachable", `edgelimit: ${scrub(error)}`, { cause: error });
}

/** What a failed fetch says, with the system error code when there is one (ECONNREFUSED, ...). */
function detail(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  const cause = (error as { cause?: { code?: unknown; message?: unknown } } | undefined)?.cause;
  const code = typeof cause?.code === "string" ? cause.code : undefined;
  const causeMessage = typeof cause?.message === "string" ? cause.message : undefined;
  return [message, code, causeMessage && causeMessage !== code ? causeMessage : undefined]
    .filter(Boolean)
    .join(": ");
}

function originOf(url: string): string {
  try {
    return new URL(url).origin;
  } catch {
    return url;
  }
}

/**
 * The error without the request it came from: @upstash/redis appends ", command was: <body>" to an
 * HTTP error, and that body holds the keys (identifiers, maybe API keys) of every decision in the batch.
 */
function scrub(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  const cut = message.indexOf(", command was:");
  return cut === -1 ? message : message.slice(0, cut);
}
