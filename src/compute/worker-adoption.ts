// How a control plane adopts a run of a worker (worker-api.yaml, "Fencing"), on one box and between
// hosts alike: the worker is fenced with an epoch higher than any before, so commands sent under
// the old one are refused from then on; only then is the list of machines the records own read
// (every command admitted under the old epoch had its record written before it was sent, so the
// list holds its machine), and the worker removes every machine that is none of them. A QEMU with
// no record is never left running: the leaked QEMU after a crash, a machine deleted or moved while
// the worker was away. The client signs with the new epoch from the fence on.
import { RemoteMachines } from './remote-machines';
import type { WorkerClient, WorkerHello } from './worker-client';
import { MAX_EPOCH } from '../protocol/worker-signature';

/** How long an adoption may stay between its two steps before another control plane removes the strays (its adopter went away). */
const PENDING_ADOPTION_S = 60;
/** How long a removal of strays may run before it counts as stuck (one machine's destroy waiting behind a hung operation). */
const REMOVING_STUCK_S = 15 * 60;

/**
 * What a worker's run needs, by its hello: adopting (never adopted, or under another epoch than
 * `recorded`), its strays removed again under its epoch (the removal failed, kept a stray a command
 * still worked on, never came, or is stuck), or nothing.
 */
export function adoptionNeed(hello: Pick<WorkerHello, 'epoch' | 'adoption'>, recorded: number): 'adopt' | 'remove-strays' | null {
  if (hello.epoch === 0 || hello.epoch !== recorded) return 'adopt';
  const { state, seconds } = hello.adoption;
  if (state === 'failed' || state === 'partial' || (state === 'pending' && seconds > PENDING_ADOPTION_S) || (state === 'removing' && seconds > REMOVING_STUCK_S)) return 'remove-strays';
  return null;
}

/** The epoch an adoption takes: past both the worker's and the records' (a worker that claims the last one cannot be adopted: register it again). */
export function nextEpoch(helloEpoch: number, recorded: number): number {
  const next = Math.max(helloEpoch, recorded) + 1;
  if (next > MAX_EPOCH) throw new Error('the worker\'s fencing epoch is exhausted: remove the worker and register it again');
  return next;
}

/** Fences the worker under `epoch`, then reads which machines the records own and removes the others; returns the ids removed. */
export async function adoptWorker(client: WorkerClient, epoch: number, owned: () => Promise<readonly string[]>): Promise<string[]> {
  await client.fence(epoch);
  return removeWorkerStrays(client, owned);
}

/** Removes the worker's strays under the epoch the client knows it by (the list read now: after the fence). */
export async function removeWorkerStrays(client: WorkerClient, owned: () => Promise<readonly string[]>): Promise<string[]> {
  return new RemoteMachines(client).removeStrays(await owned());
}
