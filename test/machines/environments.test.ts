// Environments on real guests (minimal image, QEMU): a repository the test serves over HTTP with
// basic auth from a network namespace of its own (reached through KISTE_MACHINE_EGRESS_ALLOW) is
// cloned at a tag with credentials from a secret file; variables reach login shells and exec; the
// secret files are 0600; the setup script runs in the background and its steps and output are
// readable; version 2 leaves the first instance on version 1, and its failing script is reported.
// The secret's plaintext appears in no API answer, log line or database row.
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from 'pg';
import { ensureTestImage, TEST_IMAGE_DIR } from '../support/images';
import { writeGuestFiles } from '../../src/domain/environment-setup';
import { guestRun } from '../support/guest';
import { type GitServer, gitServer, GIT_PORT as PORT } from '../support/git-server';
import { apiKeyFor, bearer, createAccount, startTestService, TestService } from '../support/harness';

jest.setTimeout(900_000);

const SSH_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMh0vbf5v3M0Kz1cl5q3lM1kP1nN7zQ0b3hVv0ZQk6d1 test@kiste';
const SECRET = `kiste-secret-${randomBytes(12).toString('hex')}`;
const GIT_PASSWORD = `git-token-${randomBytes(12).toString('hex')}`;

type Line = { type: string; stream?: string; data_base64?: string; exit_code?: number };
const stdoutOf = (res: { text: string }) => res.text.trim().split('\n').map((line) => JSON.parse(line) as Line)
  .filter((line) => line.type === 'output' && line.stream === 'stdout').map((line) => Buffer.from(line.data_base64!, 'base64').toString()).join('');

/** Every file of the SQLite database, or every row of every table on PostgreSQL, as text. */
async function databaseText(t: TestService): Promise<string> {
  const database = t.services.database as unknown as { url?: string; dataDir: string };
  if (!database.url) {
    return readdirSync(database.dataDir).filter((name) => statSync(join(database.dataDir, name)).isFile())
      .map((name) => readFileSync(join(database.dataDir, name)).toString('latin1')).join('\n');
  }
  const client = new Client({ connectionString: database.url });
  await client.connect();
  try {
    const tables = await client.query<{ table_name: string }>("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'");
    let text = '';
    for (const { table_name } of tables.rows) {
      const rows = await client.query(`SELECT t::text AS row FROM "${table_name.replace(/"/g, '')}" t`);
      text += rows.rows.map((r) => r.row).join('\n');
    }
    return text;
  } finally {
    await client.end();
  }
}

