// Sign-ins: GET /v1/sessions (listing, current, order, pagination), DELETE /v1/sessions/{id},
// POST /v1/sessions/revoke-all, POST /v1/auth/logout, and which credential kind may do what.
import { generateKeyPairSync } from 'node:crypto';
import type { Clock } from '../../src/domain/clock';
import type { Account } from '../../src/store/accounts';
import {
  apiKeyFor,
  bearer,
  browserFor,
  cliTokenFor,
  createAccount,
  startTestService,
  TEST_PASSWORD,
  TestService,
} from '../support/harness';
import { ManualClock } from '../support/manual-clock';


interface SignIn {
  id: string;
  kind: 'browser' | 'cli';
  current: boolean;
  created_at: string;
  expires_at: string;
  device: string | null;
  user_agent: string | null;
}

/** A fresh OpenSSH ed25519 public key line. */
function ed25519KeyLine(): string {
  const raw = generateKeyPairSync('ed25519').publicKey.export({ format: 'der', type: 'spki' }).subarray(-32);
  const field = (value: Buffer) => Buffer.concat([Buffer.from([0, 0, 0, value.length]), value]);
  return `ssh-ed25519 ${Buffer.concat([field(Buffer.from('ssh-ed25519')), field(raw)]).toString('base64')} test@example`;
}

function setCookieLines(res: { headers: Record<string, unknown> }): string[] {
  const header = res.headers['set-cookie'];
  return header === undefined ? [] : (header as string[]);
}

async function listSessions(t: TestService, auth: Record<string, string>, query = ''): Promise<{ data: SignIn[]; has_more: boolean; first_id: string | null; last_id: string | null }> {
  const call = t.api.get(`/v1/sessions${query}`);
  for (const [name, value] of Object.entries(auth)) call.set(name, value);
  return (await call.expect(200)).body;
}

/** The sign-in id of a CLI token (the one marked current when the token lists). */
async function sessionIdOf(t: TestService, token: string): Promise<string> {
  const list = await listSessions(t, bearer(token), '?limit=100');
  const current = list.data.filter((session) => session.current);
  expect(current).toHaveLength(1);
  return current[0]!.id;
}

async function meStatus(t: TestService, auth: Record<string, string>): Promise<number> {
  const call = t.api.get('/v1/me');
  for (const [name, value] of Object.entries(auth)) call.set(name, value);
  const res = await call;
  if (res.status !== 200) expect(res.body.error.code).toBe('A02');
  return res.status;
}

