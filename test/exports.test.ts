// Each entry point exports exactly its product, so nothing leaks by accident: the runtime names of each
// src entry, and every name (types included) as TypeScript sees it. package.json's "exports" and
// tsconfig's "paths" name the same entries. And what a consumer's bundler keeps: the package as it ships
// (src/ transpiled into a fresh node_modules/edgelimit, package.json included), bundled by esbuild.

import {
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { build, type Metafile } from "esbuild";
import ts from "typescript";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as lua from "../src/engine/generated/scripts.js";

const root = join(import.meta.dirname, "..");
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));

interface Entry {
  /** The source file, from the repository's root. */
  src: string;
  /** Runtime exports (functions, classes, constants). */
  values: string[];
  /** Type-only exports. */
  types: string[];
}

const ENTRIES: Record<string, Entry> = {
  edgelimit: {
    src: "src/index.ts",
    values: [
      "Limiter",
      "RedisCallError",
      "fixedWindow",
      "gcra",
      "intervalBucket",
      "slidingLog",
      "slidingWindow",
      "tokenBucket",
    ],
    types: [
      "Analytics",
      "AnalyticsOptions",
      "AnalyticsReport",
      "BreakerOptions",
      "BreakerReport",
      "BreakerState",
      "CountingOptions",
      "Decision",
      "DecisionSource",
      "Duration",
      "GcraOptions",
      "GcraRule",
      "Identity",
      "IntervalBucketOptions",
      "IntervalBucketRule",
      "KeyedOptions",
      "LeaseOptions",
      "LimitOptions",
      "LimiterOptions",
      "Override",
      "OverrideEntry",
      "Overrides",
      "OverridesOptions",
      "OverridesPage",
      "PlanConfig",
      "PoolOptions",
      "RedisErrorKind",
      "RegionOptions",
      "ReportRange",
      "Rule",
      "RuleBase",
      "RuleConfig",
      "RulePlan",
      "RuleResult",
      "SettleOptions",
      "Settlement",
      "TokenBucketOptions",
      "TokenBucketRule",
      "WaitUntil",
      "WindowOptions",
      "WindowRule",
    ],
  },
  "edgelimit/http": {
    src: "src/http/index.ts",
    values: [
      "PROBLEM_JSON",
      "QUOTA_EXCEEDED",
      "SHADOW_HEADER",
      "bodyUsageRefusal",
      "canonicalPath",
      "compileRoutes",
      "enforce",
      "failureLog",
      "findRoute",
      "formMethods",
      "hashed",
      "identityOf",
      "matchesPath",
      "normalizePath",
      "openaiUsage",
      "parsePathPattern",
      "policyHeader",
      "problemDetails",
      "rateLimitHeaders",
      "requestedMethods",
      "tooManyInFlight",
      "tooManyRequests",
      "unauthorized",
      "usageFromHeader",
      "usageLog",
    ],
    types: [
      "EnforceOptions",
      "Enforcement",
      "FailureLog",
      "FailureLogOptions",
      "HeaderOptions",
      "KeyAnswer",
      "PathPattern",
      "PolicyRule",
      "ProblemDetails",
      "RouteMatch",
      "RouteTable",
      "UsageLog",
      "UsageLogOptions",
      "UsageSource",
    ],
  },
  "edgelimit/lock": {
    src: "src/engine/lock-entry.ts",
    values: ["Concurrency", "Lock", "LockLostError", "LockUnavailableError"],
    types: [
      "AcquireOptions",
      "ConcurrencyDecision",
      "ConcurrencyOptions",
      "ExtendResult",
      "LockOptions",
      "LockResult",
      "ReleaseResult",
      "WithLockOptions",
    ],
  },
  "edgelimit/hono": {
    src: "src/adapters/hono/index.ts",
    values: ["concurrencyLimit", "rateLimit"],
    types: [
      "ConcurrencyEvent",
      "ConcurrencyLimitOptions",
      "ConcurrencyVariables",
      "RateLimitEvent",
      "RateLimitOptions",
      "RateLimitVariables",
      "SettleOption",
    ],
  },
  "edgelimit/vercel": {
    src: "src/adapters/vercel/index.ts",
    values: ["clientIp", "createMiddleware"],
    types: ["VercelRateLimitOptions"],
  },
  "edgelimit/upstash": {
    src: "src/adapters/upstash/index.ts",
    values: ["Analytics", "IpDenyList", "MultiRegionRatelimit", "Ratelimit"],
    types: ["Algorithm", "AnalyticsConfig", "Duration", "MultiRegionRatelimitConfig", "RatelimitConfig"],
  },
  "edgelimit/bridge": {
    src: "src/bridge/index.ts",
    // the RESP client its tests and benchmarks use stays private (src/bridge/resp.ts)
    values: ["freePort", "startBridge", "startRedisServer"],
    types: ["Bridge", "BridgeOptions", "BridgeStats", "RedisServer", "RedisServerOptions"],
  },
};

