import fc from "fast-check";
import { describe, expect, test } from "vitest";
import {
  canonicalPath,
  compileRoutes,
  findRoute,
  formMethods,
  matchesPath,
  normalizePath,
  type PathPattern,
  parsePathPattern,
  requestedMethods,
} from "../../src/http/routes.js";

describe("normalizePath", () => {
  test.each([
    ["/", "/"],
    ["", "/"],
    ["/login", "/login"],
    ["/Login/", "/login"],
    ["//login//", "/login"],
    ["/a/./b/../login", "/a/login"],
    ["/../../login", "/login"],
    ["/log%69n", "/login"],
    ["/%7Euser", "/~user"],
    ["/a%2Fb", "/a%2fb"], // an escaped slash is kept here: matching reads it both ways
    ["/a%20b", "/a%20b"],
    ["/%2e%2e/login", "/login"], // an escaped dot segment is still a dot segment once decoded
    ["/login;jsessionid=x", "/login;jsessionid=x"], // so are path parameters
    ["/a\\login", "/a/login"],
  ])("%j → %j", (input, expected) => {
    expect(normalizePath(input)).toBe(expected);
  });

  test.each([
    ["/login;jsessionid=x", "/login"],
    ["/login%2F", "/login"],
    ["/login%5c", "/login"],
    ["/LOGIN;a=1/", "/login"],
    ["/a/..;/login", "/login"],
    ["/a%2F..%2Flogin", "/login"],
    ["/files/a%2Fb", "/files/a/b"],
    ["/login.json", "/login"],
    ["/.well-known", "/.well-known"],
  ])("canonicalPath(normalizePath(%j)) → %j", (input, expected) => {
    expect(canonicalPath(normalizePath(input))).toBe(expected);
  });
});

describe("spellings of /login that an origin may treat as /login all fall under /login", () => {
  const login = parsePathPattern("/login");
  test.each([
    "/login",
    "/login/",
    "//login",
    "/LOGIN",
    "/Log%69n",
    "/%6c%6f%67%69%6e",
    "/login/.",
    "/x/../login",
    "/x/%2e%2e/login",
    "/%2e/login",
    "/login;jsessionid=x",
    "/login;jsessionid=x/",
    "/login;",
    "/login%2F",
    "/login%2f%2f",
    "/login%5C",
    "/x%2F..%2Flogin",
    "/x/..;/login",
    "/x;y/..;z/login",
    "/login.json",
    "/login.",
    "/Login.JSON;x",
    "\\login",
  ])("%j", (path) => {
    expect(matchesPath(login, normalizePath(path))).toBe(true);
  });

  test.each([
    "/login2",
    "/logins",
    "/login/x",
    "/login%20",
    "/log/in",
    "/x/login",
    "/login%252F",
    "/.login",
    "/login.json/x",
  ])("but not %j", (path) => {
    expect(matchesPath(login, normalizePath(path))).toBe(false);
  });

  test("an encoded slash inside a :name segment still matches it, as an origin that keeps it reads it", () => {
    const file = parsePathPattern("/files/:name/edit");
    expect(matchesPath(file, normalizePath("/files/a%2Fb/edit"))).toBe(true);
    expect(matchesPath(file, normalizePath("/files/a;v=1/edit;x"))).toBe(true);
    expect(matchesPath(file, normalizePath("/files/a%2Fb/edit;x"))).toBe(true);
  });

  test("canonicalPath (the Worker's path key) reads every spelling as one path", () => {
    const key = (path: string) => canonicalPath(normalizePath(path));
    expect(
      new Set(
        ["/login", "/login;a", "/login;b", "/LOGIN%2F", "/x/..;/login", "/login.json", "/login.x"].map(key),
      ),
    ).toEqual(new Set(["/login"]));
  });
});

