// The ops page: HTML rendered from the routes' analytics reports, a pure function of them (no I/O, no
// clock of its own). No script, no external asset: inline CSS (allowed by its hash in the page's
// Content-Security-Policy) and an inline SVG chart. Every string is escaped where it is written, so an
// identifier or a path a client chose shows as text. Numbers a test (or a person) reads sit in data-*
// attributes and titles beside the text that shows them.

import type { RouteConfig } from "./config.js";
import { type KeySpec, keySpecText } from "./identity.js";

/** The counts of one route over the window asked for: its Limiter's `analytics.report()`, and `shadowDenied`. */
export interface RouteReport {
  readonly decisions: {
    readonly allowed: number;
    readonly denied: number;
    readonly bySource: Readonly<Record<string, number>>;
  };
  readonly denials: Readonly<Record<string, number>>;
  readonly nearLimit: number;
  readonly errors: Readonly<Record<string, number>>;
  readonly minutes: readonly { readonly at: number; readonly allowed: number; readonly denied: number }[];
  readonly top: readonly { readonly identifier: string; readonly denied: number; readonly allowed: number }[];
  readonly breaker?: { readonly state: string };
  /** Would-be denials of a shadow route (served anyway); 0 for an enforced route. */
  readonly shadowDenied: number;
}

/** One route as the page shows it: its config, and its report or why there is none. */
export interface OpsRoute {
  readonly route: Pick<RouteConfig, "name" | "mode" | "key" | "rules" | "cost" | "match"> &
    Partial<Pick<RouteConfig, "identifiers">>;
  readonly report: RouteReport | { readonly error: string };
}

/** Everything the page shows. */
export interface OpsPage {
  readonly adminPath: string;
  readonly routes: readonly OpsRoute[];
  /**
   * This isolate's circuit breaker for the routes' Redis (`limiter.analytics.breaker()`), read without
   * a request, so it shows while Redis is down; undefined only when there is no route.
   */
  readonly breaker: { readonly state: string; readonly opened?: number } | undefined;
  /** The window shown, epoch ms. */
  readonly from: number;
  readonly to: number;
}

const ESCAPES: Record<string, string> = {
  "&": "&amp;",
  "<": "&lt;",
  ">": "&gt;",
  '"': "&quot;",
  "'": "&#39;",
};

/**
 * Text made safe for HTML, in element content and in a quoted attribute alike.
 *
 * @example
 * escapeHtml('<img src=x onerror="alert(1)">') // "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;"
 */
