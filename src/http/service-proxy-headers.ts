// What the services' proxy sends the app and what it passes back (docs/hosted-services.md "The
// proxy"). The app sees `Host: localhost:<port>` and the public address in X-Forwarded-*, and none of
// the client's own forwarding claims; the client sees the app's answer as it came, less hop-by-hop
// headers, with a Location on the app's own host turned into the public one. Under paths of one
// origin (path mode) every service shares that origin, so what would reach beyond the service's
// path there (a service worker scope, clearing the site's data) is not passed.
import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import { cookieForApp, isKisteCookie, kisteBearer, pathForApp } from './service-proxy-access';

/** Headers of one hop only (RFC 9110 7.6.1), never passed on; `upgrade` is passed on an upgrade only. */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'transfer-encoding', 'upgrade']);
/** What the client says of itself is replaced by what the proxy knows. */
const FORWARDED = new Set(['forwarded', 'x-forwarded-for', 'x-forwarded-host', 'x-forwarded-proto', 'x-forwarded-prefix', 'x-real-ip']);
/** Answer headers whose reach is the whole origin: not passed where services share one (path mode). */
const ORIGIN_WIDE = new Set(['service-worker-allowed', 'clear-site-data']);

/** Where a request goes: the service's port, its public URL and its path prefix (empty in subdomain mode). */
export interface ProxiedService {
  port: number;
  publicUrl: string;
  pathPrefix: string;
}

/**
 * The request's headers as the app gets them. A body keeps its framing: its length, or chunks
 * (a body whose framing were dropped would let a client write a second request to the app).
 */
export function requestHeadersForApp(req: IncomingMessage, service: ProxiedService, upgrade: boolean, { forwardingOnly = false, keepAlive = false } = {}): IncomingHttpHeaders {
  const headers: IncomingHttpHeaders = {};
  for (const [name, value] of forwardingOnly ? [] : Object.entries(req.headers)) {
    if (FORWARDED.has(name) || name === 'host') continue;
    if (HOP_BY_HOP.has(name) && !(upgrade && name === 'upgrade')) continue;
    // kiste's own credentials are never the app's (a private service's, or a key sent by mistake).
    if (name === 'authorization' && kisteBearer(value as string)) continue;
    if (name === 'cookie') {
      const kept = cookieForApp(value as string);
      if (kept !== undefined) headers.cookie = kept;
      continue;
    }
    // A page opened with a kiste_token names it in the Referer of what it loads next.
    if (name === 'referer' && typeof value === 'string') {
      headers.referer = refererForApp(value);
      continue;
    }
    headers[name] = value;
  }
  if (!upgrade && req.headers['transfer-encoding'] !== undefined && req.headers['content-length'] === undefined) headers['transfer-encoding'] = 'chunked';
  const publicUrl = new URL(service.publicUrl);
  headers.host = `localhost:${service.port}`;
  headers['x-forwarded-host'] = publicUrl.host;
  headers['x-forwarded-proto'] = publicUrl.protocol.slice(0, -1);
  headers['x-forwarded-for'] = req.socket.remoteAddress ?? '';
  if (service.pathPrefix) headers['x-forwarded-prefix'] = service.pathPrefix;
  headers.connection = upgrade ? 'Upgrade' : keepAlive ? 'keep-alive' : 'close';
  return headers;
}

/** A Referer less the `kiste_token` parameter (one that is not a URL is dropped). */
function refererForApp(referer: string): string {
  try {
    const url = new URL(referer);
    return `${url.origin}${pathForApp(`${url.pathname}${url.search}`)}`;
  } catch {
    return '';
  }
}

/** A request head written as it goes to the app (an upgrade: its headers from requestHeadersForApp, which Node's parser has checked). */
export function requestHead(method: string, path: string, headers: IncomingHttpHeaders): string {
  const lines = [`${method} ${path} HTTP/1.1`];
  for (const [name, value] of Object.entries(headers)) for (const one of [value].flat()) if (one !== undefined) lines.push(`${name}: ${one}`);
  return `${lines.join('\r\n')}\r\n\r\n`;
}

/** The app's answer headers as they came (duplicates and case kept), less hop-by-hop ones; a Location on the app's own host names the public one. */
export function answerHeadersForClient(rawHeaders: readonly string[], service: ProxiedService): string[] {
  const headers: string[] = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]!;
    const lower = name.toLowerCase();
    let value = rawHeaders[i + 1]!;
    if (HOP_BY_HOP.has(lower) || (service.pathPrefix && ORIGIN_WIDE.has(lower))) continue;
    // An app may set any cookie of its own, but not one of kiste's names (planted for its siblings' visitors).
    if (lower === 'set-cookie' && isKisteCookie(value)) continue;
    if (lower === 'location') value = publicLocation(value, service);
    headers.push(name, value);
  }
  return headers;
}

/** A redirect to the app's own host (it builds them from the Host it was sent) goes to the public URL; under a prefix, a path of the origin goes under the prefix. */
function publicLocation(value: string, service: ProxiedService): string {
  const own = `http://localhost:${service.port}`;
  const base = service.publicUrl.replace(/\/$/, '');
  if (value === own) return `${base}/`;
  if (value.startsWith(`${own}/`) || value.startsWith(`${own}?`)) return `${base}${value.slice(own.length).replace(/^(?=\?)/, '/')}`;
  if (service.pathPrefix && value.startsWith('/') && !value.startsWith('//')) return `${service.pathPrefix}${value}`;
  return value;
}

/** The path the app is asked for: without the service's prefix (sent as X-Forwarded-Prefix instead) and kiste's token parameter. */
export function appPath(url: string, prefix: string): string {
  const path = pathForApp(url);
  if (!prefix) return path;
  const rest = path.slice(prefix.length);
  return rest.startsWith('/') ? rest : `/${rest}`;
}
