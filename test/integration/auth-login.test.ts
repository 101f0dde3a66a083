// Console sign-in: POST /v1/auth/login (cookies, failures, the lock on unknown browsers and
// POST /v1/auth/unlock), CSRF on browser sessions, GET /v1/auth/session and open sign-up.
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


const BROWSER_SESSION_SECONDS = 14 * 24 * 3600;
const YEAR_SECONDS = 365 * 24 * 3600;

function setCookieLines(res: { headers: Record<string, unknown> }): string[] {
  const header = res.headers['set-cookie'];
  return header === undefined ? [] : (header as string[]);
}

/** The Set-Cookie line for `name`, split into its value and lower-cased attributes. */
function parsedSetCookie(res: { headers: Record<string, unknown> }, name: string): { value: string; attributes: Map<string, string> } {
  const line = setCookieLines(res).find((candidate) => candidate.startsWith(`${name}=`));
  if (!line) throw new Error(`no Set-Cookie for ${name} in ${JSON.stringify(setCookieLines(res))}`);
  const [pair, ...rest] = line.split(';').map((part) => part.trim());
  const attributes = new Map<string, string>();
  for (const attribute of rest) {
    const index = attribute.indexOf('=');
    if (index < 0) attributes.set(attribute.toLowerCase(), '');
    else attributes.set(attribute.slice(0, index).toLowerCase(), attribute.slice(index + 1));
  }
  return { value: decodeURIComponent(pair!.slice(name.length + 1)), attributes };
}

/** The error part of an answer, without the per-request id. */
function errorWithoutRequestId(body: { error: Record<string, unknown> }): Record<string, unknown> {
  const { request_id: _ignored, ...rest } = body.error;
  return rest;
}

function login(t: TestService, email: string, password: string, cookie?: string) {
  const call = t.api.post('/v1/auth/login');
  if (cookie) call.set('cookie', cookie);
  return call.send({ email, password });
}

/** Fails `count` times with a wrong password (from the browser in `cookie`, or an unknown one). */
async function failSignIns(t: TestService, account: Account, count: number, cookie?: string): Promise<string[]> {
  const codes: string[] = [];
  for (let i = 0; i < count; i++) {
    const res = await login(t, account.email, `wrong password ${i}`, cookie);
    codes.push(res.body.error?.code);
  }
  return codes;
}

async function isLocked(t: TestService, token: string): Promise<boolean> {
  const me = await t.api.get('/v1/me').set(bearer(token)).expect(200);
  return me.body.sign_in_locked;
}

