// The admin API inside workerd, against the test bridge's real Redis: off without the secret, bearer
// auth, hostile input refused with nothing stored, and a value turned into the identifier exactly as a
// request's is (hashed header and cookie values, IPv6 per /64), so an override reaches that client.
import { describe, expect, test, vi } from "vitest";
import { type CallOptions, call, config, envFor, limitHeaders } from "./support.js";

const TOKEN = "test-admin-token-0123456789";
const auth = { Authorization: `Bearer ${TOKEN}` };
// SHA-256 of "abc": what an API key "abc" is counted under (identity.ts hashes header values).
const ABC = "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

const perHour = { perHour: { algorithm: "gcra", limit: 2, period: "1h" } };
const plans = { pro: { perHour: { limit: 10 } } };

/** The overrides of route "api", listed with `authorization` from the address `ip`. */
const listAs = (env: ReturnType<typeof adminEnv>, authorization: string, ip: string) =>
  call(env, "/_edgelimit/overrides/api", { headers: { Authorization: authorization }, ip });

function route(key: string, extra: Record<string, unknown> = {}) {
  return { name: "api", match: { path: "/api/*" }, key, rules: perHour, plans, overrides: true, ...extra };
}

/** The env of `routes` with the admin token (null: the secret not set). */
function adminEnv(routes: unknown[], extra: Record<string, unknown> = {}, token: string | null = TOKEN) {
  return envFor(config(routes, extra), token === null ? {} : { EDGELIMIT_ADMIN_TOKEN: token });
}

/** One admin request: JSON body, the right token unless headers say otherwise. */
function admin(
  env: ReturnType<typeof envFor>,
  method: string,
  path: string,
  body?: unknown,
  options: CallOptions = {},
) {
  return call(env, path, {
    method,
    ...(body === undefined ? {} : { body: typeof body === "string" ? body : JSON.stringify(body) }),
    ...options,
    headers: {
      ...auth,
      ...(body === undefined ? {} : { "Content-Type": "application/json" }),
      ...options.headers,
    },
  });
}

/** The problem body of a refusal, after checking it is one (problem+json, no-store). */
async function problemOf(response: Response, status: number) {
  expect(response.status).toBe(status);
  expect(response.headers.get("content-type")).toBe("application/problem+json");
  expect(response.headers.get("cache-control")).toBe("no-store");
  const body = (await response.json()) as { status: number; detail: string };
  expect(body.status).toBe(status);
  return body.detail;
}

async function listed(env: ReturnType<typeof envFor>, name = "api") {
  const response = await admin(env, "GET", `/_edgelimit/overrides/${name}`);
  expect(response.status).toBe(200);
  return (await response.json()) as {
    items: { identifier: string; override: unknown }[];
    next: string | null;
  };
}

async function policy(env: ReturnType<typeof envFor>, options: CallOptions) {
  const response = await call(env, "/api/x", options);
  await response.arrayBuffer();
  expect(response.status).toBe(200);
  return limitHeaders(response)["ratelimit-policy"];
}

