// IP addresses and CIDR ranges, IPv4 and IPv6, without a dependency: the adapters' own helper (the
// Vercel middleware's clientIp, the Worker's keys, deny list and proxy), not part of any entry.
//
// Every address is held as 16 bytes: an IPv4 address a.b.c.d is the IPv4-mapped IPv6 address
// ::ffff:a.b.c.d, and an IPv4 range /n is the mapped range /(96+n). One representation means one
// matcher, and a client that reaches us as ::ffff:203.0.113.7 is the same client as 203.0.113.7: it
// can neither dodge a deny entry nor gain a separate rate-limit counter by switching spellings.

/** An IP address as 16 bytes (IPv4 addresses are IPv4-mapped). */
export type IpAddress = Uint8Array;

/** A CIDR range: the network's 16 bytes (host bits zero) and its prefix length over 128 bits. */
export interface IpRange {
  readonly network: IpAddress;
  readonly prefix: number;
}

const MAPPED_PREFIX = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
const HEX_GROUP = /^[0-9a-fA-F]{1,4}$/;
// Decimal without leading zeros: "010" is octal to some parsers and decimal to others; refuse to guess.
const DECIMAL = /^(0|[1-9][0-9]{0,2})$/;
const PREFIX_LENGTH = /^(0|[1-9][0-9]{0,2})$/;

/** Whether `address` is an IPv4 address (held IPv4-mapped). */
export function isIpv4(address: IpAddress): boolean {
  return MAPPED_PREFIX.every((byte, i) => address[i] === byte);
}

function parseIpv4(text: string): number[] | undefined {
  const parts = text.split(".");
  if (parts.length !== 4) return undefined;
  const bytes: number[] = [];
  for (const part of parts) {
    if (!DECIMAL.test(part)) return undefined;
    const value = Number(part);
    if (value > 255) return undefined;
    bytes.push(value);
  }
  return bytes;
}

function parseIpv6(text: string): IpAddress | undefined {
  // A trailing dotted quad stands for the last two groups (::ffff:192.0.2.1, 64:ff9b::192.0.2.1).
  let tail: number[] = [];
  let head = text;
  const lastColon = text.lastIndexOf(":");
  if (text.includes(".", lastColon)) {
    const v4 = parseIpv4(text.slice(lastColon + 1));
    if (!v4) return undefined;
    tail = v4;
    head = text.slice(0, lastColon + 1);
    // "::1.2.3.4" leaves "::"; "1::2:1.2.3.4" leaves "1::2:"; drop the separator's lone colon.
    if (head.endsWith(":") && !head.endsWith("::")) head = head.slice(0, -1);
  }
  const halves = head.split("::");
  if (halves.length > 2) return undefined;
  const groups = (half: string): number[] | undefined => {
    if (half === "") return [];
    const out: number[] = [];
    for (const group of half.split(":")) {
      if (!HEX_GROUP.test(group)) return undefined;
      out.push(Number.parseInt(group, 16));
    }
    return out;
  };
  const left = groups(halves[0]!);
  const right = halves.length === 2 ? groups(halves[1]!) : [];
  if (!left || !right) return undefined;
  const tailGroups = tail.length / 2;
  const explicit = left.length + right.length + tailGroups;
  if (halves.length === 2 ? explicit > 7 : explicit !== 8) return undefined;
  const all = [...left, ...new Array<number>(8 - explicit).fill(0), ...right];
  const bytes = new Uint8Array(16);
  all.forEach((group, i) => {
    bytes[2 * i] = group >> 8;
    bytes[2 * i + 1] = group & 0xff;
  });
  bytes.set(tail, 12);
  return bytes;
}

/**
 * Parses an IPv4 or IPv6 address (RFC 4291 text forms, `::` compression, embedded dotted quad).
 * Returns undefined for anything else, including zone ids, brackets and ports.
 *
 * @example
 * formatIp(parseIp("2001:DB8:0:0::1")!) // "2001:db8::1"
 * formatIp(parseIp("::ffff:203.0.113.7")!) // "203.0.113.7"
 */
export function parseIp(text: string): IpAddress | undefined {
  if (typeof text !== "string" || text.length === 0 || text.length > 45) return undefined;
  if (text.includes(":")) return parseIpv6(text);
  const v4 = parseIpv4(text);
  if (!v4) return undefined;
  const bytes = new Uint8Array(16);
  bytes.set(MAPPED_PREFIX);
  bytes.set(v4, 12);
  return bytes;
}

/**
 * Parses a CIDR range ("198.51.100.0/24", "2001:db8::/32") or a single address (a full-length range).
 * Throws an Error saying what is wrong: the message is meant for a config error.
 *
 * @example
 * parseRange("198.51.100.0/24").prefix // 120 (96 + 24: IPv4 ranges are held IPv4-mapped)
 */
