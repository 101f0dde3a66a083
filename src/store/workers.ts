// Registered workers (several hosts) and placement. Placement runs in the create's transaction under
// a transaction-scoped advisory lock, so two control-plane replicas placing at once take turns:
// each sees what the other reserved, and no worker is given more than it offers.
import type { Transaction } from '../domain/transactions';
import type { Worker } from '../generated/prisma/sqlite/client';
import type { Db } from './prisma';
import { clientFor } from './transactions';

export type { Worker };

export interface Shape {
  vcpu: number;
  memoryMib: number;
  diskMib: number;
}

/** What a worker holds now: the shapes of the machines placed on it (running ones for vCPU and memory, every one for disk). */
export interface WorkerLoad extends Shape {
  machines: number;
}

export class WorkerStore {
  constructor(private readonly db: Db, private readonly provider: 'sqlite' | 'postgresql') {}

  add(data: { id: string; name: string; address: string; sealedSecret: string; maxVcpu?: number | null; maxMemoryMib?: number | null; maxDiskMib?: number | null }): Promise<Worker> {
    return this.db.worker.create({ data });
  }

  list(): Promise<Worker[]> {
    return this.db.worker.findMany({ orderBy: { name: 'asc' } });
  }

  findByName(name: string): Promise<Worker | null> {
    return this.db.worker.findUnique({ where: { name } });
  }

  findById(id: string): Promise<Worker | null> {
    return this.db.worker.findUnique({ where: { id } });
  }

  /**
   * The worker answered its heartbeat: its lease runs until `leaseUntil` (and, while the run that
   * answers is adopted, placement's until `placeableUntil`), and what it offers is what it said.
   */
  async renewLease(id: string, data: { leaseUntil: Date; placeableUntil?: Date; vcpu: number; memoryMib: number; diskMib: number; protocolVersion: number }): Promise<void> {
    await this.db.worker.update({ where: { id }, data: { ...data, lastError: null } });
  }

  /** Pins the worker's certificate, unless one is pinned already (a replica that pinned first wins); false then. */
  async pin(id: string, certificatePem: string): Promise<boolean> {
    const { count } = await this.db.worker.updateMany({ where: { id, certificatePem: null }, data: { certificatePem } });
    return count === 1;
  }

  /** Forgets the pinned certificate: the next contact pins the one the worker presents (and names in its signed hello). */
  async unpin(id: string): Promise<void> {
    await this.db.worker.update({ where: { id }, data: { certificatePem: null } });
  }

  /** The heartbeat failed: the lease is left to run out; why is kept for the operator. */
  async recordFailure(id: string, message: string): Promise<void> {
    await this.db.worker.updateMany({ where: { id }, data: { lastError: message.slice(0, 500) } });
  }

  async setState(id: string, state: 'active' | 'draining'): Promise<void> {
    await this.db.worker.update({ where: { id }, data: { state } });
  }

  /**
   * Moves the worker's fencing epoch from `from` to `to`, unless another replica moved it first
   * (false then: that replica adopts the worker).
   */
  async fence(id: string, from: number, to: number): Promise<boolean> {
    const { count } = await this.db.worker.updateMany({ where: { id, epoch: from }, data: { epoch: to } });
    return count === 1;
  }

  /** A worker declared lost was adopted again: it drains (no new machines; its machines work again). */
  async returnedFromLost(id: string): Promise<void> {
    await this.db.worker.updateMany({ where: { id, state: 'lost' }, data: { state: 'draining' } });
  }

  /**
   * Marks a worker lost for good, if its lease has run out by `now` (false otherwise): no machine
   * is placed on it again, and its epoch moves on, so a run of it that comes back is adopted anew.
   */
  async markLost(id: string, now: Date): Promise<boolean> {
    const { count } = await this.db.worker.updateMany({
      where: { id, OR: [{ leaseUntil: null }, { leaseUntil: { lte: now } }] },
      data: { state: 'lost', epoch: { increment: 1 } },
    });
    return count === 1;
  }

  /** Removes a worker no machine lives on; false when one still does. */
  async remove(id: string): Promise<boolean> {
    if ((await this.db.instance.count({ where: { workerId: id } })) > 0) return false;
    await this.db.worker.delete({ where: { id } });
    return true;
  }

  /** Each worker's load, by id (workers without machines are absent); `except`: leave out that machine. */
  async loads(workerIds: readonly string[], tx?: Transaction, except?: string): Promise<Map<string, WorkerLoad>> {
    const rows = await clientFor(tx, this.db).instance.findMany({
      where: { workerId: { in: [...workerIds] }, ...(except ? { id: { not: except } } : {}) },
      select: { workerId: true, desiredState: true, vcpu: true, memoryMib: true, diskMib: true },
    });
    const loads = new Map<string, WorkerLoad>();
    for (const row of rows) {
      const load = loads.get(row.workerId!) ?? { machines: 0, vcpu: 0, memoryMib: 0, diskMib: 0 };
      load.machines++;
      load.diskMib += row.diskMib;
      if (row.desiredState === 'running') {
        load.vcpu += row.vcpu;
        load.memoryMib += row.memoryMib;
      }
      loads.set(row.workerId!, load);
    }
    return loads;
  }

