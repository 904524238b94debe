// Helpers for the Worker tests: an env per test (its own key prefix, so tests share one Redis without
// sharing counters), and a way to call the Worker the way the runtime does.
import { inject } from "vitest";
import worker, { type Env } from "../../../src/adapters/worker/index.js";

let counter = 0;

/** A config around `routes`, pointed at the stand-in origin, with a key prefix no other test uses. */
export function config(routes: unknown[], extra: Record<string, unknown> = {}): Record<string, unknown> {
  counter += 1;
  return {
    origin: inject("originUrl"),
    prefix: `tw-${counter}-${crypto.randomUUID().slice(0, 8)}`,
    routes,
    ...extra,
  };
}

/** The Worker's env for `document` (an object is sent as JSON text, as a wrangler var would be). */
export function envFor(document: unknown, overrides: Partial<Env> = {}): Env {
  return {
    EDGELIMIT_CONFIG: typeof document === "string" ? document : JSON.stringify(document),
    UPSTASH_REDIS_REST_URL: inject("bridgeUrl"),
    UPSTASH_REDIS_REST_TOKEN: inject("bridgeToken"),
    ...overrides,
  };
}

export interface CallOptions extends RequestInit {
  /** CF-Connecting-IP of the request (default 192.0.2.1); null sends none. */
  ip?: string | null;
}

/**
 * Sends one request through the Worker (https://edge.example + `path`) and waits for its background
 * work, as the runtime would before the isolate moves on.
 */
export async function call(env: Env, path: string, options: CallOptions = {}): Promise<Response> {
  const { ip = "192.0.2.1", ...init } = options;
  const headers = new Headers(init.headers);
  if (ip !== null) headers.set("CF-Connecting-IP", ip);
  const request = new Request(`https://edge.example${path}`, { ...init, headers });
  const pending: Promise<unknown>[] = [];
  const ctx = {
    waitUntil: (promise: Promise<unknown>) => void pending.push(promise),
    passThroughOnException: () => {},
    props: {},
  };
  const response = await worker.fetch(request, env, ctx);
  await Promise.all(pending);
  return response;
}

/** The rate-limit fields of a response, for exact comparison. */
export function limitHeaders(response: Response): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of response.headers) {
    if (/^(ratelimit|ratelimit-policy|retry-after|x-ratelimit-.*|edgelimit-shadow)$/i.test(name)) {
      out[name] = value;
    }
  }
  return out;
}

/** The echo the stand-in origin answers with. */
export interface Echo {
  method: string;
  url: string;
  headers: Record<string, string>;
  body: string;
}
