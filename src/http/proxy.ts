// Forwarding to the origin. The origin's answer comes back as it is (status, headers, streamed body):
// the limiter's only business with it is adding its own headers afterwards.

/**
 * Sends `request` to `origin` with the same method, path, query, headers and (streamed) body.
 * Host is the origin's own (a virtual host there must see its name, not the Worker's), the Worker's
 * host travels as X-Forwarded-Host, and redirects are handed back to the client, never followed here.
 *
 * @example
 * return forward(c.req.raw, "https://api.example.com");
 */
export function forward(request: Request, origin: string): Promise<Response> {
  const url = new URL(request.url);
  const headers = new Headers(request.headers);
  headers.delete("host");
  headers.set("x-forwarded-host", url.host);
  headers.set("x-forwarded-proto", url.protocol.slice(0, -1));
  const hasBody = request.method !== "GET" && request.method !== "HEAD";
  return fetch(origin + url.pathname + url.search, {
    method: request.method,
    headers,
    body: hasBody ? request.body : null,
    redirect: "manual",
  });
}