describe("path patterns", () => {
  test.each([
    // [pattern, path, matches]
    ["/login", "/login", true],
    ["/login", "/login/x", false],
    ["/login", "/", false],
    ["/", "/", true],
    ["/", "/x", false],
    ["/*", "/", true],
    ["/*", "/any/thing", true],
    ["/api/*", "/api", true],
    ["/api/*", "/api/v1/users", true],
    ["/api/*", "/apix", false],
    ["/api/*", "/", false],
    ["/users/:id", "/users/42", true],
    ["/users/:id", "/users", false],
    ["/users/:id", "/users/42/posts", false],
    ["/users/:id/*", "/users/42/posts/1", true],
    ["/API/Login", "/api/login", true],
    ["/robots.txt", "/robots.txt", true],
    ["/robots.txt", "/robots", false],
    ["/robots.txt", "/robots.json", false],
  ])("%s ~ %s: %s", (pattern, path, expected) => {
    expect(matchesPath(parsePathPattern(pattern), normalizePath(path))).toBe(expected);
  });

  test.each([
    ["login", '"login" must start with "/", e.g. "/login" or "/api/*"'],
    ["/api*", '"/api*": "*" may only be the whole last segment, as in "/api/*"'],
    ["/*/x", '"/*/x": "*" may only be the whole last segment, as in "/api/*"'],
    ["/users/:", '"/users/:": name the parameter, as in "/:id"'],
  ])("rejects %j", (pattern, message) => {
    expect(() => parsePathPattern(pattern)).toThrow(new Error(message));
  });

  test("findRoute: the first route whose path and method both match", () => {
    const routes = [
      { name: "a", match: { path: parsePathPattern("/login"), methods: new Set(["POST"]) } },
      { name: "b", match: { path: parsePathPattern("/*") } },
      { name: "c", match: {} },
    ];
    expect(findRoute(routes, "post", "/login")?.name).toBe("a");
    expect(findRoute(routes, "GET", "/login")?.name).toBe("b");
    expect(findRoute(routes.slice(0, 1), "GET", "/login")).toBeUndefined();
    expect(findRoute(routes.slice(2), "DELETE", "/x")?.name).toBe("c");
  });
});

describe("compileRoutes: matched once per config, the path read once per request", () => {
  const route = (name: string, path: string, methods?: string[]) => ({
    name,
    match: { path: parsePathPattern(path), ...(methods ? { methods: new Set(methods) } : {}) },
  });
  // 19 routes that a crafted path nearly matches (same first segment, one segment more or less,
  // parameters everywhere), and the one it falls under last.
  const routes = [
    ...Array.from({ length: 19 }, (_, i) =>
      route(`r${i}`, `/api/${Array.from({ length: i + 1 }, (_, j) => (j % 2 ? ":p" : "a;b")).join("/")}`),
    ),
    route("last", "/api/*"),
  ];
  /** The first route that matchesPath admits, pattern by pattern: the meaning the table must keep. */
  const reference = (path: string) => routes.find(({ match }) => matchesPath(match.path, path))?.name;

  // the second and fourth fall under /api/a;b (a reading strips the parameters and resolves the dots)
  test.each([
    ["ambiguous segments", `/api${"/a;b%2fc.d".repeat(1_640)}`, "last"],
    ["dot segments and encoded slashes", `/API${"/x%2F..%2F.;".repeat(1_400)}/a`, "r0"],
    ["one long segment", `/api/${"a".repeat(16_380)}`, "last"],
    ["many empty segments", `/api${"/".repeat(16_380)}a;b`, "r0"],
  ])("a 16 KB path of %s over 20 routes: the route pattern-by-pattern matching finds", (_, raw, expected) => {
    expect(raw.length).toBeGreaterThanOrEqual(16_000);
    const path = normalizePath(raw);
    const found = compileRoutes(routes)
      .match(["GET"], path)
      .map(({ name }) => name);
    expect(found).toEqual([reference(path)]);
    expect(found).toEqual([expected]);
  });

  test("each method its first route, each route once", () => {
    const table = compileRoutes([
      route("deletes", "/items/*", ["DELETE"]),
      route("writes", "/items/*", ["PUT", "DELETE"]),
      route("any", "/*"),
    ]);
    expect(table.methods).toEqual(new Set(["DELETE", "PUT"]));
    expect(table.match(["POST"], "/items/1").map(({ name }) => name)).toEqual(["any"]);
    expect(table.match(["POST", "DELETE", "PUT"], "/items/1").map(({ name }) => name)).toEqual([
      "any",
      "deletes",
      "writes",
    ]);
    expect(table.match(["DELETE", "DELETE"], "/other").map(({ name }) => name)).toEqual(["any"]);
  });
});

