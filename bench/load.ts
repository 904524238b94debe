// The benchmark measures edgelimit as it ships: compiled JavaScript, not TypeScript run through tsx.
// tsx (esbuild with keepNames) wraps every named closure in a `__name(fn, "…")` call, which on this
// machine made a Limiter decision ~2.5× slower than the tsc output (≈5.5 µs vs ≈2 µs of client CPU),
// a cost @upstash/ratelimit (shipped compiled) would not pay. So src/ is transpiled here, file by file,
// with the project's own TypeScript and compiler target (no type-check: a half-edited type elsewhere in
// the tree does not stop the benchmark), into node_modules/.cache/edgelimit-bench/<hash of sources>/,
// and imported from there. Only types come from src/ directly.
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import ts from "typescript";
import type * as BridgeModule from "../src/bridge/index.js";
import type * as ScriptsModule from "../src/bridge/scripts.js";
import type * as ScriptModule from "../src/engine/generated/scripts.js";
import type * as KeysModule from "../src/engine/keys.js";
import type * as IndexModule from "../src/index.js";

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const SRC = join(ROOT, "src");

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path);
    return entry.name.endsWith(".ts") && !entry.name.endsWith(".d.ts") && !entry.name.endsWith(".test.ts")
      ? [path]
      : [];
  });
}

/** Transpiles src/ (generating the Lua script if it is missing) and returns the directory of the output. */
export function compileSrc(): string {
  // `npm run bench` and `npm test` regenerate it first; rewriting it here while other test files read it
  // could hand them a half-written file, so only a missing one is generated.
  if (!existsSync(join(SRC, "generated", "script.ts"))) {
    execFileSync(process.execPath, [join(ROOT, "scripts", "build-lua.mjs")], { stdio: "inherit" });
  }
  const files = sources(SRC).sort();
  const hash = createHash("sha256").update(ts.version);
  for (const file of files) hash.update(file).update(readFileSync(file));
  const out = join(ROOT, "node_modules", ".cache", "edgelimit-bench", hash.digest("hex").slice(0, 16));
  if (existsSync(join(out, "index.js"))) return out;
  prune(dirname(out));
  const tmp = `${out}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  for (const file of files) {
    const { outputText } = ts.transpileModule(readFileSync(file, "utf8"), {
      fileName: file,
      compilerOptions: {
        target: ts.ScriptTarget.ES2022,
        module: ts.ModuleKind.ESNext,
        verbatimModuleSyntax: true,
        sourceMap: false,
      },
    });
    const target = join(tmp, relative(SRC, file)).replace(/\.ts$/, ".js");
    mkdirSync(dirname(target), { recursive: true });
    writeFileSync(target, outputText);
  }
  // node_modules/ is a package boundary: say these files are ES modules.
  writeFileSync(join(tmp, "package.json"), '{ "type": "module" }\n');
  try {
    renameSync(tmp, out);
  } catch {
    rmSync(tmp, { recursive: true, force: true }); // another process got there first: same sources, same output
  }
  return out;
}

/** Drops outputs of older sources (untouched for an hour), so the cache does not grow with every edit. */
function prune(dir: string): void {
  if (!existsSync(dir)) return;
  for (const entry of readdirSync(dir)) {
    const path = join(dir, entry);
    if (Date.now() - statSync(path).mtimeMs > 3_600_000) rmSync(path, { recursive: true, force: true });
  }
}

export const COMPILED = compileSrc();
const load = async <T>(path: string): Promise<T> =>
  (await import(pathToFileURL(join(COMPILED, path)).href)) as T;

export const edgelimit = await load<typeof IndexModule>("index.js");
export const bridge = await load<typeof BridgeModule>("bridge/index.js");
export const bridgeScripts = await load<typeof ScriptsModule>("bridge/scripts.js");
export const generated = await load<typeof ScriptModule>("engine/generated/scripts.js");
export const keys = await load<typeof KeysModule>("engine/keys.js");
