import type { Context, Env, MiddlewareHandler } from "hono";
import type { ConcurrencyDecision } from "../../engine/concurrency.js";
import type { Limiter } from "../../engine/limiter.js";
import type { Decision, Settlement } from "../../engine/types.js";
import { type FailureLog, failureLog } from "../../http/error-log.js";
import { enforce, SHADOW_HEADER, unauthorized } from "../../http/headers.js";
import { identityOf } from "../../http/identity.js";
import {
  bodyUsageRefusal,
  usageLog as defaultUsageLog,
  openaiUsage,
  type UsageLog,
  type UsageSource,
  usageFromHeader,
} from "../../http/usage.js";
import { checkUsageSource } from "../usage-source.js";

export {
  type ConcurrencyEvent,
  type ConcurrencyLimitOptions,
  type ConcurrencyVariables,
  concurrencyLimit,
} from "./concurrency.js";

/**
 * What the middleware puts in the context: `c.get("rateLimit")` in handlers downstream. Always set,
 * except on a request shadow mode let through without a key (there was no decision to make).
 */
export type RateLimitVariables = { rateLimit: Decision };

/**
 * The usage headers a rateLimit took off a request's response (by its context), so that another one
 * around it, settling by the same header (routes stacked on one request), still reads it.
 */
const taken = new WeakMap<object, Map<string, string>>();

/**
 * Something worth a log line: a denial shadow mode let through, a request without a key it let through,
 * or a decision Redis could not make. `message` is a ready-made line; it leaves the key out, since a key
 * may be a secret (an API key) or personal data.
 */
export type RateLimitEvent =
  | {
      kind: "shadow-denied" | "error";
      message: string;
      /** The identity decided on: the key, or the record of identifiers `key` answered. */
      key: string | Readonly<Record<string, string>>;
      decision: Decision;
      method: string;
      path: string;
    }
  | { kind: "shadow-no-key"; message: string; method: string; path: string }
  | {
      /** A response without a usable cost (its reservation stays charged), or a settle that failed. */
      kind: "usage";
      message: string;
      key: string | Readonly<Record<string, string>>;
      decision: Decision;
      method: string;
      path: string;
    };

/**
 * Where the response states what the request really cost (see {@link RateLimitOptions.settle}): a
 * header holding a whole number ≥ 0 (removed from the response unless `expose`), `usage.total_tokens`
 * of an OpenAI-style JSON body or SSE stream, or a function of the context after the handler ran.
 */
export type SettleOption<E extends Env = Env> =
  | UsageSource
  | ((c: Context<E>, decision: Decision) => number | undefined | Promise<number | undefined>);

/** Options of {@link rateLimit}. Only `limiter` and `key` are required. */
export interface RateLimitOptions<E extends Env = Env> {
  limiter: Limiter;
  /**
   * Who is asking (user id, API key, IP): one identifier, or a record of them, one field per rule's
   * `by` (`{ key: apiKey, ip, global: "all" }`), all decided in one call, all or nothing. `undefined`,
   * `""`, or a record with a field `undefined` or `""` answers 401 in enforce mode; shadow mode serves
   * the request marked `EdgeLimit-Shadow: no-key`. `onMissingKey`, when given, answers in both modes.
   */
  key: (
    c: Context<E>,
  ) =>
    | string
    | Readonly<Record<string, string | undefined>>
    | undefined
    | Promise<string | Readonly<Record<string, string | undefined>> | undefined>;
  /** Units this request takes (default 1); 0 only reads the state. */
  cost?: (c: Context<E>) => number | Promise<number>;
  /**
   * The Limiter plan this request is decided under (e.g. the customer's, from your session or API key
   * record); `undefined`: the base rules. The headers state the quota of the plan that applied.
   */
  plan?: (c: Context<E>) => string | undefined | Promise<string | undefined>;
  /** "enforce" (default) refuses with 429; "shadow" lets everything through and reports would-be refusals. */
  mode?: "enforce" | "shadow";
  /** Also send X-RateLimit-Limit / -Remaining / -Reset (default false). */
  legacyHeaders?: boolean;
  /** Where events go (default: `console.warn(event.message)`). */
  log?: (event: RateLimitEvent) => void;
  /** The response when `key` gives undefined (default: see `key`). */
  onMissingKey?: (c: Context<E>) => Response | Promise<Response>;
  /**
   * What becomes of Redis failures (default: one per middleware): the first is logged in full, then at
   * most one summary line per 60 s. Pass one `failureLog()` to several middlewares to summarise them together.
   */
  failures?: FailureLog;
  /**
   * Charge what the request really cost, read from the response: `cost` is then the reservation, and
   * `limiter.settle` gives back what it did not use (or charges the extra as a debt), off the request
   * path. `{ header: "x-usage" }`, `{ usage: "openai" }` (settled when the body has streamed through;
   * a client that goes away mid-body keeps the reservation), or a function answering the cost
   * (`undefined` keeps the reservation). Only allowed decisions are settled: a denied one (shadow mode)
   * or one that failed open (`source: "error"`, nothing was charged) is not.
   */
  settle?: SettleOption<E>;
  /**
   * What becomes of responses without a usable cost and of failed settles (default: one per
   * middleware): the first is logged, then at most one summary line per 60 s.
   */
  usageLog?: UsageLog;
}

