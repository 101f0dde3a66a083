// The hosted services' proxy (src/http/service-proxy.ts) over real sockets, its reach to the guest
// stood in for by a TCP connection to an app on loopback (the real-guest proof is
// test/machines/hosted-services.test.ts). What the app is sent (Host, X-Forwarded-*, the prefix
// stripped, nothing of the client's forwarding kept), what the client gets (the app's answer as it
// came, streamed: server-sent events arrive as written, a large body byte for byte, WebSocket
// upgrades both ways; a Location on the app's own host made public, nothing added), the refusals
// (no service, private, stopped, nothing listening, too many requests) as pages or JSON, nothing of
// kiste's own answering on a service host, and the bytes counted.
import { createHash } from 'node:crypto';
import { createServer, request, type IncomingMessage, type Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { WebSocket, WebSocketServer } from 'ws';
import { ServiceProxy, type ServiceReach } from '../../src/http/service-proxy';
import type { Account } from '../../src/store/accounts';
import { apiKeyFor, bearer, browserFor, createAccount, startTestService, type TestService } from '../support/harness';
import { insertInstance } from '../support/instance-rows';

/** The app in the "guest": echoes what it was sent, streams events, serves a large body, redirects, echoes WebSockets. */
function startApp(): Promise<{ server: Server; port: number; seen: IncomingMessage[] }> {
  const seen: IncomingMessage[] = [];
  const server = createServer((req, res) => {
    seen.push(req);
    const url = new URL(req.url ?? '/', 'http://app');
    if (url.pathname === '/events') {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      res.write('data: first\n\n');
      setTimeout(() => res.end('data: second\n\n'), 700);
      return;
    }
    if (url.pathname === '/big') {
      const chunk = Buffer.alloc(1024 * 1024, 7);
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': 16 * chunk.length });
      for (let i = 0; i < 16; i++) res.write(chunk);
      return void res.end();
    }
    if (url.pathname === '/away') {
      res.writeHead(302, { location: `http://${req.headers.host}/landed?x=1` }); // as apps build them: from the Host they were sent
      return void res.end();
    }
    if (url.pathname === '/bad-status') return void req.socket.end('HTTP/1.1 099 odd\r\ncontent-length: 0\r\n\r\n');
    if (url.pathname === '/bad-location') {
      res.writeHead(302, { location: `http://${req.headers.host}//[` });
      return void res.end();
    }
    if (url.pathname === '/plant') {
      // An app that sets kiste's cookie name (for its siblings' visitors) beside one of its own.
      res.writeHead(200, [['set-cookie', 'kiste_svc=planted; Domain=localhost; Path=/'], ['set-cookie', 'mine=1']].flat() as unknown as Record<string, string>);
      return void res.end('ok');
    }
    if (url.pathname === '/origin-wide') {
      res.writeHead(200, { 'service-worker-allowed': '/', 'clear-site-data': '"cookies"', 'content-length': 2 });
      return void res.end('ok');
    }
    if (url.pathname === '/upload') {
      const hash = createHash('sha256');
      let bytes = 0;
      req.on('data', (chunk: Buffer) => (hash.update(chunk), (bytes += chunk.length)));
      req.on('end', () => res.end(JSON.stringify({ bytes, sha256: hash.digest('hex') })));
      return;
    }
    res.writeHead(200, [['content-type', 'application/json'], ['set-cookie', 'a=1'], ['set-cookie', 'b=2']].flat() as unknown as Record<string, string>);
    res.end(JSON.stringify({ url: req.url, headers: req.headers, peer: req.socket.remotePort }));
  });
  const sockets = new WebSocketServer({ server });
  sockets.on('connection', (ws) => ws.on('message', (data, binary) => ws.send(data, { binary })));
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({ server, port: (server.address() as AddressInfo).port, seen })));
}

/** The service's proxy parts with the reach stood in for. */
function proxyOf(t: TestService, reach: ServiceReach): ServiceProxy {
  return new ServiceProxy({
    services: t.services.hostedServices, access: t.services.serviceAccess, reach, logger: { warn: () => undefined },
    wake: t.services.serviceWake,
    baseUrl: t.config.baseUrl, consoleUrl: t.config.consoleUrl,
  });
}

