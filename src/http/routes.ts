// Which route a request falls under. Paths are compared in a normalized form because the origin, not
// the limiter, decides what a path means: if POST /Login, //login, /login/ or /log%69n reach the same
// handler as /login, they must count against the same limit, or the limit is one spelling away from
// useless. Normalizing can only make more requests match (never fewer), so it errs on the safe side.

/** A compiled `match.path`: literal segments, `:name` (any one segment), and an optional trailing `*`. */
export interface PathPattern {
  readonly source: string;
  readonly segments: readonly (string | null)[];
  /** Whether the pattern ends in `/*`: zero or more further segments. */
  readonly rest: boolean;
}

const UNRESERVED = /[A-Za-z0-9\-._~]/;

/**
 * The form paths are compared in: unreserved characters percent-decoded, dot segments resolved, runs
 * of slashes collapsed, a trailing slash dropped, lowercased.
 *
 * @example
 * normalizePath("//API/v1/../Log%69n/") // "/api/login"
 */
export function normalizePath(pathname: string): string {
  const decoded = pathname.replace(/%([0-9A-Fa-f]{2})/g, (encoded, hex: string) => {
    const char = String.fromCharCode(Number.parseInt(hex, 16));
    return UNRESERVED.test(char) ? char : encoded;
  });
  const out: string[] = [];
  for (const segment of decoded.split("/")) {
    if (segment === "" || segment === ".") continue;
    if (segment === "..") out.pop();
    else out.push(segment);
  }
  return `/${out.join("/")}`.toLowerCase();
}

function segmentsOf(normalized: string): string[] {
  return normalized === "/" ? [] : normalized.slice(1).split("/");
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
  const segments = segmentsOf(normalizePath(body)).map((segment) => {
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
  const segments = segmentsOf(normalizedPath);
  const want = pattern.segments;
  if (pattern.rest ? segments.length < want.length : segments.length !== want.length) return false;
  return want.every((segment, i) => segment === null || segment === segments[i]);
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
