import { describe, expect, test } from "vitest";
import { bodyUsageRefusal, openaiUsage, usageFromHeader, usageLog } from "../../src/http/usage.js";

const utf8 = (text: string) => new TextEncoder().encode(text);

/**
 * Pipes `bytes`, cut at `cuts` (sorted byte offsets), through openaiUsage for `contentType`: the tokens
 * its onEnd reported, once the body passed through unchanged.
 */
async function readIn(contentType: string, bytes: Uint8Array, cuts: number[]): Promise<number | undefined> {
  let tokens: number | undefined;
  const usage = openaiUsage(contentType, (found) => {
    tokens = found;
  });
  const passed = new Response(usage.readable).arrayBuffer();
  const writer = usage.writable.getWriter();
  let from = 0;
  for (const cut of [...cuts, bytes.length]) {
    void writer.write(bytes.subarray(from, cut));
    from = cut;
  }
  await writer.close();
  expect(new Uint8Array(await passed)).toEqual(bytes);
  return tokens;
}

/** Every way of reading `text` this test tries: whole, a byte at a time, and cut in two at every offset. */
async function everyCut(contentType: string, text: string) {
  const bytes = utf8(text);
  const found = new Set<number | undefined>();
  found.add(await readIn(contentType, bytes, []));
  found.add(
    await readIn(
      contentType,
      bytes,
      Array.from({ length: bytes.length - 1 }, (_, i) => i + 1),
    ),
  );
  for (let cut = 1; cut < bytes.length; cut++) found.add(await readIn(contentType, bytes, [cut]));
  return [...found];
}

describe("usageFromHeader", () => {
  test.each([
    ["370", 370],
    ["0", 0],
    [" 42 ", 42],
    ["007", 7],
    ["9007199254740991", 9007199254740991],
  ])("%j is %d", (value, expected) => {
    expect(usageFromHeader(value)).toBe(expected);
  });

  test.each([null, "", "-1", "3.7", "1e3", "abc", "12abc", "0x10", "+5", "9007199254740992", "1 2"])(
    "%j is no cost",
    (value) => {
      expect(usageFromHeader(value)).toBeUndefined();
    },
  );
});

describe("openaiUsage: usage.total_tokens of a JSON body", () => {
  const json = "application/json";

  test("a chat completion with usage in the middle, multi-byte text around it, cut anywhere", async () => {
    const body = JSON.stringify(
      {
        id: "chatcmpl-1",
        object: "chat.completion",
        choices: [{ index: 0, message: { role: "assistant", content: 'héllo → 世界 😀 "usage"' } }],
        usage: {
          prompt_tokens: 120,
          completion_tokens: 250,
          total_tokens: 370,
          details: { total_tokens: 9 },
        },
        system_fingerprint: "fp_ü",
      },
      null,
      2,
    ).replace(/\n/g, "\r\n");
    expect(await everyCut(json, body)).toEqual([370]);
  });

  test("only the top-level usage object counts", async () => {
    expect(
      await everyCut(json, '{"choices":[{"usage":{"total_tokens":5}}],"x":{"usage":{"total_tokens":6}}}'),
    ).toEqual([undefined]);
    expect(await everyCut(json, '[{"usage":{"total_tokens":5}}]')).toEqual([undefined]);
    expect(await everyCut(json, '{"usage":[{"total_tokens":5}]}')).toEqual([undefined]);
    // a string that looks like the field is only a string
    expect(
      await everyCut(json, '{"note":"{\\"usage\\":{\\"total_tokens\\":5}}","usage":{"total_tokens":7}}'),
    ).toEqual([7]);
  });

  test("no usage, null usage, or a total that is not a whole number: none found", async () => {
    expect(await everyCut(json, '{"id":"x","choices":[]}')).toEqual([undefined]);
    expect(await everyCut(json, '{"usage":null}')).toEqual([undefined]);
    expect(await everyCut(json, '{"usage":{"total_tokens":-3}}')).toEqual([undefined]);
    expect(await everyCut(json, '{"usage":{"total_tokens":3.5}}')).toEqual([undefined]);
    expect(await everyCut(json, '{"usage":{"total_tokens":"12"}}')).toEqual([undefined]);
    expect(await everyCut(json, "not json at all")).toEqual([undefined]);
  });

  test("a number at the very end of the input ends with it", async () => {
    expect(await everyCut(json, '{"usage":{"total_tokens":12')).toEqual([12]);
  });
});

