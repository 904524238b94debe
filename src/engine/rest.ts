// The Upstash REST protocol, spoken directly: one `POST <url>/pipeline` with the bearer token, its
// commands as a JSON array of arrays, its replies as `[{ result } | { error }, ...]` in the same order.
// Plain JSON (no base64 encoding), so replies need no decoding. Sent once: nothing here retries.
//
// Where the URL and token come from is settled once, when the connection is built: `{ url, token }`,
// or an @upstash/redis client, whose URL and token are read then and never again. Nothing on the
// request path touches the client, except its read-your-writes token, through its public accessor.

import type { Reply, Sender } from "./batch.js";
import type { BreakerOptions } from "./breaker.js";
import { describe } from "./duration.js";
import { RedisCallError } from "./errors.js";

/** A Redis reached over the Upstash REST protocol, as `new Limiter({ redis })` takes it. */
export interface RestConnection {
  /** The REST URL, `UPSTASH_REDIS_REST_URL` (http:// or https://). */
  url: string;
  /** The REST token, `UPSTASH_REDIS_REST_TOKEN`. */
  token: string;
  /**
   * The circuit breaker of this Redis (default `{ failures: 5, cooldown: 1000, maxCooldown: 4000 }`), or
   * `false`: shared by every Limiter, Lock and Concurrency on it in this isolate (see docs/failures.md).
   */
  breaker?: BreakerOptions | false;
}

/** Where and how requests go, settled at construction. */
export interface Endpoint {
  /** The REST URL, without a trailing slash. */
  url: string;
  token: string;
  /** The client whose read-your-writes token the requests carry and keep moving (a client's option). */
  session?: { readYourWritesSyncToken: string } | undefined;
  /** A client's `cache` and Fastly `backend` fetch options. */
  cache?: RequestCache | undefined;
  backend?: string | undefined;
}

/** The parts of an @upstash/redis client this module reads, once. */
interface UpstashClient {
  client?: {
    baseUrl?: unknown;
    headers?: Record<string, unknown> | null;
    options?: { cache?: unknown; backend?: unknown } | null;
    readYourWrites?: unknown;
  } | null;
  readYourWritesSyncToken?: unknown;
}

const FIELDS = ["url", "token", "breaker"];
const EXPECTED =
  "expected an @upstash/redis client or { url, token } (UPSTASH_REDIS_REST_URL and UPSTASH_REDIS_REST_TOKEN)";

/** Whether `redis` is handed in as an @upstash/redis client rather than `{ url, token }`. */
export function isClient(redis: unknown): boolean {
  return redis !== null && typeof redis === "object" && "client" in redis;
}

/**
 * The endpoint of `redis`: `{ url, token }`, checked, or an @upstash/redis client, read once. Throws an
 * Error naming the field (`redis.url: ...`) when it cannot be used.
 *
 * @example
 * endpointOf({ url: "https://eu1-x.upstash.io", token }) // { url: "https://eu1-x.upstash.io", token }
 */
export function endpointOf(redis: unknown): Endpoint {
  if (redis === null || typeof redis !== "object")
    throw new Error(`redis: ${EXPECTED}, got ${describe(redis)}`);
  if (isClient(redis)) return clientEndpoint(redis as UpstashClient);
  if (!("url" in redis) && !("token" in redis)) throw new Error(`redis: ${EXPECTED}, got ${describe(redis)}`);
  for (const field of Object.keys(redis)) {
    if (!FIELDS.includes(field)) {
      throw new Error(
        `redis.${field}: not a field of { url, token, breaker }; for a client's options, pass the client`,
      );
    }
  }
  const { url, token } = redis as { url?: unknown; token?: unknown };
  if (typeof url !== "string" || !isHttpUrl(url)) {
    throw new Error(
      `redis.url: expected the REST URL (http:// or https://, UPSTASH_REDIS_REST_URL), got ${describe(url)}`,
    );
  }
  if (typeof token !== "string" || token === "") {
    // never the token's value: it is a secret, and this message may be logged
    const got = typeof token === "string" ? "an empty string" : typeof token;
    throw new Error(`redis.token: expected the REST token (UPSTASH_REDIS_REST_TOKEN), got ${got}`);
  }
  if (token.trim() !== token || /[\r\n]/.test(token)) {
    throw new Error(
      "redis.token: starts or ends with whitespace or holds a line break (pasted with a newline?)",
    );
  }
  return { url: url.replace(/\/+$/, ""), token };
}

