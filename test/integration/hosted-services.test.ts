// Hosted services' records (issue 23, step 1): publish, list, read and remove a machine's port; the
// URL in each mode (host names under *.localhost by default on a loopback listener, a wildcard
// domain, a path of an origin of their own) with a random key fixed at creation; the status as it is
// (a stopped machine, a running one whose port does not answer); events; and the refusals — bad
// names and ports, a name or port taken, the limit per machine, an unknown machine or another
// account's, an installation with no address for services — each in the envelope, nothing stored.
import { loadConfig } from '../../src/config';
import { serviceKeyOf } from '../../src/domain/service-addresses';
import type { Account } from '../../src/store/accounts';
import { apiKeyFor, bearer, createAccount, startTestService, type TestService } from '../support/harness';
import { insertInstance } from '../support/instance-rows';

describe('hosted services', () => {
  let t: TestService;
  let account: Account;
  let key: string;

  beforeAll(async () => {
    t = await startTestService();
    account = await createAccount(t);
    key = await apiKeyFor(t, account);
    await insertInstance(t, account, 'web', 'stopped', { desiredState: 'stopped' });
    await insertInstance(t, account, 'live', 'running');
  });
  afterAll(() => t.close());

  const publish = (machine: string, body: object, token = key) => t.api.post(`/v1/instances/${machine}/services`).set(bearer(token)).send(body);
  const stored = () => t.services.database.prisma.hostedService.count({ where: { accountId: account.id } });

  it('publishes a port at a URL of its own under *.localhost, private to the account by default, and says what it is now', async () => {
    const created = await publish('web', { name: 'app', port: 5173, description: 'the dev server' }).expect(200);
    expect(created.body).toMatchObject({
      instance_name: 'web', name: 'app', port: 5173, protocol: 'http', path_prefix: '', websocket: true,
      description: 'the dev server', status: 'stopped', access: 'account',
    });
    const url = new URL(created.body.public_url);
    expect(url.origin).toMatch(/^http:\/\/app-[a-z2-7]{10}\.localhost:\d+$/);
    expect(url.pathname).toBe('/');
    // The key is the URL's part no one can guess, fixed at creation: reading it again gives the same URL.
    const read = await t.api.get('/v1/instances/web/services/app').set(bearer(key)).expect(200);
    expect(read.body.public_url).toBe(created.body.public_url);
    const services = t.services.config.services!;
    expect(serviceKeyOf(services, url.host, '/')).toBe(url.hostname.split('.')[0]!.slice('app-'.length));

    // A running machine whose port nothing listens on (this one has no guest at all): unreachable.
    const running = await publish('live', { name: 'api', port: 8000, access: 'public' }).expect(200);
    expect(running.body).toMatchObject({ status: 'unreachable', access: 'public', description: '' });

    const listed = await t.api.get('/v1/instances/web/services').set(bearer(key)).expect(200);
    expect(listed.body).toMatchObject({ object: 'list', has_more: false });
    expect(listed.body.data.map((service: { name: string }) => service.name)).toEqual(['app']);

    const events = (await t.api.get('/v1/events?resource_type=hosted_service').set(bearer(key)).expect(200)).body.data as { type: string; data: unknown }[];
    expect(events.map((event) => event.type)).toEqual(['service.created', 'service.created']);
    expect(events[0]!.data).toEqual({ name: 'app', port: 5173, instance_name: 'web', public_url: created.body.public_url });
  });

  it('removes a service: an event, the URL gone, a second delete S10', async () => {
    const created = await publish('web', { name: 'gone', port: 3000 }).expect(200);
    const deleted = await t.api.delete('/v1/instances/web/services/gone').set(bearer(key)).expect(200);
    expect(deleted.body).toEqual({ id: created.body.id, object: 'hosted_service', deleted: true });
    expect((await t.api.delete('/v1/instances/web/services/gone').set(bearer(key)).expect(404)).body.error.code).toBe('S10');
    expect((await t.api.get('/v1/instances/web/services/gone').set(bearer(key)).expect(404)).body.error.code).toBe('S10');
    const events = (await t.api.get(`/v1/events?resource_type=hosted_service&resource_id=${created.body.id}`).set(bearer(key)).expect(200)).body.data as { type: string }[];
    expect(events.map((event) => event.type)).toEqual(['service.created', 'service.deleted']);
  });

  it('refuses bad names and ports, a name or port taken, an unknown machine and another account\'s, in the envelope, storing nothing', async () => {
    const before = await stored();
    for (const body of [
      { name: 'app2', port: 0 }, { name: 'app2', port: 65536 }, { name: 'app2', port: '80' }, { name: 'App', port: 80 }, { name: '-app', port: 80 },
      { name: 'a'.repeat(53), port: 80 }, { name: 'app2' }, { port: 80 }, { name: 'app2', port: 80, extra: true }, { name: 'app2', port: 80, access: 'everyone' },
    ]) {
      const refused = await publish('web', body).expect(400);
      expect(refused.body.error.code).toBe('P01');
    }
    expect((await publish('web', { name: 'app', port: 9999 }).expect(409)).body.error).toMatchObject({ code: 'S11', param: 'name' });
    expect((await publish('web', { name: 'other', port: 5173 }).expect(409)).body.error.code).toBe('S11');
    expect((await publish('nowhere', { name: 'x', port: 80 }).expect(404)).body.error.code).toBe('K01');
    const stranger = await apiKeyFor(t, await createAccount(t));
    expect((await publish('web', { name: 'x', port: 81 }, stranger).expect(404)).body.error.code).toBe('K01');
    expect((await t.api.get('/v1/instances/web/services/app').set(bearer(stranger)).expect(404)).body.error.code).toBe('K01');
    expect((await t.api.delete('/v1/instances/web/services/app').set(bearer(stranger)).expect(404)).body.error.code).toBe('K01');
    expect(await stored()).toBe(before);
    expect((await t.api.get('/v1/instances/web/services/app').set(bearer(key)).expect(200)).body.name).toBe('app'); // still there
  });

  it('keeps a machine to its limit of services, also when they are asked for at once (L14)', async () => {
    await insertInstance(t, account, 'busy', 'stopped', { desiredState: 'stopped' });
    const limit = t.services.limits.servicesPerMachine;
    const answers = await Promise.all(Array.from({ length: limit + 5 }, (_, n) => publish('busy', { name: `s${n}`, port: 3000 + n })));
    expect(answers.filter((answer) => answer.status === 200)).toHaveLength(limit);
    expect(answers.filter((answer) => answer.status === 409).map((answer) => answer.body.error.code)).toEqual(Array(5).fill('L14'));
    expect(await t.services.database.prisma.hostedService.count({ where: { instance: { name: 'busy', accountId: account.id } } })).toBe(limit);
  });

  it('goes with its machine', async () => {
    const machine = await insertInstance(t, account, 'short', 'stopped', { desiredState: 'stopped' });
    await publish('short', { name: 'app', port: 80 }).expect(200);
    await t.services.database.prisma.instance.delete({ where: { id: machine.id } });
    expect(await t.services.database.prisma.hostedService.count({ where: { instanceId: machine.id } })).toBe(0);
  });
});

