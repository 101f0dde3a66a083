// The machine page's Services tab in real Chromium, on machine rows without a guest (a service's
// records, URL and events need none; its status then says the machine is stopped, or for a running
// row that nothing answers on the port): a port published through the form is listed with its URL
// (a link to a new tab, and a copy button); a taken name is refused inline (S11) with nothing
// stored, as are a machine's service past its limit (L14) and an installation with no address for
// services (S12: the envelope of a service so configured, stood in for this one's answer); services
// published and deleted through the API come and go without a reload (the event stream); delete
// asks first. Screenshots; no page errors.
import type { Locator, Page } from 'playwright-core';
import type { Account } from '../../src/store/accounts';
import { screenshot } from '../support/browser';
import { ConsoleRig, signIn, startConsole } from '../support/console';
import { apiKeyFor, bearer, createAccount, startTestService } from '../support/harness';
import { insertInstance } from '../support/instance-rows';

const UI_MS = 60_000;
/** A URL under *.localhost (the console listens on loopback) with the service's name and key. */
const LOCALHOST_URL = (name: string) => new RegExp(`^http://${name}-[a-z2-7]{10}\\.localhost:\\d+/$`);

describe('console: a machine\'s services', () => {
  let rig: ConsoleRig;
  let account: Account;
  let key: string;
  let page: Page;
  let problems: string[];

  const services = async (machine: string) => (await rig.t.api.get(`/v1/instances/${machine}/services`).set(bearer(key)).expect(200)).body.data as Record<string, unknown>[];
  const publish = (machine: string, body: object) => rig.t.api.post(`/v1/instances/${machine}/services`).set(bearer(key)).send(body).expect(200);
  const openTab = async (machine: string) => {
    await page.goto(`${rig.url}/console/machines/${machine}`);
    await page.getByRole('navigation', { name: 'Machine sections' }).getByRole('link', { name: 'Services' }).click();
    await page.getByRole('heading', { level: 2, name: 'Services' }).waitFor();
  };
  const table = () => page.getByRole('table', { name: 'Services' });
  const row = (service: string): Locator => table().getByRole('row').filter({ has: page.getByRole('rowheader', { name: new RegExp(`^${service}( |$)`) }) });
  const form = () => page.getByRole('region', { name: 'Publish a port' });
  const fillForm = async (fields: { name: string; port: number; description?: string; public?: boolean }) => {
    await form().getByRole('textbox', { name: 'Name' }).fill(fields.name);
    await form().getByRole('spinbutton', { name: 'Port' }).fill(String(fields.port));
    await form().getByRole('textbox', { name: 'Description' }).fill(fields.description ?? '');
    await form().getByRole('checkbox', { name: 'Public — anyone with the URL' }).setChecked(fields.public ?? false);
    await form().getByRole('button', { name: 'Publish port' }).click();
  };

  beforeAll(async () => {
    rig = await startConsole();
    account = await createAccount(rig.t);
    key = await apiKeyFor(rig.t, account);
    await insertInstance(rig.t, account, 'web-box', 'stopped', { desiredState: 'stopped' });
    ({ page, problems } = await rig.open('/console/login'));
    await signIn(page, account);
    await page.waitForURL(`${rig.url}/`);
  }, 60_000);
  afterAll(() => rig?.close());
  afterEach(() => expect(problems).toEqual([]));

  test('a port published through the form is listed with its URL, to open or copy; a taken name is refused inline', async () => {
    await openTab('web-box');
    expect(page.url()).toBe(`${rig.url}/console/machines/web-box?tab=services`);
    await page.getByText('No ports published yet.').waitFor();

    await fillForm({ name: 'app', port: 5173, description: 'the dev server', public: true });
    const app = row('app');
    const link = app.getByRole('link');
    await link.waitFor();
    const url = (await link.getAttribute('href'))!;
    expect(url).toMatch(LOCALHOST_URL('app'));
    await expect(link.textContent()).resolves.toBe(url);
    await expect(link.getAttribute('target')).resolves.toBe('_blank');
    await expect(link.getAttribute('rel')).resolves.toContain('noopener');
    await app.getByText('the dev server').waitFor();
    await app.getByRole('cell', { name: '5173' }).waitFor();
    await app.getByText('public', { exact: true }).waitFor();
    await app.getByText('stopped', { exact: true }).waitFor();
    await app.getByText('The machine is not running.').waitFor();
    // The form is ready for the next one.
    await expect(form().getByRole('textbox', { name: 'Name' }).inputValue()).resolves.toBe('');
    await expect(form().getByRole('checkbox', { name: 'Public — anyone with the URL' }).isChecked()).resolves.toBe(false);
    expect(await services('web-box')).toEqual([
      expect.objectContaining({ name: 'app', port: 5173, access: 'public', description: 'the dev server', public_url: url, status: 'stopped' }),
    ]);

    await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: rig.url });
    await app.getByRole('button', { name: 'Copy URL' }).click();
    await app.getByRole('button', { name: 'Copied' }).waitFor();
    await expect(page.evaluate('navigator.clipboard.readText()')).resolves.toBe(url);

    // The same name again (on another port): the service's refusal under the form, nothing stored.
    await fillForm({ name: 'app', port: 8080 });
    const refusal = form().getByRole('alert');
    await refusal.getByText('web-box already has a service named app or one on port 8080').waitFor();
    await refusal.getByText('Code S11').waitFor();
    await refusal.getByText('Choose a different name or port, or delete the existing service.').waitFor();
    await expect(form().getByRole('textbox', { name: 'Name' }).inputValue()).resolves.toBe('app'); // kept, to be corrected
    expect(await services('web-box')).toHaveLength(1);
    await expect(table().getByRole('row').count()).resolves.toBe(2); // the titles and app
  }, UI_MS);

  test('services published and deleted through the API come and go without a reload', async () => {
    await page.evaluate('window.__notReloaded = true');
    await publish('web-box', { name: 'api', port: 8000, description: 'JSON API' });
    const api = row('api');
    await api.getByRole('link', { name: LOCALHOST_URL('api') }).waitFor({ timeout: 30_000 });
    await api.getByText('private', { exact: true }).waitFor();
    await api.getByText('stopped', { exact: true }).waitFor();
    await form().getByRole('textbox', { name: 'Name' }).fill('');
    await form().getByRole('spinbutton', { name: 'Port' }).fill('');
    await page.evaluate('document.activeElement.blur()');
    await screenshot(page, 'machine-services');

    await rig.t.api.delete('/v1/instances/web-box/services/api').set(bearer(key)).expect(200);
    await api.waitFor({ state: 'detached', timeout: 30_000 });
    await row('app').waitFor();
    await expect(page.evaluate('window.__notReloaded')).resolves.toBe(true);
  }, UI_MS);

  test('access changes from the row: private at once after a confirmation, public only after a warning', async () => {
    const app = row('app');
    expect((await services('web-box')).find((one) => one.name === 'app')?.access).toBe('public');
    await app.getByRole('button', { name: 'Make private' }).click();
    await page.getByRole('dialog', { name: 'Make “app” private?' }).getByRole('button', { name: 'Make private' }).click();
    await app.getByText('private', { exact: true }).waitFor();
    expect((await services('web-box')).find((one) => one.name === 'app')?.access).toBe('account');
    await app.getByRole('button', { name: 'Make public' }).click();
    const warning = page.getByRole('dialog', { name: 'Make “app” public?' });
    await warning.getByText('Anyone with its URL can then use the app').waitFor();
    await screenshot(page, 'machine-services-make-public');
    await warning.getByRole('button', { name: 'Make public' }).click();
    await app.getByText('public', { exact: true }).waitFor();
    expect((await services('web-box')).find((one) => one.name === 'app')?.access).toBe('public');
  }, UI_MS);

  test('delete asks first; then the row and the URL are gone', async () => {
    const app = row('app');
    await app.getByRole('button', { name: 'Delete' }).click();
    const dialog = page.getByRole('dialog', { name: 'Delete the service “app”?' });
    await dialog.getByText('the app in the machine keeps running').waitFor();
    await dialog.getByRole('button', { name: 'Cancel' }).click();
    await dialog.waitFor({ state: 'hidden' });
    expect(await services('web-box')).toHaveLength(1);

    await app.getByRole('button', { name: 'Delete' }).click();
    await dialog.getByRole('button', { name: 'Delete service' }).click();
    await app.waitFor({ state: 'detached' });
    await page.getByText('No ports published yet.').waitFor();
    expect(await services('web-box')).toEqual([]);
    expect((await rig.t.api.get('/v1/instances/web-box/services/app').set(bearer(key)).expect(404)).body.error.code).toBe('S10');
  }, UI_MS);

  test('a machine at its limit (L14) and an installation with no address for services (S12) are said under the form', async () => {
    await insertInstance(rig.t, account, 'full-box', 'stopped', { desiredState: 'stopped' });
    const limit = rig.t.services.limits.servicesPerMachine;
    for (let n = 0; n < limit; n += 1) await publish('full-box', { name: `s${n}`, port: 3000 + n });
    await openTab('full-box');
    await row(`s${limit - 1}`).waitFor(); // the list loads after the tab opens: counted once it is there
    await expect(table().getByRole('row').count()).resolves.toBe(1 + limit);
    await fillForm({ name: 'one-more', port: 9000 });
    await form().getByRole('alert').getByText(`A machine can have at most ${limit} hosted services`).waitFor();
    await form().getByRole('alert').getByText('Code L14').waitFor();
    expect(await services('full-box')).toHaveLength(limit);

    // A service whose base URL is not on loopback and that has no services setting answers S12:
    // that answer, for this browser's request.
    const elsewhere = await startTestService({ env: { KISTE_BASE_URL: 'https://kiste.example.com' } });
    let s12: { status: number; body: unknown };
    try {
      const owner = await createAccount(elsewhere);
      await insertInstance(elsewhere, owner, 'full-box', 'stopped', { desiredState: 'stopped' });
      const answer = await elsewhere.api.post('/v1/instances/full-box/services').set(bearer(await apiKeyFor(elsewhere, owner))).send({ name: 'one-more', port: 9000, access: 'account' }).expect(409);
      s12 = { status: answer.status, body: answer.body };
    } finally {
      await elsewhere.close();
    }
    expect((s12.body as { error: { code: string } }).error.code).toBe('S12');
    const creates = (url: URL) => url.pathname === '/v1/instances/full-box/services';
    await page.route(creates, (route) => (route.request().method() === 'POST' ? route.fulfill({ status: s12.status, json: s12.body }) : route.fallback()));
    try {
      await form().getByRole('button', { name: 'Publish port' }).click();
      const refusal = form().getByRole('alert');
      await refusal.getByText('This kiste publishes no services (it has no address for them).').waitFor();
      await refusal.getByText(/The operator sets KISTE_SERVICES_DOMAIN/).waitFor();
      await refusal.getByText('Code S12').waitFor();
      await screenshot(page, 'machine-services-not-configured');
    } finally {
      await page.unroute(creates);
    }
  }, UI_MS);

  test('a running machine whose port nothing answers on: unreachable, with what to do', async () => {
    await insertInstance(rig.t, account, 'live-box', 'running');
    await publish('live-box', { name: 'dev', port: 5173, access: 'public', description: 'vite' });
    await publish('live-box', { name: 'admin', port: 8081 });
    await openTab('live-box');
    const dev = row('dev');
    await dev.getByText('unreachable', { exact: true }).waitFor();
    await dev.getByText('Nothing answers on port 5173 (the app must listen on 0.0.0.0 or localhost).').waitFor();
    await row('admin').getByText('private', { exact: true }).waitFor();
    await screenshot(page, 'machine-services-unreachable');
  }, UI_MS);
});
