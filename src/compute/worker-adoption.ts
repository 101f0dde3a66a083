// How a control plane adopts a run of a worker (worker-api.yaml, "Fencing"), on one box and between
// hosts alike: the worker is fenced with an epoch higher than any before, so commands sent under
// the old one are refused from then on, and then removes every machine that none of the control
// plane's records owns (a QEMU with no record is never left running: the leaked QEMU after a crash,
// a machine deleted or moved while the worker was away). The client signs with the new epoch after.
import { RemoteMachines } from './remote-machines';
import type { WorkerClient } from './worker-client';

/** Fences the worker under `epoch` and removes its strays; returns the ids removed. */
export async function adoptWorker(client: WorkerClient, epoch: number, owned: readonly string[]): Promise<string[]> {
  await client.fence(epoch);
  return new RemoteMachines(client).removeStrays(owned);
}
