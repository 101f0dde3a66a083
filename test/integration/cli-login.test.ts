// `kiste login` end to end against a listening service: the CLI prints the authorize address and
// waits on its loopback port; a signed-in console session approves (as the console page does); the
// CLI exchanges the code, keeps the token 0600 and uses it (`whoami`); a stray callback with another
// state changes nothing; `kiste logout` revokes the sign-in and forgets it.
import { createServer, Server } from 'node:http';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { bearer, browserFor, createAccount, startTestService, TestService } from '../support/harness';
import { cliEnv, runKiste, spawnKiste } from '../support/kiste-cli';

describe('kiste login / logout', () => {
  let t: TestService;
  let server: Server;
  let url: string;
  let configDir: string;
  const env = () => cliEnv({ KISTE_CONFIG_DIR: configDir });
  const kiste = (args: string[]) => runKiste(['--url', url, ...args], env());

  beforeAll(async () => {
    t = await startTestService();
    server = createServer(t.app);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
    configDir = mkdtempSync(join(tmpdir(), 'kiste-cli-'));
  });
  afterAll(async () => {
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await t.close();
    rmSync(configDir, { recursive: true, force: true });
  });

  test('signs in through the browser approval, keeps the token 0600, signs out', async () => {
    const account = await createAccount(t);
    const child = spawnKiste(['--url', url, 'login', '--no-browser'], env());
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (c) => (stdout += c));
    child.stderr!.on('data', (c) => (stderr += c));
    const exited = new Promise<number>((resolve) => child.on('exit', (code) => resolve(code ?? 1)));

    const deadline = Date.now() + 30_000;
    while (!/\/oauth\/authorize\?\S+/.test(stderr)) {
      if (Date.now() > deadline) throw new Error(`no authorize address printed: ${stderr}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const authorize = new URL(/(http\S+\/oauth\/authorize\?\S+)/.exec(stderr)![1]!);
    const params = Object.fromEntries(authorize.searchParams);
    expect(params).toMatchObject({ response_type: 'code', client_id: 'kiste-cli', code_challenge_method: 'S256' });
    expect(params.redirect_uri).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/callback$/);

    // Someone else's answer (another state) is refused and the CLI keeps waiting.
    const stray = await fetch(`${params.redirect_uri}?code=kiste_code_forged&state=not-yours`);
    expect(stray.status).toBe(400);

    // The console page's approval, as a signed-in browser.
    const browser = await browserFor(t, account);
    const approved = await t.api.post('/oauth/authorize').set('cookie', browser.cookie).set('x-csrf-token', browser.csrf).send({ ...params, decision: 'approve' }).expect(200);
    const callback = await fetch(approved.body.redirect_to);
    expect(callback.status).toBe(200);
    expect(await exited).toBe(0);
    expect(stdout).toBe(`Signed in to ${url} as ${account.email}.\n`);

    const file = join(configDir, 'config.json');
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const saved = JSON.parse(readFileSync(file, 'utf8'));
    expect(saved).toMatchObject({ url, token: expect.stringMatching(/^kiste_cli_/) });
    const sessions = await t.api.get('/v1/sessions').set(bearer(saved.token)).expect(200);
    expect(JSON.stringify(sessions.body)).toContain('cli');

    expect(await kiste(['whoami'])).toMatchObject({ code: 0, stdout: `${account.email}\n` });
    expect(await kiste(['logout'])).toMatchObject({ code: 0, stdout: 'Signed out.\n' });
    expect(JSON.parse(readFileSync(file, 'utf8')).token).toBeUndefined();
    await t.api.get('/v1/me').set(bearer(saved.token)).expect(401);
    const after = await kiste(['whoami']);
    expect(after.code).toBe(1);
    expect(after.stderr).toMatch(/kiste login/);
  });
});
