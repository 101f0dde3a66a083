// The worker side of worker-api.yaml: an HTTP listener (a unix socket on one box, TLS between
// hosts) that takes only signed requests, checks their bodies against the spec, and signs every
// answer. What it serves is in worker-routes.ts.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { chmodSync, rmSync } from 'node:fs';
import type { MachineHost } from '../compute/machine-host';
import { RequestVerifier, signAnswer, SIGNATURE_HEADERS } from '../protocol/worker-signature';
import { failure, routeRequest, type Answer } from './worker-routes';

/** No request of this protocol carries more (machine commands are small; streams are upgrades). */
const MAX_BODY_BYTES = 1024 * 1024;

export interface WorkerServerSettings {
  secret: Buffer;
  version: string;
  host: MachineHost;
  logger: { warn(object: object, message: string): void };
}

export class WorkerServer {
  private readonly verifier: RequestVerifier;
  private readonly startedAt = new Date().toISOString();
  private readonly server: Server;

  constructor(private readonly settings: WorkerServerSettings) {
    this.verifier = new RequestVerifier(settings.secret);
    this.server = createServer((req, res) => void this.handle(req, res));
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

  close(): Promise<void> {
    return new Promise((resolve) => {
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await readBody(req).catch(() => null);
    if (body === null) return this.answer(res, '', failure(400, 'bad_request', `a request body is at most ${MAX_BODY_BYTES} bytes`));
    const path = req.url ?? '';
    const checked = this.verifier.verify(req.method ?? '', path, req.headers, body);
    if (!checked.ok) {
      this.settings.logger.warn({ reason: checked.reason, path }, 'worker refused a request it cannot verify');
      // Signed for no request (the nonce was not verified): nobody can make it count as an answer to theirs.
      return this.answer(res, '', failure(401, 'unauthorized', 'the request is not signed with this worker\'s secret'));
    }
    let answer: Answer;
    try {
      answer = await routeRequest({ host: this.settings.host, version: this.settings.version, startedAt: this.startedAt }, req.method ?? '', path, body);
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
