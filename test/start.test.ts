// `npm start` as a user runs it: spawned through npm, stopped by signalling npm's pid (or by killing the
// script outright), then every process of its tree must be gone and every port it served closed.
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, inject, it } from "vitest";

const root = join(import.meta.dirname, "..");
const dir = mkdtempSync(join(tmpdir(), "edgelimit-start-test-"));
const started: ChildProcess[] = [];

afterAll(() => {
  for (const child of started) if (child.exitCode === null) child.kill("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
});

/** The environment of a user with no Redis configured (the test runner may have its own vars). */
function userEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env = { ...process.env, ...extra };
  for (const name of ["UPSTASH_REDIS_REST_URL", "UPSTASH_REDIS_REST_TOKEN", "PORT"]) {
    if (!(name in extra)) delete env[name];
  }
  return env;
}

interface Run {
  npm: ChildProcess;
  output: () => string;
  /** npm has exited and its output is all read (its pipes closed: a child still holding them delays it). */
  exited: Promise<number | null>;
  /** npm has exited. */
  ended: Promise<unknown>;
}

function npmStart(args: string[], env: NodeJS.ProcessEnv): Run {
  const npm = spawn("npm", ["start", "--silent", ...(args.length ? ["--", ...args] : [])], {
    cwd: root,
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  started.push(npm);
  let output = "";
  npm.stdout?.on("data", (chunk) => {
    output += chunk;
  });
  npm.stderr?.on("data", (chunk) => {
    output += chunk;
  });
  const exited = new Promise<number | null>((resolve) => npm.once("close", (code) => resolve(code)));
  const ended = new Promise((resolve) => npm.once("exit", resolve));
  return { npm, output: () => output, exited, ended };
}

async function until<T>(what: string, probe: () => T | undefined, timeout = 90_000): Promise<T> {
  const deadline = Date.now() + timeout;
  for (;;) {
    const value = probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

function stat(pid: number): { state: string; ppid: number } | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = text.slice(text.lastIndexOf(")") + 2).split(" ");
    return { state: fields[0] ?? "", ppid: Number(fields[1]) };
  } catch {
    return undefined;
  }
}

function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ").trim();
  } catch {
    return "";
  }
}

/** Every process below `pid`, by walking /proc. */
function descendants(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const name of readdirNumbers("/proc")) {
    const info = stat(name);
    if (info) children.set(info.ppid, [...(children.get(info.ppid) ?? []), name]);
  }
  const out: number[] = [];
  const walk = (p: number) => {
    for (const child of children.get(p) ?? []) {
      out.push(child);
      walk(child);
    }
  };
  walk(pid);
  return out;
}

function readdirNumbers(path: string): number[] {
  return readdirSync(path)
    .filter((name) => /^\d+$/.test(name))
    .map(Number);
}

const alive = (pid: number) => {
  const info = stat(pid);
  return info !== undefined && info.state !== "Z";
};

function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, "127.0.0.1");
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

/** A config file with one route (a file is read faster than wrangler.toml, which loads wrangler to read). */
function smallConfig(): string {
  const file = join(dir, "small.json");
  const route = { name: "all", key: "global", rules: { m: { algorithm: "gcra", limit: 100, period: "1m" } } };
  writeFileSync(file, JSON.stringify({ origin: "https://api.example.com", routes: [route] }));
  return file;
}

/** Starts `npm start`, waits for its banner, and returns its ports and its whole process tree. */
async function startAndWait(args: string[] = []) {
  const run = npmStart(args, userEnv());
  const url = await until("the banner", () => {
    const match = /edgelimit is running at (http:\/\/127\.0\.0\.1:(\d+))/.exec(run.output());
    if (run.npm.exitCode !== null) throw new Error(`npm start exited early:\n${run.output()}`);
    return match?.[1];
  }).catch((error) => {
    throw new Error(`${error.message}; its output:\n${run.output()}`);
  });
  const ports = [...run.output().matchAll(/(?:redis|http):\/\/127\.0\.0\.1:(\d+)/g)].map((m) => Number(m[1]));
  const tree = descendants(run.npm.pid as number);
  const names = tree.map(cmdline);
  // The whole cast is there before it is stopped: otherwise "all gone" would prove nothing.
  for (const part of ["scripts/start.mjs", "redis-server", "wrangler", "workerd"]) {
    expect(
      names.some((name) => name.includes(part)),
      `${part} among ${names.join("\n")}`,
    ).toBe(true);
  }
  expect(new Set(ports).size).toBeGreaterThanOrEqual(4); // worker, redis-server, bridge, echo origin
  // Its private directory (wrangler names the env file in it): deleted once it stops.
  const temp = /\/(edgelimit-dev-[A-Za-z0-9]+)\//.exec(run.output())?.[1];
  expect(temp).toBeDefined();
  return { run, url, ports: [...new Set(ports)], tree, temp: join(tmpdir(), temp as string) };
}