/** An @upstash/redis client's URL and token, as it keeps them, or an Error saying to pass them. */
function clientEndpoint(redis: UpstashClient): Endpoint {
  const client = redis.client;
  const url = client?.baseUrl;
  const authorization = client?.headers?.authorization ?? client?.headers?.Authorization;
  const token =
    typeof authorization === "string" && authorization.startsWith("Bearer ") ? authorization.slice(7) : "";
  if (typeof url !== "string" || !isHttpUrl(url) || token === "") {
    throw new Error(
      "redis: cannot read the REST URL and token of this client (an @upstash/redis client built with { url, token } keeps them); pass { url, token } instead",
    );
  }
  const options = client?.options;
  const cache = typeof options?.cache === "string" ? (options.cache as RequestCache) : undefined;
  const backend = typeof options?.backend === "string" ? options.backend : undefined;
  // the client's read-your-writes token (on by default): carried and kept moving, so that what the
  // client reads next sees what the scripts wrote
  const session =
    client?.readYourWrites !== false && typeof redis.readYourWritesSyncToken === "string"
      ? (redis as { readYourWritesSyncToken: string })
      : undefined;
  return { url: url.replace(/\/+$/, ""), token, session, cache, backend };
}

function isHttpUrl(url: string): boolean {
  if (/\s/.test(url)) return false;
  try {
    const protocol = new URL(url).protocol;
    return protocol === "http:" || protocol === "https:";
  } catch {
    return false;
  }
}

/**
 * Sends one `/pipeline` request to `endpoint` per call, once: resolves with one reply per command, or
 * rejects with a RedisCallError whose kind says what failed (see errors.ts).
 *
 * @example
 * const send = restSender(endpointOf({ url, token }));
 * const [pong] = await send([["PING"]], new AbortController().signal); // { result: "PONG" }
 */
export function restSender(endpoint: Endpoint): Sender {
  const url = `${endpoint.url}/pipeline`;
  const origin = new URL(endpoint.url).origin;
  const headers: Record<string, string> = {
    authorization: `Bearer ${endpoint.token}`,
    "content-type": "application/json",
  };
  const { session, cache, backend } = endpoint;
  return async (commands, signal) => {
    const init: RequestInit & { backend?: string } = {
      method: "POST",
      headers,
      body: JSON.stringify(commands),
      signal,
    };
    // fetch copies its headers when called, so the one object can carry each request's sync token
    const sync = session?.readYourWritesSyncToken;
    if (sync) headers["upstash-sync-token"] = sync;
    if (cache !== undefined) init.cache = cache;
    if (backend !== undefined) init.backend = backend;
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
    const status = response.status;
    if (status === 401 || status === 403) throw unauthorized(status, origin);
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      throw new RedisCallError(
        statusKind(status),
        `edgelimit: Redis at ${origin} answered HTTP ${status} with a body that is not JSON`,
        { status },
      );
    }
    if (!response.ok) {
      const message = (body as { error?: unknown } | null)?.error;
      const said = typeof message === "string" ? message : `HTTP ${status}`;
      // 400 with an error: Redis (or the REST layer) refused the command itself
      const kind = status === 400 && typeof message === "string" ? "redis" : statusKind(status);
      throw new RedisCallError(kind, `edgelimit: Redis at ${origin} answered HTTP ${status}: ${said}`, {
        status,
      });
    }
    if (session) {
      const next = response.headers.get("upstash-sync-token");
      if (next) session.readYourWritesSyncToken = next;
    }
    if (!Array.isArray(body) || body.length !== commands.length) {
      throw new RedisCallError(
        "http",
        `edgelimit: Redis at ${origin} answered ${Array.isArray(body) ? `${body.length} replies` : typeof body} for ${commands.length} commands`,
        { status },
      );
    }
    return body as Reply[];
  };
}

/** A gateway in front of Redis that could not reach it (502, 503, 504) is "unreachable"; the rest "http". */
function statusKind(status: number): "unreachable" | "http" {
  return status === 502 || status === 503 || status === 504 ? "unreachable" : "http";
}

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
