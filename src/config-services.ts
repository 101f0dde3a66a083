// KISTE_SERVICES_DOMAIN and KISTE_SERVICES_URL: where hosted services are published, refused when
// it would share a host with kiste's own addresses (a published app's JavaScript must never run on
// the console's origin, nor may its cookies reach it).
import { ConfigError } from './config';
import { hostnameOf, withinDomain, type ServiceAddresses } from './domain/service-addresses';

const DOMAIN = /^(?=.{1,200}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/;

/**
 * The services' addresses from the environment. Unset: on a loopback base URL, host names under
 * `localhost` (browsers resolve `*.localhost` to loopback; a site of its own, apart from 127.0.0.1);
 * otherwise none (creating a service then answers S12 naming both settings).
 */
export function serviceAddressesOf(env: NodeJS.ProcessEnv, own: { baseUrl: string; consoleUrl: string; desktopUrl: string }): ServiceAddresses | null {
  const domain = env.KISTE_SERVICES_DOMAIN?.trim().toLowerCase().replace(/\.$/, '');
  const url = env.KISTE_SERVICES_URL?.trim();
  if (domain && url) throw new ConfigError('set KISTE_SERVICES_DOMAIN or KISTE_SERVICES_URL, not both');
  const base = new URL(own.baseUrl);
  const ownHosts = [own.baseUrl, own.consoleUrl, own.desktopUrl].map((address) => hostnameOf(new URL(address).hostname));
  const portOf = (address: URL) => (address.port ? Number(address.port) : null);
  const scheme = base.protocol === 'https:' ? 'https' : 'http';
  if (domain) {
    if (!DOMAIN.test(domain)) throw new ConfigError(`KISTE_SERVICES_DOMAIN must be a DNS name such as svc.example.com, got "${domain}"`);
    const clash = ownHosts.find((host) => withinDomain(host, domain));
    if (clash) throw new ConfigError(`KISTE_SERVICES_DOMAIN ${domain} holds ${clash}, an address of kiste's own: published apps would share its site (choose a domain of their own, e.g. svc.${domain})`);
    refuseSharedSite('KISTE_SERVICES_DOMAIN', domain, ownHosts, scheme);
    return { mode: 'subdomain', scheme, domain, port: portOf(base) };
  }
  if (url) {
    let origin: URL;
    try {
      origin = new URL(url);
    } catch {
      throw new ConfigError(`KISTE_SERVICES_URL must be an origin such as https://svc.example.net, got "${url}"`);
    }
    if (!['http:', 'https:'].includes(origin.protocol) || origin.pathname !== '/' || origin.search || origin.hash || origin.username || origin.password) {
      throw new ConfigError(`KISTE_SERVICES_URL must be an origin such as https://svc.example.net (no path), got "${url}"`);
    }
    const host = hostnameOf(origin.hostname);
    const clash = ownHosts.find((own) => withinDomain(own, host));
    if (clash) {
      throw new ConfigError(`KISTE_SERVICES_URL ${origin.origin} is on a host of kiste's own or above one (${clash}): published apps would run on its site (use a host name of their own)`);
    }
    refuseSharedSite('KISTE_SERVICES_URL', host, ownHosts, origin.protocol === 'https:' ? 'https' : 'http');
    return { mode: 'path', origin: origin.origin };
  }
  const loopback = ['localhost', '127.0.0.1', '[::1]'].includes(base.hostname) || /^127\./.test(base.hostname);
  if (!loopback || ownHosts.some((host) => host === 'localhost' || host.endsWith('.localhost'))) return null;
  return { mode: 'subdomain', scheme, domain: 'localhost', port: portOf(base) };
}

/**
 * Over plain HTTP kiste's cookies carry no `__Host-` prefix, so an app on a host that shares a parent
 * domain with kiste's could set a cookie for that parent and have kiste read it (a session planted
 * in the console). Refused there: the services' host and kiste's may share no parent domain of two
 * labels or more. Over HTTPS the prefix keeps such cookies out, and a shared parent is allowed.
 */
function refuseSharedSite(setting: string, servicesHost: string, ownHosts: string[], scheme: 'http' | 'https'): void {
  if (scheme === 'https') return;
  const site = (host: string) => (/^[\d.]+$|:/.test(host) ? host : host.split('.').slice(-2).join('.'));
  const shared = ownHosts.find((host) => host !== 'localhost' && site(host) === site(servicesHost));
  if (shared) throw new ConfigError(`${setting}: over plain HTTP the services' host ${servicesHost} may share no parent domain with kiste's ${shared} (its cookies are not __Host- without HTTPS): use HTTPS, or a domain of their own`);
}
