// The console's machine pages in real Chromium with a real (small) guest: a machine created through
// the form runs and its page opens; a stop and a resume made through the API show on the open page
// without a reload; a command typed into the terminal changes the guest (checked with exec); the
// home page lists the machine with the account's usage. Screenshots of each; no page errors.
import type { Page } from 'playwright-core';
import type { Account } from '../../src/store/accounts';
import { SshKeyFactory } from '../fixtures/account-access';
import { screenshot } from '../support/browser';
import { ConsoleRig, signIn, startConsole } from '../support/console';
import { guestRun } from '../support/guest';
import { apiKeyFor, bearer, createAccount } from '../support/harness';
import { ensureTestImage, TEST_IMAGE_DIR } from '../support/images';

const NAME = 'console-box';
const BOOT_MS = 240_000;

describe('console machine pages with a real guest', () => {
  let rig: ConsoleRig;
  let account: Account;
  let key: string;
  let page: Page;
  let problems: string[];

  const badge = () => page.locator('.page-header .badge');
  /** Waits until the page's status badge says `status` (a locator: waitForFunction's polling is eval'd, which the CSP refuses). */
  const statusShown = (status: string, timeout: number) => page.locator('.page-header .badge', { hasText: new RegExp(`^${status}$`) }).waitFor({ timeout });
  const machineId = async () => (await rig.t.api.get(`/v1/instances/${NAME}`).set(bearer(key)).expect(200)).body.id as string;

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

  test('create through the form: progress, then the running machine\'s page', async () => {
    await page.getByRole('link', { name: 'Create your first machine' }).click();
    await page.waitForURL(`${rig.url}/console/new`);
    await page.getByRole('textbox', { name: 'Name', exact: true }).fill(NAME);
    await page.getByRole('radio', { name: 'Custom' }).check();
    await page.getByRole('spinbutton', { name: 'vCPUs' }).fill('1');
    await page.getByRole('spinbutton', { name: 'Memory (MiB)' }).fill('768');
    await page.getByRole('spinbutton', { name: 'Disk (GiB)' }).fill('2');
    await page.getByRole('textbox', { name: 'SSH public key' }).fill(new SshKeyFactory().generate('ed25519').publicKey);
    await screenshot(page, 'create-machine');
    await page.getByRole('button', { name: 'Create machine' }).click();
    await page.waitForURL(`${rig.url}/console/machines/${NAME}`, { timeout: BOOT_MS });
    await statusShown('running', BOOT_MS);
    const created = (await rig.t.api.get(`/v1/instances/${NAME}`).set(bearer(key)).expect(200)).body;
    expect(created).toMatchObject({ status: 'running', vcpu: 1, memory_mib: 768, disk_mib: 2048 });
    await screenshot(page, 'machine-overview');
  }, BOOT_MS + 30_000);

  test('a stop and a resume made elsewhere show on the open page without a reload', async () => {
    await page.evaluate('window.marker = 1');
    await rig.t.api.post(`/v1/instances/${NAME}/stop`).set(bearer(key)).send({ snapshot: true });
    await statusShown('stopped', 120_000);
    await page.getByText('with its memory saved').waitFor();
    await page.getByRole('group', { name: 'Machine actions' }).getByRole('button', { name: 'Resume', exact: true }).waitFor();
    await rig.t.api.post(`/v1/instances/${NAME}/resume`).set(bearer(key));
    await statusShown('running', 120_000);
    expect(await page.evaluate('window.marker')).toBe(1); // the same page all along
    await expect(badge().textContent()).resolves.toBe('running');
  }, 300_000);

  test('the terminal: a command typed in it changes the guest', async () => {
    await page.getByRole('navigation', { name: 'Machine sections' }).getByRole('link', { name: 'Terminal' }).click();
    const terminal = page.getByRole('region', { name: 'Terminal' });
    await page.getByText('Connected', { exact: true }).waitFor({ timeout: 60_000 });
    await terminal.click();
    await page.keyboard.type('echo typed-in-the-console > /root/from-console; echo done-$((6*7))\n');
    await terminal.getByText('done-42').first().waitFor({ timeout: 60_000 });
    const inGuest = await guestRun(rig.t, await machineId(), 'cat /root/from-console');
    expect(inGuest).toMatchObject({ exitCode: 0, stdout: 'typed-in-the-console\n' });
    await screenshot(page, 'machine-terminal');
  }, 150_000);

  test('home lists the machine, running, with the account\'s usage', async () => {
    await page.getByRole('link', { name: 'All machines' }).click();
    await page.waitForURL(`${rig.url}/`);
    const row = page.getByRole('table', { name: 'Machines' }).getByRole('row', { name: new RegExp(NAME) });
    await row.getByText('running').waitFor();
    await expect(page.getByRole('meter', { name: 'Running machines' }).getAttribute('aria-valuenow')).resolves.toBe('1');
    await expect(page.getByRole('meter', { name: 'Machines', exact: true }).getAttribute('aria-valuenow')).resolves.toBe('1');
    await screenshot(page, 'home');
  });

  test('fork with its memory from the machine page: the copy goes on with the source\'s programs', async () => {
    const source = await machineId();
    expect(await guestRun(rig.t, source, 'echo only-in-memory > /dev/shm/marker; setsid sleep 100000 > /dev/null 2>&1 < /dev/null & echo $! > /dev/shm/sleeper')).toMatchObject({ exitCode: 0 });
    await page.goto(`${rig.url}/console/machines/${NAME}`);
    await page.getByRole('group', { name: 'Machine actions' }).getByRole('button', { name: 'Fork', exact: true }).click();
    const dialog = page.getByRole('dialog', { name: `Fork ${NAME}` });
    await dialog.getByRole('checkbox', { name: /Copy its memory too/ }).check();
    await dialog.getByText('goes on where this machine is').waitFor();
    await screenshot(page, 'fork-with-memory');
    await dialog.getByRole('button', { name: 'Fork machine' }).click();
    await page.waitForURL(`${rig.url}/console/machines/${NAME}-copy`, { timeout: BOOT_MS });
    await statusShown('running', BOOT_MS);
    const copy = (await rig.t.api.get(`/v1/instances/${NAME}-copy`).set(bearer(key)).expect(200)).body;
    const inCopy = await guestRun(rig.t, copy.id, 'cat /dev/shm/marker; kill -0 "$(cat /dev/shm/sleeper)" && echo alive; hostname');
    expect(inCopy).toMatchObject({ exitCode: 0, stdout: `only-in-memory\nalive\n${NAME}-copy\n` });
    await screenshot(page, 'fork-copy');
  }, BOOT_MS + 60_000);

  test('a snapshot from the machine page, on the Snapshots page, and a new machine from it that goes on with its memory', async () => {
    await page.goto(`${rig.url}/console/machines/${NAME}`);
    await page.getByRole('group', { name: 'Machine actions' }).getByRole('button', { name: 'Snapshot', exact: true }).click();
    const dialog = page.getByRole('dialog', { name: `Take a snapshot of ${NAME}` });
    await expect(dialog.getByRole('checkbox', { name: /Keep its memory too/ }).isChecked()).resolves.toBe(true);
    await dialog.getByRole('textbox', { name: 'Name' }).fill('prepared');
    await screenshot(page, 'snapshot-dialog');
    await dialog.getByRole('button', { name: 'Take snapshot' }).click();
    await page.waitForURL(`${rig.url}/console/snapshots`);
    const row = page.getByRole('table', { name: 'Snapshots' }).getByRole('row', { name: /prepared/ });
    await row.getByText('ready', { exact: true }).waitFor({ timeout: 120_000 }); // the snapshot.ready event refreshes the list
    await row.getByText('disk and memory').waitFor();
    await screenshot(page, 'snapshots');

    await row.getByRole('link', { name: 'New machine from prepared' }).click();
    await page.getByText('The machine continues its memory').waitFor();
    await expect(page.getByRole('spinbutton', { name: 'Memory (MiB)' }).inputValue()).resolves.toBe('768');
    await page.getByRole('textbox', { name: 'Name', exact: true }).fill(`${NAME}-restored`);
    await page.getByRole('textbox', { name: 'SSH public key' }).fill(new SshKeyFactory().generate('ed25519').publicKey);
    await screenshot(page, 'create-from-snapshot');
    await page.getByRole('button', { name: 'Create machine' }).click();
    await page.waitForURL(`${rig.url}/console/machines/${NAME}-restored`, { timeout: BOOT_MS });
    await statusShown('running', BOOT_MS);
    const restored = (await rig.t.api.get(`/v1/instances/${NAME}-restored`).set(bearer(key)).expect(200)).body;
    expect(restored).toMatchObject({ started_from: 'snapshot_memory', vcpu: 1, memory_mib: 768 });
    const inside = await guestRun(rig.t, restored.id, 'cat /dev/shm/marker; kill -0 "$(cat /dev/shm/sleeper)" && echo alive; hostname');
    expect(inside).toMatchObject({ exitCode: 0, stdout: `only-in-memory\nalive\n${NAME}-restored\n` });

    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Snapshots', exact: true }).click();
    await row.getByRole('button', { name: 'Delete' }).click();
    await page.getByRole('dialog', { name: /Delete the snapshot/ }).getByRole('button', { name: 'Delete snapshot' }).click();
    await page.getByText('No snapshots yet.').waitFor();
    await rig.t.api.get('/v1/snapshots/prepared').set(bearer(key)).expect(404);
  }, BOOT_MS + 180_000);
});
