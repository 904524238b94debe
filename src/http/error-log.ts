// A failing Redis must not turn into a log line per request: at 1,000 requests/s that is 1,000 lines a
// second saying the same thing. The first failure is told in full; after it, at most one summary line
// per interval (default 60 s), counting the failures by kind, and one line when decisions come from
// Redis again. No timers (a Worker cannot keep one between requests): lines are written from the
// decisions themselves, so the last summary of an outage comes with the first decision after it.
import type { RedisErrorKind } from "../engine/errors.js";
import type { Decision } from "../engine/types.js";

/** Options of {@link failureLog}. */
export interface FailureLogOptions {
  /** Ms between summary lines (default 60_000). */
  interval?: number;
  /** Epoch ms (default `Date.now`). */
  now?: () => number;
}

/** Feed it every decision; it answers the line to log, when there is one. */
export interface FailureLog {
  /**
   * `what` names the request in the first line, e.g. "GET /api/users". Returns a line to write, or
   * undefined when this decision is only counted (or needs no line).
   */
  record(decision: Decision, what: string): string | undefined;
}

/**
 * @example
 * const failures = failureLog({ interval: 60_000 });
 * const line = failures.record(decision, `${request.method} ${path}`);
 * if (line) console.warn(line);
 * // edgelimit: no decision from Redis for GET /api, allowed (onError: allow): [timeout] edgelimit: Redis did not answer within 1000 ms (further failures: one summary line per 60 s)
 * // edgelimit: 1841 decisions failed open in the last 60 s: timeout 5, breaker-open 1836; last: ...
 * // edgelimit: Redis answers again; 212 decisions failed open since the last line: breaker-open 212
 */
export function failureLog(options: FailureLogOptions = {}): FailureLog {
  const interval = options.interval ?? 60_000;
  if (typeof interval !== "number" || !(interval > 0) || !Number.isFinite(interval)) {
    throw new Error(`interval: must be a positive number of milliseconds, got ${String(interval)}`);
  }
  const now = options.now ?? Date.now;
  /** Failures since the last line; `since` is when that line was written. */
  let pending: { open: number; closed: number; kinds: Map<string, number>; last: string } | undefined;
  let since = 0;
  /** Whether the current outage has been told (its first line written and not yet "answers again"). */
  let failing = false;

  /** "600 decisions failed open" / "401 decisions failed (400 open, 1 closed)", and the kinds. */
  const counts = (when: string) => {
    const p = pending!;
    const total = p.open + p.closed;
    const outcome =
      p.closed === 0
        ? "failed open"
        : p.open === 0
          ? "failed closed"
          : `failed (${p.open} open, ${p.closed} closed)`;
    const kinds = [...p.kinds].map(([kind, n]) => `${kind} ${n}`).join(", ");
    return `${total} decision${total === 1 ? "" : "s"} ${outcome} ${when}: ${kinds}`;
  };

  return {
    record(decision, what) {
      const t = now();
      if (decision.source !== "error") {
        if (!failing) return undefined;
        failing = false;
        const tail = pending ? `; ${counts("since the last line")}` : "";
        pending = undefined;
        return `edgelimit: Redis answers again${tail}`;
      }
      const kind = errorKind(decision.error);
      const message = decision.error?.message ?? "unknown error";
      if (!failing) {
        failing = true;
        since = t;
        pending = undefined;
        const outcome = decision.allowed ? "allowed (onError: allow)" : "denied (onError: deny)";
        return `edgelimit: no decision from Redis for ${what}, ${outcome}: [${kind}] ${message} (further failures: one summary line per ${seconds(interval)} s)`;
      }
      pending ??= { open: 0, closed: 0, kinds: new Map(), last: "" };
      if (decision.allowed) pending.open += 1;
      else pending.closed += 1;
      pending.kinds.set(kind, (pending.kinds.get(kind) ?? 0) + 1);
      pending.last = `[${kind}] ${message}`;
      if (t - since < interval) return undefined;
      const line = `edgelimit: ${counts(`in the last ${seconds(t - since)} s`)}; last: ${pending.last}`;
      pending = undefined;
      since = t;
      return line;
    },
  };
}

function errorKind(error: Error | undefined): RedisErrorKind | "error" {
  const kind = (error as { kind?: unknown } | undefined)?.kind;
  return typeof kind === "string" ? (kind as RedisErrorKind) : "error";
}

function seconds(ms: number): string {
  return String(Math.round(ms / 1000));
}
