import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { keyTag } from "../src/keys.js";
import { sha256Hex } from "../src/sha256.js";

// Any JS string: arbitrary UTF-16 code units (lone surrogates, NUL, "{", "}", "%") and lengths past
// the point where the tag switches to a hash.
const identifier = fc.oneof(
  fc.string({ unit: "binary", maxLength: 40 }),
  fc.string({
    unit: fc.constantFrom("a", "{", "}", "%", "=", "#", ":", "\u0000", "0", "\uD800"),
    maxLength: 200,
  }),
  fc.string({ unit: "grapheme", minLength: 20, maxLength: 300 }),
);

describe("keyTag", () => {
  it("never gives two distinct identifiers the same tag", () => {
    fc.assert(
      fc.property(identifier, identifier, (a, b) => {
        fc.pre(a !== b);
        expect(keyTag(a)).not.toBe(keyTag(b));
      }),
      { numRuns: 20_000 },
    );
  });

  it("is one hash tag: non-empty, braces only at its ends, and short", () => {
    fc.assert(
      fc.property(identifier, (id) => {
        const tag = keyTag(id);
        expect(tag.startsWith("{=") || tag.startsWith("{#")).toBe(true);
        expect(tag.endsWith("}")).toBe(true);
        expect(tag.slice(1, -1)).not.toMatch(/[{}]/);
        expect(tag.length).toBeLessThanOrEqual(131);
        expect(/^[\x21-\x7e]*$/.test(tag)).toBe(true);
      }),
      { numRuns: 5_000 },
    );
  });

  it("keeps ordinary identifiers readable, and hashes long ones", () => {
    expect(keyTag("user:42")).toBe("{=user:42}");
    expect(keyTag("203.0.113.7")).toBe("{=203.0.113.7}");
    expect(keyTag("")).toBe("{=}");
    expect(keyTag("a b{c}%")).toBe("{=a%0020b%007bc%007d%0025}");
    expect(keyTag("\u{1F600}")).toBe("{=%d83d%de00}");
    expect(keyTag("x".repeat(129))).toBe(`{#${sha256Hex("x".repeat(129))}}`);
  });
});

describe("sha256Hex", () => {
  it("matches the FIPS 180-2 test vectors", () => {
    expect(sha256Hex("abc")).toBe("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    expect(sha256Hex("")).toBe("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    expect(sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")).toBe(
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
    );
  });
});
