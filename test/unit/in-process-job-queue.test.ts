// The job queue of a one-process service (SQLite): jobs of one key take turns (one runs, one waits,
// asking again meanwhile adds nothing), other jobs run at once, a failure is tried again later, and
// stop() waits for what runs.
import { JOB_RETRIES } from '../../src/domain/job-queue';
import { InProcessJobQueue } from '../../src/jobs/in-process-job-queue';

const quiet = { warn: () => undefined };

function gate() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { open, opened };
}

const settle = () => new Promise((resolve) => setTimeout(resolve, 20));

test('jobs of one key take turns: one runs, one waits, and more asks meanwhile add nothing', async () => {
  const queue = new InProcessJobQueue(quiet);
  const runs: string[] = [];
  const gates = [gate(), gate()];
  queue.work('reconcile-worker', async (data) => {
    const run = runs.push(String((data as { worker_id: string }).worker_id)) - 1;
    await gates[run]?.opened;
  });
  await queue.start();
  for (const id of ['w1', 'w1', 'w1']) await queue.send('reconcile-worker', { worker_id: id }, { key: id });
  await queue.send('reconcile-worker', { worker_id: 'w2' }, { key: 'w2' }); // another key runs beside it
  await settle();
  expect(runs).toEqual(['w1', 'w2']);
  gates[0]!.open();
  await settle();
  expect(runs).toEqual(['w1', 'w2', 'w1']); // the one that waited, once
  gates[1]!.open();
  await queue.stop();
  expect(runs).toHaveLength(3);
});

test('a job that fails is tried again after a doubling delay, at most JOB_RETRIES times', async () => {
  const queue = new InProcessJobQueue(quiet, 5);
  let tries = 0;
  queue.work('reconcile-worker', async () => {
    tries++;
    throw new Error('the worker is away');
  });
  await queue.start();
  await queue.send('reconcile-worker', { worker_id: 'w1' }, { key: 'w1' });
  await new Promise((resolve) => setTimeout(resolve, 5 * 2 ** (JOB_RETRIES + 1)));
  expect(tries).toBe(JOB_RETRIES + 1);
  await queue.stop();
});

test('jobs sent before start run once it starts; after stop none run', async () => {
  const queue = new InProcessJobQueue(quiet);
  const runs: unknown[] = [];
  queue.work('reconcile-worker', async (data) => void runs.push(data));
  await queue.send('reconcile-worker', { worker_id: null });
  expect(runs).toEqual([]);
  await queue.start();
  await settle();
  expect(runs).toEqual([{ worker_id: null }]);
  await queue.stop();
  await queue.send('reconcile-worker', { worker_id: null });
  await settle();
  expect(runs).toHaveLength(1);
});
