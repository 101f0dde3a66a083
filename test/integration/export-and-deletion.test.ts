// The account export (ten-minute link, same account only, no secrets) and account deletion (what
// it needs, sign-in ends at once, the durable background job, retries and resuming elsewhere).
import { insertInstance } from '../support/instance-rows';
import { HostUnreachableError } from '../../src/compute/machine-host';
import { ManualClock, SshKeyFactory } from '../fixtures/account-access';
import {
  apiKeyFor, bearer, browserFor, cliTokenFor, createAccount, startTestService, TEST_PASSWORD, TestService,
} from '../support/harness';
import { createServices, Services } from '../../src/services';
import type { DeletionSteps } from '../../src/domain/account-deletion';
import type { Account } from '../../src/store/accounts';

/** Path and query of a URL the service answered, to request it through the contract-checked api. */
function pathOf(url: string): string {
  const parsed = new URL(url);
  return parsed.pathname + parsed.search;
}

/** Rows that belong to the account, per table (the deletion row is kept on purpose). */
async function rowsOf(t: TestService, accountId: string): Promise<Record<string, number>> {
  const db = t.services.database.prisma;
  const where = { where: { accountId } };
  return {
    account: await db.account.count({ where: { id: accountId } }),
    session: await db.session.count(where),
    knownBrowser: await db.knownBrowser.count(where),
    apiToken: await db.apiToken.count(where),
    oAuthCode: await db.oAuthCode.count(where),
    deviceKey: await db.deviceKey.count(where),
    exportLink: await db.exportLink.count(where),
    event: await db.event.count(where),
  };
}

