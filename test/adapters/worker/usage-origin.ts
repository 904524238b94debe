/**
 * Global setup of the "workers" test project, in Node: an origin that states what each request cost,
 * for the settle tests (test/adapters/worker/settle.test.ts). Tests read its address with
 * `inject("usageOriginUrl")`.
 *
 *   /header?value=V&status=S
 *                          S (default 200) "served", with X-Usage: V when V is given
 *   /header-echo           200 "served", with X-Usage set to the request's own X-Usage when it has one
 *   /echo?status=S&type=T  S with Content-Type T, the request body as it came (HTML: inside a page)
 *   /sse-echo?tokens=N     an event stream: the request body as a data line first, then the usage event
 *   /json?tokens=N         an OpenAI chat completion, usage in the middle (none without tokens)
 *   /sse?tokens=N&bytes=B&gate=ID
 *                          an OpenAI chat stream: content events (multi-byte text, CRLF line ends) of at
 *                          least B bytes in all, then, once /open/ID was asked for (when gate is given),
 *                          the usage event (when tokens is given) and [DONE]
 *   /open/ID               opens gate ID
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { TestProject } from "vitest/node";

declare module "vitest" {
  export interface ProvidedContext {
    /** `http://127.0.0.1:PORT` of the origin that states costs. */
    usageOriginUrl: string;
  }
}

const gates = new Map<string, () => void>();
const opened = new Set<string>();

function gate(id: string): Promise<void> {
  if (opened.delete(id)) return Promise.resolve();
  return new Promise((resolve) => gates.set(id, resolve));
}

async function write(response: ServerResponse, text: string): Promise<void> {
  if (!response.write(text)) await new Promise((resolve) => response.once("drain", resolve));
}

async function handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
  const url = new URL(request.url ?? "/", "http://origin");
  const tokens = url.searchParams.get("tokens");
  if (url.pathname === "/header-echo") {
    const value = request.headers["x-usage"];
    response.writeHead(200, {
      "Content-Type": "text/plain",
      ...(value === undefined ? {} : { "X-Usage": value }),
    });
    response.end("served");
    return;
  }
  if (url.pathname === "/echo" || url.pathname === "/sse-echo") {
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks).toString("utf8");
    if (url.pathname === "/echo") {
      const type = url.searchParams.get("type") ?? "text/plain";
      response.writeHead(Number(url.searchParams.get("status") ?? 200), { "Content-Type": type });
      response.end(
        type.startsWith("text/html") ? `<html><body><p>You sent: ${body}</p></body></html>` : body,
      );
      return;
    }
    response.writeHead(200, { "Content-Type": "text/event-stream" });
    await write(response, `data: ${body}\n\n`);
    await write(
      response,
      `data: {"id":"c","choices":[{"index":0,"delta":{"content":"hi"}}],"usage":null}\n\n`,
    );
    response.end(`data: {"id":"c","choices":[],"usage":{"total_tokens":${tokens}}}\n\ndata: [DONE]\n\n`);
    return;
  }
  if (url.pathname === "/header") {
    const value = url.searchParams.get("value");
    response.writeHead(Number(url.searchParams.get("status") ?? 200), {
      "Content-Type": "text/plain",
      ...(value === null ? {} : { "X-Usage": value }),
    });
    response.end("served");
    return;
  }
  if (url.pathname === "/json") {
    const usage =
      tokens === null
        ? ""
        : `"usage":{"prompt_tokens":20,"completion_tokens":${Number(tokens) - 20},"total_tokens":${tokens}},`;
    response.writeHead(200, { "Content-Type": "application/json" });
    response.end(
      `{"id":"chatcmpl-1","object":"chat.completion",${usage}"choices":[{"index":0,"message":{"role":"assistant","content":"héllo 世界 😀"}}]}`,
    );
    return;
  }
  if (url.pathname === "/sse") {
    const bytes = Number(url.searchParams.get("bytes") ?? 0);
    const gateId = url.searchParams.get("gate");
    response.writeHead(200, {
      "Content-Type": "text/event-stream; charset=utf-8",
      "Cache-Control": "no-cache",
    });
    let sent = 0;
    for (let i = 0; sent < bytes; i++) {
      const event = `data: {"id":"c","choices":[{"index":0,"delta":{"content":"${i} héllo 世界 😀 "}}],"usage":null}\r\n\r\n`;
      sent += Buffer.byteLength(event);
      await write(response, event);
    }
    if (gateId !== null) await gate(gateId);
    if (tokens !== null) {
      await write(
        response,
        `data: {"id":"c","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":${Number(tokens) - 20},"total_tokens":${tokens}}}\r\n\r\n`,
      );
    }
    response.end("data: [DONE]\r\n\r\n");
    return;
  }
  const open = /^\/open\/([\w-]+)$/.exec(url.pathname);
  if (open) {
    const release = gates.get(open[1]!);
    gates.delete(open[1]!);
    if (release) release();
    else opened.add(open[1]!);
    response.writeHead(204);
    response.end();
    return;
  }
  response.writeHead(404);
  response.end();
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const server = createServer((request, response) => {
    handle(request, response).catch((error: Error) => response.destroy(error));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  project.provide("usageOriginUrl", `http://127.0.0.1:${port}`);
  return async () => {
    for (const release of gates.values()) release();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
}
