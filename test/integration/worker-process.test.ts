// kiste-worker as a process (issue 22, first slice): it serves worker-api.yaml on a unix socket only
// its owner may open, takes only requests signed with its secret (each once), signs its answers,
// and the control plane's client takes an answer only when it is signed and fits the protocol. A
// worker that answers badly (a stand-in server here, for fault injection) costs the call, never the
// caller's process.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { createServer, request, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { WorkerClient, WorkerProtocolError, WorkerUnreachableError } from '../../src/compute/worker-client';
import { signAnswer, signRequest, SIGNATURE_HEADERS } from '../../src/protocol/worker-signature';
import { readWorkerSecret } from '../../src/worker/worker-secret';
import { TEST_IMAGE_DIR } from '../support/images';
import { ServiceProcess } from '../support/service-process';

jest.setTimeout(90_000);

function raw(socketPath: string, path: string, headers: Record<string, string>, method = 'GET'): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, path, method, headers }, (res) => {
      let body = '';
      res.on('data', (chunk) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('the worker process', () => {
  let dataDir: string;
  let worker: ServiceProcess;

  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'kiste-worker-'));
    worker = new ServiceProcess(
      { KISTE_DATA_DIR: dataDir, KISTE_IMAGE_DIR: TEST_IMAGE_DIR, KISTE_ACCELERATOR: 'tcg' },
      { entry: 'src/worker/main.ts', ready: 'kiste-worker is listening' },
    );
    await worker.listening();
  });
  afterAll(async () => {
    await worker?.ensureStopped();
    rmSync(dataDir, { recursive: true, force: true });
  });

  const socket = () => join(dataDir, 'worker.sock');

  it('listens on a socket only its owner opens, with a secret file only its owner reads', () => {
    expect(statSync(socket()).mode & 0o777).toBe(0o600);
    expect(statSync(join(dataDir, 'worker.secret')).mode & 0o777).toBe(0o600);
  });

  it('says who it is and what the host can take, to a client with its secret', async () => {
    const client = new WorkerClient({ socketPath: socket(), secret: readWorkerSecret(join(dataDir, 'worker.secret'), { create: false }) });
    const hello = await client.hello();
    expect(hello).toMatchObject({ protocol_version: 1, accelerator: 'tcg' });
    expect(Date.parse(hello.started_at)).toBeLessThanOrEqual(Date.now());
    const checks = await client.checks();
    expect(checks.accelerator).toBe('tcg');
    expect(checks.capacity.free_memory_mib).toBeGreaterThan(0);
    // Run as root with the jail's tools, the host can jail machines; otherwise the answer says why not.
    if (process.getuid?.() === 0) expect(checks.isolation_problem).toBeNull();
    else expect(checks.isolation_problem?.reason).toMatch(/root/);
  });

  it('refuses unsigned, replayed and foreign requests with 401, and a client with another secret trusts nothing it answers', async () => {
    const secret = readWorkerSecret(join(dataDir, 'worker.secret'), { create: false });
    expect(await raw(socket(), '/w1/hello', {})).toEqual({ status: 401, body: expect.stringContaining('"unauthorized"') });
    const signed = signRequest(secret, 'GET', '/w1/hello', '');
    expect((await raw(socket(), '/w1/hello', signed)).status).toBe(200);
    expect((await raw(socket(), '/w1/hello', signed)).status).toBe(401); // the same nonce again
    expect((await raw(socket(), '/w1/checks', signRequest(secret, 'GET', '/w1/hello', ''))).status).toBe(401); // signed for another path
    expect((await raw(socket(), '/w1/nothing', signRequest(secret, 'GET', '/w1/nothing', ''))).status).toBe(404);
    const stranger = new WorkerClient({ socketPath: socket(), secret: randomBytes(32) });
    await expect(stranger.hello()).rejects.toBeInstanceOf(WorkerProtocolError);
  });

  it('routes only what was signed: a target the URL parser would rewrite is refused, not resolved', async () => {
    const secret = readWorkerSecret(join(dataDir, 'worker.secret'), { create: false });
    for (const [method, target] of [['DELETE', '/w1/machines/./session'], ['DELETE', '/w1/machines/%2e%2e/machines/victim'], ['GET', '/w1//hello'], ['GET', '/w1/machines/x/../../hello']]) {
      const answer = await raw(socket(), target!, signRequest(secret, method!, target!, ''), method);
      expect({ target, status: answer.status, body: answer.body }).toEqual({ target, status: 400, body: expect.stringContaining('canonical') });
    }
  });

  it('stops on SIGTERM', async () => {
    worker.signal('SIGTERM');
    expect((await worker.waitExit(30_000)).code).toBe(0);
    const client = new WorkerClient({ socketPath: socket(), secret: readWorkerSecret(join(dataDir, 'worker.secret'), { create: false }), timeoutMs: 2000 });
    await expect(client.hello()).rejects.toBeInstanceOf(WorkerUnreachableError);
  });
});

