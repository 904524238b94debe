/**
 * Lua shebang flags that this Redis does not know.
 *
 * Upstash accepts script flags that open-source Redis does not: @upstash/ratelimit's scripts begin
 * with `#!lua flags=allow-key-locking`, which Redis 7.0 rejects ("Unexpected flag in script shebang").
 * For EVAL, EVAL_RO and SCRIPT LOAD the bridge drops the flags Redis does not know from the first line
 * (keeping no-writes, allow-oom, allow-stale, no-cluster and allow-cross-slot-keys) before sending.
 *
 * Rewriting changes the script's SHA-1, while clients call EVALSHA with the SHA of the text they hold
 * (ratelimit: EVALSHA first, EVAL on NOSCRIPT). So the bridge remembers original SHA → rewritten SHA
 * and translates EVALSHA, EVALSHA_RO and SCRIPT EXISTS, and SCRIPT LOAD answers with the original SHA.
 * A client's second call then hits Redis's script cache, as it would on Upstash. Only the first line
 * changes, so Lua error line numbers stay right.
 */
import { createHash } from "node:crypto";
import { type Arg, RedisError, type Reply } from "./resp.js";

const SUPPORTED_FLAGS = new Set([
  "no-writes",
  "allow-oom",
  "allow-stale",
  "no-cluster",
  "allow-cross-slot-keys",
]);

/** Bound on remembered scripts, so clients sending ever-new scripts cannot grow memory without end. */
const MAX_SCRIPTS = 1000;

/** Hex SHA-1 of the script's UTF-8 bytes, as Redis computes it. */
function sha1(script: string): string {
  return createHash("sha1").update(script, "utf8").digest("hex");
}

/**
 * Drops the shebang flags Redis does not know; returns `script` itself when nothing was dropped.
 *
 * @example
 * stripUnknownShebangFlags("#!lua flags=no-writes,allow-key-locking\nreturn 1");
 * // "#!lua flags=no-writes\nreturn 1"
 */
export function stripUnknownShebangFlags(script: string): string {
  if (!script.startsWith("#!lua")) return script;
  const newline = script.indexOf("\n");
  if (newline < 0) return script;
  const cr = script[newline - 1] === "\r" ? "\r" : "";
  const words = script
    .slice(2, newline - cr.length)
    .split(/[ \t]+/)
    .filter((w) => w !== "");
  if (words[0] !== "lua") return script;
  let changed = false;
  for (let i = 1; i < words.length; i++) {
    const word = words[i]!;
    if (!word.startsWith("flags=")) continue;
    const flags = word
      .slice(6)
      .split(",")
      .filter((f) => f !== "");
    const kept = flags.filter((f) => SUPPORTED_FLAGS.has(f));
    if (kept.length === flags.length) continue;
    changed = true;
    words[i] = `flags=${kept.join(",")}`;
  }
  return changed ? `#!${words.join(" ")}${cr}${script.slice(newline)}` : script;
}

/**
 * Per-bridge memory of rewritten scripts: rewrites commands on the way in, fixes replies on the way out.
 *
 * @example
 * const scripts = new ScriptRegistry();
 * scripts.prepare(["EVAL", "#!lua flags=allow-key-locking\nreturn 1", "0"]);
 * // ["EVAL", "#!lua flags=\nreturn 1", "0"]; EVALSHA <sha of the original> now runs the rewritten one
 */
export class ScriptRegistry {
  /** Original script text → text sent to Redis (only for scripts that needed a rewrite). */
  private readonly texts = new Map<string, string>();
  /** Original SHA-1 → SHA-1 of the rewritten text. */
  private readonly shas = new Map<string, string>();

  /** The command to send in place of `cmd`: the same array unless it is a script command to rewrite. */
  prepare(cmd: readonly Arg[]): readonly Arg[] {
    const name = cmd[0];
    if (typeof name !== "string" || name.length < 4 || name.length > 10) return cmd;
    const first = name.charCodeAt(0) | 0x20;
    if (first !== 0x65 && first !== 0x73) return cmd; // neither e… nor s…
    switch (name.toLowerCase()) {
      case "eval":
      case "eval_ro":
        return this.replaceArg(cmd, 1, (s) => this.rewrite(s));
      case "evalsha":
      case "evalsha_ro":
        return this.shas.size === 0 ? cmd : this.replaceArg(cmd, 1, (s) => this.translate(s));
      case "script":
        return this.prepareScript(cmd);
      default:
        return cmd;
    }
  }

  /** SCRIPT LOAD answers with the SHA of the script the client sent, not of the rewritten one. */
  fixReply(cmd: readonly Arg[], reply: Reply): Reply {
    if (reply instanceof RedisError || !isScriptSub(cmd, "load") || typeof cmd[2] !== "string") return reply;
    return cmd[2] === this.rewrite(cmd[2]) ? reply : Buffer.from(sha1(cmd[2]), "latin1");
  }

  private prepareScript(cmd: readonly Arg[]): readonly Arg[] {
    if (isScriptSub(cmd, "load")) return this.replaceArg(cmd, 2, (s) => this.rewrite(s));
    if (isScriptSub(cmd, "exists") && this.shas.size > 0) {
      let out = cmd;
      for (let i = 2; i < cmd.length; i++) out = this.replaceArg(out, i, (s) => this.translate(s));
      return out;
    }
    return cmd;
  }

  private rewrite(script: string): string {
    const known = this.texts.get(script);
    if (known !== undefined) return known;
    const rewritten = stripUnknownShebangFlags(script);
    if (rewritten === script) return script;
    remember(this.texts, script, rewritten);
    remember(this.shas, sha1(script), sha1(rewritten));
    return rewritten;
  }

  private translate(sha: string): string {
    return this.shas.get(sha.toLowerCase()) ?? sha;
  }

  private replaceArg(cmd: readonly Arg[], i: number, map: (s: string) => string): readonly Arg[] {
    const arg = cmd[i];
    if (typeof arg !== "string") return cmd;
    const next = map(arg);
    if (next === arg) return cmd;
    const copy = cmd.slice();
    copy[i] = next;
    return copy;
  }
}

function isScriptSub(cmd: readonly Arg[], sub: string): boolean {
  const name = cmd[0];
  const arg = cmd[1];
  return (
    typeof name === "string" &&
    name.toLowerCase() === "script" &&
    typeof arg === "string" &&
    arg.toLowerCase() === sub
  );
}

function remember(map: Map<string, string>, key: string, value: string): void {
  if (map.size >= MAX_SCRIPTS) map.delete(map.keys().next().value as string);
  map.set(key, value);
}