describe('POST /v1/auth/login', () => {
  let t: TestService;
  let clock: ManualClock;
  beforeAll(async () => {
    clock = new ManualClock();
    t = await startTestService({ clock });
  });
  afterAll(() => t.close());

  it('signs in: ConsoleSession with csrf and user, session and browser cookies (HttpOnly, Lax, no Secure on http)', async () => {
    const account = await createAccount(t);
    const res = await login(t, account.email, TEST_PASSWORD).expect(200);
    expect(res.body.authenticated).toBe(true);
    expect(typeof res.body.csrf).toBe('string');
    expect(res.body.csrf.length).toBeGreaterThanOrEqual(32);
    expect(res.body.user).toEqual({
      id: account.id,
      object: 'user',
      email: account.email,
      name: null,
      created_at: account.createdAt.toISOString(),
      sign_in_locked: false,
    });

    const session = parsedSetCookie(res, 'kiste_session');
    expect(session.value).toMatch(/^kiste_web_[A-Za-z0-9_-]{43}$/);
    expect(session.attributes.has('httponly')).toBe(true);
    expect(session.attributes.get('samesite')).toBe('Lax');
    expect(session.attributes.get('path')).toBe('/');
    expect(session.attributes.has('secure')).toBe(false);
    expect(session.attributes.get('max-age')).toBe(String(BROWSER_SESSION_SECONDS));

    const browser = parsedSetCookie(res, 'kiste_browser');
    expect(browser.value).toMatch(/^kiste_brw_[A-Za-z0-9_-]{43}$/);
    expect(browser.attributes.has('httponly')).toBe(true);
    expect(browser.attributes.get('samesite')).toBe('Lax');
    expect(browser.attributes.has('secure')).toBe(false);
    expect(browser.attributes.get('max-age')).toBe(String(YEAR_SECONDS));

    // The cookie is a working browser session, and its CSRF token is the one answered.
    const me = await t.api.get('/v1/me').set('cookie', `kiste_session=${session.value}`).expect(200);
    expect(me.body.id).toBe(account.id);
    const current = await t.api.get('/v1/auth/session').set('cookie', `kiste_session=${session.value}`).expect(200);
    expect(current.body.csrf).toBe(res.body.csrf);
  });

  it('accepts the e-mail address in any case', async () => {
    const account = await createAccount(t);
    const res = await login(t, account.email.toUpperCase(), TEST_PASSWORD).expect(200);
    expect(res.body.user.id).toBe(account.id);
  });

  it('gives every sign-in its own session and CSRF token', async () => {
    const account = await createAccount(t);
    const first = await browserFor(t, account);
    const second = await browserFor(t, account);
    expect(second.cookie).not.toBe(first.cookie);
    expect(second.csrf).not.toBe(first.csrf);
  });

  it('marks cookies Secure (and __Host-) when KISTE_BASE_URL is https', async () => {
    const secure = await startTestService({ env: { KISTE_BASE_URL: 'https://kiste.example.com' } });
    try {
      const account = await createAccount(secure);
      const res = await login(secure, account.email, TEST_PASSWORD).expect(200);
      expect(parsedSetCookie(res, '__Host-kiste_session').attributes.has('secure')).toBe(true);
      expect(parsedSetCookie(res, '__Host-kiste_browser').attributes.has('secure')).toBe(true);
      expect(parsedSetCookie(res, '__Host-kiste_session').attributes.has('httponly')).toBe(true);
      expect(parsedSetCookie(res, '__Host-kiste_session').attributes.get('samesite')).toBe('Lax');
    } finally {
      await secure.close();
    }
  });

  it('answers a wrong password and an unknown e-mail address with the same A05, and sets no cookie', async () => {
    const account = await createAccount(t);
    const wrong = await login(t, account.email, 'not the password').expect(401);
    expect(wrong.body.error.code).toBe('A05');
    expect(wrong.body.error.type).toBe('sign_in_failed');
    expect(setCookieLines(wrong)).toEqual([]);

    const unknown = await login(t, `nobody-${Date.now()}@example.com`, TEST_PASSWORD).expect(401);
    expect(unknown.body.error.code).toBe('A05');
    expect(setCookieLines(unknown)).toEqual([]);
    expect(errorWithoutRequestId(unknown.body)).toEqual(errorWithoutRequestId(wrong.body));
  });

  it('checks the body against the spec', async () => {
    const missing = await t.api.post('/v1/auth/login').send({ email: 'someone@example.com' }).expect(400);
    expect(missing.body.error.code).toBe('P01');
    expect(missing.body.error.param).toBe('password');

    const extra = await t.api.post('/v1/auth/login').send({ email: 'someone@example.com', password: 'x', remember: true }).expect(400);
    expect(extra.body.error.code).toBe('P01');
    expect(extra.body.error.param).toBe('remember');

    const notJson = await t.api.post('/v1/auth/login').set('content-type', 'text/plain').send('email=a&password=b').expect(415);
    expect(notJson.body.error.code).toBe('P04');

    const broken = await t.api.post('/v1/auth/login').set('content-type', 'application/json').send('{"email":').expect(400);
    expect(broken.body.error.code).toBe('P02');

    const empty = await t.api.post('/v1/auth/login').expect(400);
    expect(empty.body.error.code).toBe('P01');
  });

  it('refuses a body above 8 KiB with 413 P03', async () => {
    const res = await t.api.post('/v1/auth/login').send({ email: 'a@example.com', password: 'x'.repeat(9000) }).expect(413);
    expect(res.body.error.code).toBe('P03');
  });

  describe('lock on password sign-in from unknown browsers', () => {
    it('locks after 5 failures from unknown browsers: A06 even with the right password', async () => {
      const account = await createAccount(t);
      const cli = await cliTokenFor(t, account);
      expect(await failSignIns(t, account, 4)).toEqual(['A05', 'A05', 'A05', 'A05']);
      expect(await isLocked(t, cli)).toBe(false);

      const fifth = await login(t, account.email, 'still wrong').expect(403);
      expect(fifth.body.error.code).toBe('A06');
      expect(fifth.body.error.type).toBe('sign_in_locked');
      expect(await isLocked(t, cli)).toBe(true);

      const right = await login(t, account.email, TEST_PASSWORD).expect(403);
      expect(right.body.error.code).toBe('A06');
      expect(setCookieLines(right)).toEqual([]);

      // A made-up browser marker does not make a browser known.
      const madeUp = await login(t, account.email, TEST_PASSWORD, 'kiste_browser=kiste_brw_madeup0000000000000000000000000000000000').expect(403);
      expect(madeUp.body.error.code).toBe('A06');
    });

    it('lets a known browser sign in while locked; GET /v1/me shows sign_in_locked', async () => {
      const account = await createAccount(t);
      const known = await browserFor(t, account); // this browser signed in before the lock
      await failSignIns(t, account, 5);

      const res = await login(t, account.email, TEST_PASSWORD, known.browserCookie).expect(200);
      expect(res.body.user.sign_in_locked).toBe(true);
      // The known browser keeps its marker.
      expect(`kiste_browser=${parsedSetCookie(res, 'kiste_browser').value}`).toBe(known.browserCookie);
      const session = `kiste_session=${parsedSetCookie(res, 'kiste_session').value}`;
      const me = await t.api.get('/v1/me').set('cookie', session).expect(200);
      expect(me.body.sign_in_locked).toBe(true);

      // A wrong password from the known browser is a plain A05.
      const wrong = await login(t, account.email, 'wrong again', known.browserCookie).expect(401);
      expect(wrong.body.error.code).toBe('A05');
    });

    it('does not count failures from a known browser', async () => {
      const account = await createAccount(t);
      const known = await browserFor(t, account);
      const cli = await cliTokenFor(t, account);
      expect(await failSignIns(t, account, 6, known.browserCookie)).toEqual(['A05', 'A05', 'A05', 'A05', 'A05', 'A05']);
      expect(await isLocked(t, cli)).toBe(false);
      await login(t, account.email, TEST_PASSWORD).expect(200);
    });

    it("does not treat a browser known to another account as known", async () => {
      const other = await createAccount(t);
      const otherBrowser = await browserFor(t, other);
      const account = await createAccount(t);
      await failSignIns(t, account, 5);
      const res = await login(t, account.email, TEST_PASSWORD, otherBrowser.browserCookie).expect(403);
      expect(res.body.error.code).toBe('A06');
    });

    it('starts counting again after a successful sign-in', async () => {
      const account = await createAccount(t);
      const cli = await cliTokenFor(t, account);
      await failSignIns(t, account, 4);
      await login(t, account.email, TEST_PASSWORD).expect(200);
      expect(await failSignIns(t, account, 4)).toEqual(['A05', 'A05', 'A05', 'A05']);
      expect(await isLocked(t, cli)).toBe(false);
      await login(t, account.email, TEST_PASSWORD).expect(200);
    });

    it('counts only failures inside the 15-minute window', async () => {
      const account = await createAccount(t);
      const cli = await cliTokenFor(t, account);
      await failSignIns(t, account, 4);
      clock.advance(16 * 60_000);
      expect(await failSignIns(t, account, 4)).toEqual(['A05', 'A05', 'A05', 'A05']);
      expect(await isLocked(t, cli)).toBe(false);
      expect(await failSignIns(t, account, 1)).toEqual(['A06']);
      expect(await isLocked(t, cli)).toBe(true);
    });

    it('never locks an unknown e-mail address: always the same A05', async () => {
      const email = `ghost-${Date.now()}@example.com`;
      for (let i = 0; i < 7; i++) {
        const res = await login(t, email, 'whatever').expect(401);
        expect(res.body.error.code).toBe('A05');
      }
    });

    it('POST /v1/auth/unlock with a CLI token lifts the lock (unlocked true, then false)', async () => {
      const account = await createAccount(t);
      const cli = await cliTokenFor(t, account);
      await failSignIns(t, account, 5);
      expect(await isLocked(t, cli)).toBe(true);

      const first = await t.api.post('/v1/auth/unlock').set(bearer(cli)).expect(200);
      expect(first.body.object).toBe('sign_in_unlock');
      expect(first.body.unlocked).toBe(true);
      expect(typeof first.body.message).toBe('string');
      expect(await isLocked(t, cli)).toBe(false);

      const second = await t.api.post('/v1/auth/unlock').set(bearer(cli)).expect(200);
      expect(second.body.unlocked).toBe(false);

      await login(t, account.email, TEST_PASSWORD).expect(200);
    });

    it('POST /v1/auth/unlock with an API key lifts the lock, and resets the failure count', async () => {
      const account = await createAccount(t);
      const key = await apiKeyFor(t, account);
      await failSignIns(t, account, 5);
      const res = await t.api.post('/v1/auth/unlock').set(bearer(key)).expect(200);
      expect(res.body.unlocked).toBe(true);
      expect(await isLocked(t, key)).toBe(false);
      // A single new failure does not lock again at once.
      expect(await failSignIns(t, account, 1)).toEqual(['A05']);
      expect(await isLocked(t, key)).toBe(false);
      await login(t, account.email, TEST_PASSWORD).expect(200);
      expect((await t.api.post('/v1/auth/unlock').set(bearer(key)).expect(200)).body.unlocked).toBe(false);
    });

    it('refuses POST /v1/auth/unlock from a browser session with A04', async () => {
      const account = await createAccount(t);
      const browser = await browserFor(t, account);
      const cli = await cliTokenFor(t, account);
      await failSignIns(t, account, 5);
      const res = await t.api.post('/v1/auth/unlock').set('cookie', browser.cookie).set('x-csrf-token', browser.csrf).expect(403);
      expect(res.body.error.code).toBe('A04');
      expect(await isLocked(t, cli)).toBe(true);
    });

    it('refuses POST /v1/auth/unlock without a credential (A01)', async () => {
      const res = await t.api.post('/v1/auth/unlock').expect(401);
      expect(res.body.error.code).toBe('A01');
    });
  });
});

