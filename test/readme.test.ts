// The docs' TypeScript, typechecked as a consumer's code against the package as it ships: the .d.ts
// are built from src/ into a fresh node_modules/edgelimit (package.json and its "exports" included), and
// every ```ts block of README.md, docs/*.md and CONTRIBUTING.md, and every .ts file under examples/, is
// compiled strictly against it. Edge code gets no @types/node (an edge consumer has none): every entry
// point but "edgelimit/bridge" must typecheck without it, its .d.ts included (skipLibCheck off). Only
// blocks that use Node (process, node:*, edgelimit/bridge) get @types/node. Code that does not import
// @upstash/redis also compiles in a consumer that has none installed. Every ```jsonc block is a Worker
// config (or one route) that the Worker's own parser must accept, and every ```toml block a wrangler file
// that `npm run check-config` accepts (its [vars] EDGELIMIT_CONFIG). The README's two library examples
// run against the test bridge; the Worker's bundle is measured as docs/worker.md states it.

import { execFile } from "node:child_process";
import {
  copyFileSync,
  cpSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { promisify } from "node:util";
import ts from "typescript";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { parseConfig } from "../src/adapters/worker/config.js";
import { QUOTA_EXCEEDED } from "../src/http/headers.js";

const root = join(import.meta.dirname, "..");

interface Block {
  /** Where it comes from, as "README.md:LINE", "docs/leases.md:LINE" or "examples/…". */
  origin: string;
  code: string;
}

/** Every ```ts / ```typescript block, with the line its code starts on. */
function tsBlocks(markdown: string, file: string): Block[] {
  const blocks: Block[] = [];
  const lines = markdown.split("\n");
  for (let i = 0; i < lines.length; i++) {
    if (!/^```(ts|typescript|tsx)\s*$/.test(lines[i] ?? "")) continue;
    const start = i + 1;
    let end = start;
    while (end < lines.length && !/^```\s*$/.test(lines[end] ?? "")) end++;
    blocks.push({ origin: `${file}:${start + 1}`, code: lines.slice(start, end).join("\n") });
    i = end;
  }
  return blocks;
}

function examples(dir: string): Block[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return examples(path);
    return /\.tsx?$/.test(entry.name)
      ? [{ origin: relative(root, path), code: readFileSync(path, "utf8") }]
      : [];
  });
}

const needsNode = (code: string) => /\bprocess\.|from "node:|from "edgelimit\/bridge"|\bBuffer\b/.test(code);

const strict = {
  skipLibCheck: false,
  strict: true,
  noUncheckedIndexedAccess: true,
  exactOptionalPropertyTypes: true,
  noImplicitOverride: true,
  verbatimModuleSyntax: true,
  isolatedModules: true,
  target: "ES2022",
  module: "ESNext",
  moduleResolution: "Bundler",
  lib: ["ES2022", "DOM", "DOM.Iterable"],
  noEmit: true,
};

let consumer: string;
/** A consumer with no @upstash/redis installed (nor @types/node): `{ url, token }` must need nothing else. */
let bare: string;

beforeAll(() => {
  consumer = mkdtempSync(join(tmpdir(), "edgelimit-consumer-"));
  const modules = join(consumer, "node_modules");
  const pkg = join(modules, "edgelimit");
  mkdirSync(pkg, { recursive: true });
  copyFileSync(join(root, "package.json"), join(pkg, "package.json"));
  // The declarations exactly as `npm run build` emits them (tsconfig.build.json), into the fresh package.
  const build = ts.getParsedCommandLineOfConfigFile(
    join(root, "tsconfig.build.json"),
    { outDir: join(pkg, "dist"), emitDeclarationOnly: true, sourceMap: false, declarationMap: false },
    {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (diagnostic) => {
        throw new Error(format([diagnostic]));
      },
    },
  );
  if (!build) throw new Error("tsconfig.build.json: cannot read it");
  const emitted = ts.createProgram({ rootNames: build.fileNames, options: build.options }).emit();
  if (emitted.emitSkipped || emitted.diagnostics.length > 0) {
    throw new Error(`building the declarations failed:\n${format(emitted.diagnostics)}`);
  }
  // What `npm install edgelimit @upstash/redis hono @vercel/functions` (+ @types/node) would add.
  mkdirSync(join(modules, "@types"));
  for (const name of ["@upstash", "@vercel", "hono", "@types/node"]) {
    symlinkSync(join(root, "node_modules", name), join(modules, name));
  }
  // What `npm install edgelimit hono @vercel/functions` would add: the same package, a copy (a symlink
  // would resolve back into the first consumer, beside its @upstash/redis).
  bare = mkdtempSync(join(tmpdir(), "edgelimit-bare-"));
  cpSync(pkg, join(bare, "node_modules", "edgelimit"), { recursive: true });
  for (const name of ["@vercel", "hono"]) {
    symlinkSync(join(root, "node_modules", name), join(bare, "node_modules", name));
  }
}, 120_000);

