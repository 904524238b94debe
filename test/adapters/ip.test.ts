import { describe, expect, test } from "vitest";
import { formatIp, IpSet, inRange, isIpv4, networkOf, parseIp, parseRange } from "../../src/adapters/ip.js";

const canonical = (text: string) => {
  const ip = parseIp(text);
  return ip === undefined ? undefined : formatIp(ip);
};

describe("parseIp and formatIp", () => {
  test.each([
    ["0.0.0.0", "0.0.0.0"],
    ["255.255.255.255", "255.255.255.255"],
    ["203.0.113.7", "203.0.113.7"],
    ["::", "::"],
    ["::1", "::1"],
    ["1::", "1::"],
    ["2001:DB8::1", "2001:db8::1"],
    ["2001:0db8:0000:0000:0000:0000:0000:0001", "2001:db8::1"],
    ["2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1"], // tie: the first run is compressed
    ["2001:db8:0:1:1:1:1:1", "2001:db8:0:1:1:1:1:1"], // a single zero group is not compressed
    ["1:0:0:2:0:0:0:3", "1:0:0:2::3"], // the longest run wins
    ["fe80::1:2:3:4:5:6", "fe80:0:1:2:3:4:5:6"],
    ["1:2:3:4:5:6:7::", "1:2:3:4:5:6:7:0"],
    ["::2:3:4:5:6:7:8", "0:2:3:4:5:6:7:8"],
    ["::ffff:203.0.113.7", "203.0.113.7"], // IPv4-mapped is the IPv4 address
    ["::FFFF:cb00:7107", "203.0.113.7"],
    ["0:0:0:0:0:ffff:203.0.113.7", "203.0.113.7"],
    ["64:ff9b::192.0.2.33", "64:ff9b::c000:221"],
    ["::192.0.2.33", "::c000:221"],
    ["1:2:3:4:5:6:1.2.3.4", "1:2:3:4:5:6:102:304"],
  ])("%s → %s", (input, expected) => {
    expect(canonical(input)).toBe(expected);
  });

  test.each([
    "",
    "1.2.3",
    "1.2.3.4.5",
    "256.0.0.1",
    "01.2.3.4", // leading zero: octal to some parsers
    "1.2.3.-4",
    "1.2.3.4 ",
    " 1.2.3.4",
    "1.2.3.a",
    ":::",
    "1:::2",
    "1::2::3",
    ":1::",
    "::1:",
    "1:2:3:4:5:6:7",
    "1:2:3:4:5:6:7:8:9",
    "1:2:3:4::5:6:7:8", // "::" must stand for at least one group
    "12345::",
    "g::1",
    "fe80::1%eth0",
    "[::1]",
    "::ffff:256.0.0.1",
    "::1.2.3",
    "1:2:3:4:5:6:7:1.2.3.4",
    "1.2.3.4::",
    "203.0.113.7:443",
  ])("rejects %j", (input) => {
    expect(parseIp(input)).toBeUndefined();
  });

  test("IPv4 and IPv4-mapped addresses are one and the same", () => {
    expect(parseIp("198.51.100.1")).toEqual(parseIp("::ffff:198.51.100.1"));
    expect(isIpv4(parseIp("::ffff:198.51.100.1")!)).toBe(true);
    expect(isIpv4(parseIp("::198.51.100.1")!)).toBe(false);
  });
});