describe('GET /v1/sessions', () => {
  let t: TestService;
  let clock: ManualClock;
  beforeAll(async () => {
    clock = new ManualClock(Date.parse('2030-01-01T00:00:00.000Z'));
    t = await startTestService({ clock });
  });
  afterAll(() => t.close());

  it('lists browser and CLI sign-ins, not API keys, and marks the current one', async () => {
    const account = await createAccount(t);
    const browser = await browserFor(t, account);
    clock.advance(1000);
    const cli = await cliTokenFor(t, account);
    const key = await apiKeyFor(t, account);

    const viaCli = await listSessions(t, bearer(cli));
    expect(viaCli.data.map((session) => session.kind).sort()).toEqual(['browser', 'cli']);
    const cliEntry = viaCli.data.find((session) => session.kind === 'cli')!;
    expect(cliEntry.current).toBe(true);
    expect(cliEntry.device).toBe('test-laptop');
    expect(viaCli.data.find((session) => session.kind === 'browser')!.current).toBe(false);

    const viaBrowser = await listSessions(t, { cookie: browser.cookie });
    expect(viaBrowser.data.find((session) => session.kind === 'browser')!.current).toBe(true);
    expect(viaBrowser.data.find((session) => session.kind === 'cli')!.current).toBe(false);
    const browserEntry = viaBrowser.data.find((session) => session.kind === 'browser')!;
    expect(browserEntry.device).toBeNull();
    expect(typeof browserEntry.user_agent === 'string' || browserEntry.user_agent === null).toBe(true);

    // An API key is not a sign-in: nothing is current.
    const viaKey = await listSessions(t, bearer(key));
    expect(viaKey.data).toHaveLength(2);
    expect(viaKey.data.every((session) => !session.current)).toBe(true);
  });

  it('lists only the caller account', async () => {
    const account = await createAccount(t);
    const other = await createAccount(t);
    await cliTokenFor(t, other);
    await browserFor(t, other);
    const cli = await cliTokenFor(t, account);
    const list = await listSessions(t, bearer(cli));
    expect(list.data).toHaveLength(1);
    expect(list.data[0]!.current).toBe(true);
  });

  it('answers newest first, with times from the service clock', async () => {
    const account = await createAccount(t);
    const key = await apiKeyFor(t, account);
    const started: string[] = [];
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) {
      clock.advance(60_000);
      started.push(clock.now().toISOString());
      ids.push(await sessionIdOf(t, await cliTokenFor(t, account)));
    }
    const list = await listSessions(t, bearer(key));
    expect(list.data.map((session) => session.id)).toEqual([...ids].reverse());
    expect(list.data.map((session) => session.created_at)).toEqual([...started].reverse());
    for (const session of list.data) {
      expect(Date.parse(session.expires_at) - Date.parse(session.created_at)).toBe(90 * 24 * 3600_000);
    }
  });

  it('paginates with limit, starting_after and ending_before', async () => {
    const account = await createAccount(t);
    const key = await apiKeyFor(t, account);
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      clock.advance(1000);
      ids.push(await sessionIdOf(t, await cliTokenFor(t, account)));
    }
    const newestFirst = [...ids].reverse();

    const all = await listSessions(t, bearer(key));
    expect(all.data.map((s) => s.id)).toEqual(newestFirst);
    expect(all.has_more).toBe(false);
    expect(all.first_id).toBe(newestFirst[0]);
    expect(all.last_id).toBe(newestFirst[4]);

    const page1 = await listSessions(t, bearer(key), '?limit=2');
    expect(page1.data.map((s) => s.id)).toEqual(newestFirst.slice(0, 2));
    expect(page1.has_more).toBe(true);
    expect(page1.first_id).toBe(newestFirst[0]);
    expect(page1.last_id).toBe(newestFirst[1]);

    const page2 = await listSessions(t, bearer(key), `?limit=2&starting_after=${page1.last_id}`);
    expect(page2.data.map((s) => s.id)).toEqual(newestFirst.slice(2, 4));
    expect(page2.has_more).toBe(true);

    const page3 = await listSessions(t, bearer(key), `?limit=2&starting_after=${page2.last_id}`);
    expect(page3.data.map((s) => s.id)).toEqual(newestFirst.slice(4));
    expect(page3.has_more).toBe(false);
    expect(page3.first_id).toBe(newestFirst[4]);
    expect(page3.last_id).toBe(newestFirst[4]);

    const afterLast = await listSessions(t, bearer(key), `?starting_after=${newestFirst[4]}`);
    expect(afterLast.data).toEqual([]);
    expect(afterLast.has_more).toBe(false);
    expect(afterLast.first_id).toBeNull();
    expect(afterLast.last_id).toBeNull();

    // Back from page 3 to page 2, and from page 2 to page 1.
    const back2 = await listSessions(t, bearer(key), `?limit=2&ending_before=${page3.first_id}`);
    expect(back2.data.map((s) => s.id)).toEqual(newestFirst.slice(2, 4));
    expect(back2.has_more).toBe(true);
    const back1 = await listSessions(t, bearer(key), `?limit=2&ending_before=${page2.first_id}`);
    expect(back1.data.map((s) => s.id)).toEqual(newestFirst.slice(0, 2));
    expect(back1.has_more).toBe(false);
    const beforeFirst = await listSessions(t, bearer(key), `?ending_before=${newestFirst[0]}`);
    expect(beforeFirst.data).toEqual([]);
    expect(beforeFirst.has_more).toBe(false);
  });

  it('refuses unknown cursors and out-of-range limits with 400 P01', async () => {
    const account = await createAccount(t);
    const key = await apiKeyFor(t, account);
    const other = await createAccount(t);
    const othersSession = await sessionIdOf(t, await cliTokenFor(t, other));

    const unknown = await t.api.get('/v1/sessions?starting_after=00000000-0000-4000-8000-000000000000').set(bearer(key)).expect(400);
    expect(unknown.body.error.code).toBe('P01');
    expect(unknown.body.error.param).toBe('starting_after');

    const foreign = await t.api.get(`/v1/sessions?ending_before=${othersSession}`).set(bearer(key)).expect(400);
    expect(foreign.body.error.code).toBe('P01');
    expect(foreign.body.error.param).toBe('ending_before');

    for (const limit of ['0', '101', 'many']) {
      const res = await t.api.get(`/v1/sessions?limit=${limit}`).set(bearer(key)).expect(400);
      expect(res.body.error.code).toBe('P01');
      expect(res.body.error.param).toBe('limit');
    }
  });

  it('leaves out ended and expired sign-ins', async () => {
    const account = await createAccount(t);
    const key = await apiKeyFor(t, account, 365 * 24 * 3600);
    const ended = await cliTokenFor(t, account);
    await t.api.post('/v1/auth/logout').set(bearer(ended)).expect(200);
    await browserFor(t, account);
    expect((await listSessions(t, bearer(key))).data.map((s) => s.kind)).toEqual(['browser']);
    clock.advance(14 * 24 * 3600_000 + 1000); // past the browser session's lifetime
    expect((await listSessions(t, bearer(key))).data).toEqual([]);
  });

  it('needs a credential', async () => {
    const res = await t.api.get('/v1/sessions').expect(401);
    expect(res.body.error.code).toBe('A01');
  });
});