describe('CSRF on browser sessions', () => {
  let t: TestService;
  let account: Account;
  let browser: { cookie: string; csrf: string; browserCookie: string };
  let cli: string;
  beforeAll(async () => {
    t = await startTestService();
    account = await createAccount(t);
    browser = await browserFor(t, account);
    cli = await cliTokenFor(t, account);
  });
  afterAll(() => t.close());

  const keyLabels = async () => (await t.api.get('/v1/api-tokens').set(bearer(cli)).expect(200)).body.map((key: { label: string }) => key.label);

  it('refuses a state-changing request without x-csrf-token with 403 A03 and changes nothing', async () => {
    const res = await t.api.post('/v1/api-tokens').set('cookie', browser.cookie).send({ label: 'no-csrf', expires_in_seconds: 3600 }).expect(403);
    expect(res.body.error.code).toBe('A03');
    expect(res.body.error.type).toBe('csrf_token_invalid');
    expect(res.body.error.param).toBe('x-csrf-token');
    expect(await keyLabels()).not.toContain('no-csrf');
  });

  it('refuses a wrong token, and the token of another session of the same account', async () => {
    const wrong = await t.api
      .post('/v1/api-tokens')
      .set('cookie', browser.cookie)
      .set('x-csrf-token', `${browser.csrf.slice(0, -1)}${browser.csrf.endsWith('A') ? 'B' : 'A'}`)
      .send({ label: 'wrong-csrf', expires_in_seconds: 3600 })
      .expect(403);
    expect(wrong.body.error.code).toBe('A03');

    const other = await browserFor(t, account);
    const crossed = await t.api
      .post('/v1/api-tokens')
      .set('cookie', browser.cookie)
      .set('x-csrf-token', other.csrf)
      .send({ label: 'crossed-csrf', expires_in_seconds: 3600 })
      .expect(403);
    expect(crossed.body.error.code).toBe('A03');

    const empty = await t.api.post('/v1/auth/logout').set('cookie', browser.cookie).set('x-csrf-token', '').expect(403);
    expect(empty.body.error.code).toBe('A03');
    expect(await keyLabels()).not.toContain('wrong-csrf');
    expect(await keyLabels()).not.toContain('crossed-csrf');
  });

  it('accepts the right token', async () => {
    const res = await t.api
      .post('/v1/api-tokens')
      .set('cookie', browser.cookie)
      .set('x-csrf-token', browser.csrf)
      .send({ label: 'with-csrf', expires_in_seconds: 3600 })
      .expect(200);
    expect(res.body.data.label).toBe('with-csrf');
    expect(await keyLabels()).toContain('with-csrf');
  });

  it('checks DELETE too', async () => {
    const target = await cliTokenFor(t, account);
    const sessions = await t.api.get('/v1/sessions').set(bearer(target)).expect(200);
    const targetId = sessions.body.data.find((s: { current: boolean }) => s.current).id;
    const refused = await t.api.delete(`/v1/sessions/${targetId}`).set('cookie', browser.cookie).expect(403);
    expect(refused.body.error.code).toBe('A03');
    await t.api.get('/v1/me').set(bearer(target)).expect(200);
    await t.api.delete(`/v1/sessions/${targetId}`).set('cookie', browser.cookie).set('x-csrf-token', browser.csrf).expect(200);
  });

  it('needs no token on GET', async () => {
    await t.api.get('/v1/api-tokens').set('cookie', browser.cookie).expect(200);
    await t.api.get('/v1/sessions').set('cookie', browser.cookie).expect(200);
  });

  it('needs no token for bearer credentials', async () => {
    const res = await t.api.post('/v1/api-tokens').set(bearer(cli)).send({ label: 'bearer', expires_in_seconds: 3600 }).expect(200);
    const key = res.body.token as string;
    await t.api.post('/v1/auth/unlock').set(bearer(key)).expect(200);
    await t.api.post('/v1/auth/logout').set(bearer(key)).expect(200);
  });
});

