// The console's account pages in real Chromium, against a listening service: API keys (value shown
// once, works, revoke ends it), webhooks (secret shown once), alerts (acknowledge), events (the
// newest shown, a new one arrives live), sign-ins (this browser marked), account export, device
// keys (how to add one with the CLI); the home page's notice while machines cannot start (why, and
// gone once they can). Screenshots of each page; no page errors.
import { readFileSync } from 'node:fs';
import type { Page } from 'playwright-core';
import { HostUnreachableError } from '../../src/compute/machine-host';
import type { Account } from '../../src/store/accounts';
import { screenshot } from '../support/browser';
import { ConsoleRig, signIn, startConsole } from '../support/console';
import { bearer, cliTokenFor, createAccount } from '../support/harness';

describe('console account pages', () => {
  let rig: ConsoleRig;
  let account: Account;
  let cli: string;
  let page: Page;
  let problems: string[];

  const nav = (name: string) => page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name, exact: true });

  beforeAll(async () => {
    // Webhook targets must resolve to public addresses: this name does (deliveries just fail).
    rig = await startConsole({ webhooks: { resolve: async () => [{ address: '93.184.216.34', family: 4 }], timeoutMs: 500 } });
    account = await createAccount(rig.t);
    cli = await cliTokenFor(rig.t, account);
    const opened = await rig.open('/console/login');
    ({ page, problems } = opened);
    await signIn(page, account);
    await page.waitForURL(`${rig.url}/`);
  }, 60_000);
  afterAll(() => rig?.close());
  afterEach(() => expect(problems).toEqual([]));

  test('API keys: the value is shown once, works, and Revoke ends it', async () => {
    await nav('API keys').click();
    await page.getByRole('heading', { level: 1, name: 'API keys' }).waitFor();
    await page.getByRole('textbox', { name: 'Name', exact: true }).fill('deploy script');
    await page.getByRole('button', { name: 'Create API key' }).click();
    const shown = page.getByRole('region', { name: 'New API key' });
    const value = (await shown.getByTestId('secret').textContent())!;
    expect(value).toMatch(/^kiste_key_/);
    await shown.getByRole('button', { name: 'Copy new API key' }).waitFor();
    await rig.t.api.get('/v1/me').set(bearer(value)).expect(200);
    await screenshot(page, 'api-keys-created');
    await shown.getByRole('button', { name: 'Done' }).click();
    await expect(page.getByText(value).count()).resolves.toBe(0); // gone for good

    await page.getByRole('row', { name: /deploy script/ }).getByRole('button', { name: 'Revoke', exact: true }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Revoke key' }).click();
    await page.getByRole('row', { name: /deploy script/ }).getByText('revoked').waitFor();
    await rig.t.api.get('/v1/me').set(bearer(value)).expect(401);
  });

  test('webhooks: created with its events, the signing secret shown once; it raises an alert to acknowledge', async () => {
    await nav('Webhooks').click();
    await page.getByRole('textbox', { name: 'Name', exact: true }).fill('ops feed');
    await page.getByRole('textbox', { name: 'URL' }).fill('https://hooks.example.com/kiste');
    await page.getByRole('checkbox', { name: 'instance.created' }).check();
    await page.getByRole('checkbox', { name: 'instance.deleted' }).check();
    await page.getByRole('button', { name: 'Create webhook' }).click();
    const secret = (await page.getByRole('region', { name: 'Signing secret' }).getByTestId('secret').textContent())!;
    expect(secret).toMatch(/^whsec_/);
    await screenshot(page, 'webhooks-created');
    const [hook] = (await rig.t.api.get('/v1/webhooks').set(bearer(cli)).expect(200)).body as { url: string; events: string[] }[];
    expect(hook).toMatchObject({ url: 'https://hooks.example.com/kiste', events: ['instance.created', 'instance.deleted'] });
    expect(JSON.stringify(hook)).not.toContain(secret);

    await nav('Alerts').click();
    const alert = page.getByRole('article').first();
    await alert.waitFor();
    await alert.getByRole('button', { name: 'Acknowledge', exact: true }).click();
    await page.getByRole('button', { name: 'Acknowledge', exact: true }).waitFor({ state: 'detached' });
    const alerts = (await rig.t.api.get('/v1/alerts').set(bearer(cli)).expect(200)).body as { kind: string; acknowledged_at: string | null }[];
    expect(alerts.find((a) => a.kind === 'webhook_created')?.acknowledged_at).toEqual(expect.any(String));
    await screenshot(page, 'alerts');
  });

  test('events: the newest are listed and a new one arrives without a reload', async () => {
    await nav('Events').click();
    await page.getByText('api_token.created').first().waitFor();
    await page.evaluate('window.marker = 1');
    await rig.t.api.post('/v1/api-tokens').set(bearer(cli)).send({ label: 'arrives live', expires_in_seconds: 3600 }).expect(200);
    const created = page.getByText('api_token.created');
    // A locator wait, not a string predicate: polling a string is an eval, which the console's CSP refuses.
    await created.nth(1).waitFor({ timeout: 40_000 });
    expect(await created.count()).toBeGreaterThanOrEqual(2);
    expect(await page.evaluate('window.marker')).toBe(1); // same page, no reload
    await screenshot(page, 'events');
  });

  test('sign-ins mark this browser; device keys say how to add one; the export downloads', async () => {
    await nav('Sign-ins').click();
    await page.getByText('This browser').waitFor();
    await screenshot(page, 'sign-ins');

    await nav('Device keys').click();
    await page.getByText('kiste device-keys add').first().waitFor();

    await nav('Account').click();
    await page.getByText(account.email).first().waitFor();
    await page.getByRole('button', { name: 'Prepare export' }).click();
    const link = page.getByRole('link', { name: 'Download export' });
    await link.waitFor();
    const [download] = await Promise.all([page.waitForEvent('download'), link.click()]);
    const exported = JSON.parse(readFileSync((await download.path())!, 'utf8'));
    expect(JSON.stringify(exported)).toContain(account.email);
    await screenshot(page, 'account');
  });

  test('home: while machines cannot start it says why and what to do, and the notice goes once they can', async () => {
    const host = rig.t.services.machineHost;
    const jail = jest.spyOn(host, 'isolationProblem').mockResolvedValue({ reason: 'setfacl is not installed', hint: 'Install it: apt-get install acl' });
    try {
      await nav('Machines').click();
      const notice = page.getByRole('status').filter({ has: page.getByRole('heading', { name: 'New machines cannot start on this server.' }) });
      await notice.getByText('This server cannot run machines isolated from the host: setfacl is not installed.').waitFor();
      await notice.getByText('Install it: apt-get install acl').waitFor();
      await screenshot(page, 'machines-unavailable');
    } finally {
      jail.mockRestore();
    }
    // The compute worker is being started again: the notice says so and goes by itself once it answers.
    const away = jest.spyOn(host, 'isolationProblem').mockRejectedValue(new HostUnreachableError('GET /w1/checks: the compute worker is not running now'));
    try {
      await page.reload();
      await page.getByRole('heading', { name: 'The compute service cannot be reached right now.' }).waitFor();
      await page.getByText('Machines that already run are not affected.').waitFor();
      await screenshot(page, 'machines-compute-unreachable');
    } finally {
      away.mockRestore();
    }
    await page.getByRole('heading', { name: 'The compute service cannot be reached right now.' }).waitFor({ state: 'detached', timeout: 20_000 });
    // This service has no image: the notice follows its build, and goes when it is ready (the page
    // asks again by itself: a build raises no account event).
    await page.reload();
    const building = page.getByRole('heading', { name: 'New machines can start once the machine image is built.' });
    await building.waitFor();
    await screenshot(page, 'machines-image-building');
    const image = jest.spyOn(host, 'currentImage').mockReturnValue({ profile: rig.t.config.imageProfile, version: 'v2026.01.01-0123abcd', artifactKey: 'k' });
    try {
      await building.waitFor({ state: 'detached', timeout: 20_000 });
    } finally {
      image.mockRestore();
    }
  });
});
