// The service as a process: started from source with tsx (no build), on a free loopback port and a
// fresh data dir / database. First-account bootstrap, clean SIGTERM shutdown (leaving no helper
// process: the watch of the machines' network rules runs from start and ends with it), survival of
// kill -9, and the refusal of plain HTTP on a non-loopback address.
import { Agent } from 'node:http';
import { connect, createServer } from 'node:net';
import path from 'node:path';
import request from 'supertest';
import { openDatabase } from '../../src/db/database';
import { pollUntil } from '../../src/compute/qemu/wait';
import { childrenNamed, processLive } from '../support/child-processes';
import { checkContract } from '../support/contract';
import { freshDatabaseUrl, FreshDatabase } from '../support/database';
import { freePort, ServiceProcess } from '../support/service-process';
import { TEST_IMAGE_DIR } from '../support/images';

jest.setTimeout(90_000);

const ADMIN_EMAIL = 'admin@example.com';
const ADMIN_PASSWORD = 'a long admin password 42';

/** A contract-checked supertest client against a running service. */
function client(url: string) {
  const agent = request(url);
  return {
    get: (p: string) => agent.get(p).expect(checkContract),
    post: (p: string) => agent.post(p).expect(checkContract),
  };
}

async function login(url: string, email = ADMIN_EMAIL, password = ADMIN_PASSWORD): Promise<{ cookie: string; csrf: string }> {
  const res = await client(url).post('/v1/auth/login').send({ email, password }).expect(200);
  const cookies = res.headers['set-cookie'] as unknown as string[];
  const session = cookies.find((line) => line.startsWith('kiste_session='))!.split(';')[0]!;
  expect(res.body.authenticated).toBe(true);
  expect(res.body.user.email).toBe(email);
  return { cookie: session, csrf: res.body.csrf };
}

