// The worker side of worker-api.yaml: an HTTP listener (a unix socket on one box, TLS between
// hosts) that takes only signed requests, checks their bodies against the spec, and signs every
// answer, the 101 of a WebSocket upgrade too. What it serves is in worker-routes.ts; the streams
// in agent-streams.ts.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createTlsServer } from 'node:https';
import { BlockList, isIP, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { chmodSync, rmSync } from 'node:fs';
import { WebSocketServer, type WebSocket } from 'ws';
import { RequestVerifier, signAnswer, SIGNATURE_HEADERS } from '../protocol/worker-signature';
import { isWebSocketHandshake, upgradeResponse } from '../net/websocket';
import { carryBytes, ExecTable } from './agent-streams';
import { LayerBuildStreams, MAX_LAYER_BUILD_STREAMS } from './layer-build-streams';
import { WorkerFencing } from './worker-fencing';
import { failure, failureOf, routeRequest, runningAgent, staleEpoch, upgradeTarget, type Answer, type WorkerCounts, type WorkerHost, type WorkerImageVersions } from './worker-routes';
import type { WorkerOffer } from './worker-config';
import { receiveMachine, sendMachine } from './machine-move-streams';
import type { OutgoingMachine } from '../compute/machine-moves';
import type { WorkerCertificate } from './worker-tls';
import { openScreenVideo, type OpenedScreenVideo } from './screen-video-streams';
import type { Cidr } from '../net/special-addresses';

/** No request of this protocol carries more (machine commands are small; streams are upgrades). */
const MAX_BODY_BYTES = 1024 * 1024;
/** Largest WebSocket message the control plane may send (stdin and TCP bytes come in pieces). */
const MAX_MESSAGE_BYTES = 1024 * 1024;
/** How long the guest's TCP port may take to accept. */
const TCP_OPEN_MS = 10_000;
/** At most one log line of refused requests per this long. */
const REFUSAL_LOG_MS = 10_000;
/** Connections the TLS listener holds at once (the control plane's replicas use a few each). */
const MAX_TLS_CONNECTIONS = 512;

export interface WorkerServerSettings {
  secret: Buffer;
  version: string;
  host: WorkerHost;
  /** The worker's image builds (removals wait for them). */
  images: WorkerImageVersions;
  /** What the worker counts for the control plane's metrics (default: nothing counted). */
  counts?: WorkerCounts;
  /** What it offers for machines (hello; placement reserves against it). Default: nothing (one box: the service does not place). */
  offer?: WorkerOffer;
  logger: { warn(object: object, message: string): void };
}

export class WorkerServer {
  private readonly verifier: RequestVerifier;
  private readonly startedAt = new Date().toISOString();
  private readonly server: Server;
  private tlsServer: Server | null = null;
  /** The TLS certificate's fingerprint once it listens between hosts (hello names it). */
  private tlsFingerprint: string | null = null;
  private readonly execs = new ExecTable();
  private readonly fencing = new WorkerFencing();
  private readonly layerBuilds: LayerBuildStreams;
  private readonly sockets = new WebSocketServer({ noServer: true, maxPayload: MAX_MESSAGE_BYTES, perMessageDeflate: false });
  private refusals = 0;
  private lastRefusalLog = 0;
  /** The verified nonce of each upgrade request, for the signature of its 101. */
  private readonly upgradeNonces = new WeakMap<IncomingMessage, string>();

  constructor(private readonly settings: WorkerServerSettings) {
    this.verifier = new RequestVerifier(settings.secret);
    this.layerBuilds = new LayerBuildStreams((request) => settings.host.buildLayer(request));
    this.server = this.serving(createServer());
    this.sockets.on('headers', (headers: string[], req: IncomingMessage) => {
      headers.push(`${SIGNATURE_HEADERS.signature}: ${signAnswer(settings.secret, 101, this.upgradeNonces.get(req) ?? '', '')}`);
    });
  }

  /** Listens on a unix socket only its owner may open (the control plane runs as the same user). */
  async listenOnSocket(path: string): Promise<void> {
    rmSync(path, { force: true });
    // Made 0600 from the start (a chmod after listen leaves a moment others could connect in).
    const umask = process.umask(0o177);
    try {
      await new Promise<void>((resolve, reject) => {
        this.server.once('error', reject);
        this.server.listen(path, () => resolve());
      });
    } finally {
      process.umask(umask);
    }
    chmodSync(path, 0o600);
  }

  /**
   * Listens with TLS on host:port too (several hosts): the same requests, signed the same way.
   * `allowFrom` (KISTE_WORKER_ALLOW_FROM): connections from any other address are closed as they
   * come, before a handshake, so strangers cannot take the connections the control plane needs.
   */
  async listenWithTls(host: string, port: number, certificate: WorkerCertificate, allowFrom: readonly Cidr[] = []): Promise<{ port: number }> {
    // A handshake or request that stalls ends instead of holding a socket for ever.
    const server = this.serving(createTlsServer({ cert: certificate.cert, key: certificate.key, minVersion: 'TLSv1.3', handshakeTimeout: 10_000, requestTimeout: 60_000, headersTimeout: 10_000 }));
    server.maxConnections = MAX_TLS_CONNECTIONS;
    if (allowFrom.length) {
      const allowed = new BlockList();
      for (const range of allowFrom) {
        const [network, prefix] = range.cidr.split('/');
        allowed.addSubnet(network!, Number(prefix), range.family === 4 ? 'ipv4' : 'ipv6');
      }
      server.prependListener('connection', (socket: Socket) => {
        if (isAllowed(allowed, socket.remoteAddress)) return;
        this.refused('a connection from an address KISTE_WORKER_ALLOW_FROM does not name', socket.remoteAddress ?? '');
        socket.destroy();
      });
    }
    // Longer than the heartbeat's interval: the control plane's connections are kept, not made anew each time.
    server.keepAliveTimeout = 65_000;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => resolve());
    });
    this.tlsServer = server;
    this.tlsFingerprint = certificate.fingerprint;
    const address = server.address();
    return { port: typeof address === 'object' && address ? address.port : port };
  }

  close(): Promise<void> {
    this.execs.closeAll();
    for (const ws of this.sockets.clients) ws.terminate();
    this.sockets.close();
    const servers = [this.server, ...(this.tlsServer ? [this.tlsServer] : [])];
    return Promise.all(servers.map((server) => new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    }))).then(() => undefined);
  }

  /** Refusals are logged at most once per REFUSAL_LOG_MS, with how many there were: a stranger hammering the port fills no log. */
  private refused(reason: string, path: string): void {
    this.refusals++;
    const now = Date.now();
    if (now - this.lastRefusalLog < REFUSAL_LOG_MS) return;
    this.lastRefusalLog = now;
    this.settings.logger.warn({ reason, path: path.slice(0, 200), refusals: this.refusals }, 'worker refused requests it cannot verify');
    this.refusals = 0;
  }

  private serving(server: Server): Server {
    server.on('request', (req: IncomingMessage, res: ServerResponse) => void this.handle(req, res));
    server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      const res = upgradeResponse(req, socket);
      if (res) this.upgrade(req, socket as Socket, head, res).catch(() => socket.destroy());
    });
    return server;
  }

  /** A stream (AttachExec, OpenTcp, OpenScreen, BuildLayer): verified and routed like any request, answered before the handshake when refused. */
  private async upgrade(req: IncomingMessage, socket: Socket, head: Buffer, res: ServerResponse): Promise<void> {
    res.on('finish', () => socket.end());
    const path = req.url ?? '';
    const checked = this.verifier.verify(req.method ?? '', path, req.headers, Buffer.alloc(0));
    if (!checked.ok) {
      this.refused(checked.reason, path);
      return this.answer(res, '', failure(401, 'unauthorized', 'the request is not signed with this worker\'s secret'));
    }
    if (!isWebSocketHandshake(req)) return this.answer(res, checked.nonce, failure(400, 'bad_request', 'not a WebSocket handshake'));
    const target = upgradeTarget(path);
    if ('status' in target) return this.answer(res, checked.nonce, target);
    // Every stream is a command: only of the epoch the worker was adopted with.
    if (!this.fencing.admits(checked.epoch)) return this.answer(res, checked.nonce, staleEpoch(this.fencing, checked.epoch));
    let open: (ws: WebSocket) => void;
    let abandon: () => void;
    if (target.kind === 'exec') {
      const claimed = this.execs.claim(target.exec);
      if (!claimed) return this.answer(res, checked.nonce, failure(404, 'not_found', `no command ${target.exec} waiting for its stream`));
      open = claimed.carry;
      abandon = claimed.abandon;
    } else if (target.kind === 'layer') {
      const claimed = this.layerBuilds.claim();
      if (!claimed) return this.answer(res, checked.nonce, failure(500, 'failed', `this worker already runs ${MAX_LAYER_BUILD_STREAMS} layer builds`));
      open = claimed.carry;
      abandon = claimed.abandon;
    } else if (target.kind === 'export') {
      let outgoing: OutgoingMachine;
      try {
        outgoing = await this.settings.host.exportMachine(target.machine);
      } catch (error) {
        return this.answer(res, checked.nonce, failureOf(error));
      }
      open = (ws) => void sendMachine(ws, outgoing);
      abandon = () => outgoing.cleanUp();
    } else if (target.kind === 'import') {
      const { machine, limits } = target;
      // A machine on its way here is kept from a removal of strays while it comes, and for a while after.
      this.fencing.address(machine);
      const ended = this.fencing.begin(machine);
      open = (ws) => {
        ws.once('close', ended);
        receiveMachine(ws, machine, limits, this.settings.host);
      };
      abandon = ended;
    } else if (target.kind === 'video') {
      let video: OpenedScreenVideo;
      try {
        video = await openScreenVideo(this.settings.host, target.machine, target.request);
      } catch (error) {
        return this.answer(res, checked.nonce, failureOf(error));
      }
      ({ open, abandon } = video);
    } else if (target.kind === 'screen') {
      let screen: Duplex;
      try {
        if (!(await this.settings.host.isRunning(target.machine))) throw new Error(`machine ${target.machine} is not running`);
        screen = await this.settings.host.openScreen(target.machine);
      } catch (error) {
        return this.answer(res, checked.nonce, failureOf(error));
      }
      open = (ws) => carryBytes(screen, ws);
      abandon = () => screen.destroy();
    } else {
      let guest: Duplex;
      try {
        guest = await (await runningAgent(this.settings.host, target.machine)).openTcp(target.port, undefined, { timeoutMs: TCP_OPEN_MS });
      } catch (error) {
        return this.answer(res, checked.nonce, failureOf(error));
      }
      open = (ws) => carryBytes(guest, ws);
      abandon = () => guest.destroy();
    }
    res.detachSocket(socket);
    // What was claimed or opened for the stream is given up unless the stream opens: the client may
    // have left meanwhile (while it was opened: its close came before anyone listened), or ws may
    // refuse the handshake (a bad key) without calling back. Given up once, whichever comes first.
    let opened = false;
    const giveUp = () => {
      if (opened) return;
      opened = true;
      abandon();
    };
    socket.once('close', giveUp);
    if (socket.destroyed || !socket.readable || !socket.writable) {
      giveUp();
      return void socket.destroy();
    }
    this.upgradeNonces.set(req, checked.nonce);
    this.sockets.handleUpgrade(req, socket, head, (ws) => {
      opened = true;
      open(ws);
    });
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    // A stranger (no signature of now) gets no body read: answered and the connection closed.
    const refusal = this.verifier.precheck(req.headers);
    if (refusal) {
      this.refused(refusal, req.url ?? '');
      res.setHeader('connection', 'close');
      res.on('finish', () => req.destroy());
      return this.answer(res, '', failure(401, 'unauthorized', 'the request is not signed with this worker\'s secret'));
    }
    const body = await readBody(req).catch(() => null);
    if (body === null) return this.answer(res, '', failure(400, 'bad_request', `a request body is at most ${MAX_BODY_BYTES} bytes`));
    const path = req.url ?? '';
    const checked = this.verifier.verify(req.method ?? '', path, req.headers, body);
    if (!checked.ok) {
      this.refused(checked.reason, path);
      // Signed for no request (the nonce was not verified): nobody can make it count as an answer to theirs.
      return this.answer(res, '', failure(401, 'unauthorized', 'the request is not signed with this worker\'s secret'));
    }
    let answer: Answer;
    try {
      answer = await routeRequest({
        host: this.settings.host, version: this.settings.version, startedAt: this.startedAt, execs: this.execs, images: this.settings.images,
        counts: this.settings.counts ?? { agentLinksDropped: 0 },
        identity: { tlsFingerprint: this.tlsFingerprint, offer: this.settings.offer ?? { vcpu: 0, memoryMib: 0, diskMib: 0 } },
        fencing: this.fencing, epoch: checked.epoch,
      }, req.method ?? '', path, body);
    } catch (error) {
      this.settings.logger.warn({ err: error, path }, 'worker request failed');
      answer = failure(500, 'internal', 'the worker could not answer');
    }
    this.answer(res, checked.nonce, answer);
  }

  private answer(res: ServerResponse, nonce: string, answer: Answer): void {
    const text = JSON.stringify(answer.body);
    res.writeHead(answer.status, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(text),
      [SIGNATURE_HEADERS.signature]: signAnswer(this.settings.secret, answer.status, nonce, text),
    });
    res.end(text);
  }
}

/** The body, or a rejection past MAX_BODY_BYTES (the rest is read and dropped, so the answer still arrives). */
function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size <= MAX_BODY_BYTES) chunks.push(chunk);
    });
    req.on('end', () => (size > MAX_BODY_BYTES ? reject(new Error('body too large')) : resolve(Buffer.concat(chunks))));
    req.on('error', reject);
  });
}

/** Whether a peer's address is in the allowed ranges (an IPv4 peer of a dual-stack socket comes as ::ffff:a.b.c.d). */
function isAllowed(allowed: BlockList, address: string | undefined): boolean {
  if (!address) return false;
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped) return allowed.check(mapped[1]!, 'ipv4');
  return allowed.check(address, isIP(address) === 6 ? 'ipv6' : 'ipv4');
}