async function expectAllGone({ tree, ports, temp }: { tree: number[]; ports: number[]; temp: string }) {
  await until("every process of the tree to exit", () => (tree.some(alive) ? undefined : true), 20_000).catch(
    () => {
      throw new Error(`still running: ${tree.filter(alive).map((pid) => `${pid} ${cmdline(pid)}`)}`);
    },
  );
  for (const port of ports) expect(await portOpen(port), `port ${port}`).toBe(false);
  await until(`${temp} to be deleted`, () => (existsSync(temp) ? undefined : true), 5000);
}

describe("npm start", () => {
  // Each case below starts the whole stack (wrangler, workerd, redis-server): run them side by side.
  it("exits 1 before starting anything when the config is wrong, naming every field at fault", async () => {
    const file = join(dir, "bad.jsonc");
    writeFileSync(
      file,
      `{
        // a comment, and trailing commas: JSONC
        "origin": "https://api.example.com",
        "routes": [
          { "name": "login", "key": "ip", "rules": { "perMinute": { "algorithm": "gcra", "limit": -1, "period": "1m" }, }, },
          { "name": "api", "key": "header:x-forwarded-for", "rules": { "b": { "algorithm": "nope" } } },
        ],
      }`,
    );
    const run = npmStart([file], userEnv());
    expect(await run.exited).toBe(1);
    const output = run.output();
    expect(output).toContain("routes[0].rules.perMinute.limit");
    expect(output).toContain("routes[1].key");
    expect(output).toContain("nothing started");
    expect(output).not.toContain("wrangler");
  });

  it("exits 1 with the fix when the REST token is wrong, and when the REST URL does not answer", async () => {
    const good = join(dir, "good.json");
    writeFileSync(good, JSON.stringify({ origin: "https://api.example.com", routes: [] }));
    const wrongToken = npmStart(
      [good],
      userEnv({ UPSTASH_REDIS_REST_URL: inject("bridgeUrl"), UPSTASH_REDIS_REST_TOKEN: "not-the-token" }),
    );
    expect(await wrongToken.exited).toBe(1);
    expect(wrongToken.output()).toContain("refused UPSTASH_REDIS_REST_TOKEN (HTTP 401");
    expect(wrongToken.output()).toContain("wrangler secret put UPSTASH_REDIS_REST_TOKEN");

    const closed = await new Promise<number>((resolve) => {
      const server = net.createServer().listen(0, "127.0.0.1", () => {
        const { port } = server.address() as net.AddressInfo;
        server.close(() => resolve(port));
      });
    });
    const unreachable = npmStart(
      [good],
      userEnv({ UPSTASH_REDIS_REST_URL: `http://127.0.0.1:${closed}`, UPSTASH_REDIS_REST_TOKEN: "x" }),
    );
    expect(await unreachable.exited).toBe(1);
    expect(unreachable.output()).toContain(
      `cannot reach UPSTASH_REDIS_REST_URL (http://127.0.0.1:${closed}): ECONNREFUSED`,
    );
    expect(unreachable.output()).not.toContain("edgelimit is running");
  });

  it.concurrent("serves wrangler.toml's config, and SIGTERM to npm's pid stops every process it started", async () => {
    const started = await startAndWait();
    const { run, url } = started;
    const { experimental_readRawConfig } = await import("wrangler");
    const config = JSON.parse(
      experimental_readRawConfig({ config: join(root, "wrangler.toml") }).rawConfig.vars
        ?.EDGELIMIT_CONFIG as string,
    );
    expect(run.output()).toContain("config: wrangler.toml [vars] EDGELIMIT_CONFIG");
    for (const route of config.routes) expect(run.output()).toContain(`  ${route.name}: `);
    expect((await fetch(`${url}/not-limited`)).status).toBe(200);

    // The demo config has analytics on: the banner names the ops page and the token that opens it.
    expect(config.analytics).toBeTruthy();
    const line = /^Ops page: (\S+) {2}\(log in with the development token: (dev-[0-9a-f-]{36})\)$/m.exec(
      run.output(),
    );
    expect(line, run.output()).not.toBeNull();
    const [, opsUrl, token] = line!;
    expect(opsUrl).toBe(`${url}/_edgelimit/`);
    expect(run.output()).toContain(
      `Admin API: ${url}/_edgelimit/overrides/<route>?key=<value>  (Authorization: Bearer ${token})`,
    );
    expect((await fetch(opsUrl!)).status).toBe(401);
    const page = await fetch(opsUrl!, { headers: { Authorization: `Basic ${btoa(`ops:${token}`)}` } });
    const html = await page.text();
    expect(page.status).toBe(200);
    for (const route of config.routes)
      expect(html).toContain(`<section class="route" data-route="${route.name}">`);
    expect(html).toContain('data-allowed="0" data-denied="0"');

    process.kill(run.npm.pid as number, "SIGTERM");
    await run.ended;
    await expectAllGone(started);
  }, 120_000);

  it.concurrent("serves a config file given on the command line; SIGINT to npm's pid stops everything", async () => {
    const file = join(dir, "two-a-minute.json");
    // The counts below are exact only if every decision hears from Redis. This stack's first requests
    // meet the other cases' stacks booting beside it (wrangler, esbuild, workerd): measured under two
    // busy loops on 2 cores, the first decision (NOSCRIPT, SCRIPT LOAD, EVALSHA) took 1.8 s and the
    // second 0.75 s, at or past the default 1 s, after which a decision fails open (onError) and may
    // go uncounted. What is tested here is npm start, so its routes wait as an admin write does (5 s).
    writeFileSync(
      file,
      JSON.stringify({
        origin: "https://origin.example",
        routes: [
          {
            name: "two",
            match: { path: "/two" },
            key: "global",
            rules: { m: { algorithm: "fixedWindow", limit: 2, window: "1m" } },
            timeout: "5s",
          },
          {
            name: "api",
            match: { path: "/api/*" },
            key: "header:x-api-key",
            rules: { perHour: { algorithm: "gcra", limit: 2, period: "1h" } },
            plans: { pro: { perHour: { limit: 100 } } },
            overrides: true,
            timeout: "5s",
          },
        ],
      }),
    );
    const started = await startAndWait([file]);
    const { run, url } = started;
    const statuses = [];
    for (let i = 0; i < 3; i++) statuses.push((await fetch(`${url}/two`)).status);
    expect(statuses).toEqual([200, 200, 429]);

    // The admin API is on with the printed development token; the printed curl puts key "demo" on "pro".
    const curl =
      /curl -s -X PUT '([^']+)' -H 'Authorization: Bearer (dev-[0-9a-f-]{36})' -H 'Content-Type: application\/json' -d '([^']+)'/.exec(
        run.output(),
      );
    expect(curl, run.output()).not.toBeNull();
    const [, target, token, body] = curl!;
    expect([target, body]).toEqual([`${url}/_edgelimit/overrides/api?key=demo`, '{"plan":"pro"}']);
    expect((await fetch(target!, { method: "PUT", body })).status).toBe(401);
    const put = await fetch(target!, { method: "PUT", body, headers: { Authorization: `Bearer ${token}` } });
    // on a failure, what npm start printed (the Worker logs why Redis failed; a second for it to arrive)
    if (put.status !== 200) await new Promise((resolve) => setTimeout(resolve, 1000));
    expect([put.status, await put.json()], run.output()).toEqual([200, { plan: "pro" }]);
    const policy = async (key: string) =>
      (await fetch(`${url}/api/x`, { headers: { "X-API-Key": key } })).headers.get("ratelimit-policy");
    expect(await policy("demo")).toBe('"perHour";q=100;w=3600');
    expect(await policy("other")).toBe('"perHour";q=2;w=3600');

    process.kill(run.npm.pid as number, "SIGINT");
    await run.ended;
    await expectAllGone(started);
  }, 120_000);

  it.concurrent("SIGHUP to npm's pid (npm dies without passing it on) stops everything", async () => {
    const started = await startAndWait([smallConfig()]);
    const { run } = started;
    process.kill(run.npm.pid as number, "SIGHUP");
    await run.ended;
    await expectAllGone(started);
  }, 120_000);

  it.concurrent("SIGTERM to workerd (which stops listening but stays): everything stops", async () => {
    const started = await startAndWait([smallConfig()]);
    const workerd = started.tree.find((pid) => cmdline(pid).includes("workerd serve")) as number;
    process.kill(workerd, "SIGTERM");
    await started.run.ended;
    expect(started.run.output()).toContain("workerd (under wrangler dev) stopped serving");
    await expectAllGone(started);
  }, 120_000);

  it.concurrent("SIGTERM to its redis-server: everything stops", async () => {
    const started = await startAndWait([smallConfig()]);
    const redis = started.tree.find((pid) => cmdline(pid).startsWith("redis-server")) as number;
    process.kill(redis, "SIGTERM");
    await started.run.ended;
    expect(started.run.output()).toContain("npm start: redis-server exited");
    await expectAllGone(started);
  }, 120_000);

  it.concurrent("SIGKILL to the script itself: its watchdog stops everything", async () => {
    const started = await startAndWait([smallConfig()]);
    const { run, tree } = started;
    const script = tree.find((pid) => cmdline(pid).includes("scripts/start.mjs")) as number;
    process.kill(script, "SIGKILL");
    await expectAllGone(started);
    run.npm.kill("SIGKILL");
  }, 120_000);
});
