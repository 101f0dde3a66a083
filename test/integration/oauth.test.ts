// CLI sign-in with OAuth 2.0 Authorization Code + PKCE (S256): GET /oauth/authorize redirects,
// POST /oauth/authorize (approve/deny) and POST /oauth/token.
import { createHash, randomBytes } from 'node:crypto';
import request from 'supertest';
import type { Clock } from '../../src/domain/clock';
import type { Account } from '../../src/store/accounts';
import { apiKeyFor, bearer, browserFor, cliTokenFor, createAccount, startTestService, TestService } from '../support/harness';
import { ManualClock } from '../support/manual-clock';


type Browser = { cookie: string; csrf: string; browserCookie: string };
type Params = Record<string, string>;

const REDIRECT_URI = 'http://127.0.0.1:53682/callback';
const CLIENT_ID = 'kiste-cli';
const CLI_SESSION_SECONDS = 90 * 24 * 3600;

function pkce(): { verifier: string; challenge: string } {
  const verifier = randomBytes(48).toString('base64url'); // 64 characters of [A-Za-z0-9_-]
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
}

/** A complete, valid authorization request; `overrides` replace (or, with undefined, remove) fields. */
function authorizeParams(challenge: string, overrides: Record<string, string | undefined> = {}): Params {
  const params: Record<string, string | undefined> = {
    response_type: 'code',
    client_id: CLIENT_ID,
    redirect_uri: REDIRECT_URI,
    code_challenge: challenge,
    code_challenge_method: 'S256',
    state: randomBytes(12).toString('hex'),
    device: 'build-box',
    ...overrides,
  };
  return Object.fromEntries(Object.entries(params).filter((entry): entry is [string, string] => entry[1] !== undefined));
}

/** A console address answers the console's app shell (HTML; the browser draws the page). */
async function consolePage(t: TestService, path: string): Promise<void> {
  const res = await request(t.app).get(path).expect(200);
  expect(res.headers['content-type']).toMatch(/^text\/html/);
  expect(res.text).toContain('<div id="app">');
}

function decide(t: TestService, browser: Browser, params: Params, decision = 'approve') {
  return t.api.post('/oauth/authorize').set('cookie', browser.cookie).set('x-csrf-token', browser.csrf).send({ ...params, decision });
}

/** Approves `params` as `browser` and answers the code from the loopback redirect. */
async function approvedCode(t: TestService, browser: Browser, params: Params): Promise<string> {
  const res = await decide(t, browser, params).expect(200);
  const code = new URL(res.body.redirect_to).searchParams.get('code');
  expect(code).toMatch(/^kiste_code_/);
  return code!;
}

function tokenRequest(code: string, verifier: string, overrides: Record<string, string> = {}): Params {
  return { grant_type: 'authorization_code', client_id: CLIENT_ID, code, code_verifier: verifier, redirect_uri: REDIRECT_URI, ...overrides };
}

function exchange(t: TestService, body: Params, form = false) {
  const call = t.api.post('/oauth/token');
  return form ? call.type('form').send(new URLSearchParams(body).toString()) : call.send(body);
}


async function expectOAuthError(res: { status: number; body: { error: { code: string; param: string | null } } }, status: number, code: string, param?: string) {
  expect(res.status).toBe(status);
  expect(res.body.error.code).toBe(code);
  if (param !== undefined) expect(res.body.error.param).toBe(param);
}

