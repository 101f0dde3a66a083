// The webhook URL rule: where kiste may send deliveries. HTTPS on port 443, no user name or
// password, and a host that resolves to public addresses only — every address it resolves to, so a
// name with one private answer among public ones is refused too. The check runs at create and
// update and again before every delivery, and the delivery connects to the address checked here
// (CheckedTarget.address), so DNS cannot be switched between check and connection.
//
// Refused address ranges (IPv4-mapped and NAT64/6to4-embedded IPv4 are judged as that IPv4):
// see IPV4_REFUSED and IPV6 rules below; IPv6 outside global unicast 2000::/3 is refused as a whole.
//
// The operator setting KISTE_WEBHOOKS_ALLOW_PRIVATE_TARGETS_UNSAFE (rules.allowPrivate) lifts the
// scheme, port and address rules, for development and tests; credentials are refused regardless.
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { KisteError } from '../errors';

export interface ResolvedAddress {
  address: string;
  family: number;
}

/** Name → every address it resolves to (like getaddrinfo). Injected in tests. */
export type Resolver = (hostname: string) => Promise<ResolvedAddress[]>;

export const systemResolver: Resolver = (hostname) => lookup(hostname, { all: true, verbatim: true });

export interface TargetRules {
  /** Development and tests only: http://, any port, private addresses. */
  allowPrivate: boolean;
}

export interface CheckedTarget {
  url: URL;
  /** Host name as the URL names it, without IPv6 brackets (for SNI and Host). */
  hostname: string;
  /** The address that was checked: the one to connect to. */
  address: string;
  family: 4 | 6;
}

export type AddressVerdict = { public: true } | { public: false; category: string };

const RESOLVE_TIMEOUT_MS = 5_000;

// ---- address classification ----

interface Range {
  base: bigint;
  bits: number;
  category: string;
}

function ipv4ToBigInt(address: string): bigint {
  return address.split('.').reduce((value, octet) => (value << 8n) | BigInt(Number(octet)), 0n);
}

function v4(cidr: string, category: string): Range {
  const [base, bits] = cidr.split('/');
  return { base: ipv4ToBigInt(base!), bits: Number(bits), category };
}

function v6(cidr: string, category: string): Range {
  const [base, bits] = cidr.split('/');
  return { base: ipv6ToBigInt(base!)!, bits: Number(bits), category };
}

function inRange(value: bigint, range: Range, width: number): boolean {
  const shift = BigInt(width - range.bits);
  return value >> shift === range.base >> shift;
}

/** RFC 6890 special-purpose IPv4 blocks that are not globally reachable, and multicast/reserved. */
const IPV4_REFUSED: Range[] = [
  v4('0.0.0.0/8', 'unspecified ("this network", 0.0.0.0/8)'),
  v4('10.0.0.0/8', 'private (RFC 1918)'),
  v4('100.64.0.0/10', 'shared CGNAT (100.64.0.0/10)'),
  v4('127.0.0.0/8', 'loopback'),
  v4('169.254.0.0/16', 'link-local (169.254.0.0/16, incl. cloud metadata)'),
  v4('172.16.0.0/12', 'private (RFC 1918)'),
  v4('192.0.0.0/24', 'IETF protocol assignment (192.0.0.0/24)'),
  v4('192.0.2.0/24', 'documentation (TEST-NET-1)'),
  v4('192.88.99.0/24', 'deprecated 6to4 relay anycast'),
  v4('192.168.0.0/16', 'private (RFC 1918)'),
  v4('198.18.0.0/15', 'benchmarking (198.18.0.0/15)'),
  v4('198.51.100.0/24', 'documentation (TEST-NET-2)'),
  v4('203.0.113.0/24', 'documentation (TEST-NET-3)'),
  v4('224.0.0.0/4', 'multicast'),
  v4('240.0.0.0/4', 'reserved (240.0.0.0/4, incl. broadcast)'),
];

/** IPv6 ranges whose low 32 bits (or bits 16–47 for 6to4) are an IPv4 address: judged as that IPv4. */
const IPV6_EMBEDDING: { range: Range; ipv4At: number }[] = [
  { range: v6('::ffff:0:0/96', 'IPv4-mapped'), ipv4At: 0 },
  { range: v6('64:ff9b::/96', 'NAT64'), ipv4At: 0 },
  { range: v6('2002::/16', '6to4'), ipv4At: 80 },
];