describe('DELETE /v1/sessions/{id}', () => {
  let t: TestService;
  let account: Account;
  beforeAll(async () => {
    t = await startTestService();
    account = await createAccount(t);
  });
  afterAll(() => t.close());

  it('ends that sign-in only: its token then gets 401 A02', async () => {
    const caller = await cliTokenFor(t, account);
    const victim = await cliTokenFor(t, account);
    const victimId = await sessionIdOf(t, victim);

    const res = await t.api.delete(`/v1/sessions/${victimId}`).set(bearer(caller)).expect(200);
    expect(res.body).toEqual({ id: victimId, object: 'sign_in', deleted: true });

    const refused = await t.api.get('/v1/me').set(bearer(victim)).expect(401);
    expect(refused.body.error.code).toBe('A02');
    await t.api.get('/v1/me').set(bearer(caller)).expect(200);
    expect((await listSessions(t, bearer(caller), '?limit=100')).data.map((s) => s.id)).not.toContain(victimId);

    // Ending it again: it no longer exists.
    const again = await t.api.delete(`/v1/sessions/${victimId}`).set(bearer(caller)).expect(404);
    expect(again.body.error.code).toBe('A11');
  });

  it('ends a browser session from an API key, and the caller own sign-in', async () => {
    const key = await apiKeyFor(t, account);
    const browser = await browserFor(t, account);
    const browserId = (await listSessions(t, { cookie: browser.cookie }, '?limit=100')).data.find((s) => s.current)!.id;
    await t.api.delete(`/v1/sessions/${browserId}`).set(bearer(key)).expect(200);
    expect(await meStatus(t, { cookie: browser.cookie })).toBe(401);

    const self = await cliTokenFor(t, account);
    const selfId = await sessionIdOf(t, self);
    await t.api.delete(`/v1/sessions/${selfId}`).set(bearer(self)).expect(200);
    expect(await meStatus(t, bearer(self))).toBe(401);
  });

  it('answers 404 A11 for an unknown id and for another account sign-in (which keeps working)', async () => {
    const caller = await cliTokenFor(t, account);
    const unknown = await t.api.delete('/v1/sessions/00000000-0000-4000-8000-000000000000').set(bearer(caller)).expect(404);
    expect(unknown.body.error.code).toBe('A11');
    expect(unknown.body.error.type).toBe('session_not_found');

    const other = await createAccount(t);
    const othersToken = await cliTokenFor(t, other);
    const othersId = await sessionIdOf(t, othersToken);
    const foreign = await t.api.delete(`/v1/sessions/${othersId}`).set(bearer(caller)).expect(404);
    expect(foreign.body.error.code).toBe('A11');
    expect(await meStatus(t, bearer(othersToken))).toBe(200);
  });

  it('answers 400 P01 for a malformed id', async () => {
    const caller = await cliTokenFor(t, account);
    const res = await t.api.delete('/v1/sessions/not-a-uuid').set(bearer(caller)).expect(400);
    expect(res.body.error.code).toBe('P01');
    expect(res.body.error.param).toBe('id');
  });

  it('does not accept an API key id as a sign-in id', async () => {
    const caller = await cliTokenFor(t, account);
    const created = await t.api.post('/v1/api-tokens').set(bearer(caller)).send({ label: 'not a session', expires_in_seconds: 600 }).expect(200);
    const res = await t.api.delete(`/v1/sessions/${created.body.data.id}`).set(bearer(caller)).expect(404);
    expect(res.body.error.code).toBe('A11');
    expect(await meStatus(t, bearer(created.body.token))).toBe(200);
  });
});

