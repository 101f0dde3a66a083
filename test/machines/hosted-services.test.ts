// Hosted services with a real guest and real Chromium (issue 23): a dev server in the machine (Node,
// as the minimal image runs its agent with it) that checks its Host as Vite does, serves a page whose
// script talks WebSocket and reads server-sent events, and a 64 MiB download. Published as a public
// service in both URL modes — under *.localhost (the default on a loopback listener) and under a
// services origin of its own with /s/<key>/ paths — the page loads in Chromium through the proxy and
// its WebSocket and SSE work; the download streams byte for byte, read fast and read slowly, with the
// service's memory flat; the status follows the port; a private service answers an anonymous fetch 401.
import { request } from 'node:http';
import type { Page } from 'playwright-core';
import { screenshot, watchedPage } from '../support/browser';
import { ConsoleRig, signIn, startConsole } from '../support/console';
import { guestRun } from '../support/guest';
import { apiKeyFor, bearer, createAccount } from '../support/harness';
import type { Account } from '../../src/store/accounts';
import { ensureTestImage, TEST_IMAGE_DIR } from '../support/images';
import { stopIdleMachines } from '../../src/background';

jest.setTimeout(600_000);

const PORT = 5173;
const BIG_BYTES = 64 * 1024 * 1024; // the app's /big

/** The app in the guest: Node's http only (no packages), one file. */
const APP = String.raw`
const http = require('http');
const crypto = require('crypto');
const PORT = Number(process.argv[2] || ${PORT});
const page = '<!doctype html><html><head><title>guest app</title></head><body><h1>A dev server in the guest</h1>' +
  '<p id="ws">ws: waiting</p><p id="sse">sse: waiting</p><script>' +
  'const base = location.pathname.replace(/[^/]*$/, "");' +
  'const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + base + "ws");' +
  'ws.onopen = () => ws.send("ping from the browser");' +
  'ws.onmessage = (e) => { document.getElementById("ws").textContent = "ws: " + e.data; };' +
  'const events = new EventSource(base + "events"); let n = 0;' +
  'events.onmessage = (e) => { n++; document.getElementById("sse").textContent = "sse: " + n + " " + e.data; if (n === 3) events.close(); };' +
  '</script></body></html>';
const server = http.createServer((req, res) => {
  // As Vite's dev server: a request for another host is refused.
  if (req.headers.host !== 'localhost:' + PORT) { res.writeHead(403); return res.end('Blocked request. This host is not allowed.'); }
  if (req.url === '/') { res.writeHead(200, { 'content-type': 'text/html' }); return res.end(page); }
  if (req.url === '/events') {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    let i = 0;
    const timer = setInterval(() => { i++; res.write('data: tick ' + i + '\n\n'); if (i === 3) { clearInterval(timer); res.end(); } }, 300);
    return;
  }
  if (req.url === '/big') {
    const chunk = Buffer.alloc(1024 * 1024, 120);
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': ${BIG_BYTES} });
    let sent = 0;
    const more = () => { while (sent < ${BIG_BYTES}) { sent += chunk.length; if (!res.write(chunk)) return res.once('drain', more); } res.end(); };
    return more();
  }
  res.writeHead(404); res.end();
});
server.on('upgrade', (req, socket) => {
  const accept = crypto.createHash('sha1').update(req.headers['sec-websocket-key'] + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64');
  socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ' + accept + '\r\n\r\n');
  socket.on('data', (frame) => {
    if ((frame[0] & 0x0f) !== 1) return; // one short masked text frame from the browser, echoed unmasked
    const length = frame[1] & 0x7f;
    const mask = frame.subarray(2, 6);
    const text = 'echo: ' + Buffer.from(frame.subarray(6, 6 + length).map((byte, i) => byte ^ mask[i % 4])).toString();
    socket.write(Buffer.concat([Buffer.from([0x81, Buffer.byteLength(text)]), Buffer.from(text)]));
  });
  socket.on('error', () => undefined);
});
server.listen(PORT, '0.0.0.0');
`;

/** The test's own address (127.0.0.1) under the name `localhost`: a services origin apart from it. */
const localhostOf = (url: string) => url.replace('//127.0.0.1:', '//localhost:');

