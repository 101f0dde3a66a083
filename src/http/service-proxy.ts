// The hosted services' proxy (docs/hosted-services.md "The proxy"): every request on a host in the
// services' space is its own, before anything of kiste's. A request for a service goes to the
// machine's port through its guest agent (never a route from the host's network into a guest):
// bodies stream both ways, upgrades (WebSocket) are carried as bytes with no idle cutoff, the app
// sees `Host: localhost:<port>` and the public address in X-Forwarded-*, and nothing is added to its
// answers but a Location of its own host turned into the public one. Who is let in is
// ServiceAdmission's; connections held open are looked at again every minute (OpenConnections).
import { request as httpRequest, type IncomingMessage, type RequestOptions, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { pipeline, type Duplex } from 'node:stream';
import { cameFromUnreachableHost } from '../compute/machine-host';
import type { HostedServices } from '../domain/hosted-services';
import type { ServiceAccessGate } from '../domain/service-access';
import { inServiceSpace, serviceKeyOf } from '../domain/service-addresses';
import type { ServiceWake } from '../domain/service-wake';
import { KisteError } from '../errors';
import { preflightAnswerHeaders, preflightHeaders } from './service-proxy-access';
import { ServiceAdmission, type Answer, type Resolved } from './service-proxy-admission';
import { answerError, rawError, readAnswerHead } from './service-proxy-answers';
import { OpenConnections, type Recheck } from './service-proxy-connections';
import { answerHeadersForClient, appPath, requestHead, requestHeadersForApp } from './service-proxy-headers';
import { ServiceProxyLimits, type ConnectionSlot } from './service-proxy-limits';
import { GuestStreamPools, type PooledRequestOptions } from './service-proxy-pool';

/** A TCP stream to a machine's port (through its guest agent, wherever it runs). */
export interface ServiceReach {
  openPort(instanceId: string, port: number): Promise<Duplex>;
}

export interface ServiceProxyLogger {
  warn(object: object, message: string): void;
}

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
  /** Machines this replica has in use otherwise (SSH tunnels, terminals, desktops): kept from an idle stop. */
  machinesInUse?: () => Iterable<string>;
}

/** Every minute: bytes counted, services in use marked, open connections looked at again. */
const FLUSH_MS = 60_000;
/** How long a woken machine's port is tried again until it answers (a machine booted afresh starts its app itself). */
const WOKEN_PORT_MS = 30_000;

/** `preflight`: a private service's CORS preflight without credentials, carried as one (no query, no body, CORS headers only back). */
interface Target {
  resolved: Resolved;
  path: string;
  slot: ConnectionSlot;
  woken: boolean;
  preflight: boolean;
  recheck: Recheck;
}

export class ServiceProxy {
  private readonly limits = new ServiceProxyLimits();
  private readonly connections = new OpenConnections();
  private readonly pools = new GuestStreamPools();
  private readonly flushTimer: NodeJS.Timeout;
  private readonly admission: ServiceAdmission;

  constructor(private readonly parts: ServiceProxyParts) {
    this.admission = new ServiceAdmission(parts.services, parts.access, parts.consoleUrl);
    this.flushTimer = setInterval(() => void this.flush(), FLUSH_MS).unref();
  }

  /** Whether the request is the proxy's (its host is in the services' space). */
  claims(req: IncomingMessage): boolean {
    const addresses = this.parts.services.publishedIn;
    return addresses !== null && inServiceSpace(addresses, req.headers.host);
  }

