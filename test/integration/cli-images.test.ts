// The kiste CLI's image and environment commands against a listening service with the minimal image:
// environments (create with repositories, variables, a secret file and a setup script; show; update
// replacing only the kinds of flags given; versions; a secret file's content never in any output),
// images (the component catalogue, resolve with catalogue defaults, create from universal components:
// ready at once, list, show, log, delete), the runtime version, `kiste create --image/--env` refusals,
// `kiste setup`, and refusals shown with the service's message, hint and request id. The layer
// builder is replaced by a fake that moves an image's row through its build steps (no builder machine
// boots), so that `images create` is seen following a build to ready and to failed.
import { randomBytes } from 'node:crypto';
import { createServer, Server } from 'node:http';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Account } from '../../src/store/accounts';
import { ensureTestImage, TEST_IMAGE_DIR } from '../support/images';
import { insertInstance, TEST_SSH_KEY } from '../support/instance-rows';
import { apiKeyFor, createAccount, startTestService, TestService } from '../support/harness';
import { cliEnv, CliRun, runKiste } from '../support/kiste-cli';

jest.setTimeout(600_000);

/** What Images asks of its layer builder (its private `builder`), replaced here by a fake. */
interface FakeBuilder {
  reserve(accountId: string): { release(): void };
  build(image: { id: string; buildPackages: unknown }): void;
}

/** The service's refusal as the CLI prints it: message with the code, hint, request id. */
const refusal = (code: string) => new RegExp(`^kiste: .*\\(code: ${code}\\)\\n {2}hint: .+\\n {2}request id: req_\\S+\\n$`);

