#!/usr/bin/env node
// npm run check-config FILE: validates an edgelimit Worker config (the JSON that goes in the
// EDGELIMIT_CONFIG var) offline, with the same code the Worker runs. Prints OK, or every problem with
// the path of the field at fault; exits 1 on problems, 2 on usage errors. FILE "-" reads stdin.
import { readFileSync } from "node:fs";

const file = process.argv[2];
if (!file || process.argv.length > 3) {
  console.error("usage: npm run check-config FILE   (a JSON file; - reads stdin)");
  process.exit(2);
}

let parseConfig;
try {
  ({ parseConfig } = await import("../dist/config.js"));
} catch (error) {
  console.error(
    `check-config needs the built library (dist/config.js): run npm run build\n(${error.message})`,
  );
  process.exit(2);
}

let text;
try {
  text = readFileSync(file === "-" ? 0 : file, "utf8");
} catch (error) {
  console.error(`${file}: cannot read it (${error.code ?? error.message})`);
  process.exit(2);
}

const result = parseConfig(text);
if (result.ok) {
  const { routes, allow, deny } = result.config;
  const names = routes.map((route) => `${route.name}${route.mode === "shadow" ? " (shadow)" : ""}`);
  console.log(
    `OK: ${file}: ${routes.length} route${routes.length === 1 ? "" : "s"}` +
      `${names.length ? ` (${names.join(", ")})` : ""}, ${allow.size} allowed and ${deny.size} denied ranges`,
  );
} else {
  console.error(`${file}: ${result.errors.length} problem${result.errors.length === 1 ? "" : "s"}`);
  for (const error of result.errors) console.error(`  ${error}`);
  process.exit(1);
}
