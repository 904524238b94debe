import { createServer } from "node:http";
import type { AddressInfo } from "node:net";

/**
 * An HTTP hop in front of the REST bridge that forwards every request, and drops the connection after
 * the bridge has answered the next request whose body contains `cutNext` (a string): the command ran in
 * Redis, its answer is lost. `cuts` counts the answers dropped. `delay` holds every answer that many ms
 * after the bridge gave it (a slow Redis); `requests` counts the requests forwarded. `holdNext` holds
 * back the next request whose body contains it (not yet sent to Redis) until `release()`; `held`
 * resolves once one is held; `seen` lists the commands forwarded, in the order they reached Redis
 * (their first string: "EVALSHA", "DEL", ...).
 */
export async function startCutHop(target: string) {
  let release!: () => void;
  let sawHeld!: () => void;
  const gate = new Promise<void>((resolve) => {
    release = resolve;
  });
  const hop = {
    url: "",
    cutNext: undefined as string | undefined,
    cuts: 0,
    delay: 0,
    requests: 0,
    holdNext: undefined as string | undefined,
    held: new Promise<void>((resolve) => {
      sawHeld = resolve;
    }),
    release: () => release(),
    seen: [] as string[],
    close: async () => {},
  };
  const server = createServer(async (request, response) => {
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks).toString("utf8");
    hop.requests += 1;
    if (hop.holdNext !== undefined && body.includes(hop.holdNext)) {
      hop.holdNext = undefined;
      sawHeld();
      await gate;
    }
    try {
      const commands = JSON.parse(body) as unknown[];
      for (const command of Array.isArray(commands[0]) ? commands : [commands])
        hop.seen.push(String((command as unknown[])[0]));
    } catch {
      // not a command's body: nothing to list
    }
    const answer = await fetch(`${target}${request.url}`, {
      method: request.method,
      headers: { authorization: String(request.headers.authorization) },
      body,
    });
    const text = await answer.text();
    if (hop.delay > 0) await new Promise((resolve) => setTimeout(resolve, hop.delay));
    if (hop.cutNext !== undefined && body.includes(hop.cutNext)) {
      hop.cutNext = undefined;
      hop.cuts += 1;
      request.socket.destroy();
      return;
    }
    response.writeHead(answer.status, { "content-type": "application/json" });
    response.end(text);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  hop.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  hop.close = async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  };
  return hop;
}