/**
 * Types the published declarations name, at any depth, without any entry exporting them: only
 * edgelimit/upstash's. That entry exports exactly the names @upstash/ratelimit 2.2.0 exports (its
 * dist/index.d.ts: Algorithm, Analytics, AnalyticsConfig, Duration, IpDenyList, MultiRegionRatelimit,
 * MultiRegionRatelimitConfig, Ratelimit, RatelimitConfig), whose own declarations name these same
 * shapes (the response of limit(), its options, the base class, the analytics events) without
 * exporting them either: a name the peer does not export would be one a switching user cannot have.
 */
const UNNAMED = [
  "Aggregate (adapters/upstash/analytics.d.ts)",
  "AlgorithmSpec (adapters/upstash/algorithm.d.ts)",
  "CommonConfig (adapters/upstash/ratelimit.d.ts)",
  "Databases (adapters/upstash/ratelimit.d.ts)",
  "Event (adapters/upstash/analytics.d.ts)",
  "EventSuccess (adapters/upstash/analytics.d.ts)",
  "Geo (adapters/upstash/analytics.d.ts)",
  "LimitOptions (adapters/upstash/ratelimit.d.ts)",
  "RatelimitBase (adapters/upstash/ratelimit.d.ts)",
  "RatelimitResponse (adapters/upstash/ratelimit.d.ts)",
  "RatelimitResponseType (adapters/upstash/ratelimit.d.ts)",
];

/** "edgelimit/hono" → "./hono", as package.json's "exports" spells it. */
const subpath = (name: string) => `.${name.slice("edgelimit".length)}`;
/** "src/adapters/hono/index.ts" → "./dist/adapters/hono/index", as the build writes it. */
const built = (src: string) => `./dist/${relative("src", src).replace(/\.ts$/, "")}`;

