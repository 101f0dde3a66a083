// The build queue's order (property-based, fast-check): every job comes out once, each account's in
// the order they were queued, and accounts take turns, so a job waits for at most one job of each
// other account per job of its own account ahead of it — however jobs and removals interleave.
import fc from 'fast-check';
import { FairQueue } from '../../src/domain/fair-queue';

type Step = { kind: 'push'; account: number } | { kind: 'shift' } | { kind: 'remove'; modulo: number };

const steps = fc.array(
  fc.oneof(
    fc.record({ kind: fc.constant('push' as const), account: fc.integer({ min: 0, max: 4 }) }),
    fc.record({ kind: fc.constant('shift' as const) }),
    fc.record({ kind: fc.constant('remove' as const), modulo: fc.integer({ min: 2, max: 7 }) }),
  ),
  { maxLength: 200 },
);

test('every job once, per-account FIFO, accounts in turn', () => {
  fc.assert(
    fc.property(steps, (script: Step[]) => {
      type Job = { account: string; id: number };
      const queue = new FairQueue<Job>();
      let nextId = 0;
      const pushed: Job[] = [];
      const out: Job[] = [];
      const removed = new Set<number>();
      /** Per waiting job: its account's jobs waiting ahead of it when it was queued, and how many jobs of each other account went out since. */
      const waiting = new Map<number, { ahead: number; passedBy: Map<string, number> }>();
      const take = (job: Job | undefined) => {
        if (!job) return;
        out.push(job);
        const mine = waiting.get(job.id)!;
        // Fairness: while it waited, no other account got out more than once per own job ahead of it, plus once.
        for (const count of mine.passedBy.values()) expect(count).toBeLessThanOrEqual(mine.ahead + 1);
        waiting.delete(job.id);
        for (const [id, other] of waiting) {
          if (pushed[id]!.account !== job.account) other.passedBy.set(job.account, (other.passedBy.get(job.account) ?? 0) + 1);
        }
      };
      for (const step of script) {
        if (step.kind === 'push') {
          const job = { account: `a${step.account}`, id: nextId++ };
          const ahead = [...waiting.keys()].filter((id) => pushed[id]!.account === job.account).length;
          pushed.push(job);
          waiting.set(job.id, { ahead, passedBy: new Map() });
          queue.push(job.account, job);
        } else if (step.kind === 'shift') {
          take(queue.shift());
        } else {
          for (const job of queue.remove((j) => j.id % step.modulo === 0)) {
            removed.add(job.id);
            waiting.delete(job.id);
          }
        }
      }
      while (queue.size > 0) take(queue.shift());
      expect(queue.shift()).toBeUndefined();
      // Every job exactly once: out or removed.
      expect([...out.map((j) => j.id), ...removed].sort((a, b) => a - b)).toEqual(pushed.map((j) => j.id));
      // Per account, out in queue order.
      for (const account of new Set(pushed.map((p) => p.account))) {
        const ids = out.filter((o) => o.account === account).map((o) => o.id);
        expect(ids).toEqual([...ids].sort((a, b) => a - b));
      }
    }),
    { numRuns: 300 },
  );
});

test('all queued up front: strict rounds (every account\'s k-th job before any (k+1)-th)', () => {
  fc.assert(
    fc.property(fc.array(fc.integer({ min: 0, max: 5 }), { maxLength: 100 }), (accounts) => {
      const queue = new FairQueue<{ account: number; round: number }>();
      const rounds = new Map<number, number>();
      for (const account of accounts) {
        const round = rounds.get(account) ?? 0;
        rounds.set(account, round + 1);
        queue.push(String(account), { account, round });
      }
      const order: number[] = [];
      for (let job = queue.shift(); job; job = queue.shift()) order.push(job.round);
      expect(order).toHaveLength(accounts.length);
      expect(order).toEqual([...order].sort((a, b) => a - b));
    }),
  );
});
