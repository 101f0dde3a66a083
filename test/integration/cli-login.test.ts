// `kiste login` end to end against a listening service, approved in a real (headless) Chromium: the
// CLI prints the authorize address and waits on its loopback port; the browser opens it, lands on the
// console sign-in page, signs in with the account's password, lands on the approval page and clicks
// Approve (or Deny), and the page sends it on to the CLI's callback. On approval the CLI exchanges
// the code, keeps the token 0600 and uses it (`whoami`); a stray callback with another state changes
// nothing; `kiste logout` revokes the sign-in and forgets it. On denial the CLI fails and saves nothing.
//
// Needs Chromium (Debian package `chromium`, or KISTE_CHROMIUM=/path/to/chrome); without it the tests
// fail, they are not skipped.
import { ChildProcess } from 'node:child_process';
import { createServer, Server } from 'node:http';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { pollUntil } from '../../src/compute/qemu/wait';
import { launchChromium } from '../support/browser';
import { bearer, browserFor, createAccount, startTestService, TEST_PASSWORD, TestService } from '../support/harness';
import { cliEnv, runKiste, spawnKiste } from '../support/kiste-cli';

/** `kiste login --no-browser` as a child: its output so far, and its exit code once it ends. */
interface LoginRun {
  child: ChildProcess;
  stdout(): string;
  stderr(): string;
  exited: Promise<number>;
}