describe("each entry point's exports, exactly", () => {
  for (const [name, entry] of Object.entries(ENTRIES)) {
    it(`${name}: its runtime exports`, async () => {
      const module = await import(join(root, entry.src));
      expect(Object.keys(module).sort()).toEqual(entry.values);
    });
  }

  it("every entry's names, types included, as a consumer's TypeScript sees them", () => {
    const config = ts.getParsedCommandLineOfConfigFile(
      join(root, "tsconfig.json"),
      {},
      {
        ...ts.sys,
        onUnRecoverableConfigFileDiagnostic: (diagnostic) => {
          throw new Error(ts.flattenDiagnosticMessageText(diagnostic.messageText, "\n"));
        },
      },
    );
    if (!config) throw new Error("tsconfig.json: cannot read it");
    const files = Object.values(ENTRIES).map((entry) => join(root, entry.src));
    const program = ts.createProgram({ rootNames: files, options: config.options });
    const checker = program.getTypeChecker();
    for (const [name, entry] of Object.entries(ENTRIES)) {
      const file = program.getSourceFile(join(root, entry.src));
      const symbol = file && checker.getSymbolAtLocation(file);
      if (!symbol) throw new Error(`${entry.src}: not a module`);
      const names = checker.getExportsOfModule(symbol).map((s) => s.getName());
      expect(names.sort(), name).toEqual([...entry.values, ...entry.types].sort());
    }
  });

  it("every type a published declaration names is one an entry exports", () => {
    // The .d.ts the build writes, walked from each entry's exports: a type named in a signature, a field
    // or an alias that no entry exports is one a consumer meets but cannot name.
    const out = mkdtempSync(join(tmpdir(), "edgelimit-dts-"));
    try {
      const config = ts.getParsedCommandLineOfConfigFile(
        join(root, "tsconfig.build.json"),
        { outDir: out, emitDeclarationOnly: true },
        {
          ...ts.sys,
          onUnRecoverableConfigFileDiagnostic: (diagnostic) => {
            throw new Error(ts.flattenDiagnosticMessageText(diagnostic.messageText, "\n"));
          },
        },
      );
      if (!config) throw new Error("tsconfig.build.json: cannot read it");
      ts.createProgram({ rootNames: config.fileNames, options: config.options }).emit();
      const entries = Object.values(ENTRIES).map((entry) =>
        join(out, relative("src", entry.src).replace(/\.ts$/, ".d.ts")),
      );
      const program = ts.createProgram({ rootNames: entries, options: config.options });
      const checker = program.getTypeChecker();
      const target = (symbol: ts.Symbol) =>
        symbol.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(symbol) : symbol;
      const exported = new Set<ts.Symbol>();
      for (const file of entries) {
        const module = checker.getSymbolAtLocation(program.getSourceFile(file)!)!;
        for (const symbol of checker.getExportsOfModule(module)) exported.add(target(symbol));
      }
      const unnamed: string[] = [];
      // walked from each export, then from each unnamed type met on the way: one a consumer meets
      // inside another is as unnamed as one met at the top
      const walk = [...exported];
      const walked = new Set<ts.Symbol>(walk);
      for (const symbol of walk) {
        for (const declaration of symbol.declarations ?? []) {
          const visit = (node: ts.Node): void => {
            const name = ts.isTypeReferenceNode(node)
              ? node.typeName
              : ts.isExpressionWithTypeArguments(node)
                ? node.expression
                : ts.isTypeQueryNode(node)
                  ? node.exprName
                  : undefined;
            const named = name && checker.getSymbolAtLocation(name);
            if (named && !(named.flags & ts.SymbolFlags.TypeParameter)) {
              const type = target(named);
              const file = type.declarations?.[0]?.getSourceFile().fileName ?? "";
              const where = `${type.getName()} (${relative(out, file)})`;
              if (file.startsWith(out) && !exported.has(type) && !unnamed.includes(where)) {
                unnamed.push(where);
                if (!walked.has(type)) {
                  walked.add(type);
                  walk.push(type);
                }
              }
            }
            ts.forEachChild(node, visit);
          };
          visit(declaration);
        }
      }
      expect(unnamed.sort()).toEqual(UNNAMED);
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  }, 120_000);

  it('package.json\'s "exports" and tsconfig\'s "paths" name the same entries, each types + import', () => {
    const expected: Record<string, unknown> = {};
    for (const [name, entry] of Object.entries(ENTRIES)) {
      expected[subpath(name)] = { types: `${built(entry.src)}.d.ts`, import: `${built(entry.src)}.js` };
    }
    expected["./package.json"] = "./package.json";
    expect(pkg.exports).toEqual(expected);
    expect(Object.keys(pkg.exports)).toEqual(Object.keys(expected)); // in the order a reader meets them

    const tsconfig = ts.parseConfigFileTextToJson(
      "tsconfig.json",
      readFileSync(join(root, "tsconfig.json"), "utf8"),
    );
    const paths = Object.fromEntries(
      Object.entries(ENTRIES).map(([name, entry]) => [name, [`./${entry.src}`]]),
    );
    expect(tsconfig.config.compilerOptions.paths).toEqual(paths);
    expect(pkg.sideEffects).toBe(false);
    expect(pkg.main).toBe("./dist/index.js");
    expect(pkg.types).toBe("./dist/index.d.ts");
  });
});

// ------------------------------------------------------------------------------- what a bundler keeps

let consumer: string;

/** src/**\/*.ts, tests and declarations left out. */
function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path);
    return /(?<!\.d|\.test)\.ts$/.test(entry.name) ? [path] : [];
  });
}

beforeAll(() => {
  consumer = mkdtempSync(join(tmpdir(), "edgelimit-bundle-"));
  const modules = join(consumer, "node_modules");
  const dist = join(modules, "edgelimit", "dist");
  for (const file of sources(join(root, "src"))) {
    const { outputText } = ts.transpileModule(readFileSync(file, "utf8"), {
      fileName: file,
      compilerOptions: {
        target: ts.ScriptTarget.ES2022,
        module: ts.ModuleKind.ESNext,
        verbatimModuleSyntax: true,
      },
    });
    const target = join(dist, relative(join(root, "src"), file)).replace(/\.ts$/, ".js");
    mkdirSync(dirname(target), { recursive: true });
    writeFileSync(target, outputText);
  }
  writeFileSync(join(modules, "edgelimit", "package.json"), JSON.stringify(pkg));
  for (const name of ["@upstash", "@vercel", "hono"])
    symlinkSync(join(root, "node_modules", name), join(modules, name));
}, 60_000);

afterAll(() => {
  if (consumer) rmSync(consumer, { recursive: true, force: true });
});