describe("requestedMethods: the request's own, then every override naming a method a route names", () => {
  const known = new Set(["DELETE", "PUT", "PATCH"]);
  const methods = (url: string, headers: Record<string, string> = {}, method = "POST") =>
    requestedMethods(new Request(`https://edge.example${url}`, { method, headers }), known);

  test.each<[string, Record<string, string>, string[]]>([
    ["/x", {}, ["POST"]],
    ["/x", { "X-HTTP-Method-Override": "DELETE" }, ["POST", "DELETE"]],
    ["/x", { "X-HTTP-Method": "delete" }, ["POST", "DELETE"]],
    ["/x", { "X-Method-Override": " Delete " }, ["POST", "DELETE"]],
    ["/x?_method=delete", {}, ["POST", "DELETE"]],
    ["/x?%5Fmethod=DELETE", {}, ["POST", "DELETE"]],
    ["/x?_method=put&_method=delete", {}, ["POST", "PUT", "DELETE"]],
    ["/x", { "X-HTTP-Method-Override": "patch,DELETE, put" }, ["POST", "PATCH", "DELETE", "PUT"]],
    ["/x?_method=PUT", { "X-HTTP-Method": "PUT", "X-Method-Override": "DELETE" }, ["POST", "PUT", "DELETE"]],
    // a method no route names cannot change which routes apply: not kept
    ["/x?_method=purge", { "X-HTTP-Method-Override": "GET, TRACE" }, ["POST"]],
    ["/x?method=delete&x_method=delete", {}, ["POST"]],
    // as PHP reads a name (".", " ", "[" become "_") and Rack splits a query (";" too)
    ["/x?.method=delete", {}, ["POST", "DELETE"]],
    ["/x?%20method=put", {}, ["POST", "PUT"]],
    ["/x?[method=patch", {}, ["POST", "PATCH"]],
    ["/x?a=1;_method=delete", {}, ["POST", "DELETE"]],
  ])("%s %j → %j", (url, headers, expected) => {
    expect(methods(url, headers)).toEqual(expected);
  });

  test("the request's own method comes first, uppercase", () => {
    expect(methods("/x?_method=DELETE", {}, "delete")).toEqual(["DELETE"]);
  });
});

describe("formMethods: a POST form's _method fields, read from a clone", () => {
  const known = new Set(["DELETE", "PUT"]);
  const post = (body: BodyInit, headers: Record<string, string> = {}, method = "POST") =>
    new Request("https://edge.example/items/1", { method, body, headers });
  const urlencoded = { "Content-Type": "application/x-www-form-urlencoded" };

  test("urlencoded, multipart and without a Content-Type; the request's body left whole", async () => {
    const request = post("a=1&_method=delete&_method=Put,patch", urlencoded);
    expect(await formMethods(request, known)).toEqual(["DELETE", "PUT"]);
    expect(await request.text()).toBe("a=1&_method=delete&_method=Put,patch");
    const multipart = new FormData();
    multipart.append("file", new Blob(["x".repeat(1000)]), "f.bin");
    multipart.append("_method", "delete");
    expect(await formMethods(post(multipart), known)).toEqual(["DELETE"]);
    expect(await formMethods(post(new TextEncoder().encode("_method=PUT")), known)).toEqual(["PUT"]);
  });

  test("a body over 64 KiB may name any method: every known one", async () => {
    expect(await formMethods(post(`a=${"x".repeat(64 * 1024)}`, urlencoded), known)).toEqual([
      "DELETE",
      "PUT",
    ]);
    expect(await formMethods(post(`a=${"x".repeat(64 * 1024 - 2)}`, urlencoded), known)).toEqual([]);
  });

  test("whatever parser the origin runs: any type, JSON, mangled names, escapes, a broken multipart", async () => {
    const bodies: [string, Record<string, string>][] = [
      ["_method=delete", { "Content-Type": "text/plain" }],
      ["_method=delete", { "Content-Type": "application/x-www-form-urlencoded,x" }],
      ['{"_method":"DELETE"}', { "Content-Type": "application/json" }],
      ['{"_method":"\\u0044ELETE"}', { "Content-Type": "application/json" }],
      [".method=DELETE", urlencoded],
      ["a=1;_method=delete", urlencoded],
      ["%5Fmethod=%44ELETE", urlencoded],
      ["_method=delete", { "Content-Type": "multipart/form-data; boundary=zz" }],
    ];
    for (const [body, headers] of bodies)
      expect([body, await formMethods(post(body, headers), known)]).toEqual([body, ["DELETE"]]);
  });

  test("none from another method, an unknown method, or a body that never says method", async () => {
    expect(await formMethods(post("_method=delete", urlencoded, "PUT"), known)).toEqual([]);
    expect(await formMethods(post("_method=purge", urlencoded), known)).toEqual([]);
    expect(
      await formMethods(post('{"action":"delete","put":1}', { "Content-Type": "application/json" }), known),
    ).toEqual([]);
    expect(await formMethods(post("_method=deleted", urlencoded), known)).toEqual([]);
  });
});

