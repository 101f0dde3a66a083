// The proxy's side of private services (docs/hosted-services.md "Access account"): what a request
// brought (kiste's cookie of the service's host, an API key, a `kiste_token` parameter), the cookie a
// traded code becomes, and the request as the app gets it — with none of kiste's credentials, which
// are kiste's alone whether the service is private or public.
import type { IncomingMessage } from 'node:http';
import type { PresentedCredentials } from '../domain/service-access';
import type { ServiceAddresses } from '../domain/service-addresses';

/** The service cookie's name: host-only over HTTPS in subdomain mode (`__Host-`), path-scoped under a shared origin. */
export function serviceCookieName(addresses: ServiceAddresses): string {
  if (!isSecure(addresses)) return 'kiste_svc';
  return addresses.mode === 'subdomain' ? '__Host-kiste_svc' : '__Secure-kiste_svc';
}

const COOKIE_NAMES = new Set(['kiste_svc', '__Host-kiste_svc', '__Secure-kiste_svc']);
export const TOKEN_PARAMETER = 'kiste_token';
/** Where a browser trades its one-time code for the cookie (on the service's own address). */
export const AUTH_PATH = '/__kiste/auth';

/** What the request brought for a private service. */
export function presentedCredentials(req: IncomingMessage, addresses: ServiceAddresses): PresentedCredentials {
  const name = serviceCookieName(addresses);
  // Every cookie of the name: one planted by a sibling host (Domain=) must not hide the real one.
  const cookies = cookiePairs(req.headers.cookie).filter(([key]) => key === name).map(([, value]) => value);
  const bearer = kisteBearer(req.headers.authorization);
  const token = queryOf(req.url ?? '').get(TOKEN_PARAMETER) ?? undefined;
  return { cookies, bearer: bearer ?? undefined, token };
}

/** The Set-Cookie line for a traded code: HttpOnly, SameSite=Lax, this host only (and, under a shared origin, this service's path only). */
export function serviceCookie(addresses: ServiceAddresses, pathPrefix: string, value: string, maxAgeSeconds: number): string {
  const attributes = [`${serviceCookieName(addresses)}=${value}`, `Path=${pathPrefix ? `${pathPrefix}/` : '/'}`, 'HttpOnly', 'SameSite=Lax', `Max-Age=${maxAgeSeconds}`];
  if (isSecure(addresses)) attributes.push('Secure');
  return attributes.join('; ');
}

/** A CORS preflight: it carries no credentials by the standard, so it reaches the app as it is. */
export function isPreflight(req: IncomingMessage): boolean {
  return req.method === 'OPTIONS' && req.headers['access-control-request-method'] !== undefined;
}

/** A Set-Cookie line for one of kiste's service cookie names. */
export function isKisteCookie(setCookie: string): boolean {
  return COOKIE_NAMES.has(setCookie.slice(0, Math.max(0, setCookie.indexOf('='))).trim());
}

/** The Cookie header less kiste's service cookies (undefined when nothing is left). */
export function cookieForApp(header: string | undefined): string | undefined {
  if (header === undefined) return undefined;
  const kept = header.split(';').filter((part) => !COOKIE_NAMES.has(part.slice(0, Math.max(0, part.indexOf('='))).trim()));
  const joined = kept.map((part) => part.trim()).filter(Boolean).join('; ');
  return joined || undefined;
}

/** An Authorization header that carries a kiste credential (never passed to an app). */
export function kisteBearer(header: string | undefined): string | null {
  const match = /^Bearer\s+(kiste_[A-Za-z0-9_-]{1,200})\s*$/i.exec(header ?? '');
  return match ? match[1]! : null;
}

/** The path and query less the `kiste_token` parameter, however its name is escaped (the rest kept byte for byte). */
export function pathForApp(url: string): string {
  const mark = url.indexOf('?');
  if (mark < 0) return url;
  const kept = url.slice(mark + 1).split('&').filter((pair) => new URLSearchParams(pair.split('=')[0]).keys().next().value !== TOKEN_PARAMETER);
  return kept.length ? `${url.slice(0, mark)}?${kept.join('&')}` : url.slice(0, mark);
}

/**
 * A request let in by the cookie that came from another site's page: sibling service hosts share a
 * site, so SameSite does not keep their pages from sending it (a frame, a script tag, a form, a
 * fetch with credentials, a WebSocket). Refused (A15): any request whose Origin is another one, and
 * whatever the browser says came from another site unless it is a top-level page load (a link).
 * Without Origin and Sec-Fetch-Site (plain HTTP, no browser) nothing is known and it passes.
 */
export function crossSiteUse(req: IncomingMessage, serviceOrigin: string): boolean {
  const origin = req.headers.origin;
  if (origin !== undefined && origin !== serviceOrigin) return true;
  const site = req.headers['sec-fetch-site'];
  if (site === undefined || site === 'same-origin' || site === 'none') return false;
  return !(req.headers['sec-fetch-mode'] === 'navigate' && req.headers['sec-fetch-dest'] === 'document' && (req.method === 'GET' || req.method === 'HEAD'));
}

/** Request headers a preflight of a private service carries to the app: what CORS reads, nothing else. */
const PREFLIGHT_HEADERS = new Set(['origin', 'access-control-request-method', 'access-control-request-headers', 'access-control-request-private-network', 'user-agent', 'accept', 'accept-language']);

export function preflightHeaders(req: IncomingMessage): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(req.headers)) if (PREFLIGHT_HEADERS.has(name) && typeof value === 'string') headers[name] = value;
  return headers;
}

/** Answer headers a preflight of a private service gets back: CORS's own and Vary. */
export function preflightAnswerHeaders(rawHeaders: readonly string[]): string[] {
  const headers: string[] = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const lower = rawHeaders[i]!.toLowerCase();
    if (lower.startsWith('access-control-') || lower === 'vary') headers.push(rawHeaders[i]!, rawHeaders[i + 1]!);
  }
  return headers;
}

/** The query of a request target (a bad one reads as empty). */
export function queryOf(url: string): URLSearchParams {
  const mark = url.indexOf('?');
  try {
    return new URLSearchParams(mark < 0 ? '' : url.slice(mark + 1));
  } catch {
    return new URLSearchParams();
  }
}

function isSecure(addresses: ServiceAddresses): boolean {
  return addresses.mode === 'subdomain' ? addresses.scheme === 'https' : addresses.origin.startsWith('https:');
}

function cookiePairs(header: string | undefined): [string, string][] {
  if (!header) return [];
  return header.split(';').flatMap((part) => {
    const index = part.indexOf('=');
    return index > 0 ? [[part.slice(0, index).trim(), part.slice(index + 1).trim()] as [string, string]] : [];
  });
}
