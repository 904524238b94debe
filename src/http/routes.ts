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
//     so /login;x and /login%2F fall under /login, and /files/a%2Fb still falls under /files/:name.

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
 * The one form of a normalized path that an origin stripping path parameters and decoding encoded
 * slashes would see: "/login;jsessionid=x" and "/login%2f" are both "/login". What the `path` key
 * counts by, so that no spelling of a path gets a counter of its own.
 *
 * @example
 * canonicalPath(normalizePath("/Login;jsessionid=x/")) // "/login"
 */
export function canonicalPath(normalizedPath: string): string {
  return join(resolve(normalizedPath.replace(PARAMETERS, "").replace(ENCODED_SLASH, "/")));
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
  if (!hasParameters && !hasSlashes) return [plain];
  const stripped = normalizedPath.replace(PARAMETERS, "");
  const split = normalizedPath.replace(ENCODED_SLASH, "/");
  return [
    plain,
    resolve(stripped),
    resolve(split),
    resolve(stripped.replace(ENCODED_SLASH, "/")),
    resolve(split.replace(PARAMETERS, "")),
  ];
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
  const segments = resolve(canonicalPath(normalizePath(body))).map((segment) => {
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
  const want = pattern.segments;
  return readings(normalizedPath).some((segments) => {
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
  const upper = method.toUpperCase();
  return routes.find(({ match }) => {
    if (match.methods && !match.methods.has(upper)) return false;
    return !match.path || matchesPath(match.path, normalizedPath);
  });
}
