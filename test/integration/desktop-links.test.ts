// Desktop links and viewer sessions (spec "Desktop"): link lifetime bounds, several live links and
// the revoke count, a link opens nothing without the account's sign-in, a session does not use up
// its link and outlives its revocation, renew after a reload, end, signing out everywhere, and the
// recovery console refused before the upgrade without its authorization. Instance rows without a
// VM; the screen's states are injected (the guest tests use a real one).
import WebSocket from 'ws';
import type { AddressInfo } from 'node:net';
import type { DisplayState, MachineDisplay } from '../../src/compute/machine-display';
import { apiKeyFor, bearer, browserFor, createAccount, startTestService, TestService } from '../support/harness';
import { insertInstance } from '../support/instance-rows';

describe('desktop links and sessions', () => {
  let t: TestService;
  let screen: DisplayState = 'ready';
  const display: MachineDisplay = {
    state: async () => screen,
    connect: async () => {
      throw new Error('no screen in this test');
    },
    video: async () => {
      throw new Error('no screen in this test');
    },
    resize: async (_id, size) => size,
    readClipboard: async () => '',
    writeClipboard: async () => undefined,
  };

  beforeAll(async () => {
    t = await startTestService({ machineDisplay: display, env: { KISTE_DESKTOP_URL: 'https://desktop.example.test' } });
  });
  afterAll(async () => {
    await t.close();
  });

  /** A signed-in browser's headers (cookie + CSRF), as the viewer sends them. */
  async function browser(account: Awaited<ReturnType<typeof createAccount>>) {
    const { cookie, csrf } = await browserFor(t, account);
    return { cookie, 'x-csrf-token': csrf };
  }

  const referenceOf = (url: string) => new URL(url).hash.slice(1);

  test('links: default and bounded lifetime, at the viewer address with the reference in the fragment; unknown instance 404', async () => {
    const account = await createAccount(t);
    const key = await apiKeyFor(t, account);
    await insertInstance(t, account, 'desk', 'stopped');
    const before = Date.now();
    const res = await t.api.post('/v1/instances/desk/desktop-link').set(bearer(key)).expect(200);
    expect(res.body.url).toMatch(/^https:\/\/desktop\.example\.test\/desktop#kiste_dsk_[A-Za-z0-9_-]{43}$/);
    const lifetime = Date.parse(res.body.expires_at) - before;
    expect(lifetime).toBeGreaterThan(3590_000);
    expect(lifetime).toBeLessThan(3610_000);

    for (const ttl of [59, 604_801, 0, -5]) {
      const refused = await t.api.post('/v1/instances/desk/desktop-link').set(bearer(key)).send({ ttl_seconds: ttl }).expect(400);
      expect(refused.body.error).toMatchObject({ code: 'P01', param: expect.stringContaining('ttl_seconds') });
    }
    for (const ttl of [60, 604_800]) {
      const made = await t.api.post('/v1/instances/desk/desktop-link').set(bearer(key)).send({ ttl_seconds: ttl }).expect(200);
      expect(Math.abs(Date.parse(made.body.expires_at) - Date.now() - ttl * 1000)).toBeLessThan(10_000);
    }
    const missing = await t.api.post('/v1/instances/nope/desktop-link').set(bearer(key)).expect(404);
    expect(missing.body.error.code).toBe('K01');
  });

  test('several live links; revoking answers how many and stops new viewers; a link alone opens nothing', async () => {
    const account = await createAccount(t);
    const key = await apiKeyFor(t, account);
    await insertInstance(t, account, 'multi', 'running');
    const links = [];
    for (let i = 0; i < 3; i++) links.push(referenceOf((await t.api.post('/v1/instances/multi/desktop-link').set(bearer(key)).expect(200)).body.url));
    const headers = await browser(account);

    // No credential: the link alone is refused before anything else is looked at.
    const anonymous = await t.api.post('/v1/desktop/native/preflight').send({ protocol: 'webrtc', machine: links[0] }).expect(401);
    expect(anonymous.body.error.code).toMatch(/^A0/);
    for (const machine of links) await t.api.post('/v1/desktop/native/preflight').set(headers).send({ protocol: 'webrtc', machine }).expect(204);

    const revoked = await t.api.delete('/v1/instances/multi/desktop-link').set(bearer(key)).expect(200);
    expect(revoked.body).toEqual({ object: 'desktop_link_revocation', revoked: 3 });
    expect((await t.api.delete('/v1/instances/multi/desktop-link').set(bearer(key)).expect(200)).body.revoked).toBe(0);
    for (const machine of links) {
      const refused = await t.api.post('/v1/desktop/native/session').set(headers).send({ protocol: 'webrtc', machine }).expect(403);
      expect(refused.body.error.code).toBe('D01');
    }
    // A new link works again.
    const fresh = referenceOf((await t.api.post('/v1/instances/multi/desktop-link').set(bearer(key)).expect(200)).body.url);
    await t.api.post('/v1/desktop/native/preflight').set(headers).send({ protocol: 'webrtc', machine: fresh }).expect(204);
  });

  test("another account's browser, a made-up reference and an unknown protocol are refused", async () => {
    const owner = await createAccount(t);
    await insertInstance(t, owner, 'mine', 'running');
    const link = referenceOf((await t.api.post('/v1/instances/mine/desktop-link').set(bearer(await apiKeyFor(t, owner))).expect(200)).body.url);
    const stranger = await browser(await createAccount(t));
    for (const path of ['/v1/desktop/native/preflight', '/v1/desktop/native/session', '/v1/desktop/native/session/renew']) {
      const res = await t.api.post(path).set(stranger).send({ protocol: 'webrtc', machine: link }).expect(403);
      expect(res.body.error.code).toBe('D01');
    }
    const madeUp = await t.api.post('/v1/desktop/native/preflight').set(await browser(owner)).send({ protocol: 'webrtc', machine: 'kiste_dsk_x' }).expect(403);
    expect(madeUp.body.error.code).toBe('D01');
    const protocol = await t.api.post('/v1/desktop/native/preflight').set(await browser(owner)).send({ protocol: 'vnc', machine: link }).expect(400);
    expect(protocol.body.error).toMatchObject({ code: 'P01' });
  });

  test('preflight follows the instance and its screen: K03 stopped, D03 starting (retryable), D06 no desktop, 204 ready', async () => {
    const account = await createAccount(t);
    const key = await apiKeyFor(t, account);
    const row = await insertInstance(t, account, 'states', 'stopped');
    const machine = referenceOf((await t.api.post('/v1/instances/states/desktop-link').set(bearer(key)).expect(200)).body.url);
    const headers = await browser(account);
    const preflight = () => t.api.post('/v1/desktop/native/preflight').set(headers).send({ protocol: 'webrtc', machine });
    expect((await preflight().expect(409)).body.error.code).toBe('K03');
    await t.services.database.prisma.instance.update({ where: { id: row.id }, data: { status: 'running' } });
    try {
      screen = 'starting';
      const starting = await preflight().expect(503);
      expect(starting.body.error).toMatchObject({ code: 'D03', retryable: true });
      expect(starting.headers['retry-after']).toBe('5');
      screen = 'none';
      expect((await preflight().expect(409)).body.error.code).toBe('D06');
      screen = 'ready';
      await preflight().expect(204);
    } finally {
      screen = 'ready';
    }
  });

  test('a session keeps its link usable, outlives its revocation, renews after a reload, ends; recovery needs its authorization', async () => {
    const account = await createAccount(t);
    const key = await apiKeyFor(t, account);
    await insertInstance(t, account, 'viewer', 'running');
    const machine = referenceOf((await t.api.post('/v1/instances/viewer/desktop-link').set(bearer(key)).expect(200)).body.url);
    const headers = await browser(account);

    const before = Date.now();
    const first = await t.api.post('/v1/desktop/native/session').set(headers).send({ protocol: 'webrtc', machine }).expect(200);
    const id = /\/v1\/desktop\/native\/([0-9a-f-]{36})\/offer$/.exec(first.body.offer_url)?.[1];
    expect(id).toBeDefined();
    expect(first.body).toEqual({
      protocol: 'webrtc',
      transport: 'webrtc',
      offer_url: `https://desktop.example.test/v1/desktop/native/${id}/offer`,
      revoke_url: `https://desktop.example.test/v1/desktop/native/session/${id}`,
      expires_at: expect.any(String),
      recovery: { url: `wss://desktop.example.test/v1/desktop/recovery/${id}`, token: expect.stringMatching(/^kiste_rec_/), expires_at: expect.any(String) },
      ice_servers: [],
    });
    const sessionLifetime = Date.parse(first.body.expires_at) - before;
    expect(sessionLifetime).toBeGreaterThan(24 * 3600_000 - 10_000);
    expect(sessionLifetime).toBeLessThan(24 * 3600_000 + 10_000);
    expect(Date.parse(first.body.recovery.expires_at) - Date.now()).toBeLessThanOrEqual(60_000);

    // The link is not used up: another viewer (another sign-in) opens its own session.
    const other = await browser(account);
    const second = await t.api.post('/v1/desktop/native/session').set(other).send({ protocol: 'webrtc', machine }).expect(200);
    expect(second.body.offer_url).not.toBe(first.body.offer_url);

    // Revoked: no new sessions, but the open ones renew after a reload (same session, fresh recovery authorization).
    await t.api.delete('/v1/instances/viewer/desktop-link').set(bearer(key)).expect(200);
    expect((await t.api.post('/v1/desktop/native/session').set(headers).send({ protocol: 'webrtc', machine }).expect(403)).body.error.code).toBe('D01');
    const renewed = await t.api.post('/v1/desktop/native/session/renew').set(headers).send({ protocol: 'webrtc', machine }).expect(200);
    expect(renewed.body.offer_url).toBe(first.body.offer_url);
    expect(renewed.body.recovery.token).not.toBe(first.body.recovery.token);
    // A browser that never opened a session has nothing to renew.
    const third = await browser(account);
    expect((await t.api.post('/v1/desktop/native/session/renew').set(third).send({ protocol: 'webrtc', machine }).expect(404)).body.error.code).toBe('D02');

    // The recovery console: refused before the upgrade without its authorization (and needs an upgrade).
    const server = t.app.listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    const { serveWebSockets } = await import('../../src/http/websocket');
    const sockets = serveWebSockets(server, t.app);
    try {
      const port = (server.address() as AddressInfo).port;
      const refusal = (token: string) =>
        new Promise<number>((resolve, reject) => {
          const ws = new WebSocket(`ws://127.0.0.1:${port}/v1/desktop/recovery/${id}?token=${encodeURIComponent(token)}`);
          ws.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
          ws.on('open', () => reject(new Error('upgraded without authorization')));
          ws.on('error', () => undefined);
        });
      expect(await refusal('kiste_rec_forged')).toBe(403);
      // Another session's authorization does not open this one.
      expect(await refusal(second.body.recovery.token)).toBe(403);
      const plain = await t.api.get(`/v1/desktop/recovery/${id}`).query({ token: renewed.body.recovery.token }).expect(426);
      expect(plain.body.error.code).toBe('P08');
    } finally {
      sockets.close();
      server.close();
    }

    // Offers: not an SDP offer with video, or one whose video has no codec to agree on → 400 P01
    // (nothing connected); the screen out of reach → 503 D03; another account's session → 404 D02.
    const offerPath = `/v1/desktop/native/${id}/offer`;
    for (const sdp of ['hello', 'v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\n', 'v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\n']) {
      const refused = await t.api.post(offerPath).set(headers).send({ sdp }).expect(400);
      expect(refused.body.error).toMatchObject({ code: 'P01', param: 'sdp' });
    }
    const fingerprint = Array.from({ length: 32 }, () => 'AB').join(':');
    const videoOffer = ['v=0', 'o=- 1 1 IN IP4 0.0.0.0', 's=-', 't=0 0', 'a=group:BUNDLE 0', 'm=video 9 UDP/TLS/RTP/SAVPF 96', 'c=IN IP4 0.0.0.0', 'a=mid:0', 'a=recvonly',
      'a=rtcp-mux', 'a=ice-ufrag:abcd', 'a=ice-pwd:abcdefghijklmnopqrstuvwx', `a=fingerprint:sha-256 ${fingerprint}`, 'a=setup:actpass', 'a=rtpmap:96 VP8/90000', ''].join('\r\n');
    const unreachable = await t.api.post(offerPath).set(headers).send({ sdp: videoOffer }).expect(503);
    expect(unreachable.body.error.code).toBe('D03');
    const strangerOffer = await t.api.post(offerPath).set(await browser(await createAccount(t))).send({ sdp: videoOffer }).expect(404);
    expect(strangerOffer.body.error.code).toBe('D02');

    // End: the session is gone (renew and a second end say so); the other viewer's stays.
    await t.api.delete(`/v1/desktop/native/session/${id}`).set(headers).expect(204);
    expect((await t.api.delete(`/v1/desktop/native/session/${id}`).set(headers).expect(404)).body.error.code).toBe('D02');
    expect((await t.api.post('/v1/desktop/native/session/renew').set(headers).send({ protocol: 'webrtc', machine }).expect(404)).body.error.code).toBe('D02');
    await t.api.post('/v1/desktop/native/session/renew').set(other).send({ protocol: 'webrtc', machine }).expect(200);
  });

  test('signing out everywhere ends desktop sessions; logging out does not end the other sign-ins\' sessions', async () => {
    const account = await createAccount(t);
    const key = await apiKeyFor(t, account);
    await insertInstance(t, account, 'signout', 'running');
    const machine = referenceOf((await t.api.post('/v1/instances/signout/desktop-link').set(bearer(key)).expect(200)).body.url);
    const a = await browser(account);
    const b = await browser(account);
    const sessionA = await t.api.post('/v1/desktop/native/session').set(a).send({ protocol: 'webrtc', machine }).expect(200);
    await t.api.post('/v1/desktop/native/session').set(b).send({ protocol: 'webrtc', machine }).expect(200);

    // B logs out: A's desktop session is untouched.
    await t.api.post('/v1/auth/logout').set(b).expect(200);
    await t.api.post('/v1/desktop/native/session/renew').set(a).send({ protocol: 'webrtc', machine }).expect(200);

    // Everywhere: the session is ended, even for a credential that outlives it (the API key).
    const keySession = await t.api.post('/v1/desktop/native/session').set(bearer(key)).send({ protocol: 'webrtc', machine }).expect(200);
    await t.api.post('/v1/sessions/revoke-all').set(a).expect(200);
    expect((await t.api.post('/v1/desktop/native/session/renew').set(bearer(key)).send({ protocol: 'webrtc', machine }).expect(404)).body.error.code).toBe('D02');
    const ended = await t.api.delete(sessionA.body.revoke_url.replace('https://desktop.example.test', '')).set(bearer(key)).expect(404);
    expect(ended.body.error.code).toBe('D02');
    expect(keySession.body.protocol).toBe('webrtc');
  });
});
