// Public platform endpoints (health, status page data, the OpenAPI document, error pages) and the
// signed-in account views GET /v1/me and GET /v1/status.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { ManualClock, SshKeyFactory } from '../fixtures/account-access';
import { apiKeyFor, bearer, browserFor, cliTokenFor, createAccount, startTestService, TestService } from '../support/harness';
import { insertInstance } from '../support/instance-rows';
import { ERRORS, ErrorCode } from '../../src/generated/errors';
import { errorEnvelope, KisteError } from '../../src/errors';

const SwaggerParser = require('@apidevtools/swagger-parser') as { validate(api: object): Promise<{ openapi: string; info: { title: string } }> };

const ALL_CODES = Object.keys(ERRORS) as ErrorCode[];

/** GET of an error page through the contract-checked api: 200, an HTML answer. */
async function errorPage(t: TestService, path: string) {
  const res = await t.api.get(path).expect(200);
  expect(res.headers['content-type']).toMatch(/^text\/html/);
  expect(res.text).toMatch(/^<!doctype html>/i);
  return res;
}

function escapeHtml(value: string): string {
  return value.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

describe('platform', () => {
  let t: TestService;
  const clock = new ManualClock();
  const keys = new SshKeyFactory();

  beforeAll(async () => {
    clock.set(new Date(Math.floor(Date.now() / 60_000) * 60_000 + 5_000)); // 5 s into a minute
    t = await startTestService({ clock });
  });
  beforeEach(() => {
    // A host that can start machines (the real jail and image builds are the machine tests' subject):
    // each test below that is about machines being unavailable says how.
    jest.spyOn(t.services.machineHost, 'isolationProblem').mockResolvedValue(null);
    jest.spyOn(t.services.machineHost, 'currentImage').mockReturnValue({ profile: 'minimal', version: 'v2026.01.01-0123abcd', artifactKey: 'k' });
  });
  afterEach(() => jest.restoreAllMocks());
  afterAll(async () => {
    keys.cleanup();
    await t.close();
  });

  describe('GET /healthz', () => {
    it('answers 200 without sign-in', async () => {
      const res = await t.api.get('/healthz').expect(200);
      expect(res.body).toEqual({ status: 'ok', service: 'kiste', region: null });
      expect(res.headers['x-request-id']).toBeTruthy();
    });

    it('ignores credentials, even broken ones', async () => {
      await t.api.get('/healthz').set('authorization', 'Bearer kiste_key_not_a_real_key').expect(200);
      await t.api.get('/healthz').set('authorization', 'garbage').expect(200);
    });

    it('keeps a client x-request-id', async () => {
      const res = await t.api.get('/healthz').set('x-request-id', 'probe-123').expect(200);
      expect(res.headers['x-request-id']).toBe('probe-123');
    });
  });

  describe('GET /status.json', () => {
    it('answers without sign-in: components, uptime from heartbeats, incidents and maintenance', async () => {
      await t.services.platform.heartbeat();
      const res = await t.api.get('/status.json').expect(200);
      expect(res.headers['cache-control']).toBe('no-cache');
      expect(res.body).toEqual({
        object: 'platform_status',
        status: 'operational',
        updated_at: clock.now().toISOString(),
        components: [
          { name: 'api', status: 'operational' },
          { name: 'database', status: 'operational' },
          { name: 'machines', status: 'operational' },
        ],
        uptime_7d_percent: 100,
        incidents: [],
        maintenance: [],
        open_signup: false,
      });
    });

    it('says whether sign-up is open (the console offers it then)', async () => {
      const open = await startTestService({ env: { KISTE_OPEN_SIGNUP: 'true' } });
      try {
        expect((await open.api.get('/status.json').expect(200)).body.open_signup).toBe(true);
      } finally {
        await open.close();
      }
    });

    it('uptime counts the minutes without a heartbeat', async () => {
      // one beat in this minute (previous test); the next minute passes without one
      clock.advanceSeconds(60);
      expect((await t.api.get('/status.json').expect(200)).body.uptime_7d_percent).toBe(50);
      await t.services.platform.heartbeat();
      expect((await t.api.get('/status.json').expect(200)).body.uptime_7d_percent).toBe(100);
      await t.services.platform.heartbeat(); // a second beat in the same minute counts once
      expect((await t.api.get('/status.json').expect(200)).body.uptime_7d_percent).toBe(100);
      clock.advanceSeconds(120);
      await t.services.platform.heartbeat();
      // beats in minutes 0, 1 and 3 of 4
      expect((await t.api.get('/status.json').expect(200)).body.uptime_7d_percent).toBe(75);
    });

    it('only the last seven days count; older heartbeats are pruned', async () => {
      clock.advanceSeconds(8 * 24 * 3600);
      await t.services.platform.heartbeat();
      expect((await t.api.get('/status.json').expect(200)).body.uptime_7d_percent).toBe(100);
      expect(await t.services.database.prisma.serviceHeartbeat.count()).toBe(1);
    });

    it('ignores a credential', async () => {
      const account = await createAccount(t);
      await t.api.get('/status.json').set(bearer(await apiKeyFor(t, account))).expect(200);
    });
  });

  describe('GET /openapi.json', () => {
    it('is the parsed openapi.yaml, served without sign-in', async () => {
      const res = await t.api.get('/openapi.json').expect(200);
      expect(res.headers['content-type']).toMatch(/^application\/json/);
      expect(res.headers['cache-control']).toMatch(/max-age=\d+/);
      const yamlDocument = parseYaml(readFileSync(join(__dirname, '../../openapi.yaml'), 'utf8'));
      expect(res.body).toEqual(yamlDocument);
    });

    it('validates as an OpenAPI 3.1 document (swagger-parser)', async () => {
      const res = await t.api.get('/openapi.json').expect(200);
      expect(res.body.openapi).toMatch(/^3\.1\.\d+$/);
      const validated = await SwaggerParser.validate(structuredClone(res.body));
      expect(validated.openapi).toBe(res.body.openapi);
      expect(validated.info.title).toBe(res.body.info.title);
    });

    it('registers exactly the codes the service knows, in the registry and in the ErrorCode enum', async () => {
      const res = await t.api.get('/openapi.json').expect(200);
      const registry = res.body['x-kiste-errors'] as { code: string; type: string; status: number }[];
      expect(registry.map((entry) => entry.code).sort()).toEqual([...ALL_CODES].sort());
      expect([...res.body.components.schemas.ErrorCode.enum].sort()).toEqual([...ALL_CODES].sort());
      for (const entry of registry) expect(ERRORS[entry.code as ErrorCode]).toMatchObject({ type: entry.type, status: entry.status });
      // types are unique: clients branch on them
      expect(new Set(registry.map((entry) => entry.type)).size).toBe(registry.length);
    });
  });

  describe('GET /docs/errors/{code}', () => {
    it.each(ALL_CODES)('%s has an HTML page naming its type, status and hint', async (code) => {
      const res = await errorPage(t, `/docs/errors/${code}`);
      const entry = ERRORS[code];
      expect(res.text).toContain(`Error ${code}`);
      expect(res.text).toContain(escapeHtml(entry.type));
      expect(res.text).toContain(`<strong>${entry.status}</strong>`);
      expect(res.text).toContain(escapeHtml(entry.message));
      expect(res.text).toContain(escapeHtml(entry.hint));
    });

    it.each(['Z99', 'P99', 'p01', 'A1', 'A010'])('an unknown code %s → 400 P01 param code', async (code) => {
      const res = await t.api.get(`/docs/errors/${code}`).expect(400);
      expect(res.body.error).toMatchObject({ code: 'P01', param: 'code' });
    });

    it("every code's docs_url is its page on this service", async () => {
      for (const code of ALL_CODES) {
        const { docs_url: docsUrl } = errorEnvelope(new KisteError(code), null, t.config.baseUrl).error;
        expect(docsUrl).toBe(`${t.config.baseUrl}/docs/errors/${code}`);
      }
    });

    it('docs_url of real error answers leads to the page of that code', async () => {
      const answers = [
        await t.api.get('/v1/me').expect(401), // A01
        await t.api.get('/v1/me').set(bearer('kiste_key_unknown')).expect(401), // A02
        await t.api.get('/v1/no-such-route').expect(404), // P05
        await t.api.get('/docs/errors/Z99').expect(400), // P01
        await t.api.put('/healthz').expect(405), // P06
      ];
      expect(answers.map((res) => res.body.error.code)).toEqual(['A01', 'A02', 'P05', 'P01', 'P06']);
      for (const res of answers) {
        const { code, docs_url: docsUrl } = res.body.error;
        const url = new URL(docsUrl);
        expect(url.origin + url.pathname).toBe(`${t.config.baseUrl}/docs/errors/${code}`);
        const page = await errorPage(t, url.pathname);
        expect(page.text).toContain(`Error ${code}`);
      }
    });
  });

  describe('GET /v1/me', () => {
    it('answers the user for every credential kind', async () => {
      const account = await createAccount(t, `Mixed.Case.${Date.now()}@Example.com`);
      const expected = {
        id: account.id,
        object: 'user',
        email: account.email,
        name: null,
        created_at: account.createdAt.toISOString(),
        sign_in_locked: false,
      };
      expect(account.email).toBe(account.email.toLowerCase());
      expect((await t.api.get('/v1/me').set(bearer(await cliTokenFor(t, account))).expect(200)).body).toEqual(expected);
      expect((await t.api.get('/v1/me').set(bearer(await apiKeyFor(t, account))).expect(200)).body).toEqual(expected);
      const browser = await browserFor(t, account);
      expect((await t.api.get('/v1/me').set('cookie', browser.cookie).expect(200)).body).toEqual(expected);
    });

    it('refuses a missing (A01), unknown (A02) or malformed (A02 param authorization) credential', async () => {
      expect((await t.api.get('/v1/me').expect(401)).body.error.code).toBe('A01');
      expect((await t.api.get('/v1/me').set(bearer('kiste_cli_unknown')).expect(401)).body.error.code).toBe('A02');
      expect((await t.api.get('/v1/me').set(bearer('something-else')).expect(401)).body.error.code).toBe('A02');
      const basic = await t.api.get('/v1/me').set('authorization', 'Basic dXNlcjpwYXNz').expect(401);
      expect(basic.body.error).toMatchObject({ code: 'A02', param: 'authorization' });
      expect((await t.api.get('/v1/me').set('cookie', 'kiste_session=kiste_web_forged').expect(401)).body.error.code).toBe('A02');
    });
  });

  describe('GET /v1/status', () => {
    it('answers limits, usage and features; usage follows API keys and device keys', async () => {
      const account = await createAccount(t);
      const cli = await cliTokenFor(t, account);
      const status = async () => (await t.api.get('/v1/status').set(bearer(cli)).expect(200)).body;

      const first = await status();
      expect(first).toMatchObject({ object: 'status', status: 'ok', version: t.config.version });
      expect(first.machines).toEqual({ available: true, cause: null, reason: null, hint: null });
      expect(first.limits).toMatchObject({ api_tokens: 10, device_keys: t.services.limits.deviceKeys, webhooks: 10, ssh_tunnels: 32, metrics_per_minute: 40 });
      expect(first.limits.requests_per_minute).toBe(t.config.requestsPerMinute);
      expect(first.usage).toEqual({ machines: 0, running_machines: 0, disk_mib: 0, api_tokens: 0, device_keys: 0, webhooks: 0, ssh_tunnels: 0 });
      expect(first.features.open_signup).toBe(false);

      const created = [];
      for (let i = 0; i < 3; i++) {
        created.push((await t.api.post('/v1/api-tokens').set(bearer(cli)).send({ label: `k${i}`, expires_in_seconds: 300 }).expect(200)).body);
      }
      expect((await status()).usage.api_tokens).toBe(3);
      const deviceKey = await t.api.post('/v1/device-keys').set(bearer(cli)).send({ name: 'd', public_key: keys.generate('ed25519').publicKey }).expect(200);
      await t.api.post('/v1/device-keys').set(bearer(cli)).send({ name: 'e', public_key: keys.generate('ecdsa', 256).publicKey }).expect(200);
      expect((await status()).usage).toMatchObject({ api_tokens: 3, device_keys: 2 });

      await t.api.delete(`/v1/api-tokens/${created[0].data.id}`).set(bearer(cli)).expect(200);
      await t.api.delete(`/v1/device-keys/${deviceKey.body.id}`).set(bearer(cli)).expect(200);
      expect((await status()).usage).toMatchObject({ api_tokens: 2, device_keys: 1 });

      // expired keys are not active any more; the API key's own view agrees
      clock.advanceSeconds(301);
      expect((await status()).usage).toMatchObject({ api_tokens: 0, device_keys: 1 });
      const apiKey = await apiKeyFor(t, account);
      expect((await t.api.get('/v1/status').set(bearer(apiKey)).expect(200)).body.usage).toMatchObject({ api_tokens: 1, device_keys: 1 });
    });

    it('says while machines cannot start, and why: image being built or failed, host that cannot jail them', async () => {
      const cli = await cliTokenFor(t, await createAccount(t));
      const status = async () => (await t.api.get('/v1/status').set(bearer(cli)).expect(200)).body;
      const machinesComponent = async () => {
        const body = (await t.api.get('/status.json').expect(200)).body;
        return { status: body.status, machines: body.components.find((c: { name: string }) => c.name === 'machines').status };
      };
      const currentImage = jest.spyOn(t.services.machineHost, 'currentImage').mockReturnValue(null);

      t.services.compute.inProcess!.machineHost.setBuildState(t.config.imageProfile, { state: 'building', step: '2/7 root filesystem — installing essential packages: packages 30 of 69 unpacked', error: null });
      expect(await status()).toMatchObject({
        status: 'degraded',
        machines: { available: false, cause: 'image_building', reason: 'The machine image is still being built (step 2/7 root filesystem — installing essential packages: packages 30 of 69 unpacked)', hint: ERRORS.K06.hint },
      });
      expect(await machinesComponent()).toEqual({ status: 'degraded', machines: 'degraded' });

      t.services.compute.inProcess!.machineHost.setBuildState(t.config.imageProfile, { state: 'failed', step: null, error: 'mmdebstrap exited with 1' });
      expect((await status()).machines).toMatchObject({ available: false, cause: 'image_failed', reason: 'The machine image could not be built: mmdebstrap exited with 1' });
      expect(await machinesComponent()).toEqual({ status: 'degraded', machines: 'outage' });

      // The host comes first: without a jail no image would help (and a start answers K09, not K06).
      jest.spyOn(t.services.machineHost, 'isolationProblem').mockResolvedValue({ reason: 'setfacl is not installed', hint: 'Install it: apt-get install acl' });
      expect((await status()).machines).toEqual({
        available: false,
        cause: 'isolation',
        reason: 'This server cannot run machines isolated from the host: setfacl is not installed',
        hint: 'Install it: apt-get install acl',
      });
      expect(await machinesComponent()).toEqual({ status: 'degraded', machines: 'outage' });
      currentImage.mockRestore();
    });

    it('counts machines as the machine limits do: every one, running = driven to run, disk summed', async () => {
      // Rows without VMs (machine tests check the same against real guests and tunnels).
      const account = await createAccount(t);
      const cli = await cliTokenFor(t, account);
      await insertInstance(t, account, 'up', 'running', { diskMib: 4096 });
      await insertInstance(t, account, 'booting', 'starting', { diskMib: 3072 });
      await insertInstance(t, account, 'parked', 'stopped', { desiredState: 'stopped', diskMib: 2048 });
      await insertInstance(t, account, 'going', 'deleting', { desiredState: 'deleted', diskMib: 1024 });
      const usage = (await t.api.get('/v1/status').set(bearer(cli)).expect(200)).body.usage;
      expect(usage).toMatchObject({ machines: 4, running_machines: 2, disk_mib: 4096 + 3072 + 2048 + 1024, ssh_tunnels: 0 });
      expect(await t.services.instances.list(account.id)).toHaveLength(usage.machines);
    });

    it('counts only the caller’s account', async () => {
      const a = await createAccount(t);
      const b = await createAccount(t);
      await apiKeyFor(t, b);
      await apiKeyFor(t, b);
      await insertInstance(t, b, 'theirs', 'running');
      const usage = (await t.api.get('/v1/status').set(bearer(await cliTokenFor(t, a))).expect(200)).body.usage;
      expect(usage).toMatchObject({ api_tokens: 0, machines: 0, running_machines: 0, disk_mib: 0 });
    });

    it('reports open sign-up when the operator enabled it', async () => {
      const open = await startTestService({ env: { KISTE_OPEN_SIGNUP: '1' } });
      try {
        const account = await createAccount(open);
        const res = await open.api.get('/v1/status').set(bearer(await cliTokenFor(open, account))).expect(200);
        expect(res.body.features.open_signup).toBe(true);
      } finally {
        await open.close();
      }
    });

    it('needs a sign-in', async () => {
      expect((await t.api.get('/v1/status').expect(401)).body.error.code).toBe('A01');
    });
  });
});
