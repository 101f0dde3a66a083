// Which IP addresses are public (globally reachable unicast) and which are special: loopback,
// RFC 1918, CGNAT, link-local and cloud metadata, unique-local, documentation, multicast … One
// list for every rule that needs it: webhook targets must be public (src/domain/webhook-target.ts)
// and machines reach nothing else (src/compute/jail/egress-rules.ts turns the same list into
// nftables sets).
//
// IPv4-mapped, NAT64 and 6to4 IPv6 addresses carry an IPv4 address and are judged as that IPv4;
// IPv6 outside global unicast 2000::/3 is refused as a whole.
import { isIP } from 'node:net';

export type AddressVerdict = { public: true } | { public: false; category: string };

interface NamedCidr {
  cidr: string;
  category: string;
}

/** RFC 6890 special-purpose IPv4 blocks that are not globally reachable, and multicast/reserved. */
export const IPV4_SPECIAL: readonly NamedCidr[] = [
  { cidr: '0.0.0.0/8', category: 'unspecified ("this network", 0.0.0.0/8)' },
  { cidr: '10.0.0.0/8', category: 'private (RFC 1918)' },
  { cidr: '100.64.0.0/10', category: 'shared CGNAT (100.64.0.0/10)' },
  { cidr: '127.0.0.0/8', category: 'loopback' },
  { cidr: '169.254.0.0/16', category: 'link-local (169.254.0.0/16, incl. cloud metadata)' },
  { cidr: '172.16.0.0/12', category: 'private (RFC 1918)' },
  { cidr: '192.0.0.0/24', category: 'IETF protocol assignment (192.0.0.0/24)' },
  { cidr: '192.0.2.0/24', category: 'documentation (TEST-NET-1)' },
  { cidr: '192.88.99.0/24', category: 'deprecated 6to4 relay anycast' },
  { cidr: '192.168.0.0/16', category: 'private (RFC 1918)' },
  { cidr: '198.18.0.0/15', category: 'benchmarking (198.18.0.0/15)' },
  { cidr: '198.51.100.0/24', category: 'documentation (TEST-NET-2)' },
  { cidr: '203.0.113.0/24', category: 'documentation (TEST-NET-3)' },
  { cidr: '224.0.0.0/4', category: 'multicast' },
  { cidr: '240.0.0.0/4', category: 'reserved (240.0.0.0/4, incl. broadcast)' },
];

/** IPv6 ranges whose low 32 bits (or bits 16–47 for 6to4) are an IPv4 address: judged as that IPv4. */
export const IPV6_EMBEDDING: readonly (NamedCidr & { ipv4At: number })[] = [
  { cidr: '::ffff:0:0/96', category: 'IPv4-mapped', ipv4At: 0 },
  { cidr: '64:ff9b::/96', category: 'NAT64', ipv4At: 0 },
  { cidr: '2002::/16', category: '6to4', ipv4At: 80 },
];

/** Refused inside global unicast, and named ranges outside it (for clearer messages). */
export const IPV6_SPECIAL: readonly NamedCidr[] = [
  { cidr: '::/128', category: 'unspecified (::)' },
  { cidr: '::1/128', category: 'loopback (::1)' },
  { cidr: '::/96', category: 'IPv4-compatible (deprecated)' },
  { cidr: '64:ff9b:1::/48', category: 'local-use NAT64' },
  { cidr: '100::/64', category: 'discard-only' },
  { cidr: '2001::/23', category: 'IETF protocol assignment (2001::/23, incl. Teredo)' },
  { cidr: '2001:db8::/32', category: 'documentation (2001:db8::/32)' },
  { cidr: '3fff::/20', category: 'documentation (3fff::/20)' },
  { cidr: 'fc00::/7', category: 'unique-local (fc00::/7)' },
  { cidr: 'fe80::/10', category: 'link-local (fe80::/10)' },
  { cidr: 'fec0::/10', category: 'site-local (deprecated)' },
  { cidr: 'ff00::/8', category: 'multicast' },
];

/** Everything outside it is refused. */
export const IPV6_GLOBAL_UNICAST = '2000::/3';

interface Range {
  base: bigint;
  bits: number;
  category: string;
}

function ipv4ToBigInt(address: string): bigint {
  return address.split('.').reduce((value, octet) => (value << 8n) | BigInt(Number(octet)), 0n);
}

function toRange({ cidr, category }: NamedCidr, family: 4 | 6): Range {
  const [base, bits] = cidr.split('/');
  return { base: family === 4 ? ipv4ToBigInt(base!) : ipv6ToBigInt(base!)!, bits: Number(bits), category };
}

function inRange(value: bigint, range: Range, width: number): boolean {
  const shift = BigInt(width - range.bits);
  return value >> shift === range.base >> shift;
}

const IPV4_RANGES = IPV4_SPECIAL.map((named) => toRange(named, 4));
const IPV6_RANGES = IPV6_SPECIAL.map((named) => toRange(named, 6));
const EMBEDDING_RANGES = IPV6_EMBEDDING.map((named) => ({ range: toRange(named, 6), ipv4At: named.ipv4At }));
const GLOBAL_UNICAST = toRange({ cidr: IPV6_GLOBAL_UNICAST, category: 'global unicast' }, 6);

