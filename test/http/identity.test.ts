import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { sha256Hex } from "../../src/engine/sha256.js";
import { clientIp, hashed, identifierOf, identify, type KeySpec, wtf8 } from "../../src/http/identity.js";
import { normalizePath } from "../../src/http/routes.js";

// Strings of arbitrary UTF-16 code units, with surrogates (paired, lone, reversed) drawn often.
const codeUnit = fc.oneof(
  fc.integer({ min: 0, max: 0x7f }),
  fc.integer({ min: 0x80, max: 0xffff }),
  fc.integer({ min: 0xd800, max: 0xdfff }),
  fc.constantFrom(0xd800, 0xdbff, 0xdc00, 0xdfff, 0xfffd),
);
const utf16 = fc.array(codeUnit, { maxLength: 12 }).map((units) => String.fromCharCode(...units));

/** Decodes WTF-8 back to UTF-16 code units: proves the encoding loses nothing. */
function decode(bytes: string): string {
  let out = "";
  for (let i = 0; i < bytes.length; ) {
    const b = bytes.charCodeAt(i);
    const cont = (k: number) => bytes.charCodeAt(i + k) & 0x3f;
    let code: number;
    if (b < 0x80) [code, i] = [b, i + 1];
    else if (b < 0xe0) [code, i] = [((b & 0x1f) << 6) | cont(1), i + 2];
    else if (b < 0xf0) [code, i] = [((b & 0x0f) << 12) | (cont(1) << 6) | cont(2), i + 3];
    else [code, i] = [((b & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3), i + 4];
    out += String.fromCodePoint(code);
  }
  return out;
}

describe("hashed", () => {
  it("keeps lone surrogates apart from each other and from U+FFFD", () => {
    const values = [
      "\ud800",
      "\udfff",
      "\ufffd",
      "\udbff",
      "\udc00",
      "\udc00\ud800",
      "\ud800\udc00",
      "a\ud800",
    ];
    expect(new Set(values.map(hashed)).size).toBe(values.length);
  });

  it("hashes a well-formed string as the SHA-256 of its UTF-8, as before", () => {
    expect(hashed("abc")).toBe("sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    fc.assert(
      fc.property(fc.string({ unit: "grapheme", maxLength: 12 }), (value) => {
        const utf8 = String.fromCharCode(...new TextEncoder().encode(value));
        expect(hashed(value)).toBe(`sha256:${sha256Hex(utf8)}`);
      }),
    );
  });

  it("encodes every string of code units one-to-one (decoding gives it back)", () => {
    fc.assert(
      fc.property(utf16, (value) => {
        expect(decode(wtf8(value))).toBe(value);
      }),
      { numRuns: 2000 },
    );
  });

  it("never gives two distinct strings the same hash", () => {
    fc.assert(
      fc.property(utf16, utf16, (a, b) => {
        fc.pre(a !== b);
        expect(hashed(a)).not.toBe(hashed(b));
      }),
      { numRuns: 2000 },
    );
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