afterAll(() => {
  if (consumer) rmSync(consumer, { recursive: true, force: true });
  if (bare) rmSync(bare, { recursive: true, force: true });
});

function format(diagnostics: readonly ts.Diagnostic[]): string {
  return ts.formatDiagnostics(diagnostics, {
    getCanonicalFileName: (name) => name,
    getCurrentDirectory: () => consumer ?? root,
    getNewLine: () => "\n",
  });
}

/**
 * Writes the blocks as modules of one consumer project and typechecks them, resolving to the complaints.
 * Diagnostics are asked for the consumer's files and the package's own .d.ts, not for every library in
 * the program (lib.dom, hono): that is what skipLibCheck: false would add, and it is theirs to check.
 */
function typecheck(
  name: string,
  blocks: Block[],
  types: string[],
  extra: Record<string, string> = {},
  base: string = consumer,
): string {
  const dir = join(base, name);
  mkdirSync(dir);
  const files = Object.entries(extra).map(([file, code]) => {
    writeFileSync(join(dir, file), code);
    return join(dir, file);
  });
  const origins = new Map<string, Block>();
  for (const [i, block] of blocks.entries()) {
    const file = join(dir, `block${i}.ts`);
    // `export {}` keeps a block without imports a module, so blocks never share a scope.
    writeFileSync(file, `${block.code}\nexport {};\n`);
    files.push(file);
    origins.set(`block${i}.ts`, block);
  }
  const { options, errors } = ts.convertCompilerOptionsFromJson({ ...strict, types }, dir);
  if (errors.length) throw new Error(format(errors));
  const program = ts.createProgram({ rootNames: files, options });
  const ours = program
    .getSourceFiles()
    .filter((file) => file.fileName.startsWith(dir) || file.fileName.includes("/node_modules/edgelimit/"));
  const diagnostics = [
    ...program.getOptionsDiagnostics(),
    ...program.getGlobalDiagnostics(),
    ...ours.flatMap((file) => [
      ...program.getSyntacticDiagnostics(file),
      ...program.getSemanticDiagnostics(file),
    ]),
  ];
  // Name the page and its line ("docs/leases.md:42:7") rather than the temp file.
  return format(diagnostics).replace(/^\S*?(block\d+\.ts)\((\d+),(\d+)\)/gm, (whole, file, row, col) => {
    const origin = origins.get(file)?.origin ?? whole;
    const at = /^(.*\.md):(\d+)$/.exec(origin);
    return at ? `${at[1]}:${Number(at[2]) + Number(row) - 1}:${col}` : `${origin}(${row},${col})`;
  });
}

/** README.md, CONTRIBUTING.md and every page under docs/, as paths from the root. */
const pages = [
  "README.md",
  "CONTRIBUTING.md",
  ...readdirSync(join(root, "docs"))
    .filter((file) => file.endsWith(".md"))
    .sort()
    .map((file) => `docs/${file}`),
];
const text = (page: string) => readFileSync(join(root, page), "utf8");
const readme = tsBlocks(text("README.md"), "README.md");
const documented = pages.flatMap((page) => tsBlocks(text(page), page));
const all = [...documented, ...examples(join(root, "examples"))];
/** The entry points as package.json exports them ("edgelimit", "edgelimit/hono", ...). */
const entries = Object.keys(
  (JSON.parse(text("package.json")) as { exports: Record<string, unknown> }).exports,
)
  .filter((path) => path !== "./package.json")
  .map((path) => (path === "." ? "edgelimit" : `edgelimit/${path.slice(2)}`));