/** 128-bit value of an IPv6 address (with an optional dotted IPv4 tail), or null when it is not one. */
function ipv6ToBigInt(address: string): bigint | null {

  if (address.includes('%')) return null; // zone ids: only link-local has them, refused below
  let text = address;
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted) {
    // a dotted IPv4 tail (::ffff:1.2.3.4) is the last two groups
    if (isIP(dotted[1]!) !== 4) return null;
    const value = Number(ipv4ToBigInt(dotted[1]!));
    text = `${text.slice(0, -dotted[1]!.length)}${(value >>> 16).toString(16)}:${(value & 0xffff).toString(16)}`;
  }
  const halves = text.split('::');
  if (halves.length > 2) return null;
  const parse = (part: string) => (part === '' ? [] : part.split(':').map((g) => (/^[0-9a-f]{1,4}$/i.test(g) ? parseInt(g, 16) : NaN)));
  const head = parse(halves[0]!);
  const rest = halves.length === 2 ? parse(halves[1]!) : [];
  const given = head.length + rest.length;
  if ([...head, ...rest].some(Number.isNaN)) return null;
  if (halves.length === 1 ? given !== 8 : given > 7) return null;
  const groups = [...head, ...Array<number>(8 - given).fill(0), ...rest];
  return groups.reduce((value: bigint, group: number) => (value << 16n) | BigInt(group), 0n);
}

function bigIntToIpv4(value: bigint): string {
  return [24n, 16n, 8n, 0n].map((shift) => Number((value >> shift) & 0xffn)).join('.');
}

function classifyIpv4(address: string): AddressVerdict {
  const value = ipv4ToBigInt(address);
  const range = IPV4_RANGES.find((r) => inRange(value, r, 32));
  return range ? { public: false, category: range.category } : { public: true };
}

/** Is this address public (globally reachable unicast)? Anything not an IP address is refused. */
export function classifyAddress(address: string): AddressVerdict {
  const bare = address.replace(/^\[(.*)\]$/, '$1');
  const version = isIP(bare);
  if (version === 4) return classifyIpv4(bare);
  if (version !== 6) return { public: false, category: 'not an IP address' };
  if (bare.includes('%')) return { public: false, category: 'link-local (scoped)' };
  const value = ipv6ToBigInt(bare);
  if (value === null) return { public: false, category: 'not an IP address' };
  for (const { range, ipv4At } of EMBEDDING_RANGES) {
    if (!inRange(value, range, 128)) continue;
    const embedded = bigIntToIpv4((value >> BigInt(ipv4At)) & 0xffffffffn);
    const verdict = classifyIpv4(embedded);
    return verdict.public ? verdict : { public: false, category: `${verdict.category}, as ${range.category} IPv6 ${embedded}` };
  }
  const range = IPV6_RANGES.find((r) => inRange(value, r, 128));
  if (range) return { public: false, category: range.category };
  if (!inRange(value, GLOBAL_UNICAST, 128)) return { public: false, category: 'reserved (outside 2000::/3)' };
  return { public: true };
}

export interface Cidr {
  family: 4 | 6;
  /** Normalised: host bits cleared, IPv6 written out in full. */
  cidr: string;
}

/** `10.1.0.0/16`, `2001:db8::/32` or a single address; null when it is not one. */
export function parseCidr(text: string): Cidr | null {
  const [address, prefix, extra] = text.trim().split('/');
  if (extra !== undefined || !address) return null;
  const family = isIP(address);
  if (family !== 4 && family !== 6) return null;
  const width = family === 4 ? 32 : 128;
  if (prefix !== undefined && !/^\d{1,3}$/.test(prefix)) return null;
  const bits = prefix === undefined ? width : Number(prefix);
  if (bits > width) return null;
  const value = family === 4 ? ipv4ToBigInt(address) : ipv6ToBigInt(address);
  if (value === null) return null;
  const base = (value >> BigInt(width - bits)) << BigInt(width - bits);
  return { family, cidr: `${family === 4 ? bigIntToIpv4(base) : bigIntToIpv6(base)}/${bits}` };
}

function bigIntToIpv6(value: bigint): string {
  return Array.from({ length: 8 }, (_, i) => ((value >> BigInt(112 - 16 * i)) & 0xffffn).toString(16)).join(':');
}

/**
 * The special ranges as CIDRs per family, for packet filters: IPv4 ones as they are, and for IPv6
 * the special IPv6 ranges plus every special IPv4 range as it appears inside NAT64 and 6to4 (a
 * filter cannot look inside an address; IPv4-mapped addresses travel as IPv4 packets).
 */
export function specialRanges(): { ipv4: string[]; ipv6: string[] } {
  const ipv6 = IPV6_SPECIAL.map((named) => named.cidr);
  for (const embedding of IPV6_EMBEDDING) {
    if (embedding.cidr.startsWith('::ffff:')) continue;
    const outer = toRange(embedding, 6);
    for (const inner of IPV4_RANGES) {
      const base = outer.base | (inner.base << BigInt(embedding.ipv4At));
      ipv6.push(`${bigIntToIpv6(base)}/${outer.bits + inner.bits}`);
    }
  }
  return { ipv4: IPV4_SPECIAL.map((named) => named.cidr), ipv6 };
}