export function escapeHtml(value: unknown): string {
  return String(value).replace(/[&<>"']/g, (char) => ESCAPES[char]!);
}

/** The page's whole stylesheet: one inline <style>, allowed by its SHA-256 in the CSP. */
export const STYLE = `
body{font:14px/1.4 system-ui,sans-serif;margin:1.5rem;color:#1b1f24;background:#fff}
h1{font-size:1.3rem;margin:0 0 .3rem}h2{font-size:1.1rem;margin:1.6rem 0 .3rem}h3{font-size:.95rem;margin:.8rem 0 .2rem}
.muted{color:#57606a}.mode{font-size:.8rem;padding:0 .4rem;border-radius:.6rem;background:#eaeef2}
.shadow{background:#fff1c2}.error{color:#a40e26}
table{border-collapse:collapse;margin:.2rem 0}td,th{padding:.1rem .6rem;border-bottom:1px solid #d0d7de;text-align:left}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}code{font-size:.85rem;word-break:break-all}
.grid{display:flex;flex-wrap:wrap;gap:0 2rem}svg{display:block;max-width:100%}
svg .allowed{fill:#2da44e}svg .denied{fill:#cf222e}svg .axis{stroke:#8c959f}svg text{font-size:10px;fill:#57606a}
.state-closed{color:#1a7f37}.state-open{color:#a40e26}.state-half-open{color:#9a6700}
form{display:inline}button,input{font:inherit}
`;

const KEYS: Record<KeySpec["kind"], string> = {
  ip: "client address",
  path: "path",
  global: "every request together",
  header: "header",
  cookie: "cookie",
};

function keyText(key: KeySpec): string {
  return key.kind === "header" || key.kind === "cookie"
    ? `${KEYS[key.kind]} ${key.name} (shown as its SHA-256)`
    : KEYS[key.kind];
}

function matchText(route: OpsRoute["route"]): string {
  const methods = route.match.methods
    ? [...route.match.methods].filter((m) => m !== "HEAD").join(", ")
    : "any method";
  return `${methods} ${route.match.path?.source ?? "every path"}`;
}

const time = (ms: number) => new Date(ms).toISOString().slice(11, 16);

/** A table of name → count, most first, each row carrying data-name and data-count. */
function counts(title: string, kind: string, record: Readonly<Record<string, number>>, none: string): string {
  const rows = Object.entries(record)
    .filter(([, count]) => count > 0)
    .sort(([a, x], [b, y]) => y - x || (a < b ? -1 : 1))
    .map(
      ([name, count]) =>
        `<tr data-name="${escapeHtml(name)}" data-count="${count}"><td><code>${escapeHtml(name)}</code></td><td class="n">${count}</td></tr>`,
    )
    .join("");
  const body = rows || `<tr><td class="muted" colspan="2">${escapeHtml(none)}</td></tr>`;
  return `<div><h3>${escapeHtml(title)}</h3><table data-table="${kind}"><tbody>${body}</tbody></table></div>`;
}

/** Allowed and denied per minute: one <g> per minute (data-at, data-allowed, data-denied, a title), stacked bars. */
export function chart(minutes: RouteReport["minutes"]): string {
  const width = 720;
  const height = 140;
  const top = 8;
  const bottom = 18;
  const plot = height - top - bottom;
  const peak = Math.max(1, ...minutes.map((m) => m.allowed + m.denied));
  const step = width / Math.max(1, minutes.length);
  const bar = Math.max(1, step - 2);
  const bars = minutes
    .map((minute, i) => {
      const x = (i * step + 1).toFixed(1);
      const allowedHeight = (minute.allowed / peak) * plot;
      const deniedHeight = (minute.denied / peak) * plot;
      const base = top + plot;
      const label = `${time(minute.at)} UTC: ${minute.allowed} allowed, ${minute.denied} denied`;
      return (
        `<g data-at="${minute.at}" data-allowed="${minute.allowed}" data-denied="${minute.denied}"><title>${label}</title>` +
        `<rect class="allowed" x="${x}" y="${(base - allowedHeight).toFixed(1)}" width="${bar.toFixed(1)}" height="${allowedHeight.toFixed(1)}"/>` +
        `<rect class="denied" x="${x}" y="${(base - allowedHeight - deniedHeight).toFixed(1)}" width="${bar.toFixed(1)}" height="${deniedHeight.toFixed(1)}"/></g>`
      );
    })
    .join("");
  const first = minutes[0];
  const last = minutes[minutes.length - 1];
  const labels =
    first && last
      ? `<text x="0" y="${height - 4}">${time(first.at)}</text><text x="${width}" y="${height - 4}" text-anchor="end">${time(last.at)} UTC</text>`
      : "";
  return (
    `<svg class="chart" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" role="img" aria-label="allowed and denied per minute" data-peak="${peak}">` +
    `<line class="axis" x1="0" x2="${width}" y1="${top + plot + 0.5}" y2="${top + plot + 0.5}"/>${bars}${labels}` +
    `<text x="0" y="${top + 2}"><tspan class="allowed">■</tspan> allowed <tspan class="denied">■</tspan> denied</text>` +
    `<text x="${width}" y="${top + 2}" text-anchor="end">peak ${peak}/min</text></svg>`
  );
}

// An identifier as the Worker counts it is "<route>:<id>": the route is already the section's title.
// A route whose rules count by several keys reports each decision under its binding rule's field,
// "<field>=<route>:<id>": shown as the key that field reads, "ip=203.0.113.7", or "global".
function shownIdentifier(route: OpsRoute["route"], identifier: string): string {
  const strip = (id: string) => (id.startsWith(`${route.name}:`) ? id.slice(route.name.length + 1) : id);
  const identifiers = route.identifiers ?? {};
  const nested = Object.keys(identifiers).some((field) => field !== "id");
  const eq = identifier.indexOf("=");
  const spec = nested && eq > 0 ? identifiers[identifier.slice(0, eq)] : undefined;
  if (spec === undefined) return strip(identifier);
  return spec.kind === "global" ? "global" : `${keySpecText(spec)}=${strip(identifier.slice(eq + 1))}`;
}

function topTable(route: OpsRoute["route"], top: RouteReport["top"]): string {
  const rows = top
    .map((entry) => {
      const id = shownIdentifier(route, entry.identifier);
      return `<tr data-identifier="${escapeHtml(id)}" data-denied="${entry.denied}" data-allowed="${entry.allowed}"><td><code>${escapeHtml(id)}</code></td><td class="n">${entry.denied}</td><td class="n">${entry.allowed}</td></tr>`;
    })
    .join("");
  const body = rows || '<tr><td class="muted" colspan="3">no identifier was denied</td></tr>';
  return `<div><h3>Top limited identifiers</h3><table data-table="top"><thead><tr><th>identifier</th><th class="n">denied</th><th class="n">allowed</th></tr></thead><tbody>${body}</tbody></table></div>`;
}

function policy(route: OpsRoute["route"]): string {
  // a rule counted by a key of its own shows that key as the config wrote it, not its record field
  const shown = (rule: object) => {
    const by = (rule as { by?: string }).by;
    const spec = by === undefined ? undefined : route.identifiers?.[by];
    return spec === undefined ? rule : { ...rule, by: keySpecText(spec) };
  };
  const rules = Object.entries(route.rules)
    .map(
      ([name, rule]) =>
        `<li><code>${escapeHtml(name)}</code> <code>${escapeHtml(JSON.stringify(shown(rule)))}</code></li>`,
    )
    .join("");
  return (
    `<p class="policy">${escapeHtml(matchText(route))}, counted by ${escapeHtml(keyText(route.key))}, ` +
    `cost ${route.cost}</p><ul class="rules">${rules}</ul>`
  );
}

function section({ route, report }: OpsRoute): string {
  const name = escapeHtml(route.name);
  const head =
    `<section class="route" data-route="${name}"><h2>${name} <span class="mode ${route.mode === "shadow" ? "shadow" : ""}">${escapeHtml(route.mode)}</span></h2>` +
    policy(route);
  if ("error" in report) {
    return `${head}<p class="error" data-error>${escapeHtml(report.error)}</p></section>`;
  }
  const { decisions } = report;
  const totals =
    `<p class="totals" data-allowed="${decisions.allowed}" data-denied="${decisions.denied}" data-shadow-denied="${report.shadowDenied}" data-near-limit="${report.nearLimit}">` +
    `<b>${decisions.allowed}</b> allowed, <b>${decisions.denied}</b> denied` +
    (route.mode === "shadow"
      ? `, <b data-shadow>${report.shadowDenied}</b> would-be denials served anyway (shadow)`
      : "") +
    `, <b>${report.nearLimit}</b> allowed near the limit</p>`;
  return (
    `${head}${totals}${chart(report.minutes)}<div class="grid">` +
    topTable(route, report.top) +
    counts("Denials by rule", "denials", report.denials, "none") +
    counts("Errors by kind", "errors", report.errors, "none") +
    counts("Decisions by source", "sources", decisions.bySource, "none") +
    "</div></section>"
  );
}

function document(title: string, body: string): string {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1"><meta name="referrer" content="no-referrer"><title>${escapeHtml(title)}</title><style>${STYLE}</style></head><body>${body}</body></html>`;
}

/**
 * The ops page of `page.routes`.
 *
 * @example
 * const html = opsPage({ adminPath: "/_edgelimit", routes, breaker: { state: "closed" }, from, to });
 */
export function opsPage(page: OpsPage): string {
  const state = page.breaker?.state ?? "unknown";
  const logout = `<form method="post" action="${escapeHtml(page.adminPath)}/logout"><button>Log out</button></form>`;
  const head =
    `<h1>edgelimit</h1><p class="muted">${new Date(page.from).toISOString().slice(0, 16)} to ${new Date(page.to).toISOString().slice(0, 16)} UTC, ` +
    `<a href="${escapeHtml(page.adminPath)}/analytics?minutes=${Math.max(1, Math.round((page.to - page.from) / 60_000))}">as JSON</a> ${logout}</p>` +
    `<p class="breaker" data-breaker="${escapeHtml(state)}">Redis circuit breaker: <b class="state-${escapeHtml(state)}">${escapeHtml(state)}</b>` +
    (page.breaker?.opened === undefined
      ? ""
      : ` <span class="muted" data-opened="${page.breaker.opened}">(opened ${page.breaker.opened} ${page.breaker.opened === 1 ? "time" : "times"} in this isolate)</span>`) +
    "</p>";
  const routes = page.routes.map(section).join("") || '<p class="muted">No routes are configured.</p>';
  return document("edgelimit", head + routes);
}

/**
 * The login form: the token goes in a POST body to `{adminPath}/login`, never in a URL.
 *
 * @example
 * loginPage("/_edgelimit", "wrong token")
 */
export function loginPage(adminPath: string, message?: string): string {
  const note = message === undefined ? "" : `<p class="error" data-login-error>${escapeHtml(message)}</p>`;
  return document(
    "edgelimit: log in",
    `<h1>edgelimit</h1>${note}<form method="post" action="${escapeHtml(adminPath)}/login">` +
      '<label>Admin token <input type="password" name="token" autocomplete="current-password" required autofocus></label> ' +
      "<button>Log in</button></form>" +
      `<p class="muted">Or open <a href="${escapeHtml(adminPath)}/">${escapeHtml(adminPath)}/</a> and give the token as the password your browser asks for (any user name).</p>`,
  );
}
