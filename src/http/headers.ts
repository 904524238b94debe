// The response side of a decision: the RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers-10, Retry-After, and the RFC 9457 problem body of a refusal.
// Pure functions of (decision, rules, now), Web standards only, so every adapter (Hono, Worker, Vercel)
// answers with the same bytes.
//
// What the numbers mean, and why:
//   RateLimit-Policy  one item per rule: "name";q=<quota>;w=<window s>, at exactly the rule's real rate,
//                     with q at least the most the rule ever holds, so r never exceeds q (rule.policy,
//                     from compileRule): gcra 10 per second with a burst of 20 is q=20;w=2, 10 per 500 ms
//                     is q=20;w=1. w must be whole seconds; a policy given here with a window that is not
//                     (a hand-made PolicyRule) is rounded UP, so the advertised rate is never higher than
//                     the real one.
//   RateLimit         the binding rule only: "name";r=<remaining>;t=<s>. On an admission t counts to the
//                     rule's resetAt (back at its full limit: exact for fixed windows, an upper bound for
//                     gcra and token buckets, which refill continuously). On a denial t counts to the
//                     moment this request's cost fits again (retryAfter): the draft's "additional quota
//                     is made available", and it keeps Retry-After from naming a moment before t.
//                     Always rounded up: a client that waits t seconds is never early.
//   Retry-After       denials only, whole seconds, the same moment as t (the draft's B.1.4 example).
//   "never"           a cost larger than the rule can ever hold (retryAfter Infinity): t and Retry-After
//                     are left out (both are optional; no number of seconds would be true), and the
//                     problem detail says retrying will not help.
//   source "error"    Redis did not answer, the state is unknown: RateLimit and the X-RateLimit-* fields
//                     are left out rather than invented; RateLimit-Policy (static) stays. A fail-closed
//                     denial gets Retry-After and an "about:blank" 429: no quota was exceeded.
//   tooManyInFlight   a cap on requests in flight (Concurrency) has no rate policy to describe: its 429
//                     carries Retry-After and the problem body, no RateLimit fields.
import type { Rule } from "../engine/algorithms/index.js";
import type { ConcurrencyDecision } from "../engine/concurrency.js";
import type { Decision } from "../engine/types.js";

/** What the header functions read of a rule: `limiter.rules` fits. */
export type PolicyRule = Pick<Rule, "name" | "policy">;

/**
 * The rules a header function states: those given, else those the decision was decided by (its
 * `decidedBy`: its plan's, or a custom override's own), else none (a decision made by hand).
 */
function policyOf<O>(
  decision: Decision,
  rulesOrOptions: readonly PolicyRule[] | O | undefined,
  options: O | undefined,
): [readonly PolicyRule[], O | undefined] {
  if (Array.isArray(rulesOrOptions)) return [rulesOrOptions, options];
  return [decision.decidedBy ?? [], rulesOrOptions as O | undefined];
}

/** Options of {@link rateLimitHeaders} and {@link tooManyRequests}. */
export interface HeaderOptions {
  /** Also send X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset (default false). */
  legacy?: boolean;
  /** Epoch ms the headers count from (default `decision.decidedAt`, the limiter's clock when it decided). */
  now?: number;
}

/** An RFC 9457 problem details object, as the 429 (and 401) bodies carry it. */
export interface ProblemDetails {
  type: string;
  title: string;
  status: number;
  detail: string;
  /** The draft's extension member: the names of the policies whose quota was exceeded. */
  "violated-policies"?: string[];
  /** Whole seconds until a retry can succeed, as in Retry-After; absent when it never can. */
  "retry-after"?: number;
}

/** The problem type the draft registers for a request over its quota (recommended status 429). */
export const QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded";
const QUOTA_EXCEEDED_TITLE = "Request cannot be satisfied as assigned quota has been exceeded";
/** The header a shadow-mode adapter adds to a response it let through but would have refused. */
export const SHADOW_HEADER = "EdgeLimit-Shadow";
/** The content type of problem details bodies (RFC 9457). */
export const PROBLEM_JSON = "application/problem+json";

// RFC 9651 §3.3.1: Integers have at most 15 digits.
const MAX_SF_INTEGER = 999_999_999_999_999;

