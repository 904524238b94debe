import fc from "fast-check";
import { describe, expect, it, test } from "vitest";
import { parseIp } from "../../../src/adapters/ip.js";
import {
  clientIp,
  cookie,
  identifierOf,
  identify,
  type KeySpec,
  parseKeySpec,
} from "../../../src/adapters/worker/identity.js";
import { sha256Hex } from "../../../src/engine/sha256.js";
import { normalizePath } from "../../../src/http/routes.js";

// A Worker route's key: its spec, parsed from the config, and the identifier a request (or a value the
// admin API is given) gets under it.

describe("keys", () => {
  test.each([
    ["ip", { kind: "ip" }],
    ["path", { kind: "path" }],
    ["global", { kind: "global" }],
    ["header:X-API-Key", { kind: "header", name: "x-api-key" }],
    ["cookie:Session_ID", { kind: "cookie", name: "Session_ID" }],
  ])("parseKeySpec(%j)", (text, expected) => {
    expect(parseKeySpec(text)).toEqual(expected);
  });

  test.each(["", "IP", "header", "header:", "header:a b", "cookie", "query:x", "ip:64"])(
    "rejects %j",
    (text) => {
      expect(() => parseKeySpec(text)).toThrow();
    },
  );

  test.each([
    "x-forwarded-for",
    "X-Real-IP",
    "forwarded",
    "true-client-ip",
    "CF-Connecting-IP",
    "X-Client-IP",
    "CF-Connecting-IPv6",
    "Fastly-Client-IP",
  ])("refuses header:%s, which clients forge", (name) => {
    expect(() => parseKeySpec(`header:${name}`)).toThrow(
      new Error(
        `"header:${name}": a client can send any ${name} it likes; use "ip", which reads CF-Connecting-IP (set by Cloudflare)`,
      ),
    );
  });

  test("identify: each kind, header and cookie values hashed as UTF-8", () => {
    const request = new Request("https://edge.example/x", {
      headers: { "x-api-key": " key-1 ", cookie: "a=1; sid=s3cr3t" },
    });
    const v4 = parseIp("203.0.113.7");
    const v6 = parseIp("2001:db8:1:2:3:4:5:6");
    expect(identify({ kind: "ip" }, request, v4, "/x")).toBe("203.0.113.7");
    expect(identify({ kind: "ip" }, request, v6, "/x")).toBe("2001:db8:1:2::/64");
    expect(identify({ kind: "ip" }, request, undefined, "/x")).toBeUndefined();
    expect(identify({ kind: "path" }, request, v4, "/x")).toBe("/x");
    expect(identify({ kind: "global" }, request, v4, "/x")).toBe("global");
    expect(identify({ kind: "header", name: "x-api-key" }, request, v4, "/x")).toBe(
      `sha256:${sha256Hex("key-1")}`,
    );
    expect(identify({ kind: "header", name: "x-other" }, request, v4, "/x")).toBeUndefined();
    expect(identify({ kind: "cookie", name: "sid" }, request, v4, "/x")).toBe(
      `sha256:${sha256Hex("s3cr3t")}`,
    );
    expect(identify({ kind: "cookie", name: "nope" }, request, v4, "/x")).toBeUndefined();
    // "é" is two UTF-8 bytes (c3 a9): hashed as those, so it cannot collide with the one byte e9.
    const accented = new Request("https://edge.example/", { headers: { "x-k": "é" } });
    expect(identify({ kind: "header", name: "x-k" }, accented, v4, "/")).toBe(
      `sha256:${sha256Hex("\u00c3\u00a9")}`,
    );
  });

  test.each([
    ["a=1; sid=abc; b=2", "sid", "abc"],
    ["sid=abc", "sid", "abc"],
    ['sid="quoted"', "sid", "quoted"],
    // sent twice: one value, or none (origins read either: a request naming two keys names none)
    ["sid=first; sid=second", "sid", undefined],
    ["sid=same; a=1; sid=same", "sid", "same"],
    ["xsid=1; sidx=2", "sid", undefined],
    ["sid=", "sid", ""],
    ["", "sid", undefined],
  ])("cookie(%j, %j) → %j", (header, name, expected) => {
    expect(cookie(header, name)).toBe(expected);
  });
});

