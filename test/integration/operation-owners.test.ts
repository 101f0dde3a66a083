// Operations and the control-plane replica that runs them (issue 22): every claim names its replica,
// and the reconciler finishes an open operation only when its replica is gone — at once on SQLite
// (one control plane: another owner is an earlier run), on PostgreSQL once the owner's session (and
// its advisory lock) has ended. Two replicas that both find an owner gone finish its operation once.
// The host's answers are replaced (the real machines: test/machines/several-hosts.test.ts).
import { PostgresReplicaPresence } from '../../src/db/replica-presence';
import { createAccount, startTestService, type TestService } from '../support/harness';
import { insertInstance } from '../support/instance-rows';

describe('operations owned by replicas', () => {
  let t: TestService;
  let other: TestService | undefined;

  beforeAll(async () => {
    t = await startTestService();
    if (t.databaseUrl) other = await startTestService({ replicaOf: t });
  });
  afterEach(() => jest.restoreAllMocks());
  afterAll(async () => {
    await other?.close();
    await t.close();
  });

  /** A stop left open by `owner`, on a machine the host still runs (the reconciler finishes it: stopped). */
  async function openStop(name: string, owner: string) {
    const account = await createAccount(t);
    return insertInstance(t, account, name, 'stopping', { desiredState: 'stopped', operation: 'stop', operationStartedAt: new Date(), operationOwner: owner });
  }

  /** The machines the stand-in host has stopped (one host, whichever replica asks it). */
  const stoppedOnHost = new Set<string>();

  function hostStops(service: TestService): jest.SpyInstance {
    jest.spyOn(service.services.machineHost, 'adopt').mockImplementation(async (id) => !stoppedOnHost.has(id));
    jest.spyOn(service.services.machineHost, 'hasSession').mockResolvedValue(false);
    return jest.spyOn(service.services.machineHost, 'stop').mockImplementation(async (id) => {
      stoppedOnHost.add(id);
      return { sessionSaved: false };
    });
  }

  const rowOf = async (id: string) => (await t.services.database.prisma.instance.findUnique({ where: { id } }))!;

  it('claims name this replica, and ending the operation clears its owner', async () => {
    const account = await createAccount(t);
    const row = await insertInstance(t, account, 'claimed', 'running');
    const claimed = await t.services.instances.operations.claim(row, 'stop', { status: 'stopping' });
    expect(claimed.operationOwner).toBe(t.services.instances.operations.owner);
    await t.services.instances.operations.run(claimed, async () => ({ update: { status: 'stopped' }, event: null }));
    expect({ operation: (await rowOf(row.id)).operation, owner: (await rowOf(row.id)).operationOwner }).toEqual({ operation: null, owner: null });
  });

  it('writes nothing at the end of an operation another replica took over meanwhile, its event included', async () => {
    const account = await createAccount(t);
    const row = await insertInstance(t, account, 'taken-over', 'running');
    const claimed = await t.services.instances.operations.claim(row, 'stop', { status: 'stopping' });
    const eventsBefore = await t.services.database.prisma.event.count({ where: { accountId: account.id } });
    await t.services.instances.operations.run(claimed, async () => {
      // While this replica worked, another thought it gone and took the operation over.
      await t.services.database.prisma.instance.update({ where: { id: row.id }, data: { operationOwner: 'the-other-replica' } });
      return { update: { status: 'stopped', desiredState: 'stopped' }, event: { type: 'instance.stopped', data: { session_saved: false } } };
    });
    const after = await rowOf(row.id);
    expect({ status: after.status, operation: after.operation, owner: after.operationOwner }).toEqual({ status: 'stopping', operation: 'stop', owner: 'the-other-replica' });
    expect(await t.services.database.prisma.event.count({ where: { accountId: account.id } })).toBe(eventsBefore);
  });

  it('finishes an operation whose replica is gone', async () => {
    const row = await openStop('orphaned', 'a-replica-long-gone');
    const stop = hostStops(t);
    await t.services.instances.reconcile({ cleanUp: false });
    expect(stop).toHaveBeenCalledWith(row.id, { saveSession: false });
    expect({ status: (await rowOf(row.id)).status, operation: (await rowOf(row.id)).operation }).toEqual({ status: 'stopped', operation: null });
  });

  it('leaves an operation to its replica while that one runs (PostgreSQL: replicas), and finishes it once the replica is gone', async () => {
    if (!t.databaseUrl) return expect(t.services.database.provider).toBe('sqlite'); // one control plane: no other replica runs
    const running = new PostgresReplicaPresence(t.databaseUrl);
    await running.start();
    const row = await openStop('someone-elses', running.me);
    const stop = hostStops(t);
    await t.services.instances.reconcile({ cleanUp: false });
    expect(stop).not.toHaveBeenCalled();
    expect((await rowOf(row.id)).operation).toBe('stop');
    await running.close(); // its session ends, and its lock with it
    await t.services.instances.reconcile({ cleanUp: false });
    expect(stop).toHaveBeenCalledTimes(1);
    expect((await rowOf(row.id)).status).toBe('stopped');
  });

  it('two replicas that find the owner gone at once finish its operation once', async () => {
    if (!other) return expect(t.services.database.provider).toBe('sqlite');
    const row = await openStop('contested', 'gone-for-both');
    const stops = [hostStops(t), hostStops(other)];
    await Promise.all([t.services.instances.reconcile({ cleanUp: false }), other.services.instances.reconcile({ cleanUp: false })]);
    // Both passes may still be finishing what they took: wait for the row's end.
    for (let i = 0; i < 100 && (await rowOf(row.id)).operation !== null; i++) await new Promise((resolve) => setTimeout(resolve, 50));
    expect(stops.map((stop) => stop.mock.calls.filter(([id]) => id === row.id).length).reduce((a, b) => a + b)).toBe(1);
    expect((await rowOf(row.id)).status).toBe('stopped');
  });
});