/** Bundles `code` as an edge consumer's build would (ESM, browser platform, minified). */
async function bundle(name: string, code: string): Promise<{ text: string; modules: string[] }> {
  const file = join(consumer, `${name}.js`);
  writeFileSync(file, code);
  const result = await build({
    entryPoints: [file],
    bundle: true,
    format: "esm",
    platform: "browser",
    minify: true,
    write: false,
    metafile: true,
    logLevel: "silent",
  });
  const output = Object.values((result.metafile as Metafile).outputs)[0];
  const modules = Object.entries(output?.inputs ?? {})
    .filter(([, input]) => input.bytesInOutput > 0)
    .map(([path]) => path.replace(/^.*node_modules\/edgelimit\//, ""));
  return { text: result.outputFiles[0]?.text ?? "", modules };
}

// Strings only the lock, the concurrency limiter and the HTTP helpers carry (minifying keeps strings).
const LOCK = ["LockLostError", "LockUnavailableError", ":lock:"];
const CONCURRENCY = ["must be a whole number of holders", ":concurrency:"];
const HTTP = ["application/problem+json", "EdgeLimit-Shadow", "quota-exceeded"];
// Each script's SHA-1 and a line of its Lua (one export per script: a bundle keeps only those it uses).
const LOCK_LUA = [lua.LOCK.sha1, "unknown lock operation"];
const CONCURRENCY_LUA = [lua.CONCURRENCY.sha1, "unknown concurrency operation"];
const LIMITER_LUA = [lua.LIMITER.sha1, lua.REFUND.sha1, "edgelimit: unknown algorithm "];

describe('"sideEffects": false: what a consumer\'s bundler keeps', () => {
  it("a consumer of { Limiter, gcra } gets neither the lock, the concurrency limiter nor the HTTP helpers", async () => {
    const { text, modules } = await bundle(
      "limiter-only",
      'import { Limiter, gcra } from "edgelimit";\nexport const make = (redis) => new Limiter({ redis, rules: { burst: gcra({ limit: 10, period: "1s" }) } });\n',
    );
    expect(modules).toContain("dist/engine/limiter.js");
    expect(modules.filter((path) => /^dist\/(engine\/(lock|concurrency)|http\/)/.test(path))).toEqual([]);
    for (const marker of [...LOCK, ...CONCURRENCY, ...HTTP, ...LOCK_LUA, ...CONCURRENCY_LUA])
      expect(text.includes(marker), marker).toBe(false);
    for (const marker of LIMITER_LUA) expect(text.includes(marker), marker).toBe(true);
  }, 30_000);

  it("a consumer of { Lock } gets the lock's script, not the limiter's, the refund's or the concurrency limiter's", async () => {
    const { text, modules } = await bundle(
      "lock-only",
      'import { Lock } from "edgelimit/lock";\nexport const make = (redis) => new Lock({ redis });\n',
    );
    expect(modules).toContain("dist/engine/lock.js");
    for (const marker of LOCK_LUA) expect(text.includes(marker), marker).toBe(true);
    for (const marker of [...LIMITER_LUA, ...CONCURRENCY_LUA])
      expect(text.includes(marker), marker).toBe(false);
  }, 30_000);

  it("a consumer of rateLimit from edgelimit/hono gets the HTTP helpers, not the lock or the concurrency limiter", async () => {
    // The Hono entry also exports concurrencyLimit; without "sideEffects": false a bundler keeps the modules
    // it imports (the lock among them) in case they run something on import.
    const { text, modules } = await bundle(
      "hono-rate-limit",
      'export { rateLimit } from "edgelimit/hono";\n',
    );
    expect(modules).toContain("dist/adapters/hono/index.js");
    expect(modules).toContain("dist/http/headers.js");
    expect(modules.filter((path) => /^dist\/engine\/(lock|concurrency)/.test(path))).toEqual([]);
    for (const marker of [...LOCK, ...CONCURRENCY]) expect(text.includes(marker), marker).toBe(false);
  }, 30_000);

  it("the same markers are there when a consumer does import them (the check above can fail)", async () => {
    const { text, modules } = await bundle(
      "everything",
      'export { Concurrency, Lock } from "edgelimit/lock";\nexport { SHADOW_HEADER, tooManyRequests } from "edgelimit/http";\n',
    );
    expect(modules).toEqual(expect.arrayContaining(["dist/engine/lock.js", "dist/engine/concurrency.js"]));
    for (const marker of [...LOCK, ...CONCURRENCY, ...HTTP, ...LOCK_LUA, ...CONCURRENCY_LUA])
      expect(text.includes(marker), marker).toBe(true);
  }, 30_000);
});
