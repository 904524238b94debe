// edgelimit as it ships: src/ transpiled file by file with the project's TypeScript (no type-check), into
// node_modules/.cache/edgelimit-bench/<hash of sources>/, and imported from there. Running src/*.ts
// through tsx instead wraps every named closure in `__name()`, which made a decision's client CPU about
// 2.5× dearer than the compiled output: a cost the peer, shipped compiled, does not pay.
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import ts from "typescript";
import type * as UpstashModule from "../src/adapters/upstash/index.js";
import type * as BridgeModule from "../src/bridge/index.js";
import type * as RespModule from "../src/bridge/resp.js";
import type * as IndexModule from "../src/index.js";

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const SRC = join(ROOT, "src");

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path);
    return /(?<!\.d|\.test)\.ts$/.test(entry.name) ? [path] : [];
  });
}

function compileSrc(): string {
  if (!existsSync(join(SRC, "engine", "generated", "scripts.ts"))) {
    execFileSync(process.execPath, [join(ROOT, "scripts", "build-lua.mjs")], { stdio: "inherit" });
  }
  const files = sources(SRC).sort();
  const hash = createHash("sha256").update(ts.version);
  for (const file of files) hash.update(file).update(readFileSync(file));
  const cache = join(ROOT, "node_modules", ".cache", "edgelimit-bench");
  const out = join(cache, hash.digest("hex").slice(0, 16));
  if (existsSync(join(out, "index.js"))) return out;
  rmSync(cache, { recursive: true, force: true }); // older sources' outputs
  const tmp = `${out}.tmp-${process.pid}`;
  for (const file of files) {
    const { outputText } = ts.transpileModule(readFileSync(file, "utf8"), {
      fileName: file,
      compilerOptions: {
        target: ts.ScriptTarget.ES2022,
        module: ts.ModuleKind.ESNext,
        verbatimModuleSyntax: true,
      },
    });
    const target = join(tmp, relative(SRC, file)).replace(/\.ts$/, ".js");
    mkdirSync(dirname(target), { recursive: true });
    writeFileSync(target, outputText);
  }
  writeFileSync(join(tmp, "package.json"), '{ "type": "module" }\n'); // node_modules/ is a package boundary
  renameSync(tmp, out);
  return out;
}

export const COMPILED = compileSrc();
const load = async <T>(path: string): Promise<T> =>
  (await import(pathToFileURL(join(COMPILED, path)).href)) as T;

export const edgelimit = await load<typeof IndexModule>("index.js");
/** `edgelimit/upstash`, the peer's API on the engine. */
export const upstashEntry = await load<typeof UpstashModule>("adapters/upstash/index.js");
export const bridge = await load<typeof BridgeModule>("bridge/index.js");
/** The bridge's own RESP client, for what a part asks Redis directly (not an entry's export). */
export const resp = await load<typeof RespModule>("bridge/resp.js");
