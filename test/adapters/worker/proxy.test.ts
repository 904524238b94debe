// Proxy hygiene, in workerd: what the origin receives from the Worker (an origin that echoes every header
// line it got), and what the client receives back. Also how spellings of a limited path are counted.
import { describe, expect, inject, test } from "vitest";
import { call, config, envFor } from "./support.js";

interface Received {
  url: string;
  headers: [string, string][];
}

const open = {
  name: "open",
  match: { path: "/never-matches" },
  key: "global",
  rules: { r: { algorithm: "gcra", limit: 1, period: "1h" } },
};

function proxyEnv(routes: unknown[] = [open]) {
  return envFor(config(routes, { origin: inject("proxyOriginUrl") }));
}

/** Every value of `name` the origin received, in order. */
function valuesOf(received: Received, name: string): string[] {
  return received.headers.filter(([key]) => key === name).map(([, value]) => value);
}

const names = (received: Received) => new Set(received.headers.map(([name]) => name));

interface WorkersSocket {
  accept(): void;
  close(): void;
  addEventListener(type: "message", listener: (event: { data: unknown }) => void): void;
}

describe("what the origin receives", () => {
  test("no hop-by-hop headers: Connection and those it names, Keep-Alive, Proxy-*, TE, Trailer, Upgrade", async () => {
    const response = await call(proxyEnv(), "/anything?q=1", {
      headers: {
        Connection: "X-Hop, Keep-Alive",
        "X-Hop": "private to this hop",
        "Keep-Alive": "timeout=5",
        "Proxy-Authorization": "Basic c2VjcmV0",
        "Proxy-Connection": "keep-alive",
        TE: "trailers",
        Trailer: "X-Checksum",
        Upgrade: "h2c",
        "X-End": "end to end",
        Authorization: "Bearer kept",
      },
    });
    expect(response.status).toBe(200);
    const received = (await response.json()) as Received;
    expect(received.url).toBe("/anything?q=1");
    const got = names(received);
    for (const hop of [
      "x-hop",
      "keep-alive",
      "proxy-authorization",
      "proxy-connection",
      "te",
      "trailer",
      "upgrade",
    ]) {
      expect(got.has(hop), hop).toBe(false);
    }
    // whatever Connection the Worker's own fetch sends, it names none of the client's headers
    for (const value of valuesOf(received, "connection")) expect(value.toLowerCase()).not.toMatch(/x-hop/);
    expect(valuesOf(received, "x-end")).toEqual(["end to end"]);
    expect(valuesOf(received, "authorization")).toEqual(["Bearer kept"]);
  });

  test("X-Forwarded-For is the client IP from CF-Connecting-IP, replacing what the client wrote", async () => {
    const response = await call(proxyEnv(), "/", {
      ip: "203.0.113.7",
      headers: {
        "X-Forwarded-For": "10.0.0.1, 10.0.0.2",
        "X-Real-IP": "10.0.0.3",
        Forwarded: "for=10.0.0.1;proto=http",
      },
    });
    const received = (await response.json()) as Received;
    expect(valuesOf(received, "x-forwarded-for")).toEqual(["203.0.113.7"]);
    expect(valuesOf(received, "x-real-ip")).toEqual(["203.0.113.7"]);
    expect(valuesOf(received, "forwarded")).toEqual([]);
    expect(valuesOf(received, "x-forwarded-proto")).toEqual(["https"]);
    expect(valuesOf(received, "x-forwarded-host")).toEqual(["edge.example"]);
  });

  test("X-Forwarded-Proto and -Host replace what the client wrote; an IPv6 client is written canonically", async () => {
    const response = await call(proxyEnv(), "/", {
      ip: "2001:DB8:0:0:0:0:0:1",
      headers: { "X-Forwarded-Proto": "http", "X-Forwarded-Host": "evil.example" },
    });
    const received = (await response.json()) as Received;
    expect(valuesOf(received, "x-forwarded-for")).toEqual(["2001:db8::1"]);
    expect(valuesOf(received, "x-forwarded-proto")).toEqual(["https"]);
    expect(valuesOf(received, "x-forwarded-host")).toEqual(["edge.example"]);
  });

  test("without CF-Connecting-IP, a client-written X-Forwarded-For or X-Real-IP is dropped, not passed on", async () => {
    const response = await call(proxyEnv(), "/", {
      ip: null,
      headers: { "X-Forwarded-For": "10.0.0.1", "X-Real-IP": "10.0.0.1" },
    });
    const received = (await response.json()) as Received;
    expect(valuesOf(received, "x-forwarded-for")).toEqual([]);
    expect(valuesOf(received, "x-real-ip")).toEqual([]);
  });

  test("every client-IP header the client sent reaches the origin as the real address, or not at all", async () => {
    const forged = {
      "True-Client-IP": "10.0.0.1",
      "X-Client-IP": "10.0.0.2",
      "Client-IP": "10.0.0.3",
      "Fastly-Client-IP": "10.0.0.4",
      "X-Cluster-Client-IP": "10.0.0.5",
      "X-Forwarded": "for=10.0.0.6",
      "Forwarded-For": "10.0.0.7",
      "X-AppEngine-User-IP": "10.0.0.8",
      "CF-Connecting-IPv6": "2001:db8::bad",
      "CF-Pseudo-IPv4": "240.0.0.1",
    };
    const v4 = (await (
      await call(proxyEnv(), "/", { ip: "203.0.113.7", headers: forged })
    ).json()) as Received;
    for (const name of Object.keys(forged).map((name) => name.toLowerCase())) {
      const expected = name === "cf-connecting-ipv6" || name === "cf-pseudo-ipv4" ? [] : ["203.0.113.7"];
      expect(valuesOf(v4, name), name).toEqual(expected);
    }

    const v6 = (await (
      await call(proxyEnv(), "/", { ip: "2001:DB8::7", headers: forged })
    ).json()) as Received;
    expect(valuesOf(v6, "cf-connecting-ipv6")).toEqual(["2001:db8::7"]);
    expect(valuesOf(v6, "true-client-ip")).toEqual(["2001:db8::7"]);
    expect(valuesOf(v6, "cf-pseudo-ipv4")).toEqual([]);

    const none = (await (await call(proxyEnv(), "/", { ip: null, headers: forged })).json()) as Received;
    for (const name of [...Object.keys(forged), "CF-Connecting-IP"]) {
      expect(valuesOf(none, name.toLowerCase()), name).toEqual([]);
    }
  });

  test("a client's Connection cannot strip the fields written for it: client IP, X-Forwarded-*, CF-*", async () => {
    const response = await call(proxyEnv(), "/", {
      ip: "203.0.113.7",
      headers: {
        Connection: "CF-Connecting-IP, X-Forwarded-For, X-Real-IP, True-Client-IP, CF-IPCountry, X-Hop",
        "True-Client-IP": "203.0.113.7",
        "CF-IPCountry": "NZ",
        "X-Hop": "private to this hop",
      },
    });
    const received = (await response.json()) as Received;
    // (CF-Connecting-IP of a subrequest is the runtime's to write, from X-Real-IP: workerd never passes one)
    expect(valuesOf(received, "x-forwarded-for")).toEqual(["203.0.113.7"]);
    expect(valuesOf(received, "x-real-ip")).toEqual(["203.0.113.7"]);
    expect(valuesOf(received, "true-client-ip")).toEqual(["203.0.113.7"]);
    expect(valuesOf(received, "cf-ipcountry")).toEqual(["NZ"]);
    // what it may name still goes
    expect(valuesOf(received, "x-hop")).toEqual([]);
  });

  test("a client's Connection cannot strip a field a decision read: a route's key, Cookie, Authorization, method overrides", async () => {
    const keyed = { ...open, name: "keyed", key: "header:x-api-key" };
    const response = await call(proxyEnv([keyed]), "/?api_key=REAL", {
      headers: {
        Connection: "X-API-Key, Cookie, Authorization, Content-Type, X-HTTP-Method-Override, X-Hop",
        "X-API-Key": "counted",
        Cookie: "sid=1",
        Authorization: "Bearer counted",
        "X-HTTP-Method-Override": "DELETE",
        "X-Hop": "private to this hop",
      },
    });
    const received = (await response.json()) as Received;
    // the origin is sent the key that was counted, not left to fall back to another
    expect(valuesOf(received, "x-api-key")).toEqual(["counted"]);
    expect(valuesOf(received, "cookie")).toEqual(["sid=1"]);
    expect(valuesOf(received, "authorization")).toEqual(["Bearer counted"]);
    expect(valuesOf(received, "x-http-method-override")).toEqual(["DELETE"]);
    expect(valuesOf(received, "x-hop")).toEqual([]);
  });

  test("a WebSocket upgrade is proxied with its Upgrade header, and nothing else hop-by-hop", async () => {
    const response = await call(proxyEnv(), "/socket", {
      headers: {
        Upgrade: "websocket",
        Connection: "Upgrade, X-Hop",
        "X-Hop": "private",
        "Sec-WebSocket-Version": "13",
      },
    });
    expect(response.status).toBe(101);
    // workerd's Response carries the client end of the socket (a Workers type, not a DOM one)
    const socket = (response as Response & { webSocket: WorkersSocket | null }).webSocket!;
    const message = new Promise<string>((resolve) => {
      socket.addEventListener("message", (event) => resolve(String(event.data)));
    });
    socket.accept();
    const received = JSON.parse(await message) as Received;
    expect(valuesOf(received, "upgrade")).toEqual(["websocket"]);
    expect(names(received).has("x-hop")).toBe(false);
    expect(valuesOf(received, "x-forwarded-for")).toEqual(["192.0.2.1"]);
    socket.close();
  });
});

