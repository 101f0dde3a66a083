// Control-plane replicas behind one address: a credential ended on one replica is refused by every
// other within moments, although each had just accepted it and trusts what it has seen for a while
// (the cache's time to live is a minute here, so that only the announcement through PostgreSQL can
// explain a refusal). On SQLite one process serves, and the ending replica refuses at once.
import type { Account } from '../../src/store/accounts';
import { apiKeyFor, bearer, cliTokenFor, createAccount, startTestService, type TestService } from '../support/harness';
import { waitUntil } from '../support/service-recovery';

const TRUSTED_FOR_MS = 60_000;
/** Far below TRUSTED_FOR_MS: what the announcement takes from one replica to another. */
const ANNOUNCED_WITHIN_MS = 5_000;

describe('credentials ended on one replica', () => {
  let first: TestService;
  let second: TestService | undefined;
  const replicas = () => [first, ...(second ? [second] : [])];

  beforeAll(async () => {
    first = await startTestService({ credentialCacheTtlMs: TRUSTED_FOR_MS });
    if (first.databaseUrl) second = await startTestService({ replicaOf: first, credentialCacheTtlMs: TRUSTED_FOR_MS });
  });
  afterAll(async () => {
    await second?.close();
    await first?.close();
  });

  /** Every replica answers `status` to GET /v1/me with `token` (the first at once, the others within moments). */
  async function everyReplicaAnswers(token: string, status: number): Promise<void> {
    expect((await first.api.get('/v1/me').set(bearer(token))).status).toBe(status);
    if (!second) return;
    const other = second;
    await waitUntil(`the other replica to answer ${status}`, async () => (await other.api.get('/v1/me').set(bearer(token))).status === status, ANNOUNCED_WITHIN_MS, 20);
  }

  async function acceptedEverywhere(account: Account): Promise<{ key: string; cli: string }> {
    const key = await apiKeyFor(first, account);
    const cli = await cliTokenFor(first, account);
    for (const replica of replicas()) {
      await replica.api.get('/v1/me').set(bearer(key)).expect(200); // cached there from now on
      await replica.api.get('/v1/me').set(bearer(cli)).expect(200);
    }
    return { key, cli };
  }

  it('a revoked API key is refused by every replica', async () => {
    const account = await createAccount(first);
    const { key, cli } = await acceptedEverywhere(account);
    const [listed] = (await first.api.get('/v1/api-tokens').set(bearer(cli)).expect(200)).body as { id: string }[];
    await first.api.delete(`/v1/api-tokens/${listed.id}`).set(bearer(cli)).expect(200);
    await everyReplicaAnswers(key, 401);
    await everyReplicaAnswers(cli, 200); // the account's other credentials stay good
  });

  it('signing out everywhere on one replica ends the CLI sign-in on every replica', async () => {
    const account = await createAccount(first);
    const { key, cli } = await acceptedEverywhere(account);
    const ender = second ?? first; // ended on the other replica where there is one
    await ender.api.post('/v1/sessions/revoke-all').set(bearer(key)).expect(200);
    expect((await ender.api.get('/v1/me').set(bearer(cli))).status).toBe(401);
    await everyReplicaAnswers(cli, 401);
    await everyReplicaAnswers(key, 200); // API keys are not sign-ins
  });
});

describe('request budgets across replicas', () => {
  const BUDGET = 10;
  // Both replicas stand in the middle of one minute: the window cannot turn during the test.
  const at = new Date(Math.floor(Date.now() / 60_000) * 60_000 + 30_000);
  const clock = { now: () => new Date(at) };
  let first: TestService;
  let second: TestService | undefined;

  beforeAll(async () => {
    const env = { KISTE_REQUESTS_PER_MINUTE: String(BUDGET) };
    first = await startTestService({ env, clock });
    if (first.databaseUrl) second = await startTestService({ replicaOf: first, env, clock });
  });
  afterAll(async () => {
    await second?.close();
    await first?.close();
  });

  it("an account's budget is one across every replica, not one per replica", async () => {
    const account = await createAccount(first);
    const key = await apiKeyFor(first, account);
    const replicas = second ? [first, second] : [first];
    // What their background job does every 250 ms: twice round, so each has heard what the others sent.
    const syncAll = async () => {
      for (let round = 0; round < 2; round++) for (const replica of replicas) await replica.services.budgets.sync();
    };
    // Spent across the replicas in turns, synced in between as they are a few times a second.
    for (let i = 0; i < BUDGET; i++) {
      await replicas[i % replicas.length]!.api.get('/v1/me').set(bearer(key)).expect(200);
      await syncAll();
    }
    for (const replica of replicas) {
      const refused = await replica.api.get('/v1/me').set(bearer(key));
      expect(refused.status).toBe(429);
      expect(refused.body.error.code).toBe('L01');
    }
    // another account's budget is its own
    await replicas.at(-1)!.api.get('/v1/me').set(bearer(await apiKeyFor(first, await createAccount(first)))).expect(200);
  });
});