/**
 * The RateLimit-Policy field value: one item per rule, `"name";q=<quota>;w=<window in seconds>`.
 *
 * @example
 * policyHeader(limiter.rules) // '"burst";q=20;w=2, "daily";q=1000;w=86400'
 */
export function policyHeader(rules: readonly PolicyRule[]): string {
  return rules
    .map(({ name, policy }) => {
      const windowSeconds = Math.max(1, Math.ceil(policy.window / 1000));
      return `${sfString(name)};q=${sfInteger(policy.quota)};w=${sfInteger(windowSeconds)}`;
    })
    .join(", ");
}

/**
 * The response headers for a decision: RateLimit-Policy, RateLimit, Retry-After on a denial, and the
 * X-RateLimit-* trio when `legacy` is set (X-RateLimit-Reset in epoch seconds, as GitHub sends it).
 *
 * @example
 * const decision = await limiter.limit(ip);
 * const headers = rateLimitHeaders(decision);
 * // { "RateLimit-Policy": '"burst";q=20;w=2', "RateLimit": '"burst";r=19;t=1' }
 */
export function rateLimitHeaders(decision: Decision, options?: HeaderOptions): Record<string, string>;
/** The same, stating `rules` instead of the rules the decision was decided by. */
export function rateLimitHeaders(
  decision: Decision,
  rules: readonly PolicyRule[],
  options?: HeaderOptions,
): Record<string, string>;
export function rateLimitHeaders(
  decision: Decision,
  rulesOrOptions?: readonly PolicyRule[] | HeaderOptions,
  maybeOptions?: HeaderOptions,
): Record<string, string> {
  const [rules, options = {}] = policyOf(decision, rulesOrOptions, maybeOptions);
  const { legacy = false, now = decision.decidedAt } = options;
  const headers: Record<string, string> = {};
  if (rules.length > 0) headers["RateLimit-Policy"] = policyHeader(rules);
  const at = nextAt(decision, now);
  const reset = secondsUntil(at, now);
  if (decision.source !== "error") {
    const t = reset === undefined ? "" : `;t=${sfInteger(reset)}`;
    headers.RateLimit = `${sfString(decision.rule)};r=${sfInteger(decision.remaining)}${t}`;
    if (legacy) {
      headers["X-RateLimit-Limit"] = String(decision.limit);
      headers["X-RateLimit-Remaining"] = String(decision.remaining);
      if (reset !== undefined) headers["X-RateLimit-Reset"] = String(Math.ceil(at / 1000));
    }
  }
  if (!decision.allowed && reset !== undefined) headers["Retry-After"] = String(reset);
  return headers;
}

/**
 * The RFC 9457 body of a refusal: the draft's quota-exceeded problem type with `violated-policies`,
 * or, for a denial made because Redis could not be reached (`onError: "deny"`), an about:blank 429.
 * Throws a TypeError for an admitted decision: there is nothing to refuse.
 *
 * @example
 * problemDetails(decision)
 * // { type: "https://iana.org/assignments/http-problem-types#quota-exceeded", status: 429,
 * //   "violated-policies": ["burst"], "retry-after": 1, ... }
 */
export function problemDetails(decision: Decision, options?: Pick<HeaderOptions, "now">): ProblemDetails;
/** The same, listing violated policies in the order of `rules`. */
export function problemDetails(
  decision: Decision,
  rules: readonly PolicyRule[],
  options?: Pick<HeaderOptions, "now">,
): ProblemDetails;
export function problemDetails(
  decision: Decision,
  rulesOrOptions?: readonly PolicyRule[] | Pick<HeaderOptions, "now">,
  maybeOptions?: Pick<HeaderOptions, "now">,
): ProblemDetails {
  if (decision.allowed) throw new TypeError("problemDetails: the decision admitted the request");
  const [rules, options = {}] = policyOf(decision, rulesOrOptions, maybeOptions);
  const now = options.now ?? decision.decidedAt;
  const retry = secondsUntil(nextAt(decision, now), now);
  if (decision.source === "error") return undecided(retry);
  const violated = Object.keys(decision.rules).filter((name) => decision.rules[name]?.allowed === false);
  if (violated.length === 0) violated.push(decision.rule);
  // Rule order, so the list reads like RateLimit-Policy.
  const order = new Map(rules.map((rule, i) => [rule.name, i]));
  violated.sort((a, b) => (order.get(a) ?? rules.length) - (order.get(b) ?? rules.length));
  return quotaExceeded(violated, retry);
}

