// Webhooks end to end: endpoints (secret once, stored encrypted, limits, account scoping), the URL
// rule at create/update and again at delivery, and deliveries to a real HTTPS receiver on loopback
// (self-signed certificate made here with openssl; the service trusts it through its options only)
// verified with the `standardwebhooks` library: retries with backoff and Retry-After, 410, give-up,
// delete, restart with pending deliveries, and the test endpoint. The worker is called directly
// and time is a ManualClock, so nothing sleeps.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { IncomingHttpHeaders } from 'node:http';
import { lookup } from 'node:dns/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import request from 'supertest';
import { Webhook } from 'standardwebhooks';
import { loadConfig } from '../../src/config';
import { openDatabase } from '../../src/db/database';
import { FAILING_ALERT_AFTER, MAX_ATTEMPTS, RETRY_DELAYS_S } from '../../src/domain/webhook-deliveries';
import type { Resolver } from '../../src/domain/webhook-target';
import { createApp } from '../../src/http/app';
import { createServices, type Services } from '../../src/services';
import { appendEvent } from '../../src/store/events';
import { PrismaTransactions } from '../../src/store/transactions';
import { sendWebhook } from '../../src/webhooks/sender';
import { checkContract } from '../support/contract';
import { freshDatabaseUrl, type FreshDatabase } from '../support/database';
import { apiKeyFor, bearer, createAccount, startTestService, type TestService } from '../support/harness';
import { ManualClock } from '../support/manual-clock';

jest.setTimeout(60_000);

const NOWHERE = '00000000-0000-4000-8000-000000000000';
const PUBLIC_V4 = '93.184.215.14';

// ---- a real HTTPS receiver on loopback ----

interface Received {
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
}

interface Reply {
  status: number;
  headers?: Record<string, string>;
  body?: string;
  /** Never answer (the attempt times out). */
  hang?: boolean;
}

class Receiver {
  private server!: Server;
  port = 0;
  private readonly received = new Map<string, Received[]>();
  private readonly scripts = new Map<string, Reply[]>();

