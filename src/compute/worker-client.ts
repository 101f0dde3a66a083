// The control plane's side of worker-api.yaml: signed requests over the worker's socket, and every
// answer treated as untrusted input — its signature checked against the request's nonce, its size
// bounded, its body validated against the spec — before anyone reads it. A worker that cannot be
// reached is WorkerUnreachableError (the API's N01); one that answers what does not fit is
// WorkerProtocolError, and its answer is never used.
import { request, type IncomingMessage, type RequestOptions } from 'node:http';
import { Agent as TlsAgent, request as tlsRequest } from 'node:https';
import { X509Certificate } from 'node:crypto';
import { isIP } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { WebSocket } from 'ws';
import type { components } from '../generated/worker-api';
import * as validators from '../generated/worker-validators';
import { peerText } from '../protocol/peer-input';
import { HostTimeoutError, HostUnreachableError } from './machine-host';
import { answerSignedBy, signRequest, SIGNATURE_HEADERS } from '../protocol/worker-signature';

/** No answer of this protocol is larger (streams are upgrades, not answers). */
const MAX_ANSWER_BYTES = 1024 * 1024;

export type WorkerHello = components['schemas']['WorkerHello'];
export type WorkerChecks = components['schemas']['WorkerChecks'];

/** The worker cannot be reached (N01 for the API). */
export class WorkerUnreachableError extends HostUnreachableError {}
/**
 * The worker refused a command of another fencing epoch than its own (it was adopted again since,
 * or it is a run that nobody adopted yet): nothing was done, and like an unreachable worker the API
 * answers N01 until the control plane knows the worker's epoch again.
 */
export class WorkerStaleEpochError extends WorkerUnreachableError {}
/**
 * The worker took the connection but gave no whole answer in time: not a worker that is away (it
 * still answers its supervisor), so the operation fails as any other would instead of waiting for
 * a return that never comes.
 */
export class WorkerTimeoutError extends HostTimeoutError {}
export class WorkerProtocolError extends Error {}
/** The worker answered, validly, with an error of the protocol (`agentCode`: how a guest agent call failed). */
export class WorkerCallError extends Error {
  constructor(
    readonly status: number,
    readonly code: components['schemas']['WorkerError']['error']['code'],
    message: string,
    readonly agentCode?: components['schemas']['AgentErrorCode'],
  ) {
    super(message);
  }
}

/** Largest WebSocket message a worker may send on a stream (exec output and TCP bytes come in pieces). */
const MAX_STREAM_MESSAGE_BYTES = 1024 * 1024;

/**
 * Where the worker listens: its unix socket (one box), or its TLS address with the certificate the
 * control plane pinned on first contact (several hosts). The pinned certificate is the only one
 * trusted, and only when its fingerprint matches exactly; host names are not checked (the pin is
 * stronger than a name).
 */
export type WorkerEndpoint = { socketPath: string } | { address: string; certificatePem: string };

export interface WorkerClientSettings {
  endpoint: WorkerEndpoint;
  secret: Buffer;
  /** Per call (default 10 s). */
  timeoutMs?: number;
}

export class WorkerClient {
  /** Connections to a worker on another host, kept open between calls (closed by close()). */
  private readonly tlsAgent: TlsAgent | undefined;
  /** The fencing epoch every request is signed under: the one the worker was adopted with (0 until then). */
  epoch = 0;

  constructor(private readonly settings: WorkerClientSettings) {
    this.tlsAgent = 'address' in settings.endpoint ? new TlsAgent({ keepAlive: true, maxSockets: 64 }) : undefined;
  }

  /** Ends the connections kept open (the client is not used after). */
  close(): void {
    this.tlsAgent?.destroy();
  }

  /** A client of one worker finds out by calling whether it answers. */
  reachable(): boolean {
    return true;
  }

  hello(): Promise<WorkerHello> {
    return this.call('GET', '/w1/hello', 'WorkerHello') as Promise<WorkerHello>;
  }

  checks(): Promise<WorkerChecks> {
    return this.call('GET', '/w1/checks', 'WorkerChecks') as Promise<WorkerChecks>;
  }

  /** Adopts the worker under `epoch` (higher than its own); this client's requests carry it from now on. */
  async fence(epoch: number): Promise<void> {
    await this.call('PUT', '/w1/epoch', 'FenceWorker', { epoch });
    this.epoch = epoch;
  }

  /**
   * One operation of worker-api.yaml: `operationId` names the validators its answer must pass.
   * `timeoutMs` overrides the client's (machine operations run for minutes under TCG).
   */
  async call(method: string, path: string, operationId: string, requestBody?: unknown, timeoutMs?: number): Promise<unknown> {
    const body = requestBody === undefined ? '' : JSON.stringify(requestBody);
    const headers = signRequest(this.settings.secret, method, path, body, Date.now(), this.epoch);
    const answer = await this.send(method, path, headers, body, timeoutMs ?? this.settings.timeoutMs ?? 10_000);
    return this.checked(operationId, headers[SIGNATURE_HEADERS.nonce]!, answer);
  }

