// Alerts end to end: raised beside their cause (a failed instance operation, a sign-in from a new
// browser, an API key about to expire, a full disk read from a real guest agent), listed open
// first, acknowledged, scoped to the account, and e-mailed through a real SMTP server process on
// loopback (test/support/smtp-relay-server.ts) according to the per-kind switches; a relay that
// is down or refuses costs e-mail, never the alert.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { AlertChecks, diskUsagePercent } from '../../src/domain/alert-checks';
import { AlertOutbox, EMAIL_RETRY_BASE_MS, MAX_EMAIL_ATTEMPTS } from '../../src/domain/alert-outbox';
import { SmtpMailSender } from '../../src/mail/mail-sender';
import { AlertStore } from '../../src/store/alerts';
import { ApiTokenStore } from '../../src/store/api-tokens';
import { InstanceStore } from '../../src/store/instances';
import { PrismaTransactions } from '../../src/store/transactions';
import type { Account } from '../../src/store/accounts';
import { machineFiles } from '../../src/compute/qemu/machine-files';
import { AgentProcess } from '../agent/harness';
import { apiKeyFor, bearer, browserFor, createAccount, startTestService, TEST_PASSWORD, TestService } from '../support/harness';
import { insertInstance } from '../support/instance-rows';
import { ManualClock } from '../support/manual-clock';
import { freePort } from '../support/service-process';
import { SmtpRelay } from '../support/smtp-relay';

jest.setTimeout(60_000);

const NOWHERE = '00000000-0000-4000-8000-000000000000';
const RELAY_USER = 'kiste-relay';
const RELAY_PASS = 'relay pass: w0rd/@';
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface AlertBody {
  id: string;
  kind: string;
  title: string;
  detail: string;
  created_at: string;
  acknowledged_at: string | null;
  emailed_at: string | null;
  resource_type: string | null;
  resource_id: string | null;
}

interface EventBody {
  sequence: number;
  type: string;
  resource_type: string;
  resource_id: string;
  data: Record<string, any>;
}

const relayUrl = (port: number) => `smtp://${encodeURIComponent(RELAY_USER)}:${encodeURIComponent(RELAY_PASS)}@127.0.0.1:${port}`;

/** Drives a lifecycle operation whose work fails, the way a failed boot would: the instance ends in error. */
async function failOperation(t: TestService, account: Account, name: string, message = 'the disk image is corrupt') {
  const existing = await t.services.database.prisma.instance.findFirst({ where: { accountId: account.id, name } });
  const instance = existing ?? (await insertInstance(t, account, name));
  const claimed = await t.services.instances.operations.claim(instance, 'resume', { status: 'starting' });
  const final = await t.services.instances.operations.run(claimed, async () => {
    throw new Error(message);
  });
  expect(final?.status).toBe('error');
  return final!;
}

async function alertsOf(t: TestService, key: string): Promise<AlertBody[]> {
  return (await t.api.get('/v1/alerts').set(bearer(key)).expect(200)).body;
}

async function eventsOf(t: TestService, key: string): Promise<EventBody[]> {
  return (await t.api.get('/v1/events?limit=200').set(bearer(key)).expect(200)).body.data;
}

async function newAccount(t: TestService) {
  const account = await createAccount(t);
  return { account, key: await apiKeyFor(t, account) };
}

