// The job queue on PostgreSQL (pg-boss), worked by two control-plane replicas: a job runs in one of
// them, once; of one key at most one waits (asking again adds nothing); a send wakes the replicas by
// NOTIFY (here they would not look by themselves for ten minutes); a job that fails is tried again.
import { PgBossQueue } from '../../src/db/pg-boss-queue';
import { freshDatabaseUrl, type FreshDatabase } from '../support/database';
import { waitUntil } from '../support/service-recovery';

jest.setTimeout(60_000);

const quiet = { warn: () => undefined };
const settle = (ms = 300) => new Promise((resolve) => setTimeout(resolve, ms));

describe('the job queue across replicas', () => {
  let fresh: FreshDatabase;
  const queues: PgBossQueue[] = [];

  beforeAll(async () => {
    fresh = await freshDatabaseUrl();
  });
  afterAll(async () => {
    for (const queue of queues) await queue.stop();
    await fresh.cleanup();
  });

  function replica(lookMs: number): PgBossQueue {
    const queue = new PgBossQueue(fresh.url!, quiet, lookMs);
    queues.push(queue);
    return queue;
  }

  it('runs each job once, in one replica; a key waits at most once; a send wakes the replicas by NOTIFY', async () => {
    const runs: { replica: number; data: unknown }[] = [];
    const sender = replica(600_000); // the admin: sends, works nothing
    await sender.start();
    for (let i = 0; i < 3; i++) await sender.send('reconcile-worker', { worker_id: 'w-1' }, { key: 'w-1' }); // one waits; the others add nothing
    const [a, b] = [replica(600_000), replica(600_000)];
    for (const [index, queue] of [a, b].entries()) {
      queue.work('reconcile-worker', async (data) => void runs.push({ replica: index, data }));
      await queue.start(); // looks once at its start, then only when a NOTIFY wakes it (or in ten minutes)
    }
    await waitUntil('the waiting job to run', () => runs.length === 1 || null, 20_000, 50);
    await settle(1000);
    expect(runs).toHaveLength(1);
    await sender.send('reconcile-worker', { worker_id: 'w-2' }, { key: 'w-2' });
    await waitUntil('the new job to run (only a NOTIFY can wake the replicas so soon)', () => runs.length === 2 || null, 20_000, 50);
    await settle(1000);
    expect(runs.map((run) => run.data)).toEqual([{ worker_id: 'w-1' }, { worker_id: 'w-2' }]);
    for (const queue of [a, b, sender]) await queue.stop();
  });

  it('tries a failed job again later', async () => {
    const tries: number[] = [];
    const c = replica(500);
    c.work('reconcile-worker', async () => {
      tries.push(Date.now());
      if (tries.length === 1) throw new Error('the worker is away');
    });
    await c.start();
    await c.send('reconcile-worker', { worker_id: 'w-2' }, { key: 'w-2' });
    await waitUntil('the job to be tried again', () => tries.length === 2 || null, 40_000, 100);
    await settle(1500);
    expect(tries).toHaveLength(2);
  });
});
