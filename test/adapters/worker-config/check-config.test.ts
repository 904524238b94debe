// `npm run check-config`, run as a user runs it: the script in a child process, on files in a temp dir.
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

const script = join(import.meta.dirname, "../../../scripts/check-config.mjs");
const dir = mkdtempSync(join(tmpdir(), "check-config-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function check(name: string | undefined, text?: string, input?: string) {
  const args = [script];
  if (name !== undefined) {
    const path = name === "-" ? "-" : join(dir, name);
    if (text !== undefined) writeFileSync(path, text);
    args.push(path);
  }
  const run = spawnSync(process.execPath, args, { cwd: dir, encoding: "utf8", input, timeout: 30_000 });
  return { code: run.status, out: run.stdout, err: run.stderr };
}

const good = {
  origin: "https://api.example.com",
  routes: [
    {
      name: "login",
      match: { path: "/login", methods: ["POST"] },
      key: "ip",
      rules: { perMinute: { algorithm: "gcra", limit: 5, period: "1m" } },
    },
  ],
};

// One rule with three mistakes, and a cost another rule can never hold.
const BAD_JSONC = `{
  // the config reference (docs/worker.md) is JSONC: comments and trailing commas
  "origin": "https://api.example.com", /* block comment, "quoted" */
  "routes": [
    {
      "name": "api", "key": "header:x-api-key", "cost": 30,
      "rules": {
        "bad": { "algorithm": "tokenBucket", "capacity": 0, "refillRate": 1.5, "interval": "1 week", },
        "burst": { "algorithm": "gcra", "limit": 10, "period": "1s", "burst": 20 },
      },
    },
  ],
}
`;
const BAD_ERRORS = [
  "  routes[0].rules.bad.capacity: must be a positive whole number, got 0",
  "  routes[0].rules.bad.refillRate: must be a positive whole number, got 1.5",
  '  routes[0].rules.bad.interval: "1 week" is not a duration; use milliseconds or a string like "500ms", "10s", "1m", "1h", "1d"',
  '  routes[0].cost: 30 can never be admitted: rule "burst" holds at most 20 (make the cost at most 20, or raise the rule\'s limit)',
];

describe("check-config", () => {
  it("reads .json", () => {
    const run = check("good.json", JSON.stringify(good));
    expect([run.code, run.out.trim()]).toEqual([
      0,
      `OK: ${join(dir, "good.json")}: 1 route (login), 0 allowed and 0 denied ranges`,
    ]);
  });

  it("says when analytics are on, with the fields given", () => {
    const on = check("on.json", JSON.stringify({ ...good, analytics: true }));
    expect([on.code, on.out.trim()]).toEqual([
      0,
      `OK: ${join(dir, "on.json")}: 1 route (login), 0 allowed and 0 denied ranges, analytics on`,
    ]);
    const tuned = check("tuned.json", JSON.stringify({ ...good, analytics: { flushEvery: "5s", top: 20 } }));
    expect([tuned.code, tuned.out.trim()]).toEqual([
      0,
      `OK: ${join(dir, "tuned.json")}: 1 route (login), 0 allowed and 0 denied ranges, analytics on (flushEvery 5000 ms, top 20)`,
    ]);
    const bad = check("bad-analytics.json", JSON.stringify({ ...good, analytics: { top: 0 } }));
    expect([bad.code, bad.err.trim()]).toEqual([
      1,
      `${join(dir, "bad-analytics.json")}: 1 problem\n  analytics.top: must be a whole number from 1 to 100, got 0`,
    ]);
  });

  it("reads .jsonc (comments, trailing commas) and reports every error of a rule, and an impossible cost", () => {
    const run = check("bad.jsonc", BAD_JSONC);
    expect(run.code).toBe(1);
    expect(run.err.trimEnd().split("\n")).toEqual([`${join(dir, "bad.jsonc")}: 4 problems`, ...BAD_ERRORS]);
  });

  it("checks plans, overrides and adminPath, naming each field at fault", () => {
    const route = {
      ...good.routes[0],
      plans: { pro: { perMinute: { limit: 0 } }, gold: { perHour: { limit: 9 } } },
      overrides: { maxStale: "soon" },
    };
    const run = check("plans.json", JSON.stringify({ ...good, routes: [route], adminPath: "/Admin/" }));
    expect(run.code).toBe(1);
    expect(run.err.trimEnd().split("\n")).toEqual([
      `${join(dir, "plans.json")}: 4 problems`,
      '  routes[0].overrides.maxStale: "soon" is not a duration; use milliseconds or a string like "500ms", "10s", "1m", "1h", "1d"',
      '  adminPath: must be a lowercase path such as "/_edgelimit" (a-z 0-9 _ . ~ - segments, no trailing "/"), got "/Admin/"',
      "  routes[0].plans.pro.perMinute.limit: must be a positive whole number, got 0",
      "  routes[0].plans.gold.perHour: not a rule; the rules are perMinute",
    ]);
    const fixed = { ...route, plans: { pro: { perMinute: { limit: 50 } } }, overrides: true };
    expect(check("plans-ok.json", JSON.stringify({ ...good, routes: [fixed] })).code).toBe(0);
  });

  it("checks regions, naming each field at fault, and lists the secret each database's token is read from", () => {
    const databases = {
      eu: {
        url: "https://eu.example.com",
        tokenSecret: "EDGELIMIT_REGION_EU_TOKEN",
        match: { continent: ["EU"] },
      },
      ap: {
        url: "https://ap.example.com",
        tokenSecret: "EDGELIMIT_REGION_AP_TOKEN",
        match: { colo: ["SIN"] },
      },
    };
    const regions = { pool: { max: 500, ttl: "5s" }, databases };
    const ok = check("regions.json", JSON.stringify({ ...good, regions }));
    expect([ok.code, ok.out.trim().split("\n")]).toEqual([
      0,
      [
        `OK: ${join(dir, "regions.json")}: 1 route (login), 0 allowed and 0 denied ranges`,
        "  2 regions: eu (token in EDGELIMIT_REGION_EU_TOKEN), ap (token in EDGELIMIT_REGION_AP_TOKEN); requests no region claims go to home alone",
      ],
    ]);
    const withDefault = check(
      "regions-default.json",
      JSON.stringify({ ...good, regions: { ...regions, default: "ap" } }),
    );
    expect(withDefault.out.trim().split("\n")[1]).toBe(
      "  2 regions: eu (token in EDGELIMIT_REGION_EU_TOKEN), ap (default; token in EDGELIMIT_REGION_AP_TOKEN); requests no region claims go to ap",
    );
    const bad = {
      ...regions,
      databases: { ...databases, ap: { ...databases.ap, match: { colo: ["SIN", "sin"] } } },
    };
    const run = check("regions-bad.json", JSON.stringify({ ...good, regions: bad }));
    expect(run.code).toBe(1);
    expect(run.err.trimEnd().split("\n")).toEqual([
      `${join(dir, "regions-bad.json")}: 1 problem`,
      '  regions.databases.ap.match.colo[1]: "SIN" is already claimed earlier in this list',
    ]);
  });

  it("keeps a // or /* inside a string, and reads a comment-free .jsonc as JSON", () => {
    const text = JSON.stringify({ ...good, routes: [{ ...good.routes[0], name: "a//b" }] });
    const run = check("strings.jsonc", `${text.slice(0, -1)}, /* end */ }`);
    expect(run.code).toBe(1);
    expect(run.err).toContain('routes[0].name: must be 1-64 characters of A-Z a-z 0-9 _ . -, got "a//b"');
  });

  it("refuses comments in .json, saying that .jsonc takes them", () => {
    const run = check("bad.json", BAD_JSONC);
    expect(run.code).toBe(1);
    expect(run.err).toMatch(/not valid JSON: .*\(comments and trailing commas need a \.jsonc file\)/);
  });

  // wrangler reads its own file (as `wrangler deploy` will): a few seconds each on a busy machine.
  it("reads wrangler.toml's [vars] EDGELIMIT_CONFIG, and that alone by default", { timeout: 90_000 }, () => {
    const config = JSON.stringify({ ...good, routes: [{ ...good.routes[0], cost: 6 }] }, null, 2);
    const toml = `name = "x"\nmain = "src/index.ts"\ncompatibility_date = "2026-05-01"\n\n[vars]\nOTHER = "1"\nEDGELIMIT_CONFIG = '''\n${config}\n'''\n`;
    const run = check("wrangler.toml", toml);
    expect(run.code).toBe(1);
    const expected = [
      `${join(dir, "wrangler.toml")} [vars] EDGELIMIT_CONFIG: 1 problem`,
      '  routes[0].cost: 6 can never be admitted: rule "perMinute" holds at most 5 (make the cost at most 5, or raise the rule\'s limit)',
    ];
    expect(run.err.trimEnd().split("\n")).toEqual(expected);
    // no FILE: wrangler.toml in the repository (the demo config there is valid)
    const byDefault = check(undefined);
    expect([byDefault.code, byDefault.out]).toEqual([
      0,
      expect.stringMatching(/^OK: .*wrangler\.toml \[vars\] EDGELIMIT_CONFIG: /),
    ]);
  });

  it("reads EDGELIMIT_CONFIG written as a TOML table, as the Worker receives it", { timeout: 60_000 }, () => {
    const toml = [
      'name = "x"',
      "[vars.EDGELIMIT_CONFIG]",
      'origin = "https://api.example.com"',
      "[[vars.EDGELIMIT_CONFIG.routes]]",
      'name = "login"',
      'key = "ip"',
      "cost = 2",
      "[vars.EDGELIMIT_CONFIG.routes.rules.perMinute]",
      'algorithm = "gcra"',
      "limit = 0",
      'period = "1m"',
      "",
    ].join("\n");
    const run = check("table.toml", toml);
    expect(run.code).toBe(1);
    expect(run.err.trimEnd().split("\n")).toEqual([
      `${join(dir, "table.toml")} [vars] EDGELIMIT_CONFIG: 1 problem`,
      "  routes[0].rules.perMinute.limit: must be a positive whole number, got 0",
    ]);
  });

  it("says what is missing when wrangler.toml has no EDGELIMIT_CONFIG, and reads stdin as JSONC", {
    timeout: 60_000,
  }, () => {
    const missing = check("staging.toml", 'name = "x"\n[vars]\nOTHER = "1"\n'); // any .toml is a wrangler file
    expect(missing.code).toBe(2);
    expect(missing.err).toMatch(/\[vars\] EDGELIMIT_CONFIG is not set/);
    const stdin = check("-", undefined, `// from a pipe\n${JSON.stringify(good)}`);
    expect([stdin.code, stdin.out.trim()]).toEqual([
      0,
      "OK: stdin: 1 route (login), 0 allowed and 0 denied ranges",
    ]);
  });
});