  async start(key: string, cert: string): Promise<void> {
    this.server = createServer({ key, cert }, (req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (chunk: Buffer) => chunks.push(chunk));
      req.on('end', () => {
        const path = req.url!;
        this.requests(path).push({ path, headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
        const reply = this.scripts.get(path)?.shift() ?? { status: 200, body: 'ok' };
        if (reply.hang) return;
        res.writeHead(reply.status, reply.headers ?? {});
        res.end(reply.body ?? '');
      });
    });
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.port = (this.server.address() as { port: number }).port;
  }

  /** The next answers for `path`, in order; after them 200 "ok". */
  script(path: string, ...replies: Reply[]): void {
    this.scripts.set(path, replies);
  }

  requests(path: string): Received[] {
    if (!this.received.has(path)) this.received.set(path, []);
    return this.received.get(path)!;
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

let certDir: string;
let tls: { key: string; cert: string };
const receiver = new Receiver();

beforeAll(async () => {
  certDir = mkdtempSync(join(tmpdir(), 'kiste-webhook-tls-'));
  execFileSync('openssl', [
    'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2',
    '-subj', '/CN=kiste-test-receiver', '-addext', 'subjectAltName=DNS:localhost,DNS:pinned.test,IP:127.0.0.1',
    '-keyout', join(certDir, 'key.pem'), '-out', join(certDir, 'cert.pem'),
  ], { stdio: 'ignore' });
  tls = { key: readFileSync(join(certDir, 'key.pem'), 'utf8'), cert: readFileSync(join(certDir, 'cert.pem'), 'utf8') };
  await receiver.start(tls.key, tls.cert);
});
afterAll(async () => {
  await receiver.stop();
  rmSync(certDir, { recursive: true, force: true });
});

// ---- helpers ----

/** Names only this test knows, over the system resolver (localhost and the like). */
function resolverWith(names: Record<string, string[]>): Resolver {
  return async (hostname) => {
    const addresses = names[hostname];
    if (!addresses) return lookup(hostname, { all: true, verbatim: true });
    return addresses.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
  };
}

/** Verifies a received request with the standardwebhooks library, as a receiver would at `now`. */
function verified(secret: string, received: Received, now: Date): unknown {
  const spy = jest.spyOn(Date, 'now').mockReturnValue(now.getTime());
  try {
    return new Webhook(secret).verify(received.body, {
      'webhook-id': received.headers['webhook-id'] as string,
      'webhook-timestamp': received.headers['webhook-timestamp'] as string,
      'webhook-signature': received.headers['webhook-signature'] as string,
    });
  } finally {
    spy.mockRestore();
  }
}

async function account(t: TestService) {
  const created = await createAccount(t);
  return { account: created, key: await apiKeyFor(t, created, 31_536_000) }; // a year: the clock moves days here
}

function deliveriesOf(t: TestService, endpointId: string) {
  return t.services.database.prisma.webhookDelivery.findMany({ where: { endpointId }, orderBy: { createdAt: 'asc' } });
}

// ---- endpoints, limits, scoping, the URL rule (default installation: public HTTPS targets only) ----

describe('webhook endpoints', () => {
  const clock = new ManualClock();
  const names: Record<string, string[]> = {
    'hooks.example.com': [PUBLIC_V4],
    'hooks6.example.com': ['2606:2800:21f:cb07:6820:80da:af6b:8b2c'],
    'internal.example.com': ['10.0.0.1'],
    'mixed.example.com': [PUBLIC_V4, '192.168.0.10'],
    'metadata.example.com': ['169.254.169.254'],
    'mapped.example.com': ['::ffff:127.0.0.1'],
    'ula.example.com': ['fd00::1'],
    'cgnat.example.com': ['100.64.0.1'],
    'flip.example.net': [PUBLIC_V4],
  };
  let t: TestService;
  beforeAll(async () => {
    t = await startTestService({ clock, webhooks: { resolve: resolverWith(names) } });
  });
  afterAll(() => t.close());

  // Endpoints made here subscribe to snapshot.* only: nothing here emits those, so no delivery ever
  // goes to the (real, public) address the test names resolve to.
  const quiet = { events: ['snapshot.created'] };

  it('creates an endpoint: the secret once (whsec_ + 32 random bytes), encrypted at rest, never shown again', async () => {
    const { account: owner, key } = await account(t);
    const created = await t.api.post('/v1/webhooks').set(bearer(key))
      .send({ name: 'ci', url: 'https://Hooks.Example.com:443/kiste?x=1', events: ['snapshot.created', 'snapshot.deleted'] }).expect(200);
    const secret = created.body.secret as string;
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]+=*$/);
    expect(Buffer.from(secret.slice('whsec_'.length), 'base64')).toHaveLength(32);
    expect(created.body.data).toMatchObject({
      object: 'webhook_endpoint', name: 'ci', url: 'https://hooks.example.com/kiste?x=1', events: ['snapshot.created', 'snapshot.deleted'],
      enabled: true, disabled_reason: null,
      health: { state: 'unknown', last_delivery_at: null, last_success_at: null, consecutive_failures: 0 },
    });
    const id = created.body.data.id as string;

    const shown = [
      await t.api.get(`/v1/webhooks/${id}`).set(bearer(key)).expect(200),
      await t.api.get('/v1/webhooks').set(bearer(key)).expect(200),
      await t.api.patch(`/v1/webhooks/${id}`).set(bearer(key)).send({ name: 'ci 2' }).expect(200),
      await t.api.get('/v1/events').set(bearer(key)).expect(200),
    ];
    for (const res of shown) expect(JSON.stringify(res.body)).not.toContain(secret.slice(6, 30));

    // at rest: neither the secret nor its key bytes in the row, and it opens only as this endpoint's
    const row = await t.services.database.prisma.webhookEndpoint.findUniqueOrThrow({ where: { id } });
    const rowText = JSON.stringify(row);
    expect(rowText).not.toContain(secret);
    expect(rowText).not.toContain(secret.slice(6, 30));
    expect(rowText).not.toContain(Buffer.from(secret.slice(6), 'base64').toString('hex'));
    expect(row.secretEncrypted).toMatch(/^v1\./);
    if (t.services.database.provider === 'sqlite') {
      const dir = (t.services.database as unknown as { dataDir: string }).dataDir;
      for (const file of readdirSync(dir).filter((name) => name.startsWith('kiste.db'))) {
        expect(readFileSync(join(dir, file)).includes(Buffer.from(secret.slice(6, 30)))).toBe(false);
      }
    }

    // event and alert, in the create's transaction
    const events = (await t.api.get('/v1/events').set(bearer(key)).expect(200)).body.data as { type: string; resource_id: string; data: any }[];
    expect(events.find((e) => e.type === 'webhook.created')).toMatchObject({ resource_id: id, data: { name: 'ci', url: 'https://hooks.example.com/kiste?x=1' } });
    expect(events.find((e) => e.type === 'webhook.updated')).toMatchObject({ resource_id: id, data: { name: 'ci 2', changed: ['name'] } });
    const raised = events.find((e) => e.type === 'alert.raised');
    expect(raised?.data).toMatchObject({ kind: 'webhook_created' });
    const alert = await t.services.database.prisma.alert.findFirstOrThrow({ where: { accountId: owner.id, kind: 'webhook_created' } });
    expect(alert).toMatchObject({ resourceType: 'webhook', resourceId: id });
    expect((await t.api.get('/v1/status').set(bearer(key)).expect(200)).body.usage.webhooks).toBe(1);
  });

  it('updates and deletes, each with its event; a deleted endpoint is gone', async () => {
    const { key } = await account(t);
    const id = (await t.api.post('/v1/webhooks').set(bearer(key)).send({ name: 'a', url: 'https://hooks.example.com/a', ...quiet }).expect(200)).body.data.id;
    const patched = await t.api.patch(`/v1/webhooks/${id}`).set(bearer(key))
      .send({ url: 'https://hooks6.example.com/b', events: ['snapshot.deleted'], enabled: false, name: null }).expect(200);
    expect(patched.body).toMatchObject({ name: 'a', url: 'https://hooks6.example.com/b', events: ['snapshot.deleted'], enabled: false, health: { state: 'disabled' } });
    const enabled = await t.api.patch(`/v1/webhooks/${id}`).set(bearer(key)).send({ enabled: true }).expect(200);
    expect(enabled.body).toMatchObject({ enabled: true, disabled_reason: null, health: { state: 'unknown' } });
    expect((await t.api.delete(`/v1/webhooks/${id}`).set(bearer(key)).expect(200)).body).toEqual({ id, object: 'webhook_endpoint', deleted: true });
    expect((await t.api.get(`/v1/webhooks/${id}`).set(bearer(key)).expect(404)).body.error.code).toBe('N10');
    expect((await t.api.delete(`/v1/webhooks/${id}`).set(bearer(key)).expect(404)).body.error.code).toBe('N10');
    const events = (await t.api.get(`/v1/events?resource_type=webhook&resource_id=${id}`).set(bearer(key)).expect(200)).body.data;
    expect(events.map((e: { type: string; data: any }) => [e.type, e.data.changed ?? null])).toEqual([
      ['webhook.created', null],
      ['webhook.updated', ['url', 'events', 'enabled']],
      ['webhook.updated', ['enabled']],
      ['webhook.deleted', null],
    ]);
  });

  it('allows 10 endpoints (11th: 409 L06) and 32 event types (more or repeated: 400 P01 events)', async () => {
    const { key } = await account(t);
    for (let i = 0; i < 10; i++) await t.api.post('/v1/webhooks').set(bearer(key)).send({ name: `n${i}`, url: `https://hooks.example.com/${i}`, ...quiet }).expect(200);
    const eleventh = await t.api.post('/v1/webhooks').set(bearer(key)).send({ name: 'n10', url: 'https://hooks.example.com/10', ...quiet }).expect(409);
    expect(eleventh.body.error).toMatchObject({ code: 'L06', type: 'webhook_limit_reached' });
    expect((await t.api.get('/v1/webhooks').set(bearer(key)).expect(200)).body).toHaveLength(10);

    const other = await account(t);
    const allTypes = ['instance.created', 'instance.running', 'instance.stopped', 'instance.error', 'instance.deleted', 'instance.renamed',
      'instance.checkpointed', 'command.started', 'command.completed', 'snapshot.created', 'snapshot.deleted', 'webhook.created',
      'webhook.updated', 'webhook.deleted', 'webhook.test', 'alert.raised', 'alert.acknowledged', 'api_token.created', 'api_token.revoked',
      'device_key.added', 'device_key.deleted', 'session.created', 'session.revoked', 'account.updated', 'account.deletion_requested'];
    const thirtyThree = [...allTypes, ...allTypes.slice(0, 8)];
    expect(thirtyThree).toHaveLength(33);
    const tooMany = await t.api.post('/v1/webhooks').set(bearer(other.key)).send({ name: 'x', url: 'https://hooks.example.com/', events: thirtyThree }).expect(400);
    expect(tooMany.body.error).toMatchObject({ code: 'P01', param: 'events' });
    const repeated = await t.api.post('/v1/webhooks').set(bearer(other.key)).send({ name: 'x', url: 'https://hooks.example.com/', events: ['webhook.test', 'webhook.test'] }).expect(400);
    expect(repeated.body.error).toMatchObject({ code: 'P01', param: 'events' });
    await t.api.post('/v1/webhooks').set(bearer(other.key)).send({ name: 'x', url: 'https://hooks.example.com/', events: [] }).expect(400);
    await t.api.post('/v1/webhooks').set(bearer(other.key)).send({ name: 'x', url: 'https://hooks.example.com/', events: ['no.such'] }).expect(400);
    const all = await t.api.post('/v1/webhooks').set(bearer(other.key)).send({ name: 'all', url: 'https://hooks.example.com/', events: allTypes }).expect(200);
    expect(all.body.data.events).toEqual(allTypes);
    await t.api.delete(`/v1/webhooks/${all.body.data.id}`).set(bearer(other.key)).expect(200);
  });

  const refusedUrls: [string, RegExp][] = [
    ['http://hooks.example.com/', /https/],
    ['https://hooks.example.com:8443/', /port 443/],
    ['https://user:secret@hooks.example.com/', /user name or password/],
    ['https://localhost/', /resolves to (127\.0\.0\.1|::1)/],
    ['https://127.0.0.1/', /loopback/],
    ['https://127.8.9.10/', /loopback/],
    ['https://2130706433/', /loopback/],
    ['https://0x7f000001/', /loopback/],
    ['https://[::1]/', /loopback/],
    ['https://[::]/', /unspecified/],
    ['https://0.0.0.0/', /unspecified/],
    ['https://10.0.0.1/', /RFC 1918/],
    ['https://172.16.5.4/', /RFC 1918/],
    ['https://192.168.1.1/', /RFC 1918/],
    ['https://169.254.169.254/latest/meta-data/', /link-local/],
    ['https://100.64.0.1/', /CGNAT/],
    ['https://224.0.0.1/', /multicast/],
    ['https://240.0.0.1/', /reserved/],
    ['https://198.51.100.1/', /documentation/],
    ['https://[::ffff:127.0.0.1]/', /loopback/],
    ['https://[::ffff:10.0.0.1]/', /RFC 1918/],
    ['https://[::ffff:169.254.169.254]/', /link-local/],
    ['https://[fd00::1]/', /unique-local/],
    ['https://[fc00::1]/', /unique-local/],
    ['https://[fe80::1]/', /link-local/],
    ['https://[ff02::1]/', /multicast/],
    ['https://[2001:db8::1]/', /documentation/],
    ['https://internal.example.com/', /resolves to 10\.0\.0\.1/],
    ['https://mixed.example.com/', /resolves to 192\.168\.0\.10/],
    ['https://metadata.example.com/', /169\.254\.169\.254/],
    ['https://mapped.example.com/', /loopback/],
    ['https://ula.example.com/', /unique-local/],
    ['https://cgnat.example.com/', /CGNAT/],
    ['https://no-such-host.invalid/', /could not be resolved/],
  ];

  it.each(refusedUrls)('refuses %s with 422 N11 (param url), at create and at update', async (url, message) => {
    const { key } = await account(t);
    const res = await t.api.post('/v1/webhooks').set(bearer(key)).send({ name: 'bad', url, ...quiet }).expect(422);
    expect(res.body.error).toMatchObject({ code: 'N11', type: 'webhook_url_not_allowed', param: 'url' });
    expect(res.body.error.message).toMatch(message);
    const good = await t.api.post('/v1/webhooks').set(bearer(key)).send({ name: 'good', url: 'https://hooks.example.com/', ...quiet }).expect(200);
    const patch = await t.api.patch(`/v1/webhooks/${good.body.data.id}`).set(bearer(key)).send({ url }).expect(422);
    expect(patch.body.error).toMatchObject({ code: 'N11', param: 'url' });
    expect((await t.api.get(`/v1/webhooks/${good.body.data.id}`).set(bearer(key)).expect(200)).body.url).toBe('https://hooks.example.com/');
    expect(await t.services.database.prisma.webhookEndpoint.count({ where: { url: { contains: 'bad' } } })).toBe(0);
  });

  it('refuses what is not an http(s) URL by the schema (400 P01, param url)', async () => {
    const { key } = await account(t);
    for (const url of ['ftp://hooks.example.com/', 'hooks.example.com', 'javascript:alert(1)', 'file:///etc/passwd']) {
      const res = await t.api.post('/v1/webhooks').set(bearer(key)).send({ name: 'bad', url, ...quiet }).expect(400);
      expect(res.body.error).toMatchObject({ code: 'P01', param: 'url' });
    }
  });

  it('checks the address again at delivery: a name that now resolves to loopback is not connected to', async () => {
    const { account: owner, key } = await account(t);
    const id = (await t.api.post('/v1/webhooks').set(bearer(key)).send({ name: 'flip', url: `https://flip.example.net/rebind`, events: ['api_token.created'] }).expect(200)).body.data.id;
    names['flip.example.net'] = ['127.0.0.1'];
    await t.services.apiTokens.create(owner.id, 'triggers a delivery', 3600);
    await t.services.webhookDeliveries.runDue();
    const [delivery] = (await t.api.get(`/v1/webhooks/${id}/deliveries`).set(bearer(key)).expect(200)).body;
    expect(delivery).toMatchObject({ event_type: 'api_token.created', state: 'retrying', attempt: 1, http_status: null });
    expect(delivery.error).toMatch(/Not sent: .*flip\.example\.net resolves to 127\.0\.0\.1, a loopback address/);
    expect(receiver.requests('/rebind')).toHaveLength(0);
    expect((await t.api.get(`/v1/webhooks/${id}`).set(bearer(key)).expect(200)).body.health).toMatchObject({ state: 'failing', consecutive_failures: 1 });
  });

  it("another account's webhook answers 404 N10 like one that exists nowhere, and is not listed", async () => {
    const a = await account(t);
    const b = await account(t);
    const id = (await t.api.post('/v1/webhooks').set(bearer(b.key)).send({ name: 'b only', url: 'https://hooks.example.com/b', ...quiet }).expect(200)).body.data.id;
    const before = await t.services.database.prisma.webhookEndpoint.findUniqueOrThrow({ where: { id } });
    const calls = [
      (target: string) => t.api.get(`/v1/webhooks/${target}`),
      (target: string) => t.api.patch(`/v1/webhooks/${target}`).send({ name: 'taken over', url: 'https://hooks.example.com/a' }),
      (target: string) => t.api.delete(`/v1/webhooks/${target}`),
      (target: string) => t.api.post(`/v1/webhooks/${target}/test`),
      (target: string) => t.api.get(`/v1/webhooks/${target}/deliveries`),
    ];
    for (const call of calls) {
      const nowhere = await call(NOWHERE).set(bearer(a.key)).expect(404);
      const res = await call(id).set(bearer(a.key)).expect(404);
      expect(res.body.error.code).toBe('N10');
      expect({ ...res.body.error, request_id: null }).toEqual({ ...nowhere.body.error, request_id: null });
      expect(JSON.stringify(res.body)).not.toContain('b only');
    }
    expect((await t.api.get('/v1/webhooks').set(bearer(a.key)).expect(200)).body).toEqual([]);
    expect(await t.services.database.prisma.webhookEndpoint.findUniqueOrThrow({ where: { id } })).toEqual(before);
    expect(await t.services.database.prisma.webhookDelivery.count({ where: { endpointId: id } })).toBe(0);
    expect((await t.api.get('/v1/webhooks').set(bearer(b.key)).expect(200)).body.map((w: { id: string }) => w.id)).toEqual([id]);
  });
});

// ---- deliveries to the HTTPS receiver (operator setting on: loopback targets allowed) ----

describe('webhook deliveries', () => {
  const clock = new ManualClock();
  let t: TestService;
  beforeAll(async () => {
    t = await startTestService({
      clock,
      env: { KISTE_WEBHOOKS_ALLOW_PRIVATE_TARGETS_UNSAFE: '1' },
      // jitter fixed at its middle (factor 1), the receiver's CA trusted by this service only
      webhooks: { resolve: resolverWith({ 'pinned.test': ['127.0.0.1'] }), ca: tls.cert, timeoutMs: 1_500, random: () => 0.5 },
    });
  });
  afterAll(() => t.close());

  async function endpoint(path: string, events: string[] = ['api_token.created'], host = 'pinned.test') {
    const who = await account(t);
    const created = await t.api.post('/v1/webhooks').set(bearer(who.key))
      .send({ name: `receiver ${path}`, url: `https://${host}:${receiver.port}${path}`, events }).expect(200);
    return { ...who, id: created.body.data.id as string, secret: created.body.secret as string };
  }

  async function deliveries(key: string, id: string) {
    return (await t.api.get(`/v1/webhooks/${id}/deliveries`).set(bearer(key)).expect(200)).body as any[];
  }

  it('queues the delivery in the transaction of its event, and sends a Standard Webhooks request to the checked address', async () => {
    const hook = await endpoint('/signed');
    const token = await t.services.apiTokens.create(hook.account.id, 'delivered', 3600);
    const [queued] = await deliveriesOf(t, hook.id);
    expect(queued).toMatchObject({ state: 'pending', attempt: 0, eventType: 'api_token.created' });

    expect(await t.services.webhookDeliveries.runDue()).toBeGreaterThanOrEqual(1);
    const [received] = receiver.requests('/signed');
    expect(receiver.requests('/signed')).toHaveLength(1);
    // pinned.test is known to the service's resolver only: the connection went to the address it checked
    expect(received!.headers.host).toBe(`pinned.test:${receiver.port}`);
    expect(received!.headers['content-type']).toBe('application/json');
    expect(received!.headers['webhook-id']).toBe(queued!.id);
    expect(received!.headers['webhook-timestamp']).toBe(String(Math.floor(clock.now().getTime() / 1000)));
    expect(received!.headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]+=*$/);
    const payload = verified(hook.secret, received!, clock.now()) as any;
    expect(received!.body).toBe(queued!.body); // the exact stored bytes are what is signed and sent

    // the payload's data is the event exactly as the stream shows it
    const events = (await t.api.get(`/v1/events?resource_type=api_token&resource_id=${token.record.id}`).set(bearer(hook.key)).expect(200)).body.data;
    expect(payload).toEqual({ type: 'api_token.created', timestamp: events[0].created_at, data: events[0] });

    // a wrong secret or a changed body does not verify
    expect(() => verified(`whsec_${Buffer.alloc(32, 1).toString('base64')}`, received!, clock.now())).toThrow();
    expect(() => verified(hook.secret, { ...received!, body: received!.body.replace('delivered', 'tampered') }, clock.now())).toThrow();

    const [done] = await deliveries(hook.key, hook.id);
    expect(done).toMatchObject({ id: queued!.id, state: 'succeeded', attempt: 1, http_status: 200, response_excerpt: 'ok', error: null, next_attempt_at: null, event_sequence: events[0].sequence });
    expect(done.duration_ms).toBeGreaterThanOrEqual(0);
    const health = (await t.api.get(`/v1/webhooks/${hook.id}`).set(bearer(hook.key)).expect(200)).body.health;
    expect(health).toEqual({ state: 'healthy', last_delivery_at: clock.now().toISOString(), last_success_at: clock.now().toISOString(), consecutive_failures: 0 });
  });

  it('makes no delivery when the event rolls back, and none for types the endpoint does not subscribe to', async () => {
    const hook = await endpoint('/atomic');
    await expect(new PrismaTransactions(t.services.database.prisma).run(async (tx) => {
      await appendEvent(tx, hook.account.id, { type: 'api_token.created', resourceType: 'api_token', resourceId: NOWHERE, data: { label: 'rolled back' } });
      throw new Error('roll back');
    })).rejects.toThrow('roll back');
    await new PrismaTransactions(t.services.database.prisma).run((tx) =>
      appendEvent(tx, hook.account.id, { type: 'device_key.deleted', resourceType: 'device_key', resourceId: NOWHERE, data: {} }));
    expect(await deliveriesOf(t, hook.id)).toEqual([]);
  });

  it('trusts only the CA it was given: without it the TLS handshake fails (verification is on)', async () => {
    const target = { url: new URL(`https://localhost:${receiver.port}/no-ca`), hostname: 'localhost', address: '127.0.0.1', family: 4 as const };
    const refused = await sendWebhook({ target, headers: {}, body: '{}', timeoutMs: 2_000, excerptBytes: 1024 });
    expect(refused.status).toBeNull();
    expect(refused.error).toMatch(/certificate/i);
    expect(receiver.requests('/no-ca')).toHaveLength(0);
    const trusted = await sendWebhook({ target, headers: {}, body: '{}', timeoutMs: 2_000, excerptBytes: 1024, ca: tls.cert });
    expect(trusted).toMatchObject({ status: 200, error: null });
  });

  it('retries after a receiver failure (500, then 200) with the same webhook-id, after the backoff', async () => {
    const hook = await endpoint('/flaky');
    receiver.script('/flaky', { status: 500, body: 'boom' });
    await t.services.apiTokens.create(hook.account.id, 'retried', 3600);
    await t.services.webhookDeliveries.runDue();
    let [delivery] = await deliveries(hook.key, hook.id);
    expect(delivery).toMatchObject({ state: 'retrying', attempt: 1, http_status: 500, response_excerpt: 'boom', error: 'The receiver answered 500' });
    expect(new Date(delivery.next_attempt_at).getTime() - clock.now().getTime()).toBe(RETRY_DELAYS_S[0]! * 1000);
    expect((await t.api.get(`/v1/webhooks/${hook.id}`).set(bearer(hook.key)).expect(200)).body.health).toMatchObject({ state: 'failing', consecutive_failures: 1, last_success_at: null });

    await t.services.webhookDeliveries.runDue(); // not due yet
    expect(receiver.requests('/flaky')).toHaveLength(1);
    clock.advanceSeconds(RETRY_DELAYS_S[0]!);
    await t.services.webhookDeliveries.runDue();
    const [first, second] = receiver.requests('/flaky');
    expect(second).toBeDefined();
    expect(second!.headers['webhook-id']).toBe(first!.headers['webhook-id']);
    expect(Number(second!.headers['webhook-timestamp']) - Number(first!.headers['webhook-timestamp'])).toBe(RETRY_DELAYS_S[0]);
    expect(second!.body).toBe(first!.body);
    verified(hook.secret, second!, clock.now());
    [delivery] = await deliveries(hook.key, hook.id);
    expect(delivery).toMatchObject({ state: 'succeeded', attempt: 2, http_status: 200, error: null, next_attempt_at: null });
    expect((await t.api.get(`/v1/webhooks/${hook.id}`).set(bearer(hook.key)).expect(200)).body.health).toMatchObject({ state: 'healthy', consecutive_failures: 0 });
  });

  it('honours Retry-After in seconds and as an HTTP date', async () => {
    const hook = await endpoint('/busy');
    const later = new Date(clock.now().getTime() + 300_000);
    receiver.script('/busy', { status: 503, headers: { 'retry-after': '120' } }, { status: 429, headers: { 'retry-after': later.toUTCString() } });
    await t.services.apiTokens.create(hook.account.id, 'busy', 3600);
    await t.services.webhookDeliveries.runDue();
    let [delivery] = await deliveries(hook.key, hook.id);
    expect(delivery).toMatchObject({ state: 'retrying', http_status: 503, next_attempt_at: new Date(clock.now().getTime() + 120_000).toISOString() });
    clock.advanceSeconds(119);
    await t.services.webhookDeliveries.runDue();
    expect(receiver.requests('/busy')).toHaveLength(1);
    clock.advanceSeconds(1);
    await t.services.webhookDeliveries.runDue();
    [delivery] = await deliveries(hook.key, hook.id);
    expect(delivery).toMatchObject({ state: 'retrying', attempt: 2, http_status: 429, next_attempt_at: later.toISOString() });
    clock.set(later);
    await t.services.webhookDeliveries.runDue();
    [delivery] = await deliveries(hook.key, hook.id);
    expect(delivery).toMatchObject({ state: 'succeeded', attempt: 3 });
    expect(receiver.requests('/busy')).toHaveLength(3);
  });

  it('does not follow redirects, keeps 1 KiB of the answer, and times out a receiver that does not answer', async () => {
    const hook = await endpoint('/odd');
    receiver.script('/odd',
      { status: 302, headers: { location: `https://pinned.test:${receiver.port}/elsewhere` } },
      { status: 500, body: 'x'.repeat(5000) },
      { status: 200, hang: true });
    await t.services.apiTokens.create(hook.account.id, 'odd', 3600);
    await t.services.webhookDeliveries.runDue();
    let [delivery] = await deliveries(hook.key, hook.id);
    expect(delivery).toMatchObject({ state: 'retrying', http_status: 302, error: expect.stringMatching(/redirects are not followed/) });
    expect(receiver.requests('/elsewhere')).toHaveLength(0);
    clock.advanceSeconds(RETRY_DELAYS_S[0]!);
    await t.services.webhookDeliveries.runDue();
    [delivery] = await deliveries(hook.key, hook.id);
    expect(delivery).toMatchObject({ attempt: 2, http_status: 500 });
    expect(Buffer.byteLength(delivery.response_excerpt)).toBe(1024);
    clock.advanceSeconds(RETRY_DELAYS_S[1]!);
    await t.services.webhookDeliveries.runDue();
    [delivery] = await deliveries(hook.key, hook.id);
    expect(delivery).toMatchObject({ attempt: 3, state: 'retrying', http_status: null, error: 'no answer within 1.5 s' });
  });

  it('410 disables the endpoint, fails its pending deliveries and queues no more', async () => {
    const hook = await endpoint('/gone');
    receiver.script('/gone', { status: 410, body: 'gone' });
    await t.services.apiTokens.create(hook.account.id, 'first', 3600);
    await t.services.webhookDeliveries.runDue();
    await t.services.apiTokens.create(hook.account.id, 'after the 410', 3600); // the endpoint is disabled: nothing queued
    const all = await deliveries(hook.key, hook.id);
    expect(all).toHaveLength(1);
    expect(all[0]).toMatchObject({ state: 'failed', http_status: 410, next_attempt_at: null, error: expect.stringMatching(/410.*disabled/) });
    const got = (await t.api.get(`/v1/webhooks/${hook.id}`).set(bearer(hook.key)).expect(200)).body;
    expect(got).toMatchObject({ enabled: false, health: { state: 'disabled', consecutive_failures: 1 } });
    expect(got.disabled_reason).toMatch(/410 Gone/);
    const events = (await t.api.get(`/v1/events?resource_type=webhook&resource_id=${hook.id}`).set(bearer(hook.key)).expect(200)).body.data;
    expect(events.at(-1)).toMatchObject({ type: 'webhook.updated', data: { changed: ['enabled'], enabled: false } });
    expect(await t.services.database.prisma.alert.count({ where: { accountId: hook.account.id, kind: 'webhook_failing', resourceId: hook.id } })).toBe(1);
    clock.advanceSeconds(3600);
    await t.services.webhookDeliveries.runDue();
    expect(receiver.requests('/gone')).toHaveLength(1);
  });

  it('410 also stops deliveries that were already queued', async () => {
    const hook = await endpoint('/gone-later');
    receiver.script('/gone-later', { status: 500 });
    await t.services.apiTokens.create(hook.account.id, 'one', 3600);
    await t.services.webhookDeliveries.runDue(); // 500: retrying
    receiver.script('/gone-later', { status: 410 });
    await t.services.apiTokens.create(hook.account.id, 'two', 3600);
    await t.services.webhookDeliveries.runDue(); // the new one: 410
    const all = await deliveries(hook.key, hook.id);
    expect(all.map((d) => d.state)).toEqual(['failed', 'failed']);
    expect(all[1].error).toMatch(/disabled/);
    clock.advanceSeconds(3600);
    await t.services.webhookDeliveries.runDue();
    expect(receiver.requests('/gone-later')).toHaveLength(2);
  });

  it(`gives up after ${MAX_ATTEMPTS} attempts over about three days; ${FAILING_ALERT_AFTER} failures in a row raise webhook_failing`, async () => {
    const hook = await endpoint('/down');
    receiver.script('/down', ...Array.from({ length: MAX_ATTEMPTS + 1 }, () => ({ status: 502 })));
    await t.services.apiTokens.create(hook.account.id, 'never arrives', 3600);
    const started = clock.now().getTime();
    for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
      await t.services.webhookDeliveries.runDue();
      const alerts = await t.services.database.prisma.alert.count({ where: { accountId: hook.account.id, kind: 'webhook_failing' } });
      expect({ attempt, alerts }).toEqual({ attempt, alerts: attempt >= FAILING_ALERT_AFTER ? 1 : 0 });
      const [delivery] = await deliveries(hook.key, hook.id);
      expect(delivery.attempt).toBe(attempt);
      if (attempt < MAX_ATTEMPTS) clock.set(new Date(delivery.next_attempt_at));
    }
    const [delivery] = await deliveries(hook.key, hook.id);
    expect(delivery).toMatchObject({ state: 'failed', attempt: MAX_ATTEMPTS, http_status: 502, next_attempt_at: null });
    const days = (clock.now().getTime() - started) / 86_400_000;
    expect(days).toBeGreaterThan(2.5);
    expect(days).toBeLessThan(3.5);
    expect(receiver.requests('/down')).toHaveLength(MAX_ATTEMPTS);
    expect((await t.api.get(`/v1/webhooks/${hook.id}`).set(bearer(hook.key)).expect(200)).body.health).toMatchObject({ state: 'failing', consecutive_failures: MAX_ATTEMPTS });
    clock.advanceSeconds(86_400);
    await t.services.webhookDeliveries.runDue();
    expect(receiver.requests('/down')).toHaveLength(MAX_ATTEMPTS);
  });