describe('POST /v1/sessions/revoke-all', () => {
  let t: TestService;
  beforeAll(async () => {
    t = await startTestService();
  });
  afterAll(() => t.close());

  it('ends every browser and CLI sign-in including the caller, while API keys keep working', async () => {
    const account = await createAccount(t);
    const other = await createAccount(t);
    const othersCli = await cliTokenFor(t, other);
    const browser = await browserFor(t, account);
    const cli1 = await cliTokenFor(t, account);
    const cli2 = await cliTokenFor(t, account);
    const key = await apiKeyFor(t, account);

    const res = await t.api.post('/v1/sessions/revoke-all').set(bearer(cli1)).expect(200);
    expect(res.body.object).toBe('session_revocation');
    expect(res.body.revoked).toBe(3);
    expect(typeof res.body.message).toBe('string');

    expect(await meStatus(t, bearer(cli1))).toBe(401);
    expect(await meStatus(t, bearer(cli2))).toBe(401);
    expect(await meStatus(t, { cookie: browser.cookie })).toBe(401);
    expect(await meStatus(t, bearer(key))).toBe(200);
    expect(await meStatus(t, bearer(othersCli))).toBe(200);
    expect((await listSessions(t, bearer(key))).data).toEqual([]);

    // New sign-ins work afterwards; nothing is left to end a second time but the new one.
    const fresh = await cliTokenFor(t, account);
    const second = await t.api.post('/v1/sessions/revoke-all').set(bearer(key)).expect(200);
    expect(second.body.revoked).toBe(1);
    expect(await meStatus(t, bearer(fresh))).toBe(401);
    expect(await meStatus(t, bearer(key))).toBe(200);
  });

  it('from a browser: needs the csrf, ends the session and clears its cookie', async () => {
    const account = await createAccount(t);
    const browser = await browserFor(t, account);
    const refused = await t.api.post('/v1/sessions/revoke-all').set('cookie', browser.cookie).expect(403);
    expect(refused.body.error.code).toBe('A03');
    expect(await meStatus(t, { cookie: browser.cookie })).toBe(200);

    const res = await t.api.post('/v1/sessions/revoke-all').set('cookie', browser.cookie).set('x-csrf-token', browser.csrf).expect(200);
    expect(res.body.revoked).toBe(1);
    const cleared = setCookieLines(res).find((line) => line.startsWith('kiste_session='));
    expect(cleared).toBeDefined();
    expect(cleared).toMatch(/^kiste_session=;/);
    expect(cleared).toMatch(/Max-Age=0/);
    expect(await meStatus(t, { cookie: browser.cookie })).toBe(401);
  });
});

