// Many followers of one account's stream: one commit wakes them all and they share the database
// read (EventStream.readShared); a follower that asks again at the head right after its answer is
// told "nothing new" without a read while no commit was announced (the head cache). None of this
// may lose or repeat an event.
import { EventStore } from '../../src/store/events';
import { apiKeyFor, bearer, createAccount, startTestService, type TestService } from '../support/harness';

jest.setTimeout(60_000);

describe('many followers of one stream', () => {
  let t: TestService;
  beforeAll(async () => {
    t = await startTestService();
  });
  afterAll(() => t.close());

  it('50 parked long polls all get the commit, from a handful of reads; re-polls at the head read nothing', async () => {
    const account = await createAccount(t);
    const key = await apiKeyFor(t, account);
    const head = (await t.api.get('/v1/events').set(bearer(key)).expect(200)).body.next_cursor as number;
    const lists = jest.spyOn(EventStore.prototype, 'list');
    const positions = jest.spyOn(EventStore.prototype, 'position');
    try {
      const waiting = Array.from({ length: 50 }, () => t.api.get(`/v1/events?after=${head}&wait_ms=20000`).set(bearer(key)).then((res) => res));
      // All parked: each watches the account's commits before its first read (by the count, not a
      // fixed pause: under load 50 requests took longer than one), and that read has ended.
      for (const until = Date.now() + 20_000; t.services.database.commits.listenerCount(account.id) < 50 && Date.now() < until;) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      expect(t.services.database.commits.listenerCount(account.id)).toBeGreaterThanOrEqual(50);
      await new Promise((resolve) => setTimeout(resolve, 300));
      lists.mockClear();
      positions.mockClear();
      await t.services.apiTokens.create(account.id, 'seen by all', 3600);
      const answers = await Promise.all(waiting);
      for (const answer of answers) {
        expect(answer.status).toBe(200);
        expect(answer.body.data.map((e: { sequence: number; data: { label?: string } }) => [e.sequence, e.data.label])).toEqual([[head + 1, 'seen by all']]);
        expect(answer.body.next_cursor).toBe(head + 1);
      }
      expect(lists.mock.calls.length).toBeLessThanOrEqual(10);

      // right after, a re-poll at the new head answers "nothing new" from what the shared read saw
      lists.mockClear();
      positions.mockClear();
      const again = await t.api.get(`/v1/events?after=${head + 1}`).set(bearer(key)).expect(200);
      expect(again.body).toMatchObject({ data: [], next_cursor: head + 1, has_more: false });
      expect(lists.mock.calls.length).toBe(0);
      expect(positions.mock.calls.length).toBeLessThanOrEqual(1); // 0 while the head cache (1 s) holds

      // a commit moves on: the next read goes to the database and finds it
      await t.services.apiTokens.create(account.id, 'next', 3600);
      const next = await t.api.get(`/v1/events?after=${head + 1}`).set(bearer(key)).expect(200);
      expect(next.body.data.map((e: { sequence: number }) => e.sequence)).toEqual([head + 2]);
      expect(positions.mock.calls.length).toBeGreaterThan(0);
    } finally {
      lists.mockRestore();
      positions.mockRestore();
    }
  });
});
