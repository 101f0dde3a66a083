// A worker on another host (issue 22): kiste-worker joined with a token and listening with TLS. The
// secret it signs with is derived from the token (the same on both sides, never sent) and written
// once, 0600; its certificate is made once and pinned by the control plane on first contact, which
// the worker's signed hello confirms: a man in the middle presenting his own certificate is found
// out and nothing is pinned. A client that pins another certificate, or signs with another secret,
// gets nothing from it; a second join with another token is refused while the first one's secret
// is there.
import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { createServer as createTlsServer, connect as tlsConnect, type Server as TlsServer } from 'node:tls';
import { tmpdir } from 'node:os';
import { request as httpsRequest } from 'node:https';
import { join } from 'node:path';
import { introduceWorker, WorkerClient, WorkerProtocolError, WorkerUnreachableError } from '../../src/compute/worker-client';
import { newJoinToken, workerSecretOf } from '../../src/protocol/worker-join';
import { TEST_IMAGE_DIR } from '../support/images';
import { freePort, ServiceProcess } from '../support/service-process';

jest.setTimeout(90_000);

/** A self-signed certificate and key (PEM) made with openssl, as the worker makes its own. */
function selfSigned(dir: string): { cert: string; key: string } {
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1', '-subj', '/CN=someone-else',
    '-keyout', join(dir, 'other-key.pem'), '-out', join(dir, 'other-cert.pem')], { stdio: 'ignore' });
  return { cert: readFileSync(join(dir, 'other-cert.pem'), 'utf8'), key: readFileSync(join(dir, 'other-key.pem'), 'utf8') };
}

