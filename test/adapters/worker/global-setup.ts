/**
 * Global setup of the "workers" test project, in Node: a stand-in origin on 127.0.0.1 that the Worker
 * under test proxies to. (The bridge and redis-server come from test/global-setup.ts, listed beside it.)
 * Tests read its address with `inject("originUrl")`.
 *
 *   any path          200 JSON echo: { method, url, headers, body }
 *   /status/NNN       status NNN, body "origin says NNN", X-Origin-Status: NNN
 *   /big?bytes=N      N bytes (byte i is i % 251), streamed in 64 KiB chunks
 *   /gate/ID          writes "first;", then waits until /open/ID is requested, then writes "rest" and ends
 *   /open/ID          opens gate ID
 *   /redirect         302 to /elsewhere
 *   /cookies          two Set-Cookie fields
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { TestProject } from "vitest/node";

declare module "vitest" {
  export interface ProvidedContext {
    /** `http://127.0.0.1:PORT` of the stand-in origin. */
    originUrl: string;
  }
}

const gates = new Map<string, () => void>();

async function readBody(request: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

async function handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
  const url = new URL(request.url ?? "/", "http://origin");
  const status = /^\/status\/(\d{3})$/.exec(url.pathname);
  if (status) {
    response.writeHead(Number(status[1]), { "Content-Type": "text/plain", "X-Origin-Status": status[1] });
    response.end(`origin says ${status[1]}`);
    return;
  }
  if (url.pathname === "/big") {
    const total = Number(url.searchParams.get("bytes"));
    response.writeHead(200, { "Content-Type": "application/octet-stream" });
    const chunk = 64 * 1024;
    for (let sent = 0; sent < total; sent += chunk) {
      const size = Math.min(chunk, total - sent);
      const bytes = Buffer.alloc(size);
      for (let i = 0; i < size; i++) bytes[i] = (sent + i) % 251;
      if (!response.write(bytes)) await new Promise((resolve) => response.once("drain", resolve));
    }
    response.end();
    return;
  }
  const gate = /^\/gate\/([\w-]+)$/.exec(url.pathname);
  if (gate) {
    response.writeHead(200, { "Content-Type": "text/plain" });
    response.write("first;");
    await new Promise<void>((resolve) => gates.set(gate[1]!, resolve));
    response.end("rest");
    return;
  }
  const open = /^\/open\/([\w-]+)$/.exec(url.pathname);
  if (open) {
    const release = gates.get(open[1]!);
    gates.delete(open[1]!);
    release?.();
    response.writeHead(release ? 204 : 404);
    response.end();
    return;
  }
  if (url.pathname === "/redirect") {
    response.writeHead(302, { Location: "/elsewhere" });
    response.end("moved");
    return;
  }
  if (url.pathname === "/cookies") {
    response.writeHead(200, { "Set-Cookie": ["a=1; Path=/", "b=2; Path=/"], "Content-Type": "text/plain" });
    response.end("two cookies");
    return;
  }
  const body = await readBody(request);
  response.writeHead(200, { "Content-Type": "application/json", "X-Origin": "echo" });
  response.end(JSON.stringify({ method: request.method, url: request.url, headers: request.headers, body }));
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const server = createServer((request, response) => {
    handle(request, response).catch((error: Error) => {
      response.destroy(error);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  project.provide("originUrl", `http://127.0.0.1:${port}`);
  return async () => {
    for (const release of gates.values()) release();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
}