  it('deleting the endpoint stops its deliveries (pending and retrying)', async () => {
    const hook = await endpoint('/deleted');
    receiver.script('/deleted', { status: 500 });
    await t.services.apiTokens.create(hook.account.id, 'retrying one', 3600);
    await t.services.webhookDeliveries.runDue();
    await t.services.apiTokens.create(hook.account.id, 'pending one', 3600);
    expect(await deliveriesOf(t, hook.id)).toHaveLength(2);
    await t.api.delete(`/v1/webhooks/${hook.id}`).set(bearer(hook.key)).expect(200);
    expect(await deliveriesOf(t, hook.id)).toHaveLength(0);
    clock.advanceSeconds(3600);
    await t.services.webhookDeliveries.runDue();
    expect(receiver.requests('/deleted')).toHaveLength(1);
  });

  it('POST /v1/webhooks/{id}/test sends webhook.test now to that endpoint only and answers with the receiver\'s response', async () => {
    const hook = await endpoint('/tested', ['snapshot.created'], 'localhost');
    // a second endpoint of the account that subscribes to webhook.test gets nothing from this test
    const bystander = await t.api.post('/v1/webhooks').set(bearer(hook.key))
      .send({ name: 'bystander', url: `https://localhost:${receiver.port}/bystander`, events: ['webhook.test'] }).expect(200);
    receiver.script('/tested', { status: 202, body: 'accepted by the receiver' }, { status: 500, body: 'broken' });
    const answer = await t.api.post(`/v1/webhooks/${hook.id}/test`).set(bearer(hook.key)).expect(200);
    expect(answer.body).toMatchObject({
      object: 'webhook_delivery', webhook_id: hook.id, event_type: 'webhook.test', state: 'succeeded', attempt: 1,
      http_status: 202, response_excerpt: 'accepted by the receiver', error: null,
    });
    const [received] = receiver.requests('/tested');
    expect(received!.headers['webhook-id']).toBe(answer.body.id);
    expect(verified(hook.secret, received!, clock.now())).toMatchObject({ type: 'webhook.test', data: { type: 'webhook.test', resource_id: hook.id } });
    const events = (await t.api.get(`/v1/events?resource_type=webhook&resource_id=${hook.id}`).set(bearer(hook.key)).expect(200)).body.data;
    expect(events.at(-1)).toMatchObject({ type: 'webhook.test', sequence: answer.body.event_sequence, data: { name: `receiver /tested` } });

    const failed = await t.api.post(`/v1/webhooks/${hook.id}/test`).set(bearer(hook.key)).expect(200);
    expect(failed.body).toMatchObject({ state: 'retrying', http_status: 500, response_excerpt: 'broken' });
    expect(failed.body.next_attempt_at).not.toBeNull();
    await t.services.webhookDeliveries.runDue(); // the failed test is not due again yet, and the bystander got nothing
    expect(receiver.requests('/tested')).toHaveLength(2);
    expect(receiver.requests('/bystander')).toHaveLength(0);
    expect(await deliveriesOf(t, bystander.body.data.id)).toHaveLength(0);
    expect((await deliveries(hook.key, hook.id)).map((d) => [d.event_type, d.state])).toEqual([['webhook.test', 'retrying'], ['webhook.test', 'succeeded']]);
  });