// The lifecycle (fork, wake on request, idle stop) does not depend on the URL mode: proved once, under paths.
describe.each([
  { mode: 'subdomain', envAt: (_url: string) => ({}), publicUrl: /^http:\/\/app-[a-z2-7]{10}\.localhost:\d+\/$/, lifecycle: false },
  { mode: 'path', envAt: (url: string) => ({ KISTE_SERVICES_URL: localhostOf(url) }), publicUrl: /^http:\/\/localhost:\d+\/s\/[a-z2-7]{10}\/$/, lifecycle: true },
])('hosted services with a real guest ($mode URLs)', ({ mode, envAt, publicUrl, lifecycle }) => {
  let rig: ConsoleRig;
  let account: Account;
  let key: string;
  let instanceId: string;
  let page: Page;

  /** Stops the machine (with its memory when `stop`), or waits for a stop under way; its record once stopped. */
  const stopped = async (stop: boolean) => {
    if (stop) await rig.t.api.post('/v1/instances/box/stop').set(bearer(key)).send({ snapshot: true }).expect((res) => expect([200, 202]).toContain(res.status));
    for (const deadline = Date.now() + 120_000; Date.now() < deadline; await new Promise((resolve) => setTimeout(resolve, 500))) {
      const now = (await rig.t.api.get('/v1/instances/box').set(bearer(key)).expect(200)).body as { status: string; session_saved: boolean };
      if (now.status === 'stopped') return now;
    }
    throw new Error('the machine did not stop');
  };
  const service = async (name: string) => (await rig.t.api.get(`/v1/instances/box/services/${name}`).set(bearer(key)).expect(200)).body as { status: string; public_url: string };

  beforeAll(async () => {
    await ensureTestImage();
    // Machines in a kiste-worker, as `npm start` runs them; the services' proxy in the service.
    rig = await startConsole({ compute: 'worker', env: { KISTE_IMAGE_DIR: TEST_IMAGE_DIR, KISTE_IMAGE_PROFILE: 'minimal' }, envAt });
    expect(await rig.t.services.machineHost.refreshImage('minimal')).not.toBeNull();
    account = await createAccount(rig.t);
    key = await apiKeyFor(rig.t, account);
    const created = await rig.t.api.post('/v1/instances').set(bearer(key))
      .send({ name: 'box', profile: 'desktop', vcpu: 1, memory_mib: 512, disk_mib: 2048, ssh_public_key: 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMh0vbf5v3M0Kz1cl5q3lM1kP1nN7zQ0b3hVv0ZQk6d1 test@kiste' })
      .expect(200);
    instanceId = created.body.id;
    page = (await watchedPage(rig.browser)).page;
  }, 600_000);
  afterAll(async () => {
    if (!rig) return;
    for (const id of await rig.t.services.machineHost.knownMachineIds()) await rig.t.services.machineHost.destroy(id).catch(() => undefined);
    await rig.close();
  });

  it('publishes the dev server: unreachable until it listens, then active; the page loads in Chromium and its WebSocket and SSE work', async () => {
    await rig.t.api.post('/v1/instances/box/services').set(bearer(key)).send({ name: 'app', port: PORT, access: 'public' }).expect(200);
    expect((await service('app')).status).toBe('unreachable');
    const started = await guestRun(rig.t, instanceId, `cat > /tmp/app.js <<'APP'\n${APP}\nAPP\nsetsid node /tmp/app.js > /tmp/app.log 2>&1 < /dev/null & echo started`);
    expect(started.stdout.trim()).toBe('started');
    let app = await service('app');
    for (const deadline = Date.now() + 60_000; app.status !== 'active' && Date.now() < deadline; app = await service('app')) await new Promise((resolve) => setTimeout(resolve, 500));
    expect(app.status).toBe('active');
    expect(app.public_url).toMatch(publicUrl);
    // The app refuses any Host but its own, as Vite does: the proxy's rewrite is what lets the page in.
    const direct = await guestRun(rig.t, instanceId, `node -e "require('http').get({ host: '127.0.0.1', port: ${PORT}, headers: { host: '${new URL(app.public_url).host}' } }, (res) => console.log(res.statusCode))"`);
    expect(direct.stdout.trim()).toBe('403');

    await page.goto(app.public_url);
    await page.getByText('A dev server in the guest').waitFor({ timeout: 30_000 });
    await page.getByText('ws: echo: ping from the browser').waitFor({ timeout: 30_000 });
    await page.getByText('sse: 3 tick 3').waitFor({ timeout: 30_000 });
    expect(page.url()).toBe(app.public_url);
    await screenshot(page, `hosted-service-page-${mode}`);
  });

  it.each(['read as fast as it comes', 'read with pauses'])('streams a 64 MiB download byte for byte (%s), the service\'s memory flat', async (pace) => {
    const address = new URL((await service('app')).public_url);
    const rssBefore = process.memoryUsage().rss;
    let peak = rssBefore;
    const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 50);
    try {
      const received = await download(Number(new URL(rig.url).port), address.host, `${address.pathname}big`, pace !== 'read as fast as it comes');
      expect(received).toEqual({ status: 200, bytes: BIG_BYTES, allX: true });
    } finally {
      clearInterval(sampler);
    }
    // Streamed, not held: the process grew by far less than what went through it.
    expect(peak - rssBefore).toBeLessThan(BIG_BYTES / 2);
  });

  it(mode === 'subdomain'
    ? 'lets the owner\'s browser into a private service through the console (the page, its WebSocket and SSE on the cookie), and keeps out an anonymous fetch (401 JSON) and another account'
    : 'keeps a private service from browsers where services share one origin (S14: a cookie would reach them all), and lets a script in with an API key of the account', async () => {
    const created = await rig.t.api.post('/v1/instances/box/services').set(bearer(key)).send({ name: 'secret', port: PORT + 1 }).expect(200);
    expect(created.body.access).toBe('account');
    const started = await guestRun(rig.t, instanceId, `setsid node /tmp/app.js ${PORT + 1} > /tmp/secret.log 2>&1 < /dev/null & echo started`);
    expect(started.stdout.trim()).toBe('started');
    for (const deadline = Date.now() + 60_000; (await service('secret')).status !== 'active' && Date.now() < deadline;) await new Promise((resolve) => setTimeout(resolve, 500));
    const address = new URL(created.body.public_url);
    const direct = await new Promise<{ status: number; code: string }>((resolve, reject) => {
      request({ host: '127.0.0.1', port: Number(new URL(rig.url).port), path: `${address.pathname}data`, headers: { host: address.host } }, (res) => {
        let body = '';
        res.on('data', (chunk: Buffer) => (body += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, code: JSON.parse(body).error.code }));
      }).on('error', reject).end();
    });
    expect(direct).toEqual({ status: 401, code: 'A01' });
    if (mode === 'path') {
      const byKey = await fetchText(rig, created.body.public_url, { authorization: `Bearer ${key}` });
      expect(byKey).toMatchObject({ status: 200 });
      expect(byKey.text).toContain('A dev server in the guest');
      await page.goto(created.body.public_url);
      await page.getByText('Private services open in a browser only where each service has a host name of its own').waitFor({ timeout: 10_000 });
      await screenshot(page, 'hosted-service-private-path');
      return;
    }

    // The owner, signed in at the console, opens the address: through the console and back with a cookie.
    const owner = await rig.open('/console/login');
    await signIn(owner.page, account);
    await owner.page.waitForURL(`${rig.url}/`);
    await owner.page.goto(created.body.public_url);
    await owner.page.getByText('A dev server in the guest').waitFor({ timeout: 30_000 });
    await owner.page.getByText('ws: echo: ping from the browser').waitFor({ timeout: 30_000 });
    await owner.page.getByText('sse: 3 tick 3').waitFor({ timeout: 30_000 });
    expect(owner.page.url()).toBe(created.body.public_url);
    await screenshot(owner.page, `hosted-service-private-owner-${mode}`);

    // Another account's browser is told the service cannot be opened from it.
    const stranger = await rig.open('/console/login');
    await signIn(stranger.page, await createAccount(rig.t));
    await stranger.page.waitForURL(`${rig.url}/`);
    await stranger.page.goto(created.body.public_url);
    await stranger.page.getByText('This service cannot be opened from this account').waitFor({ timeout: 30_000 });
    expect(stranger.page.url()).toMatch(/\/console\/services\/authorize\?/);
    await screenshot(stranger.page, `hosted-service-private-stranger-${mode}`);
  });

  if (lifecycle) {
    it('keeps services through a fork with memory (new URLs, the copy\'s app answers), wakes the stopped machine on a request, and stops it when idle with its memory saved', async () => {
      const original = await service('app');
      await rig.t.api.post('/v1/instances/box/fork').set(bearer(key)).send({ name: 'copy', memory: true }).expect(200);
      const copied = (await rig.t.api.get('/v1/instances/copy/services').set(bearer(key)).expect(200)).body.data as { name: string; public_url: string; access: string }[];
      expect(copied.map((one) => one.name).sort()).toEqual(['app', 'secret']);
      const copyApp = copied.find((one) => one.name === 'app')!;
      expect(copyApp.access).toBe('public');
      expect(copyApp.public_url).not.toBe(original.public_url);
      // The app runs on in the copy's memory and answers at the copy's own URL.
      expect((await fetchText(rig, copyApp.public_url)).text).toContain('A dev server in the guest');
      await rig.t.api.delete('/v1/instances/copy').set(bearer(key)).expect(200);

      // Wake on request: the machine stopped with its memory saved, a request resumes it and is answered.
      await rig.t.api.patch('/v1/instances/box/services/app').set(bearer(key)).send({ wake_on_request: true, idle_stop_minutes: 1 }).expect(200);
      await stopped(true);
      expect((await service('app')).status).toBe('stopped');
      const woken = await fetchText(rig, original.public_url);
      expect(woken.status).toBe(200);
      expect(woken.text).toContain('A dev server in the guest');
      expect((await rig.t.api.get('/v1/instances/box').set(bearer(key)).expect(200)).body.status).toBe('running');
      const events = (await rig.t.api.get('/v1/events?resource_type=hosted_service').set(bearer(key)).expect(200)).body.data as { type: string; data: { name: string; status?: string } }[];
      expect(events.filter((event) => event.type === 'service.status_changed' && event.data.name === 'app').map((event) => event.data.status)).toEqual(expect.arrayContaining(['stopped', 'active']));

      // Idle: nothing carried for longer than its idle time (moved back here), the job stops it with its memory.
      const longAgo = new Date(Date.now() - 5 * 60_000);
      await rig.t.services.database.prisma.hostedService.updateMany({ where: { instanceId }, data: { lastRequestAt: longAgo } });
      await rig.t.services.database.prisma.instance.update({ where: { id: instanceId }, data: { updatedAt: longAgo } });
      expect((await rig.t.services.hostedServices.idleMachines()).map((one) => one.id)).toEqual([instanceId]);
      await stopIdleMachines(rig.t.services, { warn: () => undefined });
      const after = await stopped(false);
      expect(after.session_saved).toBe(true);
    });
  }
});