describe('GET /v1/auth/session', () => {
  let t: TestService;
  beforeAll(async () => {
    t = await startTestService();
  });
  afterAll(() => t.close());

  it('answers the browser session with its csrf and user', async () => {
    const account = await createAccount(t);
    const browser = await browserFor(t, account);
    const res = await t.api.get('/v1/auth/session').set('cookie', browser.cookie).expect(200);
    expect(res.body).toEqual({
      authenticated: true,
      csrf: browser.csrf,
      user: expect.objectContaining({ id: account.id, email: account.email, object: 'user', sign_in_locked: false }),
    });
  });

  it('refuses bearer credentials with A04 and no credential with A01', async () => {
    const account = await createAccount(t);
    const cli = await t.api.get('/v1/auth/session').set(bearer(await cliTokenFor(t, account))).expect(403);
    expect(cli.body.error.code).toBe('A04');
    const key = await t.api.get('/v1/auth/session').set(bearer(await apiKeyFor(t, account))).expect(403);
    expect(key.body.error.code).toBe('A04');
    const none = await t.api.get('/v1/auth/session').expect(401);
    expect(none.body.error.code).toBe('A01');
  });

  it('refuses an unknown or ended session cookie with A02', async () => {
    const unknown = await t.api.get('/v1/auth/session').set('cookie', 'kiste_session=kiste_web_nothing').expect(401);
    expect(unknown.body.error.code).toBe('A02');
    const garbage = await t.api.get('/v1/auth/session').set('cookie', 'kiste_session=garbage').expect(401);
    expect(garbage.body.error.code).toBe('A02');

    const account = await createAccount(t);
    const browser = await browserFor(t, account);
    await t.api.post('/v1/auth/logout').set('cookie', browser.cookie).set('x-csrf-token', browser.csrf).expect(200);
    const ended = await t.api.get('/v1/auth/session').set('cookie', browser.cookie).expect(401);
    expect(ended.body.error.code).toBe('A02');
  });
});

