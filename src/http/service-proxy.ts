// The hosted services' proxy (docs/hosted-services.md "The proxy"): every request on a host in the
// services' space is its own, before anything of kiste's. A request for a service goes to the
// machine's port through its guest agent (never a route from the host's network into a guest):
// bodies stream both ways, upgrades (WebSocket) are carried as bytes with no idle cutoff, the app
// sees `Host: localhost:<port>` and the public address in X-Forwarded-*, and nothing is added to its
// answers but a Location of its own host turned into the public one.
import { request as httpRequest, STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { pipeline, type Duplex } from 'node:stream';
import type { HostedServices } from '../domain/hosted-services';
import { inServiceSpace, serviceKeyOf } from '../domain/service-addresses';
import { cameFromUnreachableHost } from '../compute/machine-host';
import { errorEnvelope, KisteError, retryAfterOf } from '../errors';
import { ERRORS } from '../generated/errors';
import { servicePage } from './error-doc-page';
import { requestIdOf } from './request-id';
import { answerHeadersForClient, appPath, requestHead, requestHeadersForApp } from './service-proxy-headers';
import { AUTH_PATH, crossOriginWrite, isPreflight, preflightAnswerHeaders, preflightHeaders, presentedCredentials, queryOf, serviceCookie } from './service-proxy-access';
import { SERVICE_COOKIE_SECONDS, type ServiceAccessGate } from '../domain/service-access';
import type { ServiceWake } from '../domain/service-wake';
import { ServiceProxyLimits, type ConnectionSlot } from './service-proxy-limits';

/** A TCP stream to a machine's port (through its guest agent, wherever it runs). */
export interface ServiceReach {
  openPort(instanceId: string, port: number): Promise<Duplex>;
}

export interface ServiceProxyLogger {
  warn(object: object, message: string): void;
}

const FLUSH_BYTES_MS = 60_000;
/** How long a woken machine's port is tried again until it answers (a machine booted afresh starts its app itself). */
const WOKEN_PORT_MS = 30_000;

export interface ServiceProxyParts {
  services: HostedServices;
  access: ServiceAccessGate;
  wake: ServiceWake;
  reach: ServiceReach;
  logger: ServiceProxyLogger;
  /** kiste's own address: error answers link their documentation there. */
  baseUrl: string;
  /** Where a browser is sent to be let into a private service. */
  consoleUrl: string;
}

type Resolved = NonNullable<Awaited<ReturnType<HostedServices['resolve']>>>;
/** `preflight`: a private service's CORS preflight without credentials, carried as one (no query, no body, CORS headers only back). */
type Target = { resolved: Resolved; path: string; slot: ConnectionSlot; woken: boolean; preflight: boolean };
/** How a request the proxy does not carry is answered: an error, or (a page load) a redirect. */
interface Answer {
  refuse(error: KisteError): void;
  redirect?(location: string, cookie?: string): void;
}

export class ServiceProxy {
  private readonly limits = new ServiceProxyLimits();
  private readonly flushTimer: NodeJS.Timeout;

  private readonly services: HostedServices;
  private readonly access: ServiceAccessGate;
  private readonly wake: ServiceWake;
  private readonly reach: ServiceReach;
  private readonly logger: ServiceProxyLogger;
  private readonly baseUrl: string;
  private readonly consoleUrl: string;

  constructor(parts: ServiceProxyParts) {
    ({ services: this.services, access: this.access, wake: this.wake, reach: this.reach, logger: this.logger, baseUrl: this.baseUrl, consoleUrl: this.consoleUrl } = parts);
    this.flushTimer = setInterval(() => void this.flush(), FLUSH_BYTES_MS).unref();
  }

  /** Whether the request is the proxy's (its host is in the services' space). */
  claims(req: IncomingMessage): boolean {
    const addresses = this.services.publishedIn;
    return addresses !== null && inServiceSpace(addresses, req.headers.host);
  }

  async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const target = await this.target(req, false, {
      refuse: (error) => this.answerError(req, res, error),
      redirect: (location, cookie) => {
        res.writeHead(302, { location, 'cache-control': 'no-store', 'content-length': 0, ...(cookie ? { 'set-cookie': cookie } : {}) });
        res.end();
      },
    });
    if (!target) return;
    if (target.preflight) return this.preflight(req, res, target);
    const { resolved, path, slot } = target;
    const url = req.url ?? '/';
    if (resolved.pathPrefix && (url === resolved.pathPrefix || url.startsWith(`${resolved.pathPrefix}?`))) {
      // The app's relative links need its prefix to end with a slash.
      slot.release();
      res.writeHead(308, { location: `${resolved.pathPrefix}/${url.slice(resolved.pathPrefix.length)}`, 'content-length': 0 });
      return void res.end();
    }
    const guest = await this.openGuest(target, (error) => this.answerError(req, res, error));
    if (!guest) return;
    const id = resolved.service.id;
    const service = { port: resolved.service.port, publicUrl: resolved.publicUrl, pathPrefix: resolved.pathPrefix };
    const upstream = httpRequest({ method: req.method, path, headers: requestHeadersForApp(req, service, false), createConnection: () => guest as Socket });
    const end = () => {
      upstream.destroy();
      guest.destroy();
      slot.release();
    };
    res.once('close', end);
    upstream.on('response', (answer) => {
      // The app's answer is not trusted to be one Node may send on: a status it cannot write or a
      // header it refuses ends this request with S13, never the process.
      try {
        const status = answer.statusCode ?? 0;
        if (status < 200 || status > 599) throw new Error(`status ${status}`);
        res.writeHead(status, answerHeadersForClient(answer.rawHeaders, service));
        res.flushHeaders(); // a stream's first bytes (server-sent events) go out at once
      } catch {
        answer.destroy();
        this.answerError(req, res, new KisteError('S13', { message: `The app on port ${service.port} answered with what is not an HTTP answer kiste can pass on` }));
        return end();
      }
      answer.on('data', (chunk: Buffer) => this.limits.count(id, 'out', chunk.length));
      pipeline(answer, res, () => end());
    });
    upstream.on('error', () => {
      if (!res.headersSent) this.answerError(req, res, new KisteError('S13', { message: `The app on port ${service.port} closed the connection without an answer` }));
      else res.destroy();
      end();
    });
    req.on('data', (chunk: Buffer) => this.limits.count(id, 'in', chunk.length));
    pipeline(req, upstream, () => undefined);
  }

  /**
   * An upgrade (WebSocket): the request head goes to the app with its Host rewritten, and only once
   * the app answers 101 do bytes flow both ways; any other answer is passed back and the connection
   * ends (a request that never upgrades cannot carry more requests past the proxy's bounds).
   */
  async upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    socket.on('error', () => socket.destroy());
    if (req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0) {
      return rawError(socket, new KisteError('P01', { message: 'An upgrade request carries no body' }));
    }
    const target = await this.target(req, true, { refuse: (error) => rawError(socket, error) });
    if (!target) return;
    const { resolved, path, slot } = target;
    const guest = await this.openGuest(target, (error) => rawError(socket, error));
    if (!guest) return;
    const id = resolved.service.id;
    let ended = false;
    const end = () => {
      if (ended) return;
      ended = true;
      socket.destroy();
      guest.destroy();
      slot.release();
    };
    socket.once('close', end);
    guest.on('error', end);
    if (socket.destroyed) return end();
    socket.pause();
    const service = { port: resolved.service.port, publicUrl: resolved.publicUrl, pathPrefix: resolved.pathPrefix };
    guest.write(requestHead(req.method ?? 'GET', path, requestHeadersForApp(req, service, true)));
    let answer: { status: number; bytes: Buffer };
    try {
      answer = await readAnswerHead(guest);
    } catch {
      rawError(socket, new KisteError('S13', { message: `The app on port ${service.port} did not answer the upgrade` }));
      return end();
    }
    this.limits.count(id, 'out', answer.bytes.length);
    socket.write(answer.bytes);
    if (answer.status !== 101) {
      // Not upgraded: the rest of its answer, and the connection ends with it.
      guest.on('data', (chunk: Buffer) => this.limits.count(id, 'out', chunk.length));
      return void pipeline(guest, socket, end);
    }
    if (head.length) guest.write(head);
    guest.on('data', (chunk: Buffer) => this.limits.count(id, 'out', chunk.length));
    socket.on('data', (chunk: Buffer) => this.limits.count(id, 'in', chunk.length));
    pipeline(socket, guest, end);
    pipeline(guest, socket, end);
  }

  /** Counts flushed, the timers stopped (shutdown). */
  async close(): Promise<void> {
    clearInterval(this.flushTimer);
    this.limits.stop();
    await this.flush();
  }

  /**
   * The service a request is for and the path the app is asked for, with a connection slot taken
   * (released when the request ends); or the refusal answered through `refuse` and null.
   */
  private async target(req: IncomingMessage, upgrade: boolean, answer: Answer): Promise<Target | null> {
    const refuse = answer.refuse;
    const client = req.socket.remoteAddress ?? '';
    if (!this.limits.clientRequest(client)) {
      refuse(new KisteError('L01', { message: 'Too many requests to hosted services from this address', retryAfterSeconds: 30 }));
      return null;
    }
    const addresses = this.services.publishedIn!;
    const url = req.url ?? '/';
    const key = serviceKeyOf(addresses, req.headers.host, url);
    const resolved = key ? await this.services.resolve(key).catch(() => null) : null;
    if (!resolved) {
      refuse(new KisteError('S10', { message: 'No service is published at this address' }));
      return null;
    }
    const path = appPath(url, resolved.pathPrefix);
    let preflight = false;
    if (resolved.service.access !== 'public') {
      const admission = await this.letIn(req, resolved, path, upgrade, answer);
      if (admission === null) return null;
      preflight = admission === 'preflight';
    }
    const slot = this.limits.connect(resolved.service.id, client);
    if (!slot) {
      refuse(new KisteError('L01', { message: 'This service takes no more requests right now', retryAfterSeconds: 5 }));
      return null;
    }
    let woken = false;
    if (resolved.instance.status !== 'running' || resolved.instance.operation) {
      if (!resolved.service.wakeOnRequest) {
        slot.release();
        await this.services.noteStatus(resolved.service, resolved.instance, 'stopped').catch(() => undefined);
        refuse(new KisteError('K03', { message: 'The machine that serves this address is not running', hint: 'Its owner can resume it, or turn on wake_on_request.' }));
        return null;
      }
      try {
        resolved.instance = await this.wake.wake(resolved.instance);
        woken = true;
      } catch (error) {
        slot.release();
        refuse(error instanceof KisteError ? error : new KisteError('K03', { message: 'The machine that serves this address could not be started' }));
        return null;
      }
    }
    return { resolved, path, slot, woken, preflight };
  }

  /**
   * A private service: whether the request brought what lets it in (`in`), or is a CORS preflight,
   * which carries no credentials by the standard (`preflight`: it reaches the app as nothing but a
   * preflight). Otherwise it is answered and null: a browser's code traded for the cookie at
   * AUTH_PATH, a page load sent to the console (where browsers can be let in), anything else 401;
   * another account's key 404, as if there were no service; a cookie's cross-origin write 403.
   */
  private async letIn(req: IncomingMessage, resolved: Resolved, path: string, upgrade: boolean, answer: Answer): Promise<'in' | 'preflight' | null> {
    const addresses = this.services.publishedIn!;
    const { service } = resolved;
    const pathname = path.split('?')[0];
    if (!upgrade && pathname === AUTH_PATH && answer.redirect && req.method === 'GET' && this.access.browsersLetIn) {
      const traded = await this.access.trade(service, queryOf(path).get('code') ?? '').catch(() => null);
      if (!traded) {
        answer.refuse(new KisteError('A01', { message: 'This sign-in link for the service has expired or was used', hint: 'Open the service\'s address again.' }));
        return null;
      }
      answer.redirect(`${resolved.pathPrefix}${traded.returnTo}`, serviceCookie(addresses, resolved.pathPrefix, traded.cookie, SERVICE_COOKIE_SECONDS));
      return null;
    }
    const admission = await this.access.admit(service, presentedCredentials(req, addresses)).catch(() => 'none' as const);
    if (admission === 'cookie' && crossOriginWrite(req, new URL(resolved.publicUrl).origin, upgrade)) {
      answer.refuse(new KisteError('A15', { message: 'A page of another origin cannot act on this private service with its visitor\'s sign-in' }));
      return null;
    }
    if (admission === 'cookie' || admission === 'token' || admission === 'key') return 'in';
    if (admission === 'foreign') {
      answer.refuse(new KisteError('S10', { message: 'No service is published at this address' }));
      return null;
    }
    if (!upgrade && isPreflight(req)) return 'preflight';
    if (answer.redirect && (req.method === 'GET' || req.method === 'HEAD') && isNavigation(req)) {
      if (!this.access.browsersLetIn) {
        answer.refuse(new KisteError('S14'));
        return null;
      }
      const query = new URLSearchParams({ service: service.id, return: path, state: this.access.stateFor(service.id, path) });
      answer.redirect(`${this.consoleUrl.replace(/\/$/, '')}/console/services/authorize?${query}`);
      return null;
    }
    answer.refuse(new KisteError('A01', { message: 'This service is private to its account', hint: 'Sign in to kiste in this browser and open its address, or send an API key of its account (Authorization: Bearer).' }));
    return null;
  }

  /** A private service's preflight without credentials: the app is asked `OPTIONS <path>` with CORS's headers only, and only CORS's answer headers come back, no body. */
  private async preflight(req: IncomingMessage, res: ServerResponse, target: Target): Promise<void> {
    const guest = await this.openGuest(target, (error) => this.answerError(req, res, error));
    if (!guest) return;
    const { resolved, slot } = target;
    const publicUrl = new URL(resolved.publicUrl);
    const headers = { ...preflightHeaders(req), host: `localhost:${resolved.service.port}`, 'x-forwarded-host': publicUrl.host, 'x-forwarded-proto': publicUrl.protocol.slice(0, -1), connection: 'close' };
    const upstream = httpRequest({ method: 'OPTIONS', path: target.path.split('?')[0], headers, createConnection: () => guest as Socket });
    const end = () => {
      upstream.destroy();
      guest.destroy();
      slot.release();
    };
    res.once('close', end);
    upstream.on('response', (answer) => {
      answer.resume();
      const status = answer.statusCode ?? 0;
      if (res.headersSent) return;
      if (status < 200 || status > 599) return this.answerError(req, res, new KisteError('S13', { message: `The app on port ${resolved.service.port} answered with what is not an HTTP answer kiste can pass on` }));
      res.writeHead(status, [...preflightAnswerHeaders(answer.rawHeaders), 'Content-Length', '0']);
      res.end();
    });
    upstream.on('error', () => {
      if (!res.headersSent) this.answerError(req, res, new KisteError('S13', { message: `The app on port ${resolved.service.port} closed the connection without an answer` }));
      end();
    });
    req.resume(); // a preflight's body, if any, is not the app's
    upstream.end();
  }

  /** A stream to the service's port; when none can be had, the slot is given back, the reason answered through `refuse`, and null. */
  private async openGuest({ resolved, slot, woken }: Target, refuse: (error: KisteError) => void): Promise<Duplex | null> {
    const deadline = Date.now() + (woken ? WOKEN_PORT_MS : 0);
    for (;;) {
      try {
        const guest = await this.reach.openPort(resolved.instance.id, resolved.service.port);
        void this.services.noteStatus(resolved.service, resolved.instance, 'active').catch(() => undefined);
        return guest;
      } catch (error) {
        if (!cameFromUnreachableHost(error) && Date.now() < deadline) {
          await new Promise((resolve) => setTimeout(resolve, 250));
          continue;
        }
        slot.release();
        if (cameFromUnreachableHost(error)) refuse(new KisteError('N01'));
        else {
          void this.services.noteStatus(resolved.service, resolved.instance, 'unreachable').catch(() => undefined);
          refuse(new KisteError('S13', { message: `Nothing answers on port ${resolved.service.port} in the machine` }));
        }
        return null;
      }
    }
  }

  private async flush(): Promise<void> {
    const counts = this.limits.takeCounts();
    if (counts.size === 0) return;
    try {
      await this.services.countBytes(counts);
    } catch (error) {
      this.limits.putBack(counts); // counted at the next flush
      this.logger.warn({ err: (error as Error).message }, 'bytes carried for hosted services could not be counted yet');
    }
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

/** Largest answer head an app may send to an upgrade. */
const MAX_ANSWER_HEAD_BYTES = 32 * 1024;
const ANSWER_HEAD_MS = 10_000;

/** The app's answer head to an upgrade (its status and its bytes, the head and whatever came with it), bounded in size and time. */
function readAnswerHead(guest: Duplex): Promise<{ status: number; bytes: Buffer }> {
  return new Promise((resolve, reject) => {
    let bytes = Buffer.alloc(0);
    const timer = setTimeout(() => finish(new Error('no answer in time')), ANSWER_HEAD_MS);
    const finish = (error: Error | null, status = 0) => {
      clearTimeout(timer);
      guest.off('data', onData);
      guest.off('end', onEnd);
      guest.pause();
      if (error) reject(error);
      else resolve({ status, bytes });
    };
    const onData = (chunk: Buffer) => {
      bytes = Buffer.concat([bytes, chunk]);
      const end = bytes.indexOf('\r\n\r\n');
      if (end < 0) return bytes.length > MAX_ANSWER_HEAD_BYTES ? finish(new Error('answer head too large')) : undefined;
      const status = /^HTTP\/1\.[01] (\d{3})[ \r]/.exec(bytes.subarray(0, Math.min(end + 2, 64)).toString('latin1'));
      finish(status ? null : new Error('not an HTTP answer'), Number(status?.[1] ?? 0));
    };
    const onEnd = () => finish(new Error('closed before answering'));
    guest.on('data', onData);
    guest.once('end', onEnd);
  });
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