describe("no spelling escapes a route: any origin's reading of a path that matches, matches here", () => {
  // A model of how origins read a raw path: every one decodes unreserved characters, reads "\" as "/",
  // drops empty and "." segments, resolves "..", ignores case (the worst case for a limiter); some
  // also strip path parameters (";x"), some decode an encoded slash (%2F, %5C) into a separator, in
  // either order.
  type Origin = { strip: boolean; decodeSlash: boolean; stripFirst: boolean; format: boolean };
  function originReads(raw: string, { strip, decodeSlash, stripFirst, format }: Origin): string[] {
    let path = raw
      .replace(/%([0-9A-Fa-f]{2})/g, (encoded, hex: string) => {
        const char = String.fromCharCode(Number.parseInt(hex, 16));
        return /[A-Za-z0-9\-._~]/.test(char) ? char : encoded;
      })
      .replace(/\\/g, "/")
      .toLowerCase();
    const stripParameters = (p: string) => (strip ? p.replace(/;[^/]*/g, "") : p);
    const split = (p: string) => (decodeSlash ? p.replace(/%2f|%5c/g, "/") : p);
    path = stripFirst ? split(stripParameters(path)) : stripParameters(split(path));
    const out: string[] = [];
    for (const segment of path.split("/")) {
      if (segment === "" || segment === ".") continue;
      if (segment === "..") out.pop();
      else out.push(segment);
    }
    // Rails and Spring suffix matching: /login.json is /login
    const last = out.at(-1);
    if (format && last !== undefined && last.lastIndexOf(".") > 0)
      out[out.length - 1] = last.slice(0, last.lastIndexOf("."));
    return out;
  }
  const matchesSegments = (pattern: PathPattern, segments: string[]) => {
    const want = pattern.segments;
    if (pattern.rest ? segments.length < want.length : segments.length !== want.length) return false;
    return want.every((segment, i) => segment === null || segment === segments[i]);
  };

  const piece = fc.constantFrom(
    "login",
    "LOGIN",
    "Log%69n",
    "api",
    "users",
    "42",
    "edit",
    "x",
    ".",
    "..",
    "%2e",
    "%2E%2e",
    "..;",
    "%2F",
    "%2f",
    "%5C",
    "\\",
    ";a=1",
    ";",
    "/",
    "//",
    "%20",
    "a%2Fb",
    ".json",
    "%2Ejson",
    "login.json",
  );
  const rawPath = fc
    .array(fc.tuple(fc.constantFrom("/", ""), piece), { maxLength: 7 })
    .map((parts) => `/${parts.map(([sep, p]) => sep + p).join("")}`);
  const origin = fc.record({
    strip: fc.boolean(),
    decodeSlash: fc.boolean(),
    stripFirst: fc.boolean(),
    format: fc.boolean(),
  });
  const patterns = ["/login", "/api/*", "/users/:id", "/users/:id/edit", "/x/login", "/"].map(
    parsePathPattern,
  );

  test("for 20,000 random spellings and every kind of origin", () => {
    fc.assert(
      fc.property(rawPath, origin, (raw, how) => {
        const read = originReads(raw, how);
        const normalized = normalizePath(raw);
        for (const pattern of patterns) {
          if (matchesSegments(pattern, read))
            expect(matchesPath(pattern, normalized), `${pattern.source} ${raw}`).toBe(true);
        }
      }),
      { numRuns: 20_000 },
    );
  });

  test("a compiled table finds, method by method, the route pattern-by-pattern matching finds", () => {
    const verbs = ["GET", "POST", "DELETE"];
    const route = fc.record({
      path: fc.option(fc.constantFrom(...patterns), { nil: undefined }),
      methods: fc.option(fc.subarray(verbs, { minLength: 1 }), { nil: undefined }),
    });
    fc.assert(
      fc.property(fc.array(route, { maxLength: 6 }), fc.subarray(verbs), rawPath, (specs, wanted, raw) => {
        const routes = specs.map((spec, i) => ({
          name: i,
          match: {
            ...(spec.path ? { path: spec.path } : {}),
            ...(spec.methods ? { methods: new Set(spec.methods) } : {}),
          },
        }));
        const path = normalizePath(raw);
        const expected: number[] = [];
        for (const method of wanted) {
          const found = routes.find(
            ({ match }) =>
              (!match.methods || match.methods.has(method)) && (!match.path || matchesPath(match.path, path)),
          );
          if (found && !expected.includes(found.name)) expected.push(found.name);
        }
        expect(
          compileRoutes(routes)
            .match(wanted, path)
            .map(({ name }) => name),
        ).toEqual(expected);
      }),
      { numRuns: 2_000 },
    );
  });
});
