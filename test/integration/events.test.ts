// The account event stream: oldest first without gaps, cursors that move past filtered-out events,
// long polls that answer when an event commits, tail reads of the newest events with the head as
// cursor, retention with 410 N30, account scoping, and (in a second part) continuity across a
// restart and across two service processes on one database.
import request from 'supertest';
import { checkContract } from '../support/contract';
import { freshDatabaseUrl, FreshDatabase } from '../support/database';
import { apiKeyFor, bearer, createAccount, startTestService, TestService } from '../support/harness';
import { ManualClock } from '../support/manual-clock';
import { TEST_IMAGE_DIR } from '../support/images';
import { freePort, ServiceProcess } from '../support/service-process';

jest.setTimeout(120_000);

interface EventBody {
  sequence: number;
  type: string;
  resource_type: string;
  resource_id: string;
  data: Record<string, unknown>;
}

describe('GET /v1/events', () => {
  let t: TestService;
  const clock = new ManualClock();
  beforeAll(async () => {
    t = await startTestService({ clock });
  });
  afterAll(() => t.close());

  async function newAccount() {
    const account = await createAccount(t);
    return { account, key: await apiKeyFor(t, account) };
  }

  it('reads the stream oldest first without gaps, pages with next_cursor and has_more', async () => {
    const { account, key } = await newAccount();
    for (let i = 0; i < 4; i++) await t.services.apiTokens.create(account.id, `key ${i}`, 3600);
    const all = await t.api.get('/v1/events').set(bearer(key)).expect(200);
    const sequences = all.body.data.map((e: EventBody) => e.sequence);
    expect(sequences).toEqual(sequences.map((_: number, i: number) => i + 1)); // 1..n, no gaps
    expect(all.body.data[0]).toMatchObject({ object: 'event', type: 'account.updated', resource_type: 'account', resource_id: account.id });
    expect(all.body.data.filter((e: EventBody) => e.type === 'api_token.created')).toHaveLength(5); // the test key and four more
    expect(all.body).toMatchObject({ object: 'event_list', next_cursor: sequences.at(-1), has_more: false });

    const seen: number[] = [];
    let after = 0;
    for (let reads = 0; reads < 10; reads++) {
      const page = await t.api.get(`/v1/events?after=${after}&limit=2`).set(bearer(key)).expect(200);
      seen.push(...page.body.data.map((e: EventBody) => e.sequence));
      after = page.body.next_cursor;
      if (!page.body.has_more) break;
    }
    expect(seen).toEqual(sequences);
    const end = await t.api.get(`/v1/events?after=${after}`).set(bearer(key)).expect(200);
    expect(end.body).toMatchObject({ data: [], next_cursor: after, has_more: false });
  });

  it('filters by resource and still moves the cursor past what it left out', async () => {
    const { account, key } = await newAccount();
    const token = await t.services.apiTokens.create(account.id, 'watched', 3600);
    await t.services.apiTokens.create(account.id, 'other', 3600);
    const byId = await t.api.get(`/v1/events?resource_type=api_token&resource_id=${token.record.id}`).set(bearer(key)).expect(200);
    expect(byId.body.data.map((e: EventBody) => [e.type, e.resource_id])).toEqual([['api_token.created', token.record.id]]);
    const everything = await t.api.get('/v1/events').set(bearer(key)).expect(200);
    expect(byId.body.next_cursor).toBe(everything.body.next_cursor); // past the 'other' key's event too
    const accounts = await t.api.get('/v1/events?resource_type=account').set(bearer(key)).expect(200);
    expect(accounts.body.data.every((e: EventBody) => e.resource_type === 'account')).toBe(true);
  });

  it("never shows another account's events", async () => {
    const a = await newAccount();
    const b = await newAccount();
    await t.services.apiTokens.create(b.account.id, 'only b', 3600);
    const seenByA = await t.api.get('/v1/events').set(bearer(a.key)).expect(200);
    expect(seenByA.body.data.every((e: EventBody) => e.resource_id !== b.account.id && e.data.label !== 'only b')).toBe(true);
  });

  it('a long poll answers when an event commits, not when the wait ends', async () => {
    const { account, key } = await newAccount();
    const head = (await t.api.get('/v1/events').set(bearer(key)).expect(200)).body.next_cursor as number;
    const started = Date.now();
    const waiting = t.api.get(`/v1/events?after=${head}&wait_ms=20000`).set(bearer(key)).then((res) => res);
    await new Promise((resolve) => setTimeout(resolve, 300));
    await t.services.apiTokens.create(account.id, 'wakes the reader', 3600);
    const answer = await waiting;
    expect(answer.status).toBe(200);
    expect(answer.body.data.map((e: EventBody) => [e.sequence, e.data.label])).toEqual([[head + 1, 'wakes the reader']]);
    expect(Date.now() - started).toBeLessThan(15_000); // woken by the commit, far before the 20 s wait
  });

  it('a long poll with nothing new ends after wait_ms with an unchanged cursor', async () => {
    const { key } = await newAccount();
    const head = (await t.api.get('/v1/events').set(bearer(key)).expect(200)).body.next_cursor as number;
    const started = Date.now();
    const answer = await t.api.get(`/v1/events?after=${head}&wait_ms=600`).set(bearer(key)).expect(200);
    expect(Date.now() - started).toBeGreaterThanOrEqual(550);
    expect(answer.body).toMatchObject({ data: [], next_cursor: head, has_more: false });
  });

  it('a long poll filtered to one resource ignores other events while it waits', async () => {
    const { account, key } = await newAccount();
    const head = (await t.api.get('/v1/events').set(bearer(key)).expect(200)).body.next_cursor as number;
    const waiting = t.api.get(`/v1/events?after=${head}&wait_ms=20000&resource_type=device_key`).set(bearer(key)).then((res) => res);
    await t.services.apiTokens.create(account.id, 'not a device key', 3600);
    await new Promise((resolve) => setTimeout(resolve, 300));
    const { publicKey } = await import('node:crypto').then(({ generateKeyPairSync }) => generateKeyPairSync('ed25519'));
    const der = publicKey.export({ type: 'spki', format: 'der' }).subarray(-32);
    const blob = Buffer.concat([Buffer.from([0, 0, 0, 11]), Buffer.from('ssh-ed25519'), Buffer.from([0, 0, 0, 32]), der]);
    await t.api.post('/v1/device-keys').set(bearer(key)).send({ name: 'laptop', public_key: `ssh-ed25519 ${blob.toString('base64')}` }).expect(200);
    const answer = await waiting;
    expect(answer.body.data.map((e: EventBody) => e.type)).toEqual(['device_key.added']);
  });

  it('keeps events 30 days; an older cursor gets 410 N30, after=0 reads what is left', async () => {
    const { account, key } = await newAccount();
    const before = (await t.api.get('/v1/events').set(bearer(key)).expect(200)).body.next_cursor as number;
    // what this account did so far happened 31 days ago (events are stamped by the database's clock)
    await t.services.database.prisma.event.updateMany({ where: { accountId: account.id }, data: { createdAt: new Date(clock.now().getTime() - 31 * 86400_000) } });
    await t.services.apiTokens.create(account.id, 'recent', 3600);
    expect(await t.services.events.removeExpired()).toBeGreaterThanOrEqual(before);
    const stale = await t.api.get('/v1/events?after=1').set(bearer(key)).expect(410);
    expect(stale.body.error).toMatchObject({ code: 'N30', param: 'after', retryable: false });
    const fromStart = await t.api.get('/v1/events?after=0').set(bearer(key)).expect(200);
    expect(fromStart.body.data.map((e: EventBody) => [e.sequence, e.data.label])).toEqual([[before + 1, 'recent']]);
    await t.api.get(`/v1/events?after=${before}`).set(bearer(key)).expect(200); // the cursor a follower holds still works
  });

  describe('tail: the newest events, then follow live', () => {
    const sequencesOf = (body: { data: EventBody[] }) => body.data.map((e) => e.sequence);

    it('reads the newest N oldest first; next_cursor is the head, from which a long poll gets only later events', async () => {
      const { account, key } = await newAccount();
      for (let i = 0; i < 5; i++) await t.services.apiTokens.create(account.id, `key ${i}`, 3600);
      const all = (await t.api.get('/v1/events?limit=200').set(bearer(key)).expect(200)).body;
      const head = all.next_cursor as number;
      expect(head).toBe(all.data.at(-1).sequence);

      const tail = await t.api.get('/v1/events?tail=3').set(bearer(key)).expect(200);
      expect(sequencesOf(tail.body)).toEqual([head - 2, head - 1, head]);
      expect(tail.body.data.map((e: EventBody) => e.data.label)).toEqual(['key 2', 'key 3', 'key 4']);
      expect(tail.body).toMatchObject({ object: 'event_list', next_cursor: head, has_more: true }); // older events are kept

      const waiting = t.api.get(`/v1/events?after=${tail.body.next_cursor}&wait_ms=20000`).set(bearer(key)).then((res) => res);
      await new Promise((resolve) => setTimeout(resolve, 300));
      await t.services.apiTokens.create(account.id, 'live', 3600);
      const answer = await waiting;
      expect(answer.status).toBe(200);
      expect(answer.body.data.map((e: EventBody) => [e.sequence, e.data.label])).toEqual([[head + 1, 'live']]);
    });

    it('a tail larger than the stream reads all of it, with has_more false', async () => {
      const { account, key } = await newAccount();
      await t.services.apiTokens.create(account.id, 'one more', 3600);
      const all = (await t.api.get('/v1/events?limit=200').set(bearer(key)).expect(200)).body;
      const tail = await t.api.get('/v1/events?tail=200').set(bearer(key)).expect(200);
      expect(sequencesOf(tail.body)).toEqual(sequencesOf(all));
      expect(tail.body).toMatchObject({ next_cursor: all.next_cursor, has_more: false });
    });

    it('applies the filters; the cursor is still the head, past the events they left out', async () => {
      const { account, key } = await newAccount();
      const watched = await t.services.apiTokens.create(account.id, 'watched', 3600);
      await t.services.apiTokens.create(account.id, 'other', 3600);
      const all = (await t.api.get('/v1/events?limit=200').set(bearer(key)).expect(200)).body;
      const head = all.next_cursor as number;
      const accountEvents = all.data.filter((e: EventBody) => e.resource_type === 'account');
      expect(accountEvents.length).toBeGreaterThan(0);
      expect(accountEvents.at(-1).sequence).toBeLessThan(head); // the newest events are api_token ones

      const byType = await t.api.get('/v1/events?tail=1&resource_type=account').set(bearer(key)).expect(200);
      expect(sequencesOf(byType.body)).toEqual([accountEvents.at(-1).sequence]);
      expect(byType.body).toMatchObject({ next_cursor: head, has_more: accountEvents.length > 1 });

      const byId = await t.api.get(`/v1/events?tail=5&resource_type=api_token&resource_id=${watched.record.id}`).set(bearer(key)).expect(200);
      expect(byId.body.data.map((e: EventBody) => [e.type, e.resource_id, e.data.label])).toEqual([['api_token.created', watched.record.id, 'watched']]);
      expect(byId.body).toMatchObject({ next_cursor: head, has_more: false });

      const tokens = await t.api.get('/v1/events?tail=2&resource_type=api_token').set(bearer(key)).expect(200);
      expect(tokens.body.data.map((e: EventBody) => e.data.label)).toEqual(['watched', 'other']);
      expect(tokens.body).toMatchObject({ next_cursor: head, has_more: true }); // the test key's event is older
    });

    it('an account without events reads nothing, next_cursor 0, and follows from there', async () => {
      const { account, key } = await newAccount();
      // as if the account had never done anything: no events, the counter at 0
      const prisma = t.services.database.prisma;
      await prisma.event.deleteMany({ where: { accountId: account.id } });
      await prisma.account.update({ where: { id: account.id }, data: { eventSequence: 0 } });
      const tail = await t.api.get('/v1/events?tail=20').set(bearer(key)).expect(200);
      expect(tail.body).toMatchObject({ data: [], next_cursor: 0, has_more: false });
      await t.services.apiTokens.create(account.id, 'first', 3600);
      const next = await t.api.get(`/v1/events?after=${tail.body.next_cursor}&wait_ms=1000`).set(bearer(key)).expect(200);
      expect(next.body.data.map((e: EventBody) => [e.sequence, e.data.label])).toEqual([[1, 'first']]);
    });

    it("never shows another account's events", async () => {
      const a = await newAccount();
      const b = await newAccount();
      const headOfA = (await t.api.get('/v1/events?limit=200').set(bearer(a.key)).expect(200)).body.next_cursor as number;
      for (let i = 0; i < 3; i++) await t.services.apiTokens.create(b.account.id, `only b ${i}`, 3600);
      const seenByA = await t.api.get('/v1/events?tail=200').set(bearer(a.key)).expect(200);
      expect(seenByA.body.data.length).toBeGreaterThan(0);
      expect(seenByA.body.data.every((e: EventBody) => e.resource_id !== b.account.id && !String(e.data.label ?? '').startsWith('only b'))).toBe(true);
      expect(seenByA.body.next_cursor).toBe(headOfA); // b's events move b's head only
      const aFilteredToB = await t.api.get(`/v1/events?tail=200&resource_id=${b.account.id}`).set(bearer(a.key)).expect(200);
      expect(aFilteredToB.body).toMatchObject({ data: [], next_cursor: headOfA, has_more: false });
    });

    it('refuses tail with after or wait_ms, and out of range, with P01', async () => {
      const { key } = await newAccount();
      for (const query of ['tail=5&after=0', 'tail=5&after=2', 'tail=5&wait_ms=0', 'tail=5&wait_ms=1000']) {
        const res = await t.api.get(`/v1/events?${query}`).set(bearer(key)).expect(400);
        expect(res.body.error).toMatchObject({ code: 'P01', param: 'tail' });
      }
      for (const query of ['tail=0', 'tail=201', 'tail=abc', 'tail=1.5']) {
        const res = await t.api.get(`/v1/events?${query}`).set(bearer(key)).expect(400);
        expect(res.body.error).toMatchObject({ code: 'P01', param: 'tail' });
      }
    });
  });

  it('refuses out-of-range parameters with P01', async () => {
    const { key } = await newAccount();
    for (const query of ['limit=0', 'limit=201', 'wait_ms=25001', 'after=-1', 'wait_ms=abc']) {
      const res = await t.api.get(`/v1/events?${query}`).set(bearer(key)).expect(400);
      expect(res.body.error.code).toBe('P01');
    }
  });
});

