// Named snapshots. Every query names the account the snapshot belongs to, but the ones that finish
// a snapshot's taking (by its id, from the work that took it) and the start-up sweep.
import type { Transaction } from '../domain/transactions';
import type { Snapshot } from '../generated/prisma/sqlite/client';
import type { Db } from './prisma';
import { clientFor } from './transactions';

export type { Snapshot };

export interface NewSnapshot {
  id: string;
  accountId: string;
  name: string;
  instanceId: string;
  instanceName: string;
  image: string;
  memory: boolean;
  vcpu: number;
  memoryMib: number;
  diskMib: number;
  imageProfile: string;
  imageVersion: string | null;
  artifactKey: string;
  workerId: string | null;
  takenBy: string;
  createdAt: Date;
}

/** How a taking ended. */
export type SnapshotOutcome = { status: 'ready'; memory: boolean; sizeBytes: number; readyAt: Date } | { status: 'failed'; error: string };

/**
 * The most a snapshot of this shape can hold: its disk, and with memory the live capture's bound
 * (RAM pages sent again while they changed: up to three times the RAM and 256 MiB of devices, the
 * limit captureLive in src/compute/qemu/memory-session.ts enforces).
 */
export function snapshotMostBytes(shape: { diskMib: number; memoryMib: number; memory: boolean }): number {
  return (shape.diskMib + (shape.memory ? 3 * shape.memoryMib + 256 : 0)) * 1048576;
}

export class SnapshotStore {
  constructor(private readonly db: Db) {}

  /** The account's snapshots, newest first; only those of one machine when `instanceId` is given. */
  list(accountId: string, instanceId?: string): Promise<Snapshot[]> {
    return this.db.snapshot.findMany({ where: { accountId, ...(instanceId ? { instanceId } : {}) }, orderBy: [{ createdAt: 'desc' }, { id: 'desc' }] });
  }

  /** By id or by name (names are unique in the account). */
  async find(accountId: string, idOrName: string, tx?: Transaction): Promise<Snapshot | null> {
    const db = clientFor(tx, this.db);
    return (await db.snapshot.findFirst({ where: { accountId, id: idOrName } })) ?? db.snapshot.findFirst({ where: { accountId, name: idOrName } });
  }

  findById(id: string): Promise<Snapshot | null> {
    return this.db.snapshot.findUnique({ where: { id } });
  }

  /**
   * How many the account has and the bytes they hold: a ready one its size, a pending one the most
   * it can hold (its source's disk, and memory when it keeps memory), a failed one nothing.
   */
  async footprint(accountId: string, tx: Transaction): Promise<{ count: number; bytes: number }> {
    const rows = await clientFor(tx).snapshot.findMany({ where: { accountId }, select: { sizeBytes: true, diskMib: true, memoryMib: true, memory: true, status: true } });
    const bytes = rows.reduce((sum, row) => sum + (row.status === 'pending' ? snapshotMostBytes(row) : Number(row.sizeBytes ?? 0)), 0);
    return { count: rows.length, bytes };
  }

  nameTaken(accountId: string, name: string, tx: Transaction): Promise<boolean> {
    return clientFor(tx).snapshot.count({ where: { accountId, name } }).then((count) => count > 0);
  }

  create(tx: Transaction, snapshot: NewSnapshot): Promise<Snapshot> {
    return clientFor(tx).snapshot.create({ data: { ...snapshot, status: 'pending', progress: 0 } });
  }

  /** Ends a pending snapshot; null when it is not pending any more (deleted meanwhile). */
  async finish(tx: Transaction, id: string, outcome: SnapshotOutcome): Promise<Snapshot | null> {
    const data = outcome.status === 'ready'
      ? { status: 'ready', memory: outcome.memory, sizeBytes: BigInt(outcome.sizeBytes), readyAt: outcome.readyAt, progress: null, error: null, takenBy: null }
      : { status: 'failed', error: outcome.error, progress: null, takenBy: null };
    const { count } = await clientFor(tx).snapshot.updateMany({ where: { id, status: 'pending' }, data });
    return count === 1 ? clientFor(tx).snapshot.findUnique({ where: { id } }) : null;
  }

  /** Pending snapshots (their takers may have stopped: see Snapshots.failInterrupted). */
  pending(): Promise<Snapshot[]> {
    return this.db.snapshot.findMany({ where: { status: 'pending' } });
  }

  delete(tx: Transaction, accountId: string, id: string): Promise<{ count: number }> {
    return clientFor(tx).snapshot.deleteMany({ where: { accountId, id } });
  }
}
