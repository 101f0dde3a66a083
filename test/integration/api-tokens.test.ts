// API keys: created once with their value, stored as a hash, at most 10 active, lifetime bounds,
// revocation at once, last use, and which credentials may create them.
import { allStrings, ManualClock } from '../fixtures/account-access';
import { apiKeyFor, bearer, browserFor, cliTokenFor, createAccount, startTestService, TestService } from '../support/harness';
import type { Account } from '../../src/store/accounts';

const YEAR_SECONDS = 31536000;

describe('API keys', () => {
  let t: TestService;
  const clock = new ManualClock();

  beforeAll(async () => {
    t = await startTestService({ clock });
  });
  afterAll(() => t.close());

  async function signedIn(): Promise<{ account: Account; cli: string }> {
    const account = await createAccount(t);
    return { account, cli: await cliTokenFor(t, account) };
  }

  function createKey(token: string, body: unknown) {
    return t.api.post('/v1/api-tokens').set(bearer(token)).send(body as object);
  }

  describe('create', () => {
    it('returns the value once with the kiste_key_ prefix and a short non-secret hint', async () => {
      const { account, cli } = await signedIn();
      const res = await createKey(cli, { label: 'deploy script', expires_in_seconds: 3600 }).expect(200);
      const { token, data } = res.body;
      expect(token).toMatch(/^kiste_key_[A-Za-z0-9_-]{40,}$/);
      expect(data).toMatchObject({ object: 'api_token', label: 'deploy script', last_used_at: null, revoked_at: null });
      expect(typeof data.token_hint).toBe('string');
      expect(data.token_hint.length).toBeLessThan(token.length);
      // the hint gives away at most a few characters of the secret part
      const secret = token.slice('kiste_key_'.length);
      expect(data.token_hint).not.toContain(secret.slice(0, 8));
      expect(data.token_hint.startsWith('kiste_key_')).toBe(true);
      expect(Number.isNaN(Date.parse(data.created_at))).toBe(false);
      expect(new Date(data.expires_at).getTime()).toBe(clock.now().getTime() + 3600 * 1000);

      // the value works as a bearer credential
      const me = await t.api.get('/v1/me').set(bearer(token)).expect(200);
      expect(me.body.id).toBe(account.id);

      // never again: not in the list, not in the single get
      const list = await t.api.get('/v1/api-tokens').set(bearer(cli)).expect(200);
      const listed = list.body.find((item: { id: string }) => item.id === data.id);
      expect(listed).toMatchObject({ id: data.id, label: 'deploy script', token_hint: data.token_hint });
      expect(JSON.stringify(list.body)).not.toContain(secret);
      const got = await t.api.get(`/v1/api-tokens/${data.id}`).set(bearer(cli)).expect(200);
      expect(got.body).toEqual({ ...data, last_used_at: got.body.last_used_at });
      expect(Object.keys(got.body)).not.toContain('token');
      expect(JSON.stringify(got.body)).not.toContain(secret);
    });

    it('stores only a hash: the raw value appears in no column', async () => {
      const { account, cli } = await signedIn();
      const res = await createKey(cli, { label: 'hash check', expires_in_seconds: 600 }).expect(200);
      const token: string = res.body.token;
      const secret = token.slice('kiste_key_'.length);
      const row = await t.services.database.prisma.apiToken.findUniqueOrThrow({ where: { id: res.body.data.id } });
      expect(row.accountId).toBe(account.id);
      for (const { path, value } of allStrings(row)) {
        expect({ path, leaks: value.includes(secret) }).toEqual({ path, leaks: false });
      }
      expect(row.tokenHash).toMatch(/^[0-9a-f]{64}$/);
      // nothing else in the table holds it either
      const everything = await t.services.database.prisma.apiToken.findMany();
      expect(JSON.stringify(everything)).not.toContain(secret);
    });

    it('works from a CLI sign-in and from a browser session with its CSRF token', async () => {
      const { account, cli } = await signedIn();
      await createKey(cli, { label: 'from cli', expires_in_seconds: 300 }).expect(200);
      const browser = await browserFor(t, account);
      const created = await t.api
        .post('/v1/api-tokens')
        .set('cookie', browser.cookie)
        .set('x-csrf-token', browser.csrf)
        .send({ label: 'from console', expires_in_seconds: YEAR_SECONDS })
        .expect(200);
      expect(created.body.data.label).toBe('from console');
      expect(new Date(created.body.data.expires_at).getTime()).toBe(clock.now().getTime() + YEAR_SECONDS * 1000);
      const labels = (await t.api.get('/v1/api-tokens').set('cookie', browser.cookie).expect(200)).body.map((k: { label: string }) => k.label);
      expect(labels.sort()).toEqual(['from cli', 'from console']);
    });

    it('a browser session without its CSRF token is refused (A03) and creates nothing', async () => {
      const { account, cli } = await signedIn();
      const browser = await browserFor(t, account);
      const res = await t.api.post('/v1/api-tokens').set('cookie', browser.cookie).send({ label: 'x', expires_in_seconds: 600 }).expect(403);
      expect(res.body.error.code).toBe('A03');
      const wrong = await t.api
        .post('/v1/api-tokens')
        .set('cookie', browser.cookie)
        .set('x-csrf-token', 'not-the-token')
        .send({ label: 'x', expires_in_seconds: 600 })
        .expect(403);
      expect(wrong.body.error.code).toBe('A03');
      expect((await t.api.get('/v1/api-tokens').set(bearer(cli)).expect(200)).body).toEqual([]);
    });

    it('an API key cannot create API keys (403 A04)', async () => {
      const { account, cli } = await signedIn();
      const key = await apiKeyFor(t, account);
      const res = await createKey(key, { label: 'nested', expires_in_seconds: 600 }).expect(403);
      expect(res.body.error).toMatchObject({ code: 'A04', type: 'credential_not_permitted' });
      const list = await t.api.get('/v1/api-tokens').set(bearer(cli)).expect(200);
      expect(list.body.map((k: { label: string }) => k.label)).toEqual(['test key']);
    });

    it('needs a credential (401 A01) and a valid one (401 A02)', async () => {
      expect((await t.api.post('/v1/api-tokens').send({ label: 'x', expires_in_seconds: 600 }).expect(401)).body.error.code).toBe('A01');
      expect((await createKey('kiste_cli_nonsense', { label: 'x', expires_in_seconds: 600 }).expect(401)).body.error.code).toBe('A02');
      expect((await createKey('kiste_key_nonsense', { label: 'x', expires_in_seconds: 600 }).expect(401)).body.error.code).toBe('A02');
    });

    it.each([
      ['299 seconds', 299],
      ['zero', 0],
      ['negative', -1],
      ['one second more than a year', YEAR_SECONDS + 1],
      ['a fraction', 600.5],
      ['a string', '600'],
      ['null', null],
    ])('expires_in_seconds %s → 400 P01 param expires_in_seconds', async (_name, value) => {
      const { cli } = await signedIn();
      const res = await createKey(cli, { label: 'bounds', expires_in_seconds: value }).expect(400);
      expect(res.body.error).toMatchObject({ code: 'P01', param: 'expires_in_seconds' });
      expect((await t.api.get('/v1/api-tokens').set(bearer(cli)).expect(200)).body).toEqual([]);
    });

    it('accepts exactly 300 seconds and exactly one year', async () => {
      const { cli } = await signedIn();
      for (const seconds of [300, YEAR_SECONDS]) {
        const res = await createKey(cli, { label: `life ${seconds}`, expires_in_seconds: seconds }).expect(200);
        expect(new Date(res.body.data.expires_at).getTime() - clock.now().getTime()).toBe(seconds * 1000);
      }
    });

    it.each([
      ['an unknown field', { label: 'x', expires_in_seconds: 600, scopes: ['all'] }, 'scopes'],
      ['a missing label', { expires_in_seconds: 600 }, 'label'],
      ['a missing lifetime', { label: 'x' }, 'expires_in_seconds'],
      ['an empty label', { label: '', expires_in_seconds: 600 }, 'label'],
      ['a label over 100 characters', { label: 'x'.repeat(101), expires_in_seconds: 600 }, 'label'],
    ])('refuses %s with 400 P01 naming the field', async (_name, body, param) => {
      const { cli } = await signedIn();
      const res = await createKey(cli, body).expect(400);
      expect(res.body.error).toMatchObject({ code: 'P01', param });
    });

    it('refuses a body that is not JSON (P02), no body (P01), or the wrong content type (P04)', async () => {
      const { cli } = await signedIn();
      const broken = await t.api.post('/v1/api-tokens').set(bearer(cli)).set('content-type', 'application/json').send('{"label":').expect(400);
      expect(broken.body.error.code).toBe('P02');
      const none = await t.api.post('/v1/api-tokens').set(bearer(cli)).expect(400);
      expect(none.body.error.code).toBe('P01');
      const text = await t.api.post('/v1/api-tokens').set(bearer(cli)).set('content-type', 'text/plain').send('label=x').expect(415);
      expect(text.body.error.code).toBe('P04');
    });
  });

  describe('limit of 10 active keys', () => {
    it('refuses the 11th with 409 L05; revoking one frees a slot', async () => {
      const { cli } = await signedIn();
      const ids: string[] = [];
      for (let i = 0; i < 10; i++) ids.push((await createKey(cli, { label: `k${i}`, expires_in_seconds: 3600 }).expect(200)).body.data.id);
      const refused = await createKey(cli, { label: 'eleventh', expires_in_seconds: 3600 }).expect(409);
      expect(refused.body.error).toMatchObject({ code: 'L05', type: 'api_token_limit_reached' });
      expect((await t.api.get('/v1/api-tokens').set(bearer(cli)).expect(200)).body).toHaveLength(10);

      await t.api.delete(`/v1/api-tokens/${ids[3]}`).set(bearer(cli)).expect(200);
      await createKey(cli, { label: 'replacement', expires_in_seconds: 3600 }).expect(200);
      expect((await createKey(cli, { label: 'twelfth', expires_in_seconds: 3600 }).expect(409)).body.error.code).toBe('L05');
      // the revoked one is still listed, so 11 keys are listed and 10 are active
      const list = (await t.api.get('/v1/api-tokens').set(bearer(cli)).expect(200)).body as { id: string; revoked_at: string | null }[];
      expect(list).toHaveLength(11);
      expect(list.filter((k) => k.revoked_at === null)).toHaveLength(10);
    });

    it('an expired key frees a slot', async () => {
      const { cli } = await signedIn();
      await createKey(cli, { label: 'short', expires_in_seconds: 300 }).expect(200);
      for (let i = 0; i < 9; i++) await createKey(cli, { label: `long${i}`, expires_in_seconds: 7200 }).expect(200);
      expect((await createKey(cli, { label: 'full', expires_in_seconds: 7200 }).expect(409)).body.error.code).toBe('L05');
      clock.advanceSeconds(299);
      expect((await createKey(cli, { label: 'still full', expires_in_seconds: 7200 }).expect(409)).body.error.code).toBe('L05');
      clock.advanceSeconds(1);
      await createKey(cli, { label: 'after expiry', expires_in_seconds: 7200 }).expect(200);
      expect((await createKey(cli, { label: 'full again', expires_in_seconds: 7200 }).expect(409)).body.error.code).toBe('L05');
    });

    it('the limit holds under concurrent creates', async () => {
      const { cli } = await signedIn();
      const results = await Promise.all(
        Array.from({ length: 14 }, (_, i) => createKey(cli, { label: `c${i}`, expires_in_seconds: 3600 })),
      );
      const statuses = results.map((res) => res.status).sort();
      expect(statuses.filter((s) => s === 200)).toHaveLength(10);
      expect(statuses.filter((s) => s === 409)).toHaveLength(4);
      expect((await t.api.get('/v1/api-tokens').set(bearer(cli)).expect(200)).body).toHaveLength(10);
    });
  });

  describe('use, expiry and revocation', () => {
    it('sets last_used_at when the key is used', async () => {
      const { cli } = await signedIn();
      const { token, data } = (await createKey(cli, { label: 'used', expires_in_seconds: 3600 }).expect(200)).body;
      expect(data.last_used_at).toBeNull();
      clock.advanceSeconds(10);
      const usedAt = clock.now().toISOString();
      await t.api.get('/v1/me').set(bearer(token)).expect(200);
      const got = await t.api.get(`/v1/api-tokens/${data.id}`).set(bearer(cli)).expect(200);
      expect(got.body.last_used_at).toBe(usedAt);
      clock.advanceSeconds(60);
      await t.api.get('/v1/status').set(bearer(token)).expect(200);
      const later = await t.api.get(`/v1/api-tokens/${data.id}`).set(bearer(cli)).expect(200);
      expect(later.body.last_used_at).toBe(clock.now().toISOString());
    });

    it('an expired key is refused (401 A02) and stays listed', async () => {
      const { cli } = await signedIn();
      const { token, data } = (await createKey(cli, { label: 'brief', expires_in_seconds: 300 }).expect(200)).body;
      clock.advanceSeconds(299);
      await t.api.get('/v1/me').set(bearer(token)).expect(200);
      clock.advanceSeconds(1);
      expect((await t.api.get('/v1/me').set(bearer(token)).expect(401)).body.error.code).toBe('A02');
      const got = await t.api.get(`/v1/api-tokens/${data.id}`).set(bearer(cli)).expect(200);
      expect(got.body.revoked_at).toBeNull();
      expect(new Date(got.body.expires_at).getTime()).toBeLessThanOrEqual(clock.now().getTime());
    });

    it('DELETE revokes at once: the next request with it is 401 A02, the key stays listed with revoked_at', async () => {
      const { cli } = await signedIn();
      const { token, data } = (await createKey(cli, { label: 'revoke me', expires_in_seconds: 3600 }).expect(200)).body;
      await t.api.get('/v1/me').set(bearer(token)).expect(200);
      clock.advanceSeconds(5);
      const deleted = await t.api.delete(`/v1/api-tokens/${data.id}`).set(bearer(cli)).expect(200);
      expect(deleted.body).toEqual({ id: data.id, object: 'api_token', deleted: true });
      const refused = await t.api.get('/v1/me').set(bearer(token)).expect(401);
      expect(refused.body.error).toMatchObject({ code: 'A02', type: 'invalid_credentials' });
      const listed = (await t.api.get('/v1/api-tokens').set(bearer(cli)).expect(200)).body.find((k: { id: string }) => k.id === data.id);
      expect(listed.revoked_at).toBe(clock.now().toISOString());
      const got = await t.api.get(`/v1/api-tokens/${data.id}`).set(bearer(cli)).expect(200);
      expect(got.body.revoked_at).toBe(clock.now().toISOString());

      // revoking again answers the same and keeps the first revocation time
      clock.advanceSeconds(30);
      await t.api.delete(`/v1/api-tokens/${data.id}`).set(bearer(cli)).expect(200);
      expect((await t.api.get(`/v1/api-tokens/${data.id}`).set(bearer(cli)).expect(200)).body.revoked_at).toBe(listed.revoked_at);
    });

    it('a key can revoke itself; other keys of the account stay valid', async () => {
      const { account } = await signedIn();
      const first = await t.services.apiTokens.create(account.id, 'first', 3600);
      const second = await t.services.apiTokens.create(account.id, 'second', 3600);
      await t.api.delete(`/v1/api-tokens/${first.record.id}`).set(bearer(first.token)).expect(200);
      expect((await t.api.get('/v1/me').set(bearer(first.token)).expect(401)).body.error.code).toBe('A02');
      await t.api.get('/v1/me').set(bearer(second.token)).expect(200);
    });

    it('a browser session revokes with its CSRF token', async () => {
      const { account } = await signedIn();
      const key = await t.services.apiTokens.create(account.id, 'console revokes', 3600);
      const browser = await browserFor(t, account);
      expect((await t.api.delete(`/v1/api-tokens/${key.record.id}`).set('cookie', browser.cookie).expect(403)).body.error.code).toBe('A03');
      await t.api.get('/v1/me').set(bearer(key.token)).expect(200);
      await t.api.delete(`/v1/api-tokens/${key.record.id}`).set('cookie', browser.cookie).set('x-csrf-token', browser.csrf).expect(200);
      await t.api.get('/v1/me').set(bearer(key.token)).expect(401);
    });

    it('get and delete of an unknown id → 404 A10; a malformed id → 400 P01 param id', async () => {
      const { cli } = await signedIn();
      const unknown = '00000000-0000-4000-8000-000000000000';
      expect((await t.api.get(`/v1/api-tokens/${unknown}`).set(bearer(cli)).expect(404)).body.error).toMatchObject({ code: 'A10', type: 'api_token_not_found' });
      expect((await t.api.delete(`/v1/api-tokens/${unknown}`).set(bearer(cli)).expect(404)).body.error.code).toBe('A10');
      expect((await t.api.get('/v1/api-tokens/not-a-uuid').set(bearer(cli)).expect(400)).body.error).toMatchObject({ code: 'P01', param: 'id' });
    });

    it('lists newest first, revoked and expired keys included, with metadata only', async () => {
      const { cli } = await signedIn();
      const ids: string[] = [];
      for (const label of ['a', 'b', 'c']) {
        ids.push((await createKey(cli, { label, expires_in_seconds: 300 }).expect(200)).body.data.id);
        clock.advanceSeconds(1);
      }
      await t.api.delete(`/v1/api-tokens/${ids[0]}`).set(bearer(cli)).expect(200);
      clock.advanceSeconds(300);
      const list = (await t.api.get('/v1/api-tokens').set(bearer(cli)).expect(200)).body as Record<string, unknown>[];
      expect(list.map((k) => k.label)).toEqual(['c', 'b', 'a']);
      for (const key of list) {
        expect(Object.keys(key).sort()).toEqual(['created_at', 'expires_at', 'id', 'label', 'last_used_at', 'object', 'revoked_at', 'token_hint']);
      }
    });
  });
});