describe("parseRange and inRange", () => {
  const within = (address: string, range: string) => inRange(parseIp(address)!, parseRange(range));

  test.each([
    // [address, range, inside]
    ["198.51.100.0", "198.51.100.0/24", true],
    ["198.51.100.255", "198.51.100.0/24", true],
    ["198.51.101.0", "198.51.100.0/24", false],
    ["198.51.99.255", "198.51.100.0/24", false],
    ["10.200.0.1", "10.0.0.0/8", true],
    ["11.0.0.0", "10.0.0.0/8", false],
    ["192.0.2.127", "192.0.2.128/25", false],
    ["192.0.2.128", "192.0.2.128/25", true],
    ["172.16.0.1", "172.16.0.0/12", true],
    ["172.32.0.1", "172.16.0.0/12", false],
    ["8.8.8.8", "0.0.0.0/0", true],
    ["203.0.113.7", "203.0.113.7", true],
    ["203.0.113.7", "203.0.113.7/32", true],
    ["203.0.113.8", "203.0.113.7/32", false],
    ["::ffff:198.51.100.9", "198.51.100.0/24", true],
    ["198.51.100.9", "::ffff:198.51.100.0/120", true],
    ["198.51.101.9", "::ffff:198.51.100.0/120", false],
    ["2001:db8::1", "2001:db8::/32", true],
    ["2001:db9::1", "2001:db8::/32", false],
    ["2001:db8:bad:ffff:ffff:ffff:ffff:ffff", "2001:db8:bad::/48", true],
    ["2001:db8:bae::", "2001:db8:bad::/48", false],
    ["2001:db8::8000:0:0:0", "2001:db8::8000:0:0:0/65", true],
    ["2001:db8::7fff:0:0:0", "2001:db8::8000:0:0:0/65", false],
    ["::1", "::1/128", true],
    ["::2", "::1/128", false],
    ["2001:db8::1", "::/0", true],
    ["8.8.8.8", "::/0", true], // ::/0 spans the IPv4-mapped block too
    ["2001:db8::1", "0.0.0.0/0", false], // but 0.0.0.0/0 is IPv4 only
    ["2001:db8::1", "2001:db8::1", true],
  ])("%s in %s: %s", (address, range, inside) => {
    expect(within(address, range)).toBe(inside);
  });

  test("IPv4 prefixes are held IPv4-mapped", () => {
    expect(parseRange("198.51.100.0/24").prefix).toBe(120);
    expect(parseRange("0.0.0.0/0").prefix).toBe(96);
    expect(parseRange("2001:db8::/32").prefix).toBe(32);
    expect(parseRange("203.0.113.7").prefix).toBe(128);
  });

  test.each([
    ["10.1.2.3/8", '"10.1.2.3/8" has host bits set; did you mean 10.0.0.0/8?'],
    ["2001:db8::1/32", '"2001:db8::1/32" has host bits set; did you mean 2001:db8::/32?'],
    ["1.2.3.0/33", '"1.2.3.0/33": the prefix length must be a whole number from 0 to 32'],
    ["::/129", '"::/129": the prefix length must be a whole number from 0 to 128'],
    ["1.2.3.0/", '"1.2.3.0/": the prefix length must be a whole number from 0 to 32'],
    ["1.2.3.0/024", '"1.2.3.0/024": the prefix length must be a whole number from 0 to 32'],
    ["1.2.3.0/-1", '"1.2.3.0/-1": the prefix length must be a whole number from 0 to 32'],
    ["1.2.3.0/2 4", '"1.2.3.0/2 4": the prefix length must be a whole number from 0 to 32'],
    ["1.2.3.0/24/8", '"1.2.3.0/24/8": the prefix length must be a whole number from 0 to 32'],
    ["nope/8", '"nope/8" is not an IP address or CIDR range'],
    ["", '"" is not an IP address or CIDR range'],
  ])("rejects %j", (input, message) => {
    expect(() => parseRange(input)).toThrow(new Error(message));
  });
});

describe("IpSet", () => {
  test("answers for any of its ranges", () => {
    const set = IpSet.from(["198.51.100.0/24", "2001:db8:bad::/48", "203.0.113.7"]);
    expect(set.size).toBe(3);
    const has = (text: string) => set.has(parseIp(text)!);
    expect([
      has("198.51.100.77"),
      has("::ffff:198.51.100.77"),
      has("2001:db8:bad:1::1"),
      has("203.0.113.7"),
      has("203.0.113.6"),
      has("2001:db8:bae::1"),
    ]).toEqual([true, true, true, true, false, false]);
  });

  test("an empty set has nobody", () => {
    expect(IpSet.from([]).has(parseIp("1.1.1.1")!)).toBe(false);
  });
});

describe("networkOf", () => {
  test.each([
    ["2001:db8:1:2:aaaa:bbbb:cccc:dddd", 64, "2001:db8:1:2::/64"],
    ["2001:db8::1", 48, "2001:db8::/48"],
    ["2001:db8::1", 0, "::/0"],
    ["203.0.113.77", 24, "203.0.113.0/24"],
    ["203.0.113.77", 32, "203.0.113.77/32"],
  ])("%s at /%i → %s", (address, prefix, expected) => {
    expect(networkOf(parseIp(address)!, prefix)).toBe(expected);
  });
});
