// Account scoping: account A addresses every object of account B it could name by id. A always gets
// 404 with that resource's not-found code (never 403, never B's data, the same answer as for an id
// that exists nowhere), B's objects are unchanged afterwards, and no list shows the other account.
import { ManualClock, SshKeyFactory } from '../fixtures/account-access';
import {
  bearer, browserFor, cliTokenFor, createAccount, startTestService, TEST_PASSWORD, TestService,
} from '../support/harness';
import type { Account } from '../../src/store/accounts';

const NOWHERE = '00000000-0000-4000-8000-000000000000';

interface Signed {
  account: Account;
  cli: string;
  cliSessionId: string;
  apiKey: string;
  apiKeyId: string;
  browser: { cookie: string; csrf: string };
  deviceKeyId: string;
  exportPath: string;
  webhookId: string;
  /** A new_sign_in alert (from a second browser sign-in). */
  alertId: string;
}

describe('account scoping', () => {
  let t: TestService;
  const clock = new ManualClock();
  const keys = new SshKeyFactory();
  let a: Signed;
  let b: Signed;
  /** The same public key registered by both accounts. */
  let sharedPublicKey: string;

  async function signUp(publicKey: string): Promise<Signed> {
    const account = await createAccount(t);
    const started = await t.services.signIn.startSession(account.id, 'cli', { userAgent: 'jest', ip: '127.0.0.1' }, 'scoping');
    const cli = started.token;
    const created = await t.api.post('/v1/api-tokens').set(bearer(cli)).send({ label: `key of ${account.email}`, expires_in_seconds: 3600 }).expect(200);
    const browser = await browserFor(t, account);
    const deviceKey = await t.api.post('/v1/device-keys').set(bearer(cli)).send({ name: `device of ${account.email}`, public_key: publicKey }).expect(200);
    // a public IP literal: no DNS needed; no delivery is ever attempted here (the worker does not run)
    const webhook = await t.api.post('/v1/webhooks').set(bearer(cli)).send({ name: `hook of ${account.email}`, url: 'https://93.184.215.14/kiste', events: ['snapshot.created'] }).expect(200);
    const link = await t.api.post('/v1/me/export').set(bearer(cli)).expect(201);
    const url = new URL(link.body.url);
    await browserFor(t, account); // a second browser: a new_sign_in alert
    const alerts = await t.api.get('/v1/alerts').set(bearer(cli)).expect(200);
    return {
      account,
      cli,
      cliSessionId: started.session.id,
      apiKey: created.body.token,
      apiKeyId: created.body.data.id,
      browser,
      deviceKeyId: deviceKey.body.id,
      exportPath: url.pathname + url.search,
      webhookId: webhook.body.data.id,
      alertId: alerts.body[0].id,
    };
  }

  /** Every row the database holds for an account, per table. */
  async function rowsOf(accountId: string): Promise<Record<string, unknown>> {
    const db = t.services.database.prisma;
    const where = { where: { accountId }, orderBy: { id: 'asc' as const } };
    return {
      account: await db.account.findUnique({ where: { id: accountId } }),
      sessions: await db.session.findMany(where),
      knownBrowsers: await db.knownBrowser.findMany(where),
      apiTokens: await db.apiToken.findMany(where),
      deviceKeys: await db.deviceKey.findMany(where),
      exportLinks: await db.exportLink.findMany(where),
      events: await db.event.findMany(where),
      alerts: await db.alert.findMany(where),
      alertPreferences: await db.alertPreference.findMany({ where: { accountId }, orderBy: { kind: 'asc' } }),
      deletion: await db.accountDeletion.findUnique({ where: { accountId } }),
      webhookEndpoints: await db.webhookEndpoint.findMany(where),
      webhookDeliveries: await db.webhookDelivery.findMany(where),
    };
  }

  /** A's credentials of each kind, with what a state-changing request needs. */
  function credentialsOf(who: Signed): { name: string; headers: Record<string, string> }[] {
    return [
      { name: 'CLI sign-in', headers: bearer(who.cli) },
      { name: 'API key', headers: bearer(who.apiKey) },
      { name: 'browser session', headers: { cookie: who.browser.cookie, 'x-csrf-token': who.browser.csrf } },
    ];
  }

  /** 404 with the code, nothing of B in it, and the same error as for an id that exists nowhere. */
  function expectNotFound(res: { status: number; body: any }, code: string, nowhere: { status: number; body: any }): void {
    expect(res.status).toBe(404);
    expect(res.body.error.code).toBe(code);
    const withoutRequestId = (body: any) => ({ ...body.error, request_id: null, message: body.error.message.replace(/[0-9a-f-]{36}/g, '<id>') });
    expect(withoutRequestId(res.body)).toEqual(withoutRequestId(nowhere.body));
    const text = JSON.stringify(res.body);
    for (const secret of [b.account.email, b.account.id, b.apiKey, b.cli]) expect(text).not.toContain(secret);
  }

  beforeAll(async () => {
    t = await startTestService({ clock });
    sharedPublicKey = keys.generate('ed25519', null, 'shared').publicKey;
    a = await signUp(sharedPublicKey);
    b = await signUp(sharedPublicKey);
  });
  afterAll(async () => {
    keys.cleanup();
    await t.close();
  });

  it('both accounts may register the same public key (no cross-account duplicate)', async () => {
    const aKeys = (await t.api.get('/v1/device-keys').set(bearer(a.cli)).expect(200)).body.data;
    const bKeys = (await t.api.get('/v1/device-keys').set(bearer(b.cli)).expect(200)).body.data;
    expect(aKeys).toHaveLength(1);
    expect(bKeys).toHaveLength(1);
    expect(aKeys[0].fingerprint).toBe(bKeys[0].fingerprint);
    expect(aKeys[0].id).not.toBe(bKeys[0].id);
  });

  describe("A addresses B's objects by id", () => {
    let before: Record<string, unknown>;
    beforeAll(async () => {
      before = await rowsOf(b.account.id);
    });

    it.each([0, 1, 2])("sessions: DELETE /v1/sessions/{B's id} → 404 A11 (credential %#)", async (index) => {
      const { headers } = credentialsOf(a)[index]!;
      const nowhere = await t.api.delete(`/v1/sessions/${NOWHERE}`).set(headers);
      const res = await t.api.delete(`/v1/sessions/${b.cliSessionId}`).set(headers);
      expectNotFound(res, 'A11', nowhere);
    });

    it.each([0, 1, 2])("API keys: GET and DELETE /v1/api-tokens/{B's id} → 404 A10 (credential %#)", async (index) => {
      const { headers } = credentialsOf(a)[index]!;
      const nowhereGet = await t.api.get(`/v1/api-tokens/${NOWHERE}`).set(headers);
      expectNotFound(await t.api.get(`/v1/api-tokens/${b.apiKeyId}`).set(headers), 'A10', nowhereGet);
      const nowhereDelete = await t.api.delete(`/v1/api-tokens/${NOWHERE}`).set(headers);
      expectNotFound(await t.api.delete(`/v1/api-tokens/${b.apiKeyId}`).set(headers), 'A10', nowhereDelete);
    });

    it.each([0, 1, 2])("device keys: DELETE /v1/device-keys/{B's id} → 404 A13 (credential %#)", async (index) => {
      const { headers } = credentialsOf(a)[index]!;
      const nowhere = await t.api.delete(`/v1/device-keys/${NOWHERE}`).set(headers);
      expectNotFound(await t.api.delete(`/v1/device-keys/${b.deviceKeyId}`).set(headers), 'A13', nowhere);
    });

    it.each([0, 1, 2])("alerts: POST /v1/alerts/{B's id}/acknowledge → 404 N20 (credential %#)", async (index) => {
      const { headers } = credentialsOf(a)[index]!;
      const nowhere = await t.api.post(`/v1/alerts/${NOWHERE}/acknowledge`).set(headers);
      expectNotFound(await t.api.post(`/v1/alerts/${b.alertId}/acknowledge`).set(headers), 'N20', nowhere);
    });

    it("alert e-mail settings: A's change leaves B's alone", async () => {
      await t.api.patch('/v1/alerts/preferences').set(bearer(a.cli)).send({ new_sign_in: false }).expect(200);
      const bPreferences = await t.api.get('/v1/alerts/preferences').set(bearer(b.cli)).expect(200);
      expect(bPreferences.body.email).toBe(b.account.email);
      expect(bPreferences.body.data.find((entry: { kind: string }) => entry.kind === 'new_sign_in').enabled).toBe(true);
    });

    it.each([0, 1, 2])("webhooks: GET, PATCH, DELETE, test and deliveries of /v1/webhooks/{B's id} → 404 N10 (credential %#)", async (index) => {
      const { headers } = credentialsOf(a)[index]!;
      const calls = [
        (id: string) => t.api.get(`/v1/webhooks/${id}`),
        (id: string) => t.api.patch(`/v1/webhooks/${id}`).send({ name: 'renamed by A', enabled: false }),
        (id: string) => t.api.delete(`/v1/webhooks/${id}`),
        (id: string) => t.api.post(`/v1/webhooks/${id}/test`),
        (id: string) => t.api.get(`/v1/webhooks/${id}/deliveries`),
      ];
      for (const call of calls) {
        const nowhere = await call(NOWHERE).set(headers);
        expectNotFound(await call(b.webhookId).set(headers), 'N10', nowhere);
      }
    });

    it.each([0, 1, 2])("snapshots: GET, DELETE and create-from of B's snapshot (by id or name) → 404 S01, and no list shows it (credential %#)", async (index) => {
      const { headers } = credentialsOf(a)[index]!;
      const snapshotId = '11111111-2222-4333-8444-555555555555';
      const name = `b-snapshot-${index}`;
      await t.services.database.prisma.snapshot.upsert({
        where: { id: snapshotId },
        update: { name },
        create: {
          id: snapshotId, accountId: b.account.id, name, instanceName: 'b-machine', image: 'universal', status: 'ready', memory: false,
          vcpu: 1, memoryMib: 768, diskMib: 2048, imageProfile: 'minimal', artifactKey: 'x', createdAt: new Date(),
        },
      });
      const calls = [(id: string) => t.api.get(`/v1/snapshots/${id}`), (id: string) => t.api.delete(`/v1/snapshots/${id}`)];
      for (const call of calls) {
        const nowhere = await call(NOWHERE).set(headers);
        expectNotFound(await call(snapshotId).set(headers), 'S01', nowhere);
        const byName = await call(name).set(headers);
        expect({ status: byName.status, code: byName.body.error.code }).toEqual({ status: 404, code: 'S01' });
      }
      const create = (snapshot: string) => t.api.post('/v1/instances').set(headers)
        .send({ profile: 'desktop', vcpu: 1, memory_mib: 768, disk_mib: 2048, ssh_public_key: sharedPublicKey, snapshot });
      expectNotFound(await create(snapshotId), 'S01', await create(NOWHERE));
      const list = await t.api.get('/v1/snapshots').set(headers).expect(200);
      expect(list.body.data).toEqual([]);
      const bList = await t.api.get('/v1/snapshots').set(bearer(b.cli)).expect(200);
      expect(bList.body.data.map((s: { id: string }) => s.id)).toEqual([snapshotId]);
    });

    it("device keys: B's id as a list cursor is refused like an unknown id", async () => {
      for (const cursor of ['starting_after', 'ending_before']) {
        const nowhere = await t.api.get(`/v1/device-keys?${cursor}=${NOWHERE}`).set(bearer(a.cli)).expect(400);
        const res = await t.api.get(`/v1/device-keys?${cursor}=${b.deviceKeyId}`).set(bearer(a.cli)).expect(400);
        expect(res.body.error).toMatchObject({ code: 'P01', param: cursor });
        expect({ ...res.body.error, request_id: null }).toEqual({ ...nowhere.body.error, request_id: null });
      }
    });

    it("sessions: B's id as a list cursor is refused like an unknown id", async () => {
      const nowhere = await t.api.get(`/v1/sessions?starting_after=${NOWHERE}`).set(bearer(a.cli)).expect(400);
      const res = await t.api.get(`/v1/sessions?starting_after=${b.cliSessionId}`).set(bearer(a.cli)).expect(400);
      expect({ ...res.body.error, request_id: null }).toEqual({ ...nowhere.body.error, request_id: null });
    });

    it.each([0, 1, 2])("export links: B's link used by A → 404 A40 (credential %#)", async (index) => {
      const { headers } = credentialsOf(a)[index]!;
      const nowhere = await t.api.get('/v1/me/export/download?token=kiste_exp_nowhere').set(headers);
      expectNotFound(await t.api.get(b.exportPath).set(headers), 'A40', nowhere);
    });

    it("account deletion: A cannot delete B by naming B's e-mail and password (422 A31)", async () => {
      const res = await t.api.delete('/v1/me').set(bearer(a.cli)).send({ confirm: b.account.email, password: TEST_PASSWORD }).expect(422);
      expect(res.body.error).toMatchObject({ code: 'A31', param: 'confirm' });
      expect(JSON.stringify(res.body)).not.toContain(b.account.id);
      // A itself is not being deleted either
      await t.api.get('/v1/me').set(bearer(a.cli)).expect(200);
    });

    it("B's rows are exactly as before, and B's objects still work for B", async () => {
      expect(await rowsOf(b.account.id)).toEqual(before);
      await t.api.get('/v1/me').set(bearer(b.cli)).expect(200);
      await t.api.get('/v1/me').set(bearer(b.apiKey)).expect(200);
      await t.api.get('/v1/me').set('cookie', b.browser.cookie).expect(200);
      const key = await t.api.get(`/v1/api-tokens/${b.apiKeyId}`).set(bearer(b.cli)).expect(200);
      expect(key.body.revoked_at).toBeNull();
      const deviceKeys = await t.api.get('/v1/device-keys').set(bearer(b.cli)).expect(200);
      expect(deviceKeys.body.data.map((k: { id: string }) => k.id)).toEqual([b.deviceKeyId]);
      const sessions = await t.api.get('/v1/sessions').set(bearer(b.cli)).expect(200);
      expect(sessions.body.data.map((s: { id: string }) => s.id)).toContain(b.cliSessionId);
      const file = await t.api.get(b.exportPath).set(bearer(b.cli)).expect(200);
      expect(file.body.account).toBe(b.account.email);
    });
  });

  describe('lists never show the other account', () => {
    it.each([0, 1, 2])('API keys, device keys, sign-ins and the export of A hold only A (credential %#)', async (index) => {
      const { headers } = credentialsOf(a)[index]!;
      const foreign = [b.account.id, b.account.email, b.apiKeyId, b.deviceKeyId, b.cliSessionId, b.webhookId, b.alertId];
      const lists = [
        await t.api.get('/v1/api-tokens').set(headers).expect(200),
        await t.api.get('/v1/device-keys').set(headers).expect(200),
        await t.api.get('/v1/sessions').set(headers).expect(200),
        await t.api.get(a.exportPath).set(headers).expect(200),
        await t.api.get('/v1/me').set(headers).expect(200),
        await t.api.get('/v1/status').set(headers).expect(200),
        await t.api.get('/v1/alerts').set(headers).expect(200),
        await t.api.get('/v1/alerts/preferences').set(headers).expect(200),
      ];
      const webhooks = await t.api.get('/v1/webhooks').set(headers).expect(200);
      expect(webhooks.body.map((w: { id: string }) => w.id)).toEqual([a.webhookId]);
      const events = await t.api.get('/v1/events').set(headers).expect(200);
      for (const res of [...lists, webhooks, events]) {
        const text = JSON.stringify(res.body);
        for (const value of foreign) expect(text).not.toContain(value);
      }
      const [apiTokens, deviceKeys, sessions, file, me, status, alerts, alertPreferences] = lists.map((res) => res.body);
      // A's alerts only: new_sign_in and webhook_created (from A's webhook)
      const aAlerts = await t.services.database.prisma.alert.findMany({ where: { accountId: a.account.id } });
      expect(alerts.map((alert: { id: string }) => alert.id).sort()).toEqual(aAlerts.map((alert) => alert.id).sort());
      expect(alerts.map((alert: { id: string }) => alert.id)).toContain(a.alertId);
      expect(alertPreferences.email).toBe(a.account.email);
      expect(apiTokens.map((k: { id: string }) => k.id)).toEqual([a.apiKeyId]);
      expect(deviceKeys.data.map((k: { id: string }) => k.id)).toEqual([a.deviceKeyId]);
      const aSessions = await t.services.database.prisma.session.findMany({ where: { accountId: a.account.id } });
      expect(sessions.data.map((s: { id: string }) => s.id).sort()).toEqual(aSessions.map((s) => s.id).sort());
      expect(file.account).toBe(a.account.email);
      expect(file.control_plane.api_tokens.map((k: { id: string }) => k.id)).toEqual([a.apiKeyId]);
      expect(file.control_plane.device_keys.map((k: { id: string }) => k.id)).toEqual([a.deviceKeyId]);
      expect(me.id).toBe(a.account.id);
      expect(status.usage).toMatchObject({ api_tokens: 1, device_keys: 1, webhooks: 1 });
    });
  });

  describe("B's deletion stays B's", () => {
    it("A sees no deletion (404 A33) while B's is pending, and B's deletion removes none of A's data", async () => {
      const aBefore = await rowsOf(a.account.id);
      await t.api.delete('/v1/me').set(bearer(b.cli)).send({ confirm: b.account.email, password: TEST_PASSWORD }).expect(202);
      const nowhereDeletion = await t.api.get('/v1/me/deletion').set(bearer(a.cli)).expect(404);
      expect(nowhereDeletion.body.error.code).toBe('A33');
      expect(JSON.stringify(nowhereDeletion.body)).not.toContain(b.account.email);
      // A's credentials all still work; B's all ended
      for (const { headers } of credentialsOf(a)) await t.api.get('/v1/me').set(headers).expect(200);
      for (const { headers } of credentialsOf(b)) await t.api.get('/v1/me').set(headers).expect(401);

      await t.services.deletions.runDue();
      expect((await t.services.deletions.get(b.account.id))!.state).toBe('completed');
      const aAfter = await rowsOf(a.account.id);
      // only "last used" times of A's credentials may have moved (A used them above)
      const stripUse = (rows: Record<string, unknown>) => JSON.parse(JSON.stringify(rows, (key, value) => (key === 'lastUsedAt' || key === 'lastSeenAt' || key === 'updatedAt' ? undefined : typeof value === 'bigint' ? value.toString() : value)));
      expect(stripUse(aAfter)).toEqual(stripUse(aBefore));
      expect((await t.api.get('/v1/me/deletion').set(bearer(a.cli)).expect(404)).body.error.code).toBe('A33');
      // the public key B shared with A is still A's device key
      const aKeys = (await t.api.get('/v1/device-keys').set(bearer(a.cli)).expect(200)).body.data;
      expect(aKeys.map((k: { public_key: string }) => k.public_key)).toEqual([sharedPublicKey]);
    });
  });
});
