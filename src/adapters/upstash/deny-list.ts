// The peer's deny lists (`enableProtection`): values denied by the Upstash console or by code, kept in
// the set `<prefix>:denyList:all`, and the public ipsum IP list, refreshed daily into it. Read where
// the peer reads them, so both libraries deny the same values during a rolling deploy.

import { allDenyListsKey, ipDenyListKey, ipDenyListStatusKey } from "./keys.js";
import type { Client } from "./ratelimit.js";

/** A denied value is answered in the isolate, with no request, for this long. */
const BLOCK_MS = 60_000;
const MAX_BLOCKED = 1000;
/** While one instance refreshes the stale IP list, the others see "pending" for this long (s). */
const PENDING_S = 30;
const IPSUM = "https://raw.githubusercontent.com/stamparm/ipsum/master/levels";

// Which of ARGV are in the set of denied values, and the IP list's state: the TTL of its status key
// (-1 disabled, -2 stale; then marked pending, so that one caller refreshes it).
const CHECK = `local denied = redis.call('SMISMEMBER', KEYS[1], unpack(ARGV))
local status = redis.call('TTL', KEYS[2])
if status == -2 then
  redis.call('SET', KEYS[2], 'pending', 'EX', ${PENDING_S})
end
return { denied, status }`;

/** What a deny list check found. */
export interface DenyCheck {
  deniedValue: string | undefined;
  /** The stale IP list's refresh, when this check started it. */
  refresh: Promise<unknown> | undefined;
}

/** Checks a request's identifier, ip, user agent and country against the peer's deny lists. */
export class DenyList {
  private readonly blocked = new Map<string, number>();

  constructor(
    private readonly redis: unknown,
    private readonly prefix: string,
    private readonly threshold: number,
    private readonly clock: () => number,
  ) {
    checkThreshold(threshold);
  }

  /** A value denied in the last minute, answered with no request. */
  cached(members: readonly string[]): string | undefined {
    const now = this.clock();
    for (const member of members) {
      const until = this.blocked.get(member);
      if (until === undefined) continue;
      if (until > now) return member;
      this.blocked.delete(member);
    }
    return undefined;
  }

  /** One request: which member is denied, if any. Past `timeout` ms, none is (the peer's race). */
  async check(members: readonly string[], timeout: number): Promise<DenyCheck> {
    const asked = (this.redis as Client).eval(
      CHECK,
      [allDenyListsKey(this.prefix), ipDenyListStatusKey(this.prefix)],
      [...members],
    ) as Promise<[number[], number]>;
    let timer: Parameters<typeof clearTimeout>[0];
    const late = new Promise<undefined>((resolve) => {
      if (Number.isFinite(timeout)) timer = setTimeout(resolve, timeout);
    });
    const reply = await Promise.race([asked, late]).finally(() => clearTimeout(timer));
    if (reply === undefined) {
      asked.catch(() => {});
      return { deniedValue: undefined, refresh: undefined };
    }
    const [denied, status] = reply;
    let deniedValue: string | undefined;
    denied.forEach((isDenied, i) => {
      if (Number(isDenied) !== 1) return;
      deniedValue = members[i];
      if (this.blocked.size >= MAX_BLOCKED) this.blocked.delete(this.blocked.keys().next().value!);
      this.blocked.set(members[i]!, this.clock() + BLOCK_MS);
    });
    const refresh =
      Number(status) === -2
        ? updateIpDenyList(this.redis, this.prefix, this.threshold).catch((error) =>
            console.warn("edgelimit/upstash: the IP deny list was not refreshed", error),
          )
        : undefined;
    return { deniedValue, refresh };
  }
}

/** Thrown for an ipsum level outside 1-8. */
export class ThresholdError extends Error {
  constructor(threshold: number) {
    super(`Allowed threshold values are from 1 to 8, 1 and 8 included. Received: ${threshold}`);
    this.name = "ThresholdError";
  }
}

function checkThreshold(threshold: unknown): number {
  if (typeof threshold !== "number" || !(threshold >= 1 && threshold <= 8)) {
    throw new ThresholdError(threshold as number);
  }
  return threshold;
}

/** Ms until the next 2 AM UTC, shortly after ipsum publishes its daily lists. */
function untilNextRefresh(now: number): number {
  const day = 86_400_000;
  return day - ((((now - 2 * 3_600_000) % day) + day) % day);
}

interface Transaction {
  sdiffstore(destination: string, ...keys: string[]): Transaction;
  sunionstore(destination: string, ...keys: string[]): Transaction;
  del(...keys: string[]): Transaction;
  sadd(key: string, ...members: string[]): Transaction;
  set(key: string, value: string, options?: { px: number }): Transaction;
  exec(): Promise<unknown[]>;
}

/**
 * Replaces the IP deny list with ipsum's IPs listed by at least `threshold` (1-8) sources, leaving
 * the values denied by hand alone, and marks it valid until the next 2 AM UTC (or for `ttl` ms).
 *
 * @example
 * await IpDenyList.updateIpDenyList(redis, "@upstash/ratelimit", 6);
 */
export async function updateIpDenyList(
  redis: unknown,
  prefix: string,
  threshold: number,
  ttl?: number,
): Promise<unknown[]> {
  checkThreshold(threshold);
  let ips: string[];
  try {
    const response = await fetch(`${IPSUM}/${threshold}.txt`);
    if (!response.ok) throw new Error(`Error fetching data: ${response.statusText}`);
    ips = (await response.text()).split("\n").filter((line) => line.length > 0);
  } catch (error) {
    throw new Error(`Failed to fetch ip deny list: ${error}`);
  }
  const all = allDenyListsKey(prefix);
  const ipList = ipDenyListKey(prefix);
  const transaction = (redis as Client).multi() as Transaction;
  // the old IPs leave the set of all denied values; the new list keeps none of the values denied by
  // hand (so disabling it later leaves those denied), and joins the set
  transaction.sdiffstore(all, all, ipList);
  transaction.del(ipList);
  if (ips.length > 0) transaction.sadd(ipList, ...ips);
  transaction.sdiffstore(ipList, ipList, all);
  transaction.sunionstore(all, all, ipList);
  transaction.set(ipDenyListStatusKey(prefix), "valid", { px: ttl ?? untilNextRefresh(Date.now()) });
  return transaction.exec();
}

/**
 * Removes the IP deny list (the values denied by hand stay) and marks it disabled: no refresh.
 *
 * @example
 * await IpDenyList.disableIpDenyList(redis, "@upstash/ratelimit");
 */
export async function disableIpDenyList(redis: unknown, prefix: string): Promise<unknown[]> {
  const all = allDenyListsKey(prefix);
  const ipList = ipDenyListKey(prefix);
  const transaction = (redis as Client).multi() as Transaction;
  transaction.sdiffstore(all, all, ipList);
  transaction.del(ipList);
  transaction.set(ipDenyListStatusKey(prefix), "disabled");
  return transaction.exec();
}