describe("identifierOf: a value as an operator gives it, the identifier a request carrying it gets", () => {
  const header: KeySpec = { kind: "header", name: "x-api-key" };
  const cookieKey: KeySpec = { kind: "cookie", name: "sid" };
  const ip: KeySpec = { kind: "ip" };
  const request = (headers: Record<string, string>, path = "/") =>
    new Request(`https://edge.example${path}`, { headers });
  const fromRequest = (spec: KeySpec, r: Request) =>
    identify(spec, r, clientIp(r.headers), normalizePath(new URL(r.url).pathname));

  it("examples", () => {
    expect(identifierOf(header, "abc")).toBe(
      "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
    );
    expect(identifierOf(header, " abc\t")).toBe(identifierOf(header, "abc"));
    expect(identifierOf(cookieKey, '"abc"')).toBe(identifierOf(header, "abc"));
    expect(identifierOf(ip, "2001:db8:1:2:3:4:5:6")).toBe("2001:db8:1:2::/64");
    expect(identifierOf(ip, "::ffff:192.0.2.1")).toBe("192.0.2.1");
    expect(identifierOf({ kind: "path" }, "/Users/42/")).toBe("/users/42");
    expect(identifierOf({ kind: "global" }, "")).toBe("global");
    for (const bad of ["", "  "]) {
      expect(identifierOf(header, bad)).toBeUndefined();
      expect(identifierOf(cookieKey, bad)).toBeUndefined();
    }
    expect(identifierOf(cookieKey, '""')).toBeUndefined();
    for (const bad of ["abc", "192.0.2.1/24", "1.2.3.4.5", ""]) expect(identifierOf(ip, bad)).toBeUndefined();
    expect(identifierOf({ kind: "path" }, "users")).toBeUndefined();
  });

  it("a credential is counted in one spelling: the scheme's case and the spaces after it do not matter", () => {
    const authorization: KeySpec = { kind: "header", name: "authorization" };
    const one = identifierOf(authorization, "Bearer K1");
    expect(one).toBe(`sha256:${sha256Hex("Bearer K1")}`);
    for (const spelt of ["bearer K1", "BEARER   K1", "Bearer\tK1", " beaRer  K1 "]) {
      expect(identifierOf(authorization, spelt)).toBe(one);
      expect(fromRequest(authorization, request({ Authorization: spelt }))).toBe(one);
    }
    expect(identifierOf(authorization, "Bearer K2")).not.toBe(one);
    expect(identifierOf(authorization, "Basic K1")).not.toBe(one);
    // another header's value stays as sent
    expect(identifierOf(header, "bearer K1")).not.toBe(identifierOf(header, "Bearer K1"));
  });

  it("a header's value: the same identifier as a request carrying it", () => {
    const value = fc.stringMatching(/^[\x21-\x7e][\x20-\x7e]{0,30}$/);
    fc.assert(
      fc.property(value, (v) => {
        expect(fromRequest(header, request({ "X-API-Key": v }))).toBe(identifierOf(header, v));
      }),
    );
  });

  it("a cookie's value, quoted or not: the same identifier as a request carrying it", () => {
    const value = fc.stringMatching(/^[A-Za-z0-9!#$%&'()*+\-./:<=>?@[\]^_`{|}~]{1,30}$/);
    fc.assert(
      fc.property(value, fc.boolean(), (v, quote) => {
        const sent = quote ? `"${v}"` : v;
        const r = request({ Cookie: `a=1; sid=${sent}; b=2` });
        expect(fromRequest(cookieKey, r)).toBe(identifierOf(cookieKey, sent));
        expect(identifierOf(cookieKey, sent)).toBe(identifierOf(cookieKey, v));
      }),
    );
  });

  it("an address: the same identifier as a request from it (IPv6 per /64)", () => {
    const address = fc.oneof(fc.ipV4(), fc.ipV6());
    fc.assert(
      fc.property(address, (a) => {
        expect(fromRequest(ip, request({ "CF-Connecting-IP": a }))).toBe(identifierOf(ip, a));
      }),
    );
  });

  it("a path: the same identifier as a request for it", () => {
    const segment = fc.stringMatching(/^[A-Za-z0-9._~-]{1,8}$/);
    fc.assert(
      fc.property(fc.array(segment, { maxLength: 4 }), fc.boolean(), (segments, slash) => {
        const path = `/${segments.join("/")}${slash ? "/" : ""}`;
        expect(fromRequest({ kind: "path" }, request({}, path))).toBe(identifierOf({ kind: "path" }, path));
      }),
    );
  });
});
