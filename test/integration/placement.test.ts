// Placement on registered workers (issue 22): a new machine goes to a worker with a live lease, in
// the active state, with room for its shape against what the worker offers, least loaded first; when
// none has room the answer is L13. Twenty creates at once from two control-plane replicas (two
// connections to one database, each placing in its own transaction as the create does) never give a
// worker more than it offers. A QEMU-less stand-in is enough here: placement is a database decision
// (the real machines on a placed worker: test/machines/several-hosts.test.ts).
import { randomUUID } from 'node:crypto';
import { openDatabase, type Database } from '../../src/db/database';
import { WorkerPlacement } from '../../src/domain/placement';
import { KisteError } from '../../src/errors';
import { PrismaTransactions } from '../../src/store/transactions';
import { WorkerStore } from '../../src/store/workers';
import { openTestDatabase } from '../support/database';
import { TEST_SSH_KEY } from '../support/instance-rows';

const SHAPE = { vcpu: 1, memoryMib: 512, diskMib: 1024 };
const LIVE = () => new Date(Date.now() + 60_000);

describe('placement on workers', () => {
  let first: Awaited<ReturnType<typeof openTestDatabase>>;
  let second: Database;
  let accountId: string;

  beforeAll(async () => {
    first = await openTestDatabase();
    // A second replica: its own connection (pool) to the same database. SQLite has one control plane
    // (one writer): there the twenty creates come through one connection, at once all the same.
    second = first.provider === 'postgresql' ? await openDatabase({ url: first.url, dataDir: first.dataDir }) : first;
    accountId = randomUUID();
    await first.prisma.account.create({ data: { id: accountId, email: `${accountId}@example.com`, passwordHash: 'x' } });
  });
  afterAll(async () => {
    if (second !== first) await second?.close();
    await first?.close();
  });
  beforeEach(async () => {
    await first.prisma.instance.deleteMany({});
    await first.prisma.worker.deleteMany({});
  });

  async function worker(name: string, offer: { vcpu: number; memoryMib: number; diskMib: number }, fields: Record<string, unknown> = {}): Promise<string> {
    const id = randomUUID();
    await first.prisma.worker.create({ data: { id, name, address: `https://${name}.test:7443`, sealedSecret: 'x', leaseUntil: LIVE(), placeableUntil: LIVE(), ...offer, ...fields } });
    return id;
  }

  /** What Instances.insert does: place, then write the row, in one transaction. */
  async function create(database: Database, name: string): Promise<string> {
    const placement = new WorkerPlacement(new WorkerStore(database.prisma, database.provider), () => new Date());
    return new PrismaTransactions(database.prisma).run(async (tx) => {
      const workerId = await placement.place(tx, SHAPE, null);
      await (tx as unknown as Database['prisma']).instance.create({
        data: {
          id: randomUUID(), accountId, name, image: 'universal', imageProfile: 'minimal', artifactKey: 'test', status: 'starting', desiredState: 'running',
          ...SHAPE, sshPublicKey: TEST_SSH_KEY, guestHostname: name, workerId,
        },
      });
      return workerId;
    });
  }

  it('takes the least loaded worker with room, skips draining, silent and not yet adopted ones, and answers L13 when none has room', async () => {
    const big = await worker('big', { vcpu: 8, memoryMib: 4096, diskMib: 100_000 });
    const small = await worker('small', { vcpu: 8, memoryMib: 1024, diskMib: 100_000 });
    await worker('draining', { vcpu: 64, memoryMib: 65_536, diskMib: 1_000_000 }, { state: 'draining' });
    await worker('silent', { vcpu: 64, memoryMib: 65_536, diskMib: 1_000_000 }, { leaseUntil: new Date(Date.now() - 1000) });
    // Answers, but its run is not adopted yet: it would refuse the create.
    await worker('adopting', { vcpu: 64, memoryMib: 65_536, diskMib: 1_000_000 }, { placeableUntil: null });
    const placed: string[] = [];
    for (let i = 0; i < 10; i++) {
      try {
        placed.push(await create(first, `m${i}`));
      } catch (error) {
        expect(error).toBeInstanceOf(KisteError);
        expect((error as KisteError).code).toBe('L13');
        placed.push('L13');
      }
    }
    // 4096 + 1024 MiB of room for 512 MiB machines: ten fit, spread by memory left (big first).
    expect(placed.filter((id) => id === big)).toHaveLength(8);
    expect(placed.filter((id) => id === small)).toHaveLength(2);
    expect(placed.slice(0, 4)).toEqual([big, big, big, big]); // big has more left until it is down to small's 1024
    await expect(create(first, 'one-too-many')).rejects.toMatchObject({ code: 'L13' });
    expect(await first.prisma.instance.count({ where: { name: 'one-too-many' } })).toBe(0);
  });

  it('counts a stopped machine\'s disk but not its memory', async () => {
    const only = await worker('only', { vcpu: 4, memoryMib: 512, diskMib: 2048 });
    await create(first, 'a');
    await expect(create(first, 'b')).rejects.toMatchObject({ code: 'L13' });
    await first.prisma.instance.updateMany({ where: { name: 'a' }, data: { desiredState: 'stopped', status: 'stopped' } });
    expect(await create(first, 'b')).toBe(only); // the memory is free again; 2 × 1024 MiB of disk fit
    await first.prisma.instance.updateMany({ where: { name: 'b' }, data: { desiredState: 'stopped', status: 'stopped' } });
    await expect(create(first, 'c')).rejects.toMatchObject({ code: 'L13' }); // the disk is not
  });

  it('lets starts claimed at the same time through in the order of their claims: of two that fit only one at a time, the first', async () => {
    const only = await worker('only', { vcpu: 8, memoryMib: 512, diskMib: 100_000 });
    await create(first, 'p');
    await create(first, 'q').catch(() => undefined); // no room: refused
    await first.prisma.instance.updateMany({ where: { name: 'p' }, data: { desiredState: 'stopped', status: 'stopped' } });
    const second = (await first.prisma.instance.create({
      data: { id: randomUUID(), accountId, name: 'q', image: 'universal', imageProfile: 'minimal', artifactKey: 'test', status: 'stopped', desiredState: 'stopped', ...SHAPE, sshPublicKey: TEST_SSH_KEY, guestHostname: 'q', workerId: only },
    }));
    const rows = await first.prisma.instance.findMany({ where: { name: { in: ['p', 'q'] } } });
    const placement = new WorkerPlacement(new WorkerStore(first.prisma, first.provider), () => new Date());
    for (const row of rows) await expect(placement.checkStart(row)).resolves.toBeUndefined(); // each alone fits
    // Both claimed at once, q a moment before p (each counts as running from its claim): together
    // they do not fit, so q goes through and p is refused, whichever is confirmed first.
    const claimedAt = new Date();
    await first.prisma.instance.update({ where: { id: second.id }, data: { desiredState: 'running', status: 'starting', operation: 'start', operationStartedAt: claimedAt } });
    await first.prisma.instance.updateMany({ where: { name: 'p' }, data: { desiredState: 'running', status: 'starting', operation: 'resume', operationStartedAt: new Date(claimedAt.getTime() + 1) } });
    for (const order of [rows, [...rows].reverse()]) {
      const confirmed = await Promise.allSettled(order.map((row) => placement.confirmStart(row)));
      const outcome = Object.fromEntries(order.map((row, index) => [row.name, confirmed[index]!.status === 'fulfilled' ? 'through' : (confirmed[index] as PromiseRejectedResult).reason.code]));
      expect(outcome).toEqual({ p: 'L13', q: 'through' });
    }
    // Claimed in the same millisecond: the order of their ids decides, and still only one goes through.
    await first.prisma.instance.updateMany({ where: { name: { in: ['p', 'q'] } }, data: { operationStartedAt: claimedAt } });
    const tied = await Promise.allSettled(rows.map((row) => placement.confirmStart(row)));
    expect(tied.filter((outcome) => outcome.status === 'fulfilled')).toHaveLength(1);
    expect(tied.filter((outcome) => outcome.status === 'rejected' && (outcome.reason as KisteError).code === 'L13')).toHaveLength(1);
    await first.prisma.instance.update({ where: { id: second.id }, data: { desiredState: 'stopped', status: 'stopped', operation: null, operationStartedAt: null } }); // its claim given back
    await expect(placement.confirmStart(rows.find((row) => row.name === 'p')!)).resolves.toBeUndefined();
  });

  it('never places past the operator\'s ceiling, whatever the worker says it offers', async () => {
    const boastful = await worker('boastful', { vcpu: 100_000, memoryMib: 2 ** 31 - 1, diskMib: 2 ** 31 - 1 }, { maxMemoryMib: 1024 });
    const honest = await worker('honest', { vcpu: 8, memoryMib: 1024, diskMib: 100_000 });
    const placed = [await create(first, 'x'), await create(first, 'y'), await create(first, 'z'), await create(first, 'w')];
    expect(placed.filter((id) => id === boastful)).toHaveLength(2);
    expect(placed.filter((id) => id === honest)).toHaveLength(2);
    await expect(create(first, 'v')).rejects.toMatchObject({ code: 'L13' });
  });

  it('never oversubscribes a worker when two replicas place twenty creates at once', async () => {
    const a = await worker('a', { vcpu: 100, memoryMib: 512 * 3, diskMib: 1_000_000 });
    const b = await worker('b', { vcpu: 100, memoryMib: 512 * 4, diskMib: 1_000_000 });
    const outcomes = await Promise.allSettled(Array.from({ length: 20 }, (_, i) => create(i % 2 === 0 ? first : second, `c${i}`)));
    const placed = outcomes.filter((o): o is PromiseFulfilledResult<string> => o.status === 'fulfilled').map((o) => o.value);
    const refused = outcomes.filter((o): o is PromiseRejectedResult => o.status === 'rejected');
    expect(placed.filter((id) => id === a)).toHaveLength(3);
    expect(placed.filter((id) => id === b)).toHaveLength(4);
    expect(refused).toHaveLength(13);
    for (const outcome of refused) expect(outcome.reason).toMatchObject({ code: 'L13' });
    const rows = await first.prisma.instance.groupBy({ by: ['workerId'], _sum: { memoryMib: true } });
    for (const row of rows) expect(row._sum.memoryMib).toBeLessThanOrEqual(row.workerId === a ? 512 * 3 : 512 * 4);
  });
});
