// Builds the Lua scripts the engine sends and computes their SHA-1s, so no SHA is ever typed by hand.
//
// Each lua/algorithms/<file>.lua is its algorithm's one source, cut at its `-- #<section>` lines:
//   state     the state's format and formulas, shared by every path (local functions and constants)
//   check     the limiter script's check and commit (registers algorithms.<name>)
//   one-rule  (optional) the body of a script of its own for one rule, no reservation
//   one-rule-overrides  (optional) the same that also reads the identifier's stored override
//   refund    (optional) registers refund.<name>, for the refund script
//   settle    registers settle.<name>, for the settle script
// From them it builds:
//   limiter          a head (`local A, K, n = ARGV, KEYS, #KEYS`), lua/prelude.lua, then each
//                    algorithm's state and check inside `if several or A[3] == "<name>" then ... end`,
//                    then lua/dispatcher.lua;
//   limiterNestedOverrides  the same with lua/nested_overrides.lua as its head (rules keyed by several fields)
//   limiterOverrides the same with lua/overrides.lua as its head and the dispatcher wrapped in a
//                    function, whose answer gains what a stored override applied;
//   oneRule.<name>   the algorithm's state, then its one-rule body;
//   <name>OneRuleOverrides  the algorithm's state, then its one-rule-overrides body; for an algorithm
//                    with a one-rule section and none such, its state, then lua/one_rule_overrides.lua
//                    with the one-rule section inline where its `-- #one-rule` line stands;
//                    (every script that reads a stored override has lua/override.lua, the one reader,
//                    where its `-- #override` line stands)
//   refund           lua/refund.lua with each algorithm's state and refund, in a `do ... end` of its
//                    own, where its `-- #refunds` line stands;
//   settle           lua/settle.lua with each algorithm's state, refund and settle, in a
//                    `do ... end` of its own, where its `-- #settles` line stands;
//   every other lua/*.lua (lock, concurrency) is a script as it stands.
// The state sections' integer constants (`local NAME = 60000`, `local NAME = 2 ^ 25`) are handed to
// the engine as ALGORITHM_CONSTANTS, so each is defined once. The constants every script and the engine
// share (SHARED below) are defined here, put at the head of the limiter scripts (the one-rule scripts
// answer their own integers), and handed to the engine as SCRIPT_CONSTANTS.
// Writes src/engine/generated/scripts.ts, one export per script (ignored by git; rebuilt by build, test, typecheck, prepare).
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const luaDir = join(root, "lua");
const read = (file) => readFileSync(join(luaDir, file), "utf8");
const SECTIONS = ["state", "check", "one-rule", "one-rule-overrides", "refund", "settle"];
/** What the scripts and the engine share: NEVER, the retry of a cost that is never admitted. */
const SHARED = { NEVER: -1 };
const shared = Object.entries(SHARED)
  .map(([name, value]) => `local ${name} = ${value}\n`)
  .join("");

/** An algorithm file's sections, by name (the text before the first one is its header). */
function sections(file) {
  const out = {};
  let current;
  for (const line of read(file).split("\n")) {
    const marker = /^-- #([\w-]+)\s*$/.exec(line);
    // `-- #override` is where lua/override.lua goes, not a section
    if (marker && marker[1] !== "override") {
      current = marker[1];
      if (!SECTIONS.includes(current)) throw new Error(`lua/${file}: unknown section -- #${current}`);
      if (out[current] !== undefined) throw new Error(`lua/${file}: two -- #${current} sections`);
      out[current] = "";
    } else if (current !== undefined) {
      out[current] += `${line}\n`;
    }
  }
  for (const needed of ["state", "check", "settle"]) {
    if (out[needed] === undefined) throw new Error(`lua/${file} has no -- #${needed} section`);
  }
  return out;
}

const algorithms = readdirSync(join(luaDir, "algorithms"))
  .filter((file) => file.endsWith(".lua"))
  .sort()
  .map((file) => {
    const parts = sections(join("algorithms", file));
    const names = [...parts.check.matchAll(/^algorithms\.(\w+) = function/gm)].map((m) => m[1]);
    if (names.length !== 1)
      throw new Error(`lua/algorithms/${file} must define exactly one algorithms.<name>`);
    const constants = {};
    for (const [, name, base, power] of parts.state.matchAll(
      /^local ([A-Z][A-Z_]*) = (\d+)(?: \^ (\d+))?$/gm,
    )) {
      constants[name] = power === undefined ? Number(base) : Number(base) ** Number(power);
      if (!Number.isSafeInteger(constants[name]))
        throw new Error(`lua/algorithms/${file}: ${name} is no exact integer`);
    }
    return { name: names[0], file, ...parts, constants };
  });

// Comments and indentation stay in lua/ for readers; the wire copy drops them (EVAL sends it all).
const strip = (source) =>
  source
    .split("\n")
    .map((line) => line.trim())
    .filter((line) => line !== "" && !line.startsWith("--"))
    .join("\n");
