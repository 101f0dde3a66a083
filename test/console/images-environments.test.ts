// The console's images and environments pages in real Chromium, against a service serving the
// minimal image: an environment made through the form with a secret file read from a local file (its
// content is in no page), edited into version 2 (the secret file kept); the built-in image with its
// release notes (breaking lines marked), the component catalogue and its filter; a private image of
// universal components made with the live resolve preview (ready at once; a Debian package previewed
// as a derived layer, a name Debian cannot have refused with K23 in the preview); how a building and
// a failed image read (answers stood in); a machine created through the form from that image and an
// environment (a real guest: its setup steps and output on the Setup tab); deleting the image
// refused with K21 while the machine uses it, then deleted. Screenshots of each page; no page errors.
import type { Page } from 'playwright-core';
import type { Account } from '../../src/store/accounts';
import { SshKeyFactory } from '../fixtures/account-access';
import { screenshot } from '../support/browser';
import { ConsoleRig, signIn, startConsole } from '../support/console';
import { apiKeyFor, bearer, createAccount } from '../support/harness';
import { ensureTestImage, TEST_IMAGE_DIR } from '../support/images';

const SECRET = 'https://deploy:tok-7Qx9-never-shown-Zp4@git.example.com\n';
const SECRET_BASE64 = Buffer.from(SECRET).toString('base64');
const MACHINE = 'env-console-box';
const BOOT_MS = 240_000;
const UI_MS = 90_000;

