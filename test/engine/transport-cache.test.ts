// `{ url, token }` transports are shared by value and kept for at most MAX_CONNECTIONS endpoints, least
// recently used out first. No request is sent: building a transport asks nothing of Redis.
import { describe, expect, it } from "vitest";
import { MAX_CONNECTIONS, transportFor } from "../../src/engine/transport.js";

describe("the transports of { url, token }", () => {
  it("are shared by value, and bounded: the least recently used goes first", () => {
    const url = "http://127.0.0.1:9";
    const made = [transportFor({ url, token: "token-0" })];
    expect(transportFor({ url, token: "token-0" })).toBe(made[0]);
    // MAX_CONNECTIONS - 1 more endpoints: all kept, the first too
    for (let i = 1; i < MAX_CONNECTIONS; i++) made.push(transportFor({ url, token: `token-${i}` }));
    expect(transportFor({ url, token: "token-0" })).toBe(made[0]);
    expect(transportFor({ url, token: "token-1" })).toBe(made[1]);
    // one more: token-2, now the least recently used, is let go; the two just used stay
    transportFor({ url, token: "overflow" });
    expect(transportFor({ url, token: "token-0" })).toBe(made[0]);
    expect(transportFor({ url, token: "token-1" })).toBe(made[1]);
    expect(transportFor({ url, token: `token-${MAX_CONNECTIONS - 1}` })).toBe(made[MAX_CONNECTIONS - 1]);
    const again = transportFor({ url, token: "token-2" });
    expect(again).not.toBe(made[2]);
    expect(transportFor({ url, token: "token-2" })).toBe(again);
  });
});