const sha1 = (text) => createHash("sha1").update(text).digest("hex");
const script = (text) => {
  const stripped = strip(text);
  // ASCII only: the engine names the scripts it builds from these (src/engine/sha1.ts) a byte per
  // character, as Redis names them from their UTF-8
  const wide = [...stripped].findIndex((c) => c.charCodeAt(0) > 127);
  if (wide >= 0) throw new Error(`a script's text is not ASCII: ${stripped.slice(wide - 40, wide + 10)}`);
  return { text: stripped, sha1: sha1(stripped) };
};

const checks = algorithms.map((a) => `if several or A[3] == "${a.name}" then\n${a.state}${a.check}end\n`);
const limiter = [
  `${shared}local A, K, n = ARGV, KEYS, #KEYS`,
  read("prelude.lua"),
  ...checks,
  read("dispatcher.lua"),
].join("\n");
// lua/override.lua, the one reader of a stored override, goes where a script's `-- #override` line
// stands (inside the branch that runs only when one is stored: a call with none creates no closure).
// Its two readers, of n rules (the function override) and of one (inline, after `-- #one`): a script
// that calls override() gets the first, any other the second.
const [override, overrideOne] = read("override.lua").split(/^-- #one\n/m);
const withOverride = (text, file) => {
  if (!/^-- #override$/m.test(text)) throw new Error(`${file} has no -- #override line`);
  const reader = /\boverride\(/.test(strip(text)) ? override : overrideOne;
  return text.replace(/^-- #override$/m, () => reader);
};
// The same decisions after a head that reads stored overrides: lua/overrides.lua's (one identifier), or
// lua/nested_overrides.lua's (rules keyed by several fields, an override per field); the dispatcher,
// wrapped, answers a table to which what a stored override applied is added.
const afterOverrides = (file) =>
  [
    shared + withOverride(read(file), `lua/${file}`),
    read("prelude.lua"),
    ...checks,
    `local function decide()\n${read("dispatcher.lua")}\nend`,
    "local out = decide()\nif answer then out[#out + 1] = answer end\nreturn out",
  ].join("\n");
const limiterOverrides = afterOverrides("overrides.lua");
const limiterNestedOverrides = afterOverrides("nested_overrides.lua");

const refundFile = read("refund.lua");
if (!/^-- #refunds$/m.test(refundFile)) throw new Error("lua/refund.lua has no -- #refunds line");
const refunds = algorithms
  .filter((a) => a.refund !== undefined)
  .map((a) => `do\n${a.state}${a.refund}end\n`)
  .join("");

const settleFile = read("settle.lua");
if (!/^-- #settles$/m.test(settleFile)) throw new Error("lua/settle.lua has no -- #settles line");
const settles = algorithms.map((a) => `do\n${a.state}${a.refund ?? ""}${a.settle}end\n`).join("");

const scripts = {
  limiter: script(limiter),
  limiterOverrides: script(limiterOverrides),
  limiterNestedOverrides: script(limiterNestedOverrides),
  refund: script(refundFile.replace(/^-- #refunds$/m, refunds)),
  settle: script(settleFile.replace(/^-- #settles$/m, () => settles)),
};
for (const file of readdirSync(luaDir).sort()) {
  if (
    !file.endsWith(".lua") ||
    [
      "prelude.lua",
      "dispatcher.lua",
      "refund.lua",
      "settle.lua",
      "overrides.lua",
      "nested_overrides.lua",
      "override.lua",
      "one_rule_overrides.lua",
    ].includes(file)
  )
    continue;
  const name = file.slice(0, -4).replace(/[-_](\w)/g, (_, c) => c.toUpperCase());
  scripts[name] = script(read(file));
}
const oneRule = Object.fromEntries(
  algorithms.filter((a) => a["one-rule"] !== undefined).map((a) => [a.name, script(a.state + a["one-rule"])]),
);

// The state a body needs: all of it when the body calls any of its functions, else its constants alone
// (each local function is a closure made on every run of the script).
const stateFor = (a, body) => {
  const functions = [...a.state.matchAll(/^local function (\w+)/gm)].map((m) => m[1]);
  const code = strip(body);
  if (functions.some((name) => new RegExp(`\\b${name}\\(`).test(code))) return a.state;
  return a.state
    .split("\n")
    .filter((line) => /^local [A-Z][A-Z_]* = /.test(line))
    .map((line) => `${line}\n`)
    .join("");
};
// What lua/override.lua's one-rule reader reads of the algorithm: its name and its custom line's
// pattern, to the line's end.
const custom = (a) => `local ALGORITHM, CUSTOM = "${a.name}", "^!${a.name} (%d+) (%d+) (%d+)%f[\\n%z]"\n`;
const oneRuleOverrides = read("one_rule_overrides.lua");
if (!/^-- #one-rule$/m.test(oneRuleOverrides))
  throw new Error("lua/one_rule_overrides.lua has no -- #one-rule line");
for (const a of algorithms) {
  if (a["one-rule-overrides"] !== undefined) {
    const body = withOverride(a["one-rule-overrides"], `lua/algorithms/${a.file}`);
    scripts[`${a.name}OneRuleOverrides`] = script(`${stateFor(a, body)}${custom(a)}${body}`);
  } else if (a["one-rule"] !== undefined) {
    // the one-rule section inline: its KEYS[1] and ARGV[3..5] are the locals KEY and ARG3..ARG5, the
    // call's or those a stored override applies; each `return <r>` sets `result` and leaves the
    // `repeat ... until true` around the section (a loop of its own would be left instead: none may be)
    const where = `lua/algorithms/${a.file}: its one-rule section`;
    const section = a["one-rule"]
      .replace(/\bKEYS\[1\]/g, "KEY")
      .replace(/\bARGV\[([3-5])\]/g, "ARG$1")
      .split("\n")
      .map((line) => {
        if (line.trim().startsWith("--") || !/\breturn\b/.test(line)) return line;
        const ret = /^(.*?)\breturn (.+?)( end)?$/.exec(line);
        if (!ret || line.includes("--")) throw new Error(`${where}: cannot inline "${line.trim()}"`);
        return `${ret[1]}result = ${ret[2]} break${ret[3] ?? ""}`;
      })
      .join("\n");
    const code = strip(section);
    if (/\b(KEYS|ARGV\[(?![12]\]))/.test(code))
      throw new Error(`${where} may read only KEYS[1] and ARGV[1..5]`);
    if (/\b(for|while|repeat|function|result)\b/.test(strip(a["one-rule"])))
      throw new Error(`${where} is inlined: it may have no loop, function or local named result`);
    const body = oneRuleOverrides.replace(/^-- #one-rule$/m, () => section);
    scripts[`${a.name}OneRuleOverrides`] = script(
      `${a.state}${custom(a)}${withOverride(body, "lua/one_rule_overrides.lua")}`,
    );
  }
}
const entry = ({ text, sha1 }) => `{ text: ${JSON.stringify(text)}, sha1: ${JSON.stringify(sha1)} }`;
// One export per script, so a bundle keeps only the scripts its code uses (a Lock-only bundle carries
// no limiter script); SCRIPTS and ONE_RULE_SCRIPTS gather them for tests and benchmarks.
const constant = (name) => name.replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
const out = join(root, "src", "engine", "generated", "scripts.ts");
mkdirSync(dirname(out), { recursive: true });
const lines = [
  "// Generated by scripts/build-lua.mjs from lua/**/*.lua. Do not edit.",
  "// Each script: its text (for SCRIPT LOAD / EVAL) and SHA-1 (for EVALSHA).",
  ...Object.entries(scripts).map(([name, s]) => `export const ${constant(name)} = ${entry(s)} as const;`),
  "/** The one-rule script of each algorithm that has one (lua/algorithms/*.lua, its one-rule section). */",
  ...Object.entries(oneRule).map(
    ([name, s]) => `export const ${constant(name)}_ONE_RULE = ${entry(s)} as const;`,
  ),
  "/** Every script the engine sends, by name. */",
  "export const SCRIPTS = {",
  ...Object.keys(scripts).map((name) => `  ${name}: ${constant(name)},`),
  "} as const;",
  "/** The one-rule scripts, by algorithm. */",
  "export const ONE_RULE_SCRIPTS = {",
  ...Object.keys(oneRule).map((name) => `  ${name}: ${constant(name)}_ONE_RULE,`),
  "} as const;",
  "/** Every algorithm of the limiter script. */",
  `export const SCRIPT_ALGORITHMS = ${JSON.stringify(algorithms.map((a) => a.name))} as const;`,
  "/** What every script and the engine share (scripts/build-lua.mjs). */",
  `export const SCRIPT_CONSTANTS = ${JSON.stringify(SHARED).replace(/"(\w+)":/g, "$1: ")} as const;`,
  "/** Each algorithm's integer constants, as its state section defines them. */",
  "export const ALGORITHM_CONSTANTS = {",
  ...algorithms.map(
    (a) =>
      `  ${a.name}: {${Object.entries(a.constants)
        .map(([name, value]) => ` ${name}: ${value}`)
        .join(",")}${Object.keys(a.constants).length > 0 ? " " : ""}},`,
  ),
  "} as const;",
  "",
];
// Written only when it changed, and atomically: several runs may build at once.
const text = lines.join("\n");
if (!existsSync(out) || readFileSync(out, "utf8") !== text) {
  const tmp = `${out}.${process.pid}.tmp`;
  writeFileSync(tmp, text);
  renameSync(tmp, out);
}
