// Which route a request falls under. Paths are compared in a normalized form because the origin, not
// the limiter, decides what a path means: if POST /Login, //login, /login/, /log%69n, /login;jsessionid=x
// or /login%2F reach the same handler as /login, they must count against the same limit, or the limit is
// one spelling away from useless. Normalizing can only make more requests match (never fewer), so it
// errs on the safe side:
//   - always: unreserved characters percent-decoded (%69 is "i", %2e is "."), "\" read as "/", runs of
//     slashes collapsed, "." and ".." resolved, a trailing slash dropped, everything lowercased;
//   - both ways, where origins differ: a path parameter (";jsessionid=x", stripped by Tomcat, Jetty and
//     Spring, kept by others) and an encoded slash (%2F or %5C, a separator to origins that decode it
//     first, part of a segment to others). A pattern matches when any reading of the path matches it,
//     so /login;x and /login%2F fall under /login, and /files/a%2Fb still falls under /files/:name;
//   - both ways too: a format suffix on the last segment (/login.json is /login to Rails, and to
//     Spring's suffix matching; /login. to a server that drops a trailing dot).

/** A compiled `match.path`: literal segments, `:name` (any one segment), and an optional trailing `*`. */
export interface PathPattern {
  readonly source: string;
  readonly segments: readonly (string | null)[];
  /** Whether the pattern ends in `/*`: zero or more further segments. */
  readonly rest: boolean;
}

const UNRESERVED = /[A-Za-z0-9\-._~]/;
// After lowercasing: an encoded "/" or "\", and a segment's path parameters.
const ENCODED_SLASH = /%2f|%5c/g;
const PARAMETERS = /;[^/]*/g;
const AMBIGUOUS = /%2f|%5c|;/;

/**
 * The form paths are compared in: unreserved characters percent-decoded, "\" read as "/", dot segments
 * resolved, runs of slashes collapsed, a trailing slash dropped, lowercased. Path parameters (";x") and
 * encoded slashes (%2f, %5c) are kept, and a path holding them keeps its ".." segments too: matching
 * reads such a path every way an origin may (see {@link canonicalPath}).
 *
 * @example
 * normalizePath("//API/v1/../Log%69n/") // "/api/login"
 */
export function normalizePath(pathname: string): string {
  const decoded = pathname.replace(/%([0-9A-Fa-f]{2})/g, (encoded, hex: string) => {
    const char = String.fromCharCode(Number.parseInt(hex, 16));
    return UNRESERVED.test(char) ? char : encoded;
  });
  const path = decoded.replace(/\\/g, "/").toLowerCase();
  // Where origins differ (see readings), ".." is left for each reading to resolve: "/a%2fb/.." is "/" to
  // one origin and "/a" to another, so resolving it here would lose one of them.
  if (AMBIGUOUS.test(path)) return join(path.split("/").filter((s) => s !== "" && s !== "."));
  return join(resolve(path));
}

/**
 * The one form of a normalized path that an origin stripping path parameters, decoding encoded slashes
 * and ignoring a format suffix would see: "/login;jsessionid=x", "/login%2f" and "/login.json" are all
 * "/login". What the `path` key counts by, so that no spelling of a path gets a counter of its own
 * (so /report.csv and /report.pdf share one).
 *
 * @example
 * canonicalPath(normalizePath("/Login;jsessionid=x/")) // "/login"
 */
export function canonicalPath(normalizedPath: string): string {
  const segments = resolve(normalizedPath.replace(PARAMETERS, "").replace(ENCODED_SLASH, "/"));
  const last = segments.at(-1);
  const dot = last === undefined ? -1 : last.lastIndexOf(".");
  if (dot > 0) segments[segments.length - 1] = last!.slice(0, dot);
  return join(segments);
}

/** Segments with "" and "." dropped and ".." applied. */
function resolve(path: string): string[] {
  const out: string[] = [];
  for (const segment of path.split("/")) {
    if (segment === "" || segment === ".") continue;
    if (segment === "..") out.pop();
    else out.push(segment);
  }
  return out;
}

function join(segments: readonly string[]): string {
  return `/${segments.join("/")}`;
}

/** Every way an origin may read a normalized path, as segments: the path as it is first. */
function readings(normalizedPath: string): string[][] {
  const plain = resolve(normalizedPath);
  const hasParameters = normalizedPath.includes(";");
  const hasSlashes = normalizedPath.includes("%2f") || normalizedPath.includes("%5c");
  const found = [plain];
  if (hasParameters || hasSlashes) {
    const stripped = normalizedPath.replace(PARAMETERS, "");
    const split = normalizedPath.replace(ENCODED_SLASH, "/");
    found.push(
      resolve(stripped),
      resolve(split),
      resolve(stripped.replace(ENCODED_SLASH, "/")),
      resolve(split.replace(PARAMETERS, "")),
    );
  }
  // A format suffix on the last segment: Rails routes /login.json (and Spring's suffix matching
  // /login.anything) to the /login handler, and some servers drop a trailing dot.
  for (const segments of found.slice()) {
    const last = segments.at(-1);
    const dot = last === undefined ? -1 : last.lastIndexOf(".");
    if (dot > 0) found.push([...segments.slice(0, -1), last!.slice(0, dot)]);
  }
  return found;
}

