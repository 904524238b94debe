// The `settle` option's checks, shared by the Hono middleware (its `settle` option) and the Worker's
// config (a route's `settle`): one message for one mistake, wherever it is written.

import { describe } from "../engine/duration.js";
import type { Issue } from "../engine/validate.js";

// RFC 9110 token: what a header name may be.
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/**
 * Every problem with a route's `settle` object, each at its path inside it ([] for the object itself);
 * none when it is one.
 */
export function checkUsageSource(value: unknown): Issue[] {
  const example = 'an object such as { "header": "x-usage" } or { "usage": "openai" }';
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    return [{ path: [], message: `must be ${example}, got ${describe(value)}` }];
  }
  const record = value as Record<string, unknown>;
  const issues: Issue[] = [];
  for (const field of Object.keys(record)) {
    if (field !== "header" && field !== "expose" && field !== "usage") {
      issues.push({ path: [field], message: "is not a known field; use header (and expose) or usage" });
    }
  }
  const hasHeader = "header" in record;
  const hasUsage = "usage" in record;
  if (hasHeader === hasUsage) {
    issues.push({ path: [], message: `must give exactly one of header and usage: ${example}` });
  }
  if (hasHeader && (typeof record.header !== "string" || !TOKEN.test(record.header))) {
    issues.push({
      path: ["header"],
      message: `must be a header name such as "x-usage" (letters, digits and !#$%&'*+.^_\`|~-), got ${describe(record.header)}`,
    });
  }
  if (hasUsage && record.usage !== "openai") {
    issues.push({ path: ["usage"], message: `must be "openai", got ${describe(record.usage)}` });
  }
  if ("expose" in record) {
    if (!hasHeader) issues.push({ path: ["expose"], message: "applies only with header" });
    else if (typeof record.expose !== "boolean") {
      issues.push({ path: ["expose"], message: `must be true or false, got ${describe(record.expose)}` });
    }
  }
  return issues;
}
