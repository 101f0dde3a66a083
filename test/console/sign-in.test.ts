// Signing in to the web console in real Chromium: the sign-in page, wrong passwords and the lock
// explained, going on to the page asked for (same origin only), sign-up when it is open, the CLI
// approval page showing what the query carries as text, signing out, and a sign-in that ends
// elsewhere. No page may log an error (a CSP refusal counts).
import { ConsoleRig, signIn, startConsole } from '../support/console';
import { screenshot } from '../support/browser';
import { bearer, cliTokenFor, createAccount, TEST_PASSWORD } from '../support/harness';

/** Tests that sign in six times: each is a scrypt hash, slow while a guest suite keeps the other core busy (`npm test` runs both). */
const SIGN_INS_MS = 120_000;

describe('console sign-in', () => {
  let rig: ConsoleRig;
  beforeAll(async () => {
    rig = await startConsole();
  }, 60_000);
  afterAll(() => rig?.close());

  test('signed out, / shows the sign-in page; signing in lands on the machines', async () => {
    const account = await createAccount(rig.t);
    const { page, problems } = await rig.open('/');
    await page.waitForURL(`${rig.url}/console/login`);
    await expect(page.getByRole('heading', { level: 1 }).textContent()).resolves.toBe('Sign in to kiste');
    await expect(page.getByRole('link', { name: 'Create an account' }).count()).resolves.toBe(0); // sign-up is closed here
    await screenshot(page, 'sign-in');
    await signIn(page, account);
    await page.waitForURL(`${rig.url}/`);
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Machines' }).waitFor();
    expect(await page.title()).toMatch(/kiste/);
    expect(problems).toEqual([]);
  });

  test('a wrong password shows the message, hint and request id; the fifth locks and is explained', async () => {
    const account = await createAccount(rig.t);
    const { page, problems } = await rig.open('/console/login');
    await signIn(page, account, 'not the password');
    const alert = page.getByRole('alert');
    await expect(alert.textContent()).resolves.toContain('The e-mail address or password is wrong.');
    await expect(alert.textContent()).resolves.toMatch(/Check the e-mail address and password.*Code A05.*Request id req_/);
    for (let attempt = 2; attempt <= 5; attempt++) await signIn(page, account, `wrong ${attempt}`);
    const lock = page.getByRole('note');
    await lock.getByText('Password sign-in is locked for this account.').waitFor();
    await expect(lock.textContent()).resolves.toContain('kiste auth unlock');
    await screenshot(page, 'sign-in-locked');
    // Even the right password is refused now (from this unknown browser), still explained.
    await signIn(page, account);
    await lock.waitFor();
    expect(page.url()).toBe(`${rig.url}/console/login`);
    expect(problems).toEqual([]);
  }, SIGN_INS_MS);

  test('after sign-in the browser goes on to the page it asked for, never to another origin', async () => {
    const account = await createAccount(rig.t);
    const { page } = await rig.open('/console/keys');
    await page.waitForURL((at) => at.pathname === '/console/login');
    expect(new URL(page.url()).searchParams.get('continue')).toBe('/console/keys');
    await signIn(page, account);
    await page.waitForURL(`${rig.url}/console/keys`);

    // Tabs and newlines are dropped by the browser's URL parser, and a backslash reads as a slash.
    for (const target of ['//evil.example/steal', 'https://evil.example/steal', '/\\evil.example/steal', '/\t/evil.example/steal', '/\n\\evil.example']) {
      const other = await rig.open(`/console/login?continue=${encodeURIComponent(target)}`);
      await signIn(other.page, account);
      await other.page.waitForURL(`${rig.url}/`);
    }
  }, SIGN_INS_MS);

  test('the CLI approval page shows what the query carries as text, not markup', async () => {
    const account = await createAccount(rig.t);
    const device = '<img src=x onerror="window.hacked=1">';
    const query = new URLSearchParams({ response_type: 'code', client_id: 'kiste-cli', redirect_uri: 'http://127.0.0.1:5000/callback', state: 'abc', device });
    const { page, problems } = await rig.open(`/console/oauth/approve?${query}`);
    await page.waitForURL((at) => at.pathname === '/console/login');
    await signIn(page, account);
    await page.waitForURL((at) => at.pathname === '/console/oauth/approve');
    await page.getByRole('heading', { level: 1, name: 'Approve CLI sign-in' }).waitFor();
    await expect(page.locator('main code').first().textContent()).resolves.toBe(device);
    await expect(page.locator('main img').count()).resolves.toBe(0);
    await expect(page.evaluate('window.hacked')).resolves.toBeUndefined();
    await page.getByRole('button', { name: 'Approve' }).waitFor();
    await page.getByRole('button', { name: 'Deny' }).waitFor();
    expect(problems).toEqual([]);
  });

  test('Sign out ends the session on the service; a sign-in ended elsewhere sends the console to sign-in', async () => {
    const account = await createAccount(rig.t);
    const cli = await cliTokenFor(rig.t, account);
    const { page, problems } = await rig.open('/console/login');
    await signIn(page, account);
    await page.waitForURL(`${rig.url}/`);
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.waitForURL(`${rig.url}/console/login`);
    const kinds = async () => ((await rig.t.api.get('/v1/sessions').set(bearer(cli)).expect(200)).body.data as { kind: string }[]).map((s) => s.kind);
    expect(await kinds()).toEqual(['cli']);
    await page.goto(`${rig.url}/console/account`);
    await page.waitForURL((at) => at.pathname === '/console/login');

    // Signed in again, then every browser sign-in is revoked from the CLI: the next request the
    // console makes finds the session gone and asks to sign in again, saying why.
    await signIn(page, account);
    await page.waitForURL(`${rig.url}/console/account`);
    await rig.t.api.post('/v1/sessions/revoke-all').set(bearer(cli)).expect(200);
    // The console notices at its next request: a live update may beat the click to it.
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'API keys' }).click({ timeout: 5_000 }).catch(() => undefined);
    await page.waitForURL((at) => at.pathname === '/console/login');
    await page.getByText('Your sign-in ended').waitFor();
    expect(problems).toEqual([]);
  });
});

describe('console sign-up (open)', () => {
  let rig: ConsoleRig;
  beforeAll(async () => {
    rig = await startConsole({ env: { KISTE_OPEN_SIGNUP: 'true' } });
  }, 60_000);
  afterAll(() => rig?.close());

  test('the sign-in page offers it; a new account is signed in at once', async () => {
    const { page, problems } = await rig.open('/console/login');
    await page.getByRole('link', { name: 'Create an account' }).click();
    await page.waitForURL(`${rig.url}/console/signup`);
    const email = `new-${Date.now()}@example.com`;
    await page.getByLabel('E-mail').fill(email);
    await page.getByLabel('Name (optional)').fill('New Person');
    await page.getByLabel('Password').fill(TEST_PASSWORD);
    await page.getByRole('button', { name: 'Create account' }).click();
    await page.waitForURL(`${rig.url}/`);
    await page.getByText(email).waitFor();
    expect(problems).toEqual([]);
  });
});