describe('a worker that answers what does not fit', () => {
  const secret = randomBytes(32);
  let dir: string;
  let server: Server;
  let behaviour: (nonce: string) => { status: number; body: string; signature?: string | null } | 'hang' | 'flood' | 'trickle';

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'kiste-bad-worker-'));
    server = createServer((req, res) => {
      const nonce = String(req.headers[SIGNATURE_HEADERS.nonce]);
      const answer = behaviour(nonce);
      if (answer === 'hang') return;
      if (answer === 'trickle') {
        res.writeHead(200, { 'content-type': 'application/json' });
        const timer = setInterval(() => res.write(' '), 300);
        res.on('close', () => clearInterval(timer));
        return;
      }
      if (answer === 'flood') {
        res.writeHead(200, { 'content-type': 'application/json' });
        const chunk = Buffer.alloc(64 * 1024, 0x20);
        const pump = () => {
          while (res.write(chunk)) if (res.destroyed) return;
          res.once('drain', pump);
        };
        res.on('close', () => res.removeAllListeners('drain'));
        return pump();
      }
      const signature = answer.signature === undefined ? signAnswer(secret, answer.status, nonce, answer.body) : answer.signature;
      res.writeHead(answer.status, { 'content-type': 'application/json', ...(signature ? { [SIGNATURE_HEADERS.signature]: signature } : {}) });
      res.end(answer.body);
    });
    await new Promise<void>((resolve) => server.listen(join(dir, 'w.sock'), resolve));
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
    rmSync(dir, { recursive: true, force: true });
  });

  const client = () => new WorkerClient({ socketPath: join(dir, 'w.sock'), secret, timeoutMs: 1500 });
  const hello = JSON.stringify({ protocol_version: 1, worker_version: '0.1.0', started_at: new Date().toISOString(), accelerator: 'tcg' });

  it('takes a well-formed signed answer (the stand-in is faithful)', async () => {
    behaviour = () => ({ status: 200, body: hello });
    await expect(client().hello()).resolves.toMatchObject({ protocol_version: 1 });
  });

  it.each([
    ['unsigned', () => ({ status: 200, body: hello, signature: null })],
    ['signed for another request', () => ({ status: 200, body: hello, signature: signAnswer(secret, 200, 'f'.repeat(32), hello) })],
    ['not JSON', () => ({ status: 200, body: '{"protocol_version":' })],
    ['a field the protocol lacks', () => ({ status: 200, body: JSON.stringify({ ...JSON.parse(hello), shell: 'rm -rf /' }) })],
    ['a wrong type', () => ({ status: 200, body: JSON.stringify({ ...JSON.parse(hello), protocol_version: '1' }) })],
    ['an error answer of no known shape', () => ({ status: 500, body: '{"oops":true}' })],
    ['a status the protocol does not give the operation', () => ({ status: 418, body: '{"error":{"code":"internal","message":"teapot"}}' })],
    ['a version with control characters', () => ({ status: 200, body: JSON.stringify({ ...JSON.parse(hello), worker_version: '1.0\n\u001b[2J' }) })],
  ])('refuses an answer that is %s', async (_what, answer) => {
    behaviour = answer;
    await expect(client().hello()).rejects.toBeInstanceOf(WorkerProtocolError);
  });

  it('refuses an endless answer once it passes the bound, and a silent worker after the timeout', async () => {
    behaviour = () => 'flood';
    await expect(client().hello()).rejects.toBeInstanceOf(WorkerProtocolError);
    behaviour = () => 'hang';
    await expect(client().hello()).rejects.toBeInstanceOf(WorkerUnreachableError);
    // A byte now and then keeps a socket from going idle; the deadline is for the whole answer.
    behaviour = () => 'trickle';
    const started = Date.now();
    await expect(client().hello()).rejects.toBeInstanceOf(WorkerUnreachableError);
    expect(Date.now() - started).toBeLessThan(5000);
  });
});