  it('lists the last 50 deliveries, newest first', async () => {
    const hook = await endpoint('/many', ['device_key.deleted']);
    for (let i = 0; i < 55; i++) {
      await new PrismaTransactions(t.services.database.prisma).run((tx) =>
        appendEvent(tx, hook.account.id, { type: 'device_key.deleted', resourceType: 'device_key', resourceId: NOWHERE, data: {} }));
    }
    const listed = await deliveries(hook.key, hook.id);
    expect(listed).toHaveLength(50);
    const sequences = listed.map((d) => d.event_sequence);
    expect(sequences).toEqual([...sequences].sort((a, b) => b - a));
    expect(listed.every((d) => d.state === 'pending' && d.attempt === 1)).toBe(true);
    await t.services.webhookDeliveries.runDue();
    expect(receiver.requests('/many')).toHaveLength(55);
    expect(new Set(receiver.requests('/many').map((r) => r.headers['webhook-id'])).size).toBe(55);
  });
});

// ---- restart: the outbox is the table ----

describe('webhook deliveries across a restart', () => {
  const clock = new ManualClock();
  let fresh: FreshDatabase;
  beforeAll(async () => {
    fresh = await freshDatabaseUrl();
  });
  afterAll(() => fresh.cleanup());

  /** A service on `fresh` (same database and data dir, so the same installation secret). */
  async function start(): Promise<{ services: Services; api: (method: 'get' | 'post', path: string) => request.Test; close(): Promise<void> }> {
    const database = await openDatabase({ url: fresh.url, dataDir: fresh.dataDir });
    const config = loadConfig({ KISTE_DATA_DIR: fresh.dataDir, KISTE_REQUESTS_PER_MINUTE: '100000', KISTE_WEBHOOKS_ALLOW_PRIVATE_TARGETS_UNSAFE: '1' });
    const services = createServices(config, database, { clock, webhooks: { ca: tls.cert, timeoutMs: 1_500, random: () => 0.5 } });
    const app = await createApp(services, pino({ level: 'silent' }));
    return { services, api: (method, path) => request(app)[method](path).expect(checkContract), close: () => database.close() };
  }

  it('loses no pending, retrying or claimed delivery when the service stops and another starts', async () => {
    const first = await start();
    const owner = await first.services.accounts.create('restart@example.com', 'a long enough password');
    const key = (await first.services.apiTokens.create(owner.id, 'restart', 3600)).token;
    const created = await first.api('post', '/v1/webhooks').set(bearer(key))
      .send({ name: 'restart', url: `https://localhost:${receiver.port}/restart`, events: ['api_token.created'] }).expect(200);
    const { secret } = created.body;
    receiver.script('/restart', { status: 500 });
    await first.services.apiTokens.create(owner.id, 'retrying', 3600);
    await first.services.webhookDeliveries.runDue(); // one attempt, 500: retrying
    await first.services.apiTokens.create(owner.id, 'pending 1', 3600);
    await first.services.apiTokens.create(owner.id, 'pending 2', 3600);
    await first.services.apiTokens.create(owner.id, 'claimed by the first process, which then dies', 3600);
    const db = first.services.database.prisma;
    const claimed = (await db.webhookDelivery.findMany({ where: { state: 'pending' }, orderBy: { eventSequence: 'desc' }, take: 1 }))[0]!;
    await db.webhookDelivery.update({ where: { id: claimed.id }, data: { nextAttemptAt: new Date(clock.now().getTime() + 60_000) } });
    const queued = await db.webhookDelivery.findMany({ orderBy: { eventSequence: 'asc' } });
    expect(queued.map((d) => d.state)).toEqual(['retrying', 'pending', 'pending', 'pending']);
    await first.close();

    const second = await start();
    try {
      await second.services.webhookDeliveries.runDue(); // the two pending ones
      expect(receiver.requests('/restart')).toHaveLength(3);
      clock.advanceSeconds(61); // the retry and the dead process's claim are due
      await second.services.webhookDeliveries.runDue();
      const received = receiver.requests('/restart');
      expect(received).toHaveLength(5);
      expect(new Set(received.slice(1).map((r) => r.headers['webhook-id']))).toEqual(new Set(queued.map((d) => d.id)));
      for (const r of received.slice(1)) verified(secret, r, clock.now()); // the secret still opens after the restart
      const after = await second.services.database.prisma.webhookDelivery.findMany({ orderBy: { eventSequence: 'asc' } });
      expect(after.map((d) => [d.id, d.state])).toEqual(queued.map((d) => [d.id, 'succeeded']));
    } finally {
      await second.close();
    }
  });
});