/** An OpenAI chat stream: content deltas, then the usage event, then [DONE], with line ends `eol`. */
function chatStream(eol: string, usage: string | undefined) {
  const events = [
    { id: "c", choices: [{ delta: { content: "héllo " } }], usage: null },
    { id: "c", choices: [{ delta: { content: "世界 😀" } }], usage: null },
    { id: "c", choices: [{ delta: {}, finish_reason: "stop" }], usage: null },
  ].map((event) => `data: ${JSON.stringify(event)}${eol}${eol}`);
  if (usage) events.push(`data: {"id":"c","choices":[],"usage":${usage}}${eol}${eol}`);
  return `: keep-alive${eol}${eol}event: message${eol}${events.join("")}data: [DONE]${eol}${eol}`;
}

describe("openaiUsage: the usage event of a Server-Sent Events stream", () => {
  const sse = "text/event-stream";
  const usage = '{"prompt_tokens":9,"completion_tokens":361,"total_tokens":370}';

  test.each([
    ["LF", "\n"],
    ["CRLF", "\r\n"],
    ["CR", "\r"],
  ])("lines ending in %s, cut anywhere", async (_, eol) => {
    expect(await everyCut(sse, chatStream(eol, usage))).toEqual([370]);
  });

  test("a stream without a usage event: none found", async () => {
    expect(await everyCut(sse, chatStream("\n", undefined))).toEqual([undefined]);
  });

  test("data split over lines is one event; data without a space; the last event with usage wins", async () => {
    const text =
      'data: {"usage":\ndata: {"total_tokens":5}}\n\n' +
      'data:{"usage":{"total_tokens":6}}\n\n' +
      'id: 7\ndata: {"usage":null}\n\n' +
      "data: [DONE]\n\n";
    expect(await everyCut(sse, text)).toEqual([6]);
  });

  test("one event's data never runs into the next's", async () => {
    expect(await everyCut(sse, 'data: {"usage":{"total_tokens":1\n\ndata: 2}}\n\n')).toEqual([1]);
  });

  test("a last event without the closing blank line still counts", async () => {
    expect(await everyCut(sse, 'data: {"usage":{"total_tokens":44}}')).toEqual([44]);
  });

  test("other fields named like data are not data", async () => {
    expect(await everyCut(sse, 'database: {"usage":{"total_tokens":5}}\n\n')).toEqual([undefined]);
  });
});

/** A body of `chunks`, read through `openaiUsage`; what the reader got, and what onEnd was told. */
function through(contentType: string, chunks: Uint8Array[]) {
  const calls: (number | undefined)[] = [];
  const source = new ReadableStream<Uint8Array>({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(chunk);
      controller.close();
    },
  });
  return { body: source.pipeThrough(openaiUsage(contentType, (tokens) => calls.push(tokens))), calls };
}