/**
 * Rate limiting middleware for Hono. Every response of a limited route carries RateLimit-Policy and
 * RateLimit (draft-ietf-httpapi-ratelimit-headers-10); a refusal is a 429 application/problem+json with
 * Retry-After. In shadow mode nothing is refused: a request that would have been gets the header
 * `EdgeLimit-Shadow: denied` (or `no-key`) and a log line. When Redis fails, the Limiter's `onError`
 * has already decided; the middleware only reports it through `log`.
 *
 * @example
 * const limiter = new Limiter({ redis, rules: { burst: gcra({ limit: 10, period: "1s", burst: 20 }) } });
 * const app = new Hono<{ Variables: RateLimitVariables }>();
 * app.use("/api/*", rateLimit({ limiter, key: (c) => c.req.header("x-api-key") }));
 * app.get("/api/hello", (c) => c.json({ remaining: c.get("rateLimit").remaining }));
 */
export const rateLimit = <E extends Env = Env>({
  limiter,
  key,
  cost = () => 1,
  plan,
  mode = "enforce",
  legacyHeaders = false,
  log = (event) => console.warn(event.message),
  onMissingKey,
  failures = failureLog(),
  settle,
  usageLog = defaultUsageLog(),
}: RateLimitOptions<E>): MiddlewareHandler<E & { Variables: RateLimitVariables }> => {
  if (mode !== "enforce" && mode !== "shadow") {
    throw new Error(`mode: must be "enforce" or "shadow", got ${JSON.stringify(mode)}`);
  }
  if (settle !== undefined && typeof settle !== "function") {
    const [issue] = checkUsageSource(settle);
    if (issue) throw new Error(`${["settle", ...issue.path].join(".")}: ${issue.message}`);
  }
  return async function rateLimit(c, next) {
    const ctx = c as unknown as Context<E>;
    // An empty key (a header sent empty) is no key: never one bucket shared by every such caller.
    const id = identityOf(await key(ctx));
    if (id === undefined) {
      if (onMissingKey) return onMissingKey(ctx);
      if (mode === "enforce") return unauthorized();
      const { method, path } = c.req;
      log({
        kind: "shadow-no-key",
        message: `edgelimit shadow: would answer 401 to ${method} ${path} (no key)`,
        method,
        path,
      });
      await next();
      c.header(SHADOW_HEADER, "no-key");
      return;
    }
    // Lease refunds due now finish after the response, through the runtime's waitUntil where it has one.
    const decision = await limiter.limit(id, {
      cost: await cost(ctx),
      plan: plan && (await plan(ctx)),
      waitUntil: waitUntilOf(c),
    });
    c.set("rateLimit", decision);
    const where = { key: id, decision, method: c.req.method, path: c.req.path };
    const failure = failures.record(decision, `${where.method} ${where.path}`);
    if (failure) log({ kind: "error", message: failure, ...where });
    const { refusal, headers, shadowDenied } = enforce(decision, {
      mode,
      legacy: legacyHeaders,
    });
    if (refusal) return refusal;
    if (shadowDenied) log({ kind: "shadow-denied", message: shadowLine(decision, where), ...where });
    await next();
    // Set after the handler: a handler's own `new Response()` replaces c.res and would drop them.
    for (const [name, value] of Object.entries(headers)) c.header(name, value);
    const settled = decision.allowed && decision.source !== "error";
    // A slot refused after this middleware (concurrencyLimit, as the Worker stacks them) served
    // nothing: the reservation goes back whatever `settle` says (served in shadow mode, it stays).
    const slot = (c.get as (key: string) => unknown)("concurrency") as ConcurrencyDecision | undefined;
    const slotRefused = slot?.allowed === false && c.res.headers.get(SHADOW_HEADER) !== "denied";
    if (settle === undefined && !slotRefused) return;
    // What a request that is not settled costs stays its reservation; every case says why in the log.
    const unsettled = (why: string) => {
      const line = usageLog.record(`${where.method} ${where.path}: ${why}`);
      if (line) log({ kind: "usage", message: line, ...where });
    };
    const charge = (actual: number) => {
      // refused: a bad actual or a decision already settled (a function's answer, say)
      const failed = (error: Error) => unsettled(`the settle of ${actual} was refused: ${error.message}`);
      // Redis trouble: the settle is never sent again, so it may or may not have been counted
      const report = (settlement: Settlement) => {
        if (settlement.error) unsettled(`the settle of ${actual} got no answer: ${settlement.error.message}`);
      };
      // Handed to the runtime's waitUntil, settle() answers at once ("pending") and the promise the
      // runtime is given ends with the Settlement: its Redis trouble is reported from there.
      const runtime = waitUntilOf(c);
      const waitUntil =
        runtime &&
        ((promise: Promise<unknown>) => runtime((promise as Promise<Settlement>).then(report, failed)));
      try {
        limiter.settle(decision, actual, { waitUntil }).then(report, failed);
      } catch (error) {
        failed(error as Error);
      }
    };
    if (slotRefused) {
      if (settled) charge(0);
      return;
    }
    if (settle === undefined) return;
    if (typeof settle === "function") {
      if (!settled) return;
      const actual = await settle(ctx, decision);
      if (actual !== undefined) charge(actual);
      return;
    }
    if ("header" in settle) {
      // (an inner route that settles by the same header has taken it off the response already)
      const value = c.res.headers.get(settle.header) ?? taken.get(c)?.get(settle.header) ?? null;
      // The origin's accounting is not the client's business unless the route says so.
      if (!settle.expose && value !== null && c.res.headers.has(settle.header)) {
        c.header(settle.header, undefined);
        const of = taken.get(c) ?? new Map<string, string>();
        of.set(settle.header, value);
        taken.set(c, of);
      }
      if (!settled) return;
      // The header is the origin's own statement, trusted at any status (an origin that failed after
      // doing work charges it); but a handler that copies request headers would let the client write
      // it, so a request that carries it itself is not refunded.
      if (c.req.raw.headers.has(settle.header)) {
        unsettled(`the request itself carries ${settle.header}; kept the reservation`);
        return;
      }
      const actual = usageFromHeader(value);
      if (actual !== undefined) charge(actual);
      else {
        unsettled(
          value === null
            ? `no ${settle.header} header; kept the reservation`
            : `${settle.header} is ${JSON.stringify(value.slice(0, 40))}, not a whole number ≥ 0; kept the reservation`,
        );
      }
      return;
    }
    if (!settled) return;
    // Only a 2xx JSON or event-stream body is read: other bodies are where origins echo their clients.
    const unreadable = bodyUsageRefusal(c.res.status, c.res.headers.get("content-type"));
    if (unreadable !== undefined) {
      unsettled(`${unreadable}; kept the reservation`);
      return;
    }
    const body = c.res.body;
    if (body === null) {
      unsettled("no body to read usage.total_tokens from; kept the reservation");
      return;
    }
    const reading = openaiUsage(c.res.headers.get("content-type"), (tokens) => {
      if (tokens !== undefined) charge(tokens);
      else unsettled("no usage.total_tokens in the body; kept the reservation");
    });
    c.res = new Response(body.pipeThrough(reading), c.res);
  };
};

/** `c.executionCtx.waitUntil` on Workers and other runtimes that give one; undefined elsewhere (Node). */
function waitUntilOf(c: Context): ((promise: Promise<unknown>) => void) | undefined {
  let ctx: { waitUntil(promise: Promise<unknown>): void } | undefined;
  try {
    ctx = c.executionCtx; // a getter that throws where the runtime gave none
  } catch {
    return undefined;
  }
  return typeof ctx?.waitUntil === "function" ? (promise) => ctx.waitUntil(promise) : undefined;
}

function shadowLine(decision: Decision, { method, path }: { method: string; path: string }): string {
  const retry = Number.isFinite(decision.retryAfter) ? `retry in ${decision.retryAfter} ms` : "never fits";
  return `edgelimit shadow: would deny ${method} ${path} (rule "${decision.rule}", ${retry})`;
}
