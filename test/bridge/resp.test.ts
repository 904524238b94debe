import { describe, expect, it, vi } from "vitest";
import { JsonBody } from "../../src/bridge/protocol.js";
import { type Reply, RespParser } from "../../src/bridge/resp.js";

/** The wire form of LRANGE's reply over `count` elements `item-0`, `item-1`, … */
function arrayReply(count: number): Buffer {
  const parts = [`*${count}\r\n`];
  for (let i = 0; i < count; i++) {
    const item = `item-${i}`;
    parts.push(`$${item.length}\r\n${item}\r\n`);
  }
  return Buffer.from(parts.join(""), "latin1");
}

/** Feeds `wire` in chunks of `size` bytes and counts the bytes Buffer.concat copies meanwhile. */
function parseCounting(wire: Buffer, size: number): { replies: Reply[]; copied: number; joins: number } {
  const replies: Reply[] = [];
  const parser = new RespParser((reply) => replies.push(reply));
  const concat = Buffer.concat;
  let copied = 0;
  let joins = 0;
  const spy = vi.spyOn(Buffer, "concat").mockImplementation((list, length) => {
    const out = concat(list, length);
    copied += out.length;
    joins++;
    return out;
  });
  try {
    for (let i = 0; i < wire.length; i += size) parser.feed(wire.subarray(i, i + size));
  } finally {
    spy.mockRestore();
  }
  return { replies, copied, joins };
}

describe("RESP reader: work linear in the reply's size", () => {
  it("reads a 400,000-element array arriving in 64 KB chunks in one pass, joining only split elements", () => {
    const count = 400_000;
    const wire = arrayReply(count);
    const chunks = Math.ceil(wire.length / 65_536);
    const { replies, copied, joins } = parseCounting(wire, 65_536);
    expect(replies).toHaveLength(1);
    const items = replies[0] as Buffer[];
    expect(items).toHaveLength(count);
    expect(String(items[0])).toBe("item-0");
    expect(String(items[count - 1])).toBe(`item-${count - 1}`);
    // At most one element straddles each chunk boundary, and only its bytes are joined (each element
    // here is under 20 bytes on the wire). A reader that joins and re-parses the buffer on every chunk
    // copies the whole reply again per chunk: about chunks²/2 × 64 KB.
    expect(joins).toBeLessThanOrEqual(chunks);
    expect(copied).toBeLessThanOrEqual(chunks * 20);
  });

  it("joins a 10 MB bulk string once, whatever the chunk size", () => {
    const value = Buffer.alloc(10 * 1024 * 1024, 0x61);
    const wire = Buffer.concat([Buffer.from(`$${value.length}\r\n`), value, Buffer.from("\r\n:7\r\n")]);
    for (const size of [1024, 16_384, 65_536]) {
      const { replies, copied, joins } = parseCounting(wire, size);
      expect(replies).toHaveLength(2);
      expect((replies[0] as Buffer).equals(value)).toBe(true);
      expect(replies[1]).toBe(7);
      expect({ joins, copied }).toEqual({ joins: 1, copied: value.length + 2 });
    }
  });

  it("keeps values split anywhere: nested arrays, bulk strings holding CRLF, big integers", () => {
    const wire = Buffer.from("*2\r\n*3\r\n:1\r\n$4\r\na\r\nb\r\n+OK\r\n:-12345678901234567890\r\n$-1\r\n");
    for (let size = 1; size <= wire.length; size++) {
      const replies: Reply[] = [];
      const parser = new RespParser((r) => replies.push(r));
      for (let i = 0; i < wire.length; i += size) parser.feed(wire.subarray(i, i + size));
      expect(replies).toEqual([[[1, Buffer.from("a\r\nb"), "OK"], -12345678901234567890n], null]);
    }
  });

  it("refuses a malformed stream instead of guessing", () => {
    const parser = new RespParser(() => {});
    expect(() => parser.feed(Buffer.from("?what\r\n"))).toThrow("RESP protocol error: unexpected byte 0x3f");
    expect(() => new RespParser(() => {}).feed(Buffer.from(":12x\r\n"))).toThrow(/bad integer/);
  });
});

describe("JSON writer", () => {
  it("copies printable ASCII as it is and escapes everything else exactly as JSON.stringify does", () => {
    const values = ["plain", 'quote " and \\ backslash', "tab\tnewline\n", "é😀", "\u0000", "~\u007f"];
    const reply: Reply = [...values.map((v) => Buffer.from(v, "utf8")), Buffer.from([0xff, 0x41]), 5, null];
    const body = new JsonBody();
    body.result(reply, false);
    const expected = JSON.stringify({ result: [...values, "\ufffdA", 5, null] });
    expect(body.toBuffer().toString("utf8")).toBe(expected);
  });

  it("base64-encodes every length like Buffer.toString does, short values in place and long ones natively", () => {
    const values = Array.from({ length: 300 }, (_, n) =>
      Buffer.from(Array.from({ length: n }, (_, i) => (i * 37 + n) & 255)),
    );
    const body = new JsonBody();
    body.result(values, true);
    expect(JSON.parse(body.toBuffer().toString("latin1"))).toEqual({
      result: values.map((v) => v.toString("base64")),
    });
  });
});