describe('environments on real guests', () => {
  let t: TestService;
  let key: string;
  let server: GitServer;
  const logLines: string[] = [];
  const answers: string[] = [];
  const auth = () => bearer(key);
  const record = <T extends { text: string }>(res: T): T => {
    answers.push(res.text);
    return res;
  };

  async function setupOf(name: string, until: (status: string) => boolean) {
    const deadline = Date.now() + 600_000;
    for (;;) {
      const res = record(await t.api.get(`/v1/instances/${name}/setup`).set(auth()).expect(200));
      if (until(res.body.status) || Date.now() > deadline) return res.body;
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  }

  beforeAll(async () => {
    server = gitServer(GIT_PASSWORD);
    await ensureTestImage();
    t = await startTestService({
      env: { KISTE_IMAGE_DIR: TEST_IMAGE_DIR, KISTE_IMAGE_PROFILE: 'minimal', KISTE_MACHINE_EGRESS_ALLOW: server.cidr },
      log: (line) => logLines.push(line),
      compute: 'worker',
    });
    expect(await t.services.machineHost.refreshImage('minimal')).not.toBeNull();
    key = await apiKeyFor(t, await createAccount(t));
  });

  afterAll(async () => {
    server?.close();
    if (!t) return;
    for (const id of await t.services.machineHost.knownMachineIds()) await t.services.machineHost.destroy(id);
    await t.close();
  });

  it('clones, writes variables and secret files, runs the setup script; version 2 leaves the first machine on version 1', async () => {
    const repoUrl = `http://${server.address}:${PORT}/app.git`;
    const created = record(await t.api.post('/v1/environments').set(auth()).send({
      name: 'web-dev',
      repositories: [{ url: repoUrl, ref: 'v1', credentials_file: '/root/.git-credentials' }],
      variables: { GREETING: "hello 'world'", TRICKY: '$HOME; echo injected' },
      secret_files: [
        { path: '/root/.git-credentials', content_base64: Buffer.from(`http://kiste:${GIT_PASSWORD}@${server.address}:${PORT}\n`).toString('base64') },
        { path: '/etc/app/token', content_base64: Buffer.from(SECRET).toString('base64') },
      ],
      setup_script: 'set -e\necho "setup sees: $GREETING"\ncat README\necho done > /root/setup-marker\n',
      services: [{ name: 'web', port: 3000, access: 'public', wake_on_request: true }],
    }).expect(200));
    expect(created.body).toMatchObject({ name: 'web-dev', current_version: 1 });
    const v1 = record(await t.api.get('/v1/environments/web-dev').set(auth()).expect(200)).body.current;
    expect(v1.secret_paths).toEqual(['/root/.git-credentials', '/etc/app/token']);
    expect(v1.repositories).toEqual([{ url: repoUrl, ref: 'v1', path: '/root/app', credentials_file: '/root/.git-credentials' }]);
    expect(v1.services).toEqual([{ name: 'web', port: 3000, access: 'public', wake_on_request: true }]);

    const started = Date.now();
    const first = record(await t.api.post('/v1/instances').set(auth())
      .send({ profile: 'desktop', name: 'env-one', vcpu: 1, memory_mib: 768, disk_mib: 2048, ssh_public_key: SSH_KEY, environment: 'web-dev' }).expect(200));
    const createMs = Date.now() - started;
    expect(first.body.environment_version_id).toBe(v1.id);
    expect(['pending', 'running']).toContain(first.body.setup_status);
    expect(first.body.components.map((c: { id: string }) => c.id)).toEqual(expect.arrayContaining(['git', 'node']));
    // The environment's hosted service is the machine's from the create on.
    const published = record(await t.api.get('/v1/instances/env-one/services').set(auth()).expect(200)).body.data;
    expect(published.map((one: { name: string; port: number; access: string; wake_on_request: boolean }) => [one.name, one.port, one.access, one.wake_on_request])).toEqual([['web', 3000, 'public', true]]);

    // Secret files and variables are there when the create answers.
    const files = await guestRun(t, first.body.id, 'stat -c "%a %U" /etc/app/token /root/.git-credentials; cat /etc/app/token');
    expect(files.stdout).toBe(`600 root\n600 root\n${SECRET}`);
    const login = await guestRun(t, first.body.id, 'bash -lc \'printf "%s|%s" "$GREETING" "$TRICKY"\'');
    expect(login.stdout).toBe("hello 'world'|$HOME; echo injected");
    const exec = record(await t.api.post('/v1/instances/env-one/exec').set(auth()).send({ argv: ['sh', '-c', 'printf "%s" "$GREETING"'] }).expect(200));
    expect(stdoutOf(exec)).toBe("hello 'world'");
    const overridden = record(await t.api.post('/v1/instances/env-one/exec').set(auth()).send({ argv: ['sh', '-c', 'printf "%s" "$GREETING"'], env: { GREETING: 'mine' } }).expect(200));
    expect(stdoutOf(overridden)).toBe('mine');

    const setup = await setupOf('env-one', (status) => status === 'succeeded' || status === 'failed');
    expect(setup).toMatchObject({ status: 'succeeded', error: null, environment_version_id: v1.id, environment_name: 'web-dev', environment_version: 1 });
    expect(setup.steps.map((s: { name: string; status: string }) => `${s.name}:${s.status}`)).toEqual(['files:succeeded', 'clone:succeeded', 'setup_script:succeeded']);
    expect(setup.output).toContain("setup sees: hello 'world'");
    expect(setup.output).toContain('release one'); // the script ran in the checkout, at tag v1
    const checkout = await guestRun(t, first.body.id, 'cat /root/app/README /root/setup-marker; git -C /root/app describe --tags');
    expect(checkout.stdout).toBe('release one\ndone\nv1\n');
    expect(server.requests().some((line) => line.startsWith('auth /app.git/'))).toBe(true);
    const [files_, clone, script] = setup.steps as { duration_ms: number }[];
    // eslint-disable-next-line no-console
    console.log(`create with environment: the create answered after ${createMs} ms (boot, then ${files_.duration_ms} ms writing files), clone ${clone.duration_ms} ms, setup script ${script.duration_ms} ms`);

    const events = record(await t.api.get('/v1/events?after=0&limit=200').set(auth()).expect(200)).body.data as { type: string; data: Record<string, unknown> }[];
    expect(events.find((e) => e.type === 'instance.setup_completed')?.data).toMatchObject({ name: 'env-one', status: 'succeeded', environment_version_id: v1.id });

    // Version 2: a new variable and a failing script; secret files and repositories kept.
    const updated = record(await t.api.put('/v1/environments/web-dev').set(auth())
      .send({ variables: { GREETING: 'version two' }, setup_script: 'echo "v2 script: $GREETING"\nexit 3\n' }).expect(200));
    expect(updated.body.current_version).toBe(2);
    expect(updated.body.current.secret_paths).toEqual(['/root/.git-credentials', '/etc/app/token']);
    const versions = record(await t.api.get('/v1/environments/web-dev/versions').set(auth()).expect(200)).body.data;
    expect(versions.map((v: { version: number }) => v.version)).toEqual([2, 1]);

    const second = record(await t.api.post('/v1/instances').set(auth())
      .send({ profile: 'desktop', name: 'env-two', vcpu: 1, memory_mib: 768, disk_mib: 2048, ssh_public_key: SSH_KEY, environment: 'web-dev' }).expect(200));
    expect(second.body.environment_version_id).toBe(updated.body.current.id);
    const failed = await setupOf('env-two', (status) => status === 'succeeded' || status === 'failed');
    expect(failed.status).toBe('failed');
    expect(failed.error).toContain('exit code 3');
    expect(failed.error).toContain('v2 script: version two');
    const two = record(await t.api.get('/v1/instances/env-two').set(auth()).expect(200)).body;
    expect(two).toMatchObject({ setup_status: 'failed' });
    expect(two.setup_error).toContain('exit code 3');

    // The first machine keeps version 1.
    const one = record(await t.api.get('/v1/instances/env-one').set(auth()).expect(200)).body;
    expect(one).toMatchObject({ environment_version_id: v1.id, setup_status: 'succeeded' });
    const stillOne = record(await t.api.post('/v1/instances/env-one/exec').set(auth()).send({ argv: ['sh', '-c', 'printf "%s" "$GREETING"'] }).expect(200));
    expect(stdoutOf(stillOne)).toBe("hello 'world'");

    // The secret's plaintext: nowhere in what the API answered, the service logged or the database holds.
    record(await t.api.get('/v1/instances').set(auth()).expect(200));
    record(await t.api.get('/v1/environments').set(auth()).expect(200));
    const everything = answers.join('\n');
    expect(everything).not.toContain(SECRET);
    expect(everything).not.toContain(GIT_PASSWORD);
    expect(logLines.length).toBeGreaterThan(10);
    expect(logLines.join('')).not.toContain(SECRET);
    expect(logLines.join('')).not.toContain(Buffer.from(SECRET).toString('base64'));
    const stored = await databaseText(t);
    expect(stored).toContain('/etc/app/token'); // the search reads the rows …
    expect(stored).not.toContain(SECRET); // … and the secret is not in them, in clear or base64
    expect(stored).not.toContain(Buffer.from(SECRET).toString('base64'));
    expect(stored).not.toContain(GIT_PASSWORD);
  });

  it('writes files atomically with their modes; under a home, the file and the folders made for it are the user\'s', async () => {
    const id = record(await t.api.get('/v1/instances/env-one').set(auth()).expect(200)).body.id;
    expect((await guestRun(t, id, 'useradd --create-home dev && mkdir -p /etc/kiste-test && echo old > /etc/kiste-test/file && id -u dev')).stdout).toMatch(/^\d+\n$/);
    await writeGuestFiles(t.services.machineHost.agent(id), [
      { path: '/home/dev/.config/app/token', content: Buffer.from('for dev'), mode: '0600' },
      { path: '/home/dev/notes', content: Buffer.from('top'), mode: '0644' },
      { path: '/etc/kiste-test/file', content: Buffer.from('new\n'), mode: '0644' },
      { path: '/opt/made/here/run.sh', content: Buffer.from('#!/bin/sh\n'), mode: '0700' },
    ]);
    const seen = await guestRun(t, id, [
      'stat -c "%n %a %U:%G" /home/dev/.config /home/dev/.config/app /home/dev/.config/app/token /home/dev/notes /etc/kiste-test/file /opt/made /opt/made/here /opt/made/here/run.sh',
      'cat /home/dev/.config/app/token; echo; cat /etc/kiste-test/file; ls -a /etc/kiste-test /home/dev/.config/app | grep -c kiste-tmp || true',
    ].join('; '));
    expect(seen.stdout).toBe([
      '/home/dev/.config 700 dev:dev',
      '/home/dev/.config/app 700 dev:dev',
      '/home/dev/.config/app/token 600 dev:dev',
      '/home/dev/notes 644 dev:dev',
      '/etc/kiste-test/file 644 root:root',
      '/opt/made 700 root:root', // made under umask 077, like the secret files' folders
      '/opt/made/here 700 root:root',
      '/opt/made/here/run.sh 700 root:root',
      'for dev',
      'new',
      '0', // no temporary file left
      '',
    ].join('\n'));
  });

  it('refuses unsafe manifests with 4xx and stores nothing', async () => {
    const bad = [
      { body: { name: 'bad', secret_files: [{ path: '../etc/passwd', content_base64: 'eA==' }] }, status: 422, param: 'secret_files[0].path' },
      { body: { name: 'bad', repositories: [{ url: 'file:///etc' }] }, status: 422, param: 'repositories[0].url' },
      { body: { name: 'bad', repositories: [{ url: '--upload-pack=touch /tmp/x' }] }, status: 422, param: 'repositories[0].url' },
      { body: { name: 'bad', repositories: [{ url: 'https://example.com/a.git', path: '/root/../../etc' }] }, status: 422, param: 'repositories[0].path' },
      { body: { name: 'bad', variables: { A: 'x\u0000y' } }, status: 400, param: 'variables.A', code: 'P01' },
      { body: { name: 'bad', setup_script: 'x'.repeat(40_000) }, status: 400 },
      { body: { name: 'bad', secret_files: Array.from({ length: 21 }, (_, i) => ({ path: `/root/s${i}`, content_base64: 'eA==' })) }, status: 400 },
      { body: { name: 'bad', services: [{ name: 'web', port: 3000 }, { name: 'web', port: 3001 }] }, status: 422, param: 'services[1].name' },
      { body: { name: 'bad', services: [{ name: 'web', port: 3000 }, { name: 'api', port: 3000 }] }, status: 422, param: 'services[1].port' },
      { body: { name: 'bad', services: [{ name: 'Web!', port: 3000 }] }, status: 400 },
      { body: { name: 'bad', services: [{ name: 'web', port: 70000 }] }, status: 400 },
    ];
    for (const { body, status, param, code } of bad as { body: object; status: number; param?: string; code?: string }[]) {
      const res = await t.api.post('/v1/environments').set(auth()).send(body).expect(status);
      if (param) expect(res.body.error).toMatchObject({ code: code ?? 'K32', param });
    }
    const big = await t.api.post('/v1/environments').set(auth()).send({ name: 'bad', setup_script: 'x'.repeat(70_000) });
    expect(big.status).toBe(413);
    const list = await t.api.get('/v1/environments').set(auth()).expect(200);
    expect(list.body.data.map((e: { name: string }) => e.name)).not.toContain('bad');
    const unsafeUpdate = await t.api.put('/v1/environments/web-dev').set(auth()).send({ repositories: [{ url: 'ext::sh -c id' }] }).expect(422);
    expect(unsafeUpdate.body.error.code).toBe('K32');
    expect((await t.api.get('/v1/environments/web-dev').set(auth()).expect(200)).body.current_version).toBe(2);
  });
});