  async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const refuse = (error: KisteError) => answerError(req, res, error, this.parts.baseUrl);
    const target = await this.target(req, false, {
      refuse,
      redirect: (location, cookie) => {
        res.writeHead(302, { location, 'cache-control': 'no-store', 'content-length': 0, ...(cookie ? { 'set-cookie': cookie } : {}) });
        res.end();
      },
    });
    if (!target) return;
    const { resolved, path, slot } = target;
    const url = req.url ?? '/';
    if (resolved.pathPrefix && (url === resolved.pathPrefix || url.startsWith(`${resolved.pathPrefix}?`))) {
      // The app's relative links need its prefix to end with a slash.
      slot.release();
      res.writeHead(308, { location: `${resolved.pathPrefix}/${url.slice(resolved.pathPrefix.length)}`, 'content-length': 0 });
      return void res.end();
    }
    // A stream kept from an earlier request to the same port goes first (it costs nothing to open).
    const { id: instanceId } = resolved.instance;
    const pooled = !target.preflight && this.pools.hasIdle(instanceId, resolved.service.port);
    const guest = pooled ? null : await this.openGuest(target, refuse);
    if (!pooled && !guest) return;
    // The client may have left while the machine was looked up, woken or reached: its 'close' is past.
    if (req.socket.destroyed) {
      guest?.destroy();
      return slot.release();
    }
    const id = resolved.service.id;
    const service = { port: resolved.service.port, publicUrl: resolved.publicUrl, pathPrefix: resolved.pathPrefix };
    const upstream = target.preflight
      ? httpRequest({ method: 'OPTIONS', path: path.split('?')[0], headers: { ...preflightHeaders(req), ...requestHeadersForApp(req, service, false, { forwardingOnly: true }) }, createConnection: () => guest as Socket })
      : httpRequest({
        method: req.method, path, headers: requestHeadersForApp(req, service, false, { keepAlive: true }),
        agent: this.pools.agentFor(instanceId, resolved.service.port), guestStream: guest ?? undefined,
      } as RequestOptions & PooledRequestOptions);
    let ended = false;
    let answered = false;
    let response: IncomingMessage | null = null;
    const forget = this.connections.add(target.recheck, () => res.destroy());
    const end = () => {
      if (ended) return;
      ended = true;
      forget();
      // A stream whose exchange completed goes back to its pool; any other is closed with its request.
      const completed = !target.preflight && response?.complete === true && upstream.writableFinished && res.writableFinished;
      if (!completed) {
        upstream.destroy();
        if (target.preflight) guest?.destroy();
      }
      slot.release();
    };
    res.once('close', end);
    upstream.on('response', (answer) => {
      answered = true;
      response = answer;
      // The app's answer is not trusted to be one Node may send on: a status it cannot write or a
      // header it refuses ends this request with S13, never the process.
      try {
        const status = answer.statusCode ?? 0;
        if (status < 200 || status > 599) throw new Error(`status ${status}`);
        if (target.preflight) {
          answer.resume(); // a private service's preflight: CORS's headers, no body
          res.writeHead(status, [...preflightAnswerHeaders(answer.rawHeaders), 'Content-Length', '0']);
          res.end();
          return end();
        }
        res.writeHead(status, answerHeadersForClient(answer.rawHeaders, service));
        res.flushHeaders(); // a stream's first bytes (server-sent events) go out at once
      } catch {
        answer.destroy();
        refuse(new KisteError('S13', { message: `The app on port ${service.port} answered with what is not an HTTP answer kiste can pass on` }));
        return end();
      }
      answer.on('data', (chunk: Buffer) => this.limits.count(id, 'out', chunk.length));
      pipeline(answer, res, () => end());
    });
    const noAnswer = () => {
      if (answered) return;
      answered = true;
      if (!res.headersSent) refuse(new KisteError('S13', { message: `The app on port ${service.port} closed the connection without an answer` }));
      else res.destroy();
      end();
    };
    upstream.on('error', noAnswer);
    upstream.on('close', noAnswer); // no answer and no error (an app that answered 101 to a plain request)
    if (target.preflight) {
      req.resume(); // a preflight's body, if any, is not the app's
      return void upstream.end();
    }
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
    const forget = this.connections.add(target.recheck, () => socket.destroy());
    const end = () => {
      if (ended) return;
      ended = true;
      forget();
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

  /** Connections held open now (tests, metrics). */
  get openConnections(): number {
    return this.connections.size;
  }

  /** Counts flushed, the timers stopped (shutdown). */
  async close(): Promise<void> {
    clearInterval(this.flushTimer);
    this.pools.close();
    this.limits.stop();
    await this.flush();
  }

  /** The minute's work, now (the timer's; tests call it to not wait a minute). */
  async flush(): Promise<void> {
    await this.connections.recheckAll().catch(() => 0);
    const counts = this.limits.takeCounts();
    try {
      if (counts.size > 0) await this.parts.services.countBytes(counts);
      const inUse = [...(this.parts.machinesInUse?.() ?? [])];
      if (inUse.length > 0) await this.parts.services.markMachinesInUse(inUse);
    } catch (error) {
      this.limits.putBack(counts); // counted at the next flush
      this.parts.logger.warn({ err: (error as Error).message }, 'bytes carried for hosted services could not be counted yet');
    }
  }

  /**
   * The service a request is for, let in, with a connection slot taken (released when the request
   * ends) and its machine running (woken when it may be); or the refusal answered and null.
   */
  private async target(req: IncomingMessage, upgrade: boolean, answer: Answer): Promise<Target | null> {
    const { refuse } = answer;
    const client = req.socket.remoteAddress ?? '';
    if (!this.limits.clientRequest(client)) {
      refuse(new KisteError('L01', { message: 'Too many requests to hosted services from this address', retryAfterSeconds: 30 }));
      return null;
    }
    const { services, wake } = this.parts;
    const url = req.url ?? '/';
    const key = serviceKeyOf(services.publishedIn!, req.headers.host, url);
    const resolved = key ? await services.resolve(key).catch(() => null) : null;
    if (!key || !resolved) {
      refuse(new KisteError('S10', { message: 'No service is published at this address' }));
      return null;
    }
    const path = appPath(url, resolved.pathPrefix);
    const admitted = await this.admission.admit(req, key, resolved, path, upgrade, answer);
    if (!admitted) return null;
    const preflight = admitted.kind === 'preflight';
    // A preflight is no use of the service: it neither keeps its machine from an idle stop nor wakes it.
    const slot = this.limits.connect(resolved.service.id, client, { use: !preflight });
    if (!slot) {
      refuse(new KisteError('L01', { message: 'This service takes no more requests right now', retryAfterSeconds: 5 }));
      return null;
    }
    let woken = false;
    if (resolved.instance.status !== 'running') {
      if (!resolved.service.wakeOnRequest || preflight) {
        slot.release();
        await services.noteStatus(resolved.service, resolved.instance, 'stopped').catch(() => undefined);
        refuse(new KisteError('K03', { message: 'The machine that serves this address is not running', hint: preflight ? 'It wakes on a request, not on a preflight.' : 'Its owner can resume it, or turn on wake_on_request.' }));
        return null;
      }
      try {
        resolved.instance = await wake.wake(resolved.instance);
        woken = true;
      } catch (error) {
        slot.release();
        // The owner's limits and the host's state are not a stranger's to read: one answer for all.
        refuse(error instanceof KisteError && error.code === 'K03' ? error : new KisteError('K03', { message: 'The machine that serves this address could not be started' }));
        return null;
      }
    }
    return { resolved, path, slot, woken, preflight, recheck: admitted.kind === 'in' ? admitted.recheck : async () => true };
  }

  /** A stream to the service's port; when none can be had, the slot is given back, the reason answered through `refuse`, and null. */
  private async openGuest({ resolved, slot, woken }: Target, refuse: (error: KisteError) => void): Promise<Duplex | null> {
    const { services, reach } = this.parts;
    const deadline = Date.now() + (woken ? WOKEN_PORT_MS : 0);
    for (;;) {
      try {
        const guest = await reach.openPort(resolved.instance.id, resolved.service.port);
        void services.noteStatus(resolved.service, resolved.instance, 'active').catch(() => undefined);
        return guest;
      } catch (error) {
        if (!cameFromUnreachableHost(error) && Date.now() < deadline) {
          await new Promise((resolve) => setTimeout(resolve, 250));
          continue;
        }
        slot.release();
        if (cameFromUnreachableHost(error)) refuse(new KisteError('N01'));
        else {
          void services.noteStatus(resolved.service, resolved.instance, 'unreachable').catch(() => undefined);
          refuse(new KisteError('S13', { message: `Nothing answers on port ${resolved.service.port} in the machine` }));
        }
        return null;
      }
    }
  }
}