describe('GET /oauth/authorize', () => {
  let t: TestService;
  let account: Account;
  beforeAll(async () => {
    t = await startTestService();
    account = await createAccount(t);
  });
  afterAll(() => t.close());

  it('sends a signed-out browser to the console sign-in with continue=<the authorize URL>', async () => {
    const query = new URLSearchParams(authorizeParams(pkce().challenge)).toString();
    const res = await t.api.get(`/oauth/authorize?${query}`).expect(302);
    const location = new URL(res.headers.location as string, 'http://relative.invalid');
    expect(location.origin).toBe('http://relative.invalid'); // a path on this host
    expect(location.pathname).toBe('/console/login');
    expect(location.searchParams.get('continue')).toBe(`/oauth/authorize?${query}`);
  });

  it('treats an ended or unknown session cookie as signed out', async () => {
    const query = new URLSearchParams(authorizeParams(pkce().challenge)).toString();
    const browser = await browserFor(t, account);
    await t.api.post('/v1/auth/logout').set('cookie', browser.cookie).set('x-csrf-token', browser.csrf).expect(200);
    for (const cookie of [browser.cookie, 'kiste_session=kiste_web_unknown', 'kiste_session=garbage']) {
      const res = await t.api.get(`/oauth/authorize?${query}`).set('cookie', cookie).expect(302);
      expect(res.headers.location).toMatch(/^\/console\/login\?continue=/);
    }
  });

  it('sends a signed-in browser to the approval page with the same query', async () => {
    const browser = await browserFor(t, account);
    const query = new URLSearchParams(authorizeParams(pkce().challenge)).toString();
    const res = await t.api.get(`/oauth/authorize?${query}`).set('cookie', browser.cookie).expect(302);
    expect(res.headers.location).toBe(`/console/oauth/approve?${query}`);
  });

  it('redirects 308 from the main host to the console host when they differ', async () => {
    const split = await startTestService({
      env: { KISTE_BASE_URL: 'https://kiste.example.com', KISTE_CONSOLE_URL: 'https://console.example.com' },
    });
    try {
      const query = new URLSearchParams(authorizeParams(pkce().challenge)).toString();
      const main = await split.api.get(`/oauth/authorize?${query}`).set('host', 'kiste.example.com').expect(308);
      expect(main.headers.location).toBe(`https://console.example.com/oauth/authorize?${query}`);
      const withPort = await split.api.get(`/oauth/authorize?${query}`).set('host', 'KISTE.example.com:443').expect(308);
      expect(withPort.headers.location).toBe(`https://console.example.com/oauth/authorize?${query}`);

      // On the console host it goes on as usual.
      const onConsole = await split.api.get(`/oauth/authorize?${query}`).set('host', 'console.example.com').expect(302);
      expect(onConsole.headers.location).toBe(`/console/login?continue=${encodeURIComponent(`/oauth/authorize?${query}`)}`);
    } finally {
      await split.close();
    }
  });

  it('does not redirect between hosts when the console URL is the base URL', async () => {
    const same = await startTestService({ env: { KISTE_BASE_URL: 'https://kiste.example.com', KISTE_CONSOLE_URL: 'https://kiste.example.com/' } });
    try {
      const res = await same.api.get('/oauth/authorize?response_type=code').set('host', 'kiste.example.com').expect(302);
      expect(res.headers.location).toMatch(/^\/console\/login\?continue=/);
    } finally {
      await same.close();
    }
  });
});