describe('a worker joined with a token, over TLS', () => {
  let dataDir: string;
  let worker: ServiceProcess;
  let port: number;
  let address: string;
  const token = newJoinToken();
  const secret = workerSecretOf(token);
  const workerEnv = (joinToken: string) => ({
    KISTE_DATA_DIR: dataDir, KISTE_IMAGE_DIR: TEST_IMAGE_DIR, KISTE_ACCELERATOR: 'tcg',
    KISTE_WORKER_LISTEN: `127.0.0.1:${port}`, KISTE_WORKER_JOIN_TOKEN: joinToken,
    KISTE_WORKER_VCPUS: '6', KISTE_WORKER_MEMORY_MIB: '3000', KISTE_WORKER_DISK_MIB: '40000',
  });

  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'kiste-tls-worker-'));
    port = await freePort();
    address = `https://127.0.0.1:${port}`;
    worker = new ServiceProcess(workerEnv(token), { entry: 'src/worker/main.ts', ready: 'kiste-worker is listening with TLS' });
    await worker.listening();
  });
  afterAll(async () => {
    await worker?.ensureStopped();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('derives its secret from the token, keeps it and its TLS key to itself', () => {
    expect(readFileSync(join(dataDir, 'worker.secret'), 'utf8').trim()).toBe(secret.toString('hex'));
    expect(statSync(join(dataDir, 'worker.secret')).mode & 0o777).toBe(0o600);
    expect(statSync(join(dataDir, 'worker-tls')).mode & 0o777).toBe(0o700);
    expect(statSync(join(dataDir, 'worker-tls', 'key.pem')).mode & 0o077).toBe(0);
    expect(() => workerSecretOf('kwj_short')).toThrow(/43 base64url/);
    expect(workerSecretOf(token).equals(secret)).toBe(true);
  });

  it('is pinned on first contact, and its signed hello names the certificate and what it offers', async () => {
    const { hello, certificatePem } = await introduceWorker(address, secret);
    const fingerprint = new X509Certificate(certificatePem).fingerprint256;
    expect(hello.tls_fingerprint).toBe(fingerprint);
    expect(worker.output).toContain(fingerprint); // the operator can compare it with the worker's log
    expect(hello.offer).toEqual({ vcpu: 6, memory_mib: 3000, disk_mib: 40000 });
    const pinned = new WorkerClient({ endpoint: { address, certificatePem }, secret });
    expect((await pinned.checks()).accelerator).toBe('tcg');
  });

  it('gives nothing to a client that pins another certificate or signs with another secret', async () => {
    const { certificatePem } = await introduceWorker(address, secret);
    const other = selfSigned(dataDir);
    await expect(new WorkerClient({ endpoint: { address, certificatePem: other.cert }, secret, timeoutMs: 3000 }).hello()).rejects.toBeInstanceOf(WorkerUnreachableError);
    await expect(new WorkerClient({ endpoint: { address, certificatePem }, secret: workerSecretOf(newJoinToken()), timeoutMs: 3000 }).hello()).rejects.toBeInstanceOf(WorkerProtocolError);
  });

  it('answers a stranger 401 without reading what he sends, and closes the connection', async () => {
    const { certificatePem } = await introduceWorker(address, secret);
    const send = (body: 'none' | 'endless') => new Promise<{ status: number; connection?: string; written: number }>((resolve) => {
      let written = 0;
      const req = httpsRequest({ host: '127.0.0.1', port, method: 'POST', path: '/w1/machines/x/create', ca: certificatePem, checkServerIdentity: () => undefined, headers: { 'content-type': 'application/json' } }, (res) => {
        res.resume();
        resolve({ status: res.statusCode ?? 0, connection: res.headers.connection, written });
      });
      // The worker closes the connection once it answered: a client still sending may see that first (status 0).
      req.on('error', () => resolve({ status: 0, written }));
      if (body === 'none') return void req.end();
      const chunk = Buffer.alloc(64 * 1024, 120);
      const pump = () => {
        if (written >= 64 * 1024 * 1024 || req.destroyed) return void req.end();
        written += chunk.length;
        if (req.write(chunk)) setImmediate(pump);
        else req.once('drain', pump);
      };
      pump();
    });
    expect(await send('none')).toEqual({ status: 401, connection: 'close', written: 0 });
    // Far more than any request may hold: the worker answers and closes long before it is all sent.
    const endless = await send('endless');
    expect([401, 0]).toContain(endless.status);
    expect(endless.written).toBeLessThan(64 * 1024 * 1024);
  });

  it('finds out a man in the middle who presents his own certificate: nothing is pinned', async () => {
    const other = selfSigned(dataDir);
    // He ends the TLS of the control plane with his certificate and relays every byte to the worker.
    const relay: TlsServer = createTlsServer({ cert: other.cert, key: other.key }, (client) => {
      const upstream = tlsConnect({ host: '127.0.0.1', port, rejectUnauthorized: false }, () => {
        client.pipe(upstream);
        upstream.pipe(client);
      });
      upstream.on('error', () => client.destroy());
      client.on('error', () => upstream.destroy());
    });
    const relayPort = await freePort();
    await new Promise<void>((resolve) => relay.listen(relayPort, '127.0.0.1', resolve));
    try {
      await expect(introduceWorker(`https://127.0.0.1:${relayPort}`, secret)).rejects.toThrow(/another TLS certificate than the one presented/);
    } finally {
      relay.close();
    }
  });

  it('takes connections only from the addresses KISTE_WORKER_ALLOW_FROM names: others are closed before a handshake', async () => {
    const otherDir = mkdtempSync(join(tmpdir(), 'kiste-tls-worker-allow-'));
    const otherPort = await freePort();
    const start = (allowFrom: string) => new ServiceProcess(
      { ...workerEnv(token), KISTE_DATA_DIR: otherDir, KISTE_WORKER_LISTEN: `127.0.0.1:${otherPort}`, KISTE_WORKER_ALLOW_FROM: allowFrom },
      { entry: 'src/worker/main.ts', ready: 'kiste-worker is listening with TLS' },
    );
    let guarded = start('10.99.0.0/16, 192.0.2.7');
    try {
      await guarded.listening();
      await expect(introduceWorker(`https://127.0.0.1:${otherPort}`, secret)).rejects.toBeInstanceOf(WorkerUnreachableError);
      await expect(new Promise((resolve) => {
        const socket = tlsConnect({ host: '127.0.0.1', port: otherPort, rejectUnauthorized: false });
        socket.on('secureConnect', () => resolve('handshake'));
        socket.on('error', () => resolve('closed'));
        socket.on('close', () => resolve('closed'));
      })).resolves.toBe('closed');
      expect(guarded.output).toContain('a connection from an address KISTE_WORKER_ALLOW_FROM does not name');
      await guarded.ensureStopped();
      guarded = start('127.0.0.0/8');
      await guarded.listening();
      expect((await introduceWorker(`https://127.0.0.1:${otherPort}`, secret)).hello.offer).toEqual({ vcpu: 6, memory_mib: 3000, disk_mib: 40000 });
    } finally {
      await guarded.ensureStopped();
      rmSync(otherDir, { recursive: true, force: true });
    }
    const refused = new ServiceProcess({ ...workerEnv(token), KISTE_DATA_DIR: otherDir, KISTE_WORKER_ALLOW_FROM: '10.0.0.0/33' }, { entry: 'src/worker/main.ts', ready: 'kiste-worker is listening' });
    expect((await refused.waitExit(30_000)).code).toBe(2);
    expect(refused.output).toMatch(/KISTE_WORKER_ALLOW_FROM must be comma-separated addresses or CIDRs/);
  });

  it('refuses a join with another token while the first one\'s secret is there', async () => {
    await worker.ensureStopped();
    const again = new ServiceProcess(workerEnv(newJoinToken()), { entry: 'src/worker/main.ts', ready: 'kiste-worker is listening with TLS' });
    const exit = await again.waitExit(30_000);
    expect(exit.code).toBe(2);
    expect(again.output).toMatch(/holds the secret of an earlier join; remove it to join with this token/);
  });
});