describe('where services are published', () => {
  const own = { KISTE_BASE_URL: 'https://kiste.example.com' };

  it('under a wildcard domain, or a path of an origin of their own, and nowhere without either on a public address (S12)', async () => {
    for (const [env, expected] of [
      [{ ...own, KISTE_SERVICES_DOMAIN: 'svc.example.com' }, /^https:\/\/app-([a-z2-7]{10})\.svc\.example\.com\/$/],
      [{ ...own, KISTE_SERVICES_URL: 'https://svc.example.net' }, /^https:\/\/svc\.example\.net\/s\/([a-z2-7]{10})\/$/],
    ] as const) {
      const t = await startTestService({ env });
      try {
        const account = await createAccount(t);
        const token = await apiKeyFor(t, account);
        await insertInstance(t, account, 'web', 'stopped', { desiredState: 'stopped' });
        const created = await t.api.post('/v1/instances/web/services').set(bearer(token)).send({ name: 'app', port: 80 }).expect(200);
        const key = expected.exec(created.body.public_url)?.[1];
        expect(key).toBeDefined();
        expect(created.body.path_prefix).toBe('KISTE_SERVICES_URL' in env ? `/s/${key}` : '');
        const url = new URL(created.body.public_url);
        expect(serviceKeyOf(t.services.config.services!, url.host, url.pathname)).toBe(key);
        expect(serviceKeyOf(t.services.config.services!, 'kiste.example.com', url.pathname)).toBeNull(); // kiste's own host serves no service
      } finally {
        await t.close();
      }
    }
    const t = await startTestService({ env: own });
    try {
      const account = await createAccount(t);
      await insertInstance(t, account, 'web', 'stopped', { desiredState: 'stopped' });
      const refused = await t.api.post('/v1/instances/web/services').set(bearer(await apiKeyFor(t, account))).send({ name: 'app', port: 80 }).expect(409);
      expect(refused.body.error.code).toBe('S12');
      expect(refused.body.error.hint).toMatch(/KISTE_SERVICES_DOMAIN.*KISTE_SERVICES_URL/);
      expect(await t.services.database.prisma.hostedService.count()).toBe(0);
    } finally {
      await t.close();
    }
  });

  it('refuses to start where published apps would share a host with kiste\'s own addresses', () => {
    expect(() => loadConfig({ ...own, KISTE_SERVICES_DOMAIN: 'example.com' })).toThrow(/holds kiste\.example\.com/);
    expect(() => loadConfig({ ...own, KISTE_SERVICES_DOMAIN: 'svc.example.com', KISTE_CONSOLE_URL: 'https://console.svc.example.com' })).toThrow(/holds console\.svc\.example\.com/);
    expect(() => loadConfig({ ...own, KISTE_SERVICES_URL: 'https://kiste.example.com' })).toThrow(/host of kiste's own/);
    expect(() => loadConfig({ ...own, KISTE_DESKTOP_URL: 'https://desk.example.com', KISTE_SERVICES_URL: 'https://desk.example.com:8443' })).toThrow(/host of kiste's own/);
    expect(() => loadConfig({ ...own, KISTE_SERVICES_URL: 'https://svc.example.net/apps' })).toThrow(/no path/);
    expect(() => loadConfig({ ...own, KISTE_SERVICES_DOMAIN: 'svc.example.com', KISTE_SERVICES_URL: 'https://svc.example.net' })).toThrow(/not both/);
    expect(() => loadConfig({ ...own, KISTE_SERVICES_DOMAIN: 'bad_domain!' })).toThrow(/DNS name/);
    // A loopback console at localhost: no default under localhost (its cookies would be the apps' too).
    expect(loadConfig({ KISTE_BASE_URL: 'http://localhost:8080' }).services).toBeNull();
    expect(loadConfig({}).services).toEqual({ mode: 'subdomain', scheme: 'http', domain: 'localhost', port: 8080 });
  });
});