describe('POST /oauth/authorize and POST /oauth/token', () => {
  let t: TestService;
  let clock: ManualClock;
  let account: Account;
  let browser: Browser;
  beforeAll(async () => {
    clock = new ManualClock();
    t = await startTestService({ clock });
    account = await createAccount(t);
    browser = await browserFor(t, account);
  });
  afterAll(() => t.close());

  it('approve: answers the loopback redirect with code and state', async () => {
    const params = authorizeParams(pkce().challenge);
    const res = await decide(t, browser, params).expect(200);
    expect(res.body.object).toBe('oauth_redirect');
    const target = new URL(res.body.redirect_to);
    expect(`${target.origin}${target.pathname}`).toBe(REDIRECT_URI);
    expect(target.searchParams.get('code')).toMatch(/^kiste_code_[A-Za-z0-9_-]{43}$/);
    expect(target.searchParams.get('state')).toBe(params.state);
    expect(target.searchParams.get('error')).toBeNull();
  });

  it('keeps the query the redirect URI already has', async () => {
    const redirect = 'http://127.0.0.1:40000/cb?session=xyz';
    const res = await decide(t, browser, authorizeParams(pkce().challenge, { redirect_uri: redirect })).expect(200);
    const target = new URL(res.body.redirect_to);
    expect(target.searchParams.get('session')).toBe('xyz');
    expect(target.searchParams.get('code')).toMatch(/^kiste_code_/);
  });

  it('deny: answers the loopback redirect with error=access_denied and the state, and no code', async () => {
    const params = authorizeParams(pkce().challenge);
    const res = await decide(t, browser, params, 'deny').expect(200);
    const target = new URL(res.body.redirect_to);
    expect(`${target.origin}${target.pathname}`).toBe(REDIRECT_URI);
    expect(target.searchParams.get('error')).toBe('access_denied');
    expect(target.searchParams.get('state')).toBe(params.state);
    expect(target.searchParams.get('code')).toBeNull();
  });

  it('refuses a decision that is neither approve nor deny (A20), issuing no code', async () => {
    const params = authorizeParams(pkce().challenge);
    for (const decision of ['DENY', 'maybe', '']) {
      const res = await decide(t, browser, params, decision);
      await expectOAuthError(res, 400, 'A20', 'decision');
    }
    const missing = await t.api.post('/oauth/authorize').set('cookie', browser.cookie).set('x-csrf-token', browser.csrf).send(params);
    await expectOAuthError(missing, 400, 'A20', 'decision');
  });

  it('accepts the csrf in the body instead of the header', async () => {
    const params = authorizeParams(pkce().challenge);
    const res = await t.api.post('/oauth/authorize').set('cookie', browser.cookie).send({ ...params, decision: 'approve', csrf: browser.csrf }).expect(200);
    expect(new URL(res.body.redirect_to).searchParams.get('code')).toMatch(/^kiste_code_/);
  });

  it('refuses a missing or wrong csrf with A03', async () => {
    const params = authorizeParams(pkce().challenge);
    const missing = await t.api.post('/oauth/authorize').set('cookie', browser.cookie).send({ ...params, decision: 'approve' });
    await expectOAuthError(missing, 403, 'A03');
    const other = await browserFor(t, account);
    const wrongHeader = await t.api.post('/oauth/authorize').set('cookie', browser.cookie).set('x-csrf-token', other.csrf).send({ ...params, decision: 'approve' });
    await expectOAuthError(wrongHeader, 403, 'A03');
    const wrongBody = await t.api.post('/oauth/authorize').set('cookie', browser.cookie).send({ ...params, decision: 'approve', csrf: 'nope' });
    await expectOAuthError(wrongBody, 403, 'A03');
  });

  it('accepts only a browser session: API key and CLI get A04, nobody gets A01', async () => {
    const params = { ...authorizeParams(pkce().challenge), decision: 'approve' };
    await expectOAuthError(await t.api.post('/oauth/authorize').set(bearer(await apiKeyFor(t, account))).send(params), 403, 'A04');
    await expectOAuthError(await t.api.post('/oauth/authorize').set(bearer(await cliTokenFor(t, account))).send(params), 403, 'A04');
    await expectOAuthError(await t.api.post('/oauth/authorize').send(params), 401, 'A01');
  });

  it('checks the authorization request: response_type, client_id, redirect_uri, method, challenge', async () => {
    const { challenge } = pkce();
    await expectOAuthError(await decide(t, browser, authorizeParams(challenge, { response_type: 'token' })), 400, 'A20', 'response_type');
    await expectOAuthError(await decide(t, browser, authorizeParams(challenge, { response_type: undefined })), 400, 'A20', 'response_type');
    await expectOAuthError(await decide(t, browser, authorizeParams(challenge, { client_id: undefined })), 400, 'A20', 'client_id');
    await expectOAuthError(await decide(t, browser, authorizeParams(challenge, { code_challenge_method: 'plain' })), 400, 'A23', 'code_challenge_method');
    await expectOAuthError(await decide(t, browser, authorizeParams(challenge, { code_challenge_method: undefined })), 400, 'A23');
    await expectOAuthError(await decide(t, browser, authorizeParams(challenge, { code_challenge: 'too-short' })), 400, 'A20', 'code_challenge');
    await expectOAuthError(await decide(t, browser, authorizeParams(challenge, { code_challenge: undefined })), 400, 'A20', 'code_challenge');
  });

  it('refuses redirect URIs that are not http loopback addresses with A22, for approve and deny alike', async () => {
    const { challenge } = pkce();
    const refused = [
      'https://example.com/cb',
      'http://example.com/cb',
      'http://127.0.0.1.example.com/cb',
      'http://localhost.example.com/cb',
      'http://10.0.0.1:8080/cb',
      'http://user:secret@127.0.0.1:8080/cb',
      'http://127.0.0.1:8080/cb#fragment',
      'ftp://127.0.0.1/cb',
      'not a url',
    ];
    for (const redirect of refused) {
      for (const decision of ['approve', 'deny']) {
        const res = await decide(t, browser, authorizeParams(challenge, { redirect_uri: redirect }), decision);
        await expectOAuthError(res, 400, 'A22', 'redirect_uri');
      }
    }
    await expectOAuthError(await decide(t, browser, authorizeParams(challenge, { redirect_uri: undefined })), 400, 'A22', 'redirect_uri');
  });

  it('exchanges the code (JSON) for a CLI token usable on /v1 and listed as a cli sign-in with the device', async () => {
    const { verifier, challenge } = pkce();
    const code = await approvedCode(t, browser, authorizeParams(challenge, { device: 'ada-laptop' }));
    const res = await exchange(t, tokenRequest(code, verifier)).expect(200);
    expect(res.body.access_token).toMatch(/^kiste_cli_[A-Za-z0-9_-]{43}$/);
    expect(res.body.token_type).toBe('Bearer');
    expect(res.body.expires_in).toBe(CLI_SESSION_SECONDS);
    expect(res.headers['cache-control']).toBe('no-store');

    const me = await t.api.get('/v1/me').set(bearer(res.body.access_token)).expect(200);
    expect(me.body.id).toBe(account.id);

    const sessions = await t.api.get('/v1/sessions?limit=100').set(bearer(res.body.access_token)).expect(200);
    const entry = sessions.body.data.find((session: { id: string }) => session.id === res.body.session_id);
    expect(entry).toMatchObject({ kind: 'cli', device: 'ada-laptop', current: true });

    // It is a CLI sign-in: it may add device keys and unlock, but is not a browser session.
    await t.api.post('/v1/auth/unlock').set(bearer(res.body.access_token)).expect(200);
    const session = await t.api.get('/v1/auth/session').set(bearer(res.body.access_token)).expect(403);
    expect(session.body.error.code).toBe('A04');
  });

  it('exchanges the code sent as application/x-www-form-urlencoded', async () => {
    const { verifier, challenge } = pkce();
    const code = await approvedCode(t, browser, authorizeParams(challenge));
    const res = await exchange(t, tokenRequest(code, verifier), true).expect(200);
    expect(res.body.access_token).toMatch(/^kiste_cli_/);
    await t.api.get('/v1/me').set(bearer(res.body.access_token)).expect(200);
  });

  it('binds the token to the approving account', async () => {
    const other = await createAccount(t);
    const otherBrowser = await browserFor(t, other);
    const { verifier, challenge } = pkce();
    const code = await approvedCode(t, otherBrowser, authorizeParams(challenge));
    const res = await exchange(t, tokenRequest(code, verifier)).expect(200);
    const me = await t.api.get('/v1/me').set(bearer(res.body.access_token)).expect(200);
    expect(me.body.id).toBe(other.id);
  });

  it('refuses a wrong verifier with A21', async () => {
    const { challenge } = pkce();
    const code = await approvedCode(t, browser, authorizeParams(challenge));
    await expectOAuthError(await exchange(t, tokenRequest(code, pkce().verifier)), 400, 'A21', 'code_verifier');
    // The challenge itself is not the verifier either.
    await expectOAuthError(await exchange(t, tokenRequest(code, challenge)), 400, 'A21', 'code_verifier');
  });

  it('uses a code once (A21 on reuse) and ends the sign-in a replayed code was exchanged for', async () => {
    const { verifier, challenge } = pkce();
    const code = await approvedCode(t, browser, authorizeParams(challenge));
    const first = await exchange(t, tokenRequest(code, verifier)).expect(200);
    await t.api.get('/v1/me').set(bearer(first.body.access_token)).expect(200);
    await expectOAuthError(await exchange(t, tokenRequest(code, verifier)), 400, 'A21', 'code');
    await expectOAuthError(await exchange(t, tokenRequest(code, verifier), true), 400, 'A21', 'code');
    const replayed = await t.api.get('/v1/me').set(bearer(first.body.access_token)).expect(401);
    expect(replayed.body.error.code).toBe('A02');
  });

  it('uses a code once even when two exchanges race', async () => {
    const { verifier, challenge } = pkce();
    const code = await approvedCode(t, browser, authorizeParams(challenge));
    const results = await Promise.all([exchange(t, tokenRequest(code, verifier)), exchange(t, tokenRequest(code, verifier))]);
    expect(results.map((res) => res.status).sort()).toEqual([200, 400]);
    expect(results.find((res) => res.status === 400)!.body.error.code).toBe('A21');
  });

  it('lets a code live 120 seconds (A21 at +121 s)', async () => {
    const early = pkce();
    const earlyCode = await approvedCode(t, browser, authorizeParams(early.challenge));
    const late = pkce();
    const lateCode = await approvedCode(t, browser, authorizeParams(late.challenge));
    clock.advance(119_000);
    await exchange(t, tokenRequest(earlyCode, early.verifier)).expect(200);
    clock.advance(2_000);
    await expectOAuthError(await exchange(t, tokenRequest(lateCode, late.verifier)), 400, 'A21', 'code');
  });

  it('refuses an unknown code with A21', async () => {
    await expectOAuthError(await exchange(t, tokenRequest('kiste_code_unknown', pkce().verifier)), 400, 'A21', 'code');
  });

  it('refuses a different redirect_uri (path, port, host) with A21', async () => {
    const { verifier, challenge } = pkce();
    const code = await approvedCode(t, browser, authorizeParams(challenge));
    for (const redirect of ['http://127.0.0.1:53682/other', 'http://127.0.0.1:53682/callback/', 'http://127.0.0.1:53683/callback', 'http://localhost:53682/callback']) {
      await expectOAuthError(await exchange(t, tokenRequest(code, verifier, { redirect_uri: redirect })), 400, 'A21', 'redirect_uri');
    }
    // None of the failures used the code up.
    await exchange(t, tokenRequest(code, verifier)).expect(200);
  });

  it('refuses a different client_id with A21', async () => {
    const { verifier, challenge } = pkce();
    const code = await approvedCode(t, browser, authorizeParams(challenge));
    await expectOAuthError(await exchange(t, tokenRequest(code, verifier, { client_id: 'other-client' })), 400, 'A21', 'client_id');
  });

  it('gives nothing for a denied request', async () => {
    const { verifier, challenge } = pkce();
    const res = await decide(t, browser, authorizeParams(challenge), 'deny').expect(200);
    expect(new URL(res.body.redirect_to).searchParams.get('code')).toBeNull();
    await expectOAuthError(await exchange(t, tokenRequest('kiste_code_', verifier)), 400, 'A21');
  });

  it('checks the token request against the spec (P01)', async () => {
    const { verifier, challenge } = pkce();
    const code = await approvedCode(t, browser, authorizeParams(challenge));
    await expectOAuthError(await exchange(t, tokenRequest(code, verifier, { grant_type: 'password' })), 400, 'P01', 'grant_type');
    await expectOAuthError(await exchange(t, tokenRequest(code, 'short')), 400, 'P01', 'code_verifier');
    const { code_verifier: _omitted, ...withoutVerifier } = tokenRequest(code, verifier);
    await expectOAuthError(await exchange(t, withoutVerifier), 400, 'P01', 'code_verifier');
    const plainText = await t.api.post('/oauth/token').set('content-type', 'text/plain').send('code=x');
    await expectOAuthError(plainText, 415, 'P04');
    // The code is still good after requests that never reached it.
    await exchange(t, tokenRequest(code, verifier)).expect(200);
  });

  it('accepts any port on 127.0.0.1, [::1] and localhost, and enforces the exact path at token time', async () => {
    for (const redirect of [
      'http://127.0.0.1:1/cb',
      'http://127.0.0.1/cb',
      'http://[::1]:65535/callback',
      'http://localhost:8123/oauth/callback',
    ]) {
      const { verifier, challenge } = pkce();
      const code = await approvedCode(t, browser, authorizeParams(challenge, { redirect_uri: redirect }));
      const url = new URL(redirect);
      const otherPath = `${url.protocol}//${url.host}/elsewhere`;
      await expectOAuthError(await exchange(t, tokenRequest(code, verifier, { redirect_uri: otherPath })), 400, 'A21', 'redirect_uri');
      const res = await exchange(t, tokenRequest(code, verifier, { redirect_uri: redirect })).expect(200);
      await t.api.get('/v1/me').set(bearer(res.body.access_token)).expect(200);
    }
  });
});