/** Refused inside global unicast, and named ranges outside it (for clearer messages). */
const IPV6_REFUSED: Range[] = [
  v6('::/128', 'unspecified (::)'),
  v6('::1/128', 'loopback (::1)'),
  v6('::/96', 'IPv4-compatible (deprecated)'),
  v6('64:ff9b:1::/48', 'local-use NAT64'),
  v6('100::/64', 'discard-only'),
  v6('2001::/23', 'IETF protocol assignment (2001::/23, incl. Teredo)'),
  v6('2001:db8::/32', 'documentation (2001:db8::/32)'),
  v6('3fff::/20', 'documentation (3fff::/20)'),
  v6('fc00::/7', 'unique-local (fc00::/7)'),
  v6('fe80::/10', 'link-local (fe80::/10)'),
  v6('fec0::/10', 'site-local (deprecated)'),
  v6('ff00::/8', 'multicast'),
];
const IPV6_GLOBAL_UNICAST = v6('2000::/3', 'global unicast');

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
  const range = IPV4_REFUSED.find((r) => inRange(value, r, 32));
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
  for (const { range, ipv4At } of IPV6_EMBEDDING) {
    if (!inRange(value, range, 128)) continue;
    const embedded = bigIntToIpv4((value >> BigInt(ipv4At)) & 0xffffffffn);
    const verdict = classifyIpv4(embedded);
    return verdict.public ? verdict : { public: false, category: `${verdict.category}, as ${range.category} IPv6 ${embedded}` };
  }
  const range = IPV6_REFUSED.find((r) => inRange(value, r, 128));
  if (range) return { public: false, category: range.category };
  if (!inRange(value, IPV6_GLOBAL_UNICAST, 128)) return { public: false, category: 'reserved (outside 2000::/3)' };
  return { public: true };
}

// ---- the URL rule ----

function refused(message: string): KisteError {
  return new KisteError('N11', { message, param: 'url' });
}

/** The parts of the rule that need no DNS: scheme, credentials, port. Returns the normalised URL. */
export function parseWebhookUrl(raw: string, rules: TargetRules): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw refused('The webhook URL is not a valid absolute URL');
  }
  if (url.username || url.password) throw refused('Webhook URLs must not contain a user name or password');
  const schemes = rules.allowPrivate ? ['https:', 'http:'] : ['https:'];
  if (!schemes.includes(url.protocol)) throw refused(`Webhook URLs must use https:// (got ${url.protocol}//)`);
  if (!rules.allowPrivate && url.port !== '') throw refused(`Webhook URLs must use port 443 (got ${url.port})`);
  if (!url.hostname) throw refused('The webhook URL names no host');
  return url;
}

function withTimeout<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    work.finally(() => clearTimeout(timer)),
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(Object.assign(new Error(`${what} timed out`), { code: 'ETIMEOUT' })), ms);
    }),
  ]);
}

/**
 * The whole rule: parses, resolves the host (every address), refuses when any address is not
 * public (unless rules.allowPrivate), and returns the address to connect to. Throws 422 N11 (param url).
 */
export async function checkWebhookTarget(raw: string, rules: TargetRules, resolve: Resolver = systemResolver): Promise<CheckedTarget> {
  const url = parseWebhookUrl(raw, rules);
  const hostname = url.hostname.replace(/^\[(.*)\]$/, '$1');
  let addresses: ResolvedAddress[];
  if (isIP(hostname)) {
    addresses = [{ address: hostname, family: isIP(hostname) }];
  } else {
    try {
      addresses = await withTimeout(resolve(hostname), RESOLVE_TIMEOUT_MS, `resolving ${hostname}`);
    } catch (error) {
      const code = (error as { code?: string }).code ?? (error as Error).message;
      throw refused(`The webhook URL's host ${hostname} could not be resolved (${code})`);
    }
    if (addresses.length === 0) throw refused(`The webhook URL's host ${hostname} resolves to no address`);
  }
  for (const { address } of addresses) {
    const verdict = classifyAddress(address);
    if (verdict.public || rules.allowPrivate) continue;
    const subject = isIP(hostname) ? `The webhook URL's address ${address} is` : `The webhook URL's host ${hostname} resolves to ${address},`;
    throw refused(`${subject} a ${verdict.category} address; webhook URLs must resolve to public addresses only`);
  }
  const chosen = addresses[0]!;
  const family = isIP(chosen.address);
  if (family !== 4 && family !== 6) throw refused(`The webhook URL's host ${hostname} resolves to ${chosen.address}, which is not an IP address`);
  return { url, hostname, address: chosen.address, family };
}