  /**
   * A stream of worker-api.yaml (a signed WebSocket upgrade): open once the 101 carries the
   * worker's signature over this request's nonce; a refusal is checked as any answer and thrown.
   * `attach` takes the open socket at once, before any message of it can be read (a message that
   * came with the 101 would otherwise be delivered to nobody), and what it makes is the result.
   */
  upgrade<T>(path: string, operationId: string, attach: (ws: WebSocket) => T, timeoutMs?: number): Promise<T> {
    const headers = signRequest(this.settings.secret, 'GET', path, '', Date.now(), this.epoch);
    const nonce = headers[SIGNATURE_HEADERS.nonce]!;
    const deadlineMs = timeoutMs ?? this.settings.timeoutMs ?? 10_000;
    return new Promise<T>((resolveUpgrade, rejectUpgrade) => {
      const endpoint = this.settings.endpoint;
      const options = { headers, perMessageDeflate: false, maxPayload: MAX_STREAM_MESSAGE_BYTES, handshakeTimeout: deadlineMs, followRedirects: false };
      const ws = 'socketPath' in endpoint
        ? new WebSocket(`ws+unix://${endpoint.socketPath}:${path}`, options)
        : new WebSocket(`wss://${addressOf(endpoint.address).authority}${path}`, { ...options, ...pinnedTls(endpoint.certificatePem) });
      // A deadline for the whole upgrade and any refusal's body, not only for silence.
      const deadline = setTimeout(() => {
        ws.terminate();
        rejectUpgrade(new WorkerTimeoutError(`GET ${path}: no whole answer from the worker within ${deadlineMs} ms`));
      }, deadlineMs);
      const resolve = (value: T) => (clearTimeout(deadline), resolveUpgrade(value));
      const reject = (error: unknown) => (clearTimeout(deadline), rejectUpgrade(error));
      let signed = false;
      ws.once('upgrade', (res: IncomingMessage) => {
        const signature = res.headers[SIGNATURE_HEADERS.signature];
        signed = answerSignedBy(this.settings.secret, 101, nonce, Buffer.alloc(0), typeof signature === 'string' ? signature : undefined);
      });
      ws.once('open', () => {
        if (signed) return resolve(attach(ws));
        ws.terminate();
        reject(new WorkerProtocolError(`${operationId}: the upgrade is not signed by the worker`));
      });
      ws.once('unexpected-response', (req, res: IncomingMessage) => {
        readBounded(res, `GET ${path}`)
          .then((body) => {
            this.checked(operationId, nonce, { status: res.statusCode ?? 0, headers: res.headers, body });
            throw new WorkerProtocolError(`${operationId}: the worker answered ${res.statusCode} instead of an upgrade`);
          })
          .catch(reject)
          .finally(() => req.destroy());
      });
      ws.once('error', (error) => reject(new WorkerUnreachableError(`GET ${path}: the worker cannot be reached (${errorCode(error)})`)));
    });
  }

  /** An answer as the protocol allows it, or the error it stands for. */
  private checked(operationId: string, nonce: string, answer: { status: number; headers: IncomingMessage['headers']; body: Buffer }): unknown {
    const signature = answer.headers[SIGNATURE_HEADERS.signature];
    if (!answerSignedBy(this.settings.secret, answer.status, nonce, answer.body, typeof signature === 'string' ? signature : undefined)) {
      throw new WorkerProtocolError(`${operationId}: the answer is not signed by the worker`);
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(answer.body.toString('utf8'));
    } catch {
      throw new WorkerProtocolError(`${operationId}: the answer is not JSON`);
    }
    // Only a status the spec gives the operation, with the body the spec gives that status.
    const validate = validators[`${operationId}__${answer.status}`];
    if (!validate) throw new WorkerProtocolError(`${operationId}: status ${answer.status} is not one the protocol gives it`);
    if (!validate(parsed)) throw new WorkerProtocolError(`${operationId}: the answer (${answer.status}) does not fit the protocol (${peerText(validate.errors?.[0]?.message ?? '', 200)})`);
    if (answer.status === 200) return parsed;
    const { code, message, agent_code: agentCode } = (parsed as components['schemas']['WorkerError']).error;
    if (code === 'stale_epoch') throw new WorkerStaleEpochError(`${operationId}: ${peerText(message, 500)}`);
    throw new WorkerCallError(answer.status, code, `${operationId}: ${peerText(message, 500)}`, agentCode);
  }