/** The proxy's counts flushed, the servers closed with their connections, the service stopped. */
async function stopAll(proxy: ServiceProxy, servers: Server[], t: TestService): Promise<void> {
  await proxy.close();
  for (const server of servers) {
    server.closeAllConnections();
    server.close();
  }
  await t.close();
}

describe('the services proxy', () => {
  let t: TestService;
  let account: Account;
  let key: string;
  let app: Awaited<ReturnType<typeof startApp>>;
  let proxy: ServiceProxy;
  let front: Server;
  let frontPort: number;
  let reachable = true;
  let reachDelayMs = 0;
  let opened = 0;
  const reach: ServiceReach = {
    openPort: (_id, port) => new Promise((resolve, reject) => {
      if (!reachable) return reject(new Error('connect ECONNREFUSED'));
      opened++;
      setTimeout(() => {
        const socket = connect(app.port, '127.0.0.1', () => resolve(socket));
        socket.once('error', reject);
      }, reachDelayMs);
      void port;
    }),
  };

  beforeAll(async () => {
    app = await startApp();
    t = await startTestService();
    account = await createAccount(t);
    key = await apiKeyFor(t, account);
    await insertInstance(t, account, 'web', 'running');
    await insertInstance(t, account, 'off', 'stopped', { desiredState: 'stopped' });
    proxy = proxyOf(t, reach);
    front = createServer((req, res) => (proxy.claims(req) ? void proxy.serve(req, res) : res.end('kiste')));
    front.on('upgrade', (req, socket, head) => void proxy.upgrade(req, socket, head));
    await new Promise<void>((resolve) => front.listen(0, '127.0.0.1', resolve));
    frontPort = (front.address() as AddressInfo).port;
  });
  afterAll(() => stopAll(proxy, [front, app.server], t));

  async function publish(machine: string, body: object): Promise<{ host: string; url: URL }> {
    const created = await t.api.post(`/v1/instances/${machine}/services`).set(bearer(key)).send(body).expect(200);
    const url = new URL(created.body.public_url);
    return { host: url.host, url };
  }

  /** A request to the front with the service's Host; the whole answer. */
  function get(host: string, path: string, headers: Record<string, string> = {}, method = 'GET', body?: Buffer): Promise<{ status: number; headers: IncomingMessage['headers']; raw: string[]; body: Buffer }> {
    return new Promise((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port: frontPort, path, method, headers: { host, ...headers } }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, raw: res.rawHeaders, body: Buffer.concat(chunks) }));
      });
      req.on('error', reject);
      req.end(body);
    });
  }

  it('sends the app its own Host and the public address in X-Forwarded-*, keeps nothing of the client\'s forwarding, and passes the answer as it came', async () => {
    const { host } = await publish('web', { name: 'app', port: 5173, access: 'public' });
    const answer = await get(host, '/some/path?q=1', { 'x-forwarded-for': '6.6.6.6', 'x-forwarded-host': 'evil.example', forwarded: 'for=6.6.6.6', cookie: 'own=1', authorization: 'Bearer app-token' });
    expect(answer.status).toBe(200);
    const seen = JSON.parse(answer.body.toString()) as { url: string; headers: Record<string, string> };
    expect(seen.url).toBe('/some/path?q=1');
    expect(seen.headers).toMatchObject({ host: 'localhost:5173', 'x-forwarded-host': host, 'x-forwarded-proto': 'http', 'x-forwarded-for': '127.0.0.1', cookie: 'own=1', authorization: 'Bearer app-token' });
    expect(seen.headers.forwarded).toBeUndefined();
    expect(seen.headers['x-forwarded-prefix']).toBeUndefined();
    // Nothing added: no CORS, both cookies as the app set them.
    expect(Object.keys(answer.headers).filter((name) => name.startsWith('access-control-'))).toEqual([]);
    expect(answer.headers['set-cookie']).toEqual(['a=1', 'b=2']);
  });

  it('keeps a stream to the app open between requests (keep-alive through the agent), and lets an idle one go', async () => {
    const { host } = await publish('web', { name: 'pooled', port: 5190, access: 'public' });
    const before = opened;
    const peers: number[] = [];
    for (let i = 0; i < 5; i++) peers.push((JSON.parse((await get(host, '/')).body.toString()) as { peer: number }).peer);
    expect(new Set(peers).size).toBe(1);
    expect(opened - before).toBe(1);
    expect((JSON.parse((await get(host, '/')).body.toString()) as { headers: Record<string, string> }).headers.connection).toBe('keep-alive');
    await new Promise((resolve) => setTimeout(resolve, 1_500)); // past the pool's idle time
    const later = (JSON.parse((await get(host, '/')).body.toString()) as { peer: number }).peer;
    expect(later).not.toBe(peers[0]);
    expect(opened - before).toBe(2);
  });

  it('streams: server-sent events arrive as the app writes them, a large body byte for byte, an upload as it is sent', async () => {
    const { host } = await publish('web', { name: 'stream', port: 5174, access: 'public' });
    const firstAt = await new Promise<{ first: number; end: number; text: string }>((resolve, reject) => {
      const started = Date.now();
      let first = 0;
      let text = '';
      request({ host: '127.0.0.1', port: frontPort, path: '/events', headers: { host } }, (res) => {
        res.on('data', (chunk: Buffer) => {
          if (!first) first = Date.now() - started;
          text += chunk.toString();
        });
        res.on('end', () => resolve({ first, end: Date.now() - started, text }));
      }).on('error', reject).end();
    });
    expect(firstAt.text).toBe('data: first\n\ndata: second\n\n');
    expect(firstAt.first).toBeLessThan(firstAt.end - 400); // the first event came long before the second

    const big = await get(host, '/big');
    expect(big.body.length).toBe(16 * 1024 * 1024);
    expect(big.body.every((byte) => byte === 7)).toBe(true);

    const upload = Buffer.alloc(8 * 1024 * 1024, 3);
    const stored = await get(host, '/upload', { 'content-type': 'application/octet-stream' }, 'POST', upload);
    expect(JSON.parse(stored.body.toString())).toEqual({ bytes: upload.length, sha256: createHash('sha256').update(upload).digest('hex') });
  });

  it('carries WebSocket upgrades both ways', async () => {
    const { host } = await publish('web', { name: 'sockets', port: 5175, access: 'public' });
    const ws = new WebSocket(`ws://127.0.0.1:${frontPort}/ws`, { headers: { host } });
    await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
    const echoed = new Promise<string>((resolve) => ws.once('message', (data) => resolve(String(data))));
    ws.send('hello through the proxy');
    expect(await echoed).toBe('hello through the proxy');
    ws.close();
  });

  it('keeps one request one request: a chunked body is passed chunked, an upgrade the app refuses carries nothing after it', async () => {
    const { host } = await publish('web', { name: 'framing', port: 5181, access: 'public' });
    const smuggled = 'GET /smuggled HTTP/1.1\r\nHost: localhost\r\n\r\n';
    const raw = (text: string) => new Promise<string>((resolve) => {
      const socket = connect(frontPort, '127.0.0.1', () => socket.write(text));
      setTimeout(() => socket.destroy(), 3000);
      let answer = '';
      socket.on('data', (chunk: Buffer) => (answer += chunk.toString('latin1')));
      socket.on('close', () => resolve(answer));
      socket.on('error', () => resolve(answer));
    });
    const before = app.seen.length;
    const chunked = await raw(`GET /one HTTP/1.1\r\nHost: ${host}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n${smuggled.length.toString(16)}\r\n${smuggled}\r\n0\r\n\r\n`);
    expect(chunked).toMatch(/^HTTP\/1\.1 200/);
    const refused = await raw(`GET /ws HTTP/1.1\r\nHost: ${host}\r\nConnection: Upgrade\r\nUpgrade: not-a-protocol\r\n\r\n${smuggled}`);
    expect(refused).toMatch(/^HTTP\/1\.1 4\d\d/);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(app.seen.slice(before).map((req) => req.url)).toEqual(['/one']);
  });

  it('survives an app that answers what is not HTTP it can pass on (S13), and a Location it cannot parse', async () => {
    const { host, url } = await publish('web', { name: 'odd', port: 5182, access: 'public' });
    const odd = await get(host, '/bad-status');
    expect(odd.status).toBe(502);
    expect(JSON.parse(odd.body.toString()).error.code).toBe('S13');
    const location = await get(host, '/bad-location');
    expect(location.status).toBe(302);
    expect(location.headers.location!.startsWith(url.origin)).toBe(true);
    // Still serving, and a host written with its trailing dot is the same host.
    expect((await get(`${url.hostname}.:${url.port}`, '/')).status).toBe(200);
  });

  it('makes a redirect to the app\'s own host a redirect to the public one', async () => {
    const { host, url } = await publish('web', { name: 'moves', port: 5176, access: 'public' });
    const answer = await get(host, '/away');
    expect(answer.status).toBe(302);
    expect(answer.headers.location).toBe(`${url.origin}/landed?x=1`);
  });

  it('refuses, in pages for people and JSON for scripts: no service, a private one, a stopped machine, a port nothing listens on', async () => {
    const { host: privateHost } = await publish('web', { name: 'private', port: 5177 });
    const { host: stoppedHost } = await publish('off', { name: 'app', port: 5178, access: 'public' });
    const { host: deafHost } = await publish('web', { name: 'deaf', port: 5179, access: 'public' });
    const unknown = privateHost.replace(/-[a-z2-7]{10}\./, '-aaaaaaaaaa.');
    const json = async (host: string) => {
      const answer = await get(host, '/');
      return { status: answer.status, code: JSON.parse(answer.body.toString()).error.code as string };
    };
    expect(await json(unknown)).toEqual({ status: 404, code: 'S10' });
    expect(await json(`nothing.${privateHost.split('.').slice(1).join('.')}`)).toEqual({ status: 404, code: 'S10' });
    expect(await json(privateHost)).toEqual({ status: 401, code: 'A01' });
    expect(await json(stoppedHost)).toEqual({ status: 409, code: 'K03' });
    reachable = false;
    try {
      expect(await json(deafHost)).toEqual({ status: 502, code: 'S13' });
      const page = await get(deafHost, '/', { 'sec-fetch-mode': 'navigate', accept: 'text/html' });
      expect(page.status).toBe(502);
      expect(page.headers['content-type']).toMatch(/^text\/html/);
      expect(page.body.toString()).toMatch(/Nothing answers on port 5179 in the machine.*listen on 0\.0\.0\.0 or localhost/s);
    } finally {
      reachable = true;
    }
  });

  it('lets only the owner\'s account into a private service: a page load goes through the console and comes back with a cookie of the service\'s host, a script sends an API key, a WebSocket a token; kiste\'s credentials never reach the app', async () => {
    await insertInstance(t, account, 'locked', 'running');
    const created = await t.api.post('/v1/instances/locked/services').set(bearer(key)).send({ name: 'vault', port: 5181 }).expect(200);
    const host = new URL(created.body.public_url).host;
    const seenBy = async (headers: Record<string, string>, path = '/page?x=1') => {
      const answer = await get(host, path, headers);
      return { status: answer.status, answer, seen: answer.status === 200 ? (JSON.parse(answer.body.toString()) as { url: string; headers: Record<string, string> }) : null };
    };
    // Nothing brought: a script gets 401 JSON, a page load goes to the console (never a loop of its own).
    const anonymous = await seenBy({ 'sec-fetch-mode': 'cors' });
    expect({ status: anonymous.status, code: JSON.parse(anonymous.answer.body.toString()).error.code }).toEqual({ status: 401, code: 'A01' });
    const navigation = await seenBy({ 'sec-fetch-mode': 'navigate', accept: 'text/html' });
    expect(navigation.status).toBe(302);
    const toConsole = new URL(navigation.answer.headers.location!);
    expect(`${toConsole.origin}${toConsole.pathname}`).toBe(`${t.config.consoleUrl.replace(/\/$/, '')}/console/services/authorize`);
    const { state, ...rest } = Object.fromEntries(toConsole.searchParams);
    expect(rest).toEqual({ service: created.body.id, return: '/page?x=1' });

    // The console's step (signed in, with CSRF): a one-time code on the service's own host. The
    // proxy's state must be its own and for this path (a link from elsewhere has none: the page asks first).
    const browser = await browserFor(t, account);
    const authorize = (body: object, who = browser) => t.api.post(`/v1/services/${created.body.id}/access`).set('cookie', who.cookie).set('x-csrf-token', who.csrf).send(body);
    expect((await authorize({ return: '/other', state })).body.error.code).toBe('A03');
    expect((await authorize({ return: '/page?x=1', state: `${state!.split('.')[0]}.forged` })).body.error.code).toBe('A03');
    const authorized = await authorize({ return: '/page?x=1', state }).expect(200);
    const back = new URL(authorized.body.redirect_to);
    expect(`${back.host}${back.pathname}`).toBe(`${host}/__kiste/auth`);
    const traded = await get(host, `${back.pathname}${back.search}`, { 'sec-fetch-mode': 'navigate' });
    expect(traded.status).toBe(302);
    expect(traded.headers.location).toBe('/page?x=1');
    const setCookie = traded.headers['set-cookie']![0]!;
    expect(setCookie).toMatch(/^kiste_svc=kiste_svck_[\w-]+; Path=\/; HttpOnly; SameSite=Lax; Max-Age=86400$/);
    const cookie = setCookie.split(';')[0]!;
    // The code is good once.
    expect((await get(host, `${back.pathname}${back.search}`, { 'sec-fetch-mode': 'navigate' })).status).toBe(401);
    // A cookie of the same name planted first (a sibling host's Domain= cookie) hides nothing.
    const withCookie = await seenBy({ cookie: `theirs=1; kiste_svc=kiste_svck_planted; ${cookie}` });
    expect(withCookie.status).toBe(200);
    expect(withCookie.seen!.headers.cookie).toBe('theirs=1');
    // A page of another origin (a sibling service shares the site) cannot write with the visitor's cookie.
    const ownOrigin = `http://${host}`;
    expect((await get(host, '/upload', { cookie, origin: ownOrigin, 'content-type': 'text/plain' }, 'POST', Buffer.from('mine'))).status).toBe(200);
    const forged = await get(host, '/upload', { cookie, origin: 'http://evil-aaaaaaaaaa.localhost', 'content-type': 'text/plain' }, 'POST', Buffer.from('theirs'));
    expect({ status: forged.status, code: JSON.parse(forged.body.toString()).error.code }).toEqual({ status: 403, code: 'A15' });
    expect((await get(host, '/upload', { cookie, 'sec-fetch-site': 'same-site' }, 'POST', Buffer.from('theirs'))).status).toBe(403);
    const hijack = new WebSocket(`ws://127.0.0.1:${frontPort}/socket`, { headers: { host, cookie }, origin: 'http://evil-aaaaaaaaaa.localhost' });
    expect(await new Promise<number>((resolve) => hijack.once('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0)))).toBe(403);
    // The cookie is this service's only.
    const { host: otherHost } = await publish('locked', { name: 'vault2', port: 5182 });
    expect((await get(otherHost, '/', { cookie })).status).toBe(401);

    // A script with an API key of the account; the key never reaches the app. Another account's key: 404.
    const byKey = await seenBy({ authorization: `Bearer ${key}` });
    expect(byKey.status).toBe(200);
    expect(byKey.seen!.headers.authorization).toBeUndefined();
    const stranger = await apiKeyFor(t, await createAccount(t));
    expect((await seenBy({ authorization: `Bearer ${stranger}` })).status).toBe(404);
    expect((await seenBy({ authorization: 'Bearer kiste_key_not-a-key' })).status).toBe(401);
    // Another account cannot have the console hand out a code for it either.
    const strangerBrowser = await browserFor(t, await createAccount(t));
    const refused = await t.api.post(`/v1/services/${created.body.id}/access`).set('cookie', strangerBrowser.cookie).set('x-csrf-token', strangerBrowser.csrf).send({ return: '/' });
    expect({ status: refused.status, code: refused.body.error.code }).toEqual({ status: 404, code: 'S10' });

    // A preflight carries no credentials and reaches the app — as a preflight only: no query, no body,
    // nothing but CORS's headers back (an app that answers OPTIONS as GET gives nothing away).
    const preflight = await get(host, '/page?secret=1', { origin: 'http://elsewhere.example', 'access-control-request-method': 'PUT', 'x-other': 'y' }, 'OPTIONS');
    expect(preflight.status).toBe(200);
    expect(preflight.body.length).toBe(0);
    expect(preflight.headers['set-cookie']).toBeUndefined();
    const asked = app.seen[app.seen.length - 1]!;
    expect({ method: asked.method, url: asked.url, other: asked.headers['x-other'], origin: asked.headers.origin }).toEqual({ method: 'OPTIONS', url: '/page', other: undefined, origin: 'http://elsewhere.example' });

    // A token for clients without cookies: checked and stripped, for requests and WebSockets.
    const issued = await t.api.post('/v1/instances/locked/services/vault/tokens').set(bearer(key)).expect(200);
    expect(issued.body).toMatchObject({ object: 'service_token', service_id: created.body.id, parameter: 'kiste_token' });
    const byToken = await seenBy({}, `/page?kiste_token=${issued.body.token}&q=2`);
    expect(byToken.status).toBe(200);
    expect(byToken.seen!.url).toBe('/page?q=2');
    const escaped = await seenBy({}, `/page?q=3&kiste%5Ftoken=${issued.body.token}`);
    expect(escaped.seen!.url).toBe('/page?q=3');
    const ws = new WebSocket(`ws://127.0.0.1:${frontPort}/socket?kiste_token=${issued.body.token}`, { headers: { host } });
    const echoed = await new Promise<string>((resolve, reject) => {
      ws.once('open', () => ws.send('hello'));
      ws.once('message', (data) => resolve(String(data)));
      ws.once('error', reject);
    });
    ws.close();
    expect(echoed).toBe('hello');
    const noToken = new WebSocket(`ws://127.0.0.1:${frontPort}/socket`, { headers: { host } });
    const status = await new Promise<number>((resolve) => noToken.once('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0)));
    expect(status).toBe(401);

    // Signing out of the console ends the cookies that sign-in let in; signing out everywhere ends the rest.
    const other = await browserFor(t, account);
    const second = new URL((await authorize({ return: '/' }, other).expect(200)).body.redirect_to);
    const secondCookie = (await get(host, `${second.pathname}${second.search}`)).headers['set-cookie']![0]!.split(';')[0]!;
    expect((await seenBy({ cookie: secondCookie })).status).toBe(200);
    await t.api.post('/v1/auth/logout').set('cookie', other.cookie).set('x-csrf-token', other.csrf).expect(200);
    expect((await seenBy({ cookie: secondCookie })).status).toBe(401);
    expect((await seenBy({ cookie })).status).toBe(200);
    await t.api.post('/v1/sessions/revoke-all').set(bearer(key)).expect(200);
    expect((await seenBy({ cookie })).status).toBe(401);
    expect((await seenBy({}, `/page?kiste_token=${issued.body.token}`)).status).toBe(401);
  });

  it('keeps a private service\'s cookie to its own pages and links: a frame or a fetch from another site\'s page is refused, a link is followed; an app cannot set kiste\'s cookie; a kiste_token leaves no trace in the Referer', async () => {
    await insertInstance(t, account, 'framed', 'running');
    const created = await t.api.post('/v1/instances/framed/services').set(bearer(key)).send({ name: 'vault', port: 5184 }).expect(200);
    const host = new URL(created.body.public_url).host;
    const browser = await browserFor(t, account);
    const code = new URL((await t.api.post(`/v1/services/${created.body.id}/access`).set('cookie', browser.cookie).set('x-csrf-token', browser.csrf).send({ return: '/' }).expect(200)).body.redirect_to);
    const cookie = (await get(host, `${code.pathname}${code.search}`)).headers['set-cookie']![0]!.split(';')[0]!;
    const sibling = { 'sec-fetch-site': 'same-site' };
    expect((await get(host, '/', { cookie, ...sibling, 'sec-fetch-mode': 'navigate', 'sec-fetch-dest': 'iframe' })).status).toBe(403);
    expect((await get(host, '/', { cookie, ...sibling, 'sec-fetch-mode': 'cors', 'sec-fetch-dest': 'empty', origin: 'http://evil-aaaaaaaaaa.localhost' })).status).toBe(403);
    expect((await get(host, '/', { cookie, 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'navigate', 'sec-fetch-dest': 'document' })).status).toBe(200);
    expect((await get(host, '/', { cookie, 'sec-fetch-site': 'same-origin', 'sec-fetch-mode': 'cors', 'sec-fetch-dest': 'empty' })).status).toBe(200);
    const planted = await get(host, '/plant', { cookie });
    expect(planted.headers['set-cookie']).toEqual(['mine=1']);
    const { token } = (await t.api.post('/v1/instances/framed/services/vault/tokens').set(bearer(key)).expect(200)).body as { token: string };
    const referred = await get(host, `/page?kiste_token=${token}`, { referer: `http://${host}/start?kiste_token=${token}&x=1` });
    expect((JSON.parse(referred.body.toString()) as { headers: Record<string, string> }).headers.referer).toBe(`http://${host}/start?x=1`);
  });

  it('gives back a connection slot when the client leaves before the app is reached, preflights included', async () => {
    const { host } = await publish('framed', { name: 'leaky', port: 5185, access: 'public' });
    await insertInstance(t, account, 'closet', 'running');
    const vault = await t.api.post('/v1/instances/closet/services').set(bearer(key)).send({ name: 'vault', port: 5186 }).expect(200);
    const vaultHost = new URL(vault.body.public_url).host;
    reachDelayMs = 150;
    try {
      // Past the 16 a client may hold at once, had the slots stayed taken.
      for (let i = 0; i < 20; i++) {
        for (const [target, method, headers] of [[host, 'GET', {}], [vaultHost, 'OPTIONS', { origin: 'http://x.example', 'access-control-request-method': 'PUT' }]] as const) {
          const req = request({ host: '127.0.0.1', port: frontPort, path: '/', method, headers: { host: target, ...headers } });
          req.on('error', () => undefined);
          req.end();
          await new Promise((resolve) => setTimeout(resolve, 20));
          req.destroy();
        }
      }
      await new Promise((resolve) => setTimeout(resolve, 600));
    } finally {
      reachDelayMs = 0;
    }
    expect((await get(host, '/')).status).toBe(200);
    expect((await get(vaultHost, '/', { origin: 'http://x.example', 'access-control-request-method': 'PUT' }, 'OPTIONS')).status).toBe(200);
  });

  it('closes connections held open once what let them in no longer does: a token\'s sign-out, a public service made private', async () => {
    await insertInstance(t, account, 'held', 'running');
    await t.api.post('/v1/instances/held/services').set(bearer(key)).send({ name: 'open', port: 5187, access: 'public' }).expect(200);
    await t.api.post('/v1/instances/held/services').set(bearer(key)).send({ name: 'vault', port: 5188 }).expect(200);
    const hostOf = async (name: string) => new URL((await t.api.get(`/v1/instances/held/services/${name}`).set(bearer(key)).expect(200)).body.public_url).host;
    const { token } = (await t.api.post('/v1/instances/held/services/vault/tokens').set(bearer(key)).expect(200)).body as { token: string };
    const connect = async (host: string, query = '') => {
      const ws = new WebSocket(`ws://127.0.0.1:${frontPort}/socket${query}`, { headers: { host } });
      await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
      return ws;
    };
    const byToken = await connect(await hostOf('vault'), `?kiste_token=${token}`);
    const anonymous = await connect(await hostOf('open'));
    const closed = (ws: WebSocket) => new Promise<void>((resolve) => (ws.readyState === ws.CLOSED ? resolve() : ws.once('close', () => resolve())));
    await proxy.flush();
    expect([byToken.readyState, anonymous.readyState]).toEqual([WebSocket.OPEN, WebSocket.OPEN]);
    await t.api.patch('/v1/instances/held/services/open').set(bearer(key)).send({ access: 'account' }).expect(200);
    await t.api.post('/v1/sessions/revoke-all').set(bearer(key)).expect(200);
    await proxy.flush();
    await Promise.all([closed(byToken), closed(anonymous)]);
  });

  it('wakes nothing for a preflight: a stopped machine\'s private service answers it K03 and stays stopped', async () => {
    await insertInstance(t, account, 'asleep', 'stopped', { desiredState: 'stopped' });
    const created = await t.api.post('/v1/instances/asleep/services').set(bearer(key)).send({ name: 'vault', port: 5189, wake_on_request: true }).expect(200);
    expect(created.body).toMatchObject({ wake_on_request: true, idle_stop_minutes: null });
    const answer = await get(new URL(created.body.public_url).host, '/', { origin: 'http://x.example', 'access-control-request-method': 'PUT' }, 'OPTIONS');
    expect({ status: answer.status, code: JSON.parse(answer.body.toString()).error.code }).toEqual({ status: 409, code: 'K03' });
    expect((await t.api.get('/v1/instances/asleep').set(bearer(key)).expect(200)).body.status).toBe('stopped');
  });

  it('starts a private service afresh when its access changes: what let clients in before does not', async () => {
    await insertInstance(t, account, 'flip', 'running');
    await t.api.post('/v1/instances/flip/services').set(bearer(key)).send({ name: 'vault', port: 5183 }).expect(200);
    const host = new URL((await t.api.get('/v1/instances/flip/services/vault').set(bearer(key)).expect(200)).body.public_url).host;
    const { token } = (await t.api.post('/v1/instances/flip/services/vault/tokens').set(bearer(key)).expect(200)).body as { token: string };
    expect((await get(host, `/?kiste_token=${token}`)).status).toBe(200);
    expect((await t.api.patch('/v1/instances/flip/services/vault').set(bearer(key)).send({ access: 'public' }).expect(200)).body.access).toBe('public');
    expect((await get(host, '/')).status).toBe(200);
    await t.api.patch('/v1/instances/flip/services/vault').set(bearer(key)).send({ access: 'account' }).expect(200);
    expect((await get(host, `/?kiste_token=${token}`)).status).toBe(401);
  });

  it('is the only thing that answers on a service host: kiste\'s own routes are not there', async () => {
    const { host } = await publish('off', { name: 'only', port: 5180, access: 'public' });
    // Through kiste's app: the proxy takes the request (its machine is stopped: K03), never the API.
    const answer = await t.api.get('/v1/me').set('host', host).set(bearer(key));
    expect(answer.status).toBe(409);
    expect(answer.body.error.code).toBe('K03');
    const stranger = await t.api.get('/v1/me').set('host', `x.${host.split('.').slice(1).join('.')}`).set(bearer(key));
    expect(stranger.body.error.code).toBe('S10');
  });

  it('counts the bytes it carried for each service', async () => {
    await proxy.close();
    const rows = await t.services.database.prisma.hostedService.findMany({ where: { name: 'stream' } });
    expect(Number(rows[0]!.bytesOut)).toBeGreaterThan(16 * 1024 * 1024);
    expect(Number(rows[0]!.bytesIn)).toBeGreaterThanOrEqual(8 * 1024 * 1024);
  });
});

describe('the services proxy under paths of an origin of their own', () => {
  it('strips the service\'s prefix and sends it as X-Forwarded-Prefix; the bare prefix gets its slash', async () => {
    const app = await startApp();
    const t = await startTestService({ env: { KISTE_BASE_URL: 'https://kiste.example.com', KISTE_SERVICES_URL: 'https://svc.example.net' } });
    const reach: ServiceReach = { openPort: () => new Promise((resolve, reject) => {
      const socket = connect(app.port, '127.0.0.1', () => resolve(socket));
      socket.once('error', reject);
    }) };
    const proxy = proxyOf(t, reach);
    const front = createServer((req, res) => (proxy.claims(req) ? void proxy.serve(req, res) : res.end('kiste')));
    await new Promise<void>((resolve) => front.listen(0, '127.0.0.1', resolve));
    try {
      const account = await createAccount(t);
      await insertInstance(t, account, 'web', 'running');
      const created = await t.api.post('/v1/instances/web/services').set(bearer(await apiKeyFor(t, account))).send({ name: 'app', port: 3000, access: 'public' }).expect(200);
      const prefix = created.body.path_prefix as string;
      const port = (front.address() as AddressInfo).port;
      const ask = (path: string) => new Promise<{ status: number; location?: string; body: string }>((resolve, reject) => {
        request({ host: '127.0.0.1', port, path, headers: { host: 'svc.example.net' } }, (res) => {
          let body = '';
          res.on('data', (chunk: Buffer) => (body += chunk));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, location: res.headers.location, body }));
        }).on('error', reject).end();
      });
      const answer = await ask(`${prefix}/deep/page?x=1`);
      const seen = JSON.parse(answer.body) as { url: string; headers: Record<string, string> };
      expect(seen.url).toBe('/deep/page?x=1');
      expect(seen.headers).toMatchObject({ 'x-forwarded-prefix': prefix, 'x-forwarded-host': 'svc.example.net', 'x-forwarded-proto': 'https' });
      expect(await ask(`${prefix}?x=1`)).toMatchObject({ status: 308, location: `${prefix}/?x=1` });
      // Services share the origin here: nothing that reaches beyond the service's path is passed.
      const wide = await new Promise<IncomingMessage['headers']>((resolve, reject) => {
        request({ host: '127.0.0.1', port, path: `${prefix}/origin-wide`, headers: { host: 'svc.example.net' } }, (res) => (res.resume(), resolve(res.headers))).on('error', reject).end();
      });
      expect({ sw: wide['service-worker-allowed'], clear: wide['clear-site-data'] }).toEqual({ sw: undefined, clear: undefined });
      expect((await ask('/other')).status).toBe(404); // the services origin serves services only
    } finally {
      await stopAll(proxy, [front, app.server], t);
    }
  });
});
