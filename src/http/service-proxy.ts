// The hosted services' proxy (docs/hosted-services.md "The proxy"): every request on a host in the
// services' space is its own, before anything of kiste's. A request for a service goes to the
// machine's port through its guest agent (never a route from the host's network into a guest):
// bodies stream both ways, upgrades (WebSocket) are carried as bytes with no idle cutoff, the app
// sees `Host: localhost:<port>` and the public address in X-Forwarded-*, and nothing is added to its
// answers but a Location of its own host turned into the public one.
import { request as httpRequest, STATUS_CODES, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { pipeline, type Duplex } from 'node:stream';
import type { HostedServices } from '../domain/hosted-services';
import { inServiceSpace, serviceKeyOf, type ServiceAddresses } from '../domain/service-addresses';
import { cameFromUnreachableHost } from '../compute/machine-host';
import { errorEnvelope, KisteError, retryAfterOf } from '../errors';
import { ERRORS } from '../generated/errors';
import { servicePage } from './error-doc-page';
import { requestIdOf } from './request-id';

/** A TCP stream to a machine's port (through its guest agent, wherever it runs). */
export interface ServiceReach {
  openPort(instanceId: string, port: number): Promise<Duplex>;
}

export interface ServiceProxyLogger {
  warn(object: object, message: string): void;
}

/** Connections open to one service at once; more get 429 L01. */
export const MAX_CONNECTIONS_PER_SERVICE = 64;
/** Requests (and upgrades) one service takes a minute; more get 429 L01. */
export const REQUESTS_PER_MINUTE_PER_SERVICE = 6000;
const FLUSH_BYTES_MS = 60_000;

/** Headers of one hop only (RFC 9110 7.6.1), never passed on; `upgrade` is passed on an upgrade only. */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'transfer-encoding', 'upgrade']);
/** What the client says of itself is replaced by what the proxy knows. */
const FORWARDED = new Set(['forwarded', 'x-forwarded-for', 'x-forwarded-host', 'x-forwarded-proto', 'x-forwarded-prefix', 'x-real-ip']);

type Resolved = NonNullable<Awaited<ReturnType<HostedServices['resolve']>>>;
type Target = { resolved: Resolved; path: string; done: () => void };

export class ServiceProxy {
  private readonly connections = new Map<string, number>();
  private readonly minutes = new Map<string, { startedAt: number; count: number }>();
  private readonly bytes = new Map<string, { in: number; out: number }>();
  private readonly flushTimer: NodeJS.Timeout;

  constructor(
    private readonly services: HostedServices,
    private readonly reach: ServiceReach,
    private readonly logger: ServiceProxyLogger,
    /** kiste's own address: error answers link their documentation there. */
    private readonly baseUrl: string,
  ) {
    this.flushTimer = setInterval(() => void this.flush(), FLUSH_BYTES_MS).unref();
  }

  /** Whether the request is the proxy's (its host is in the services' space). */
  claims(req: IncomingMessage): boolean {
    const addresses = this.services.publishedIn;
    return addresses !== null && inServiceSpace(addresses, req.headers.host);
  }

