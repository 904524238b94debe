import { Redis } from "@upstash/redis";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { checkIdentifier, keyTag } from "../../src/engine/keys.js";
import { sha1Hex } from "../../src/engine/sha1.js";
import { sha256Hex } from "../../src/engine/sha256.js";
import { fixedWindow, gcra, Limiter, slidingLog, slidingWindow, tokenBucket } from "../../src/index.js";
import { bridgeRedis } from "../support.js";

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

describe("sha1Hex", () => {
  it("matches the FIPS 180-1 test vectors, and Redis's name of a script", async () => {
    expect(sha1Hex("abc")).toBe("a9993e364706816aba3e25717850c26c9cd0d89d");
    expect(sha1Hex("")).toBe("da39a3ee5e6b4b0d3255bfef95601890afd80709");
    expect(sha1Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")).toBe(
      "84983e441c3bd26ebaae4aa1f95129e5e54670f1",
    );
    // every length around a block's end (55, 56, 63, 64 bytes)
    for (const length of [55, 56, 63, 64, 1000]) {
      const text = `return "${"x".repeat(length - 9)}"`;
      expect(await bridgeRedis().scriptLoad(text)).toBe(sha1Hex(text));
    }
  });
});

// Redis Cluster's key → slot function (CRC16/XMODEM of the hash tag, mod 16384), as the cluster spec
// defines it, so the test checks what a cluster would do rather than how keyTag is written.
function crc16(bytes: Uint8Array): number {
  let crc = 0;
  for (const byte of bytes) {
    crc ^= byte << 8;
    for (let bit = 0; bit < 8; bit++)
      crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc;
}
function clusterSlot(key: string): number {
  const open = key.indexOf("{");
  const close = open === -1 ? -1 : key.indexOf("}", open + 1);
  const hashed = close > open + 1 ? key.slice(open + 1, close) : key;
  return crc16(new TextEncoder().encode(hashed)) % 16384;
}

describe("cluster slots", () => {
  it("computes slots as the cluster spec's reference values do", () => {
    expect(crc16(new TextEncoder().encode("123456789"))).toBe(0x31c3);
    expect(clusterSlot("{user1000}.following")).toBe(clusterSlot("{user1000}.followers"));
  });

  it("puts every key of one call in one slot, whatever the identifier and rules", () => {
    const limiter = new Limiter({
      redis: new Redis({ url: "http://127.0.0.1:1", token: "unused" }),
      prefix: "app:v1",
      rules: {
        a: gcra({ limit: 1, period: "1s" }),
        "b.c": tokenBucket({ capacity: 1, refillRate: 1 }),
        d_e: fixedWindow({ limit: 1, window: "1m" }),
        f: slidingWindow({ limit: 1, window: "1m" }),
        g: slidingLog({ limit: 1, window: "1m" }),
      },
    });
    fc.assert(
      fc.property(identifier, (id) => {
        const slots = new Set(limiter.keys(id).map(clusterSlot));
        expect(slots.size).toBe(1);
      }),
      { numRuns: 5_000 },
    );
  });
});

describe("identifiers", () => {
  // Never reaches Redis: the call throws before anything is sent.
  const limiter = new Limiter({
    redis: new Redis({ url: "http://127.0.0.1:9", token: "unused", enableTelemetry: false }),
    rules: { perMinute: gcra({ limit: 5, period: "1m" }) },
  });

  it("refuses an empty identifier at the call, naming it, for limit() and reset()", async () => {
    expect(() => limiter.limit("")).toThrow(RangeError);
    expect(() => limiter.limit("")).toThrow(/^identifier: must not be empty/);
    await expect(limiter.reset("")).rejects.toThrow(/^identifier: must not be empty/);
  });

  it("refuses an identifier that is not a string with a TypeError naming it", () => {
    expect(() => limiter.limit(undefined as unknown as string)).toThrow(TypeError);
    expect(() => limiter.limit(42 as unknown as string)).toThrow(/^identifier: expected a string, got 42/);
  });

  it("accepts any non-empty string, whitespace included", () => {
    expect(() => checkIdentifier(" ")).not.toThrow();
    expect(checkIdentifier("\ud800")).toBe("\ud800");
  });
});
