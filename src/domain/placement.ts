// Where a new machine runs, and whether there is room for it (L13, "no free capacity right now").
// On one box the service's own compute runs every machine and the room is its free memory; with
// several hosts the machine goes to a registered worker, chosen in the create's transaction.
import { KisteError } from '../errors';
import type { HostChecks, MachineShape } from '../compute/machine-host';
import { checkHostCapacity } from './instance-limits';
import type { Transaction } from './transactions';

export interface Placement {
  /** Before a new machine's row is written: whether there is room at all. */
  precheck(shape: MachineShape): Promise<void>;
  /** In the create's transaction: the worker the machine runs on (null: the service's own compute); L13 when none has room. A fork goes where its source runs. */
  place(tx: Transaction, shape: MachineShape, source: { workerId: string | null } | null): Promise<string | null>;
  /** Before a stopped machine starts again where it lives. */
  checkStart(machine: { id: string; workerId: string | null } & MachineShape): Promise<void>;
  /** Once its start is claimed (it counts as running): L13 when the starts claimed at once went past the room (the caller gives its claim back). */
  confirmStart(machine: { id: string; workerId: string | null } & MachineShape): Promise<void>;
}

/** One box: the host's free memory now, beside its reserve. */
export class HostPlacement implements Placement {
  constructor(private readonly host: Pick<HostChecks, 'capacity'>, private readonly reserveMib: number) {}

  async precheck(shape: MachineShape): Promise<void> {
    const { freeMemoryMib } = await this.host.capacity();
    checkHostCapacity(freeMemoryMib, shape.memoryMib, this.reserveMib);
  }

  async place(): Promise<null> {
    return null;
  }

  checkStart(machine: MachineShape): Promise<void> {
    return this.precheck(machine);
  }

  async confirmStart(): Promise<void> {
    // One box: the host's free memory was read before the claim; QEMU's start is what tells.
  }
}

export interface WorkerCapacity {
  place(tx: Transaction, shape: MachineShape, now: Date, among?: { only?: string; except?: string }): Promise<string | null>;
  roomToStart(workerId: string, shape: MachineShape, instanceId: string): Promise<boolean>;
  runningFit(workerId: string, instanceId: string): Promise<boolean>;
}

/** Several hosts: the registered worker with room and a live lease, least loaded first, against what each offers. */
export class WorkerPlacement implements Placement {
  constructor(private readonly workers: WorkerCapacity, private readonly now: () => Date) {}

  async precheck(): Promise<void> {
    // Decided in the create's transaction, where concurrent creates take turns.
  }

  async place(tx: Transaction, shape: MachineShape, source: { workerId: string | null } | null): Promise<string> {
    const placed = await this.workers.place(tx, shape, this.now(), { only: source?.workerId ?? undefined });
    if (placed) return placed;
    throw new KisteError('L13', {
      message: source
        ? `The worker that runs the source has no room for a copy of ${shape.vcpu} vCPU and ${shape.memoryMib} MiB right now`
        : `No worker has room for ${shape.vcpu} vCPU, ${shape.memoryMib} MiB and ${shape.diskMib} MiB of disk right now`,
    });
  }

  async checkStart(machine: { id: string; workerId: string | null } & MachineShape): Promise<void> {
    if (machine.workerId && (await this.workers.roomToStart(machine.workerId, machine, machine.id))) return;
    throw new KisteError('L13', { message: `The worker this machine lives on has no room for ${machine.vcpu} vCPU and ${machine.memoryMib} MiB right now` });
  }

  async confirmStart(machine: { id: string; workerId: string | null } & MachineShape): Promise<void> {
    if (machine.workerId && (await this.workers.runningFit(machine.workerId, machine.id))) return;
    throw new KisteError('L13', { message: `The worker this machine lives on has no room for ${machine.vcpu} vCPU and ${machine.memoryMib} MiB right now (other machines started at the same time)` });
  }
}
