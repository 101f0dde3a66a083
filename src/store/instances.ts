// Instance rows. Every query names the account, except the host-wide ones the background jobs use
// (reconciliation, expiry), which say so.
import type { Transaction } from '../domain/transactions';
import { Prisma, type Instance } from '../generated/prisma/sqlite/client';
import type { Db } from './prisma';
import { clientFor } from './transactions';

export type { Instance };
export type InstanceUpdate = Prisma.InstanceUncheckedUpdateInput;

export class InstanceStore {
  constructor(private readonly db: Db) {}

  /** Newest first. */
  list(accountId: string): Promise<Instance[]> {
    return this.db.instance.findMany({ where: { accountId }, orderBy: [{ createdAt: 'desc' }, { id: 'desc' }] });
  }

  findByName(accountId: string, name: string, tx?: Transaction): Promise<Instance | null> {
    return clientFor(tx, this.db).instance.findUnique({ where: { accountId_name: { accountId, name } } });
  }

  findById(id: string, tx?: Transaction): Promise<Instance | null> {
    return clientFor(tx, this.db).instance.findUnique({ where: { id } });
  }

  /** The environment setup's background part began; a finished setup is left as it is. */
  async markSetupRunning(id: string): Promise<void> {
    await this.db.instance.updateMany({ where: { id, setupStatus: { in: ['pending', 'running'] } }, data: { setupStatus: 'running' } });
  }

  /**
   * What the machine limits count (L02, L03, L04) and GET /v1/status reports: every row (one being
   * deleted still holds its disk); running = driven to run, so a starting machine counts too.
   */
  async footprint(accountId: string, tx?: Transaction): Promise<{ machines: number; runningMachines: number; diskMib: number }> {
    const rows = await clientFor(tx, this.db).instance.findMany({ where: { accountId }, select: { status: true, desiredState: true, diskMib: true } });
    return {
      machines: rows.length,
      runningMachines: rows.filter((row) => row.desiredState === 'running').length,
      diskMib: rows.reduce((sum, row) => sum + row.diskMib, 0),
    };
  }

  create(tx: Transaction, data: Prisma.InstanceUncheckedCreateInput): Promise<Instance> {
    return clientFor(tx).instance.create({ data });
  }

  /** Marks a lifecycle operation as running; false when another one already is (K05). */
  async claimOperation(accountId: string, id: string, operation: string, now: Date, owner: string): Promise<boolean> {
    const { count } = await this.db.instance.updateMany({
      where: { accountId, id, operation: null },
      data: { operation, operationStartedAt: now, operationOwner: owner },
    });
    return count === 1;
  }

  /**
   * Ends an operation this replica owns: its changes written, the claim cleared, or the row removed
   * (`deleted`); false when the claim is no longer this replica's (another finished it meanwhile),
   * and then nothing is written.
   */
  async finishOwned(tx: Transaction, id: string, owner: string, end: { deleted: true } | { update: InstanceUpdate }): Promise<boolean> {
    const client = clientFor(tx);
    if ('deleted' in end) return (await client.instance.deleteMany({ where: { id, operationOwner: owner } })).count === 1;
    const { count } = await client.instance.updateMany({
      where: { id, operationOwner: owner },
      data: { ...end.update, operation: null, operationStartedAt: null, operationInput: Prisma.DbNull, operationOwner: null } as Prisma.InstanceUncheckedUpdateManyInput,
    });
    return count === 1;
  }

  /** Takes over an open operation from the replica that ran it (gone); false when another replica took it first. */
  async takeOperation(id: string, operation: string, from: string | null, owner: string): Promise<boolean> {
    const { count } = await this.db.instance.updateMany({ where: { id, operation, operationOwner: from }, data: { operationOwner: owner } });
    return count === 1;
  }

  /**
   * Leaves an open operation this replica owns to whichever replica reconciles next (its owner
   * cleared, its goal kept): the work waits for a host that cannot be reached now.
   */
  async releaseOperation(id: string, owner: string): Promise<void> {
    await this.db.instance.updateMany({ where: { id, operationOwner: owner, operation: { not: null } }, data: { operationOwner: null } });
  }

  /** An update that ends the operation (`operation: null`) clears its input too. */
  update(id: string, data: InstanceUpdate, tx?: Transaction): Promise<Instance> {
    const ending = data.operation === null ? { operationInput: Prisma.DbNull, operationOwner: null } : {};
    return clientFor(tx, this.db).instance.update({ where: { id }, data: { ...data, ...ending } });
  }

  /** Host-wide: the instances with an open operation (the reconciler's look for ones whose replica died). */
  withOpenOperation(): Promise<Instance[]> {
    return this.db.instance.findMany({ where: { operation: { not: null } } });
  }

  /** Host-wide: every instance (reconciliation at start). */
  all(): Promise<Instance[]> {
    return this.db.instance.findMany();
  }

  /** Host-wide: how many instances each status has (the metrics' machines by state). */
  async countByStatus(): Promise<Record<string, number>> {
    const groups = await this.db.instance.groupBy({ by: ['status'], _count: { _all: true } });
    return Object.fromEntries(groups.map((group) => [group.status, group._count._all]));
  }

  /** Host-wide: running instances no operation holds (automatic checkpoints pick the due ones). */
  runningIdle(): Promise<Instance[]> {
    return this.db.instance.findMany({ where: { status: 'running', operation: null } });
  }

  /** Sets last_checkpoint_at; false when the instance is gone. */
  async recordCheckpoint(tx: Transaction, id: string, at: Date): Promise<boolean> {
    const { count } = await clientFor(tx).instance.updateMany({ where: { id }, data: { lastCheckpointAt: at } });
    return count === 1;
  }

  /** Host-wide: running instances whose deadline has passed. */
  expired(now: Date): Promise<Instance[]> {
    return this.db.instance.findMany({ where: { desiredState: 'running', expiresAt: { lte: now }, operation: null } });
  }
}