describe('account export', () => {
  let t: TestService;
  const clock = new ManualClock();
  const keys = new SshKeyFactory();

  beforeAll(async () => {
    t = await startTestService({ clock });
  });
  afterAll(async () => {
    keys.cleanup();
    await t.close();
  });

  async function exportLink(token: string) {
    const res = await t.api.post('/v1/me/export').set(bearer(token)).expect(201);
    return res.body as { object: string; url: string; expires_at: string; message: string };
  }

  it('POST /v1/me/export answers 201 with a link valid ten minutes', async () => {
    const account = await createAccount(t);
    const cli = await cliTokenFor(t, account);
    const link = await exportLink(cli);
    expect(link.object).toBe('account_export_link');
    expect(link.url.startsWith(`${t.config.baseUrl}/v1/me/export/download?token=`)).toBe(true);
    expect(new URL(link.url).searchParams.get('token')).toMatch(/^kiste_exp_/);
    expect(link.expires_at).toBe(new Date(clock.now().getTime() + 10 * 60_000).toISOString());
    expect(link.message.length).toBeGreaterThan(0);
    // the token is stored only as a hash
    const token = new URL(link.url).searchParams.get('token')!;
    const stored = await t.services.database.prisma.exportLink.findMany({ where: { accountId: account.id } });
    expect(stored).toHaveLength(1);
    expect(JSON.stringify(stored)).not.toContain(token.slice('kiste_exp_'.length));
  });

  it('the export says what the compute side holds of the account\'s machines, and null while it cannot be reached', async () => {
    const account = await createAccount(t);
    const cli = await cliTokenFor(t, account);
    await insertInstance(t, account, 'held', 'stopped', { desiredState: 'stopped' });
    jest.spyOn(t.services.machineHost, 'hasSession').mockResolvedValue(true); // as its host keeps a saved session
    try {
      const first = await t.api.get(pathOf((await exportLink(cli)).url)).set(bearer(cli)).expect(200);
      expect(first.body.compute).toEqual({ machines: [{ name: 'held', running: false, session_saved: true }] });
      jest.spyOn(t.services.machineHost, 'isRunning').mockRejectedValue(new HostUnreachableError('the compute worker is not running now'));
      const second = await t.api.get(pathOf((await exportLink(cli)).url)).set(bearer(cli)).expect(200);
      expect(second.body.compute).toBeNull();
      expect(second.body.control_plane.user.email).toBe(account.email); // the rest is there all the same
    } finally {
      jest.restoreAllMocks();
    }
  });

  it('the link downloads the account export: e-mail, device keys, API key metadata, and no secret', async () => {
    const account = await createAccount(t);
    const cli = await cliTokenFor(t, account);
    const created = await t.api.post('/v1/api-tokens').set(bearer(cli)).send({ label: 'export me', expires_in_seconds: 3600 }).expect(200);
    const apiKey: string = created.body.token;
    const revoked = await t.services.apiTokens.create(account.id, 'old one', 600);
    await t.api.delete(`/v1/api-tokens/${revoked.record.id}`).set(bearer(cli)).expect(200);
    const deviceKey = keys.generate('ed25519');
    const added = await t.api.post('/v1/device-keys').set(bearer(cli)).send({ name: 'laptop', public_key: deviceKey.publicKey }).expect(200);
    const browser = await browserFor(t, account);

    const link = await exportLink(cli);
    clock.advanceSeconds(30);
    const res = await t.api.get(pathOf(link.url)).set(bearer(cli)).expect(200);
    const file = res.body;
    expect(file.object).toBe('account_export');
    expect(file.account).toBe(account.email);
    expect(file.generated_at).toBe(clock.now().toISOString());
    expect(file.compute).toEqual({ machines: [] }); // what the compute side holds: no machine yet
    expect(file.control_plane.user).toMatchObject({ id: account.id, email: account.email, object: 'user' });
    expect(file.control_plane.device_keys).toEqual([added.body]);
    const exportedKeys = file.control_plane.api_tokens as Record<string, unknown>[];
    expect(exportedKeys.map((k) => k.id).sort()).toEqual([created.body.data.id, revoked.record.id].sort());
    expect(exportedKeys.find((k) => k.id === created.body.data.id)).toMatchObject({ label: 'export me', token_hint: created.body.data.token_hint });
    expect(exportedKeys.find((k) => k.id === revoked.record.id)!.revoked_at).not.toBeNull();
    expect(file.control_plane.sign_ins.map((s: { kind: string }) => s.kind).sort()).toEqual(['browser', 'cli']);

    // no secret anywhere: key values, sign-in tokens, the export token, password or token hashes
    const json = JSON.stringify(file);
    const secrets = [
      apiKey, revoked.token, cli, browser.cookie.split('=')[1]!, new URL(link.url).searchParams.get('token')!, TEST_PASSWORD,
    ].map((secret) => secret.replace(/^kiste_[a-z]+_/, ''));
    for (const secret of secrets) expect(json).not.toContain(secret);
    const db = t.services.database.prisma;
    const stored = await db.account.findUniqueOrThrow({ where: { id: account.id } });
    const hashes = [
      stored.passwordHash,
      ...(await db.apiToken.findMany({ where: { accountId: account.id } })).map((row) => row.tokenHash),
      ...(await db.session.findMany({ where: { accountId: account.id } })).map((row) => row.tokenHash),
      ...(await db.exportLink.findMany({ where: { accountId: account.id } })).map((row) => row.tokenHash),
      ...(await db.knownBrowser.findMany({ where: { accountId: account.id } })).map((row) => row.browserHash),
    ];
    expect(hashes.length).toBeGreaterThanOrEqual(7);
    for (const hash of hashes) expect(json).not.toContain(hash);
    expect(json).not.toMatch(/scrypt\$|password|token_hash|tokenHash/i);
  });

  it('downloads with any credential of the same account (API key, browser session)', async () => {
    const account = await createAccount(t);
    const apiKey = await apiKeyFor(t, account);
    const link = await exportLink(apiKey);
    expect((await t.api.get(pathOf(link.url)).set(bearer(apiKey)).expect(200)).body.account).toBe(account.email);
    const browser = await browserFor(t, account);
    expect((await t.api.get(pathOf(link.url)).set('cookie', browser.cookie).expect(200)).body.account).toBe(account.email);
  });

  it('the link of one account used by another account → 404 A40, without its data', async () => {
    const owner = await createAccount(t);
    const other = await createAccount(t);
    const link = await exportLink(await cliTokenFor(t, owner));
    const res = await t.api.get(pathOf(link.url)).set(bearer(await cliTokenFor(t, other))).expect(404);
    expect(res.body.error).toMatchObject({ code: 'A40', type: 'export_link_invalid', param: 'token' });
    expect(JSON.stringify(res.body)).not.toContain(owner.email);
    // still valid for its owner
    await t.api.get(pathOf(link.url)).set(bearer(await cliTokenFor(t, owner))).expect(200);
  });

  it('expires after ten minutes (410 A41)', async () => {
    const account = await createAccount(t);
    const cli = await cliTokenFor(t, account);
    const link = await exportLink(cli);
    clock.advanceSeconds(599);
    await t.api.get(pathOf(link.url)).set(bearer(cli)).expect(200);
    clock.advanceSeconds(2);
    const res = await t.api.get(pathOf(link.url)).set(bearer(cli)).expect(410);
    expect(res.body.error).toMatchObject({ code: 'A41', type: 'export_link_expired', param: 'token' });
    // a new link works again
    await t.api.get(pathOf((await exportLink(cli)).url)).set(bearer(cli)).expect(200);
  });

  it('needs a sign-in (401 A01) and a real token (404 A40, 400 P01 without one)', async () => {
    const account = await createAccount(t);
    const cli = await cliTokenFor(t, account);
    const link = await exportLink(cli);
    expect((await t.api.get(pathOf(link.url)).expect(401)).body.error.code).toBe('A01');
    expect((await t.api.post('/v1/me/export').expect(401)).body.error.code).toBe('A01');
    expect((await t.api.get(pathOf(link.url)).set(bearer('kiste_cli_forged')).expect(401)).body.error.code).toBe('A02');
    expect((await t.api.get('/v1/me/export/download?token=kiste_exp_madeup').set(bearer(cli)).expect(404)).body.error.code).toBe('A40');
    expect((await t.api.get('/v1/me/export/download').set(bearer(cli)).expect(400)).body.error).toMatchObject({ code: 'P01', param: 'token' });
  });
});