/** A GET of a service's URL through the rig's listener, its whole text. */
function fetchText(rig: ConsoleRig, url: string, headers: Record<string, string> = {}): Promise<{ status: number; text: string }> {
  const address = new URL(url);
  return new Promise((resolve, reject) => {
    request({ host: '127.0.0.1', port: Number(new URL(rig.url).port), path: `${address.pathname}${address.search}`, headers: { host: address.host, ...headers } }, (res) => {
      let text = '';
      res.on('data', (chunk: Buffer) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
    }).on('error', reject).end();
  });
}

/**
 * A GET read to its end, its bytes checked as they come. A stall (no byte for 30 s) fails with how
 * far it got instead of waiting out the test's time; `pauses`: the reader stops now and then, so the
 * guest's stream is held back by credit all the way through the proxy.
 */
function download(port: number, host: string, path: string, pauses: boolean): Promise<{ status: number; bytes: number; allX: boolean }> {
  return new Promise((resolve, reject) => {
    let bytes = 0;
    let lastByteAt = Date.now();
    const watchdog = setInterval(() => {
      if (Date.now() - lastByteAt < 30_000) return;
      clearInterval(watchdog);
      reject(new Error(`the download stalled after ${bytes} of ${BIG_BYTES} bytes`));
    }, 1000);
    request({ host: '127.0.0.1', port, path, headers: { host } }, (res) => {
      let allX = true;
      let chunks = 0;
      res.on('data', (chunk: Buffer) => {
        bytes += chunk.length;
        lastByteAt = Date.now();
        if (allX && !chunk.every((byte) => byte === 120)) allX = false;
        if (pauses && ++chunks % 64 === 0) {
          res.pause();
          setTimeout(() => res.resume(), 100);
        }
      });
      res.on('end', () => {
        clearInterval(watchdog);
        resolve({ status: res.statusCode ?? 0, bytes, allX });
      });
    }).on('error', (error) => {
      clearInterval(watchdog);
      reject(error);
    }).end();
  });
}
