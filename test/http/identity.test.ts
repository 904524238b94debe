import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { sha256Hex } from "../../src/engine/sha256.js";
import { hashed, identityOf, wtf8 } from "../../src/http/identity.js";

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

describe("identityOf: who a middleware's key answered, or no one", () => {
  it.each([
    [undefined, undefined],
    ["", undefined],
    ["k1", "k1"],
    [{}, undefined],
    [{ key: "k1", ip: undefined }, undefined],
    [{ key: "k1", ip: "" }, undefined],
    [
      { key: "k1", ip: "203.0.113.7" },
      { key: "k1", ip: "203.0.113.7" },
    ],
  ])("identityOf(%j) → %j", (answer, expected) => {
    expect(identityOf(answer)).toEqual(expected);
  });
});