describe("on only with the secret, and only to its bearer", () => {
  test("without EDGELIMIT_ADMIN_TOKEN (or with it empty) the whole path is a 404, never the origin's", async () => {
    for (const token of [null, ""]) {
      const env = adminEnv([route("header:x-api-key")], {}, token);
      for (const path of ["/_edgelimit", "/_edgelimit/overrides/api?key=abc", "/_EdgeLimit/x"]) {
        const detail = await problemOf(await admin(env, "GET", path), 404);
        expect(detail).toBe("path: nothing is served here");
      }
    }
  });

  test("a missing, wrong or non-bearer token is a 401 with WWW-Authenticate; the right one is served", async () => {
    const env = adminEnv([route("header:x-api-key")]);
    const wrong: Record<string, string>[] = [
      {},
      { Authorization: "" },
      { Authorization: `Bearer ${TOKEN}x` },
      { Authorization: `Bearer ${TOKEN.slice(0, -1)}` },
      { Authorization: `Basic ${btoa(`admin:${TOKEN}`)}` },
      { Authorization: TOKEN },
    ];
    for (const headers of wrong) {
      const response = await call(env, "/_edgelimit/overrides/api", { headers });
      expect(response.headers.get("www-authenticate")).toBe('Bearer realm="edgelimit"');
      expect(await problemOf(response, 401)).toBe(
        'authorization: send "Authorization: Bearer <EDGELIMIT_ADMIN_TOKEN>"',
      );
    }
    for (const value of [`Bearer ${TOKEN}`, `bearer ${TOKEN}`, `BEARER  ${TOKEN} `]) {
      const response = await call(env, "/_edgelimit/overrides/api", { headers: { Authorization: value } });
      expect(response.status).toBe(200);
      expect(response.headers.get("cache-control")).toBe("no-store");
      expect(await response.json()).toEqual({ items: [], next: null });
    }
  });

  test("wrong bearer tokens sent at once are each counted: at most 5 are compared; right ones use up no tries", async () => {
    const env = adminEnv([route("header:x-api-key")]);
    const list = async (authorization: string, ip: string) => {
      const response = await listAs(env, authorization, ip);
      await response.arrayBuffer();
      return response.status;
    };
    // right tokens first: none counts as a try
    for (let i = 0; i < 8; i++) expect(await list(`Bearer ${TOKEN}`, "192.0.2.90")).toBe(200);
    const statuses = await Promise.all(
      Array.from({ length: 8 }, (_, i) => list(`Bearer wrong-${i}`, "192.0.2.90")),
    );
    expect(statuses.filter((s) => s === 401)).toHaveLength(5);
    expect(statuses.filter((s) => s === 429)).toHaveLength(3);
    expect(await list(`Bearer ${TOKEN}`, "192.0.2.90")).toBe(429);
  });

  test("wrong bearer tokens from one address: 429 with Retry-After after 5 in a minute; other addresses unaffected", async () => {
    const env = adminEnv([route("header:x-api-key")]);
    const list = (authorization: string, ip: string) => listAs(env, authorization, ip);
    const statuses: number[] = [];
    for (let i = 0; i < 5; i++) {
      const response = await list(`Bearer wrong-${i}`, "192.0.2.77");
      statuses.push(response.status);
      await response.arrayBuffer();
    }
    expect(statuses).toEqual([401, 401, 401, 401, 401]);
    for (const authorization of [`Bearer wrong-5`, `Bearer ${TOKEN}`]) {
      const response = await list(authorization, "192.0.2.77");
      const seconds = Number(response.headers.get("retry-after"));
      expect(seconds).toBeGreaterThanOrEqual(50);
      expect(seconds).toBeLessThanOrEqual(60);
      expect(await problemOf(response, 429)).toBe(
        `authorization: too many wrong tokens from this address; try again in ${seconds} s`,
      );
    }
    // a PUT from the throttled address stores nothing
    const put = await call(env, "/_edgelimit/overrides/api?key=abc", {
      method: "PUT",
      body: JSON.stringify({ plan: "pro" }),
      headers: auth,
      ip: "192.0.2.77",
    });
    expect(put.status).toBe(429);
    await put.arrayBuffer();
    // the same /64 of IPv6 is one address; another address is served
    const v6 = "2001:db8:77::1";
    for (let i = 0; i < 5; i++) await (await list(`Bearer wrong-${i}`, v6)).arrayBuffer();
    const sameNet = await list(`Bearer ${TOKEN}`, "2001:db8:77::ffff");
    expect(sameNet.status).toBe(429);
    await sameNet.arrayBuffer();
    const served = await list(`Bearer ${TOKEN}`, "192.0.2.78");
    expect(served.status).toBe(200);
    expect(await served.json()).toEqual({ items: [], next: null });
    expect(await problemOf(await admin(env, "GET", "/_edgelimit/overrides/api?key=abc"), 404)).toBe(
      "key: no override",
    );
  });

  test("the throttle works under the longest prefix (64 characters): a 401, then the right token served", async () => {
    const prefix = `${"p".repeat(56)}${crypto.randomUUID().slice(0, 8)}`;
    const env = adminEnv([route("header:x-api-key")], { prefix });
    const wrong = await call(env, "/_edgelimit/overrides/api", { headers: { Authorization: "Bearer x" } });
    expect(await problemOf(wrong, 401)).toBe(
      'authorization: send "Authorization: Bearer <EDGELIMIT_ADMIN_TOKEN>"',
    );
    expect(await listed(env)).toEqual({ items: [], next: null });
  });

  test("admin requests are never forwarded and never counted, even by a route matching every path", async () => {
    const env = adminEnv([
      { name: "all", key: "ip", rules: { perHour: { algorithm: "gcra", limit: 1, period: "1h" } } },
    ]);
    for (let i = 0; i < 3; i++) {
      const response = await call(env, "/_edgelimit/overrides/all", { headers: auth });
      expect(limitHeaders(response)).toEqual({});
      expect(await problemOf(response, 409)).toBe(
        'route: "all" takes no overrides; add "overrides": true to it',
      );
    }
    const first = await call(env, "/anything");
    expect(first.status).toBe(200);
    expect(limitHeaders(first).ratelimit).toBe('"perHour";r=0;t=3600');
  });

  test("adminPath moves the API; the old path is then an ordinary request", async () => {
    const env = adminEnv([route("header:x-api-key")], { adminPath: "/ops/limits" });
    const put = await admin(env, "PUT", "/ops/limits/overrides/api?key=abc", { plan: "pro" });
    expect(put.status).toBe(200);
    const old = await call(env, "/_edgelimit/overrides/api", { headers: auth });
    expect(old.status).toBe(200);
    expect(((await old.json()) as { url: string }).url).toBe("/_edgelimit/overrides/api"); // the origin's echo
  });

  test("the API is found however its path is spelt, as routes are; the route name as sent", async () => {
    const env = adminEnv([route("header:x-api-key")]);
    for (const path of [
      "/_EdgeLimit/overrides/api",
      "//_edgelimit//overrides/%61pi/",
      "/_edgelimit/overrides/api/",
    ]) {
      const response = await admin(env, "GET", path);
      expect(response.status, path).toBe(200);
      expect(await response.json()).toEqual({ items: [], next: null });
    }
    expect(await problemOf(await admin(env, "GET", "/_edgelimit/overrides/API"), 404)).toBe(
      'route: no route is named "API"; the routes are api',
    );
    expect(await problemOf(await admin(env, "GET", "/_edgelimit/overrides/a%2Fb"), 404)).toBe(
      'route: no route is named "a/b"; the routes are api',
    );
    expect(await problemOf(await admin(env, "GET", "/_edgelimit/overrides/"), 404)).toBe(
      "route: required, as in /_edgelimit/overrides/<route>",
    );
    expect(await problemOf(await admin(env, "GET", "/_edgelimit/overrides/api/x"), 404)).toBe(
      "path: not found; use /_edgelimit/overrides/<route>?key=<value>",
    );
  });

  test("an admin token that is no bearer token (RFC 6750) serves nothing, and says why", async () => {
    const env = adminEnv([route("header:x-api-key")], {}, "not a bearer token!");
    const errors = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      for (const path of ["/_edgelimit/", "/_edgelimit/overrides/api"]) {
        expect(await problemOf(await admin(env, "GET", path), 503)).toBe(
          "EDGELIMIT_ADMIN_TOKEN: not a bearer token; set one of A-Z a-z 0-9 - . _ ~ + /",
        );
      }
      expect(errors).toHaveBeenCalled();
    } finally {
      errors.mockRestore();
    }
  });
});