describe('POST /v1/auth/logout', () => {
  let t: TestService;
  let account: Account;
  beforeAll(async () => {
    t = await startTestService();
    account = await createAccount(t);
  });
  afterAll(() => t.close());

  it('with a CLI token revokes that token only', async () => {
    const cli = await cliTokenFor(t, account);
    const otherCli = await cliTokenFor(t, account);
    const browser = await browserFor(t, account);
    const key = await apiKeyFor(t, account);
    const cliId = await sessionIdOf(t, cli);

    const res = await t.api.post('/v1/auth/logout').set(bearer(cli)).expect(200);
    expect(res.body.origin_revoked).toBe(true);
    expect(res.body.authenticated).toBe(false);
    expect(setCookieLines(res)).toEqual([]);

    expect(await meStatus(t, bearer(cli))).toBe(401);
    expect(await meStatus(t, bearer(otherCli))).toBe(200);
    expect(await meStatus(t, { cookie: browser.cookie })).toBe(200);
    expect(await meStatus(t, bearer(key))).toBe(200);
    expect((await listSessions(t, bearer(key), '?limit=100')).data.map((s) => s.id)).not.toContain(cliId);

    const again = await t.api.post('/v1/auth/logout').set(bearer(cli)).expect(401);
    expect(again.body.error.code).toBe('A02');
  });

  it('with an API key revokes that key (origin_revoked true)', async () => {
    const cli = await cliTokenFor(t, account);
    const key = await apiKeyFor(t, account);
    const otherKey = await apiKeyFor(t, account);
    const res = await t.api.post('/v1/auth/logout').set(bearer(key)).expect(200);
    expect(res.body.origin_revoked).toBe(true);
    expect(res.body.authenticated).toBe(false);

    expect(await meStatus(t, bearer(key))).toBe(401);
    expect(await meStatus(t, bearer(otherKey))).toBe(200);
    expect(await meStatus(t, bearer(cli))).toBe(200);
    const keys = (await t.api.get('/v1/api-tokens').set(bearer(cli)).expect(200)).body as { token_hint: string; revoked_at: string | null }[];
    const revoked = keys.filter((entry) => entry.revoked_at !== null);
    expect(revoked.map((entry) => entry.token_hint)).toContain(`kiste_key_…${key.slice(-4)}`);
  });

  it('with a browser session needs the csrf, then revokes the session and clears the cookie', async () => {
    const browser = await browserFor(t, account);
    const cli = await cliTokenFor(t, account);
    const refused = await t.api.post('/v1/auth/logout').set('cookie', browser.cookie).expect(403);
    expect(refused.body.error.code).toBe('A03');
    expect(await meStatus(t, { cookie: browser.cookie })).toBe(200);

    const res = await t.api.post('/v1/auth/logout').set('cookie', browser.cookie).set('x-csrf-token', browser.csrf).expect(200);
    expect(res.body.origin_revoked).toBe(true);
    expect(res.body.authenticated).toBe(false);
    const cleared = setCookieLines(res).find((line) => line.startsWith('kiste_session='));
    expect(cleared).toMatch(/^kiste_session=;/);
    expect(cleared).toMatch(/Max-Age=0/);
    expect(cleared).toMatch(/HttpOnly/);

    expect(await meStatus(t, { cookie: browser.cookie })).toBe(401);
    expect(await meStatus(t, bearer(cli))).toBe(200);
    // The browser stays known: it can sign in again.
    await t.api.post('/v1/auth/login').set('cookie', browser.browserCookie).send({ email: account.email, password: TEST_PASSWORD }).expect(200);
  });

  it('needs a credential', async () => {
    const res = await t.api.post('/v1/auth/logout').expect(401);
    expect(res.body.error.code).toBe('A01');
  });
});

