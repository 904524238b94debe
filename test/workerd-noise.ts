// @cloudflare/vitest-pool-workers 0.15 runs workerd with `verbose: true` and prints every structured log
// line workerd emits, in the vitest process, with one `process.stdout/stderr.write(message + "\n")` each
// (its handleStructuredLogs; the pool offers no option to change either). Two kinds of those lines are
// noise on a green run, and only these are dropped here, matched exactly:
//
// - A refused outbound connection. workerd logs it as three lines, "exception = kj/async-io-unix.c++:N:
//   disconnected: connect(): Connection refused", then "uncaught exception; … Network connection lost."
//   twice, even when the code that called fetch() caught the rejection: the same three lines come out of
//   a bare `fetch("http://127.0.0.1:1/").catch(() => {})` under Miniflare with verbose on, and none with
//   it off. The Worker's tests refuse connections on purpose (Redis down, origin down). Only the two
//   "Network connection lost." lines right after a refused connect are dropped, so a lost connection that
//   is not a refused connect still shows.
// - "disconnected: WebSocket peer disconnected" as the pool closes its socket to workerd at teardown (it
//   came after the tally). The pool's later versions add exactly this message to their own ignore list
//   (cloudflare/workers-sdk#13833).
const REFUSED =
  /^exception = kj\/async-io-unix\.c\+\+:\d+: disconnected: connect\(\): Connection refused(\nstack: [^\n]*)?\n$/;
const LOST = [
  /^uncaught exception; source = Uncaught \(in promise\); stack = Error: Network connection lost\.\n$/,
  /^uncaught exception; exception = workerd\/jsg\/\S+: disconnected: jsg\.Error: Network connection lost\.(\nstack: [^\n]*)?\n$/,
];
const PEER_GONE =
  /^exception = workerd\/api\/web-socket\.c\+\+:\d+: disconnected: WebSocket peer disconnected(\nstack: [^\n]*)?\n$/;

let installed = false;

/** Drops the lines described above from this process's stdout and stderr; everything else passes. */
export function dropWorkerdNoise(): void {
  if (installed) return;
  installed = true;
  let lostAfterRefused = 0; // "Network connection lost." lines still expected after a refused connect
  const noise = (text: string): boolean => {
    if (REFUSED.test(text)) {
      lostAfterRefused = LOST.length;
      return true;
    }
    if (lostAfterRefused > 0 && LOST.some((line) => line.test(text))) {
      lostAfterRefused -= 1;
      return true;
    }
    return PEER_GONE.test(text);
  };
  for (const stream of [process.stdout, process.stderr]) {
    const write = stream.write.bind(stream) as (...args: unknown[]) => boolean;
    stream.write = ((chunk: unknown, ...rest: unknown[]) => {
      if (typeof chunk === "string" && noise(chunk)) {
        const callback = rest.find((arg) => typeof arg === "function") as (() => void) | undefined;
        callback?.();
        return true;
      }
      return write(chunk, ...rest);
    }) as typeof stream.write;
  }
}
