// A route whose rules count by "ip" and "global" beside its key, as a user runs it: `npm start`'s script
// runs the real Worker under `wrangler dev` (local mode, the bundle minified as wrangler.toml asks), Redis
// behind the shared REST bridge. Exact counts per identifier, and each level's denial charging none, read
// back with a peek by a Limiter of the same prefix and rules on the same bridge.
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { parseConfig } from "../../../src/adapters/worker/config.js";
import { fixedWindow, Limiter } from "../../../src/index.js";
import { type StartedWorker, startOnBridge } from "../../started-worker.js";
import { sharedBridge } from "../../support.js";

const dir = mkdtempSync(join(tmpdir(), "edgelimit-nested-wrangler-"));
const bridge = sharedBridge();
const prefix = `nested-wrangler-${crypto.randomUUID().slice(0, 8)}`;

// Fixed windows of a day: nothing comes back with time while the test runs.
const route = {
  name: "chat",
  key: "header:x-api-key",
  timeout: "10s",
  rules: {
    perKey: { algorithm: "fixedWindow", limit: 3, window: "1d" },
    perIp: { algorithm: "fixedWindow", limit: 5, window: "1d", by: "ip" },
    global: { algorithm: "fixedWindow", limit: 7, window: "1d", by: "global" },
  },
};

let start: StartedWorker | undefined;
let base = "";

beforeAll(async () => {
  // a reserved example domain: the script's local echo origin answers
  const config = { origin: "https://api.example.com", prefix, routes: [route] };
  expect(parseConfig(config).ok).toBe(true);
  const file = join(dir, "nested.json");
  writeFileSync(file, JSON.stringify(config));
  ({ start, base } = await startOnBridge(file, bridge.url, inject("bridgeToken")));
}, 120_000);

afterAll(async () => {
  await start?.stop();
  rmSync(dir, { recursive: true, force: true });
}, 60_000);

const peeker = new Limiter({
  redis: sharedBridge(),
  prefix,
  rules: {
    perKey: fixedWindow({ limit: 3, window: "1d" }),
    perIp: fixedWindow({ limit: 5, window: "1d", by: "ip" }),
    global: fixedWindow({ limit: 7, window: "1d", by: "global" }),
  },
  denyCache: false,
});

/** Units left on each rule for API key `key` from `ip` (a peek: nothing charged). */
async function left(key: string, ip: string) {
  const id = `chat:sha256:${createHash("sha256").update(key).digest("hex")}`;
  const decision = await peeker.limit({ id, ip: `chat:${ip}`, global: "chat:global" }, { cost: 0 });
  return Object.fromEntries(Object.entries(decision.rules).map(([rule, { remaining }]) => [rule, remaining]));
}

async function send(key: string | undefined, ip: string) {
  const response = await fetch(`${base}/v1/chat`, {
    headers: { "CF-Connecting-IP": ip, ...(key === undefined ? {} : { "x-api-key": key }) },
  });
  await response.arrayBuffer();
  return { status: response.status, ratelimit: response.headers.get("ratelimit") ?? "" };
}

describe('a route with "by" under wrangler dev', () => {
  it("counts each identifier exactly; a denial at each level charges no identifier", async () => {
    const A = "192.0.2.9";
    const B = "192.0.2.10";
    expect((await send(undefined, A)).status).toBe(401);
    for (let i = 0; i < 3; i++) expect((await send("k1", A)).status).toBe(200);
    const byKey = await send("k1", A);
    expect(byKey.status).toBe(429);
    expect(byKey.ratelimit).toMatch(/^"perKey";r=0;t=\d+$/);
    for (let i = 0; i < 2; i++) expect((await send("k2", A)).status).toBe(200);
    const byIp = await send("k2", A);
    expect(byIp.status).toBe(429);
    expect(byIp.ratelimit).toMatch(/^"perIp";r=0;t=\d+$/);
    for (let i = 0; i < 2; i++) expect((await send("k3", B)).status).toBe(200);
    const byGlobal = await send("k3", B);
    expect(byGlobal.status).toBe(429);
    expect(byGlobal.ratelimit).toMatch(/^"global";r=0;t=\d+$/);
    expect(await left("k1", A)).toEqual({ perKey: 0, perIp: 0, global: 0 });
    expect(await left("k2", A)).toEqual({ perKey: 1, perIp: 0, global: 0 });
    expect(await left("k3", B)).toEqual({ perKey: 1, perIp: 3, global: 0 });
  });
});
