// Fencing on the worker's side (src/worker/worker-fencing.ts) and the control plane's rules for
// adopting (src/compute/worker-adoption.ts): epochs only go up; a command acts only under the
// current one; a removal of strays keeps what commands work on or changed lately, and everything
// once a newer adoption has begun; a control plane adopts a run that is new, of another epoch, or
// whose adoption failed or stalled.
import { ADDRESSED_KEEP_MS, WorkerFencing } from '../../src/worker/worker-fencing';
import { adoptionNeed, nextEpoch } from '../../src/compute/worker-adoption';
import { MAX_EPOCH } from '../../src/protocol/worker-signature';

test('epochs only go up, and a command acts only under the current one (never before adoption)', () => {
  const fencing = new WorkerFencing();
  expect(fencing.admits(0)).toBe(false);
  expect(fencing.state.state).toBe('unadopted');
  expect(fencing.fence(0)).toBe(false);
  expect(fencing.fence(2)).toBe(true);
  expect(fencing.state.state).toBe('pending');
  expect([fencing.fence(2), fencing.fence(1), fencing.fence(1.5), fencing.fence(Number.NaN)]).toEqual([false, false, false, false]);
  expect(fencing.epoch).toBe(2);
  expect([fencing.admits(1), fencing.admits(2), fencing.admits(3)]).toEqual([false, true, false]);
});

test('a removal keeps what a command works on or changed lately, and everything while a newer adoption has begun', () => {
  let now = 1_000_000;
  const fencing = new WorkerFencing(() => now);
  fencing.fence(1);
  fencing.address('changed');
  const ended = fencing.begin('working');
  expect(['changed', 'working', 'other'].map((id) => fencing.keeps(id, 1))).toEqual([true, true, false]);
  // Kept only for the command working on it: the removal is partial (asked again); not so for one changed lately.
  expect([fencing.keptForWorkOnly('working', 1), fencing.keptForWorkOnly('changed', 1), fencing.keptForWorkOnly('working', 0)]).toEqual([true, false, false]);
  ended();
  ended(); // twice is once
  expect(fencing.keeps('working', 1)).toBe(false);
  now += ADDRESSED_KEEP_MS;
  expect(fencing.keeps('changed', 1)).toBe(false); // long ago: its record would be in any list read since
  fencing.address('destroyed');
  fencing.forget('destroyed');
  expect(fencing.keeps('destroyed', 1)).toBe(false);
  fencing.address('changed');
  fencing.removal(1, 'removing');
  expect(fencing.state.state).toBe('removing');
  fencing.fence(2); // a newer adoption: the old removal keeps everything from now on, and what epoch 1 changed counts no more
  expect(fencing.keeps('other', 1)).toBe(true);
  expect(fencing.keeps('changed', 2)).toBe(false);
  fencing.removal(1, 'done'); // the old removal's end does not speak for the new adoption
  expect(fencing.state.state).toBe('pending');
  fencing.removal(2, 'failed');
  expect(fencing.state.state).toBe('failed');
});

test('a control plane adopts a run that is new or of another epoch, removes strays again when that failed or stalled, and epochs run out at the column\'s bound', () => {
  const hello = (epoch: number, state: 'unadopted' | 'pending' | 'removing' | 'done' | 'partial' | 'failed', seconds = 0) => ({ epoch, adoption: { state, seconds } });
  expect(adoptionNeed(hello(0, 'unadopted'), 0)).toBe('adopt');
  expect(adoptionNeed(hello(3, 'done'), 3)).toBeNull();
  expect(adoptionNeed(hello(3, 'done'), 4)).toBe('adopt'); // revived from an older state (or declared lost)
  expect(adoptionNeed(hello(3, 'removing', 600), 3)).toBeNull(); // a long removal runs on
  expect(adoptionNeed(hello(3, 'removing', 3600), 3)).toBe('remove-strays'); // stuck
  expect(adoptionNeed(hello(3, 'pending', 5), 3)).toBeNull(); // its adopter is about to remove strays
  expect(adoptionNeed(hello(3, 'pending', 61), 3)).toBe('remove-strays'); // its adopter went away between the two steps
  expect(adoptionNeed(hello(3, 'failed'), 3)).toBe('remove-strays');
  expect(adoptionNeed(hello(3, 'partial'), 3)).toBe('remove-strays'); // it kept a stray a command still worked on
  expect(nextEpoch(0, 4)).toBe(5);
  expect(nextEpoch(9, 4)).toBe(10);
  expect(() => nextEpoch(MAX_EPOCH, 1)).toThrow(/exhausted/);
});