describe('alerts with an SMTP relay', () => {
  let relay: SmtpRelay;
  let t: TestService;
  const clock = new ManualClock();

  beforeAll(async () => {
    relay = await SmtpRelay.start({ user: RELAY_USER, pass: RELAY_PASS, reject: 'refused' });
    t = await startTestService({ clock, env: { KISTE_SMTP_URL: relayUrl(relay.port), KISTE_MAIL_FROM: 'kiste alerts <alerts@kiste.test>' } });
  });
  afterAll(async () => {
    await t?.close();
    await relay?.stop();
  });

  it('a failed operation raises instance_error (listed, an event) and its e-mail reaches the relay', async () => {
    const { account, key } = await newAccount(t);
    const instance = await failOperation(t, account, 'box');

    const [alert] = await alertsOf(t, key);
    expect(alert).toMatchObject({
      object: 'alert',
      kind: 'instance_error',
      title: 'Machine box failed',
      resource_type: 'instance',
      resource_id: instance.id,
      acknowledged_at: null,
      emailed_at: null,
    });
    expect(alert!.detail).toContain('the disk image is corrupt');
    const events = await eventsOf(t, key);
    const error = events.find((event) => event.type === 'instance.error')!;
    const raised = events.find((event) => event.type === 'alert.raised')!;
    expect(raised).toMatchObject({
      resource_type: 'alert',
      resource_id: alert!.id,
      data: { kind: 'instance_error', title: 'Machine box failed', resource_type: 'instance', resource_id: instance.id },
    });
    expect(raised.sequence).toBe(error.sequence + 1); // written in the same transaction as the error

    expect((await t.services.alerts.outbox.run()).sent).toBeGreaterThanOrEqual(1);
    const [mail] = await relay.waitFor(account.email);
    expect(mail!.auth).toBe(RELAY_USER); // credentials from the URL
    expect(mail!.envelope).toEqual({ from: 'alerts@kiste.test', to: [account.email] });
    expect(mail!.headers.to).toBe(account.email);
    expect(mail!.headers.from).toBe('kiste alerts <alerts@kiste.test>');
    expect(mail!.headers.subject).toBe('[kiste] Machine box failed');
    expect(mail!.text).toContain('Machine box failed');
    expect(mail!.text).toContain('the disk image is corrupt');
    expect(mail!.text).toContain(alert!.id);
    expect(mail!.text).toContain('/v1/alerts');

    const [after] = await alertsOf(t, key);
    expect(after!.emailed_at).toBe(clock.now().toISOString());
    await t.services.alerts.outbox.run();
    await sleep(200);
    expect(relay.to(account.email)).toHaveLength(1); // sent once
  });

  it('preferences list every kind; switching a kind off stops its e-mail but not the alert', async () => {
    const { account, key } = await newAccount(t);
    const initial = await t.api.get('/v1/alerts/preferences').set(bearer(key)).expect(200);
    expect(initial.body).toMatchObject({ object: 'alert_preferences', email: account.email, email_delivery: 'configured' });
    expect(initial.body.data.map((entry: { kind: string }) => entry.kind)).toEqual([
      'webhook_created', 'disk_almost_full', 'webhook_failing', 'instance_error', 'api_key_expiring', 'new_sign_in',
    ]);
    for (const entry of initial.body.data) {
      expect(entry).toEqual({ kind: entry.kind, enabled: true, title: expect.any(String), description: expect.any(String) });
    }

    const patched = await t.api.patch('/v1/alerts/preferences').set(bearer(key)).send({ instance_error: false, disk_almost_full: false }).expect(200);
    const enabled = (body: any) => Object.fromEntries(body.data.map((entry: { kind: string; enabled: boolean }) => [entry.kind, entry.enabled]));
    expect(enabled(patched.body)).toEqual({
      webhook_created: true, disk_almost_full: false, webhook_failing: true, instance_error: false, api_key_expiring: true, new_sign_in: true,
    });
    expect(patched.body.email).toBe(account.email);
    expect(enabled((await t.api.get('/v1/alerts/preferences').set(bearer(key)).expect(200)).body)).toEqual(enabled(patched.body));
    const changed = (await eventsOf(t, key)).filter((event) => event.type === 'account.updated' && event.data.alert_email);
    expect(changed.map((event) => event.data.alert_email)).toEqual([{ instance_error: false, disk_almost_full: false }]);

    await failOperation(t, account, 'quiet');
    const run = await t.services.alerts.outbox.run();
    expect(run.skipped).toBeGreaterThanOrEqual(1);
    await sleep(300);
    expect(relay.to(account.email)).toHaveLength(0);
    const [quiet] = await alertsOf(t, key); // still listed, never e-mailed
    expect(quiet).toMatchObject({ kind: 'instance_error', title: 'Machine quiet failed', emailed_at: null });
    expect((await t.services.database.prisma.alert.findUnique({ where: { id: quiet!.id } }))!.emailState).toBe('skipped');
    expect((await eventsOf(t, key)).some((event) => event.type === 'alert.raised' && event.resource_id === quiet!.id)).toBe(true);

    // switched on again: the next alert of the kind is e-mailed
    await t.api.patch('/v1/alerts/preferences').set(bearer(key)).send({ instance_error: true }).expect(200);
    await failOperation(t, account, 'loud');
    await t.services.alerts.outbox.run();
    const [mail] = await relay.waitFor(account.email);
    expect(mail!.headers.subject).toBe('[kiste] Machine loud failed');
    const listed = await alertsOf(t, key);
    expect(listed.find((alert) => alert.title === 'Machine loud failed')!.emailed_at).not.toBeNull();
    expect(listed.find((alert) => alert.title === 'Machine quiet failed')!.emailed_at).toBeNull();
  });

  it('an unknown kind is refused with N21 naming it, and nothing changes', async () => {
    const { key } = await newAccount(t);
    const res = await t.api.patch('/v1/alerts/preferences').set(bearer(key)).send({ instance_error: false, no_such_kind: true }).expect(422);
    expect(res.body.error).toMatchObject({ code: 'N21', type: 'unknown_alert_kind', param: 'no_such_kind' });
    const now = await t.api.get('/v1/alerts/preferences').set(bearer(key)).expect(200);
    expect(now.body.data.find((entry: { kind: string }) => entry.kind === 'instance_error').enabled).toBe(true);
    const notBoolean = await t.api.patch('/v1/alerts/preferences').set(bearer(key)).send({ instance_error: 'no' }).expect(400);
    expect(notBoolean.body.error.code).toBe('P01');
    await t.api.patch('/v1/alerts/preferences').set(bearer(key)).send({}).expect(200);
  });

  it('acknowledging closes the alert once (idempotent); a repeat while open raises nothing, a new occurrence raises a new alert', async () => {
    const { account, key } = await newAccount(t);
    const instance = await failOperation(t, account, 'flaky');
    await failOperation(t, account, 'flaky', 'failed again'); // still open: no second alert
    const [first, ...others] = await alertsOf(t, key);
    expect(others).toHaveLength(0);

    clock.advanceSeconds(5);
    const acked = await t.api.post(`/v1/alerts/${first!.id}/acknowledge`).set(bearer(key)).expect(200);
    expect(acked.body).toMatchObject({ id: first!.id, kind: 'instance_error', acknowledged_at: clock.now().toISOString() });
    clock.advanceSeconds(5);
    const again = await t.api.post(`/v1/alerts/${first!.id}/acknowledge`).set(bearer(key)).expect(200);
    expect(again.body.acknowledged_at).toBe(acked.body.acknowledged_at);
    const acknowledgements = (await eventsOf(t, key)).filter((event) => event.type === 'alert.acknowledged');
    expect(acknowledgements).toEqual([expect.objectContaining({ resource_type: 'alert', resource_id: first!.id, data: { kind: 'instance_error' } })]);

    await failOperation(t, account, 'flaky', 'failed a third time');
    const listed = await alertsOf(t, key);
    expect(listed.map((alert) => [alert.id === first!.id ? 'first' : 'new', alert.acknowledged_at === null])).toEqual([['new', true], ['first', false]]);
    expect(listed[0]).toMatchObject({ kind: 'instance_error', resource_id: instance.id });
    expect(listed[0]!.detail).toContain('failed a third time');
  });

  it('lists open alerts first, each part newest first', async () => {
    const { account, key } = await newAccount(t);
    const names = ['one', 'two', 'three', 'four'];
    for (const name of names) {
      await failOperation(t, account, name);
      await sleep(15); // distinct creation times
    }
    const created = await alertsOf(t, key);
    expect(created.map((alert) => alert.title)).toEqual(['four', 'three', 'two', 'one'].map((name) => `Machine ${name} failed`));
    const byName = (name: string) => created.find((alert) => alert.title === `Machine ${name} failed`)!;
    await t.api.post(`/v1/alerts/${byName('four').id}/acknowledge`).set(bearer(key)).expect(200);
    await t.api.post(`/v1/alerts/${byName('two').id}/acknowledge`).set(bearer(key)).expect(200);
    const listed = await alertsOf(t, key);
    expect(listed.map((alert) => [alert.title.split(' ')[1], alert.acknowledged_at === null])).toEqual([
      ['three', true], ['one', true], ['four', false], ['two', false],
    ]);
  });

  it("never shows or closes another account's alert (404 N20, like an unknown id)", async () => {
    const a = await newAccount(t);
    const b = await newAccount(t);
    await failOperation(t, b.account, 'private');
    const [bAlert] = await alertsOf(t, b.key);
    expect(await alertsOf(t, a.key)).toEqual([]);
    const nowhere = await t.api.post(`/v1/alerts/${NOWHERE}/acknowledge`).set(bearer(a.key)).expect(404);
    const foreign = await t.api.post(`/v1/alerts/${bAlert!.id}/acknowledge`).set(bearer(a.key)).expect(404);
    expect(foreign.body.error).toMatchObject({ code: 'N20', type: 'alert_not_found' });
    expect({ ...foreign.body.error, request_id: null }).toEqual({ ...nowhere.body.error, request_id: null });
    expect(JSON.stringify(foreign.body)).not.toContain(b.account.email);
    const [still] = await alertsOf(t, b.key);
    expect(still).toEqual(bAlert);
    await t.api.post('/v1/alerts/not-a-uuid/acknowledge').set(bearer(a.key)).expect(400);
  });

  it('new_sign_in: a password sign-in from a browser the account does not know, not from a known one (nor the very first)', async () => {
    const { account, key } = await newAccount(t);
    const first = await browserFor(t, account); // the account's first browser: nothing to warn about
    expect(await alertsOf(t, key)).toEqual([]);

    const known = await t.api.post('/v1/auth/login').set('cookie', first.browserCookie).set('user-agent', 'Known Browser/1.0')
      .send({ email: account.email, password: TEST_PASSWORD }).expect(200);
    expect(known.body.authenticated).toBe(true);
    expect(await alertsOf(t, key)).toEqual([]);

    const stranger = await t.api.post('/v1/auth/login').set('user-agent', 'Stranger Browser/9.9 (X11; Linux)')
      .send({ email: account.email, password: TEST_PASSWORD }).expect(200);
    const alerts = await alertsOf(t, key);
    expect(alerts).toHaveLength(1);
    expect(alerts[0]).toMatchObject({ kind: 'new_sign_in', resource_type: 'session' });
    expect(alerts[0]!.detail).toContain('Stranger Browser/9.9 (X11; Linux)');
    const sessions = await t.services.database.prisma.session.findMany({ where: { accountId: account.id }, orderBy: { createdAt: 'asc' } });
    expect(sessions.map((session) => session.id)).toContain(alerts[0]!.resource_id);
    const events = await eventsOf(t, key);
    const created = events.find((event) => event.type === 'session.created' && event.resource_id === alerts[0]!.resource_id)!;
    expect(events.find((event) => event.type === 'alert.raised')!.sequence).toBe(created.sequence + 1); // same transaction
    expect(stranger.headers['set-cookie']).toBeDefined();

    // a wrong password from a new browser raises nothing
    await t.api.post('/v1/auth/login').send({ email: account.email, password: 'not the password at all' }).expect(401);
    expect(await alertsOf(t, key)).toHaveLength(1);

    await t.services.alerts.outbox.run();
    const [mail] = await relay.waitFor(account.email);
    expect(mail!.headers.subject).toBe('[kiste] New sign-in from a browser not used before');
    expect(mail!.text).toContain('Stranger Browser/9.9');
  });

  it('two outboxes (as in two service processes) running at once send each alert once', async () => {
    const { account } = await newAccount(t);
    for (const name of ['p1', 'p2', 'p3', 'p4', 'p5']) await failOperation(t, account, name);
    const db = t.services.database.prisma;
    const outbox = () => new AlertOutbox(new AlertStore(db), new SmtpMailSender({ url: relayUrl(relay.port), from: 'alerts@kiste.test' }), clock, { baseUrl: t.config.baseUrl }, { warn() {} });
    const runs = await Promise.all([outbox().run(), outbox().run(), outbox().run()]);
    expect(runs.reduce((sum, run) => sum + run.sent, 0)).toBeGreaterThanOrEqual(5);
    await relay.waitFor(account.email, 5);
    await sleep(300);
    expect(relay.to(account.email).map((mail) => mail.headers.subject).sort()).toEqual(['p1', 'p2', 'p3', 'p4', 'p5'].map((name) => `[kiste] Machine ${name} failed`));
    const rows = await db.alert.findMany({ where: { accountId: account.id } });
    expect(rows.map((row) => [row.emailState, row.emailAttempts])).toEqual(rows.map(() => ['sent', 1]));
  });

  it('a relay that refuses the recipient for good: the e-mail fails at once, the alert stays', async () => {
    const account = await createAccount(t, `refused-${Date.now()}@example.com`);
    const key = await apiKeyFor(t, account);
    await failOperation(t, account, 'bounced');
    const run = await t.services.alerts.outbox.run();
    expect(run.failed).toBeGreaterThanOrEqual(1);
    const [alert] = await alertsOf(t, key);
    expect(alert).toMatchObject({ kind: 'instance_error', emailed_at: null, acknowledged_at: null });
    expect(await t.services.database.prisma.alert.findUnique({ where: { id: alert!.id } })).toMatchObject({ emailState: 'failed', emailAttempts: 1 });
  });
});

