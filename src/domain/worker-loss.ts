// A worker the operator declares lost for good (its host burnt down, its disk is gone): no machine
// is placed on it again, and each machine that lived on it ends in the error state with an
// `instance.error` event and an `instance_error` alert, so its owner learns of it and can delete it
// (a delete then only removes the record: the files went with the host). Its epoch moves on, so if
// that host ever answers again it is adopted anew: it removes the machines no record owns any more,
// and the ones still on it are adopted and run again.
//
// The seam for issue 24: once checkpoints have off-site copies, a lost machine can be made again on
// another worker from its newest one (`LostMachineRecovery`); until then there is none.
import type { Worker } from '../store/workers';
import type { Instance, InstanceStore } from '../store/instances';
import type { InstanceOperations, OperationOutcome } from './instance-operations';
import type { Workers } from './workers';

/** Makes a lost machine again elsewhere (from its newest off-site checkpoint); false when it cannot. */
export interface LostMachineRecovery {
  recover(machine: Instance): Promise<boolean>;
}

export class WorkerLoss {
  constructor(
    private readonly workers: Pick<Workers, 'markLost' | 'machineIdsOn'>,
    private readonly instances: InstanceStore,
    private readonly operations: InstanceOperations,
    private readonly recovery: LostMachineRecovery | null = null,
  ) {}

  /**
   * Declares the worker lost (it must not answer now; asked again, it marks the machines a first
   * try left). Returns it, the names of the machines marked, and of those that were busy (try again).
   */
  async declareLost(name: string): Promise<{ worker: Worker; machines: string[]; busy: string[] }> {
    const worker = await this.workers.markLost(name);
    const machines: string[] = [];
    const busy: string[] = [];
    for (const id of await this.workers.machineIdsOn(worker.id)) {
      const row = await this.instances.findById(id);
      if (!row || (row.status === 'error' && row.operation === null && row.errorMessage?.includes(lostMark(worker.name)))) continue;
      if (this.recovery && (await this.recovery.recover(row))) {
        machines.push(row.name);
        continue;
      }
      (await this.markLost(row, worker.name) ? machines : busy).push(row.name);
    }
    return { worker, machines, busy };
  }

  /**
   * The machine's open operation (waiting for the worker's return) is taken over from whichever
   * replica holds it: its own end, should it come, then writes nothing. False: another took it first.
   */
  private async markLost(row: Instance, workerName: string): Promise<boolean> {
    const message = `${lostMark(workerName)}: if that host answers again, the machine runs on; otherwise its disk and memory are gone with it, and deleting the machine removes its record`;
    // A delete that waited for the host is finished as asked: the files went with the host.
    const deleting = row.operation === 'delete' || row.desiredState === 'deleted';
    const lost = async (): Promise<OperationOutcome> => deleting
      ? { update: {}, event: { type: 'instance.deleted' }, deleted: true }
      : { update: { status: 'error', errorMessage: message, sessionSaved: false }, event: { type: 'instance.error', data: { message } } };
    if (row.operation) {
      if (!(await this.operations.takeOver(row))) return false;
      await this.operations.run(row, lost);
      return true;
    }
    const claimed = await this.operations.claimIfFree(row, 'reconcile');
    if (!claimed) return false;
    await this.operations.run(claimed, lost);
    return true;
  }
}

/** How a lost machine's error begins (a second declaration leaves it be). */
function lostMark(workerName: string): string {
  return `the host this machine ran on (worker ${workerName}) stopped answering and was declared lost`;
}
