// A hold's `ttl`: how long a Lock's hold or a Concurrency slot lasts unless renewed or given back.
// Lock and Concurrency called it `lease`, the word the Limiter keeps for units an isolate holds. Code
// written with the old name still runs: it is read as `ttl`, with one warning per process.

let warned = false;

/**
 * `options.ttl`, or `options.lease` (its old name) with a warning once per process. Throws when both are
 * given. `where` names the call in the warning ("Lock", "lock.acquire", ...).
 *
 * @example
 * const ttl = ttlOption(options, "Lock"); // "30s", 500 or undefined
 */
export function ttlOption(options: { ttl?: number | string }, where: string): number | string | undefined {
  const old = (options as { lease?: number | string }).lease;
  if (old === undefined) return options.ttl;
  if (options.ttl !== undefined) {
    throw new Error("ttl: given twice, as ttl and as lease (its old name): keep ttl only");
  }
  renamed(where);
  return old;
}

/** Says once per process that `lease` is now `ttl`. */
export function renamed(where: string): void {
  if (warned) return;
  warned = true;
  console.warn(
    `edgelimit: ${where}: the option \`lease\` is now \`ttl\` (the same duration); rename it, the old name will go`,
  );
}