describe('kiste images, envs, setup', () => {
  let t: TestService;
  let server: Server;
  let url: string;
  let dir: string;
  let account: Account;
  let key: string;
  /** Every CLI run's output, to check that no secret content ever appeared in it. */
  const outputs: string[] = [];
  const kiste = async (args: string[]): Promise<CliRun> => {
    const run = await runKiste(args, cliEnv({ KISTE_CONFIG_DIR: join(dir, 'config'), KISTE_URL: url, KISTE_TOKEN: key }));
    outputs.push(run.stdout, run.stderr);
    return run;
  };
  const json = async (args: string[]) => {
    const run = await kiste(['--json', ...args]);
    if (run.code !== 0) throw new Error(`kiste ${args.join(' ')} exited ${run.code}: ${run.stderr}`);
    return JSON.parse(run.stdout);
  };
  const secret = `canary-${randomBytes(12).toString('hex')}`;

  beforeAll(async () => {
    await ensureTestImage();
    t = await startTestService({ env: { KISTE_IMAGE_DIR: TEST_IMAGE_DIR, KISTE_IMAGE_PROFILE: 'minimal' } });
    expect(await t.services.machineHost.refreshImage('minimal')).not.toBeNull();
    server = createServer(t.app);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
    dir = mkdtempSync(join(tmpdir(), 'kiste-cli-images-'));
    writeFileSync(join(dir, 'git-credentials'), `https://bot:${secret}@git.example.com\n`);
    writeFileSync(join(dir, 'setup.sh'), 'set -e\nnpm ci\nnpm run build\n');
    writeFileSync(join(dir, 'key.pub'), `${TEST_SSH_KEY}\n`);
    account = await createAccount(t);
    key = await apiKeyFor(t, account);
  });
  afterAll(async () => {
    await new Promise<void>((resolve) => server?.close(() => resolve()));
    await t?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('envs: create, show, update (a kind of flag replaces its field, the rest is kept), versions, list', async () => {
    const created = await kiste([
      'envs', 'create', 'web',
      '--repo', 'https://git.example.com/acme/web.git#main', '--path', '/srv/web', '--credentials', '/root/.git-credentials',
      '--repo', 'git@git.example.com:acme/tools.git',
      '--secret-file', `/root/.git-credentials=${join(dir, 'git-credentials')}`,
      '--var', 'NODE_ENV=production', '--var', 'GREETING=a=b',
      '--setup-script', join(dir, 'setup.sh'),
    ]);
    expect(created).toMatchObject({ code: 0, stdout: 'web: version 1\n', stderr: '' });
    // What the service keeps is the local file's content, byte for byte.
    const applied = await t.services.environments.forInstance(account.id, 'web');
    expect(applied.content.secretFiles.map((f) => [f.path, f.content.toString()])).toEqual([['/root/.git-credentials', `https://bot:${secret}@git.example.com\n`]]);

    const shown = await kiste(['envs', 'show', 'web']);
    expect(shown.code).toBe(0);
    expect(shown.stdout).toMatch(/^name +web\nversion +1\n/);
    expect(shown.stdout).toContain('  https://git.example.com/acme/web.git  ref main  → /srv/web  credentials /root/.git-credentials\n');
    expect(shown.stdout).toContain('  git@git.example.com:acme/tools.git  → /root/tools\n');
    expect(shown.stdout).toContain('variables\n  GREETING=a=b\n  NODE_ENV=production\n');
    expect(shown.stdout).toContain('secret files (contents are never shown)\n  /root/.git-credentials\n');
    expect(shown.stdout).toContain('setup script (3 lines)\n  set -e\n  npm ci\n  npm run build');
    const detail = await json(['envs', 'show', 'web']);
    expect(detail.current).toMatchObject({ version: 1, secret_paths: ['/root/.git-credentials'], variables: { NODE_ENV: 'production', GREETING: 'a=b' } });

    // Only the variables change: repositories, the secret file and the script are kept.
    expect(await kiste(['envs', 'update', 'web', '--var', 'NODE_ENV=staging'])).toMatchObject({ code: 0, stdout: 'web: version 2\n' });
    const second = (await json(['envs', 'show', 'web'])).current;
    expect(second.variables).toEqual({ NODE_ENV: 'staging' });
    expect(second.repositories).toHaveLength(2);
    expect(second.secret_paths).toEqual(['/root/.git-credentials']);
    expect(second.setup_script).toBe('set -e\nnpm ci\nnpm run build\n');

    // New repositories replace both old ones; --clear empties the script.
    expect(await kiste(['envs', 'update', 'web', '--repo', 'https://git.example.com/acme/api.git', '--clear', 'setup-script'])).toMatchObject({ code: 0, stdout: 'web: version 3\n' });
    const third = (await json(['envs', 'show', 'web'])).current;
    expect(third.repositories).toEqual([{ url: 'https://git.example.com/acme/api.git', ref: null, path: '/root/api', credentials_file: null }]);
    expect(third.setup_script).toBe('');
    expect(third.secret_paths).toEqual(['/root/.git-credentials']);

    const versions = await kiste(['envs', 'versions', 'web']);
    expect(versions.code).toBe(0);
    const lines = versions.stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^VERSION +CREATED +REPOS +VARS +SECRET FILES +SETUP SCRIPT +ID$/);
    expect(lines.slice(1).map((line) => line.split(/ +/).slice(0, 1).concat(line.split(/ +/).slice(2, 5)))).toEqual([
      ['3', '1', '1', '1'], ['2', '2', '1', '1'], ['1', '2', '2', '1'],
    ]);
    expect((await json(['envs', 'versions', 'web', '--limit', '1'])).data.map((v: { version: number }) => v.version)).toEqual([3]);

    const list = await kiste(['envs']);
    expect(list.stdout).toMatch(/^NAME +VERSION +UPDATED +CREATED\nweb +3 +\S+ +\S+\n$/);
  });

  test('envs: flag mistakes and refusals', async () => {
    const before = await kiste(['envs', 'create', 'early', '--credentials', '/root/key']);
    expect(before).toMatchObject({ code: 1, stdout: '', stderr: 'kiste: --credentials belongs to a --repo: give it after the --repo it is for\n' });
    const missing = await kiste(['envs', 'create', 'nofile', '--secret-file', `/root/key=${join(dir, 'absent')}`]);
    expect(missing).toMatchObject({ code: 1, stderr: `kiste: cannot read the secret file /root/key from ${join(dir, 'absent')}: ENOENT\n` });
    expect(await kiste(['envs', 'create', 'badvar', '--var', 'NOVALUE'])).toMatchObject({ code: 1, stderr: 'kiste: --var NOVALUE: expected NAME=VALUE\n' });
    expect(await kiste(['envs', 'update', 'web'])).toMatchObject({ code: 1, stderr: expect.stringMatching(/^kiste: nothing to change\n {2}hint: /) });
    expect(await kiste(['envs', 'update', 'web', '--clear', 'vars', '--var', 'A=1'])).toMatchObject({ code: 1, stderr: 'kiste: --clear vars and a value for it were both given\n' });

    // The service's rules: credentials in the URL (K32), a credentials file that is no secret file (K32), a taken name (K31), no such environment (K30).
    expect((await kiste(['envs', 'create', 'leaky', '--repo', 'https://bot:pw@git.example.com/x.git'])).stderr).toMatch(refusal('K32'));
    const noSecret = await kiste(['envs', 'create', 'nosecret', '--repo', 'https://git.example.com/x.git', '--credentials', '/root/creds']);
    expect(noSecret.stderr).toMatch(refusal('K32'));
    expect(noSecret.stderr).toContain('credentials_file');
    const taken = await kiste(['envs', 'create', 'web', '--secret-file', `/root/.git-credentials=${join(dir, 'git-credentials')}`]);
    expect(taken).toMatchObject({ code: 1, stderr: expect.stringMatching(refusal('K31')) });
    expect((await kiste(['envs', 'show', 'nowhere'])).stderr).toMatch(refusal('K30'));
    const asJson = await kiste(['--json', 'envs', 'versions', 'nowhere']);
    expect(asJson.code).toBe(1);
    expect(JSON.parse(asJson.stderr)).toMatchObject({ error: { code: 'K30', type: 'environment_not_found' } });
  });

  test('images: the catalogue, resolve with its default versions, create (ready at once), list, show, log, delete', async () => {
    const table = await kiste(['images', 'components']);
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(/^ID +VERSION +SIZE +REQUIRES\n/);
    const catalogue = (await json(['images', 'components'])) as Array<{ id: string; default_version: string; requires: string[]; estimated_size_mib: number }>;
    const git = catalogue.find((c) => c.id === 'git')!;
    expect(git).toBeDefined();
    expect(table.stdout).toMatch(new RegExp(`^git +${escape(git.default_version)} +${git.estimated_size_mib} MiB +${git.requires.join(', ') || '-'}$`, 'm'));

    // Without a version each component takes the catalogue's; deb: packages take latest.
    const resolved = await json(['images', 'resolve', 'git', 'deb:cowsay']);
    expect(resolved.components).toEqual(expect.arrayContaining([
      expect.objectContaining({ id: 'git', version: git.default_version, requested: true }),
      expect.objectContaining({ id: 'deb:cowsay', version: 'latest', requested: true }),
    ]));
    expect(resolved.image.build_strategy).toBe('derived_layer');
    const text = await kiste(['images', 'resolve', `git@${git.default_version}`]);
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/^base +universal\nbuild +universal\n/m);
    expect(text.stdout).toMatch(/\nID +VERSION +WHY\n/);
    expect(text.stdout).toMatch(new RegExp(`^git +${escape(git.default_version)} +requested$`, 'm'));

    const created = await kiste(['images', 'create', 'Dev Tools', 'git', '--vcpu', '3']);
    expect(created).toMatchObject({ code: 0, stderr: '' });
    expect(created.stdout).toMatch(/^id +[0-9a-f-]{36}\nname +Dev Tools\nslug +dev-tools\nstatus +ready\ntype +private\n/);
    expect(created.stdout).toContain(`  git@${git.default_version}`);
    const image = await json(['images', 'show', 'dev-tools']);
    expect(image).toMatchObject({ name: 'Dev Tools', status: 'ready', build_strategy: 'universal', build: null });
    expect(image.resources.vcpu).toBe(3);
    expect(image.resources.memory_mib).toBeGreaterThanOrEqual(1024); // not given: the recommendation

    const list = await kiste(['images']);
    expect(list.stdout).toMatch(/^ID +NAME +STATUS +TYPE +COMPONENTS +CREATED\n/);
    expect(list.stdout).toMatch(/^universal +Universal +ready +builtin +\d+ /m);
    expect(list.stdout).toMatch(new RegExp(`^${image.id} +Dev Tools +ready +private +\\d+ `, 'm'));
    expect(await kiste(['images', 'log', image.id])).toMatchObject({ code: 0, stdout: '' });
    expect(await kiste(['images', 'delete', 'Dev Tools'])).toMatchObject({ code: 0, stdout: `deleted ${image.id}\n` });
    expect((await kiste(['images', 'show', image.id])).stderr).toMatch(refusal('K20'));
    expect((await kiste(['images', 'delete', 'universal'])).stderr).toMatch(refusal('K22'));
  });

  test('images: an unknown component, a version the catalogue lacks, a bad spec', async () => {
    const unknown = await kiste(['images', 'resolve', 'git', 'no-such-thing']);
    expect(unknown).toMatchObject({ code: 1, stdout: '' });
    expect(unknown.stderr).toMatch(refusal('K23'));
    expect(unknown.stderr).toContain('no-such-thing');
    const asJson = await kiste(['--json', 'images', 'create', 'nope', 'no-such-thing']);
    expect(asJson.code).toBe(1);
    expect(JSON.parse(asJson.stderr)).toMatchObject({ error: { code: 'K23', type: 'image_component_not_found', param: 'components[0].id' } });
    expect((await kiste(['images', 'resolve', 'git@0.0-not-it'])).stderr).toMatch(refusal('K24'));
    expect(await kiste(['images', 'resolve', 'git@'])).toMatchObject({ code: 1, stderr: expect.stringMatching(/^kiste: not a component: "git@"\n {2}hint: /) });
    expect((await json(['images'])).some((i: { name: string }) => i.name === 'nope')).toBe(false);
  });

  test('images create follows a derived layer\'s build to ready, and to failed with its error', async () => {
    // A stand-in for the builder machine: moves the image's row through its steps.
    const prisma = t.services.database.prisma;
    const builds: Promise<void>[] = [];
    const builder: FakeBuilder = {
      reserve: () => ({ release() {} }),
      build(image) {
        const fails = (image.buildPackages as string[]).includes('no-such-package');
        builds.push((async () => {
          const pause = () => new Promise((resolve) => setTimeout(resolve, 1500));
          await prisma.image.update({ where: { id: image.id }, data: { buildStep: 'booting builder', buildProgress: 10, buildStartedAt: new Date() } });
          await pause();
          await prisma.image.update({ where: { id: image.id }, data: { buildStep: 'installing packages', buildProgress: 60, buildLog: 'Reading package lists...\n' } });
          await pause();
          await prisma.image.update({
            where: { id: image.id },
            data: fails
              ? { status: 'failed', buildFinishedAt: new Date(), buildError: 'E: Unable to locate package no-such-package', buildLog: 'Reading package lists...\nE: Unable to locate package no-such-package\n' }
              : { status: 'ready', buildStep: 'done', buildProgress: 100, buildFinishedAt: new Date(), buildPackages: ['cowsay=3.03+dfsg2-8'] },
          });
        })());
      },
    };
    (t.services.images as unknown as { builder: FakeBuilder }).builder = builder;

    const built = await kiste(['images', 'create', 'cows', 'deb:cowsay']);
    expect(built.code).toBe(0);
    expect(built.stderr).toMatch(/^cows: waiting for the builder \(0 %\)\ncows: booting builder \(10 %\)\ncows: installing packages \(60 %\)\n$|^cows: booting builder \(10 %\)\ncows: installing packages \(60 %\)\n$/);
    expect(built.stdout).toMatch(/^status +ready$/m);
    expect(built.stdout).toMatch(/^packages +cowsay=3\.03\+dfsg2-8$/m);

    const failed = await kiste(['images', 'create', 'broken', 'deb:no-such-package']);
    expect(failed.code).toBe(1);
    expect(failed.stdout).toBe('');
    expect(failed.stderr).toMatch(/\nkiste: the image broken failed to build: E: Unable to locate package no-such-package\n {2}hint: `kiste images log [0-9a-f-]{36}` shows its build log\.\n$/);
    expect(await kiste(['images', 'log', 'broken'])).toMatchObject({ code: 0, stdout: 'Reading package lists...\nE: Unable to locate package no-such-package\n' });
    expect((await kiste(['images'])).stdout).toMatch(/^\S+ +broken +failed +private /m);

    const early = await json(['images', 'create', 'cows-later', 'deb:cowsay', '--no-wait']);
    expect(early.status).toBe('building');
    await Promise.all(builds);
  });

  test('kiste create with --image and --env: refusals before any machine; runtime', async () => {
    const base = ['create', 'probe', '--vcpu', '1', '--memory', '768', '--disk', '2048', '--ssh-key', join(dir, 'key.pub')];
    expect((await kiste([...base, '--image', 'no-such-image'])).stderr).toMatch(refusal('K20'));
    expect((await kiste([...base, '--env', 'no-such-env'])).stderr).toMatch(refusal('K30'));
    expect((await kiste(['create', 'probe', '--image', 'no-such-image', '--ssh-key', join(dir, 'key.pub')])).stderr).toMatch(refusal('K20'));

    const runtime = await kiste(['images', 'runtime']);
    expect(runtime.code).toBe(0);
    expect(runtime.stdout).toMatch(/^version +v\d{4}\.\d{2}\.\d{2}-[0-9a-f]{8}\nreleased +\S+\n\nrelease notes:\n {2}\S/);
    expect(await json(['images', 'runtime'])).toMatchObject({ object: 'runtime_image', image_version: expect.stringMatching(/^v/) });
  });

  test('kiste setup: steps with durations and output; exit status 1 when it failed; --wait', async () => {
    const version = (await json(['envs', 'show', 'web'])).current.id as string;
    const steps = [
      { name: 'files', status: 'succeeded', started_at: '2025-01-01T00:00:00.000Z', finished_at: '2025-01-01T00:00:00.200Z', duration_ms: 200, detail: null },
      { name: 'clone', status: 'succeeded', started_at: '2025-01-01T00:00:00.200Z', finished_at: '2025-01-01T00:00:02.700Z', duration_ms: 2500, detail: 'https://git.example.com/acme/api.git → /root/api' },
      { name: 'setup_script', status: 'failed', started_at: '2025-01-01T00:00:02.700Z', finished_at: '2025-01-01T00:00:03.700Z', duration_ms: 1000, detail: 'exit status 2' },
    ];
    const machine = await insertInstance(t, account, 'with-env', 'stopped', {
      desiredState: 'stopped', environmentVersionId: version, setupStatus: 'failed', setupError: 'The setup script exited with status 2',
    });
    await t.services.database.prisma.instanceSetup.create({ data: { instanceId: machine.id, accountId: account.id, steps, output: 'Cloning into /root/api...\nnpm ERR! missing script\n' } });
    const failed = await kiste(['setup', 'with-env']);
    expect(failed.code).toBe(1);
    expect(failed.stdout).toMatch(new RegExp(`^instance +with-env\\nstatus +failed\\nenvironment +web version \\d+\\nerror +The setup script exited with status 2\\n\\n`));
    expect(failed.stdout).toMatch(/^STEP +STATUS +DURATION +DETAIL\nfiles +succeeded +0\.2 s +\nclone +succeeded +2\.5 s +https:\/\/git\.example\.com\/acme\/api\.git → \/root\/api\nsetup_script +failed +1\.0 s +exit status 2\n/m);
    expect(failed.stdout).toMatch(/\n\noutput:\nCloning into \/root\/api\.\.\.\nnpm ERR! missing script\n$/);

    const plain = await insertInstance(t, account, 'no-env', 'stopped', { desiredState: 'stopped' });
    expect(plain.setupStatus).toBe('none');
    expect(await kiste(['setup', 'no-env'])).toMatchObject({ code: 0, stdout: expect.stringContaining('status       none\n') });
    expect((await kiste(['get', 'with-env'])).stdout).toMatch(/^setup +failed: The setup script exited with status 2$/m);

    // --wait asks again while the setup runs, and answers once it is over.
    const running = await insertInstance(t, account, 'running-setup', 'stopped', { desiredState: 'stopped', environmentVersionId: version, setupStatus: 'running' });
    const started = Date.now();
    const [waited] = await Promise.all([
      kiste(['setup', 'running-setup', '--wait']),
      (async () => {
        await new Promise((resolve) => setTimeout(resolve, 2500));
        await t.services.database.prisma.instance.update({ where: { id: running.id }, data: { setupStatus: 'succeeded' } });
      })(),
    ]);
    expect(waited).toMatchObject({ code: 0, stdout: expect.stringMatching(/^instance +running-setup\nstatus +succeeded\n/) });
    expect(Date.now() - started).toBeGreaterThan(2000);
  });

  test('no output ever held the secret file\'s content', () => {
    expect(outputs.length).toBeGreaterThan(20);
    for (const output of outputs) expect(output).not.toContain(secret);
  });
});

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
