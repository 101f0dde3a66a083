// Where hosted services are published (docs/hosted-services.md "URL modes"): a host name of their
// own under a wildcard domain (`<name>-<key>.svc.example.com`), or a path of an origin of their own
// (`https://svc.example.net/s/<key>/`). The services' hosts are never kiste's own (the API's, the
// console's, the desktop viewer's), so an app's JavaScript never runs where kiste's session lives.

export type ServiceAddresses =
  | { mode: 'subdomain'; scheme: 'http' | 'https'; domain: string; port: number | null }
  | { mode: 'path'; origin: string };

/** What a service's URL is made of. */
export interface PublishedAt {
  publicUrl: string;
  /** `/s/<key>` in path mode, empty in subdomain mode. */
  pathPrefix: string;
}

/** Characters of a service's key: lower-case base32 (a DNS label's alphabet, no look-alikes). */
export const SERVICE_KEY_ALPHABET = 'abcdefghijklmnopqrstuvwxyz234567';
export const SERVICE_KEY_LENGTH = 10;
const KEY = `[${SERVICE_KEY_ALPHABET}]{${SERVICE_KEY_LENGTH}}`;

export function publishedAt(addresses: ServiceAddresses, name: string, key: string): PublishedAt {
  if (addresses.mode === 'path') return { publicUrl: `${addresses.origin}/s/${key}/`, pathPrefix: `/s/${key}` };
  const port = addresses.port === null ? '' : `:${addresses.port}`;
  return { publicUrl: `${addresses.scheme}://${name}-${key}.${addresses.domain}${port}/`, pathPrefix: '' };
}

/**
 * Whether a request's Host is in the services' space (any host under the services domain, or the
 * services origin's host): such a request is the proxy's alone, whether a service answers there or
 * not, so nothing of kiste's own ever answers on a host where published apps run.
 */
export function inServiceSpace(addresses: ServiceAddresses, host: string | undefined): boolean {
  if (!host) return false;
  const hostname = hostnameOf(host);
  if (addresses.mode === 'path') return hostname === new URL(addresses.origin).hostname;
  return withinDomain(hostname, addresses.domain);
}

/** Whether a host name is the domain itself or a name under it. */
export function withinDomain(hostname: string, domain: string): boolean {
  return hostname === domain || hostname.endsWith(`.${domain}`);
}

/** A Host header's name as DNS compares it: no port, lower case, no trailing dot (`a.example.com.` is `a.example.com`). */
export function hostnameOf(host: string): string {
  return host.replace(/:\d{1,5}$/, '').toLowerCase().replace(/\.+$/, '');
}

/**
 * The key of the service a request is for, from its Host and path; null when the request is not
 * for a service (kiste's own hosts, another path of the services origin).
 */
export function serviceKeyOf(addresses: ServiceAddresses, host: string | undefined, path: string): string | null {
  if (!host) return null;
  const hostname = hostnameOf(host);
  if (addresses.mode === 'path') {
    if (hostname !== new URL(addresses.origin).hostname) return null;
    return new RegExp(`^/s/(${KEY})(?:[/?#]|$)`).exec(path)?.[1] ?? null;
  }
  const suffix = `.${addresses.domain}`;
  if (!hostname.endsWith(suffix)) return null;
  return new RegExp(`^[a-z0-9](?:[a-z0-9-]{0,50}[a-z0-9])?-(${KEY})$`).exec(hostname.slice(0, -suffix.length))?.[1] ?? null;
}
