// Minimal cookie parsing and writing for the console session and the known-browser marker.
// Handlers name cookies by these names; with HTTPS they travel as `__Host-<name>`: a browser keeps
// such a cookie only when it is Secure, has Path=/ and no Domain, so neither a sibling subdomain nor a
// plain-HTTP page (a network attacker's) can set or shadow it. Over HTTPS only prefixed cookies are
// read; over plain HTTP (loopback, development) the names stay as they are.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { CookieToSet } from './handler';

export const SESSION_COOKIE = 'kiste_session';
export const BROWSER_COOKIE = 'kiste_browser';
const HOST_PREFIX = '__Host-';

/** The name a cookie travels under. */
export function cookieName(name: string, secure: boolean): string {
  return secure ? `${HOST_PREFIX}${name}` : name;
}

/** The request's cookies by the names handlers use. */
export function parseCookies(req: IncomingMessage, secure: boolean): Record<string, string> {
  const header = req.headers.cookie;
  const cookies: Record<string, string> = {};
  if (!header) return cookies;
  for (const part of header.split(';')) {
    const index = part.indexOf('=');
    if (index <= 0) continue;
    const sent = part.slice(0, index).trim();
    if (secure !== sent.startsWith(HOST_PREFIX)) continue; // over HTTPS, an unprefixed one may have been planted
    try {
      cookies[secure ? sent.slice(HOST_PREFIX.length) : sent] = decodeURIComponent(part.slice(index + 1).trim());
    } catch {
      // a malformed cookie is ignored, as a browser would
    }
  }
  return cookies;
}

export function setCookies(res: ServerResponse, cookies: CookieToSet[], secure: boolean): void {
  const lines = cookies.map((cookie) => {
    const attributes = [`${cookieName(cookie.name, secure)}=${encodeURIComponent(cookie.value)}`, 'Path=/', 'HttpOnly', 'SameSite=Lax'];
    if (cookie.maxAgeSeconds !== undefined) attributes.push(`Max-Age=${cookie.maxAgeSeconds}`);
    if (secure) attributes.push('Secure');
    return attributes.join('; ');
  });
  res.setHeader('Set-Cookie', lines);
}