describe('account deletion', () => {
  let t: TestService;
  const clock = new ManualClock();
  const keys = new SshKeyFactory();
  /** Per test: what the external steps do. */
  let steps: DeletionSteps & { calls: string[] };
  const delegating: DeletionSteps = {
    workers: (accountId) => steps.workers(accountId),
    billing: (accountId) => steps.billing(accountId),
  };
  function recordingSteps(billingFailures = 0): DeletionSteps & { calls: string[] } {
    const calls: string[] = [];
    let failures = billingFailures;
    return {
      calls,
      workers: async (accountId) => void calls.push(`workers:${accountId}`),
      billing: async (accountId) => {
        calls.push(`billing:${accountId}`);
        if (failures-- > 0) throw new Error('billing provider unreachable');
      },
    };
  }

  beforeAll(async () => {
    t = await startTestService({ clock, deletionSteps: delegating });
  });
  beforeEach(() => {
    steps = recordingSteps();
  });
  afterAll(async () => {
    keys.cleanup();
    await t.close();
  });

  /** An account with a bit of everything: CLI sign-in, browser session, API key, device key, export link. */
  async function populated(): Promise<{ account: Account; cli: string; apiKey: string; browser: { cookie: string; csrf: string } }> {
    const account = await createAccount(t);
    const cli = await cliTokenFor(t, account);
    const apiKey = await apiKeyFor(t, account);
    const browser = await browserFor(t, account);
    await t.api.post('/v1/device-keys').set(bearer(cli)).send({ name: 'k', public_key: keys.generate('ed25519').publicKey }).expect(200);
    await t.api.post('/v1/me/export').set(bearer(cli)).expect(201);
    return { account, cli, apiKey, browser };
  }

  const deleteMe = (token: string, body: unknown) => t.api.delete('/v1/me').set(bearer(token)).send(body as object);

  async function expectUntouched(t: TestService, who: { account: Account; cli: string; apiKey: string; browser: { cookie: string } }) {
    await t.api.get('/v1/me').set(bearer(who.cli)).expect(200);
    await t.api.get('/v1/me').set(bearer(who.apiKey)).expect(200);
    await t.api.get('/v1/me').set('cookie', who.browser.cookie).expect(200);
    const row = await t.services.database.prisma.account.findUniqueOrThrow({ where: { id: who.account.id } });
    expect(row.deletionRequestedAt).toBeNull();
    expect(await t.services.deletions.get(who.account.id)).toBeNull();
  }

  it('an API key cannot delete the account (403 A30)', async () => {
    const who = await populated();
    const res = await deleteMe(who.apiKey, { confirm: who.account.email, password: TEST_PASSWORD }).expect(403);
    expect(res.body.error).toMatchObject({ code: 'A30', type: 'api_key_cannot_delete_account' });
    await expectUntouched(t, who);
  });

  it('a wrong confirm or a wrong password → 422 A31 and nothing changes', async () => {
    const who = await populated();
    const other = await createAccount(t);
    const wrongConfirm = await deleteMe(who.cli, { confirm: other.email, password: TEST_PASSWORD }).expect(422);
    expect(wrongConfirm.body.error).toMatchObject({ code: 'A31', type: 'confirmation_mismatch', param: 'confirm' });
    const wrongPassword = await deleteMe(who.cli, { confirm: who.account.email, password: 'not the password' }).expect(422);
    expect(wrongPassword.body.error).toMatchObject({ code: 'A31', param: 'password' });
    const bothWrong = await deleteMe(who.cli, { confirm: 'x@example.com', password: 'nope' }).expect(422);
    expect(bothWrong.body.error.code).toBe('A31');
    await expectUntouched(t, who);
    expect(await rowsOf(t, who.account.id)).toMatchObject({ account: 1, apiToken: 1, deviceKey: 1, exportLink: 1 });
  });

  it('refuses a body off the schema (400 P01) and needs a sign-in (401 A01)', async () => {
    const who = await populated();
    expect((await deleteMe(who.cli, { confirm: who.account.email }).expect(400)).body.error).toMatchObject({ code: 'P01', param: 'password' });
    expect((await deleteMe(who.cli, { confirm: who.account.email, password: TEST_PASSWORD, now: true }).expect(400)).body.error).toMatchObject({
      code: 'P01', param: 'now',
    });
    expect((await t.api.delete('/v1/me').send({ confirm: who.account.email, password: TEST_PASSWORD }).expect(401)).body.error.code).toBe('A01');
    await expectUntouched(t, who);
  });

  it('from a CLI sign-in: 202, every sign-in and API key ends at once, the job removes the account and its records', async () => {
    const who = await populated();
    const bystander = await populated();
    const otherCli = await cliTokenFor(t, who.account);

    // the confirm is compared case-insensitively, like the stored (lower-cased) e-mail
    const res = await deleteMe(who.cli, { confirm: who.account.email.toUpperCase(), password: TEST_PASSWORD }).expect(202);
    expect(res.body).toMatchObject({
      object: 'account_deletion',
      state: 'pending',
      step: 'workers',
      account: who.account.email,
      attempts: 0,
      last_error: null,
      completed_at: null,
    });
    expect(res.body.requested_at).toBe(clock.now().toISOString());

    for (const credential of [who.cli, otherCli, who.apiKey]) {
      expect((await t.api.get('/v1/me').set(bearer(credential)).expect(401)).body.error.code).toBe('A02');
    }
    expect((await t.api.get('/v1/me').set('cookie', who.browser.cookie).expect(401)).body.error.code).toBe('A02');
    expect((await t.api.get('/v1/me/deletion').set(bearer(who.cli)).expect(401)).body.error.code).toBe('A02');
    const login = await t.api.post('/v1/auth/login').send({ email: who.account.email, password: TEST_PASSWORD }).expect(401);
    expect(login.body.error.code).toBe('A05');
    // nothing was removed yet: that is the background job's work
    expect((await rowsOf(t, who.account.id)).account).toBe(1);

    expect(await t.services.deletions.runDue()).toBe(1);
    const done = await t.services.deletions.get(who.account.id);
    expect(done).toMatchObject({ state: 'completed', step: 'done', attempts: 0, lastError: null, email: who.account.email });
    expect(done!.completedAt).toEqual(clock.now());
    expect(steps.calls).toEqual([`workers:${who.account.id}`, `billing:${who.account.id}`]);
    expect(await rowsOf(t, who.account.id)).toEqual({
      account: 0, session: 0, knownBrowser: 0, apiToken: 0, oAuthCode: 0, deviceKey: 0, exportLink: 0, event: 0,
    });

    // a completed deletion is not run again; the other account is untouched
    expect(await t.services.deletions.runDue()).toBe(0);
    expect(steps.calls).toHaveLength(2);
    await expectUntouched(t, bystander);
    expect(await rowsOf(t, bystander.account.id)).toMatchObject({ account: 1, apiToken: 1, deviceKey: 1, exportLink: 1, session: 2 });
  });

  it('from a browser session: needs the CSRF token, answers 202 and clears the session cookie', async () => {
    const who = await populated();
    const body = { confirm: who.account.email, password: TEST_PASSWORD };
    expect((await t.api.delete('/v1/me').set('cookie', who.browser.cookie).send(body).expect(403)).body.error.code).toBe('A03');
    await expectUntouched(t, who);
    const res = await t.api.delete('/v1/me').set('cookie', who.browser.cookie).set('x-csrf-token', who.browser.csrf).send(body).expect(202);
    expect(res.body.state).toBe('pending');
    const cleared = (res.headers['set-cookie'] as unknown as string[]).find((line) => line.startsWith('kiste_session='));
    expect(cleared).toMatch(/^kiste_session=;/);
    expect(cleared).toMatch(/Max-Age=0/i);
    await t.api.get('/v1/me').set(bearer(who.cli)).expect(401);
    await t.services.deletions.runDue();
    expect((await rowsOf(t, who.account.id)).account).toBe(0);
  });

  it('two deletion requests at the same moment: one is accepted, the other is told the deletion is under way', async () => {
    const who = await populated();
    const body = { confirm: who.account.email, password: TEST_PASSWORD };
    const results = await Promise.all([deleteMe(who.cli, body), deleteMe(who.cli, body)]);
    const statuses = results.map((res) => res.status).sort();
    expect(statuses[0]).toBe(202);
    // the loser either saw the account already marked (409 A32) or its credential already ended (401 A02)
    expect([[202, 401], [202, 409]]).toContainEqual(statuses);
    const loser = results.find((res) => res.status !== 202)!;
    expect(['A32', 'A02']).toContain(loser.body.error.code);
    expect(await t.services.database.prisma.accountDeletion.count({ where: { accountId: who.account.id } })).toBe(1);
    await t.services.deletions.runDue();
    expect((await rowsOf(t, who.account.id)).account).toBe(0);
  });

  it('a failing step is recorded (attempts, last_error, next_attempt_at) and retried once due', async () => {
    steps = recordingSteps(1);
    const who = await populated();
    await deleteMe(who.cli, { confirm: who.account.email, password: TEST_PASSWORD }).expect(202);

    expect(await t.services.deletions.runDue()).toBe(0);
    const failed = (await t.services.deletions.get(who.account.id))!;
    expect(failed).toMatchObject({ state: 'pending', step: 'billing', attempts: 1, lastError: 'billing provider unreachable' });
    expect(failed.nextAttemptAt!.getTime()).toBeGreaterThan(clock.now().getTime());
    expect(failed.completedAt).toBeNull();
    expect((await rowsOf(t, who.account.id)).account).toBe(1);

    // not due yet: nothing runs
    expect(await t.services.deletions.runDue()).toBe(0);
    expect(steps.calls).toEqual([`workers:${who.account.id}`, `billing:${who.account.id}`]);

    clock.set(new Date(failed.nextAttemptAt!.getTime() + 1000));
    expect(await t.services.deletions.runDue()).toBe(1);
    // workers is not repeated: the job continues at the recorded step
    expect(steps.calls).toEqual([`workers:${who.account.id}`, `billing:${who.account.id}`, `billing:${who.account.id}`]);
    const done = (await t.services.deletions.get(who.account.id))!;
    expect(done).toMatchObject({ state: 'completed', step: 'done', attempts: 1, lastError: null });
    expect(done.nextAttemptAt).toBeNull();
    expect((await rowsOf(t, who.account.id)).account).toBe(0);
  });

  it('repeated failures back off further each time', async () => {
    steps = recordingSteps(3);
    const who = await populated();
    await deleteMe(who.cli, { confirm: who.account.email, password: TEST_PASSWORD }).expect(202);
    const delays: number[] = [];
    for (let attempt = 1; attempt <= 3; attempt++) {
      const before = clock.now().getTime();
      expect(await t.services.deletions.runDue()).toBe(0);
      const state = (await t.services.deletions.get(who.account.id))!;
      expect(state.attempts).toBe(attempt);
      delays.push(state.nextAttemptAt!.getTime() - before);
      clock.set(state.nextAttemptAt!);
    }
    expect(delays[1]).toBeGreaterThan(delays[0]!);
    expect(delays[2]).toBeGreaterThan(delays[1]!);
    expect(await t.services.deletions.runDue()).toBe(1);
    expect((await t.services.deletions.get(who.account.id))!.state).toBe('completed');
  });

  it('resumes on another service process sharing the database, at the step where the first one stopped', async () => {
    steps = recordingSteps(Number.POSITIVE_INFINITY); // this process's billing never succeeds
    const who = await populated();
    await deleteMe(who.cli, { confirm: who.account.email, password: TEST_PASSWORD }).expect(202);
    expect(await t.services.deletions.runDue()).toBe(0);
    const stopped = (await t.services.deletions.get(who.account.id))!;
    expect(stopped).toMatchObject({ step: 'billing', attempts: 1 });

    // a second service (as after a restart or on another node), built on the same database
    const secondSteps = recordingSteps();
    const second: Services = createServices(t.config, t.services.database, { clock, deletionSteps: secondSteps });
    expect(await second.deletions.runDue()).toBe(0); // not due yet there either
    clock.set(stopped.nextAttemptAt!);
    expect(await second.deletions.runDue()).toBe(1);
    expect(secondSteps.calls).toEqual([`billing:${who.account.id}`]);
    expect(await second.deletions.get(who.account.id)).toMatchObject({ state: 'completed', step: 'done' });
    expect((await rowsOf(t, who.account.id)).account).toBe(0);
    // and the first process finds nothing left to do
    expect(await t.services.deletions.runDue()).toBe(0);
  });
});