  /**
   * Inside the create's transaction: the active worker with a live lease that has room for `shape`
   * and the most memory left after it (least loaded first); `only`: that worker or none (a fork goes
   * where its source is); `except`: any other (a machine moving away). Null: none has room (L13).
   */
  async place(tx: Transaction, shape: Shape, now: Date, among: { only?: string; except?: string } = {}): Promise<string | null> {
    const client = clientFor(tx);
    const where = { state: 'active', leaseUntil: { gt: now }, placeableUntil: { gt: now }, ...(among.only ? { id: among.only } : {}), ...(among.except ? { NOT: { id: among.except } } : {}) };
    await this.lockPlacement(client);
    const candidates = await client.worker.findMany({ where });
    const loads = await this.loads(candidates.map((worker) => worker.id), tx);
    let best: { id: string; memoryLeft: number } | null = null;
    for (const worker of candidates) {
      const room = roomLeft(worker, loads.get(worker.id));
      if (!fits(shape, room)) continue;
      const memoryLeft = room.memoryMib - shape.memoryMib;
      if (!best || memoryLeft > best.memoryLeft) best = { id: worker.id, memoryLeft };
    }
    return best?.id ?? null;
  }

  /**
   * One placement at a time across replicas (PostgreSQL: a lock held until the transaction ends, so
   * the next one sees what this one reserved; SQLite has one writer and one control plane).
   */
  private async lockPlacement(client: { $executeRawUnsafe(query: string): Promise<number> }): Promise<void> {
    if (this.provider === 'postgresql') await client.$executeRawUnsafe(`SELECT pg_advisory_xact_lock(hashtext('kiste-placement'))`);
  }

  /**
   * After a start was claimed (its machine counts as running now): whether the machines driven to
   * run on the worker still fit what it is given, read under the placement lock. Starts claimed
   * at once are let through in the order of their claims (then of their ids): a start counts the
   * running machines and the starts claimed before it, not those claimed after, so of two that
   * fit only one at a time the first goes through and the second is refused, whichever asks first.
   */
  async runningFit(workerId: string, instanceId: string): Promise<boolean> {
    return this.db.$transaction(async (tx) => {
      await this.lockPlacement(tx);
      const worker = await tx.worker.findUnique({ where: { id: workerId } });
      const mine = await tx.instance.findUnique({ where: { id: instanceId }, select: { operationStartedAt: true } });
      if (!worker || !mine) return false;
      const claimedAt = mine.operationStartedAt ?? new Date(0);
      // Starts claimed after this one (still under way, driven to run) wait their turn.
      const later = await tx.instance.findMany({
        where: {
          workerId, desiredState: 'running', operation: { not: null }, id: { not: instanceId },
          OR: [{ operationStartedAt: { gt: claimedAt } }, { operationStartedAt: claimedAt, id: { gt: instanceId } }],
        },
        select: { vcpu: true, memoryMib: true },
      });
      const load = (await this.loads([workerId], tx as unknown as Transaction)).get(workerId);
      const counted = load && { ...load, vcpu: load.vcpu - sum(later, 'vcpu'), memoryMib: load.memoryMib - sum(later, 'memoryMib') };
      const room = roomLeft(worker, counted);
      return room.vcpu >= 0 && room.memoryMib >= 0;
    });
  }

  /** Whether a stopped machine's worker has room to run it again (its disk is already counted). */
  async roomToStart(workerId: string, shape: Shape, instanceId: string): Promise<boolean> {
    const worker = await this.db.worker.findUnique({ where: { id: workerId } });
    if (!worker) return false;
    const room = roomLeft(worker, (await this.loads([workerId], undefined, instanceId)).get(workerId));
    return shape.vcpu <= room.vcpu && shape.memoryMib <= room.memoryMib;
  }

  /** Where a machine lives (null: the control plane's own host). */
  async workerOf(instanceId: string): Promise<string | null> {
    const row = await this.db.instance.findUnique({ where: { id: instanceId }, select: { workerId: true } });
    return row?.workerId ?? null;
  }

  /** Every machine and where it lives (the operator's view: `npm run admin -- machines`). */
  async placedMachines(): Promise<{ name: string; accountEmail: string; status: string; workerId: string | null }[]> {
    const rows = await this.db.instance.findMany({ select: { name: true, status: true, workerId: true, account: { select: { email: true } } }, orderBy: [{ workerId: 'asc' }, { name: 'asc' }] });
    return rows.map((row) => ({ name: row.name, accountEmail: row.account.email, status: row.status, workerId: row.workerId }));
  }

  /** Machines with a move under way. */
  async movingMachineIds(): Promise<string[]> {
    const rows = await this.db.instance.findMany({ where: { operation: 'move' }, select: { id: true } });
    return rows.map((row) => row.id);
  }

  /** The ids of the machines each worker runs, for its reaper and stray collection. */
  async machineIdsOn(workerId: string): Promise<string[]> {
    const rows = await this.db.instance.findMany({ where: { workerId }, select: { id: true } });
    return rows.map((row) => row.id);
  }
}

/** What placement could still give a worker: its offer (within the ceiling) less its load (negative: over). */
export function roomLeft(worker: Worker, load: WorkerLoad | undefined): Shape {
  const offer = offerOf(worker);
  return { vcpu: offer.vcpu - (load?.vcpu ?? 0), memoryMib: offer.memoryMib - (load?.memoryMib ?? 0), diskMib: offer.diskMib - (load?.diskMib ?? 0) };
}

function fits(shape: Shape, room: Shape): boolean {
  return shape.vcpu <= room.vcpu && shape.memoryMib <= room.memoryMib && shape.diskMib <= room.diskMib;
}

/** What placement gives a worker: what it offers, never past the operator's ceiling. */
export function offerOf(worker: Worker): Shape {
  const capped = (offered: number, ceiling: number | null) => (ceiling === null ? offered : Math.min(offered, ceiling));
  return { vcpu: capped(worker.vcpu, worker.maxVcpu), memoryMib: capped(worker.memoryMib, worker.maxMemoryMib), diskMib: capped(worker.diskMib, worker.maxDiskMib) };
}

function sum<K extends string>(rows: Record<K, number>[], key: K): number {
  return rows.reduce((total, row) => total + row[key], 0);
}