describe('alert e-mail while the relay is down', () => {
  let t: TestService;
  let port: number;
  let relay: SmtpRelay | null = null;
  const clock = new ManualClock();

  beforeAll(async () => {
    port = await freePort();
    t = await startTestService({ clock, env: { KISTE_SMTP_URL: relayUrl(port) } });
  });
  afterAll(async () => {
    await t?.close();
    await relay?.stop();
  });

  const row = (id: string) => t.services.database.prisma.alert.findUniqueOrThrow({ where: { id } });

  it('retries with pauses, keeps the alert listed, and sends once the relay is back', async () => {
    const { account, key } = await newAccount(t);
    await failOperation(t, account, 'waiting');
    const [alert] = await alertsOf(t, key);

    expect(await t.services.alerts.outbox.run()).toMatchObject({ sent: 0, retrying: 1 });
    expect(await row(alert!.id)).toMatchObject({ emailState: 'pending', emailAttempts: 1 });
    expect(await t.services.alerts.outbox.run()).toMatchObject({ retrying: 0 }); // pausing
    expect((await row(alert!.id)).emailAttempts).toBe(1);
    clock.advance(EMAIL_RETRY_BASE_MS);
    expect(await t.services.alerts.outbox.run()).toMatchObject({ retrying: 1 });
    expect((await row(alert!.id)).emailAttempts).toBe(2);
    expect(await alertsOf(t, key)).toEqual([expect.objectContaining({ id: alert!.id, emailed_at: null, acknowledged_at: null })]);

    relay = await SmtpRelay.start({ port, user: RELAY_USER, pass: RELAY_PASS });
    clock.advance(2 * EMAIL_RETRY_BASE_MS);
    expect(await t.services.alerts.outbox.run()).toMatchObject({ sent: 1 });
    const [mail] = await relay.waitFor(account.email);
    expect(mail!.headers.subject).toBe('[kiste] Machine waiting failed');
    expect(mail!.headers.from).toBe('kiste@localhost'); // KISTE_MAIL_FROM unset and the relay user is no address: kiste@<base URL host>
    expect(await row(alert!.id)).toMatchObject({ emailState: 'sent', emailAttempts: 3 });
    await relay.stop();
    relay = null;
  });

  it(`gives up after ${MAX_EMAIL_ATTEMPTS} attempts: e-mail failed, alert kept`, async () => {
    const account = await createAccount(t);
    const key = await apiKeyFor(t, account, 30 * 86400); // outlives the hours this test moves the clock
    await failOperation(t, account, 'never-mailed');
    const [alert] = await alertsOf(t, key);
    for (let attempt = 1; attempt <= MAX_EMAIL_ATTEMPTS; attempt++) {
      await t.services.alerts.outbox.run();
      expect((await row(alert!.id)).emailAttempts).toBe(attempt);
      clock.advance(3_600_000);
    }
    expect(await row(alert!.id)).toMatchObject({ emailState: 'failed', emailAttempts: MAX_EMAIL_ATTEMPTS });
    await t.services.alerts.outbox.run();
    expect((await row(alert!.id)).emailAttempts).toBe(MAX_EMAIL_ATTEMPTS);
    expect(await alertsOf(t, key)).toEqual([expect.objectContaining({ id: alert!.id, emailed_at: null })]);
  });
});

