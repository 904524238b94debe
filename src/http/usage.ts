// What a request really cost, read from the origin's response: a header the origin sets
// (`x-usage: 370`), or `usage.total_tokens` of an OpenAI-style answer, a JSON body or a Server-Sent
// Events stream. The body passes through unchanged, chunk by chunk, as the client reads it: the reader
// looks at each byte once and keeps only a few small fields of parser state, never the body or a line.
// Only a 2xx JSON or event-stream body is read: an error page or a text echo is where an origin repeats
// what its client sent, and a cost the client wrote must never refund it.

/** How a route learns a request's real cost from its response. */
export type UsageSource =
  | {
      /** A response header holding a whole number ≥ 0, e.g. "x-usage". */
      readonly header: string;
      /** Leave the header in what the client sees (default false: removed). */
      readonly expose?: boolean;
    }
  | {
      /** `usage.total_tokens` of an OpenAI-style JSON body or SSE stream. */
      readonly usage: "openai";
    };

const WHOLE = /^[0-9]+$/;

/**
 * A header's value as a cost: a whole number ≥ 0 (digits only, at most 2^53 - 1), else undefined
 * (missing, empty, negative, fractional, not a number).
 *
 * @example
 * usageFromHeader(response.headers.get("x-usage")); // 370 for "370", undefined for "3.7" or null
 */
export function usageFromHeader(value: string | null): number | undefined {
  if (value === null) return undefined;
  const text = value.trim();
  if (!WHOLE.test(text)) return undefined;
  const n = Number(text);
  return Number.isSafeInteger(n) ? n : undefined;
}

// Bytes the scanner acts on (JSON's structure is ASCII: a byte ≥ 0x80 is always inside a string).
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const COLON = 0x3a;
const COMMA = 0x2c;
const CR = 0x0d;
const LF = 0x0a;
const SPACE = 0x20;
/** Nesting kept track of; a deeper document is not an OpenAI answer and is no longer read. */
const MAX_DEPTH = 64;
/** Longest key remembered; longer keys are none of the two looked for. */
const MAX_KEY = 16;
/** Longest number kept (2^53 has 16 digits). */
const MAX_NUMBER = 20;

/**
 * Finds `usage.total_tokens` (a whole number in the top-level object's `usage` object) in a JSON
 * document fed in pieces of any size. Remembers only the nesting, the keys of the first two levels
 * and the number being read. Tolerant: it does not validate the JSON, it only looks for the value.
 */
class TotalTokens {
  /** The last value found at usage.total_tokens. */
  found: number | undefined;
  // containers open, innermost last: true for an object
  #objects: boolean[] = [];
  // the key whose value is being read at depth 1 and 2 ("" when none or too long)
  #keys = ["", "", ""];
  #expectKey = false;
  #inString = false;
  #escaped = false;
  #stringIsKey = false;
  #key = "";
  #number = "";
  #gaveUp = false;

