// Device keys (SSH public keys): real keys from ssh-keygen, what is refused and why, duplicates,
// fingerprints, the list shape with pagination, deletion, credential kinds and the 8 KiB body limit.
import { randomBytes } from 'node:crypto';
import { blobLine, blobOf, SshKey, SshKeyFactory, sshKeygenSupportsDsa, sshString } from '../fixtures/account-access';
import { apiKeyFor, bearer, browserFor, cliTokenFor, createAccount, startTestService, TestService } from '../support/harness';
import type { Account } from '../../src/store/accounts';

describe('device keys', () => {
  let t: TestService;
  const keys = new SshKeyFactory();

  beforeAll(async () => {
    t = await startTestService();
  });
  afterAll(async () => {
    keys.cleanup();
    await t.close();
  });

  async function signedIn(): Promise<{ account: Account; cli: string }> {
    const account = await createAccount(t);
    return { account, cli: await cliTokenFor(t, account) };
  }

  const add = (token: string, body: unknown) => t.api.post('/v1/device-keys').set(bearer(token)).send(body as object);

  describe('accepts real keys made by ssh-keygen', () => {
    it.each([
      ['ed25519', null],
      ['ecdsa', 256],
      ['ecdsa', 384],
      ['ecdsa', 521],
      ['rsa', 2048],
      ['rsa', 4096],
    ] as const)('%s %s: answers the key with the fingerprint ssh-keygen -lf prints', async (type, bits) => {
      const { cli } = await signedIn();
      const key = keys.generate(type, bits);
      const res = await add(cli, { name: `laptop ${type}`, public_key: key.publicKey }).expect(200);
      expect(res.body).toMatchObject({
        object: 'device_key',
        name: `laptop ${type}`,
        public_key: key.publicKey,
        fingerprint: key.fingerprint,
        last_used_at: null,
      });
      expect(res.body.id).toMatch(/^[0-9a-f-]{36}$/);
      const list = await t.api.get('/v1/device-keys').set(bearer(cli)).expect(200);
      expect(list.body.data).toEqual([res.body]);
    });

    it('accepts the .pub file contents with their trailing newline', async () => {
      const { cli } = await signedIn();
      const key = keys.generate('ed25519');
      const res = await add(cli, { name: 'from file', public_key: `${key.publicKey}\n` }).expect(200);
      expect(res.body.public_key).toBe(key.publicKey);
      expect(res.body.fingerprint).toBe(key.fingerprint);
    });

    it('works with an API key too', async () => {
      const { account } = await signedIn();
      const apiKey = await apiKeyFor(t, account);
      const key = keys.generate('ed25519');
      await add(apiKey, { name: 'via api key', public_key: key.publicKey }).expect(200);
    });
  });

  describe('refuses keys it cannot accept with 422 A12 param public_key', () => {
    let cli: string;
    let ed25519: SshKey;
    beforeAll(async () => {
      ({ cli } = await signedIn());
      ed25519 = keys.generate('ed25519');
    });

    async function refused(publicKey: string, reason?: RegExp): Promise<void> {
      const res = await add(cli, { name: 'bad', public_key: publicKey }).expect(422);
      expect(res.body.error).toMatchObject({ code: 'A12', type: 'invalid_public_key', param: 'public_key' });
      if (reason) expect(res.body.error.message).toMatch(reason);
    }

    afterAll(async () => {
      // nothing was stored by any refused request
      expect((await t.api.get('/v1/device-keys').set(bearer(cli)).expect(200)).body.data).toEqual([]);
    });

    it('rsa 1024', async () => {
      await refused(keys.generate('rsa', 1024).publicKey, /1024 bits/);
    });

    it('dsa (where ssh-keygen still makes it) and hand-built ssh-dss', async () => {
      if (sshKeygenSupportsDsa(keys)) await refused(keys.generate('dsa').publicKey, /ssh-dss/);
      await refused(blobLine('ssh-dss', [sshString('ssh-dss'), sshString(randomBytes(129))]), /ssh-dss/);
    });

    it('malformed base64', async () => {
      const [type, data] = ed25519.publicKey.split(' ') as [string, string];
      await refused(`${type} ${data.slice(0, 20)}*${data.slice(21)}`, /base64/);
      await refused(`${type} %%%%`, /base64/);
    });

    it('type and blob that do not match', async () => {
      const [, data] = ed25519.publicKey.split(' ') as [string, string];
      await refused(`ssh-rsa ${data} user@host`, /does not match/);
      await refused(`ecdsa-sha2-nistp256 ${data}`, /does not match/);
    });

    it('a truncated blob', async () => {
      const blob = blobOf(ed25519.publicKey);
      await refused(`ssh-ed25519 ${blob.subarray(0, blob.length - 4).toString('base64')}`, /truncated/);
      const rsa = keys.generate('rsa', 2048);
      const rsaBlob = blobOf(rsa.publicKey);
      await refused(`ssh-rsa ${rsaBlob.subarray(0, 200).toString('base64')}`, /truncated/);
    });

    it('a blob with trailing bytes', async () => {
      const blob = Buffer.concat([blobOf(ed25519.publicKey), Buffer.from('xx')]);
      await refused(`ssh-ed25519 ${blob.toString('base64')}`, /trailing/);
    });

    it('multi-line input (two keys, or a key broken over lines)', async () => {
      const other = keys.generate('ecdsa', 256);
      await refused(`${ed25519.publicKey}\n${other.publicKey}`, /one line/);
      const [type, data] = ed25519.publicKey.split(' ') as [string, string];
      await refused(`${type} ${data.slice(0, 30)}\n${data.slice(30)}`);
    });

    it('a lone word, and a private key pasted by mistake', async () => {
      await refused('ssh-ed25519', /one line/);
      await refused('-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----');
    });
  });

  it('refuses schema violations with 400 P01 (empty key, missing name, unknown field)', async () => {
    const { cli } = await signedIn();
    const key = keys.generate('ed25519').publicKey;
    expect((await add(cli, { name: 'x', public_key: '' }).expect(400)).body.error).toMatchObject({ code: 'P01', param: 'public_key' });
    expect((await add(cli, { public_key: key }).expect(400)).body.error).toMatchObject({ code: 'P01', param: 'name' });
    expect((await add(cli, { name: 'x', public_key: key, comment: 'c' }).expect(400)).body.error).toMatchObject({ code: 'P01', param: 'comment' });
    expect((await add(cli, { name: 'x'.repeat(101), public_key: key }).expect(400)).body.error).toMatchObject({ code: 'P01', param: 'name' });
  });

  it('refuses the same key twice (409 A14), also with another comment or name', async () => {
    const { cli } = await signedIn();
    const key = keys.generate('ed25519', null, 'first@host');
    const first = await add(cli, { name: 'one', public_key: key.publicKey }).expect(200);
    const again = await add(cli, { name: 'two', public_key: key.publicKey }).expect(409);
    expect(again.body.error).toMatchObject({ code: 'A14', type: 'device_key_exists', param: 'public_key' });
    const [type, data] = key.publicKey.split(' ') as [string, string];
    expect((await add(cli, { name: 'three', public_key: `${type} ${data} other@comment` }).expect(409)).body.error.code).toBe('A14');
    const list = await t.api.get('/v1/device-keys').set(bearer(cli)).expect(200);
    expect(list.body.data.map((k: { id: string }) => k.id)).toEqual([first.body.id]);
  });

  it('the same key added concurrently is stored once; the others get 409 A14', async () => {
    const { cli } = await signedIn();
    const key = keys.generate('ed25519');
    const results = await Promise.all(Array.from({ length: 4 }, (_, i) => add(cli, { name: `race ${i}`, public_key: key.publicKey })));
    const statuses = results.map((res) => res.status).sort();
    expect(statuses).toEqual([200, 409, 409, 409]);
    for (const res of results.filter((r) => r.status === 409)) expect(res.body.error.code).toBe('A14');
    expect((await t.api.get('/v1/device-keys').set(bearer(cli)).expect(200)).body.data).toHaveLength(1);
  });

  it('lists with the list shape and paginates with limit, starting_after and ending_before', async () => {
    const { cli } = await signedIn();
    const empty = await t.api.get('/v1/device-keys').set(bearer(cli)).expect(200);
    expect(empty.body).toEqual({ object: 'list', data: [], first_id: null, last_id: null, has_more: false });

    const added: string[] = [];
    for (let i = 0; i < 5; i++) {
      added.push((await add(cli, { name: `key ${i}`, public_key: keys.generate('ed25519').publicKey }).expect(200)).body.id);
    }
    const all = await t.api.get('/v1/device-keys').set(bearer(cli)).expect(200);
    expect(all.body.object).toBe('list');
    expect(all.body.has_more).toBe(false);
    const order: string[] = all.body.data.map((k: { id: string }) => k.id);
    expect([...order].sort()).toEqual([...added].sort());
    expect(all.body.first_id).toBe(order[0]);
    expect(all.body.last_id).toBe(order[4]);

    const page1 = await t.api.get('/v1/device-keys?limit=2').set(bearer(cli)).expect(200);
    expect(page1.body).toMatchObject({ first_id: order[0], last_id: order[1], has_more: true });
    expect(page1.body.data.map((k: { id: string }) => k.id)).toEqual(order.slice(0, 2));
    const page2 = await t.api.get(`/v1/device-keys?limit=2&starting_after=${page1.body.last_id}`).set(bearer(cli)).expect(200);
    expect(page2.body.data.map((k: { id: string }) => k.id)).toEqual(order.slice(2, 4));
    expect(page2.body.has_more).toBe(true);
    const page3 = await t.api.get(`/v1/device-keys?limit=2&starting_after=${page2.body.last_id}`).set(bearer(cli)).expect(200);
    expect(page3.body).toMatchObject({ first_id: order[4], last_id: order[4], has_more: false });
    expect(page3.body.data).toHaveLength(1);
    const back = await t.api.get(`/v1/device-keys?limit=2&ending_before=${order[4]}`).set(bearer(cli)).expect(200);
    expect(back.body.data.map((k: { id: string }) => k.id)).toEqual(order.slice(2, 4));
    expect(back.body.has_more).toBe(true);
    const front = await t.api.get(`/v1/device-keys?limit=2&ending_before=${order[2]}`).set(bearer(cli)).expect(200);
    expect(front.body.data.map((k: { id: string }) => k.id)).toEqual(order.slice(0, 2));
    expect(front.body.has_more).toBe(false);

    expect((await t.api.get('/v1/device-keys?limit=0').set(bearer(cli)).expect(400)).body.error).toMatchObject({ code: 'P01', param: 'limit' });
    expect((await t.api.get('/v1/device-keys?limit=101').set(bearer(cli)).expect(400)).body.error).toMatchObject({ code: 'P01', param: 'limit' });
    const unknownCursor = await t.api.get('/v1/device-keys?starting_after=00000000-0000-4000-8000-000000000000').set(bearer(cli)).expect(400);
    expect(unknownCursor.body.error).toMatchObject({ code: 'P01', param: 'starting_after' });
  });

  it('deletes: 200 {deleted: true}, then 404 A13; the key is gone from the list and can be added again', async () => {
    const { cli } = await signedIn();
    const key = keys.generate('ecdsa', 384);
    const created = await add(cli, { name: 'to delete', public_key: key.publicKey }).expect(200);
    const keep = await add(cli, { name: 'keep', public_key: keys.generate('ed25519').publicKey }).expect(200);
    const deleted = await t.api.delete(`/v1/device-keys/${created.body.id}`).set(bearer(cli)).expect(200);
    expect(deleted.body).toEqual({ id: created.body.id, object: 'device_key', deleted: true });
    const again = await t.api.delete(`/v1/device-keys/${created.body.id}`).set(bearer(cli)).expect(404);
    expect(again.body.error).toMatchObject({ code: 'A13', type: 'device_key_not_found' });
    const list = await t.api.get('/v1/device-keys').set(bearer(cli)).expect(200);
    expect(list.body.data.map((k: { id: string }) => k.id)).toEqual([keep.body.id]);
    await add(cli, { name: 'back again', public_key: key.publicKey }).expect(200);
    expect((await t.api.delete('/v1/device-keys/not-a-uuid').set(bearer(cli)).expect(400)).body.error).toMatchObject({ code: 'P01', param: 'id' });
  });

  it('a browser session cannot add keys (403 A04) but can list and delete them', async () => {
    const { account, cli } = await signedIn();
    const browser = await browserFor(t, account);
    const key = keys.generate('ed25519');
    const refused = await t.api
      .post('/v1/device-keys')
      .set('cookie', browser.cookie)
      .set('x-csrf-token', browser.csrf)
      .send({ name: 'console', public_key: key.publicKey })
      .expect(403);
    expect(refused.body.error).toMatchObject({ code: 'A04', type: 'credential_not_permitted' });
    expect((await t.api.get('/v1/device-keys').set(bearer(cli)).expect(200)).body.data).toEqual([]);

    const created = await add(cli, { name: 'cli added', public_key: key.publicKey }).expect(200);
    const listed = await t.api.get('/v1/device-keys').set('cookie', browser.cookie).expect(200);
    expect(listed.body.data).toEqual([created.body]);
    expect((await t.api.delete(`/v1/device-keys/${created.body.id}`).set('cookie', browser.cookie).expect(403)).body.error.code).toBe('A03');
    await t.api.delete(`/v1/device-keys/${created.body.id}`).set('cookie', browser.cookie).set('x-csrf-token', browser.csrf).expect(200);
    expect((await t.api.get('/v1/device-keys').set('cookie', browser.cookie).expect(200)).body.data).toEqual([]);
  });

  it('refuses a body over 8 KiB with 413 P03, even when the key field is within its schema length', async () => {
    const { cli } = await signedIn();
    const key = keys.generate('ed25519');
    const big = { name: 'big', public_key: `${key.publicKey} ${'c'.repeat(9000)}` };
    const res = await add(cli, big).expect(413);
    expect(res.body.error).toMatchObject({ code: 'P03', type: 'payload_too_large' });
    // just under the limit is read and judged on its content
    const fits = { name: 'fits', public_key: `${key.publicKey} ${'c'.repeat(7000)}` };
    const ok = await add(cli, fits).expect(200);
    expect(ok.body.fingerprint).toBe(key.fingerprint);
  });

  it('needs a sign-in', async () => {
    expect((await t.api.get('/v1/device-keys').expect(401)).body.error.code).toBe('A01');
    expect((await t.api.post('/v1/device-keys').send({ name: 'x', public_key: 'y' }).expect(401)).body.error.code).toBe('A01');
  });
});