/**
 * Compiles a `match.path` pattern: `/login` (that path only), `/users/:id` (any one segment there),
 * `/api/*` (`/api` and everything below it), `/*` (everything). Throws an Error saying what is wrong.
 *
 * @example
 * matchesPath(parsePathPattern("/api/*"), "/API/v1/users") // true
 */
export function parsePathPattern(source: string): PathPattern {
  if (!source.startsWith("/")) {
    throw new Error(`${JSON.stringify(source)} must start with "/", e.g. "/login" or "/api/*"`);
  }
  const rest = source === "/*" || source.endsWith("/*");
  const body = rest ? source.slice(0, -2) || "/" : source;
  if (body.includes("*")) {
    throw new Error(`${JSON.stringify(source)}: "*" may only be the whole last segment, as in "/api/*"`);
  }
  // Parameters stripped and encoded slashes split, as in canonicalPath, but a dot kept: "/robots.txt"
  // means that file, not "/robots".
  const plain = normalizePath(body).replace(PARAMETERS, "").replace(ENCODED_SLASH, "/");
  const segments = resolve(plain).map((segment) => {
    if (!segment.startsWith(":")) return segment;
    if (segment.length === 1) throw new Error(`${JSON.stringify(source)}: name the parameter, as in "/:id"`);
    return null;
  });
  return { source, segments, rest };
}

/**
 * Whether an already normalized path matches a pattern.
 *
 * @example
 * matchesPath(parsePathPattern("/users/:id"), normalizePath("/users/42")) // true
 */
export function matchesPath(pattern: PathPattern, normalizedPath: string): boolean {
  return matchesReadings(pattern, readings(normalizedPath));
}

// Cost: a pattern's segments, whatever the path's length (a length check, then one comparison a segment).
function matchesReadings(pattern: PathPattern, found: readonly (readonly string[])[]): boolean {
  const want = pattern.segments;
  return found.some((segments) => {
    if (pattern.rest ? segments.length < want.length : segments.length !== want.length) return false;
    return want.every((segment, i) => segment === null || segment === segments[i]);
  });
}

/** What a route matches: a path pattern and a set of methods, each optional (absent: any). */
export interface RouteMatch {
  readonly path?: PathPattern;
  /** Uppercase method names; GET also admits HEAD, which origins answer with their GET handler. */
  readonly methods?: ReadonlySet<string>;
}

/** Routes compiled once per config: see {@link compileRoutes}. */
export interface RouteTable<R> {
  /**
   * For each method in turn, the first route that admits it on this path; each route once, in the
   * order found. Methods are uppercase, the request's own first.
   */
  match(methods: readonly string[], normalizedPath: string): R[];
  /** Every method some route names: the only ones an override can add a route for. */
  readonly methods: ReadonlySet<string>;
}

/**
 * Compiles routes once (when the config is parsed): a request then costs one reading of its path
 * (linear in its length, shared by every route) and a few segment comparisons a route, never a route
 * re-reading the path.
 *
 * @example
 * const table = compileRoutes(config.routes);
 * table.match(requestedMethods(request, table.methods), normalizePath(new URL(request.url).pathname))
 */
export function compileRoutes<R extends { readonly match: RouteMatch }>(routes: readonly R[]): RouteTable<R> {
  const compiled = [...routes];
  const methods = new Set(compiled.flatMap(({ match }) => [...(match.methods ?? [])]));
  return {
    methods,
    match(wanted, normalizedPath) {
      let found: string[][] | undefined;
      // a route's path is checked at most once a request, whichever method asked
      const pathMatches = new Map<R, boolean>();
      const admits = (route: R) => {
        const { path } = route.match;
        if (!path) return true;
        let matches = pathMatches.get(route);
        if (matches === undefined) {
          found ??= readings(normalizedPath);
          matches = matchesReadings(path, found);
          pathMatches.set(route, matches);
        }
        return matches;
      };
      const out: R[] = [];
      for (const method of wanted) {
        const route = compiled.find(
          (candidate) =>
            (!candidate.match.methods || candidate.match.methods.has(method)) && admits(candidate),
        );
        if (route && !out.includes(route)) out.push(route);
      }
      return out;
    },
  };
}

/**
 * The first route whose match admits the request, or undefined.
 *
 * @example
 * findRoute(config.routes, "POST", normalizePath(new URL(request.url).pathname))
 */
export function findRoute<R extends { readonly match: RouteMatch }>(
  routes: readonly R[],
  method: string,
  normalizedPath: string,
): R | undefined {
  return compileRoutes(routes).match([method.toUpperCase()], normalizedPath)[0];
}

/** Longest form body read for a `_method` field; a longer one may name any method. */
const MAX_FORM_BYTES = 64 * 1024;