describe('credential kinds', () => {
  let t: TestService;
  let clock: ManualClock;
  let account: Account;
  beforeAll(async () => {
    clock = new ManualClock();
    t = await startTestService({ clock });
    account = await createAccount(t);
  });
  afterAll(() => t.close());

  it('an API key cannot create API keys (403 A04); CLI and browser can', async () => {
    const key = await apiKeyFor(t, account);
    const refused = await t.api.post('/v1/api-tokens').set(bearer(key)).send({ label: 'by key', expires_in_seconds: 600 }).expect(403);
    expect(refused.body.error.code).toBe('A04');
    expect(refused.body.error.type).toBe('credential_not_permitted');
    const labels = (await t.api.get('/v1/api-tokens').set(bearer(key)).expect(200)).body.map((entry: { label: string }) => entry.label);
    expect(labels).not.toContain('by key');

    const cli = await cliTokenFor(t, account);
    await t.api.post('/v1/api-tokens').set(bearer(cli)).send({ label: 'by cli', expires_in_seconds: 600 }).expect(200);
  });

  it('an API key cannot delete the account (403 A30), and the account stays', async () => {
    const key = await apiKeyFor(t, account);
    const res = await t.api.delete('/v1/me').set(bearer(key)).send({ confirm: account.email, password: TEST_PASSWORD }).expect(403);
    expect(res.body.error.code).toBe('A30');
    expect(res.body.error.type).toBe('api_key_cannot_delete_account');
    expect(await meStatus(t, bearer(key))).toBe(200);
    const deletion = await t.api.get('/v1/me/deletion').set(bearer(key)).expect(404);
    expect(deletion.body.error.code).toBe('A33');
  });

  it('a browser session cannot add device keys (403 A04); a CLI sign-in can', async () => {
    const browser = await browserFor(t, account);
    const refused = await t.api
      .post('/v1/device-keys')
      .set('cookie', browser.cookie)
      .set('x-csrf-token', browser.csrf)
      .send({ name: 'laptop', public_key: ed25519KeyLine() })
      .expect(403);
    expect(refused.body.error.code).toBe('A04');
    const listed = await t.api.get('/v1/device-keys').set('cookie', browser.cookie).expect(200);
    expect(listed.body.data).toEqual([]);

    const cli = await cliTokenFor(t, account);
    const added = await t.api.post('/v1/device-keys').set(bearer(cli)).send({ name: 'laptop', public_key: ed25519KeyLine() }).expect(200);
    expect(added.body.name).toBe('laptop');
  });

  it('no credential: 401 A01', async () => {
    const res = await t.api.get('/v1/me').expect(401);
    expect(res.body.error.code).toBe('A01');
    expect(res.body.error.type).toBe('authentication_required');
  });

  it('an unknown bearer token: 401 A02', async () => {
    const browser = await browserFor(t, account);
    const browserToken = browser.cookie.slice('kiste_session='.length);
    for (const token of ['garbage', 'kiste_key_unknown', 'kiste_cli_unknown', browserToken]) {
      const res = await t.api.get('/v1/me').set(bearer(token)).expect(401);
      expect(res.body.error.code).toBe('A02');
      expect(res.body.error.type).toBe('invalid_credentials');
    }
  });

  it('an unknown session cookie: 401 A02', async () => {
    const cli = await cliTokenFor(t, account);
    for (const cookie of ['kiste_session=garbage', 'kiste_session=kiste_web_unknown', `kiste_session=${cli}`]) {
      const res = await t.api.get('/v1/me').set('cookie', cookie).expect(401);
      expect(res.body.error.code).toBe('A02');
    }
  });

  it('an Authorization header that is not Bearer: 401 A02', async () => {
    for (const header of ['Basic x', 'Basic dXNlcjpwYXNz', 'Bearer', 'Token abc']) {
      const res = await t.api.get('/v1/me').set('authorization', header).expect(401);
      expect(res.body.error.code).toBe('A02');
      expect(res.body.error.param).toBe('authorization');
    }
  });

  it('an API key stops working once its lifetime has passed (A02)', async () => {
    const key = await apiKeyFor(t, account, 300);
    clock.advance(299_000);
    expect(await meStatus(t, bearer(key))).toBe(200);
    clock.advance(2_000);
    const res = await t.api.get('/v1/me').set(bearer(key)).expect(401);
    expect(res.body.error.code).toBe('A02');
  });

  it('browser sessions end after 14 days and CLI sign-ins after 90 days (A02)', async () => {
    const browser = await browserFor(t, account);
    const cli = await cliTokenFor(t, account);
    clock.advance(14 * 24 * 3600_000 - 1000);
    expect(await meStatus(t, { cookie: browser.cookie })).toBe(200);
    clock.advance(2000);
    expect(await meStatus(t, { cookie: browser.cookie })).toBe(401);
    expect(await meStatus(t, bearer(cli))).toBe(200);
    clock.advance(76 * 24 * 3600_000);
    expect(await meStatus(t, bearer(cli))).toBe(401);
  });
});