  private send(method: string, path: string, headers: Record<string, string>, body: string, timeoutMs: number): Promise<{ status: number; headers: IncomingMessage['headers']; body: Buffer }> {
    return new Promise((resolve, reject) => {
      const contentHeaders = body ? { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) } : { 'content-length': '0' };
      const endpoint = this.settings.endpoint;
      const options: RequestOptions = { method, path, headers: { ...headers, ...contentHeaders } };
      const onAnswer = (res: IncomingMessage) => {
        readBounded(res, `${method} ${path}`).then((answer) => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: answer }), reject);
      };
      const req = 'socketPath' in endpoint
        ? request({ ...options, socketPath: endpoint.socketPath }, onAnswer)
        : tlsRequest({ ...options, ...addressOf(endpoint.address), ...pinnedTls(endpoint.certificatePem), agent: this.tlsAgent }, onAnswer);
      // A deadline for the whole answer, not only for silence: a worker that trickles bytes ends too.
      let late = false;
      const deadline = setTimeout(() => {
        late = true;
        req.destroy();
        reject(new WorkerTimeoutError(`${method} ${path}: no whole answer from the worker within ${timeoutMs} ms`));
      }, timeoutMs);
      req.on('close', () => clearTimeout(deadline));
      req.on('error', (error) => {
        if (!late) reject(new WorkerUnreachableError(`${method} ${path}: the worker cannot be reached (${errorCode(error)})`));
      });
      req.end(body);
    });
  }
}

/** What the control plane's compute parts call: a worker's client, or the supervised local worker's. */
export type WorkerCalls = Pick<WorkerClient, 'call' | 'upgrade' | 'reachable'>;

/** host and port of an https://host:port address (checked when the worker was added). */
export function addressOf(address: string): { host: string; port: number; authority: string } {
  const url = new URL(address);
  return { host: url.hostname.replace(/^\[|\]$/g, ''), port: Number(url.port || 443), authority: url.host };
}

/** TLS options that trust exactly the pinned certificate: it is the only CA, and the peer's must be it byte for byte. */
function pinnedTls(certificatePem: string): { ca: string; rejectUnauthorized: true; checkServerIdentity: (host: string, cert: { fingerprint256: string }) => Error | undefined } {
  const pinned = new X509Certificate(certificatePem).fingerprint256;
  return {
    ca: certificatePem,
    rejectUnauthorized: true,
    checkServerIdentity: (_host, cert) => (cert.fingerprint256 === pinned ? undefined : new Error('the worker presented another certificate than the one pinned')),
  };
}

/** How a connection failed, without Node's message (it names the socket's path, which API users must not see). */
function errorCode(error: Error): string {
  return (error as NodeJS.ErrnoException).code ?? 'connection failed';
}

/** An answer's body, at most MAX_ANSWER_BYTES. */
function readBounded(res: IncomingMessage, what: string): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    res.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_ANSWER_BYTES) {
        res.destroy();
        reject(new WorkerProtocolError(`${what}: the answer is larger than ${MAX_ANSWER_BYTES} bytes`));
      } else chunks.push(chunk);
    });
    res.on('end', () => resolve(Buffer.concat(chunks)));
    res.on('error', (error) => reject(new WorkerUnreachableError(`${what}: the answer broke off (${errorCode(error)})`)));
  });
}

/**
 * First contact with a worker on another host: reads the certificate it presents, then asks its
 * signed hello over a connection that trusts only that certificate. The hello must name the same
 * certificate: it is signed with the secret only the worker and this control plane hold, so a man in
 * the middle who presented his own certificate is found out here and nothing is pinned.
 */
export async function introduceWorker(address: string, secret: Buffer, timeoutMs = 10_000): Promise<{ hello: WorkerHello; certificatePem: string }> {
  const certificatePem = await presentedCertificate(address, timeoutMs);
  const client = new WorkerClient({ endpoint: { address, certificatePem }, secret, timeoutMs });
  const hello = await client.hello().finally(() => client.close());
  if (hello.tls_fingerprint !== new X509Certificate(certificatePem).fingerprint256) {
    throw new WorkerProtocolError('the worker names another TLS certificate than the one presented on this connection (a man in the middle?)');
  }
  return { hello, certificatePem };
}

/** The certificate a TLS listener presents, as PEM (nothing is sent over the connection). */
function presentedCertificate(address: string, timeoutMs: number): Promise<string> {
  const { host, port } = addressOf(address);
  return new Promise((resolve, reject) => {
    const socket = tlsConnect({ host, port, rejectUnauthorized: false, servername: isIP(host) ? undefined : host, timeout: timeoutMs });
    socket.once('secureConnect', () => {
      const raw = socket.getPeerCertificate().raw;
      socket.destroy();
      if (!raw) return reject(new WorkerProtocolError('the worker presented no TLS certificate'));
      resolve(new X509Certificate(raw).toString());
    });
    socket.once('timeout', () => {
      socket.destroy();
      reject(new WorkerUnreachableError(`the worker at ${address} did not complete a TLS handshake within ${timeoutMs} ms`));
    });
    socket.once('error', (error) => reject(new WorkerUnreachableError(`the worker at ${address} cannot be reached (${errorCode(error)})`)));
  });
}
