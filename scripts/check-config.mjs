#!/usr/bin/env node
// npm run check-config [FILE]: validates an edgelimit Worker config offline, with the same parser the
// Worker runs (src/adapters/worker/config.ts). Prints OK (and, with regions, the secret each database's token is
// read from), or every problem with the path of the field at fault
// (every problem of every rule, not only the first); exits 1 on problems, 2 on usage errors.
//
//   (no FILE)        wrangler.toml's [vars] EDGELIMIT_CONFIG, as the Worker will receive it
//   FILE.toml        the same for that wrangler file (also wrangler.json / wrangler.jsonc)
//   FILE.json        a JSON document
//   FILE.jsonc       JSON with // and /* */ comments and trailing commas, as docs/worker.md writes it
//   -                stdin, read as JSONC
//
// The var in a wrangler file must be strict JSON (the Worker parses it with JSON.parse), so comments
// there are reported, not stripped.
import { readFileSync } from "node:fs";
import { basename, dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const USAGE =
  "usage: npm run check-config [FILE]   FILE: wrangler.toml (the default), a .json or .jsonc file, or - for stdin";
const root = join(dirname(fileURLToPath(import.meta.url)), "..");

// The Worker's own modules, straight from src/ (no build needed).
async function fromSrc(path) {
  const { tsImport } = await import("tsx/esm/api");
  return tsImport(path, import.meta.url);
}

/** What to check, read from `file`: { value, source } or throws an Error saying why it cannot. */
async function readConfig(file) {
  // Any .toml is a wrangler config; so is a wrangler.json / wrangler.jsonc (wrangler's other formats).
  const wranglerFile =
    file === undefined || file.endsWith(".toml") || /^wrangler(\..+)?\.jsonc?$/.test(basename(file));
  if (wranglerFile) {
    const path = file ?? join(root, "wrangler.toml");
    const source = `${file ?? relative(process.cwd(), path)} [vars] EDGELIMIT_CONFIG`;
    let raw;
    try {
      const { experimental_readRawConfig } = await import("wrangler");
      raw = experimental_readRawConfig({ config: path }).rawConfig;
    } catch (error) {
      throw new Error(`${path}: cannot read it (${error.message.split("\n")[0]})`);
    }
    const value = raw.vars?.EDGELIMIT_CONFIG;
    if (value === undefined) {
      throw new Error(`${source} is not set: put the config there, as a JSON string (see docs/worker.md)`);
    }
    // A string is what the Worker parses; a [vars.EDGELIMIT_CONFIG] table arrives as an object.
    return { value, source };
  }
  let text;
  try {
    text = readFileSync(file === "-" ? 0 : file, "utf8");
  } catch (error) {
    throw new Error(`${file}: cannot read it (${error.code ?? error.message})`);
  }
  const source = file === "-" ? "stdin" : file;
  const jsonc = file === "-" || file.endsWith(".jsonc");
  const { stripJsonc } = jsonc ? await fromSrc("../src/adapters/worker/jsonc.ts") : {};
  try {
    return { value: JSON.parse(jsonc ? stripJsonc(text) : text), source };
  } catch (error) {
    const hint = jsonc ? "" : " (comments and trailing commas need a .jsonc file)";
    return { value: undefined, source, syntax: `not valid JSON: ${error.message}${hint}` };
  }
}

// " (flushEvery 5000 ms, top 20)": the fields given, in ms; nothing when all are the Limiter's defaults.
function analyticsText(analytics) {
  const fields = Object.entries(analytics).map(
    ([name, value]) => `${name} ${value}${name === "top" ? "" : " ms"}`,
  );
  return fields.length ? ` (${fields.join(", ")})` : "";
}

async function main() {
  const args = process.argv.slice(2);
  if (args.length > 1 || args[0] === "-h" || args[0] === "--help") {
    console.error(USAGE);
    return 2;
  }
  let config;
  try {
    config = await readConfig(args[0]);
  } catch (error) {
    console.error(error.message);
    return 2;
  }
  if (config.syntax !== undefined) {
    console.error(`${config.source}: 1 problem\n  ${config.syntax}`);
    return 1;
  }
  const { parseConfig } = await fromSrc("../src/adapters/worker/config.ts");
  const result = parseConfig(config.value);
  if (!result.ok) {
    const count = result.errors.length;
    console.error(`${config.source}: ${count} problem${count === 1 ? "" : "s"}`);
    for (const error of result.errors) console.error(`  ${error}`);
    return 1;
  }
  const { routes, allow, deny, analytics, regions } = result.config;
  const names = routes.map((route) => `${route.name}${route.mode === "shadow" ? " (shadow)" : ""}`);
  console.log(
    `OK: ${config.source}: ${routes.length} route${routes.length === 1 ? "" : "s"}` +
      `${names.length ? ` (${names.join(", ")})` : ""}, ${allow.size} allowed and ${deny.size} denied ranges` +
      `${analytics ? `, analytics on${analyticsText(analytics)}` : ""}`,
  );
  if (regions !== undefined) {
    // the secrets live in Cloudflare, not in the file: name each one the deploy needs
    const databases = Object.entries(regions.databases);
    console.log(
      `  ${databases.length} region${databases.length === 1 ? "" : "s"}: ` +
        databases
          .map(
            ([name, { tokenSecret }]) =>
              `${name} (${name === regions.default ? "default; " : ""}token in ${tokenSecret})`,
          )
          .join(", ") +
        `; requests no region claims go to ${regions.default === undefined ? "home alone" : regions.default}`,
    );
  }
  return 0;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  process.exitCode = await main();
}