describe("the docs' TypeScript, as a consumer compiles it", () => {
  it("has blocks to check (the extraction itself works)", () => {
    expect(readme.length).toBeGreaterThanOrEqual(4);
    expect(readme.some((block) => block.code.includes('from "edgelimit/hono"'))).toBe(true);
    // Every page under docs/ shows code or config: a page whose blocks were missed would go unchecked.
    for (const page of pages.filter((page) => page.startsWith("docs/"))) {
      const blocks = tsBlocks(text(page), page).length + (text(page).match(/^```jsonc$/gm)?.length ?? 0);
      expect(blocks, page).toBeGreaterThan(0);
    }
    expect(entries).toContain("edgelimit/hono");
  });

  it("edge code and the edge entry points' .d.ts typecheck strictly with no @types/node", () => {
    const edge = all.filter((block) => !needsNode(block.code));
    expect(edge.length).toBeGreaterThan(0);
    // One module per entry: two entries may export one name without a conflict here.
    const modules = Object.fromEntries(
      entries
        .filter((entry) => entry !== "edgelimit/bridge")
        .map((entry, i) => [`entry${i}.ts`, `export * from "${entry}";\n`]),
    );
    expect(typecheck("edge", edge, [], modules)).toBe("");
  }, 120_000);

  it("code that needs no @upstash/redis typechecks where it is not installed, the entries' .d.ts too", () => {
    const bareBlocks = all.filter(
      (block) => !needsNode(block.code) && !block.code.includes("@upstash/redis"),
    );
    expect(bareBlocks.some((block) => /redis: \{ url: /.test(block.code))).toBe(true);
    expect(() => createRequire(join(bare, "x.js")).resolve("@upstash/redis")).toThrow();
    const modules = Object.fromEntries(
      entries
        .filter((entry) => entry !== "edgelimit/bridge")
        .map((entry, i) => [`entry${i}.ts`, `export * from "${entry}";\n`]),
    );
    expect(typecheck("bare", bareBlocks, [], modules, bare)).toBe("");
  }, 120_000);

  it("Node code (the bridge, process.env) typechecks strictly with @types/node", () => {
    expect(
      typecheck(
        "node",
        all.filter((block) => needsNode(block.code)),
        ["node"],
      ),
    ).toBe("");
  }, 120_000);

  it("the bridge's .d.ts does need @types/node, as the README says", () => {
    const bridge = { origin: "bridge", code: 'export * from "edgelimit/bridge";' };
    expect(typecheck("bridge-without-node", [bridge], [])).toMatch(/Cannot find namespace 'NodeJS'/);
    for (const page of ["README.md", "docs/bridge.md"]) {
      expect(text(page), page).toMatch(/edgelimit\/bridge[^\n]*@types\/node|@types\/node[^\n]*bridge/);
    }
  }, 120_000);
});

/** // and /* *\/ comments and trailing commas removed, outside strings: JSONC as the README writes it. */
function jsonc(text: string): unknown {
  let out = "";
  for (let i = 0; i < text.length; ) {
    if (text[i] === '"') {
      let j = i + 1;
      while (j < text.length && text[j] !== '"') j += text[j] === "\\" ? 2 : 1;
      out += text.slice(i, j + 1);
      i = j + 1;
    } else if (text.startsWith("//", i)) {
      i = text.includes("\n", i) ? text.indexOf("\n", i) : text.length;
    } else if (text.startsWith("/*", i)) {
      i = text.indexOf("*/", i + 2) + 2;
    } else {
      out += text[i];
      i += 1;
    }
  }
  return JSON.parse(out.replace(/,(\s*[}\]])/g, "$1"));
}

describe("the docs' Worker config examples", () => {
  it("every ```jsonc config (and route) in the README and docs/ is accepted by the Worker's parser", () => {
    const blocks = pages.flatMap((page) =>
      [...text(page).matchAll(/^```jsonc\n([\s\S]*?)^```$/gm)].map((match) => jsonc(match[1] ?? "")),
    );
    expect(blocks.length).toBeGreaterThanOrEqual(4);
    for (const block of blocks) {
      const value = block as Record<string, unknown>;
      // A lone route is checked inside a config of its own.
      const config = "origin" in value ? value : { origin: "https://api.example.com", routes: [value] };
      const result = parseConfig(config);
      expect(result.ok ? [] : result.errors, JSON.stringify(block)).toEqual([]);
    }
  });
});

describe("the docs' wrangler files", () => {
  // wrangler reads each file as `wrangler deploy` will: a few seconds each on a busy machine.
  it("every ```toml block is a wrangler file whose EDGELIMIT_CONFIG check-config accepts", async () => {
    const blocks = pages.flatMap((page) =>
      [...text(page).matchAll(/^```toml\n([\s\S]*?)^```$/gm)].map((match) => ({
        page,
        toml: match[1] ?? "",
      })),
    );
    expect(blocks.length).toBeGreaterThanOrEqual(1);
    const dir = mkdtempSync(join(tmpdir(), "edgelimit-toml-"));
    try {
      for (const [i, { page, toml }] of blocks.entries()) {
        const file = join(dir, `wrangler-${i}.toml`);
        writeFileSync(file, toml);
        const { stdout } = await promisify(execFile)(
          process.execPath,
          [join(root, "scripts/check-config.mjs"), file],
          {
            cwd: root,
          },
        ).catch((error: { stderr?: string; message: string }) => {
          throw new Error(`${page}: ${error.stderr ?? error.message}`);
        });
        expect(stdout, page).toMatch(/^OK: /);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});

describe("the Worker's bundle size, as docs/worker.md states it", () => {
  it("holds for a fresh `wrangler deploy --dry-run` of the Worker", async () => {
    const page = text("docs/worker.md").replace(/\s+/g, " ");
    // Either sentence is checked: "... and `@upstash/redis` is its largest part, larger than all of
    // edgelimit's own code", or "... and carries no `@upstash/redis`: edgelimit's own code, `a` and `b`
    // (...) are all it holds".
    const claim =
      /is under (\d+) KiB, under (\d+) KiB gzipped, and (`@upstash\/redis` is its largest part, larger than all of edgelimit's own code|carries no `@upstash\/redis`: edgelimit's own code, (.*?) are all it holds)/.exec(
        page,
      );
    expect(claim, "docs/worker.md's sentence about the bundle").not.toBeNull();
    const redisIsLargest = claim?.[3]?.startsWith("`@upstash/redis` is") === true;
    /** The packages the sentence names beside edgelimit's own code, when it names them. */
    const named = [...(claim?.[4] ?? "").matchAll(/`([^`]+)`/g)].map((match) => match[1]);
    const out = mkdtempSync(join(tmpdir(), "edgelimit-bundle-"));
    try {
      const wrangler = join(root, "node_modules", ".bin", "wrangler");
      const meta = join(out, "meta.json");
      const { stdout } = await promisify(execFile)(
        wrangler,
        ["deploy", "--dry-run", "--outdir", join(out, "bundle"), "--metafile", meta],
        { cwd: root, env: { ...process.env, WRANGLER_SEND_METRICS: "false", NO_COLOR: "1" } },
      );
      const size = /Total Upload: ([\d.]+) KiB \/ gzip: ([\d.]+) KiB/.exec(stdout);
      expect(size, stdout).not.toBeNull();
      expect(Number(size?.[1])).toBeLessThan(Number(claim?.[1]));
      expect(Number(size?.[2])).toBeLessThan(Number(claim?.[2]));
      // Bytes in the bundle by origin: each package in node_modules, and edgelimit's own src/ as one.
      const { outputs } = JSON.parse(readFileSync(meta, "utf8")) as {
        outputs: Record<string, { entryPoint?: string; inputs: Record<string, { bytesInOutput: number }> }>;
      };
      const bytes = new Map<string, number>();
      for (const output of Object.values(outputs)) {
        for (const [path, input] of Object.entries(output.inputs)) {
          const name =
            /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(path)?.[1] ??
            (path.startsWith("src/") ? "edgelimit" : path);
          bytes.set(name, (bytes.get(name) ?? 0) + input.bytesInOutput);
        }
      }
      const redis = bytes.get("@upstash/redis") ?? 0;
      if (redisIsLargest) {
        for (const [name, size] of bytes)
          if (name !== "@upstash/redis") expect(redis, name).toBeGreaterThan(size);
      } else {
        expect(redis).toBe(0);
        expect([...bytes.keys()].sort()).toEqual(["edgelimit", ...named].sort());
      }
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  }, 120_000);
});

describe("the README's first examples, run", () => {
  /** A README block as a module of this test: its Redis is the test bridge, its imports the sources. */
  async function load(block: Block): Promise<Record<string, unknown>> {
    const code = block.code
      .replaceAll('"https://eu1-example.upstash.io"', JSON.stringify(inject("bridgeUrl")))
      .replaceAll('token: "…"', `token: ${JSON.stringify(inject("bridgeToken"))}`)
      .replaceAll('from "edgelimit"', `from ${JSON.stringify(join(root, "src/index.ts"))}`)
      .replaceAll('from "edgelimit/http"', `from ${JSON.stringify(join(root, "src/http/index.ts"))}`);
    const dir = mkdtempSync(join(tmpdir(), "edgelimit-run-"));
    try {
      const file = join(dir, "block.ts");
      writeFileSync(file, code);
      return (await import(/* @vite-ignore */ file)) as Record<string, unknown>;
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }

  it("each answers its 429 with the library's own problem+json and a finite Retry-After", async () => {
    const [first, second] = readme.filter((block) => block.code.includes("export async function handle("));
    for (const [block, admitted] of [
      [first, 20],
      [second, 60],
    ] as const) {
      expect(block, "the README's library examples").toBeDefined();
      const { handle } = (await load(block as Block)) as { handle: (id: string) => Promise<Response> };
      const id = `readme-${crypto.randomUUID()}`;
      // The burst (or the minute's limit) passes at once; the examples run on real time, so a refill
      // may admit a few more before the first refusal.
      for (let i = 0; i < admitted; i++) expect((await handle(id)).status, block?.origin).toBe(200);
      let refusal = await handle(id);
      for (let i = 0; i < 100 && refusal.status === 200; i++) refusal = await handle(id);
      expect(refusal.status, block?.origin).toBe(429);
      expect(refusal.headers.get("Content-Type")).toBe("application/problem+json");
      expect(refusal.headers.get("Retry-After")).toMatch(/^[1-9]\d*$/);
      expect(await refusal.json()).toMatchObject({ status: 429, type: QUOTA_EXCEEDED });
    }
  });
});