  async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const target = await this.target(req, (error) => this.answerError(req, res, error));
    if (!target) return;
    const { resolved, path, done } = target;
    const url = req.url ?? '/';
    if (resolved.pathPrefix && (url === resolved.pathPrefix || url.startsWith(`${resolved.pathPrefix}?`))) {
      // The app's relative links need its prefix to end with a slash.
      done();
      res.writeHead(308, { location: `${resolved.pathPrefix}/${url.slice(resolved.pathPrefix.length)}`, 'content-length': 0 });
      return void res.end();
    }
    let guest: Duplex;
    try {
      guest = await this.reach.openPort(resolved.instance.id, resolved.service.port);
    } catch (error) {
      done();
      return this.answerError(req, res, this.unreachable(resolved, error));
    }
    const count = this.countFor(resolved.service.id);
    const upstream = httpRequest({ method: req.method, path, headers: this.forwardedHeaders(req, resolved, false), createConnection: () => guest as Socket });
    let answered = false;
    const end = () => {
      upstream.destroy();
      guest.destroy();
      done();
    };
    res.once('close', end);
    upstream.on('response', (answer) => {
      answered = true;
      answer.on('data', (chunk: Buffer) => (count.out += chunk.length));
      res.writeHead(answer.statusCode ?? 502, answer.statusMessage, this.answerHeaders(answer, resolved));
      res.flushHeaders(); // a stream's first bytes (server-sent events) go out at once
      pipeline(answer, res, () => end());
    });
    upstream.on('error', () => {
      if (!answered && !res.headersSent) this.answerError(req, res, new KisteError('S13', { message: `The app on port ${resolved.service.port} closed the connection without an answer` }));
      else res.destroy();
      end();
    });
    req.on('data', (chunk: Buffer) => (count.in += chunk.length));
    pipeline(req, upstream, () => undefined);
  }

  /** An upgrade (WebSocket): the request head is written to the guest as it came (Host rewritten) and bytes flow both ways. */
  async upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    socket.on('error', () => socket.destroy());
    const target = await this.target(req, (error) => rawError(socket, error));
    if (!target) return;
    const { resolved, path, done } = target;
    let guest: Duplex;
    try {
      guest = await this.reach.openPort(resolved.instance.id, resolved.service.port);
    } catch (error) {
      done();
      return rawError(socket, this.unreachable(resolved, error));
    }
    if (socket.destroyed) {
      guest.destroy();
      return done();
    }
    const count = this.countFor(resolved.service.id);
    const headers = this.forwardedHeaders(req, resolved, true);
    const lines = [`${req.method} ${path} HTTP/1.1`];
    for (const [name, value] of Object.entries(headers)) for (const one of [value].flat()) if (one !== undefined) lines.push(`${name}: ${one}`);
    guest.write(`${lines.join('\r\n')}\r\n\r\n`);
    if (head.length) guest.write(head);
    guest.on('data', (chunk: Buffer) => (count.out += chunk.length));
    socket.on('data', (chunk: Buffer) => (count.in += chunk.length));
    let ended = false;
    const end = () => {
      if (ended) return;
      ended = true;
      socket.destroy();
      guest.destroy();
      done();
    };
    guest.on('error', end);
    pipeline(socket, guest, end);
    pipeline(guest, socket, end);
  }

  /** Counts flushed, the timer stopped (shutdown). */
  async close(): Promise<void> {
    clearInterval(this.flushTimer);
    await this.flush();
  }

  /**
   * The service a request is for and the path the app is asked for, with a connection counted
   * (`done` gives it back); or the refusal answered through `refuse` and null.
   */
  private async target(req: IncomingMessage, refuse: (error: KisteError) => void): Promise<Target | null> {
    const addresses = this.services.publishedIn!;
    const url = req.url ?? '/';
    const key = serviceKeyOf(addresses, req.headers.host, url);
    const resolved = key ? await this.services.resolve(key).catch(() => null) : null;
    if (!resolved) {
      refuse(new KisteError('S10', { message: 'No service is published at this address' }));
      return null;
    }
    if (resolved.service.access !== 'public') {
      refuse(new KisteError('A01', { message: 'This service is private to its account', hint: 'Its owner can make it public (access: public).' }));
      return null;
    }
    if (resolved.instance.status !== 'running') {
      refuse(new KisteError('K03', { message: `The machine ${resolved.instance.name} that serves this address is not running`, hint: 'Its owner can resume it.' }));
      return null;
    }
    const id = resolved.service.id;
    if (!this.takeRequest(id) || (this.connections.get(id) ?? 0) >= MAX_CONNECTIONS_PER_SERVICE) {
      refuse(new KisteError('L01', { message: 'This service takes no more requests right now', retryAfterSeconds: 5 }));
      return null;
    }
    this.connections.set(id, (this.connections.get(id) ?? 0) + 1);
    let given = false;
    const done = () => {
      if (given) return;
      given = true;
      const left = (this.connections.get(id) ?? 1) - 1;
      if (left > 0) this.connections.set(id, left);
      else this.connections.delete(id);
    };
    return { resolved, path: appPath(addresses, url, resolved.pathPrefix), done };
  }

  private takeRequest(id: string): boolean {
    const now = Date.now();
    const minute = this.minutes.get(id);
    if (!minute || now - minute.startedAt >= 60_000) {
      this.minutes.set(id, { startedAt: now, count: 1 });
      return true;
    }
    return ++minute.count <= REQUESTS_PER_MINUTE_PER_SERVICE;
  }

  private unreachable(resolved: Resolved, error: unknown): KisteError {
    if (cameFromUnreachableHost(error)) return new KisteError('N01');
    return new KisteError('S13', { message: `Nothing answers on port ${resolved.service.port} in ${resolved.instance.name}` });
  }

  /** The request's headers as the app gets them. */
  private forwardedHeaders(req: IncomingMessage, resolved: Resolved, upgrade: boolean): IncomingHttpHeaders {
    const headers: IncomingHttpHeaders = {};
    for (const [name, value] of Object.entries(req.headers)) {
      if (FORWARDED.has(name) || name === 'host') continue;
      if (HOP_BY_HOP.has(name) && !(upgrade && name === 'upgrade')) continue;
      headers[name] = value;
    }
    const publicUrl = new URL(resolved.publicUrl);
    headers.host = `localhost:${resolved.service.port}`;
    headers['x-forwarded-host'] = publicUrl.host;
    headers['x-forwarded-proto'] = publicUrl.protocol.slice(0, -1);
    headers['x-forwarded-for'] = req.socket.remoteAddress ?? '';
    if (resolved.pathPrefix) headers['x-forwarded-prefix'] = resolved.pathPrefix;
    headers.connection = upgrade ? 'Upgrade' : 'close';
    return headers;
  }

  /** The app's answer headers as they came (duplicates and case kept), less hop-by-hop ones; a Location on its own host names the public one. */
  private answerHeaders(answer: IncomingMessage, resolved: Resolved): string[] {
    const raw = answer.rawHeaders;
    const headers: string[] = [];
    const own = `http://localhost:${resolved.service.port}`;
    for (let i = 0; i + 1 < raw.length; i += 2) {
      const name = raw[i]!;
      let value = raw[i + 1]!;
      if (HOP_BY_HOP.has(name.toLowerCase())) continue;
      if (name.toLowerCase() === 'location') {
        if (value.startsWith(`${own}/`) || value === own) value = new URL(value.slice(own.length) || '/', resolved.publicUrl.replace(/\/$/, '') + '/').href;
        else if (value.startsWith('/') && !value.startsWith('//') && resolved.pathPrefix) value = `${resolved.pathPrefix}${value}`;
      }
      headers.push(name, value);
    }
    return headers;
  }

  private countFor(id: string): { in: number; out: number } {
    let count = this.bytes.get(id);
    if (!count) this.bytes.set(id, (count = { in: 0, out: 0 }));
    return count;
  }

  private async flush(): Promise<void> {
    if (this.bytes.size === 0) return;
    const counts = new Map(this.bytes);
    this.bytes.clear();
    await this.services.countBytes(counts).catch((error: Error) => this.logger.warn({ err: error.message }, 'bytes carried for hosted services could not be counted'));
  }

  private answerError(req: IncomingMessage, res: ServerResponse, error: KisteError): void {
    if (res.headersSent) return void res.destroy();
    const definition = ERRORS[error.code];
    const retryAfter = retryAfterOf(error);
    const headers: Record<string, string> = { 'cache-control': 'no-store', 'x-request-id': requestIdOf(req) };
    if (retryAfter !== null) headers['retry-after'] = String(retryAfter);
    if (isNavigation(req)) {
      const body = servicePage(STATUS_CODES[definition.status] ?? 'Error', error.message, error.details.hint ?? definition.hint);
      res.writeHead(definition.status, { ...headers, 'content-type': 'text/html; charset=utf-8', 'content-length': Buffer.byteLength(body) });
      return void res.end(body);
    }
    const body = JSON.stringify(errorEnvelope(error, headers['x-request-id']!, this.baseUrl));
    res.writeHead(definition.status, { ...headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  }
}

/** The path the app is asked for: in path mode without its `/s/<key>` prefix (sent as X-Forwarded-Prefix instead). */
function appPath(addresses: ServiceAddresses, url: string, prefix: string): string {
  if (addresses.mode !== 'path' || !prefix) return url;
  const rest = url.slice(prefix.length);
  return rest.startsWith('/') ? rest : `/${rest}`;
}

/** A page for a person (a navigation), JSON for a script. */
function isNavigation(req: IncomingMessage): boolean {
  const mode = req.headers['sec-fetch-mode'];
  if (mode) return mode === 'navigate';
  return /\btext\/html\b/.test(req.headers.accept ?? '');
}

/** A refusal on a socket that asked to upgrade: a plain answer, and the connection closed. */
function rawError(socket: Duplex, error: KisteError): void {
  const definition = ERRORS[error.code];
  const body = `${error.message}\n`;
  socket.end(`HTTP/1.1 ${definition.status} ${STATUS_CODES[definition.status] ?? 'Error'}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
}