describe("PUT, GET, DELETE and the list", () => {
  test("a key's override is stored under the identifier its requests are counted by, and removed", async () => {
    const env = adminEnv([route("header:x-api-key")]);
    const put = await admin(env, "PUT", "/_edgelimit/overrides/api?key=abc", { plan: "pro" });
    expect(put.status).toBe(200);
    expect(put.headers.get("content-type")).toBe("application/json");
    expect(put.headers.get("cache-control")).toBe("no-store");
    expect(await put.json()).toEqual({ plan: "pro" });

    const get = await admin(env, "GET", "/_edgelimit/overrides/api?key=%20abc%20"); // trimmed, as a header is
    expect(get.status).toBe(200);
    expect(await get.json()).toEqual({ plan: "pro" });
    expect(await listed(env)).toEqual({
      items: [{ identifier: `api:${ABC}`, override: { plan: "pro" } }],
      next: null,
    });

    const expiresAt = Date.now() + 3_600_000;
    const custom = { rules: { perHour: { limit: 5 } }, expiresAt };
    expect(await (await admin(env, "PUT", "/_edgelimit/overrides/api?key=def", custom)).json()).toEqual(
      custom,
    );
    expect((await listed(env)).items.map((item) => item.override)).toEqual(
      expect.arrayContaining([{ plan: "pro" }, custom]),
    );

    const deleted = await admin(env, "DELETE", "/_edgelimit/overrides/api?key=abc");
    expect(deleted.status).toBe(204);
    expect(await deleted.text()).toBe("");
    expect(await problemOf(await admin(env, "GET", "/_edgelimit/overrides/api?key=abc"), 404)).toBe(
      "key: no override",
    );
    expect((await listed(env)).items).toEqual([
      { identifier: expect.stringMatching(/^api:sha256:/), override: custom },
    ]);
  });

  test("the list pages with after and limit, within the route only", async () => {
    const env = adminEnv([
      route("header:x-api-key"),
      route("header:x-api-key", { name: "other", match: { path: "/o" } }),
    ]);
    for (const key of ["k1", "k2", "k3"]) {
      expect((await admin(env, "PUT", `/_edgelimit/overrides/api?key=${key}`, { plan: "pro" })).status).toBe(
        200,
      );
    }
    await admin(env, "PUT", "/_edgelimit/overrides/other?key=k1", { plan: "pro" });
    const first = (await (await admin(env, "GET", "/_edgelimit/overrides/api?limit=2")).json()) as Awaited<
      ReturnType<typeof listed>
    >;
    expect(first.items).toHaveLength(2);
    expect(first.next).toBe(first.items[1]!.identifier);
    const rest = (await (
      await admin(env, "GET", `/_edgelimit/overrides/api?limit=2&after=${encodeURIComponent(first.next!)}`)
    ).json()) as Awaited<ReturnType<typeof listed>>;
    expect(rest).toEqual({ items: [expect.objectContaining({ override: { plan: "pro" } })], next: null });
    const all = [...first.items, ...rest.items].map((item) => item.identifier);
    expect(new Set(all).size).toBe(3);
    expect(all.every((id) => id.startsWith("api:sha256:"))).toBe(true);
    expect((await listed(env, "other")).items).toHaveLength(1);
  });
});