  /** Reads `bytes[start, end)`. */
  write(bytes: Uint8Array, start = 0, end = bytes.length): void {
    for (let i = start; i < end && !this.#gaveUp; i++) this.#byte(bytes[i]!);
  }

  /** The document ended: a number still being read ends with it. */
  end(): number | undefined {
    this.#endNumber();
    return this.found;
  }

  #byte(b: number): void {
    if (this.#inString) {
      if (this.#escaped) this.#escaped = false;
      else if (b === BACKSLASH) this.#escaped = true;
      else if (b === QUOTE) {
        this.#inString = false;
        const depth = this.#objects.length;
        if (this.#stringIsKey && depth <= 2) this.#keys[depth] = this.#key.length > MAX_KEY ? "" : this.#key;
      } else if (this.#stringIsKey && this.#key.length <= MAX_KEY) {
        this.#key += String.fromCharCode(b);
      }
      return;
    }
    if ((b >= 0x30 && b <= 0x39) || b === 0x2d || b === 0x2b || b === 0x2e || b === 0x45 || b === 0x65) {
      if (this.#atTotalTokens())
        this.#number =
          this.#number.length > MAX_NUMBER ? this.#number : this.#number + String.fromCharCode(b);
      return;
    }
    this.#endNumber();
    switch (b) {
      case QUOTE:
        this.#inString = true;
        this.#stringIsKey = this.#expectKey;
        this.#key = "";
        return;
      case OPEN_OBJECT:
      case OPEN_ARRAY:
        if (this.#objects.length >= MAX_DEPTH) {
          this.#gaveUp = true;
          return;
        }
        this.#objects.push(b === OPEN_OBJECT);
        if (this.#objects.length <= 2) this.#keys[this.#objects.length] = "";
        this.#expectKey = b === OPEN_OBJECT;
        return;
      case CLOSE_OBJECT:
      case CLOSE_ARRAY:
        this.#objects.pop();
        this.#expectKey = false;
        return;
      case COLON:
        this.#expectKey = false;
        return;
      case COMMA:
        this.#expectKey = this.#objects.at(-1) === true;
        return;
    }
  }

  #atTotalTokens(): boolean {
    const objects = this.#objects;
    return (
      objects.length === 2 &&
      objects[0] === true &&
      objects[1] === true &&
      !this.#expectKey &&
      this.#keys[1] === "usage" &&
      this.#keys[2] === "total_tokens"
    );
  }

  #endNumber(): void {
    if (this.#number === "") return;
    const text = this.#number;
    this.#number = "";
    if (!WHOLE.test(text)) return;
    const n = Number(text);
    if (Number.isSafeInteger(n)) this.found = n;
  }
}

/**
 * Finds the last `usage.total_tokens` among the `data:` events of a Server-Sent Events stream fed in
 * pieces of any size (lines end with LF, CR or CRLF; an event's data lines are joined with LF; `[DONE]`
 * and events without usage change nothing). Holds no line: each data byte goes straight to a
 * {@link TotalTokens} of the current event.
 */
class SseTotalTokens {
  found: number | undefined;
  #event = new TotalTokens();
  #eventHasData = false;
  // the field name of the current line, while it is being read; "" once past it
  #field = "";
  #state: "field" | "space" | "data" | "skip" = "field";
  #afterCr = false;

  write(bytes: Uint8Array): void {
    for (let i = 0; i < bytes.length; i++) {
      const b = bytes[i]!;
      if (this.#afterCr) {
        this.#afterCr = false;
        if (b === LF) continue;
      }
      if (b === CR || b === LF) {
        this.#afterCr = b === CR;
        this.#lineEnd();
        continue;
      }
      switch (this.#state) {
        case "field":
          if (b === COLON) {
            this.#state = this.#field === "data" ? "space" : "skip";
            if (this.#state === "space") this.#dataLine();
          } else if (this.#field.length <= 4) this.#field += String.fromCharCode(b);
          else this.#state = "skip";
          break;
        case "space":
          this.#state = "data";
          if (b !== SPACE) this.#event.write(bytes, i, i + 1);
          break;
        case "data": {
          // the rest of the line in one call: up to the next line end in this chunk
          let end = i;
          while (end < bytes.length && bytes[end] !== CR && bytes[end] !== LF) end++;
          this.#event.write(bytes, i, end);
          i = end - 1;
          break;
        }
        case "skip":
          break;
      }
    }
  }

  /** The stream ended: an event not yet ended by a blank line counts too. */
  end(): number | undefined {
    this.#lineEnd();
    this.#dispatch();
    return this.found;
  }

  #dataLine(): void {
    // a second data line of one event continues its data after a line feed
    if (this.#eventHasData) this.#event.write(LF_BYTE);
    this.#eventHasData = true;
  }

  #lineEnd(): void {
    const blank = this.#state === "field" && this.#field === "";
    // "data" alone on a line is a data line with an empty value
    if (this.#state === "field" && this.#field === "data") this.#dataLine();
    this.#state = "field";
    this.#field = "";
    if (blank) this.#dispatch();
  }

  #dispatch(): void {
    if (!this.#eventHasData) return;
    const found = this.#event.end();
    if (found !== undefined) this.found = found;
    this.#event = new TotalTokens();
    this.#eventHasData = false;
  }
}

const LF_BYTE = new Uint8Array([LF]);

/**
 * How a body of this media type carries OpenAI-style usage: "json" (`application/json` or any
 * `+json` type), "sse" (`text/event-stream`), or undefined (anything else, or no Content-Type).
 *
 * @example
 * usageFormat("text/event-stream; charset=utf-8") // "sse"
 */
function usageFormat(contentType: string | null): "json" | "sse" | undefined {
  const type = (contentType ?? "").split(";")[0]!.trim().toLowerCase();
  if (type === "text/event-stream") return "sse";
  if (type === "application/json" || /^[a-z0-9!#$&^_.+-]+\/[a-z0-9!#$&^_.+-]+\+json$/.test(type)) {
    return "json";
  }
  return undefined;
}

/**
 * Why a response cannot state the cost of its request in its body, or undefined when it can: only a
 * 2xx whose Content-Type is JSON or an event stream is read. An error page, a 4xx JSON error or a
 * text/plain or HTML body is where an origin echoes what the client sent, and a client that can write
 * `{"usage":{"total_tokens":0}}` there must not be refunded by it.
 *
 * @example
 * bodyUsageRefusal(404, "application/json") // "the response is 404, not 2xx"
 */
export function bodyUsageRefusal(status: number, contentType: string | null): string | undefined {
  if (status < 200 || status > 299) return `the response is ${status}, not 2xx`;
  if (usageFormat(contentType) === undefined) {
    const type = contentType === null ? "no Content-Type" : JSON.stringify(contentType.slice(0, 60));
    return `the response is ${type}, not JSON or text/event-stream`;
  }
  return undefined;
}

/**
 * A stream that passes a response body through unchanged, chunk for chunk, while it reads the
 * OpenAI-style `usage.total_tokens` from it: from an SSE stream when `contentType` is
 * text/event-stream, from a JSON document when it is `application/json` or any `+json` type; any other body is
 * not read. Where the origin states usage more than once, the last statement counts (the final event
 * of a stream; the last duplicate key, as JSON.parse reads it). `onEnd` is called once, with the
 * tokens found (undefined when none), when the body has ended; never when it failed or the reader
 * cancelled it. Give it only a 2xx response's body: an error body is where an origin echoes its client.
 *
 * @example
 * const body = response.body.pipeThrough(openaiUsage(response.headers.get("content-type"), (tokens) => {
 *   if (tokens !== undefined) void limiter.settle(decision, tokens, { waitUntil });
 * }));
 */
export function openaiUsage(
  contentType: string | null,
  onEnd: (tokens: number | undefined) => void,
): TransformStream<Uint8Array, Uint8Array> {
  const format = usageFormat(contentType);
  const reader = format === "sse" ? new SseTotalTokens() : format === "json" ? new TotalTokens() : undefined;
  return new TransformStream<Uint8Array, Uint8Array>({
    transform(chunk, controller) {
      controller.enqueue(chunk);
      if (reader === undefined) return;
      // a body's chunks are Uint8Arrays; another view is read as its bytes
      const view = chunk as ArrayBufferView;
      reader.write(
        view instanceof Uint8Array ? view : new Uint8Array(view.buffer, view.byteOffset, view.byteLength),
      );
    },
    flush() {
      onEnd(reader?.end());
    },
  });
}

/** Options of {@link usageLog}. */
export interface UsageLogOptions {
  /** Ms between summary lines (default 60_000). */
  interval?: number;
  /** Epoch ms (default `Date.now`). */
  now?: () => number;
}

/** Feed it every response whose cost could not be read; it answers the line to log, when there is one. */
export interface UsageLog {
  /** `what` says which request and what became of its cost, e.g. `GET /v1/chat: no x-usage header; kept the reservation`. */
  record(what: string): string | undefined;
}

/**
 * Costs that could not be read from a response (or settled), told without a line per request (as
 * `failureLog` tells Redis failures): the first in full, then at most one line per interval counting
 * them and naming the last.
 * No timers: lines are written from the responses themselves.
 *
 * @example
 * const usage = usageLog();
 * const line = usage.record('GET /v1/chat: x-usage is "abc", not a whole number; kept the reservation');
 * if (line) console.warn(line);
 */
export function usageLog(options: UsageLogOptions = {}): UsageLog {
  const interval = options.interval ?? 60_000;
  if (typeof interval !== "number" || !(interval > 0) || !Number.isFinite(interval)) {
    throw new Error(`interval: must be a positive number of milliseconds, got ${String(interval)}`);
  }
  const now = options.now ?? (() => Date.now());
  /** When the last line was written (undefined before the first). */
  let since: number | undefined;
  /** Responses counted since that line, and the last of them. */
  let count = 0;
  let last = "";
  return {
    record(what) {
      const t = now();
      if (since === undefined || (count === 0 && t - since >= interval)) {
        // the first, or the first after a quiet interval: told in full
        since = t;
        return `edgelimit: ${what} (further ones: one summary line per ${Math.round(interval / 1000)} s)`;
      }
      count += 1;
      last = what;
      if (t - since < interval) return undefined;
      const line = `edgelimit: ${count} more cost${count === 1 ? "" : "s"} not read or not settled in the last ${Math.round((t - since) / 1000)} s; last: ${last}`;
      count = 0;
      since = t;
      return line;
    },
  };
}
