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

/** How long an adoption may stay between its two steps before another control plane adopts again (its adopter went away). */
const PENDING_ADOPTION_S = 60;

/** Whether a worker's run needs adopting: never adopted, adopted under another epoch than `recorded`, or its adoption failed or stalled. */
export function needsAdoption(hello: Pick<WorkerHello, 'epoch' | 'adoption'>, recorded: number): boolean {
  if (hello.epoch === 0 || hello.epoch !== recorded) return true;
  return hello.adoption.state === 'failed' || (hello.adoption.state === 'pending' && hello.adoption.seconds > PENDING_ADOPTION_S);
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
  return new RemoteMachines(client).removeStrays(await owned());
}