describe("hostile input: a 4xx problem naming the field, and nothing stored", () => {
  const base = "/_edgelimit/overrides/api?key=abc";

  test("each refusal, then an empty list", async () => {
    const env = adminEnv([
      route("header:x-api-key"),
      { name: "plain", match: { path: "/p" }, key: "ip", rules: perHour },
    ]);
    const cases: [string, string, unknown, number, string][] = [
      ["PUT", base, "x".repeat(4097), 413, "body: must be at most 4096 bytes"],
      ["PUT", base, `{"plan":"pro"${" ".repeat(5000)}}`, 413, "body: must be at most 4096 bytes"],
      ["PUT", base, "{plan: pro}", 400, 'body: not valid JSON; send an object such as { "plan": "pro" }'],
      ["PUT", base, "", 400, 'body: not valid JSON; send an object such as { "plan": "pro" }'],
      ["PUT", base, [{ plan: "pro" }], 400, 'body: must be a JSON object such as { "plan": "pro" }'],
      ["PUT", base, { plan: "gold" }, 400, 'plan: unknown plan "gold"; the plans are pro'],
      [
        "PUT",
        base,
        { plan: "pro", color: "red" },
        400,
        "color: not an override field; it takes plan, rules, expiresAt",
      ],
      ["PUT", base, {}, 400, 'plan: give plan, rules or both, e.g. { plan: "pro" }'],
      // a rule named as an Object property is no rule of the route's
      [
        "PUT",
        base,
        { rules: { toString: { limit: 5 } } },
        400,
        "rules.toString: not a rule; the rules are perHour",
      ],
      [
        "PUT",
        base,
        { rules: { hasOwnProperty: {} } },
        400,
        "rules.hasOwnProperty: not a rule; the rules are perHour",
      ],
      ["PUT", base, { plan: "pro", expiresAt: 1 }, 400, "expiresAt: must be a whole epoch ms after now"],
      ["PUT", "/_edgelimit/overrides/api", { plan: "pro" }, 400, "key: required"],
      [
        "PUT",
        "/_edgelimit/overrides/api?key=%20",
        { plan: "pro" },
        400,
        "key: must be the value of header x-api-key, not empty",
      ],
      [
        "GET",
        "/_edgelimit/overrides/nope?key=abc",
        undefined,
        404,
        'route: no route is named "nope"; the routes are api, plain',
      ],
      [
        "PUT",
        "/_edgelimit/overrides/plain?key=192.0.2.1",
        { plan: "pro" },
        409,
        'route: "plain" takes no overrides',
      ],
      ["GET", "/_edgelimit/overrides", undefined, 404, "route: required"],
      ["GET", "/_edgelimit/other", undefined, 404, "path: not found"],
      ["POST", base, { plan: "pro" }, 405, 'method: "POST" is not served here; use GET, PUT or DELETE'],
      [
        "GET",
        "/_edgelimit/overrides/api?limit=0",
        undefined,
        400,
        'limit: must be a whole number from 1 to 1000, got "0"',
      ],
      [
        "GET",
        "/_edgelimit/overrides/api?limit=x",
        undefined,
        400,
        'limit: must be a whole number from 1 to 1000, got "x"',
      ],
    ];
    for (const [method, path, body, status, detail] of cases) {
      const response = await admin(env, method, path, body);
      expect(await problemOf(response, status), `${method} ${path}`).toContain(detail);
      if (status === 405) expect(response.headers.get("allow")).toBe("GET, PUT, DELETE");
    }
    const rules: [unknown, string][] = [
      [{ nope: { limit: 5 } }, "rules.nope: not a rule; the rules are perHour"],
      [{ perHour: { limit: 0 } }, "rules.perHour.limit: must be a positive whole number, got 0"],
      [{ perHour: { limit: 5, colour: 1 } }, "rules.perHour.colour: not an option of gcra"],
    ];
    for (const [value, detail] of rules) {
      expect(await problemOf(await admin(env, "PUT", base, { rules: value }), 400)).toContain(detail);
    }
    expect(await listed(env)).toEqual({ items: [], next: null });
  });

  test("__proto__, constructor and prototype anywhere in a body: a 400 naming the path, nothing stored", async () => {
    const env = adminEnv([route("header:x-api-key")]);
    const refused = "refused: __proto__, constructor and prototype are never field names";
    // raw JSON text: JSON.parse makes "__proto__" an own key (an object literal here would not)
    const cases: [string, string][] = [
      ['{"rules":{"perHour":{"__proto__":{"burst":50}}}}', `rules.perHour.__proto__: ${refused}`],
      ['{"rules":{"perHour":{"limit":3,"__proto__":{"limit":50}}}}', `rules.perHour.__proto__: ${refused}`],
      ['{"__proto__":{"plan":"pro"},"rules":{"perHour":{"limit":3}}}', `__proto__: ${refused}`],
      ['{"plan":"pro","rules":{"constructor":{"prototype":{}}}}', `rules.constructor: ${refused}`],
      ['{"plan":"pro","rules":{"perHour":{"prototype":1}}}', `rules.perHour.prototype: ${refused}`],
    ];
    for (const [body, detail] of cases) {
      expect(await problemOf(await admin(env, "PUT", base, body), 400)).toBe(detail);
    }
    expect(await problemOf(await admin(env, "GET", base), 404)).toBe("key: no override");
    expect(await listed(env)).toEqual({ items: [], next: null });
    // and the key's requests keep the base quota
    expect(await policy(env, { headers: { "X-API-Key": "abc" } })).toBe('"perHour";q=2;w=3600');
  });

  test("a body streamed past 4096 bytes without Content-Length is cut off there: 413", async () => {
    const env = adminEnv([route("header:x-api-key")]);
    let pulled = 0;
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        pulled += 1;
        if (pulled > 100) controller.close();
        else controller.enqueue(new TextEncoder().encode(pulled === 1 ? '{"plan":"pro"' : " ".repeat(1000)));
      },
    });
    const response = await call(env, base, {
      method: "PUT",
      body,
      headers: auth,
      duplex: "half",
    } as CallOptions);
    expect(await problemOf(response, 413)).toBe("body: must be at most 4096 bytes");
    expect(pulled).toBeLessThan(10);
    expect(await listed(env)).toEqual({ items: [], next: null });
  });

  test("strings from the request come back escaped, as JSON", async () => {
    const env = adminEnv([route("header:x-api-key")]);
    const name = '</script><b>"\\\n';
    const response = await admin(env, "GET", `/_edgelimit/overrides/${encodeURIComponent(name)}?key=abc`);
    const text = await response.clone().text();
    expect(text).not.toContain("\n");
    expect(await problemOf(response, 404)).toBe(
      `route: no route is named ${JSON.stringify(name)}; the routes are api`,
    );
  });
});