describe('kiste login / logout through a real browser', () => {
  let t: TestService;
  let server: Server;
  let url: string;
  let browser: Browser | undefined;
  const configDirs: string[] = [];
  const children: ChildProcess[] = [];
  const contexts: BrowserContext[] = [];

  beforeAll(async () => {
    browser = await launchChromium();
    t = await startTestService();
    server = createServer(t.app);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  }, 60_000);
  afterAll(async () => {
    for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    for (const context of contexts) await context.close().catch(() => undefined);
    await browser?.close();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
    await t?.close();
    for (const dir of configDirs) rmSync(dir, { recursive: true, force: true });
  });

  function newConfigDir(): string {
    const dir = mkdtempSync(join(tmpdir(), 'kiste-cli-'));
    configDirs.push(dir);
    return dir;
  }

  /** A fresh browser profile (no cookies): every login starts signed out of the console. */
  async function newPage(): Promise<Page> {
    const context = await browser!.newContext();
    contexts.push(context);
    return context.newPage();
  }

  function startLogin(configDir: string): LoginRun {
    const child = spawnKiste(['--url', url, 'login', '--no-browser'], cliEnv({ KISTE_CONFIG_DIR: configDir }));
    children.push(child);
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (c) => (stdout += c));
    child.stderr!.on('data', (c) => (stderr += c));
    const exited = new Promise<number>((resolve) => child.on('exit', (code) => resolve(code ?? 1)));
    return { child, stdout: () => stdout, stderr: () => stderr, exited };
  }

  async function authorizeAddress(login: LoginRun): Promise<URL> {
    const printed = await pollUntil(() => {
      if (login.child.exitCode !== null) throw new Error(`kiste login ended (${login.child.exitCode}) before printing the address: ${login.stderr()}`);
      return /(http\S+\/oauth\/authorize\?\S+)/.exec(login.stderr())?.[1];
    }, 30_000, 50);
    if (!printed) throw new Error(`no authorize address printed: ${login.stderr()}`);
    return new URL(printed);
  }

  /** Opens the authorize address signed out, signs in on the console page, returns on the approval page. */
  async function signInToApproval(page: Page, authorize: URL, email: string): Promise<void> {
    await page.goto(authorize.toString());
    const signIn = new URL(page.url());
    expect(signIn.origin + signIn.pathname).toBe(`${url}/console/login`);
    expect(signIn.searchParams.get('continue')).toBe(authorize.pathname + authorize.search);
    await expect(page.getByRole('heading', { level: 1 }).textContent()).resolves.toBe('Sign in to kiste');

    await page.getByLabel('E-mail').fill(email);
    await page.getByLabel('Password').fill(TEST_PASSWORD);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL((at) => at.pathname === '/console/oauth/approve');
    const approve = new URL(page.url());
    expect(Object.fromEntries(approve.searchParams)).toEqual(Object.fromEntries(authorize.searchParams));
    await expect(page.getByRole('heading', { level: 1 }).textContent()).resolves.toBe('Approve CLI sign-in');
    await expect(page.locator('strong').textContent()).resolves.toBe(email);
    await expect(page.locator('body').textContent()).resolves.toContain(`returning to ${authorize.searchParams.get('redirect_uri')}`);
  }

  /** Waits until the browser has followed the page's redirect to the CLI's loopback callback. */
  async function callbackReached(page: Page, redirectUri: string): Promise<URL> {
    await page.waitForURL((at) => at.origin + at.pathname === redirectUri);
    return new URL(page.url());
  }

  test('signs in through the browser approval, keeps the token 0600, signs out', async () => {
    const account = await createAccount(t);
    const configDir = newConfigDir();
    const kiste = (args: string[]) => runKiste(['--url', url, ...args], cliEnv({ KISTE_CONFIG_DIR: configDir }));
    const login = startLogin(configDir);
    const authorize = await authorizeAddress(login);
    expect(authorize.origin).toBe(url);
    const params = Object.fromEntries(authorize.searchParams);
    expect(params).toMatchObject({ response_type: 'code', client_id: 'kiste-cli', code_challenge_method: 'S256', device: hostname().slice(0, 100) });
    expect(params.redirect_uri).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/callback$/);
    expect(params.code_challenge).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(params.state).toMatch(/^[A-Za-z0-9_-]{16,}$/);

    // Someone else's answer (another state) is refused and the CLI keeps waiting.
    const stray = await fetch(`${params.redirect_uri}?code=kiste_code_forged&state=not-yours`);
    expect(stray.status).toBe(400);
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(login.child.exitCode).toBeNull();

    // The person at the browser: sign in, approve.
    const page = await newPage();
    await signInToApproval(page, authorize, account.email);
    await page.getByRole('button', { name: 'Approve' }).click();
    const callback = await callbackReached(page, params.redirect_uri!);
    expect(callback.searchParams.get('state')).toBe(params.state);
    expect(callback.searchParams.get('code')).toBeTruthy();
    expect(callback.searchParams.get('error')).toBeNull();
    await expect(page.locator('body').textContent()).resolves.toContain('kiste: signed in.');

    expect(await login.exited).toBe(0);
    expect(login.stdout()).toBe(`Signed in to ${url} as ${account.email}.\n`);

    const file = join(configDir, 'config.json');
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const saved = JSON.parse(readFileSync(file, 'utf8'));
    expect(saved).toMatchObject({ url, token: expect.stringMatching(/^kiste_cli_/) });
    const sessions = await t.api.get('/v1/sessions').set(bearer(saved.token)).expect(200);
    const signIns = sessions.body.data as { kind: string; current: boolean; device: string | null; user_agent: string | null }[];
    // The CLI's own sign-in, and the console sign-in Chromium made on the way.
    expect(signIns.find((s) => s.current)).toMatchObject({ kind: 'cli', device: params.device });
    expect(signIns.filter((s) => s.kind === 'browser').map((s) => s.user_agent)).toEqual([expect.stringMatching(/Chrome/)]);

    expect(await kiste(['whoami'])).toMatchObject({ code: 0, stdout: `${account.email}\n` });
    expect(await kiste(['logout'])).toMatchObject({ code: 0, stdout: 'Signed out.\n' });
    expect(JSON.parse(readFileSync(file, 'utf8')).token).toBeUndefined();
    await t.api.get('/v1/me').set(bearer(saved.token)).expect(401);
    const after = await kiste(['whoami']);
    expect(after.code).toBe(1);
    expect(after.stderr).toMatch(/kiste login/);
  }, 120_000);

  test('Deny in the browser: the CLI fails with a clear message and saves no token', async () => {
    const account = await createAccount(t);
    const configDir = newConfigDir();
    const login = startLogin(configDir);
    const authorize = await authorizeAddress(login);
    const redirectUri = authorize.searchParams.get('redirect_uri')!;

    const page = await newPage();
    await signInToApproval(page, authorize, account.email);
    await page.getByRole('button', { name: 'Deny' }).click();
    const callback = await callbackReached(page, redirectUri);
    expect(callback.searchParams.get('error')).toBe('access_denied');
    expect(callback.searchParams.get('state')).toBe(authorize.searchParams.get('state'));
    expect(callback.searchParams.get('code')).toBeNull();
    await expect(page.locator('body').textContent()).resolves.toContain('Sign-in was not approved.');

    const code = await login.exited;
    expect(code).not.toBe(0);
    expect(login.stdout()).toBe('');
    expect(login.stderr()).toMatch(/^kiste: sign-in was denied in the browser \(access_denied\)$/m);
    expect(login.stderr()).toMatch(/hint: .*kiste login/);

    // Nothing saved, and the service holds no CLI sign-in for the account.
    expect(existsSync(join(configDir, 'config.json'))).toBe(false);
    const consoleSignIn = await browserFor(t, account);
    const sessions = await t.api.get('/v1/sessions').set('cookie', consoleSignIn.cookie).expect(200);
    const kinds = (sessions.body.data as { kind: string }[]).map((s) => s.kind);
    expect(kinds).toEqual(['browser', 'browser']); // Chromium's and this check's
  }, 120_000);
});