describe("what the client receives", () => {
  test("the origin's hop-by-hop headers stay at the Worker; end-to-end ones pass", async () => {
    const response = await call(proxyEnv(), "/hop");
    expect(response.status).toBe(200);
    const got = new Set([...response.headers.keys()]);
    for (const hop of [
      "x-internal",
      "keep-alive",
      "proxy-authenticate",
      "trailer",
      "upgrade",
      "connection",
    ]) {
      expect(got.has(hop), hop).toBe(false);
    }
    expect(response.headers.get("x-end")).toBe("kept");
    await response.arrayBuffer();
  });
});

describe("spellings of a limited path", () => {
  test("/login;jsessionid=x, /login%2F, /LOGIN/, //login and /%6cogin all count against /login", async () => {
    const env = proxyEnv([
      {
        name: "login",
        match: { path: "/login", methods: ["POST"] },
        key: "ip",
        rules: { r: { algorithm: "gcra", limit: 1, period: "1h" } },
      },
    ]);
    const spellings = [
      "/login;jsessionid=x",
      "/login%2F",
      "/LOGIN/",
      "//login",
      "/%6cogin",
      "/x/..;/login",
      "/login.json",
    ];
    const statuses: number[] = [];
    for (const path of ["/login", ...spellings]) {
      const response = await call(env, path, { method: "POST" });
      await response.arrayBuffer();
      statuses.push(response.status);
    }
    expect(statuses).toEqual([200, ...spellings.map(() => 429)]);
  });

  test("an empty API key header is a missing key: 401, never one shared bucket", async () => {
    const env = proxyEnv([
      { name: "api", key: "header:x-api-key", rules: { r: { algorithm: "gcra", limit: 1, period: "1h" } } },
    ]);
    for (let i = 0; i < 2; i++) {
      const response = await call(env, "/", { headers: { "X-API-Key": "" } });
      await response.arrayBuffer();
      expect(response.status).toBe(401);
    }
  });
});