describe("the value becomes the identifier a request is counted by", () => {
  test("header: an override of key=abc gives requests with that header the plan's quota, in the headers", async () => {
    const env = adminEnv([route("header:x-api-key")]);
    expect(await policy(env, { headers: { "X-API-Key": "abc" } })).toBe('"perHour";q=2;w=3600');
    expect((await admin(env, "PUT", "/_edgelimit/overrides/api?key=abc", { plan: "pro" })).status).toBe(200);
    expect(await policy(env, { headers: { "X-API-Key": "abc" } })).toBe('"perHour";q=10;w=3600');
    expect(await policy(env, { headers: { "X-API-Key": "abcd" } })).toBe('"perHour";q=2;w=3600');
  });

  test("custom values: the quota that applied, in RateLimit-Policy and RateLimit", async () => {
    const env = adminEnv([route("header:x-api-key")]);
    await admin(env, "PUT", "/_edgelimit/overrides/api?key=def", { rules: { perHour: { limit: 5 } } });
    const response = await call(env, "/api/x", { headers: { "X-API-Key": "def" } });
    expect(limitHeaders(response)).toEqual({
      "ratelimit-policy": '"perHour";q=5;w=3600',
      ratelimit: '"perHour";r=4;t=720',
    });
  });

  test("cookie: the cookie's value, quoted or not", async () => {
    const env = adminEnv([route("cookie:sid")]);
    await admin(env, "PUT", "/_edgelimit/overrides/api?key=s3ss", { plan: "pro" });
    expect(await policy(env, { headers: { Cookie: 'a=1; sid="s3ss"' } })).toBe('"perHour";q=10;w=3600');
    expect(await policy(env, { headers: { Cookie: "sid=other" } })).toBe('"perHour";q=2;w=3600');
  });

  test("ip: an IPv6 address stands for its /64; a value that is no address is a 400", async () => {
    const env = adminEnv([route("ip")]);
    expect(
      (await admin(env, "PUT", "/_edgelimit/overrides/api?key=2001:db8:1:2::1", { plan: "pro" })).status,
    ).toBe(200);
    expect(await policy(env, { ip: "2001:db8:1:2:ffff::9" })).toBe('"perHour";q=10;w=3600');
    expect(await policy(env, { ip: "2001:db8:1:3::1" })).toBe('"perHour";q=2;w=3600');
    const get = await admin(env, "GET", "/_edgelimit/overrides/api?key=2001:DB8:1:2:abcd::");
    expect(await get.json()).toEqual({ plan: "pro" });
    expect((await listed(env)).items.map((item) => item.identifier)).toEqual(["api:2001:db8:1:2::/64"]);
    await admin(env, "PUT", "/_edgelimit/overrides/api?key=%3A%3Affff%3A198.51.100.7", { plan: "pro" });
    expect(await policy(env, { ip: "198.51.100.7" })).toBe('"perHour";q=10;w=3600');
    for (const bad of ["abc", "2001:db8::/64", "1.2.3.4.5", ""]) {
      expect(
        await problemOf(
          await admin(env, "PUT", `/_edgelimit/overrides/api?key=${encodeURIComponent(bad)}`, {
            plan: "pro",
          }),
          400,
        ),
      ).toBe(`key: not an IP address, got ${JSON.stringify(bad)}`);
    }
  });

  test("a failing Redis is a 503 naming redis, never a 200", async () => {
    const env = {
      ...adminEnv([route("header:x-api-key", { timeout: "200ms" })]),
      UPSTASH_REDIS_REST_URL: "http://127.0.0.1:9",
    };
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    expect(
      await problemOf(await admin(env, "PUT", "/_edgelimit/overrides/api?key=abc", { plan: "pro" }), 503),
    ).toBe("redis: the override store failed (unreachable); try again");
    error.mockRestore();
  });
});
