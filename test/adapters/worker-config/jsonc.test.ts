// The JSONC reader `npm start` and `npm run check-config` share.
import { describe, expect, it } from "vitest";
import { stripJsonc } from "../../../src/adapters/worker/jsonc.js";

describe("stripJsonc", () => {
  it("drops comments and trailing commas, also with a comment between the comma and the bracket", () => {
    const text = `{
      // a line comment
      "a": [1, 2, /* two */ ], /* block
      over lines */ "b": { "c": "d", // after the comma
      },
    }`;
    expect(JSON.parse(stripJsonc(text))).toEqual({ a: [1, 2], b: { c: "d" } });
  });

  it("keeps strings verbatim: comment marks, commas before brackets, escaped quotes", () => {
    const value = { url: "http://x//y", glob: "/*a*/", tail: ",]", quote: 'say "hi", }' };
    expect(JSON.parse(stripJsonc(JSON.stringify(value)))).toEqual(value);
  });

  it("keeps line breaks, so JSON.parse points at the line of a mistake", () => {
    const text = '{\n  /* one\n  two */\n  "a": 1,\n  "b": nope\n}';
    const stripped = stripJsonc(text);
    expect(stripped.split("\n")).toHaveLength(text.split("\n").length);
    expect(stripped.split("\n")[4]).toBe('  "b": nope');
  });

  it("leaves a comma before a value alone, and an unterminated comment ends the text", () => {
    expect(stripJsonc("[1, // x\n 2]")).toBe("[1, \n 2]");
    expect(stripJsonc("[1] /* open")).toBe("[1]        ");
  });
});