describe('the service process', () => {
  let fresh: FreshDatabase;
  let port: number;
  let started: ServiceProcess[] = [];

  beforeEach(async () => {
    fresh = await freshDatabaseUrl();
    port = await freePort();
  });
  afterEach(async () => {
    for (const service of started) await service.ensureStopped();
    started = [];
    await fresh.cleanup();
  });

  function start(extra: Record<string, string> = {}): ServiceProcess {
    const env: Record<string, string> = {
      KISTE_LISTEN: `127.0.0.1:${port}`,
      KISTE_DATA_DIR: fresh.dataDir,
      KISTE_IMAGE_DIR: TEST_IMAGE_DIR, // the shared test image: no image build per start
      KISTE_IMAGE_PROFILE: 'minimal', // never the desktop image (the default): its build takes many minutes
      KISTE_ADMIN_EMAIL: ADMIN_EMAIL,
      KISTE_ADMIN_PASSWORD: ADMIN_PASSWORD,
      ...(fresh.url ? { KISTE_DATABASE_URL: fresh.url } : {}),
      ...extra,
    };
    const service = new ServiceProcess(env);
    started.push(service);
    return service;
  }

  async function stop(service: ServiceProcess): Promise<void> {
    service.signal('SIGTERM');
    const exit = await service.waitExit(20_000);
    expect({ code: exit.code, signal: exit.signal }).toEqual({ code: 0, signal: null });
  }

  it('creates the first account from KISTE_ADMIN_EMAIL once; a second start creates no other', async () => {
    const url = `http://127.0.0.1:${port}`;
    const first = start();
    await first.listening();
    expect(first.output).toContain('created the first account from KISTE_ADMIN_EMAIL');
    await login(url);
    await stop(first);

    const second = start({ KISTE_ADMIN_EMAIL: 'someone-else@example.com', KISTE_ADMIN_PASSWORD: 'another password 123' });
    await second.listening();
    expect(second.output).not.toContain('created the first account');
    await login(url); // the first account still signs in
    await client(url).post('/v1/auth/login').send({ email: 'someone-else@example.com', password: 'another password 123' }).expect(401);
    await stop(second);

    const database = await openDatabase({ url: fresh.url, dataDir: fresh.dataDir });
    try {
      const accounts = await database.prisma.account.findMany({ select: { email: true } });
      expect(accounts.map((account) => account.email)).toEqual([ADMIN_EMAIL]);
    } finally {
      await database.close();
    }
  });

  it('exits with code 0 within 20 s on SIGTERM, also with an idle keep-alive connection open, and logs it', async () => {
    const url = `http://127.0.0.1:${port}`;
    const service = start();
    await service.listening();
    const agent = new Agent({ keepAlive: true });
    const monitors = childrenNamed(service.child.pid!, 'nft'); // `nft monitor`, watching the machines' network rules
    expect(monitors.length).toBeGreaterThanOrEqual(1);
    try {
      await request(url).get('/healthz').agent(agent).expect(checkContract).expect(200);
      expect(agent.freeSockets && Object.keys(agent.freeSockets).length).toBeGreaterThan(0);
      service.signal('SIGTERM');
      const exit = await service.waitExit(20_000);
      expect({ code: exit.code, signal: exit.signal }).toEqual({ code: 0, signal: null });
      expect(exit.ms).toBeLessThan(20_000);
    } finally {
      agent.destroy();
    }
    expect(service.output).toMatch(/"signal":"SIGTERM"[^\n]*"msg":"shutting down"/);
    expect(service.output).not.toMatch(/shutdown (failed|took longer)/);
    expect(await pollUntil(() => (monitors.some(processLive) ? undefined : true), 3000)).toBe(true);
    // the port is free again
    const again = await new Promise<boolean>((resolve) => {
      const probe = createServer();
      probe.once('error', () => resolve(false));
      probe.listen(port, '127.0.0.1', () => probe.close(() => resolve(true)));
    });
    expect(again).toBe(true);
  });

  it('drops a WebSocket upgrade sent pipelined behind a plain request, and answers on (Node throws from its upgrade listener otherwise)', async () => {
    const service = start();
    await service.listening();
    const pipelined = 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n' +
      'GET /v1/instances/x/ssh HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n';
    for (let attempt = 0; attempt < 20; attempt++) {
      await new Promise<void>((resolve) => {
        const socket = connect(port, '127.0.0.1', () => socket.write(pipelined));
        socket.on('data', () => undefined);
        socket.on('error', () => resolve());
        socket.on('close', () => resolve());
        setTimeout(() => socket.destroy(), 500);
      });
    }
    expect({ running: service.running, output: service.running ? '' : service.output.slice(-2000) }).toEqual({ running: true, output: '' });
    await client(`http://127.0.0.1:${port}`).get('/healthz').expect(200);
    await stop(service);
  });

  it('keeps the account and an API key made before a kill -9', async () => {
    const url = `http://127.0.0.1:${port}`;
    const first = start();
    await first.listening();
    const browser = await login(url);
    const created = await client(url)
      .post('/v1/api-tokens')
      .set('cookie', browser.cookie)
      .set('x-csrf-token', browser.csrf)
      .send({ label: 'before the crash', expires_in_seconds: 3600 })
      .expect(200);
    const apiKey: string = created.body.token;
    const me = await client(url).get('/v1/me').set('authorization', `Bearer ${apiKey}`).expect(200);

    first.killHard();
    const killed = await first.waitExit(10_000);
    expect(killed.signal).toBe('SIGKILL');
    expect(first.output).not.toContain('shutting down');

    const second = start();
    await second.listening();
    const after = await client(url).get('/v1/me').set('authorization', `Bearer ${apiKey}`).expect(200);
    expect(after.body).toEqual(me.body);
    const keys = await client(url).get('/v1/api-tokens').set('authorization', `Bearer ${apiKey}`).expect(200);
    const listed = (Array.isArray(keys.body) ? keys.body : keys.body.data) as Array<{ id: string; label: string }>;
    expect(listed.map((key) => key.id)).toContain(created.body.data.id);
    await login(url); // password sign-in still works
    await stop(second);
  });

  it('refuses plain HTTP on a non-loopback address with exit code 2 and a clear message', async () => {
    const service = start({ KISTE_LISTEN: `0.0.0.0:${port}` });
    const exit = await service.waitExit(60_000);
    expect(exit.code).toBe(2);
    expect(service.output).toContain('refusing plain HTTP on 0.0.0.0');
    expect(service.output).toMatch(/KISTE_TLS_CERT/);
    expect(service.output).toMatch(/KISTE_ALLOW_PLAIN_HTTP/);
    expect(service.output).not.toContain('kiste is listening');
  });

  it('starts on a non-loopback address with KISTE_ALLOW_PLAIN_HTTP=1', async () => {
    const service = start({ KISTE_LISTEN: `0.0.0.0:${port}`, KISTE_ALLOW_PLAIN_HTTP: '1' });
    await service.listening();
    const health = await client(`http://127.0.0.1:${port}`).get('/healthz').expect(200);
    expect(health.body.status).toBe('ok');
    await stop(service);
  });
});