describe('event stream across processes', () => {
  let fresh: FreshDatabase;
  const started: ServiceProcess[] = [];
  const ADMIN = { email: 'events-admin@example.com', password: 'a long admin password 42' };

  beforeAll(async () => {
    fresh = await freshDatabaseUrl();
  });
  afterAll(async () => {
    for (const service of started) await service.ensureStopped();
    await fresh.cleanup();
  });

  async function start(dataDir: string): Promise<{ service: ServiceProcess; url: string }> {
    const port = await freePort();
    const service = new ServiceProcess({
      KISTE_LISTEN: `127.0.0.1:${port}`, KISTE_DATA_DIR: dataDir, KISTE_ADMIN_EMAIL: ADMIN.email, KISTE_ADMIN_PASSWORD: ADMIN.password,
      KISTE_IMAGE_DIR: TEST_IMAGE_DIR, // the shared test image: no image build per start
      ...(fresh.url ? { KISTE_DATABASE_URL: fresh.url } : {}),
    });
    started.push(service);
    await service.listening();
    return { service, url: `http://127.0.0.1:${port}` };
  }

  async function signIn(url: string): Promise<{ cookie: string; csrf: string }> {
    const login = await request(url).post('/v1/auth/login').send(ADMIN).expect(checkContract).expect(200);
    const cookie = (login.headers['set-cookie'] as unknown as string[]).find((line) => line.startsWith('kiste_session='))!.split(';')[0]!;
    return { cookie, csrf: login.body.csrf };
  }

  async function mintKey(url: string, browser: { cookie: string; csrf: string }, label: string): Promise<string> {
    const res = await request(url).post('/v1/api-tokens').set('cookie', browser.cookie).set('x-csrf-token', browser.csrf)
      .send({ label, expires_in_seconds: 3600 }).expect(checkContract).expect(200);
    return res.body.token as string;
  }

  it('continues without gaps after a restart and wakes a reader in another process', async () => {
    const first = await start(fresh.dataDir);
    const browser = await signIn(first.url);
    const key = await mintKey(first.url, browser, 'before restart');
    const before = await request(first.url).get('/v1/events').set(bearer(key)).expect(checkContract).expect(200);
    first.service.killHard();
    await first.service.waitExit(10_000);

    const second = await start(fresh.dataDir);
    await mintKey(second.url, await signIn(second.url), 'after restart');
    const after = await request(second.url).get(`/v1/events?after=${before.body.next_cursor}`).set(bearer(key)).expect(checkContract).expect(200);
    expect(after.body.data[0].sequence).toBe(before.body.next_cursor + 1);
    const all = await request(second.url).get('/v1/events').set(bearer(key)).expect(checkContract).expect(200);
    expect(all.body.data.map((e: EventBody) => e.sequence)).toEqual(all.body.data.map((_: EventBody, i: number) => i + 1));

    if (!fresh.url) return; // SQLite is one process's database; two processes share PostgreSQL only
    const third = await start(`${fresh.dataDir}/third`);
    const head = all.body.next_cursor as number;
    const waiting = request(third.url).get(`/v1/events?after=${head}&wait_ms=20000`).set(bearer(key)).expect(checkContract).then((res) => res);
    await new Promise((resolve) => setTimeout(resolve, 500));
    const startedAt = Date.now();
    await mintKey(second.url, browser, 'seen by the other process');
    const answer = await waiting;
    expect(answer.status).toBe(200);
    expect(answer.body.data.map((e: EventBody) => e.type)).toContain('api_token.created');
    expect(Date.now() - startedAt).toBeLessThan(4_000); // LISTEN/NOTIFY, not the 5 s re-read
  });
});