describe('POST /v1/auth/signup', () => {
  it('is refused with A07 when KISTE_OPEN_SIGNUP is unset, and creates nothing', async () => {
    const t = await startTestService();
    try {
      const email = `closed-${Date.now()}@example.com`;
      const res = await t.api.post('/v1/auth/signup').send({ email, password: TEST_PASSWORD }).expect(403);
      expect(res.body.error.code).toBe('A07');
      expect(res.body.error.type).toBe('signup_disabled');
      expect(setCookieLines(res)).toEqual([]);
      expect(await t.services.accounts.findByEmail(email)).toBeNull();
      const signIn = await login(t, email, TEST_PASSWORD).expect(401);
      expect(signIn.body.error.code).toBe('A05');
    } finally {
      await t.close();
    }
  });

  describe('with KISTE_OPEN_SIGNUP=1', () => {
    let t: TestService;
    beforeAll(async () => {
      t = await startTestService({ env: { KISTE_OPEN_SIGNUP: '1' } });
    });
    afterAll(() => t.close());

    it('creates the account and signs it in (cookie set, account usable)', async () => {
      const email = `Fresh-${Date.now()}@Example.com`;
      const res = await t.api.post('/v1/auth/signup').send({ email, password: 'a long enough password', name: 'Fresh User' }).expect(200);
      expect(res.body.authenticated).toBe(true);
      expect(typeof res.body.csrf).toBe('string');
      expect(res.body.user.email).toBe(email.toLowerCase());
      expect(res.body.user.name).toBe('Fresh User');
      expect(res.body.user.sign_in_locked).toBe(false);

      const session = parsedSetCookie(res, 'kiste_session');
      expect(session.attributes.has('httponly')).toBe(true);
      expect(session.attributes.get('samesite')).toBe('Lax');
      expect(parsedSetCookie(res, 'kiste_browser').value).toMatch(/^kiste_brw_/);
      const cookie = `kiste_session=${session.value}`;

      const me = await t.api.get('/v1/me').set('cookie', cookie).expect(200);
      expect(me.body.id).toBe(res.body.user.id);
      // The session works for state-changing requests with its csrf.
      await t.api.post('/v1/api-tokens').set('cookie', cookie).set('x-csrf-token', res.body.csrf).send({ label: 'first', expires_in_seconds: 600 }).expect(200);
      // And the password signs in later.
      const again = await login(t, email, 'a long enough password').expect(200);
      expect(again.body.user.id).toBe(res.body.user.id);
    });

    it('refuses an address that already has an account with 409 A08, in any case', async () => {
      const email = `taken-${Date.now()}@example.com`;
      await t.api.post('/v1/auth/signup').send({ email, password: 'a long enough password' }).expect(200);
      const again = await t.api.post('/v1/auth/signup').send({ email, password: 'another long password' }).expect(409);
      expect(again.body.error.code).toBe('A08');
      expect(again.body.error.type).toBe('account_exists');
      expect(setCookieLines(again)).toEqual([]);
      const upper = await t.api.post('/v1/auth/signup').send({ email: email.toUpperCase(), password: 'another long password' }).expect(409);
      expect(upper.body.error.code).toBe('A08');
      // The first password still holds.
      await login(t, email, 'a long enough password').expect(200);
      await login(t, email, 'another long password').expect(401);
    });

    it('refuses a password under 10 characters with P01 param password', async () => {
      const email = `short-${Date.now()}@example.com`;
      const res = await t.api.post('/v1/auth/signup').send({ email, password: 'short' }).expect(400);
      expect(res.body.error.code).toBe('P01');
      expect(res.body.error.param).toBe('password');
      expect(await t.services.accounts.findByEmail(email)).toBeNull();
    });

    it('refuses an address that is not an e-mail address with P01 param email', async () => {
      const res = await t.api.post('/v1/auth/signup').send({ email: 'not-an-address', password: 'a long enough password' }).expect(400);
      expect(res.body.error.code).toBe('P01');
      expect(res.body.error.param).toBe('email');
    });
  });
});
