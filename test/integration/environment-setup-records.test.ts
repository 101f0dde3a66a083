// What the service records about an environment's setup when a machine never starts: the setup
// fails at once (no setup_status left 'pending' until the next restart), the instance shows why,
// the setup endpoint answers, and instance.setup_completed marks the end. The machine part is not
// needed: a create whose machine failed hands its failed row to EnvironmentSetup.notStarted.
import { EnvironmentSetup } from '../../src/domain/environment-setup';
import type { GuestAgent } from '../../src/compute/guest-agent';
import { systemClock } from '../../src/domain/clock';
import { InstanceSetupStore } from '../../src/store/instance-setups';
import { InstanceStore } from '../../src/store/instances';
import { PrismaTransactions } from '../../src/store/transactions';
import type { Account } from '../../src/store/accounts';
import { apiKeyFor, bearer, createAccount, startTestService, TestService } from '../support/harness';
import { insertInstance } from '../support/instance-rows';

describe('environment setup of a machine that did not start', () => {
  let t: TestService;
  let account: Account;
  let key: string;

  beforeAll(async () => {
    t = await startTestService();
    account = await createAccount(t);
    key = await apiKeyFor(t, account);
  });
  afterAll(() => t.close());

  it('fails the setup at once with the reason, answers the setup record and sends the event', async () => {
    await t.api.post('/v1/environments').set(bearer(key)).send({ name: 'tools', setup_script: 'echo never' }).expect(200);
    const environment = await t.services.environments.forInstance(account.id, 'tools');
    const row = await insertInstance(t, account, 'broken', 'failed', { environmentVersionId: environment.versionId, setupStatus: 'pending', errorMessage: 'QEMU exited' });
    const db = t.services.database.prisma;
    const agentAsked: string[] = [];
    const setup = new EnvironmentSetup(new PrismaTransactions(db), { instances: new InstanceStore(db), setups: new InstanceSetupStore(db) }, (id) => {
      agentAsked.push(id);
      return {} as GuestAgent;
    }, systemClock, { warn() {} });

    await setup.notStarted(row, environment);

    expect(agentAsked).toEqual([]); // nothing is sent to a machine that is not there
    const shown = (await t.api.get('/v1/instances/broken').set(bearer(key)).expect(200)).body;
    expect(shown).toMatchObject({ status: 'failed', setup_status: 'failed', setup_error: 'the machine did not start', environment_version_id: environment.versionId });
    const record = (await t.api.get('/v1/instances/broken/setup').set(bearer(key)).expect(200)).body;
    expect(record).toMatchObject({ object: 'instance_setup', status: 'failed', error: 'the machine did not start', environment_name: 'tools', environment_version: 1, steps: [], output: '' });
    const events = await db.event.findMany({ where: { accountId: account.id, type: 'instance.setup_completed' } });
    expect(events.map((e) => e.data)).toEqual([{ name: 'broken', status: 'failed', error: 'the machine did not start', environment_version_id: environment.versionId }]);
  });
});
