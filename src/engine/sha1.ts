// SHA-1 of an ASCII/latin-1 string, synchronously: the name Redis gives a script (EVALSHA). The
// scripts a Limiter builds when it is made (a plan's table written into its one-rule script with
// overrides on, src/engine/scripts/overrides.ts) are named with it; crypto.subtle.digest is async.
import { padded } from "./sha256.js";

/**
 * Hex SHA-1 of a string whose code units are all below 256 (each one is a byte).
 *
 * @example
 * sha1Hex("abc") // "a9993e364706816aba3e25717850c26c9cd0d89d"
 */
export function sha1Hex(input: string): string {
  const words = padded(input);
  const blocks = words.length / 16;
  const h = new Uint32Array([0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0]);
  const w = new Uint32Array(80);
  for (let block = 0; block < blocks; block++) {
    for (let t = 0; t < 16; t++) w[t] = words[block * 16 + t]!;
    for (let t = 16; t < 80; t++) {
      const x = w[t - 3]! ^ w[t - 8]! ^ w[t - 14]! ^ w[t - 16]!;
      w[t] = (x << 1) | (x >>> 31);
    }
    let a = h[0]!;
    let b = h[1]!;
    let c = h[2]!;
    let d = h[3]!;
    let e = h[4]!;
    for (let t = 0; t < 80; t++) {
      const f =
        t < 20 ? (b & c) | (~b & d) : t < 40 ? b ^ c ^ d : t < 60 ? (b & c) | (b & d) | (c & d) : b ^ c ^ d;
      const k = t < 20 ? 0x5a827999 : t < 40 ? 0x6ed9eba1 : t < 60 ? 0x8f1bbcdc : 0xca62c1d6;
      const temp = (((a << 5) | (a >>> 27)) + f + e + k + w[t]!) | 0;
      e = d;
      d = c;
      c = (b << 30) | (b >>> 2);
      b = a;
      a = temp;
    }
    h[0]! += a;
    h[1]! += b;
    h[2]! += c;
    h[3]! += d;
    h[4]! += e;
  }
  let hex = "";
  for (const word of h) hex += word.toString(16).padStart(8, "0");
  return hex;
}
