// kiste-worker as a process (issue 22, first slice): it serves worker-api.yaml on a unix socket only
// its owner may open, takes only requests signed with its secret (each once), signs its answers,
// and the control plane's client takes an answer only when it is signed and fits the protocol. A
// worker that answers badly (a stand-in server here, for fault injection) costs the call, never the
// caller's process; the same holds for its streams (WebSocket upgrades): a refusal comes before the
// handshake, a 101 must be signed, and a stream message that does not fit costs that command.
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { createServer, request, type IncomingMessage, type Server } from 'node:http';
import { connect } from 'node:net';
import type { Duplex } from 'node:stream';
import { WebSocket, WebSocketServer } from 'ws';
import { AgentCallError } from '../../src/compute/agent/errors';
import { RemoteGuestAgents } from '../../src/compute/remote-guest-agents';
import { RemoteImages } from '../../src/compute/remote-images';
import { LayerBuildCancelled, type LayerBuildRequest } from '../../src/compute/layer-builder';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { WorkerCallError, WorkerClient, WorkerProtocolError, WorkerTimeoutError, WorkerUnreachableError } from '../../src/compute/worker-client';
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
  /** The epoch the tests adopted the worker with (adopted once, in the first test that needs it). */
  let epoch = 0;
  const secretOf = () => readWorkerSecret(join(dataDir, 'worker.secret'), { create: false });
  /** A client signing under the worker's current epoch. */
  const adopted = async (timeoutMs?: number) => {
    const client = new WorkerClient({ endpoint: { socketPath: socket() }, secret: secretOf(), timeoutMs });
    if (epoch === 0) {
      await client.fence(1);
      epoch = 1;
    }
    client.epoch = epoch;
    return client;
  };

  it('listens on a socket only its owner opens, with a secret file only its owner reads', () => {
    expect(statSync(socket()).mode & 0o777).toBe(0o600);
    expect(statSync(join(dataDir, 'worker.secret')).mode & 0o777).toBe(0o600);
  });

  it('says who it is and what the host can take, to a client with its secret', async () => {
    const client = new WorkerClient({ endpoint: { socketPath: socket() }, secret: readWorkerSecret(join(dataDir, 'worker.secret'), { create: false }) });
    const hello = await client.hello();
    expect(hello).toMatchObject({ protocol_version: 2, accelerator: 'tcg', epoch: 0 });
    expect(Date.parse(hello.started_at)).toBeLessThanOrEqual(Date.now());
    const checks = await client.checks();
    expect(checks.accelerator).toBe('tcg');
    expect(checks.capacity.free_memory_mib).toBeGreaterThan(0);
    // Run as root with the jail's tools, the host can jail machines; otherwise the answer says why not.
    if (process.getuid?.() === 0) expect(checks.isolation_problem).toBeNull();
    else expect(checks.isolation_problem?.reason).toMatch(/root/);
    // Its counts for the control plane's metrics: this run's, from zero.
    expect(await client.call('GET', '/w1/counters', 'WorkerCounters')).toEqual({ started_at: hello.started_at, guest_links_dropped: { agent: 0 } });
  });

  it('refuses unsigned, replayed and foreign requests with 401, and a client with another secret trusts nothing it answers', async () => {
    const secret = readWorkerSecret(join(dataDir, 'worker.secret'), { create: false });
    expect(await raw(socket(), '/w1/hello', {})).toEqual({ status: 401, body: expect.stringContaining('"unauthorized"') });
    const signed = signRequest(secret, 'GET', '/w1/hello', '');
    expect((await raw(socket(), '/w1/hello', signed)).status).toBe(200);
    expect((await raw(socket(), '/w1/hello', signed)).status).toBe(401); // the same nonce again
    expect((await raw(socket(), '/w1/checks', signRequest(secret, 'GET', '/w1/hello', ''))).status).toBe(401); // signed for another path
    expect((await raw(socket(), '/w1/nothing', signRequest(secret, 'GET', '/w1/nothing', ''))).status).toBe(404);
    const stranger = new WorkerClient({ endpoint: { socketPath: socket() }, secret: randomBytes(32) });
    await expect(stranger.hello()).rejects.toBeInstanceOf(WorkerProtocolError);
  });

  it('acts on machine commands only under the epoch it was adopted with: none before adoption, none of an older one after, and never back to an older epoch', async () => {
    const secret = secretOf();
    const machines = join(dataDir, 'machines');
    const command = (target: string, underEpoch: number, method = 'GET') => raw(socket(), target, signRequest(secret, method, target, '', Date.now(), underEpoch), method);
    // Not adopted yet: a command of any epoch is refused, and nothing happens.
    for (const underEpoch of [0, 1]) expect(await command('/w1/machines', underEpoch)).toEqual({ status: 409, body: expect.stringContaining('"stale_epoch"') });
    const client = await adopted();
    expect((await client.hello()).epoch).toBe(1);
    expect(await client.call('GET', '/w1/machines', 'ListMachines')).toEqual({ ids: expect.any(Array) });
    // A control plane that read an older epoch gets nothing done; the adopting one's client is told it is stale as an unreachable worker (N01).
    expect((await command('/w1/machines', 0)).status).toBe(409);
    await expect(client.fence(1)).rejects.toBeInstanceOf(WorkerUnreachableError);
    // Adopted again under 2: every client of epoch 1 is refused from now on, streams included.
    const newer = await adopted();
    await newer.fence(2);
    epoch = 2;
    expect((await command('/w1/machines', 1)).status).toBe(409);
    const stream = `/w1/machines/m-1/agent/tcp/22`;
    const upgrade = await raw(socket(), stream, { ...signRequest(secret, 'GET', stream, '', Date.now(), 1), connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': randomBytes(16).toString('base64') });
    expect(upgrade).toEqual({ status: 409, body: expect.stringContaining('"stale_epoch"') });
    await expect(newer.fence(1)).rejects.toBeInstanceOf(WorkerUnreachableError);
    expect((await newer.hello()).epoch).toBe(2);
    // Removing strays keeps the owned machines and what a command of this epoch changed meanwhile
    // (placed after the list was read); a read changes nothing.
    mkdirSync(join(machines, 'stray-1'), { recursive: true });
    mkdirSync(join(machines, 'owned-1'), { recursive: true });
    mkdirSync(join(machines, 'placed-since-1'), { recursive: true });
    expect(await newer.call('GET', '/w1/machines/stray-1', 'GetMachine')).toEqual({ running: false, session_saved: false });
    expect(await newer.call('DELETE', '/w1/machines/placed-since-1/session', 'DiscardSession')).toEqual({});
    expect((await newer.hello()).adoption.state).toBe('pending');
    expect(await newer.call('POST', '/w1/strays', 'RemoveStrays', { ids: ['owned-1'] })).toEqual({ ids: ['stray-1'] });
    expect((await newer.hello()).adoption.state).toBe('done');
    expect(readdirSync(machines).sort()).toEqual(['owned-1', 'placed-since-1']);
    // Adopted again: what the older epoch changed is not kept any more.
    await newer.fence(3);
    epoch = 3;
    expect((await command('/w1/machines/owned-1', 2)).status).toBe(409);
    expect(await newer.call('POST', '/w1/strays', 'RemoveStrays', { ids: ['owned-1'] })).toEqual({ ids: ['placed-since-1'] });
    expect(readdirSync(machines)).toEqual(['owned-1']);
    rmSync(join(machines, 'owned-1'), { recursive: true, force: true });
  });

  it('routes only what was signed: a target the URL parser would rewrite is refused, not resolved', async () => {
    const secret = readWorkerSecret(join(dataDir, 'worker.secret'), { create: false });
    for (const [method, target] of [['DELETE', '/w1/machines/./session'], ['DELETE', '/w1/machines/%2e%2e/machines/victim'], ['GET', '/w1//hello'], ['GET', '/w1/machines/x/../../hello']]) {
      const answer = await raw(socket(), target!, signRequest(secret, method!, target!, '', Date.now(), epoch), method);
      expect({ target, status: answer.status, body: answer.body }).toEqual({ target, status: 400, body: expect.stringContaining('canonical') });
    }
  });

  it('answers a stream it cannot open before the handshake: unsigned 401, no such command 404, no such stream 404; an agent call to a machine that is not running fails as a lost link', async () => {
    const secret = readWorkerSecret(join(dataDir, 'worker.secret'), { create: false });
    const upgrade = (path: string, headers: Record<string, string>) =>
      raw(socket(), path, { ...headers, connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': randomBytes(16).toString('base64') });
    const stream = `/w1/execs/${'a'.repeat(32)}/stream`;
    expect(await upgrade(stream, {})).toEqual({ status: 401, body: expect.stringContaining('"unauthorized"') });
    expect(await upgrade(stream, signRequest(secret, 'GET', stream, '', Date.now(), epoch))).toEqual({ status: 404, body: expect.stringContaining('no command') });
    expect((await upgrade('/w1/hello/stream', signRequest(secret, 'GET', '/w1/hello/stream', '', Date.now(), epoch))).status).toBe(404);
    const client = await adopted();
    await expect(client.upgrade(stream, 'AttachExec', (ws) => ws)).rejects.toMatchObject({ status: 404, code: 'not_found' });
    const agent = new RemoteGuestAgents(client).agent('not-running');
    for (const call of [() => agent.metrics(), () => agent.exec({ argv: ['true'] }), () => agent.openTcp(22)]) {
      const error = await call().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(AgentCallError);
      expect(error).toMatchObject({ code: 'disconnected', message: expect.stringContaining('not running') });
    }
  });

  it('drops an upgrade pipelined behind another request, unsigned or not, and answers on', async () => {
    const secret = readWorkerSecret(join(dataDir, 'worker.secret'), { create: false });
    const stream = `/w1/execs/${'c'.repeat(32)}/stream`;
    const headers = Object.entries(signRequest(secret, 'GET', stream, '')).map(([name, value]) => `${name}: ${value}\r\n`).join('');
    const pipelined = 'GET /w1/hello HTTP/1.1\r\nHost: x\r\n\r\n' +
      `GET ${stream} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n${headers}\r\n`;
    for (let attempt = 0; attempt < 10; attempt++) {
      await new Promise<void>((resolve) => {
        const connection = connect(socket(), () => connection.write(pipelined));
        connection.on('data', () => undefined);
        connection.on('error', () => resolve());
        connection.on('close', () => resolve());
        setTimeout(() => connection.destroy(), 500);
      });
    }
    expect(worker.running).toBe(true);
    const client = new WorkerClient({ endpoint: { socketPath: socket() }, secret });
    await expect(client.hello()).resolves.toMatchObject({ protocol_version: 2 });
  });

  it('serves its image state and versions\' manifests (null for a version it lacks), and closes a layer build whose start does not fit', async () => {
    const client = await adopted();
    const images = new RemoteImages(client);
    const current = await images.refresh('minimal');
    expect(images.currentImage('minimal')).toEqual(current);
    expect(['building', 'ready', 'failed']).toContain(images.imageBuildState('minimal').state);
    expect(await images.imageManifest({ profile: 'minimal', version: 'v1999.01.01-00000000', artifactKey: 'x' })).toBeNull();
    // A version outside the protocol's alphabet is never asked for.
    expect(await images.imageManifest({ profile: 'minimal', version: '../etc', artifactKey: 'x' })).toBeNull();
    const closed = await client.upgrade('/w1/layers/build', 'BuildLayer', (ws) => new Promise<number>((resolve) => {
      ws.on('close', (code: number) => resolve(code));
      ws.send(JSON.stringify({ base: { profile: 'minimal', version: 'v1', artifact_key: 'k' }, key: '../../escape', packages: ['hello'], disk_mib: 4096 }));
    }));
    expect(await closed).toBe(1008);
    expect(worker.running).toBe(true);
  });

  it('stops on SIGTERM', async () => {
    worker.signal('SIGTERM');
    expect((await worker.waitExit(30_000)).code).toBe(0);
    const client = new WorkerClient({ endpoint: { socketPath: socket() }, secret: readWorkerSecret(join(dataDir, 'worker.secret'), { create: false }), timeoutMs: 2000 });
    const away = await client.hello().catch((error: unknown) => error);
    expect(away).toBeInstanceOf(WorkerUnreachableError);
    // Its message may reach API users (a lost agent link): the code, not the socket's path.
    expect((away as Error).message).not.toContain(dataDir);
    expect((away as Error).message).toMatch(/ENOENT|ECONNREFUSED/);
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

  const client = () => new WorkerClient({ endpoint: { socketPath: join(dir, 'w.sock') }, secret, timeoutMs: 1500 });
  const hello = JSON.stringify({
    protocol_version: 2, worker_version: '0.1.0', started_at: new Date().toISOString(), accelerator: 'tcg', tls_fingerprint: null, offer: { vcpu: 4, memory_mib: 4096, disk_mib: 100000 }, epoch: 1, adoption: { state: 'done', seconds: 3 },
  });

  it('takes a well-formed signed answer (the stand-in is faithful)', async () => {
    behaviour = () => ({ status: 200, body: hello });
    await expect(client().hello()).resolves.toMatchObject({ protocol_version: 2 });
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
    ['an offer past what a database column holds', () => ({ status: 200, body: JSON.stringify({ ...JSON.parse(hello), offer: { vcpu: 4, memory_mib: 2 ** 31, disk_mib: 1 } }) })],
    ['a certificate fingerprint of another form', () => ({ status: 200, body: JSON.stringify({ ...JSON.parse(hello), tls_fingerprint: 'sha256:abc' }) })],
  ])('refuses an answer that is %s', async (_what, answer) => {
    behaviour = answer;
    await expect(client().hello()).rejects.toBeInstanceOf(WorkerProtocolError);
  });

  const manifest = {
    version: 'v2026.11.27-0123abcd', profile: 'minimal', description: 'd', created_at: '2026-11-27T00:00:00.000Z', kernel: '6.1.0-1-cloud-amd64',
    kernel_cmdline: 'root=/dev/vda', packages: ['hello=2.10-3'], sizes: { disk_virtual: 704 * 1048576 }, sha256: { 'disk.qcow2': 'a'.repeat(64) },
    recipe_hash: 'r', agent: { guest_path: '/usr/local/lib/kiste-agent.js', port: 'org.kiste.agent', sha256: 'b'.repeat(64) },
    disk: { format: 'qcow2', filesystem: 'ext4', device: '/dev/vda', grows_on_boot: true }, suite: 'bookworm', display: null, release_notes: ['first'],
  };

  it('takes a manifest that fits, asks for it once, and refuses one that does not fit', async () => {
    let asked = 0;
    behaviour = () => (asked++, { status: 200, body: JSON.stringify({ manifest }) });
    const images = new RemoteImages(client());
    const image = { profile: 'minimal' as const, version: manifest.version, artifactKey: 'x' };
    await expect(images.imageManifest(image)).resolves.toMatchObject({ version: manifest.version, packages: ['hello=2.10-3'], release_notes: ['first'] });
    await expect(images.imageManifest(image)).resolves.toMatchObject({ version: manifest.version });
    expect(asked).toBe(1); // a version never changes: kept
    for (const bad of [
      { ...manifest, shell: 'rm -rf /' },
      { ...manifest, packages: Array.from({ length: 20_001 }, (_, i) => `p${i}=1`) },
      { ...manifest, release_notes: ['x'.repeat(2001)] },
      { ...manifest, sizes: { disk_virtual: -1 } },
      { ...manifest, version: 'v2026.11.27-ffffffff' }, // another version's
    ]) {
      behaviour = () => ({ status: 200, body: JSON.stringify({ manifest: bad }) });
      await expect(new RemoteImages(client()).imageManifest(image)).rejects.toBeInstanceOf(WorkerProtocolError);
    }
  });

  it('keeps the image state it reads, its step without control characters, and refuses a state that does not fit', async () => {
    behaviour = () => ({ status: 200, body: JSON.stringify({ current: null, build: { state: 'building', step: '3/9 rootfs\u001b[2J — unpacking', error: null } }) });
    const images = new RemoteImages(client());
    expect(images.imageBuildState('minimal')).toEqual({ state: 'building', step: null, error: null });
    await expect(images.refresh('minimal')).resolves.toBeNull();
    expect(images.imageBuildState('minimal').step).toBe('3/9 rootfs\uFFFD[2J — unpacking');
    behaviour = () => ({ status: 200, body: JSON.stringify({ current: null, build: { state: 'done', step: null, error: null } }) });
    await expect(images.refresh('minimal')).rejects.toBeInstanceOf(WorkerProtocolError);
    expect(images.imageBuildState('minimal').state).toBe('building'); // the last state that fitted
  });

  it('refuses an endless answer once it passes the bound, and a silent worker after the timeout', async () => {
    behaviour = () => 'flood';
    await expect(client().hello()).rejects.toBeInstanceOf(WorkerProtocolError);
    behaviour = () => 'hang';
    // Late, not away: the call fails as such (an operation does not wait for a return that never comes).
    await expect(client().hello()).rejects.toBeInstanceOf(WorkerTimeoutError);
    // A byte now and then keeps a socket from going idle; the deadline is for the whole answer.
    behaviour = () => 'trickle';
    const started = Date.now();
    await expect(client().hello()).rejects.toBeInstanceOf(WorkerTimeoutError);
    expect(Date.now() - started).toBeLessThan(5000);
  });
});

describe('a worker whose streams do not fit', () => {
  const secret = randomBytes(32);
  const EXEC = 'b'.repeat(32);
  let dir: string;
  let server: Server;
  let wss: WebSocketServer;
  /** What the stand-in does once a stream is open, and whether it signs its 101. */
  let stream: { signed: boolean; send: (ws: WebSocket) => void };

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'kiste-bad-streams-'));
    const nonces = new WeakMap<IncomingMessage, string>();
    wss = new WebSocketServer({ noServer: true });
    wss.on('headers', (headers, req) => {
      if (stream.signed) headers.push(`${SIGNATURE_HEADERS.signature}: ${signAnswer(secret, 101, nonces.get(req)!, '')}`);
    });
    server = createServer((req, res) => {
      // StartExec, faithfully: the stream is where this stand-in goes wrong.
      const body = JSON.stringify({ exec: EXEC, pid: 42 });
      res.writeHead(200, { 'content-type': 'application/json', [SIGNATURE_HEADERS.signature]: signAnswer(secret, 200, String(req.headers[SIGNATURE_HEADERS.nonce]), body) });
      res.end(body);
    });
    server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      nonces.set(req, String(req.headers[SIGNATURE_HEADERS.nonce]));
      wss.handleUpgrade(req, socket, head, (ws) => stream.send(ws));
    });
    await new Promise<void>((resolve) => server.listen(join(dir, 'w.sock'), resolve));
  });
  afterAll(async () => {
    for (const ws of wss.clients) ws.terminate();
    wss.close();
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
    rmSync(dir, { recursive: true, force: true });
  });

  const agent = () => new RemoteGuestAgents(new WorkerClient({ endpoint: { socketPath: join(dir, 'w.sock') }, secret, timeoutMs: 1500 })).agent('machine-1');
  const exit = { channel: 3, status: 'exited', exit_code: 0, signal: null, duration_ms: 5, stdout_bytes: 2, stderr_bytes: 0 };

  it('reads a faithful stream: output in order, then the exit (the stand-in is faithful)', async () => {
    stream = { signed: true, send: (ws) => { ws.send(Buffer.from('\x01h')); ws.send(Buffer.from('\x02i')); ws.send(JSON.stringify({ type: 'exit', exit })); ws.close(); } };
    const exec = await agent().exec({ argv: ['x'] });
    const chunks: string[] = [];
    for await (const chunk of exec) chunks.push(`${chunk.stream}:${chunk.data.toString()}`);
    expect(chunks).toEqual(['stdout:h', 'stderr:i']);
    await expect(exec.exit).resolves.toEqual(exit);
  });

  it('refuses a stream whose 101 is not signed', async () => {
    stream = { signed: false, send: () => undefined };
    await expect(agent().exec({ argv: ['x'] })).rejects.toMatchObject({ name: 'AgentCallError', code: 'bad_response', message: expect.stringContaining('not signed') });
  });

  it.each([
    ['output of no stream', (ws: WebSocket) => ws.send(Buffer.from('\x07zz'))],
    ['an end that is not JSON', (ws: WebSocket) => ws.send('{"type":')],
    ['an end of no known shape', (ws: WebSocket) => ws.send(JSON.stringify({ type: 'exit', exit, shell: 'rm -rf /' }))],
    ['an exit that does not fit the agent\'s shape', (ws: WebSocket) => ws.send(JSON.stringify({ type: 'exit', exit: { ...exit, status: 'gone\u001b[2J' } }))],
    ['an error with a code the protocol lacks', (ws: WebSocket) => ws.send(JSON.stringify({ type: 'error', code: 'pwned', message: 'x' }))],
    ['output after the end', (ws: WebSocket) => { ws.send(JSON.stringify({ type: 'error', code: 'timeout', message: 'late' })); ws.send(Buffer.from('\x01x')); }],
  ])('gives the command up on %s; the caller gets an AgentCallError, never a throw', async (_what, send) => {
    stream = { signed: true, send };
    const exec = await agent().exec({ argv: ['x'] });
    const error = await exec.exit.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AgentCallError);
    expect(['bad_response', 'timeout']).toContain((error as AgentCallError).code);
    await expect((async () => { for await (const _chunk of exec) { /* drained */ } })()).rejects.toBeInstanceOf(AgentCallError);
  });

  it('ends a TCP stream that carries a text message with an error, before any of it is read', async () => {
    stream = { signed: true, send: (ws) => ws.send('not bytes') };
    // The message may come with the 101 (the open fails) or after it (the stream ends with the error).
    const outcome = await agent().openTcp(22).then(
      (tcp) =>
        new Promise<string>((resolve) => {
          tcp.on('data', (data: Buffer) => resolve(`data ${data.toString()}`));
          tcp.on('close', () => resolve(`closed: ${tcp.errored?.message}`));
        }),
      (error: AgentCallError) => `refused: ${error.code} ${error.message}`,
    );
    expect(outcome).toMatch(/^(closed: |refused: bad_response .*)a text message on a byte stream$/);
  });

  it('closes a stream the worker keeps open after its end', async () => {
    let closed!: Promise<number>;
    stream = {
      signed: true,
      send: (ws) => {
        closed = new Promise((resolve) => ws.on('close', (code: number) => resolve(code)));
        ws.send(JSON.stringify({ type: 'exit', exit }));
      },
    };
    const exec = await agent().exec({ argv: ['x'] });
    await expect(exec.exit).resolves.toEqual(exit);
    await expect(closed).resolves.toBe(1000);
  });

  describe('a layer build', () => {
    const images = () => new RemoteImages(new WorkerClient({ endpoint: { socketPath: join(dir, 'w.sock') }, secret, timeoutMs: 1500 }));
    const base = { profile: 'minimal' as const, version: 'v2026.11.27-0123abcd', artifactKey: 'base' };
    function request(signal?: AbortSignal): LayerBuildRequest & { progress: [string, number][]; log: string[] } {
      const progress: [string, number][] = [];
      const log: string[] = [];
      return { base, key: 'f'.repeat(64), packages: ['hello'], diskMib: 2752, signal, progress, log, onProgress: (step, percent) => progress.push([step, percent]), onLog: (text) => log.push(text) };
    }
    /** The stand-in's side: what it was asked, then `script` (when the start came). */
    function builds(script: (ws: WebSocket) => void): { start: Promise<unknown>; closed: Promise<number> } {
      let start!: (value: unknown) => void;
      let closed!: (code: number) => void;
      const seen = { start: new Promise((resolve) => (start = resolve)), closed: new Promise<number>((resolve) => (closed = resolve)) };
      stream = {
        signed: true,
        send: (ws) => {
          ws.on('close', (code: number) => closed(code));
          ws.once('message', (data) => {
            start(JSON.parse(String(data)));
            script(ws);
          });
        },
      };
      return seen;
    }

    it('sends the request, passes progress and log on, and takes the outcome without the layer\'s path (the stand-in is faithful)', async () => {
      const seen = builds((ws) => {
        ws.send(JSON.stringify({ type: 'progress', step: 'booting builder', percent: 5 }));
        ws.send(JSON.stringify({ type: 'log', text: 'Setting up hello\n' }));
        ws.send(JSON.stringify({ type: 'built', packages: ['hello=2.10-3'], virtual_bytes: 2752 * 1048576 }));
        ws.close();
      });
      const asked = request();
      await expect(images().buildLayer(asked)).resolves.toEqual({ packages: ['hello=2.10-3'], virtualBytes: 2752 * 1048576 });
      expect(await seen.start).toEqual({ base: { profile: 'minimal', version: base.version, artifact_key: 'base', layer: null }, key: 'f'.repeat(64), packages: ['hello'], disk_mib: 2752 });
      expect(asked.progress).toEqual([['booting builder', 5]]);
      expect(asked.log).toEqual(['Setting up hello\n']);
    });

    it.each([
      ['progress past 100 percent', (ws: WebSocket) => ws.send(JSON.stringify({ type: 'progress', step: 'x', percent: 150 }))],
      ['progress with a field the protocol lacks', (ws: WebSocket) => ws.send(JSON.stringify({ type: 'progress', step: 'x', percent: 5, shell: 'rm -rf /' }))],
      ['a log piece over its bound', (ws: WebSocket) => ws.send(JSON.stringify({ type: 'log', text: 'x'.repeat(16_385) }))],
      ['a message that is not JSON', (ws: WebSocket) => ws.send('{"type":')],
      ['a binary message', (ws: WebSocket) => ws.send(Buffer.from('built'))],
      ['an outcome with a package name that is no Debian name', (ws: WebSocket) => ws.send(JSON.stringify({ type: 'built', packages: ['$(reboot)=1'], virtual_bytes: 1 }))],
    ])('fails the build on %s, as a WorkerProtocolError, and closes the stream (the worker gives the build up)', async (_what, send) => {
      const seen = builds(send);
      const asked = request();
      await expect(images().buildLayer(asked)).rejects.toBeInstanceOf(WorkerProtocolError);
      expect(await seen.closed).toBe(1000);
      expect(asked.progress).toEqual([]);
    });

    it('fails with the worker\'s reason, and as a lost link when the stream ends before the outcome', async () => {
      builds((ws) => ws.send(JSON.stringify({ type: 'failed', message: 'apt-get failed (exit code 100)', cancelled: false })));
      await expect(images().buildLayer(request())).rejects.toEqual(expect.objectContaining({ constructor: WorkerCallError, message: 'apt-get failed (exit code 100)' }));
      builds((ws) => ws.terminate());
      await expect(images().buildLayer(request())).rejects.toBeInstanceOf(WorkerUnreachableError);
    });

    it('closes the stream when the caller aborts, and rejects as cancelled', async () => {
      const abort = new AbortController();
      const seen = builds((ws) => ws.send(JSON.stringify({ type: 'progress', step: 'booting builder', percent: 5 })));
      const asked = request(abort.signal);
      asked.onProgress = () => abort.abort();
      await expect(images().buildLayer(asked)).rejects.toBeInstanceOf(LayerBuildCancelled);
      expect(await seen.closed).toBe(1000);
    });
  });

  it('a stream the worker closes before the end is a lost link (retryable)', async () => {
    stream = { signed: true, send: (ws) => { ws.send(Buffer.from('\x01partial')); ws.terminate(); } };
    const exec = await agent().exec({ argv: ['x'] });
    await expect(exec.exit).rejects.toMatchObject({ code: 'disconnected', retryable: true });
  });
});