describe('alerts without an SMTP relay', () => {
  let t: TestService;
  beforeAll(async () => {
    t = await startTestService();
  });
  afterAll(() => t.close());

  it('email_delivery is unconfigured; alerts are still raised and listed, their e-mail skipped', async () => {
    const { account, key } = await newAccount(t);
    const preferences = await t.api.get('/v1/alerts/preferences').set(bearer(key)).expect(200);
    expect(preferences.body).toMatchObject({ email: account.email, email_delivery: 'unconfigured' });
    await failOperation(t, account, 'unmailed');
    expect((await t.services.alerts.outbox.run()).skipped).toBeGreaterThanOrEqual(1);
    const [alert] = await alertsOf(t, key);
    expect(alert).toMatchObject({ kind: 'instance_error', emailed_at: null });
    expect((await t.services.database.prisma.alert.findUniqueOrThrow({ where: { id: alert!.id } })).emailState).toBe('skipped');
  });
});

describe('api_key_expiring (background check)', () => {
  let t: TestService;
  const clock = new ManualClock();
  beforeAll(async () => {
    t = await startTestService({ clock });
  });
  afterAll(() => t.close());

  it('raises one alert per key made for more than seven days, within seven days of its expiry', async () => {
    const account = await createAccount(t);
    const month = await t.services.apiTokens.create(account.id, 'deploy script', 30 * 86400);
    const short = await t.services.apiTokens.create(account.id, 'three days', 3 * 86400);
    const revoked = await t.services.apiTokens.create(account.id, 'revoked', 30 * 86400);
    await t.services.apiTokens.revoke(account.id, revoked.record.id);
    const list = () => t.services.alerts.list(account.id);

    expect(await t.services.alerts.checks.apiKeysExpiring()).toBe(0); // 30 days left; the 3-day key was made short
    expect(await list()).toEqual([]);

    clock.advanceSeconds(23 * 86400 + 3600); // 6 days 23 hours left
    expect(await t.services.alerts.checks.apiKeysExpiring()).toBe(1);
    const [alert] = await list();
    expect(alert).toMatchObject({ kind: 'api_key_expiring', resourceType: 'api_token', resourceId: month.record.id, title: 'API key "deploy script" expires in 7 days' });
    expect(alert!.detail).toContain(month.record.expiresAt.toISOString());

    expect(await t.services.alerts.checks.apiKeysExpiring()).toBe(0); // once per key
    await t.services.alerts.acknowledge(account.id, alert!.id);
    clock.advanceSeconds(5 * 86400);
    expect(await t.services.alerts.checks.apiKeysExpiring()).toBe(0); // not again after the acknowledgement
    expect((await list()).map((entry) => entry.resourceId)).toEqual([month.record.id]);
    expect(short.record.id).not.toBe(month.record.id);
  });
});

