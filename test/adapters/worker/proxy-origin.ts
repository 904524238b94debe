/**
 * Global setup of the "workers" test project, in Node: an origin that tells what reached it, for the
 * proxy tests (test/adapters/worker/proxy.test.ts). Tests read its address with
 * `inject("proxyOriginUrl")`.
 *
 *   any path   200 JSON: { url, headers: the request's header lines as received (name lowercased) }
 *   /hop       the same, sent with hop-by-hop response headers (Connection naming X-Internal,
 *              Keep-Alive, Proxy-Authenticate, Trailer, Upgrade) beside an end-to-end X-End
 *   upgrade    a WebSocket handshake (101), then one text message: the same JSON, then a close
 */
import { createHash } from "node:crypto";
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import type { TestProject } from "vitest/node";

declare module "vitest" {
  export interface ProvidedContext {
    /** `http://127.0.0.1:PORT` of the origin that echoes what reached it. */
    proxyOriginUrl: string;
  }
}

/** What the origin received: the URL and every header line, lowercased names, in order. */
function received(request: IncomingMessage): string {
  const headers: [string, string][] = [];
  for (let i = 0; i < request.rawHeaders.length; i += 2) {
    headers.push([request.rawHeaders[i]!.toLowerCase(), request.rawHeaders[i + 1]!]);
  }
  return JSON.stringify({ url: request.url, headers });
}

/** A single unmasked text frame, then a close frame (RFC 6455 §5.2), as a server sends them. */
function frames(text: string): Buffer {
  const payload = Buffer.from(text, "utf8");
  const length =
    payload.length < 126
      ? Buffer.from([payload.length])
      : Buffer.from([126, payload.length >> 8, payload.length & 0xff]);
  return Buffer.concat([Buffer.from([0x81]), length, payload, Buffer.from([0x88, 0x02, 0x03, 0xe8])]);
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const sockets = new Set<Socket>();
  const server = createServer((request, response) => {
    request.resume();
    request.on("end", () => {
      const body = received(request);
      if (new URL(request.url ?? "/", "http://origin").pathname === "/hop") {
        response.writeHead(200, {
          "Content-Type": "application/json",
          Connection: "X-Internal, keep-alive",
          "X-Internal": "secret",
          "Keep-Alive": "timeout=5",
          "Proxy-Authenticate": 'Basic realm="origin"',
          Trailer: "X-Checksum",
          Upgrade: "h2c",
          "X-End": "kept",
        });
      } else {
        response.writeHead(200, { "Content-Type": "application/json" });
      }
      response.end(body);
    });
  });
  server.on("upgrade", (request: IncomingMessage, socket: Socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => {});
    const key = request.headers["sec-websocket-key"] ?? "";
    const accept = createHash("sha1").update(`${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest("base64");
    socket.write(
      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
        `Sec-WebSocket-Accept: ${accept}\r\n\r\n`,
    );
    socket.write(frames(received(request)));
    socket.end();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  project.provide("proxyOriginUrl", `http://127.0.0.1:${port}`);
  return async () => {
    for (const socket of sockets) socket.destroy();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
}