/**
 * The methods a POST's body may name in a method field, among `known`, however its origin reads it:
 * Rails, Laravel and Symfony read `_method` from a form (whatever its Content-Type says, or without
 * one: Rack parses that as a form), Laravel from a JSON body too, PHP after turning ".", " " and "["
 * in a name into "_", Rack after splitting on ";". So no parser is trusted: a body that holds "method"
 * at all (percent- and \u-escapes read first) names every known method written in it as a word. The
 * body is read from a clone, up to 64 KiB, and still streams to the origin whole; a longer one counts
 * as naming every method in `known`, since the field may be past what was read. A body that names
 * a method only in passing ("payment_method" beside the word "put") is counted under it too: a
 * request may pay for a route it does not reach, never pass one it does.
 *
 * @example
 * await formMethods(request, new Set(["DELETE"])) // ["DELETE"] for a POST of "_method=delete"
 */
export async function formMethods(request: Request, known: ReadonlySet<string>): Promise<string[]> {
  if (request.method.toUpperCase() !== "POST" || request.body === null || known.size === 0) return [];
  // A body too long to read, or one that failed on the way, may name any method.
  const bytes = await readUpTo(request.clone().body!, MAX_FORM_BYTES).catch(() => undefined);
  if (bytes === undefined) return [...known];
  return namedIn(new TextDecoder().decode(bytes), known);
}

/** `text` with its percent-escapes (%44) and JSON \u-escapes (\u0044) read, as an origin reads them. */
const unescaped = (text: string) =>
  text
    .replace(/%([0-9a-f]{2})/gi, (_, hex: string) => String.fromCharCode(Number.parseInt(hex, 16)))
    .replace(/\\u([0-9a-f]{4})/gi, (_, hex: string) => String.fromCharCode(Number.parseInt(hex, 16)));

/** The methods of `known` a text may name in a method field: with "method" in it, each written in it as a word. */
function namedIn(text: string, known: ReadonlySet<string>): string[] {
  const plain = unescaped(text);
  if (!/method/i.test(plain)) return [];
  return [...known].filter((method) => {
    const token = method.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    return new RegExp(`(?:^|[^a-z])${token}(?:$|[^a-z])`, "i").test(plain);
  });
}

/** Whether a query field's name is `_method` as an origin reads it (PHP turns ".", " " and "[" into "_"). */
const isMethodField = (name: string) => name.replace(/[. []/g, "_").toLowerCase() === "_method";

/** The whole of `body` when it holds at most `limit` bytes, else undefined (the rest left unread). */
async function readUpTo(
  body: ReadableStream<Uint8Array>,
  limit: number,
): Promise<Uint8Array<ArrayBuffer> | undefined> {
  const reader = body.getReader();
  const chunks: Uint8Array[] = [];
  let length = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    length += value.byteLength;
    if (length > limit) {
      // not awaited: a tee branch's cancel settles only once the other branch (the origin's) ends too;
      // cancelled, it stops keeping a copy of what the origin is sent
      reader.cancel().catch(() => {});
      return undefined;
    }
    chunks.push(value);
  }
  const bytes = new Uint8Array(length);
  let at = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, at);
    at += chunk.byteLength;
  }
  return bytes;
}

/** Where frameworks read the method a request asks for instead of its own (Rails, Laravel, Symfony, Express). */
export const METHOD_OVERRIDES = ["x-http-method-override", "x-http-method", "x-method-override"];

/**
 * The methods a request asks the origin for: its own, then each one an override names
 * (`X-HTTP-Method-Override`, `X-HTTP-Method`, `X-Method-Override`, a `_method` query parameter, also
 * spelt `.method`, ` method` or `[method` (PHP reads them all as `_method`) or after a ";"; any case,
 * comma lists too), since an origin honouring the override serves it as that method. Only
 * methods in `known` (the ones routes name) are kept: no other can change which routes apply.
 *
 * @example
 * requestedMethods(new Request("https://x.test/a", { method: "POST", headers: { "X-HTTP-Method-Override": "delete" } }), new Set(["DELETE"]))
 * // ["POST", "DELETE"]
 */
export function requestedMethods(request: Request, known: ReadonlySet<string>): string[] {
  const methods = [request.method.toUpperCase()];
  const add = (value: string) => {
    for (const part of value.split(",")) {
      const method = part.trim().toUpperCase();
      if (known.has(method) && !methods.includes(method)) methods.push(method);
    }
  };
  for (const name of METHOD_OVERRIDES) {
    const value = request.headers.get(name);
    if (value !== null) add(value);
  }
  // no URL parsing for the many requests without a query (a key may be percent-encoded: %5Fmethod;
  // Rack also splits on ";")
  if (request.url.includes("?")) {
    const query = new URL(request.url).search.slice(1).replaceAll(";", "&");
    for (const [name, value] of new URLSearchParams(query)) if (isMethodField(name)) add(value);
  }
  return methods;
}