describe('disk_almost_full (background check over a real guest agent)', () => {
  let t: TestService;
  let agent: AgentProcess | null = null;
  beforeAll(async () => {
    t = await startTestService();
  });
  afterAll(async () => {
    t.services.compute.inProcess!.machineHost.detachAll(); // the agent clients stop reconnecting
    await agent?.stop();
    await t.close();
  });

  it('reads the disk from the agent of each running machine and raises once per occurrence', async () => {
    const { account, key } = await newAccount(t);
    const instance = await insertInstance(t, account, 'fullbox', 'running');
    // The real agent (agent/dist bundle) listening on the socket the machine host talks to.
    const runDir = machineFiles(join(t.config.dataDir, 'machines', instance.id)).runDir;
    mkdirSync(runDir, { recursive: true });
    agent = await AgentProcess.start({ dir: runDir });
    const { disk } = await t.services.machineHost.agent(instance.id).metrics();
    const percent = diskUsagePercent(disk)!;

    // With the real thresholds: an alert only if this host's disk really is that full.
    expect(await t.services.alerts.checks.disksAlmostFull()).toBe(percent >= 90 ? 1 : 0);
    await t.services.database.prisma.alert.deleteMany({ where: { accountId: account.id } });

    // Thresholds below the real usage make the occurrence certain.
    const db = t.services.database.prisma;
    const checks = new AlertChecks(new PrismaTransactions(db), { alerts: new AlertStore(db), instances: new InstanceStore(db), apiTokens: new ApiTokenStore(db) },
      t.services.machineHost, t.services.clock, { warn() {} }, { fullPercent: Math.max(0, Math.floor(percent) - 1), clearPercent: 0 });
    expect(await checks.disksAlmostFull()).toBe(1);
    const [alert] = await alertsOf(t, key);
    expect(alert).toMatchObject({ kind: 'disk_almost_full', resource_type: 'instance', resource_id: instance.id });
    expect(alert!.title).toMatch(/^Disk of fullbox is \d+ % full$/);
    expect(alert!.detail).toContain(`of ${disk.total_mib} MiB used`);
    expect(await checks.disksAlmostFull()).toBe(0); // the same occurrence
    await t.api.post(`/v1/alerts/${alert!.id}/acknowledge`).set(bearer(key)).expect(200);
    expect(await checks.disksAlmostFull()).toBe(0); // still the same occurrence: no new alert after acknowledging

    // the disk outlives a stop: started again, it is still the same occurrence
    await db.instance.update({ where: { id: instance.id }, data: { status: 'stopped' } });
    expect(await checks.disksAlmostFull()).toBe(0);
    await db.instance.update({ where: { id: instance.id }, data: { status: 'running' } });
    expect(await checks.disksAlmostFull()).toBe(0);

    // a new process (a service restart) knows no occurrence: an acknowledgement of less than a day
    // ago stands for it; an older one does not, and the full disk raises a new alert
    const restarted = () => new AlertChecks(new PrismaTransactions(db), { alerts: new AlertStore(db), instances: new InstanceStore(db), apiTokens: new ApiTokenStore(db) },
      t.services.machineHost, t.services.clock, { warn() {} }, { fullPercent: Math.max(0, Math.floor(percent) - 1), clearPercent: 0 });
    expect(await restarted().disksAlmostFull()).toBe(0);
    await db.alert.update({ where: { id: alert!.id }, data: { acknowledgedAt: new Date(Date.now() - 2 * 86400_000) } });
    expect(await restarted().disksAlmostFull()).toBe(1);
    expect((await alertsOf(t, key)).map((entry) => [entry.kind, entry.acknowledged_at === null])).toEqual([['disk_almost_full', true], ['disk_almost_full', false]]);
  });

  it('a machine whose agent does not answer is skipped without an alert', async () => {
    const { account, key } = await newAccount(t);
    await insertInstance(t, account, 'silent', 'running');
    await t.services.alerts.checks.disksAlmostFull();
    expect(await alertsOf(t, key)).toEqual([]);
  });
});
