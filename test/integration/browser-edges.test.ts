// Browser edges: WebSocket handshakes (terminal, SSH tunnel, recovery console) from another site's
// page are refused before the upgrade with the error envelope (403 A15), while the console's and
// the desktop viewer's pages, and clients outside a browser (no Origin), get through to the
// endpoint's own checks; with HTTPS the cookies are __Host- (only those are read) and every answer
// carries HSTS, while plain HTTP on loopback is as before; TURN credentials live ten minutes and a
// viewer's session renew hands out fresh ones. Real WebSocket clients (ws) against the listening
// app; instance rows without a VM and a stand-in screen for the recovery console.
import { createHmac } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { PassThrough } from 'node:stream';
import WebSocket from 'ws';
import type { MachineDisplay } from '../../src/compute/machine-display';
import { loadConfig } from '../../src/config';
import { checkWebSocketOrigin, HSTS } from '../../src/http/browser-edges';
import { serveWebSockets } from '../../src/http/websocket';
import { apiKeyFor, bearer, browserFor, createAccount, startTestService, TEST_PASSWORD, TestService } from '../support/harness';
import { insertInstance } from '../support/instance-rows';
import { ManualClock } from '../support/manual-clock';

const CONSOLE = 'https://console.example.test';
const DESKTOP = 'https://desktop.example.test';

/** What a WebSocket handshake got: opened (101), or the HTTP answer with its JSON body. */
function handshake(url: string, headers: Record<string, string>, origin?: string): Promise<{ opened: true } | { status: number; body: { error: { code: string; message: string } } }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers, ...(origin === undefined ? {} : { origin }) });
    ws.on('open', () => {
      ws.close();
      resolve({ opened: true });
    });
    ws.on('unexpected-response', (_req, res) => {
      let text = '';
      res.on('data', (chunk: Buffer) => (text += chunk.toString()));
      res.on('end', () => {
        try {
          resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) });
        } catch (error) {
          reject(new Error(`a refusal without the error envelope (${res.statusCode}): ${text}`, { cause: error }));
        }
      });
    });
    ws.on('error', (error) => reject(error));
  });
}

const codeOf = (outcome: Awaited<ReturnType<typeof handshake>>) => ('opened' in outcome ? 'opened' : outcome.body.error.code);

