// Minimal cookie parsing and writing for the console session and the known-browser marker.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { CookieToSet } from './handler';

export const SESSION_COOKIE = 'kiste_session';
export const BROWSER_COOKIE = 'kiste_browser';

export function parseCookies(req: IncomingMessage): Record<string, string> {
  const header = req.headers.cookie;
  const cookies: Record<string, string> = {};
  if (!header) return cookies;
  for (const part of header.split(';')) {
    const index = part.indexOf('=');
    if (index <= 0) continue;
    const name = part.slice(0, index).trim();
    try {
      cookies[name] = decodeURIComponent(part.slice(index + 1).trim());
    } catch {
      // a malformed cookie is ignored, as a browser would
    }
  }
  return cookies;
}

export function setCookies(res: ServerResponse, cookies: CookieToSet[], secure: boolean): void {
  const lines = cookies.map((cookie) => {
    const attributes = [`${cookie.name}=${encodeURIComponent(cookie.value)}`, 'Path=/', 'HttpOnly', 'SameSite=Lax'];
    if (cookie.maxAgeSeconds !== undefined) attributes.push(`Max-Age=${cookie.maxAgeSeconds}`);
    if (secure) attributes.push('Secure');
    return attributes.join('; ');
  });
  res.setHeader('Set-Cookie', lines);
}