export function parseRange(text: string): IpRange {
  if (typeof text !== "string") throw new Error("must be an IP address or CIDR range, as a string");
  const slash = text.indexOf("/");
  const addressText = slash === -1 ? text : text.slice(0, slash);
  const network = parseIp(addressText);
  if (!network) throw new Error(`${JSON.stringify(text)} is not an IP address or CIDR range`);
  const v4 = !addressText.includes(":");
  const bits = v4 ? 32 : 128;
  let length = bits;
  if (slash !== -1) {
    const lengthText = text.slice(slash + 1);
    length = PREFIX_LENGTH.test(lengthText) ? Number(lengthText) : Number.NaN;
    if (!(length <= bits)) {
      throw new Error(`${JSON.stringify(text)}: the prefix length must be a whole number from 0 to ${bits}`);
    }
  }
  const prefix = v4 ? 96 + length : length;
  const masked = mask(network, prefix);
  if (!masked.every((byte, i) => byte === network[i])) {
    // A typo such as 10.1.2.3/8 would silently cover all of 10.0.0.0/8; ask for the intended network.
    throw new Error(`${JSON.stringify(text)} has host bits set; did you mean ${formatIp(masked)}/${length}?`);
  }
  return { network: masked, prefix };
}

function mask(address: IpAddress, prefix: number): IpAddress {
  const out = new Uint8Array(16);
  for (let i = 0; i < 16; i++) {
    const keep = Math.min(8, Math.max(0, prefix - 8 * i));
    out[i] = address[i]! & ((0xff << (8 - keep)) & 0xff);
  }
  return out;
}

/**
 * Whether `address` lies in `range`.
 *
 * @example
 * inRange(parseIp("198.51.100.9")!, parseRange("198.51.100.0/24")) // true
 */
export function inRange(address: IpAddress, range: IpRange): boolean {
  const masked = mask(address, range.prefix);
  return masked.every((byte, i) => byte === range.network[i]);
}

/**
 * A set of ranges, built once from config entries; `has` answers whether an address is in any of them.
 *
 * @example
 * const deny = IpSet.from(["198.51.100.0/24", "2001:db8::/32"]);
 * deny.has(parseIp("2001:db8::7")!) // true
 */
export class IpSet {
  private constructor(private readonly ranges: readonly IpRange[]) {}

  /** Builds a set from entries; throws on the first bad one (use `parseRange` per entry to report each). */
  static from(entries: readonly string[]): IpSet {
    return new IpSet(entries.map(parseRange));
  }

  get size(): number {
    return this.ranges.length;
  }

  has(address: IpAddress): boolean {
    return this.ranges.some((range) => inRange(address, range));
  }
}

/**
 * The canonical text of an address: dotted quad for IPv4 (and IPv4-mapped IPv6), RFC 5952 for IPv6
 * (lowercase, no leading zeros, the longest run of two or more zero groups as `::`, the first if tied).
 *
 * @example
 * formatIp(parseIp("2001:0db8:0000:0000:0001:0000:0000:0001")!) // "2001:db8::1:0:0:1"
 */
export function formatIp(address: IpAddress): string {
  if (isIpv4(address)) return Array.from(address.subarray(12)).join(".");
  const groups: number[] = [];
  for (let i = 0; i < 8; i++) groups.push((address[2 * i]! << 8) | address[2 * i + 1]!);
  let bestStart = -1;
  let bestLength = 1;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLength) {
      bestStart = i;
      bestLength = j - i;
    }
    i = j;
  }
  const hex = (list: number[]) => list.map((group) => group.toString(16)).join(":");
  if (bestStart === -1) return hex(groups);
  return `${hex(groups.slice(0, bestStart))}::${hex(groups.slice(bestStart + bestLength))}`;
}

/**
 * The network an address belongs to at `prefix` bits (over its own family: 0..32 or 0..128), as text.
 * Used to count an IPv6 client per /64: one subscriber is usually handed a whole /64 and can pick any
 * address in it, so per-address counting on IPv6 would be free to dodge.
 *
 * @example
 * networkOf(parseIp("2001:db8:1:2:aaaa::1")!, 64) // "2001:db8:1:2::/64"
 */
export function networkOf(address: IpAddress, prefix: number): string {
  const v4 = isIpv4(address);
  const masked = mask(address, v4 ? 96 + prefix : prefix);
  return `${formatIp(masked)}/${prefix}`;
}

/**
 * The identifier of a client address: IPv4 as written canonically (an IPv4-mapped IPv6 address is its
 * IPv4 address), IPv6 by its /64, since one subscriber usually holds a whole /64 and could otherwise
 * take a fresh counter per address.
 *
 * @example
 * clientKey(parseIp("2001:db8::1")!) // "2001:db8::/64"
 */
export function clientKey(ip: IpAddress): string {
  return isIpv4(ip) ? formatIp(ip) : networkOf(ip, 64);
}