/**
 * The whole 429 for a denied decision: problem+json body, rate-limit headers, Retry-After, no-store.
 *
 * @example
 * const decision = await limiter.limit(ip);
 * if (!decision.allowed) return tooManyRequests(decision);
 */
export function tooManyRequests(decision: Decision, options?: HeaderOptions): Response;
/** The same, stating `rules` instead of the rules the decision was decided by. */
export function tooManyRequests(
  decision: Decision,
  rules: readonly PolicyRule[],
  options?: HeaderOptions,
): Response;
export function tooManyRequests(
  decision: Decision,
  rulesOrOptions?: readonly PolicyRule[] | HeaderOptions,
  maybeOptions?: HeaderOptions,
): Response {
  const [rules, options = {}] = policyOf(decision, rulesOrOptions, maybeOptions);
  const now = options.now ?? decision.decidedAt;
  const body = problemDetails(decision, rules, { now });
  return problemResponse(body, {
    ...rateLimitHeaders(decision, rules, { ...options, now }),
    // A refusal is about this moment: no cache may replay it to the next request.
    "Cache-Control": "no-store",
  });
}

/**
 * The 429 of a cap on requests in flight (a refused `Concurrency.acquire`): problem+json naming the
 * limit, Retry-After (the wait until the oldest holder's lease runs out, the latest a slot is sure to
 * be free), no-store. No RateLimit fields: a cap on requests in flight has no rate policy to describe.
 * When Redis did not answer (`onError: "deny"`), an about:blank 429. Throws a TypeError for a slot
 * that was taken: there is nothing to refuse.
 *
 * @example
 * const slot = await inFlight.acquire(apiKey);
 * if (!slot.allowed) return tooManyInFlight(slot);
 */
export function tooManyInFlight(
  refusal: Pick<ConcurrencyDecision, "allowed" | "rule" | "retryAfter" | "source">,
): Response {
  if (refusal.allowed) throw new TypeError("tooManyInFlight: the request was given a slot");
  const retry = secondsUntil(Math.max(0, refusal.retryAfter), 0);
  const body = refusal.source === "error" ? undecided(retry) : quotaExceeded([refusal.rule], retry);
  const headers: Record<string, string> = { "Cache-Control": "no-store" };
  if (retry !== undefined) headers["Retry-After"] = String(retry);
  return problemResponse(body, headers);
}

/** Options of {@link enforce}: the header options, and "shadow" to serve what would be refused. */
export type EnforceOptions = HeaderOptions & { mode?: "enforce" | "shadow" };

/** What an adapter does with a decision: answer with `refusal`, or serve and add `headers`. */
export interface Enforcement {
  /** The 429 to answer with instead of serving; undefined when the request goes on. */
  refusal: Response | undefined;
  /** The headers for the response that is served (the refusal carries its own). */
  headers: Record<string, string>;
  /** True when shadow mode serves a request that enforce mode would have refused. */
  shadowDenied: boolean;
}

/**
 * Turns a decision into what an adapter does: in "enforce" mode a denial becomes a 429; in "shadow"
 * mode it is served, marked `EdgeLimit-Shadow: denied`, without Retry-After (a served response has
 * nothing to retry).
 *
 * @example
 * const decision = await limiter.limit(ip);
 * const { refusal, headers } = enforce(decision, { mode: "shadow" });
 * if (refusal) return refusal;
 * const response = new Response(origin.body, origin); // a mutable copy
 * for (const [name, value] of Object.entries(headers)) response.headers.set(name, value);
 */
