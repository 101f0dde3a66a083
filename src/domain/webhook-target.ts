// The webhook URL rule: where kiste may send deliveries. HTTPS on port 443, no user name or
// password, and a host that resolves to public addresses only — every address it resolves to, so a
// name with one private answer among public ones is refused too. The check runs at create and
// update and again before every delivery, and the delivery connects to the address checked here
// (CheckedTarget.address), so DNS cannot be switched between check and connection.
//
// Refused address ranges: src/net/special-addresses.ts (the same ranges machines cannot reach).
//
// The operator setting KISTE_WEBHOOKS_ALLOW_PRIVATE_TARGETS_UNSAFE (rules.allowPrivate) lifts the
// scheme, port and address rules, for development and tests; credentials are refused regardless.
import { withDeadline } from '../deadline';
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { KisteError } from '../errors';
import { classifyAddress } from '../net/special-addresses';

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

const RESOLVE_TIMEOUT_MS = 5_000;

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
      addresses = await withDeadline(resolve(hostname), RESOLVE_TIMEOUT_MS, () => Object.assign(new Error(`resolving ${hostname} timed out`), { code: 'ETIMEOUT' }));
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
