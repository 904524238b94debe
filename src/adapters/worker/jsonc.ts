/**
 * JSONC as editors write it (the config reference in docs/worker.md): JSON with `//` and `/* *\/` comments and
 * trailing commas. Read by `npm start` and `npm run check-config`; the Worker itself takes strict JSON.
 */

/**
 * JSONC to JSON: drops `//` and `/* *\/` comments and trailing commas outside strings. Strings are
 * copied verbatim and line breaks kept, so `JSON.parse` reports an error where the file has it.
 *
 * @example
 * JSON.parse(stripJsonc('{ "a": 1, // one\n}')); // { a: 1 }
 */
export function stripJsonc(text: string): string {
  let out = "";
  let i = 0;
  // Index in `out` of a comma not yet known to be followed by a value.
  let pendingComma = -1;
  while (i < text.length) {
    const char = text[i]!;
    if (char === '"') {
      let end = i + 1;
      while (end < text.length && text[end] !== '"') end += text[end] === "\\" ? 2 : 1;
      out += text.slice(i, end + 1);
      i = end + 1;
      pendingComma = -1;
    } else if (char === "/" && text[i + 1] === "/") {
      while (i < text.length && text[i] !== "\n") i++;
    } else if (char === "/" && text[i + 1] === "*") {
      const end = text.indexOf("*/", i + 2);
      const comment = text.slice(i, end === -1 ? text.length : end + 2);
      out += comment.replace(/[^\n]/g, " ");
      i += comment.length;
    } else if (char === ",") {
      pendingComma = out.length;
      out += char;
      i++;
    } else if ((char === "}" || char === "]") && pendingComma !== -1) {
      out = `${out.slice(0, pendingComma)} ${out.slice(pendingComma + 1)}${char}`;
      pendingComma = -1;
      i++;
    } else {
      if (!/\s/.test(char)) pendingComma = -1;
      out += char;
      i++;
    }
  }
  return out;
}