describe('console images and environments pages', () => {
  let rig: ConsoleRig;
  let account: Account;
  let key: string;
  let page: Page;
  let problems: string[];

  const nav = (name: string) => page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name, exact: true });
  const api = {
    get: async (path: string, status = 200) => (await rig.t.api.get(path).set(bearer(key)).expect(status)).body,
  };
  /** The secret's content, plain or base64, is nowhere in the page (markup, text, inputs' values). */
  const expectSecretAbsent = async () => {
    const html = await page.content();
    expect(html).not.toContain('tok-7Qx9');
    expect(html).not.toContain(SECRET_BASE64);
    const values = await page.locator('input, textarea').evaluateAll((inputs) => inputs.map((input) => (input as unknown as { value: string }).value));
    expect(values.join('\n')).not.toContain('tok-7Qx9');
  };

  beforeAll(async () => {
    await ensureTestImage();
    rig = await startConsole({ compute: 'worker', env: { KISTE_IMAGE_DIR: TEST_IMAGE_DIR, KISTE_IMAGE_PROFILE: 'minimal' } }); // machines in a local kiste-worker, the default layout
    expect(await rig.t.services.machineHost.refreshImage('minimal')).not.toBeNull();
    account = await createAccount(rig.t);
    key = await apiKeyFor(rig.t, account);
    ({ page, problems } = await rig.open('/console/login'));
    await signIn(page, account);
    await page.waitForURL(`${rig.url}/`);
  }, 900_000); // on a fresh host the first suite to need the image builds it (minutes)
  afterAll(async () => {
    if (rig) {
      for (const id of await rig.t.services.machineHost.knownMachineIds()) await rig.t.services.machineHost.destroy(id).catch(() => undefined);
      await rig.close();
    }
  });
  afterEach(() => expect(problems).toEqual([]));

  test('environments: created through the form with a secret file from a local file; the secret is shown nowhere', async () => {
    await nav('Environments').click();
    await page.getByRole('heading', { level: 1, name: 'Environments' }).waitFor();
    await page.getByText('No environments yet.').waitFor();
    await page.getByRole('button', { name: 'New environment' }).click();
    await page.getByRole('textbox', { name: 'Environment name' }).fill('web-app');

    await page.getByRole('button', { name: 'Add secret file' }).click();
    const secret = page.getByRole('group', { name: 'Secret file 1' });
    await secret.getByLabel('File', { exact: true }).setInputFiles({ name: 'git-credentials', mimeType: 'text/plain', buffer: Buffer.from(SECRET) });
    await secret.getByText(`git-credentials, ${SECRET.length} bytes read`).waitFor();
    await expect(secret.getByRole('textbox', { name: 'Path in the machine' }).inputValue()).resolves.toBe('/root/git-credentials');
    await secret.getByRole('textbox', { name: 'Path in the machine' }).fill('/root/.git-credentials');

    await page.getByRole('button', { name: 'Add repository' }).click();
    const repository = page.getByRole('group', { name: 'Repository 1' });
    await repository.getByRole('textbox', { name: 'URL' }).fill('https://git.example.com/team/app.git');
    await repository.getByRole('textbox', { name: 'Ref' }).fill('v1.2.0');
    await repository.getByRole('textbox', { name: 'Checkout path' }).fill('/root/app');
    await repository.getByRole('combobox', { name: 'Credentials file' }).selectOption('/root/.git-credentials');

    await page.getByRole('button', { name: 'Add variable' }).click();
    await page.getByRole('textbox', { name: 'Variable 1 name' }).fill('GREETING');
    await page.getByRole('textbox', { name: 'Variable 1 value' }).fill('hello from v1');
    await page.getByRole('textbox', { name: 'Setup script' }).fill('npm ci\necho ready');
    await expectSecretAbsent();
    await screenshot(page, 'environment-create');

    await page.getByRole('button', { name: 'Create environment' }).click();
    await page.waitForURL(`${rig.url}/console/environments/web-app`);
    await page.getByRole('heading', { name: /Current version: 1/ }).waitFor();
    await page.getByText('/root/.git-credentials').first().waitFor();
    await page.getByRole('table', { name: 'Variables of version 1' }).getByText('hello from v1').waitFor();
    await expectSecretAbsent();
    await screenshot(page, 'environment-page');

    const created = await api.get('/v1/environments/web-app');
    expect(created).toMatchObject({
      current_version: 1,
      current: {
        repositories: [{ url: 'https://git.example.com/team/app.git', ref: 'v1.2.0', path: '/root/app', credentials_file: '/root/.git-credentials' }],
        variables: { GREETING: 'hello from v1' },
        secret_paths: ['/root/.git-credentials'],
        setup_script: 'npm ci\necho ready',
      },
    });
  }, UI_MS);

  test('environments: an edit publishes version 2, keeping the secret file; the history shows both', async () => {
    await page.getByRole('button', { name: 'Edit environment' }).click();
    await page.getByText('Saving publishes version 2.').waitFor();
    await page.getByText('Kept as they are in the new version').waitFor();
    await page.getByRole('textbox', { name: 'Variable 1 value' }).fill('hello from v2');
    await screenshot(page, 'environment-edit');
    await page.getByRole('button', { name: 'Publish version 2' }).click();
    await page.getByText('Version 2 published.').waitFor();
    await page.getByRole('heading', { name: /Current version: 2/ }).waitFor();
    await page.locator('.page-header .badge', { hasText: 'Version 2' }).waitFor();

    const history = page.getByRole('table', { name: 'Version history' });
    await history.getByRole('row', { name: /Version 2/ }).waitFor();
    await history.getByRole('button', { name: 'Show version 1' }).click();
    await page.getByRole('table', { name: 'Variables of version 1' }).getByText('hello from v1').waitFor();
    await expectSecretAbsent();
    await screenshot(page, 'environment-history');

    const updated = await api.get('/v1/environments/web-app');
    expect(updated).toMatchObject({ current_version: 2, current: { variables: { GREETING: 'hello from v2' }, secret_paths: ['/root/.git-credentials'] } });
    const versions = (await api.get('/v1/environments/web-app/versions')).data as { version: number; secret_paths: string[] }[];
    expect(versions.map((version) => [version.version, version.secret_paths])).toEqual([[2, ['/root/.git-credentials']], [1, ['/root/.git-credentials']]]);

    await nav('Environments').click();
    await page.getByRole('table', { name: 'Environments' }).getByRole('row', { name: /web-app/ }).getByText('Version 2').waitFor();
    await screenshot(page, 'environments');
  }, UI_MS);

  test('images: the built-in image with its release notes, the catalogue and its category filter', async () => {
    const runtime = await api.get('/v1/runtime/image');
    await nav('Images').click();
    await page.getByRole('heading', { level: 1, name: 'Images' }).waitFor();
    await page.getByText(runtime.image_version as string).first().waitFor();
    await page.getByText('No private images yet.').waitFor();

    const catalogue = (await api.get('/v1/image-components?limit=100')).data as { id: string; name: string; category: string; default_version: string }[];
    expect(catalogue.length).toBeGreaterThan(3);
    const table = page.getByRole('table', { name: 'Component catalogue' });
    await table.getByRole('row').nth(catalogue.length).waitFor(); // the heading row, then one per component
    const node = catalogue.find((component) => component.id === 'node')!;
    await table.getByRole('row', { name: /Node\.js/ }).getByText(node.default_version).waitFor();
    await screenshot(page, 'images');

    const category = catalogue.find((component) => component.id === 'curl')!.category;
    await page.getByRole('combobox', { name: 'Category' }).selectOption(category);
    await expect(table.getByRole('row').count()).resolves.toBe(1 + catalogue.filter((component) => component.category === category).length);
    await page.getByRole('combobox', { name: 'Category' }).selectOption('');

    // Release notes with a breaking change (this test image has none of its own: the answer is stood in).
    await page.route('**/v1/runtime/image', (route) =>
      route.fulfill({
        json: { ...runtime, release_notes: ['node 18.19.0 → 18.20.4', 'BREAKING: python removed', 'Debian packages: 3 updated'] },
      }),
    );
    await page.reload();
    const breaking = page.locator('ul.release-notes li.breaking');
    await breaking.getByText('python removed').waitFor();
    await page.getByText('1 breaking', { exact: true }).waitFor();
    await expect(page.locator('ul.release-notes li').count()).resolves.toBe(3);
    await screenshot(page, 'images-release-notes');
    await page.unroute('**/v1/runtime/image');
  }, UI_MS);

  test('images: a new image from the catalogue with a live resolve preview, ready at once; Debian packages in the preview', async () => {
    await page.reload();
    const form = page.getByRole('region', { name: 'New image' });
    await form.getByRole('checkbox', { name: /OpenSSH server/ }).check();
    await form.getByRole('checkbox', { name: /Node\.js/ }).check();
    const preview = form.getByRole('region', { name: 'Preview' });
    const resolved = preview.getByRole('table', { name: 'Resolved components' });
    // openssh-server requires openssh-client: the preview adds it as a dependency.
    await resolved.getByRole('row', { name: /openssh-client/ }).getByText('dependency').waitFor();
    await preview.getByText('ready at once').waitFor();
    const expected = await rig.t.api.post('/v1/images/resolve').set(bearer(key)).send({ components: [{ id: 'openssh-server', version: (await componentVersion('openssh-server')) }, { id: 'node', version: await componentVersion('node') }] }).expect(200);
    for (const component of expected.body.components as { id: string; version: string }[]) {
      await resolved.getByRole('row', { name: new RegExp(component.id) }).getByText(component.version, { exact: true }).waitFor();
    }
    await preview.getByText(`${expected.body.recommended_resources.vcpu} vCPU`).waitFor();
    await form.getByRole('textbox', { name: 'Image name' }).fill('Node tools');
    await screenshot(page, 'image-new');

    // A Debian package outside the universal image: a derived layer, built in a builder machine (not made here).
    await form.getByRole('textbox', { name: 'Debian packages' }).fill('ripgrep');
    await resolved.getByRole('row', { name: /deb:ripgrep/ }).getByText('latest').waitFor();
    await preview.getByText(/Derived layer/).waitFor();
    await screenshot(page, 'image-new-derived');
    // A name Debian cannot have: the preview shows the refusal (K23, naming the field).
    await form.getByRole('textbox', { name: 'Debian packages' }).fill('ripgrep No_Such!');
    await preview.getByRole('alert').getByText('Code K23').waitFor();
    await preview.getByText('deb:No_Such! is not a Debian package name').waitFor();
    await screenshot(page, 'image-new-k23');
    await form.getByRole('textbox', { name: 'Debian packages' }).fill('');
    await preview.getByText('ready at once').waitFor();

    await form.getByRole('button', { name: 'Create image' }).click();
    await form.getByRole('status').getByText('ready for new machines').waitFor();
    const row = page.getByRole('table', { name: 'Your images' }).getByRole('row', { name: /Node tools/ });
    await row.getByText('ready', { exact: true }).waitFor();
    const images = (await api.get('/v1/images')).data as { name: string; status: string; build_strategy: string; components: { id: string }[] }[];
    const made = images.find((image) => image.name === 'Node tools')!;
    expect(made).toMatchObject({ status: 'ready', build_strategy: 'universal', resources: expected.body.recommended_resources });
    expect(made.components.map((component) => component.id).sort()).toEqual(['node', 'openssh-client', 'openssh-server']);
    await screenshot(page, 'images-with-private');

    await row.getByRole('link', { name: 'Node tools' }).click();
    await page.getByRole('heading', { level: 1, name: 'Node tools' }).waitFor();
    await page.getByRole('table', { name: 'Image components' }).getByText('openssh-client').waitFor();
    await screenshot(page, 'image-page');
  }, UI_MS);

  test('images: how a building and a failed image read (answers stood in: a real build needs a builder machine and the Debian mirror)', async () => {
    const real = await api.get('/v1/images');
    const base = (real.data as Record<string, unknown>[]).find((image) => image.name === 'Node tools')!;
    const build = { packages: [], started_at: new Date(Date.now() - 95_000).toISOString(), finished_at: null, duration_ms: null, error: null };
    const building = { ...base, id: 'img_building', name: 'Rust tools', slug: 'rust-tools', status: 'building', build_strategy: 'derived_layer', build: { ...build, progress_percent: 40, step: 'installing packages' } };
    const failed = {
      ...base, id: 'img_failed', name: 'Broken', slug: 'broken', status: 'failed', build_strategy: 'derived_layer',
      build: { ...build, progress_percent: 60, step: 'installing packages', finished_at: new Date().toISOString(), duration_ms: 95_000, error: 'apt-get install failed (exit 100)\nE: Unable to locate package no-such-package' },
    };
    const stand = (url: URL) => url.pathname === '/v1/images' || url.pathname.startsWith('/v1/images/img_');
    await page.route(stand, (route) => {
      const path = new URL(route.request().url()).pathname;
      if (path === '/v1/images') return route.fulfill({ json: { ...real, data: [...real.data, building, failed] } });
      if (path.endsWith('/build-log')) return route.fulfill({ json: { object: 'image_build_log', image_id: 'img_failed', log: 'Reading package lists...\nE: Unable to locate package no-such-package\n', truncated: false } });
      return route.fulfill({ json: path.endsWith('img_failed') ? failed : building });
    });
    try {
      await nav('Images').click();
      const table = page.getByRole('table', { name: 'Your images' });
      await expect(table.getByRole('meter', { name: 'Build of Rust tools' }).getAttribute('aria-valuenow')).resolves.toBe('40');
      await table.getByRole('row', { name: /Rust tools/ }).getByText('installing packages').waitFor();
      await table.getByRole('row', { name: /Broken/ }).getByText('apt-get install failed (exit 100)').waitFor();
      await screenshot(page, 'images-building');
      await table.getByRole('link', { name: 'Broken' }).click();
      await page.getByLabel('Build log').getByText('Unable to locate package').waitFor();
      await screenshot(page, 'image-page-failed');
    } finally {
      await page.unroute(stand);
    }
  }, UI_MS);

  async function componentVersion(id: string): Promise<string> {
    const catalogue = (await api.get('/v1/image-components?limit=100')).data as { id: string; default_version: string }[];
    return catalogue.find((component) => component.id === id)!.default_version;
  }

  test('machine create with the private image and an environment: image, components, environment version and setup on its page', async () => {
    // A second environment whose setup succeeds in a guest without network access to a repository.
    await rig.t.api.post('/v1/environments').set(bearer(key)).send({
      name: 'box-env',
      variables: { PROJECT: 'kiste' },
      secret_files: [{ path: '/root/.token', content_base64: SECRET_BASE64 }],
      setup_script: 'echo "setup ran for $PROJECT"; stat -c %a /root/.token',
    }).expect(200);

    await nav('Machines').click();
    await page.getByRole('link', { name: 'Create your first machine' }).click();
    await page.waitForURL(`${rig.url}/console/new`);
    await page.getByRole('textbox', { name: 'Name', exact: true }).fill(MACHINE);
    await page.getByRole('combobox', { name: 'Image', exact: true }).selectOption({ label: 'Node tools' });
    await page.getByRole('combobox', { name: 'Environment', exact: true }).selectOption('box-env');
    await page.getByRole('radio', { name: 'Custom' }).check();
    await page.getByRole('spinbutton', { name: 'vCPUs' }).fill('1');
    await page.getByRole('spinbutton', { name: 'Memory (MiB)' }).fill('768');
    await page.getByRole('spinbutton', { name: 'Disk (GiB)' }).fill('2');
    await page.getByRole('textbox', { name: 'SSH public key' }).fill(new SshKeyFactory().generate('ed25519').publicKey);
    await screenshot(page, 'create-machine-image-environment');
    await page.getByRole('button', { name: 'Create machine' }).click();
    await page.waitForURL(`${rig.url}/console/machines/${MACHINE}`, { timeout: BOOT_MS });
    await page.locator('.page-header .badge', { hasText: /^running$/ }).waitFor({ timeout: BOOT_MS });

    const instance = await api.get(`/v1/instances/${MACHINE}`);
    expect(instance).toMatchObject({ image: expect.any(String), environment_version_id: expect.any(String) });
    await page.getByRole('link', { name: 'Node tools' }).waitFor();
    await page.getByRole('link', { name: 'box-env' }).waitFor();
    const images = (await api.get('/v1/images')).data as { id: string; name: string }[];
    expect(instance.image).toBe(images.find((image) => image.name === 'Node tools')!.id); // the console sends the image's id
    await page.locator('dd', { hasText: 'box-env, version 1' }).waitFor();
    await page.getByText('3 components').click();
    await page.getByText(/openssh-client /).waitFor();
    await page.locator('dd .badge', { hasText: /^succeeded$/ }).waitFor({ timeout: 120_000 });
    await screenshot(page, 'machine-overview-environment');

    await page.getByRole('navigation', { name: 'Machine sections' }).getByRole('link', { name: 'Setup' }).click();
    await page.getByRole('table', { name: 'Setup steps' }).getByRole('row', { name: /Setup script/ }).getByText('succeeded').waitFor();
    await page.getByRole('table', { name: 'Setup steps' }).getByRole('row', { name: /Secret files and variables/ }).waitFor();
    await page.getByLabel('Setup output').getByText('setup ran for kiste').waitFor();
    await page.getByLabel('Setup output').getByText('600').waitFor();
    await expectSecretAbsent();
    await screenshot(page, 'machine-setup');
  }, BOOT_MS + 180_000);

  test('delete an image: refused with K21 while the machine uses it, then deleted after the machine is', async () => {
    await nav('Images').click();
    const row = page.getByRole('table', { name: 'Your images' }).getByRole('row', { name: /Node tools/ });
    await row.getByRole('button', { name: 'Delete', exact: true }).click();
    await page.getByRole('dialog', { name: /Delete the image/ }).getByRole('button', { name: 'Delete image' }).click();
    const refusal = page.getByRole('table', { name: 'Your images' }).getByRole('cell', { name: 'Why Node tools was not deleted' });
    await refusal.getByRole('alert').getByText('Code K21').waitFor();
    await refusal.getByText(/used by at least one machine/).waitFor();
    await refusal.getByRole('link', { name: MACHINE }).waitFor();
    await screenshot(page, 'image-delete-k21');

    await rig.t.api.delete(`/v1/instances/${MACHINE}`).set(bearer(key));
    for (const deadline = Date.now() + 120_000; Date.now() < deadline;) {
      if ((await rig.t.api.get(`/v1/instances/${MACHINE}`).set(bearer(key))).status === 404) break;
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
    await row.getByRole('button', { name: 'Delete', exact: true }).click();
    await page.getByRole('dialog', { name: /Delete the image/ }).getByRole('button', { name: 'Delete image' }).click();
    await page.getByText('No private images yet.').waitFor();
    const images = (await api.get('/v1/images')).data as { name: string }[];
    expect(images.map((image) => image.name)).toEqual(['Universal']);
    await screenshot(page, 'images-after-delete');
  }, 180_000);
});
