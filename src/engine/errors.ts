/**
 * What went wrong on the way to Redis, as a kind a caller can branch on:
 *
 * - `"timeout"`: no answer within the call's timeout (the request may still run in Redis later).
 * - `"unreachable"`: the REST endpoint could not be reached or dropped the connection (refused, reset,
 *   DNS), or a gateway in front of Redis answered 502, 503 or 504 (Redis unavailable behind it). Never
 *   retried: a request that may have reached Redis is not sent again.
 * - `"unauthorized"`: the REST endpoint answered 401 or 403: the token is wrong. A configuration error.
 * - `"http"`: the REST endpoint answered another HTTP error (500, 413, ...), or a body that is not a
 *   pipeline reply.
 * - `"redis"`: Redis ran the command and answered an error (WRONGTYPE, OOM, a script error, ...).
 * - `"breaker-open"`: nothing was sent: the circuit breaker is open after repeated failures. `cause` is
 *   the failure that opened it.
 */
export type RedisErrorKind = "timeout" | "unreachable" | "unauthorized" | "http" | "redis" | "breaker-open";

/**
 * The error of a decision that Redis did not make (`decision.error` when `source` is `"error"`).
 *
 * @example
 * const decision = await limiter.limit(id);
 * if (decision.error instanceof RedisCallError && decision.error.kind === "unauthorized") alertOps();
 */
export class RedisCallError extends Error {
  override readonly name = "RedisCallError";
  /** HTTP status of the answer, when there was one (`"unauthorized"`, `"http"`, a gateway's `"unreachable"`). */
  readonly status: number | undefined;

  constructor(
    readonly kind: RedisErrorKind,
    message: string,
    options: { cause?: unknown; status?: number } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.status = options.status;
  }
}
