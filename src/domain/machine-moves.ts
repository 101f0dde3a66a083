// Moving a stopped machine to another worker (drain, issue 22). The move is a lifecycle operation
// (`move`, 409 K05 for anything else meanwhile): the target is placed like a new machine (active,
// answering, with room; never the worker it leaves), the source worker's files are relayed to it,
// and only once the target holds the machine does its row name the target; the source's files go
// last. Cut short, nothing is lost: the row still names the source, which still holds the files (the
// target's partial copy is a stray its worker removes), and the reconciler ends the operation.
import { cameFromUnreachableHost } from '../compute/machine-host';
import { KisteError } from '../errors';
import type { Instance, InstanceStore } from '../store/instances';
import type { Clock } from './clock';
import type { InstanceOperations } from './instance-operations';
import type { WorkerCapacity } from './placement';
import type { Transactions } from './transactions';

/** What a move asks of the compute side (several hosts: FleetMachineHost). */
export interface MachineMover {
  move(id: string, from: string, to: string, limits: { diskMib: number; memoryMib: number }): Promise<void>;
  destroyOn(workerId: string, id: string): Promise<void>;
}

export class MachineMoves {
  constructor(
    private readonly transactions: Transactions,
    private readonly instances: InstanceStore,
    private readonly operations: InstanceOperations,
    private readonly workers: Pick<WorkerCapacity, 'place'>,
    private readonly mover: MachineMover | null,
    private readonly clock: Clock,
  ) {}

  /** Moves a stopped machine off its worker; the row as it ends (its new worker). */
  async moveStopped(instance: Instance): Promise<Instance> {
    if (!this.mover || !instance.workerId) throw new KisteError('K03', { message: `Instance ${instance.name} lives on no registered worker: only machines of several hosts move` });
    if (instance.status !== 'stopped' || instance.operation) throw new KisteError('K03', { message: `Instance ${instance.name} must be stopped to move (it is ${instance.status})` });
    const from = instance.workerId;
    const shape = { vcpu: instance.vcpu, memoryMib: instance.memoryMib, diskMib: instance.diskMib };
    const to = await this.transactions.run((tx) => this.workers.place(tx, shape, this.clock.now(), { except: from }));
    if (!to) throw new KisteError('L13', { message: `No other worker has room for ${instance.name} right now` });
    const claimed = await this.operations.claim(instance, 'move', {});
    const mover = this.mover;
    let failure: string | null = null;
    const final = await this.operations.run(claimed, async () => {
      try {
        await mover.move(instance.id, from, to, { diskMib: instance.diskMib, memoryMib: instance.memoryMib });
        return { update: { workerId: to }, event: null };
      } catch (error) {
        if (cameFromUnreachableHost(error)) throw error; // left open: the reconciler ends it once the worker answers
        // The machine is as it was, on its worker: the move failed, not the machine.
        failure = error instanceof Error ? error.message : String(error);
        return { update: {}, event: null };
      }
    });
    if (!final || final.workerId !== to) throw new KisteError('K08', { message: `Instance ${instance.name} could not be moved: ${failure ?? 'its worker went away meanwhile'}` });
    // The target holds it and the row says so: the source's copy goes (a failure leaves a stray its worker removes).
    await mover.destroyOn(from, instance.id).catch(() => undefined);
    return final;
  }
}
