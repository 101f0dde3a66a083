// What a browser is told and checked for at kiste's edge, beyond credentials and CSRF tokens:
// - WebSocket handshakes (SSH tunnel, terminal, recovery console) must come from the console's or
//   the desktop viewer's pages. Browsers send a handshake's Origin but apply no CORS to it, and
//   they send the SameSite=Lax session cookie along with handshakes from any page of the same site
//   (a sibling subdomain, such as a service hosted there): without this check such a page could
//   open a tenant's tunnel or terminal in their name. A client outside a browser (the CLI, an
//   OpenSSH ProxyCommand) sends no Origin and is not affected; its token still authorizes it.
// - With HTTPS (KISTE_TLS_* or an https: KISTE_BASE_URL) every response carries HSTS, so a browser
//   that has seen kiste once never again speaks plain HTTP to it (which would let a network
//   attacker plant cookies); cookies get the __Host- prefix (cookies.ts).
import type { Config } from '../config';
import { isLoopbackHost } from '../config';
import { KisteError } from '../errors';

/** One year, without includeSubDomains: other hosts of the domain are not kiste's to decide for. */
export const HSTS = 'max-age=31536000';

/** Whether browsers reach kiste over HTTPS (directly, or through a TLS proxy the base URL names). */
export function servesHttps(config: Pick<Config, 'tls' | 'baseUrl'>): boolean {
  return config.tls !== null || config.baseUrl.startsWith('https:');
}

const LOOPBACK_NAMES = ['localhost', '127.0.0.1', '[::1]'];
const allowedByConfig = new WeakMap<object, Set<string>>();

/**
 * The origins whose pages may open kiste's WebSockets: the console's and the desktop viewer's. A
 * loopback one also under its other loopback names (the same port and scheme: the same server), so
 * a console opened at http://localhost:8080 works when the service calls itself http://127.0.0.1:8080.
 */
export function webSocketOrigins(config: Pick<Config, 'consoleUrl' | 'desktopUrl'>): Set<string> {
  let allowed = allowedByConfig.get(config);
  if (!allowed) {
    allowed = new Set<string>();
    for (const url of [config.consoleUrl, config.desktopUrl]) {
      const parsed = new URL(url);
      allowed.add(parsed.origin);
      if (isLoopbackHost(parsed.hostname.replace(/^\[|\]$/g, ''))) {
        for (const name of LOOPBACK_NAMES) allowed.add(`${parsed.protocol}//${name}${parsed.port ? `:${parsed.port}` : ''}`);
      }
    }
    allowedByConfig.set(config, allowed);
  }
  return allowed;
}

/** Refuses (403 A15) a WebSocket handshake a browser made from another site's page; one without Origin passes. */
export function checkWebSocketOrigin(config: Pick<Config, 'consoleUrl' | 'desktopUrl'>, origin: string | string[] | undefined): void {
  if (origin === undefined) return;
  const value = Array.isArray(origin) ? origin.join(',') : origin;
  if (webSocketOrigins(config).has(value.toLowerCase())) return;
  throw new KisteError('A15', { message: `WebSockets may be opened only from the console or the desktop viewer, not from ${value.slice(0, 200)}`, param: 'origin' });
}
