// The kiste CLI's account commands against a listening service: API keys (create prints the value
// alone, list, revoke), device keys (add, list, delete), the event stream (list, --follow sees a new
// event as it happens), auth unlock, and a refusal shown with the service's message, hint and request id.
import { execFile } from 'node:child_process';
import { createServer, Server } from 'node:http';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { bearer, cliTokenFor, createAccount, startTestService, TestService } from '../support/harness';
import { cliEnv, runKiste, spawnKiste } from '../support/kiste-cli';

describe('kiste keys, device-keys, events', () => {
  let t: TestService;
  let server: Server;
  let url: string;
  let dir: string;
  let key: string;
  const env = () => cliEnv({ KISTE_CONFIG_DIR: join(dir, 'config'), KISTE_URL: url, KISTE_TOKEN: key });
  const kiste = (args: string[]) => runKiste(args, env());

  beforeAll(async () => {
    t = await startTestService();
    server = createServer(t.app);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
    dir = mkdtempSync(join(tmpdir(), 'kiste-cli-account-'));
    key = await cliTokenFor(t, await createAccount(t)); // as after `kiste login` (API keys cannot make API keys)
  });
  afterAll(async () => {
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await t.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('API keys: create prints the value alone; list; revoke ends it', async () => {
    const created = await kiste(['keys', 'create', 'deploy bot', '--days', '7']);
    expect(created).toMatchObject({ code: 0, stdout: expect.stringMatching(/^kiste_key_\S+\n$/) });
    const value = created.stdout.trim();
    await t.api.get('/v1/me').set(bearer(value)).expect(200);
    const list = await kiste(['keys', 'list']);
    expect(list.stdout).toMatch(/^ID +LABEL +HINT +EXPIRES +LAST USED\n/);
    expect(list.stdout).toContain('deploy bot');
    const listed = JSON.parse((await kiste(['--json', 'keys', 'list'])).stdout) as Array<{ id: string; label: string }>;
    const id = listed.find((k) => k.label === 'deploy bot')!.id;
    expect(await kiste(['keys', 'revoke', id])).toMatchObject({ code: 0, stdout: `revoked ${id}\n` });
    await t.api.get('/v1/me').set(bearer(value)).expect(401);

    const refused = await kiste(['keys', 'create', 'x', '--days', '0']);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/^kiste: .*\(code: P01\)\n  hint: .+\n  request id: req_/);
  });

  test('auth unlock lifts the lock that failed browser sign-ins set', async () => {
    const account = await createAccount(t);
    const cli = await cliTokenFor(t, account);
    for (let attempt = 0; attempt < 5; attempt++) {
      await t.api.post('/v1/auth/login').send({ email: account.email, password: 'not the password' }).expect(attempt < 4 ? 401 : 403);
    }
    expect((await t.api.get('/v1/me').set(bearer(cli)).expect(200)).body.sign_in_locked).toBe(true);
    const unlocked = await runKiste(['--json', 'auth', 'unlock'], cliEnv({ KISTE_CONFIG_DIR: join(dir, 'config'), KISTE_URL: url, KISTE_TOKEN: cli }));
    expect(unlocked.code).toBe(0);
    expect(JSON.parse(unlocked.stdout)).toMatchObject({ object: 'sign_in_unlock', unlocked: true });
    expect((await t.api.get('/v1/me').set(bearer(cli)).expect(200)).body.sign_in_locked).toBe(false);
  });

  test('device keys: add, list, delete', async () => {
    await new Promise<void>((resolve, reject) =>
      execFile('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', 'laptop', '-f', join(dir, 'laptop')], (e) => (e ? reject(e) : resolve())),
    );
    const added = await kiste(['device-keys', 'add', 'laptop', join(dir, 'laptop.pub')]);
    expect(added).toMatchObject({ code: 0, stdout: expect.stringMatching(/^[0-9a-f-]{36} SHA256:[A-Za-z0-9+/]{43}\n$/) });
    const [id, fingerprint] = added.stdout.trim().split(' ');
    const list = await kiste(['device-keys', 'list']);
    expect(list.stdout).toMatch(new RegExp(`^ID +NAME +FINGERPRINT +ADDED\\n${id} +laptop +${fingerprint!.replace(/[+/]/g, '\\$&')} +`));
    expect(await kiste(['device-keys', 'delete', id!])).toMatchObject({ code: 0, stdout: `deleted ${id}\n` });
    expect((await kiste(['device-keys', 'list'])).stdout).not.toContain(id);
    expect(readFileSync(join(dir, 'laptop.pub'), 'utf8')).toMatch(/^ssh-ed25519 /);
  });

  test('events: the stream so far, and --follow shows a new event as it happens', async () => {
    const all = await kiste(['events']);
    expect(all.stdout).toMatch(/^\d+ {2}\S+ {2}api_token\.created {2}api_token\//m);
    expect(all.stdout).toMatch(/device_key\.deleted/);
    const last = Math.max(...all.stdout.trim().split('\n').map((line) => Number(line.split(' ')[0])));

    const follower = spawnKiste(['--json', 'events', '--follow', '--after', String(last)], env());
    let out = '';
    follower.stdout.on('data', (c) => (out += c));
    try {
      await new Promise((resolve) => setTimeout(resolve, 3000)); // the CLI starts and waits on the long poll
      await t.api.post('/v1/api-tokens').set(bearer(key)).send({ label: 'followed', expires_in_seconds: 3600 }).expect(200);
      const deadline = Date.now() + 30_000;
      while (!out.includes('\n')) {
        if (Date.now() > deadline) throw new Error('no event line from --follow');
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect(JSON.parse(out.split('\n')[0]!)).toMatchObject({ sequence: last + 1, type: 'api_token.created', resource_type: 'api_token' });
    } finally {
      follower.kill();
    }
  });
});