describe('the whole CLI sign-in, as a browser walks it', () => {
  let t: TestService;
  beforeAll(async () => {
    t = await startTestService();
  });
  afterAll(() => t.close());

  it('authorize → sign-in → approve page → approve → token', async () => {
    const account = await createAccount(t);
    const { verifier, challenge } = pkce();
    const params = authorizeParams(challenge, { device: 'walker' });
    const authorizeUrl = `/oauth/authorize?${new URLSearchParams(params)}`;

    const signedOut = await t.api.get(authorizeUrl).expect(302);
    const continueTo = new URL(signedOut.headers.location as string, 'http://relative.invalid').searchParams.get('continue')!;
    expect(continueTo).toBe(authorizeUrl);
    await consolePage(t, signedOut.headers.location as string);

    const browser = await browserFor(t, account);
    const signedIn = await t.api.get(continueTo).set('cookie', browser.cookie).expect(302);
    expect(signedIn.headers.location).toBe(`/console/oauth/approve?${new URLSearchParams(params)}`);
    await consolePage(t, signedIn.headers.location as string);
    // The approval page (drawn in the browser) reads its CSRF token from the session.
    const session = await t.api.get('/v1/auth/session').set('cookie', browser.cookie).expect(200);
    expect(session.body.csrf).toBe(browser.csrf);

    const approved = await t.api.post('/oauth/authorize').set('cookie', browser.cookie).set('x-csrf-token', browser.csrf).send({ ...params, decision: 'approve' }).expect(200);
    const callback = new URL(approved.body.redirect_to);
    expect(callback.searchParams.get('state')).toBe(params.state);
    const token = await exchange(t, tokenRequest(callback.searchParams.get('code')!, verifier)).expect(200);
    const sessions = await t.api.get('/v1/sessions').set(bearer(token.body.access_token)).expect(200);
    expect(sessions.body.data.map((s: { kind: string; device: string | null }) => [s.kind, s.device]).sort()).toEqual([
      ['browser', null],
      ['cli', 'walker'],
    ]);
  });
});