// A DELETE-only route, 2 an hour per client: every way a client can ask the origin for a DELETE through
// another method counts against it, as the origin will serve it as a DELETE.
describe("method overrides count as the method they ask for", () => {
  /** What the RateLimit header says is left (its reset is real time, not compared). */
  const left = (response: Response) => response.headers.get("ratelimit")?.replace(/;t=\d+$/, "") ?? null;

  const deletes = {
    name: "deletes",
    match: { path: "/items/*", methods: ["DELETE"] },
    key: "ip",
    rules: { r: { algorithm: "gcra", limit: 2, period: "1h" } },
  };

  const form = "_method=delete&name=x";
  const urlencoded = { "Content-Type": "application/x-www-form-urlencoded" };
  test.each<[string, string, Record<string, string>, (string | Uint8Array<ArrayBuffer>)?]>([
    ["X-HTTP-Method-Override", "/items/1", { "X-HTTP-Method-Override": "DELETE" }],
    ["X-HTTP-Method", "/items/1", { "X-HTTP-Method": "delete" }],
    ["X-Method-Override", "/items/1", { "X-Method-Override": "Delete" }],
    ["_method", "/items/1?_method=delete", {}],
    ["_method percent-encoded", "/items/1?a=1&%5Fmethod=DeLeTe", {}],
    ["a comma list", "/items/1", { "X-HTTP-Method-Override": "PATCH, delete" }],
    ["a second of several", "/items/1?_method=PUT&_method=DELETE", {}],
    ["a _method form field", "/items/1", urlencoded, form],
    // (bytes: a string body would be given text/plain)
    ["a _method form field, no Content-Type", "/items/1", {}, new TextEncoder().encode(form)],
    [
      "a _method multipart field",
      "/items/1",
      { "Content-Type": "multipart/form-data; boundary=b" },
      '--b\r\nContent-Disposition: form-data; name="_method"\r\n\r\nDELETE\r\n--b--\r\n',
    ],
    ["a form too long to read (over 64 KiB)", "/items/1", urlencoded, `a=${"x".repeat(70_000)}`],
  ])("%s: 2 admitted, the 3rd refused", async (_, path, headers, body) => {
    const env = proxyEnv([deletes]);
    const got: [number, string | null][] = [];
    for (let i = 0; i < 3; i++) {
      const response = await call(env, path, { method: "POST", headers, body: body ?? null });
      await response.arrayBuffer();
      got.push([response.status, left(response)]);
    }
    expect(got).toEqual([
      [200, '"r";r=1'],
      [200, '"r";r=0'],
      [429, '"r";r=0'],
    ]);
  });

  test("a form read for its _method still reaches the origin whole; one without it is not counted", async () => {
    const env = envFor(config([deletes]));
    const sent = `${form}&${"y".repeat(60_000)}`;
    const echoed = await call(env, "/items/1", { method: "POST", headers: urlencoded, body: sent });
    expect([echoed.status, left(echoed)]).toEqual([200, '"r";r=1']);
    expect(((await echoed.json()) as { body: string }).body).toBe(sent);
    const plain = await call(env, "/items/1", { method: "POST", headers: urlencoded, body: "name=x" });
    expect([plain.status, left(plain)]).toEqual([200, null]);
    await plain.arrayBuffer();
  });

  test("a plain POST, or an override naming another method, is not counted; a real DELETE is", async () => {
    const env = proxyEnv([deletes]);
    for (const headers of [{}, { "X-HTTP-Method-Override": "PATCH" }] as Record<string, string>[]) {
      const response = await call(env, "/items/1", { method: "POST", headers });
      await response.arrayBuffer();
      expect([response.status, left(response)]).toEqual([200, null]);
    }
    const response = await call(env, "/items/1", { method: "DELETE" });
    await response.arrayBuffer();
    expect([response.status, left(response)]).toEqual([200, '"r";r=1']);
  });

  test("a request naming methods of two routes is counted by both", async () => {
    const puts = { ...deletes, name: "puts", match: { path: "/items/*", methods: ["PUT"] } };
    const env = proxyEnv([deletes, puts]);
    const both = await call(env, "/items/1?_method=put", {
      method: "POST",
      headers: { "X-HTTP-Method-Override": "DELETE" },
    });
    await both.arrayBuffer();
    expect(both.status).toBe(200);
    // each route has one of its two left
    for (const method of ["DELETE", "PUT"]) {
      const response = await call(env, "/items/1", { method });
      await response.arrayBuffer();
      expect([method, left(response)]).toEqual([method, '"r";r=0']);
    }
  });
});