describe("openaiUsage: the body passes through as it is", () => {
  test("every chunk unchanged and in order; onEnd once, after the last", async () => {
    const bytes = utf8(chatStream("\r\n", '{"total_tokens":370}'));
    const chunks = Array.from({ length: bytes.length }, (_, i) => bytes.subarray(i, i + 1));
    const { body, calls } = through("text/event-stream; charset=utf-8", chunks);
    const reader = body.getReader();
    const got: Uint8Array[] = [];
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (got.length === chunks.length - 1) expect(calls).toEqual([]);
      got.push(value);
    }
    expect(got).toEqual(chunks);
    expect(got.every((chunk, i) => chunk === chunks[i])).toBe(true);
    expect(calls).toEqual([370]);
  });

  test("a JSON body when the content type is not an event stream", async () => {
    const { body, calls } = through("application/json", [utf8('{"usage":{"total_'), utf8('tokens":81}}')]);
    expect(await new Response(body).text()).toBe('{"usage":{"total_tokens":81}}');
    expect(calls).toEqual([81]);
  });

  test.each(["text/plain", "text/html; charset=utf-8", "application/x-ndjson", ""])(
    "a %j body passes through unread: onEnd is told undefined",
    async (contentType) => {
      const { body, calls } = through(contentType, [utf8('{"usage":{"total_tokens":0}}')]);
      expect(await new Response(body).text()).toBe('{"usage":{"total_tokens":0}}');
      expect(calls).toEqual([undefined]);
    },
  );

  test("the last usage a stream states counts, not an earlier one", async () => {
    const early = 'data: {"usage":{"total_tokens":0}}\n\n';
    const { body, calls } = through("text/event-stream", [
      utf8(early + chatStream("\n", '{"total_tokens":370}')),
    ]);
    await new Response(body).arrayBuffer();
    expect(calls).toEqual([370]);
  });

  test("a reader that cancels mid-body: onEnd is never called", async () => {
    const bytes = utf8(chatStream("\n", '{"total_tokens":370}'));
    const { body, calls } = through("text/event-stream", [bytes.subarray(0, 10), bytes.subarray(10)]);
    const reader = body.getReader();
    expect((await reader.read()).value).toEqual(bytes.subarray(0, 10));
    await reader.cancel("client went away");
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(calls).toEqual([]);
  });
});

describe("usageLog", () => {
  test("the first in full, then one summary per interval, then in full after a quiet interval", () => {
    let now = 1_000_000;
    const log = usageLog({ interval: 60_000, now: () => now });
    expect(log.record("GET /a: no x-usage header")).toBe(
      "edgelimit: GET /a: no x-usage header (further ones: one summary line per 60 s)",
    );
    now += 1_000;
    expect(log.record("GET /b: x-usage is not a whole number")).toBeUndefined();
    now += 1_000;
    expect(log.record("GET /c: no x-usage header")).toBeUndefined();
    now += 58_000;
    expect(log.record("GET /d: no x-usage header")).toBe(
      "edgelimit: 3 more costs not read or not settled in the last 60 s; last: GET /d: no x-usage header",
    );
    now += 61_000;
    expect(log.record("GET /e: no x-usage header")).toBe(
      "edgelimit: GET /e: no x-usage header (further ones: one summary line per 60 s)",
    );
  });

  test("a bad interval names the field", () => {
    expect(() => usageLog({ interval: 0 })).toThrow(
      "interval: must be a positive number of milliseconds, got 0",
    );
  });
});

describe("which responses may state a cost in their body", () => {
  test.each([
    ["application/json", "json"],
    ["Application/JSON; charset=utf-8", "json"],
    ["application/vnd.api+json", "json"],
    ["text/event-stream", "sse"],
    [" text/event-stream ; charset=utf-8", "sse"],
    ["text/plain", undefined],
    ["text/html", undefined],
    ["application/jsonp", undefined],
    ["application/x-ndjson", undefined],
    ["", undefined],
  ])("openaiUsage reads a %j body as %j", async (contentType, format) => {
    // a bare JSON body is read only as JSON, an event stream's only as SSE (the JSON reader, tolerant,
    // would also find its usage: it is not asked)
    const asJson = await readIn(contentType, utf8('{"usage":{"total_tokens":3}}'), []);
    const asSse = await readIn(contentType, utf8('data: {"usage":{"total_tokens":4}}\n\n'), []);
    if (format === "json") expect(asJson).toBe(3);
    else if (format === "sse") expect([asJson, asSse]).toEqual([undefined, 4]);
    else expect([asJson, asSse]).toEqual([undefined, undefined]);
  });

  test.each([
    [200, "application/json", undefined],
    [201, "text/event-stream", undefined],
    [299, "application/problem+json", undefined],
    [400, "application/json", "the response is 400, not 2xx"],
    [500, "text/event-stream", "the response is 500, not 2xx"],
    [304, "application/json", "the response is 304, not 2xx"],
    [200, "text/plain", 'the response is "text/plain", not JSON or text/event-stream'],
    [200, null, "the response is no Content-Type, not JSON or text/event-stream"],
  ])("bodyUsageRefusal(%d, %j) is %j", (status, contentType, expected) => {
    expect(bodyUsageRefusal(status, contentType)).toBe(expected);
  });
});
