// A consumer that installed edgelimit alone, without @upstash/redis: the package is built from src/ as
// `npm run build` builds it (tsconfig.build.json) into a fresh node_modules/edgelimit, package.json
// included, and a Node script there decides against the bridge from `{ url, token }`.

import { execFile } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import ts from "typescript";
import { afterAll, beforeAll, expect, inject, it } from "vitest";
import { T0, uniquePrefix } from "./support.js";

const root = join(import.meta.dirname, "..");
let consumer: string;

beforeAll(() => {
  consumer = mkdtempSync(join(tmpdir(), "edgelimit-consumer-"));
  const pkg = join(consumer, "node_modules", "edgelimit");
  mkdirSync(pkg, { recursive: true });
  copyFileSync(join(root, "package.json"), join(pkg, "package.json"));
  const build = ts.getParsedCommandLineOfConfigFile(
    join(root, "tsconfig.build.json"),
    // emitted unchecked (tsc -p tsconfig.json checks the types): the same JavaScript, in a second
    { outDir: join(pkg, "dist"), declaration: false, sourceMap: false, declarationMap: false, noCheck: true },
    {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (diagnostic) => {
        throw new Error(ts.flattenDiagnosticMessageText(diagnostic.messageText, "\n"));
      },
    },
  );
  if (!build) throw new Error("tsconfig.build.json: cannot read it");
  const emitted = ts.createProgram({ rootNames: build.fileNames, options: build.options }).emit();
  if (emitted.emitSkipped) throw new Error("building the package failed");
}, 120_000);

afterAll(() => {
  if (consumer) rmSync(consumer, { recursive: true, force: true });
});

const script = `
import { fixedWindow, Limiter } from "edgelimit";

const [url, token, prefix, now] = process.argv.slice(2);
let missing;
try {
  await import("@upstash/redis");
} catch (error) {
  missing = error.code;
}
const limiter = new Limiter({
  redis: { url, token },
  prefix,
  rules: { perMinute: fixedWindow({ limit: 3, window: "1m" }) },
  clock: () => Number(now),
});
const seen = [];
for (let i = 0; i < 4; i++) seen.push(await limiter.limit("user:42"));
await limiter.reset("user:42");
seen.push(await limiter.limit("user:42"));
console.log(JSON.stringify({ missing, seen: seen.map((d) => [d.allowed, d.remaining, d.source]) }));
`;

it("decides from { url, token } with no @upstash/redis installed, exactly", async () => {
  // nothing above the consumer may lend it a copy
  for (let dir = consumer; dir !== dirname(dir); dir = dirname(dir)) {
    expect(existsSync(join(dir, "node_modules", "@upstash", "redis"))).toBe(false);
  }
  writeFileSync(join(consumer, "decide.mjs"), script);
  const { stdout } = await promisify(execFile)(
    process.execPath,
    ["decide.mjs", inject("bridgeUrl"), inject("bridgeToken"), uniquePrefix("consumer"), String(T0)],
    { cwd: consumer },
  );
  expect(JSON.parse(stdout)).toEqual({
    missing: "ERR_MODULE_NOT_FOUND",
    seen: [
      [true, 2, "redis"],
      [true, 1, "redis"],
      [true, 0, "redis"],
      [false, 0, "redis"],
      [true, 2, "redis"],
    ],
  });
});