describe('WebSocket origins', () => {
  let t: TestService;
  let server: Server;
  let sockets: { close(): void };
  let base: string;
  const display: MachineDisplay = {
    state: async () => 'ready',
    connect: async () => new PassThrough(),
    video: async () => {
      throw new Error('no screen in this test');
    },
    resize: async (_id, size) => size,
    readClipboard: async () => '',
    writeClipboard: async () => undefined,
  };

  beforeAll(async () => {
    t = await startTestService({ machineDisplay: display, env: { KISTE_CONSOLE_URL: CONSOLE, KISTE_DESKTOP_URL: DESKTOP } });
    server = t.app.listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    sockets = serveWebSockets(server, t.app);
    base = `ws://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    sockets.close();
    await new Promise((resolve) => server.close(resolve));
    await t.close();
  });

  const foreign = ['https://evil.example', 'https://svc.console.example.test', 'http://console.example.test', 'null'];

  test('terminal: a foreign page is refused (403 A15, the envelope); the console, and a client without Origin, reach the capability check', async () => {
    const url = `${base}/v1/terminal/connect?token=kiste_term_unknown`;
    for (const origin of foreign) {
      const refused = await handshake(url, {}, origin);
      expect(refused).toMatchObject({ status: 403, body: { error: { code: 'A15', message: expect.stringContaining('(code: A15)') } } });
    }
    expect(codeOf(await handshake(url, {}))).toBe('D04');
    expect(codeOf(await handshake(url, {}, CONSOLE))).toBe('D04');
    expect(codeOf(await handshake(url, {}, DESKTOP))).toBe('D04');
  });

  test('SSH tunnel: refused from a foreign page before the credential is even looked at; the CLI (no Origin) and the console get the endpoint\'s answer', async () => {
    const key = await apiKeyFor(t, await createAccount(t));
    const url = `${base}/v1/instances/nope/ssh-tunnel`;
    expect(codeOf(await handshake(url, bearer(key), 'https://evil.example'))).toBe('A15');
    expect(codeOf(await handshake(url, {}, 'https://evil.example'))).toBe('A15');
    expect(codeOf(await handshake(url, bearer(key)))).toBe('K01');
    expect(codeOf(await handshake(url, bearer(key), CONSOLE))).toBe('K01');
  });

  test('recovery console: opens from the desktop viewer and without Origin; a foreign page with a valid authorization is refused', async () => {
    const account = await createAccount(t);
    const key = await apiKeyFor(t, account);
    await insertInstance(t, account, 'viewer', 'running');
    const link = await t.api.post('/v1/instances/viewer/desktop-link').set(bearer(key)).expect(200);
    const { cookie, csrf } = await browserFor(t, account);
    const headers = { cookie, 'x-csrf-token': csrf };
    const opened = await t.api.post('/v1/desktop/native/session').set(headers).send({ protocol: 'webrtc', machine: new URL(link.body.url).hash.slice(1) }).expect(200);
    const path = new URL(opened.body.recovery.url).pathname;
    const url = `${base}${path}?token=${encodeURIComponent(opened.body.recovery.token)}`;

    for (const origin of foreign) expect(codeOf(await handshake(url, { cookie }, origin))).toBe('A15');
    expect(codeOf(await handshake(url, {}, DESKTOP))).toBe('opened');
    expect(codeOf(await handshake(url, {}))).toBe('opened');
  });
});

test('origins: the console\'s and viewer\'s; a loopback one also under its other loopback names, same scheme and port only', () => {
  const config = loadConfig({ KISTE_DATA_DIR: '/tmp/kiste-origin-test', KISTE_LISTEN: '127.0.0.1:8080' });
  for (const origin of ['http://127.0.0.1:8080', 'http://localhost:8080', 'http://[::1]:8080']) {
    expect(() => checkWebSocketOrigin(config, origin)).not.toThrow();
  }
  for (const origin of ['http://localhost:3000', 'https://localhost:8080', 'http://127.0.0.2:8080', 'http://localhost.evil.example:8080', '']) {
    expect(() => checkWebSocketOrigin(config, origin)).toThrow(expect.objectContaining({ code: 'A15' }));
  }
  expect(() => checkWebSocketOrigin(config, undefined)).not.toThrow();
  const split = loadConfig({ KISTE_DATA_DIR: '/tmp/kiste-origin-test', KISTE_BASE_URL: 'https://api.example.com', KISTE_CONSOLE_URL: 'https://console.example.com', KISTE_DESKTOP_URL: 'https://desk.example.com:8443' });
  expect(() => checkWebSocketOrigin(split, 'https://console.example.com')).not.toThrow();
  expect(() => checkWebSocketOrigin(split, 'https://desk.example.com:8443')).not.toThrow();
  expect(() => checkWebSocketOrigin(split, 'https://desk.example.com')).toThrow(expect.objectContaining({ code: 'A15' }));
  expect(() => checkWebSocketOrigin(split, 'https://localhost')).toThrow(expect.objectContaining({ code: 'A15' }));
});

describe('HTTPS: __Host- cookies and HSTS', () => {
  const setCookies = (res: { headers: Record<string, unknown> }) => (res.headers['set-cookie'] as unknown as string[] | undefined) ?? [];

  test('with an https base URL: the session cookie is __Host- (Secure, Path=/, no Domain), only __Host- cookies are read, every answer has HSTS', async () => {
    const t = await startTestService({ env: { KISTE_BASE_URL: 'https://kiste.example.com' } });
    try {
      const account = await createAccount(t);
      const login = await t.api.post('/v1/auth/login').send({ email: account.email, password: TEST_PASSWORD }).expect(200);
      expect(login.headers['strict-transport-security']).toBe(HSTS);
      const session = setCookies(login).find((line) => line.startsWith('__Host-kiste_session='))!;
      expect(session.split('; ')).toEqual(expect.arrayContaining(['Path=/', 'Secure', 'HttpOnly', 'SameSite=Lax']));
      expect(session).not.toMatch(/domain=/i);
      expect(setCookies(login).some((line) => line.startsWith('kiste_'))).toBe(false);
      const token = session.split(';')[0]!.slice('__Host-kiste_session='.length);

      expect((await t.api.get('/v1/me').set('cookie', `__Host-kiste_session=${token}`).expect(200)).headers['strict-transport-security']).toBe(HSTS);
      // The same token without the prefix could have been planted by a sibling host or a plain-HTTP page: not read.
      expect((await t.api.get('/v1/me').set('cookie', `kiste_session=${token}`).expect(401)).body.error.code).toBe('A01');
      // Errors, the console and health answers carry it too.
      expect((await t.api.get('/v1/nowhere').expect(404)).headers['strict-transport-security']).toBe(HSTS);
      expect((await t.api.get('/healthz')).headers['strict-transport-security']).toBe(HSTS);
      // Signing out clears the prefixed cookie.
      const { cookie, csrf } = await browserFor(t, account);
      const out = await t.api.post('/v1/auth/logout').set({ cookie, 'x-csrf-token': csrf }).expect(200);
      expect(setCookies(out).find((line) => line.startsWith('__Host-kiste_session=;'))).toContain('Max-Age=0');
    } finally {
      await t.close();
    }
  });

  test('plain HTTP on loopback: cookies keep their names, no HSTS', async () => {
    const t = await startTestService();
    try {
      const account = await createAccount(t);
      const login = await t.api.post('/v1/auth/login').send({ email: account.email, password: TEST_PASSWORD }).expect(200);
      expect(login.headers['strict-transport-security']).toBeUndefined();
      const session = setCookies(login).find((line) => line.startsWith('kiste_session='))!;
      expect(session).not.toContain('Secure');
      const token = session.split(';')[0]!.slice('kiste_session='.length);
      await t.api.get('/v1/me').set('cookie', `kiste_session=${token}`).expect(200);
      expect((await t.api.get('/v1/me').set('cookie', `__Host-kiste_session=${token}`).expect(401)).body.error.code).toBe('A01');
    } finally {
      await t.close();
    }
  });
});

test('TURN credentials live ten minutes; the viewer\'s session renew gives fresh ones', async () => {
  const clock = new ManualClock();
  const secret = 'turn-shared-secret';
  const t = await startTestService({ clock, env: { KISTE_TURN_URLS: 'turn:turn.example.test:3478', KISTE_TURN_SECRET: secret } });
  try {
    const account = await createAccount(t);
    await insertInstance(t, account, 'desk', 'running');
    const link = await t.api.post('/v1/instances/desk/desktop-link').set(bearer(await apiKeyFor(t, account))).expect(200);
    const machine = new URL(link.body.url).hash.slice(1);
    const { cookie, csrf } = await browserFor(t, account);
    const headers = { cookie, 'x-csrf-token': csrf };
    const check = (server: { urls: string[]; username: string; credential: string }) => {
      const [expiry, session] = server.username.split(':');
      expect(Number(expiry)).toBe(clock.now().getTime() / 1000 + 600); // not the session's 24 hours
      expect(session).toBeTruthy();
      expect(server.credential).toBe(createHmac('sha1', secret).update(server.username).digest('base64'));
      expect(server.urls).toEqual(['turn:turn.example.test:3478']);
      return server.username;
    };
    const opened = await t.api.post('/v1/desktop/native/session').set(headers).send({ protocol: 'webrtc', machine }).expect(200);
    const first = check(opened.body.ice_servers[0]);
    clock.advanceSeconds(20 * 60); // the first ones have expired: a reconnect renews first
    const renewed = await t.api.post('/v1/desktop/native/session/renew').set(headers).send({ protocol: 'webrtc', machine }).expect(200);
    const second = check(renewed.body.ice_servers[0]);
    expect(second).not.toBe(first);
    expect(second.split(':')[1]).toBe(first.split(':')[1]); // the same session
  } finally {
    await t.close();
  }
});