export function enforce(decision: Decision, options?: EnforceOptions): Enforcement;
/** The same, stating `rules` instead of the rules the decision was decided by. */
export function enforce(
  decision: Decision,
  rules: readonly PolicyRule[],
  options?: EnforceOptions,
): Enforcement;
export function enforce(
  decision: Decision,
  rulesOrOptions?: readonly PolicyRule[] | EnforceOptions,
  maybeOptions?: EnforceOptions,
): Enforcement {
  const [rules, options = {}] = policyOf(decision, rulesOrOptions, maybeOptions);
  const { mode = "enforce", ...headerOptions } = options;
  const now = headerOptions.now ?? decision.decidedAt;
  if (!decision.allowed && mode === "enforce") {
    return {
      refusal: tooManyRequests(decision, rules, { ...headerOptions, now }),
      headers: {},
      shadowDenied: false,
    };
  }
  const headers = rateLimitHeaders(decision, rules, { ...headerOptions, now });
  if (decision.allowed) return { refusal: undefined, headers, shadowDenied: false };
  delete headers["Retry-After"];
  headers[SHADOW_HEADER] = "denied";
  return { refusal: undefined, headers, shadowDenied: true };
}

/**
 * A 401 problem+json for a request the limiter cannot attribute to anyone (no key). RFC 9110 wants a
 * WWW-Authenticate challenge on every 401: pass the one your API uses.
 *
 * @example
 * if (key === undefined) return unauthorized({ challenge: 'Bearer realm="api"' });
 */
export function unauthorized(options: { detail?: string; challenge?: string } = {}): Response {
  const {
    detail = "This endpoint is rate limited per client, and the request does not say who the client is.",
    challenge,
  } = options;
  const headers: Record<string, string> = { "Cache-Control": "no-store" };
  if (challenge !== undefined) headers["WWW-Authenticate"] = challenge;
  return problemResponse({ type: "about:blank", title: "Unauthorized", status: 401, detail }, headers);
}

/** The draft's quota-exceeded problem for the `violated` policies; `retry` undefined: never fits. */
function quotaExceeded(violated: string[], retry: number | undefined): ProblemDetails {
  const names = violated.map((name) => `"${name}"`).join(", ");
  return {
    type: QUOTA_EXCEEDED,
    title: QUOTA_EXCEEDED_TITLE,
    status: 429,
    detail:
      retry === undefined
        ? `This request needs more quota than ${names} can ever grant; retrying will not help.`
        : `Quota exceeded for ${names}.${retryText(retry)}`,
    "violated-policies": violated,
    ...(retry === undefined ? {} : { "retry-after": retry }),
  };
}

/** The about:blank 429 of a refusal made because Redis could not be asked (`onError: "deny"`). */
function undecided(retry: number | undefined): ProblemDetails {
  return {
    type: "about:blank",
    title: "Too Many Requests",
    status: 429,
    detail: `The rate limiter could not decide and refuses requests until it can.${retryText(retry)}`,
    ...(retry === undefined ? {} : { "retry-after": retry }),
  };
}

function retryText(retry: number | undefined): string {
  return retry === undefined ? "" : ` Retry after ${retry} ${retry === 1 ? "second" : "seconds"}.`;
}

function problemResponse(body: ProblemDetails, headers: Record<string, string>): Response {
  return new Response(JSON.stringify(body), {
    status: body.status,
    headers: { ...headers, "Content-Type": PROBLEM_JSON },
  });
}

/** Epoch ms of the moment `t` and Retry-After name (never before `now`); Infinity for "never". */
function nextAt(decision: Decision, now: number): number {
  return Math.max(now, decision.allowed ? decision.resetAt : now + decision.retryAfter);
}

/** Whole seconds from `now` to `at`, rounded up; undefined for "never". */
function secondsUntil(at: number, now: number): number | undefined {
  return Number.isFinite(at) ? Math.ceil((at - now) / 1000) : undefined;
}

/** An sf-string (RFC 9651 §3.3.3): printable ASCII, with `"` and `\` escaped. */
function sfString(value: string): string {
  if (!/^[\x20-\x7e]*$/.test(value)) {
    throw new RangeError(`RateLimit: policy name ${JSON.stringify(value)} must be printable ASCII`);
  }
  return `"${value.replace(/[\\"]/g, "\\$&")}"`;
}

/** A non-negative sf-integer (RFC 9651 §3.3.1), clamped to the 15 digits the format allows. */
function sfInteger(value: number): number {
  return Math.min(MAX_SF_INTEGER, Math.max(0, Math.floor(value)));
}
