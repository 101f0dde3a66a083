// Named snapshots (docs/snapshots.md): taken of a running or stopped machine in the background
// (pending → ready | failed), unique by name in the account, within Limits (L15 count, L16 size),
// kept when their machine is deleted, and the source of new machines (Instances.create). Their
// files live on the host that ran the machine when it was taken.
import { KisteError } from '../errors';
import type { HostChecks, Machines, MachineShape } from '../compute/machine-host';
import type { AccountStore } from '../store/accounts';
import { appendEvent } from '../store/events';
import type { Instance } from '../store/instances';
import { snapshotMostBytes, type Snapshot, type SnapshotStore } from '../store/snapshots';
import type { Clock } from './clock';
import type { Limits } from './limits';
import type { LiveReplicas } from './replicas';
import { shapeOf } from './instances';
import { newId } from './secrets';
import type { Transaction, Transactions } from './transactions';

export type { Snapshot };

const MIB = 1048576;

/** What snapshots need of the machines: the owner's machine by name (K01 otherwise). */
export interface SnapshotMachines {
  get(accountId: string, name: string): Promise<Instance>;
}

type SnapshotEventType = 'snapshot.created' | 'snapshot.ready' | 'snapshot.failed' | 'snapshot.deleted';

export class Snapshots {
  /** Takings running in this process (tests and shutdown wait for them). */
  private readonly taking = new Set<Promise<void>>();

  constructor(
    private readonly transactions: Transactions,
    private readonly store: SnapshotStore,
    private readonly accounts: AccountStore,
    private readonly machines: SnapshotMachines,
    private readonly host: Pick<Machines, 'takeSnapshot' | 'deleteSnapshot'> & Pick<HostChecks, 'reachableFor'>,
    private readonly limits: Limits,
    private readonly clock: Clock,
    private readonly replicas: LiveReplicas,
    private readonly logger: { warn(object: object, message: string): void },
  ) {}

  /** The account's snapshots, newest first; with `instanceName`, those of that machine (none when it does not exist). */
  async list(accountId: string, instanceName?: string): Promise<Snapshot[]> {
    if (instanceName === undefined) return this.store.list(accountId);
    const instance = await this.machines.get(accountId, instanceName).catch((error: unknown) => {
      if (error instanceof KisteError && error.code === 'K01') return null;
      throw error;
    });
    return instance ? this.store.list(accountId, instance.id) : [];
  }

  async get(accountId: string, idOrName: string): Promise<Snapshot> {
    const snapshot = await this.store.find(accountId, idOrName);
    if (!snapshot) throw new KisteError('S01', { message: `No snapshot ${idOrName} in this account`, param: 'id' });
    return snapshot;
  }

  /** A ready snapshot a new machine can be made from (S01, S03 otherwise). */
  async forCreate(accountId: string, idOrName: string): Promise<Snapshot> {
    const snapshot = await this.store.find(accountId, idOrName);
    if (!snapshot) throw new KisteError('S01', { message: `No snapshot ${idOrName} in this account`, param: 'snapshot' });
    if (snapshot.status !== 'ready') throw new KisteError('S03', { message: `Snapshot ${snapshot.name} is ${snapshot.status}`, param: 'snapshot' });
    return snapshot;
  }

  /** A snapshot by id for finishing an interrupted create (null when it was deleted meanwhile or is not the account's). */
  async byId(accountId: string, id: string): Promise<Snapshot | null> {
    const snapshot = await this.store.findById(id);
    return snapshot && snapshot.accountId === accountId && snapshot.status === 'ready' ? snapshot : null;
  }

  /**
   * Records the snapshot (pending) and takes it in the background. `memory` defaults to what the
   * machine has: a running guest, or a saved session.
   */
  async take(accountId: string, instanceName: string, request: { name: string; memory?: boolean }): Promise<Snapshot> {
    const instance = await this.machines.get(accountId, instanceName);
    if (instance.operation) throw new KisteError('K05', { message: `Instance ${instanceName} is busy with ${instance.operation}; take the snapshot once it is done` });
    if (instance.status !== 'running' && instance.status !== 'stopped') {
      throw new KisteError('K03', { message: `Instance ${instanceName} is ${instance.status}; a snapshot needs it running or stopped` });
    }
    if (!this.host.reachableFor(instance.workerId)) throw new KisteError('N01', { message: `The host of instance ${instanceName} cannot be reached right now` });
    const hasMemory = instance.status === 'running' || instance.sessionSaved;
    const memory = request.memory ?? hasMemory;
    if (memory && !hasMemory) throw new KisteError('S04', { message: `Instance ${instanceName} is stopped without a saved session: send memory false to keep its disk`, param: 'memory' });
    const snapshot = await this.transactions.run(async (tx) => {
      await this.accounts.lockForUpdate(tx, accountId); // two takes at once cannot both pass a limit or take one name
      if (await this.store.nameTaken(accountId, request.name, tx)) throw new KisteError('S02', { message: `A snapshot named ${request.name} already exists in this account`, param: 'name' });
      const footprint = await this.store.footprint(accountId, tx);
      if (footprint.count >= this.limits.snapshotsPerAccount) throw new KisteError('L15', { message: `An account can have at most ${this.limits.snapshotsPerAccount} snapshots` });
      // Counted as the most it can hold until it is taken (its size then), so takes at once cannot pass the limit together.
      const most = snapshotMostBytes({ diskMib: instance.diskMib, memoryMib: instance.memoryMib, memory });
      if (footprint.bytes + most > this.limits.snapshotMibTotal * MIB) {
        throw new KisteError('L16', { message: `The account's snapshots hold ${Math.round(footprint.bytes / MIB)} MiB; this one may hold up to ${Math.round(most / MIB)} MiB, and at most ${this.limits.snapshotMibTotal} MiB are allowed` });
      }
      const created = await this.store.create(tx, {
        id: newId(),
        accountId,
        name: request.name,
        instanceId: instance.id,
        instanceName: instance.name,
        image: instance.image,
        memory,
        vcpu: instance.vcpu,
        memoryMib: instance.memoryMib,
        diskMib: instance.diskMib,
        imageProfile: instance.imageProfile,
        imageVersion: instance.imageVersion,
        artifactKey: instance.artifactKey,
        workerId: instance.workerId,
        takenBy: this.replicas.me,
        createdAt: this.clock.now(),
      });
      await this.event(tx, created, 'snapshot.created', { memory });
      return created;
    });
    const work = this.finishTaking(snapshot, instance.id, shapeOf(instance)).finally(() => this.taking.delete(work));
    this.taking.add(work);
    return snapshot;
  }

  /** Account deletion: every snapshot's files go (their records go with the account's). */
  async removeAllOf(accountId: string): Promise<void> {
    for (const snapshot of await this.store.list(accountId)) {
      await this.host.deleteSnapshot({ id: snapshot.id, workerId: snapshot.workerId });
    }
  }

  /** Waits for the takings this process runs (tests, shutdown). */
  async settled(): Promise<void> {
    await Promise.all([...this.taking]);
  }

  async delete(accountId: string, idOrName: string): Promise<Snapshot> {
    const snapshot = await this.get(accountId, idOrName);
    if (snapshot.status === 'pending') throw new KisteError('S03', { message: `Snapshot ${snapshot.name} is still being taken; delete it once it is ready or failed` });
    await this.host.deleteSnapshot({ id: snapshot.id, workerId: snapshot.workerId });
    await this.transactions.run(async (tx) => {
      const { count } = await this.store.delete(tx, accountId, snapshot.id);
      if (count === 1) await this.event(tx, snapshot, 'snapshot.deleted', {});
    });
    return snapshot;
  }

  /**
   * At start: snapshots whose taker is gone (this process before a restart, or another replica) are
   * failed; the host removes their unfinished files at its own start.
   */
  async failInterrupted(): Promise<void> {
    for (const snapshot of await this.store.pending()) {
      if (snapshot.takenBy === this.replicas.me || (snapshot.takenBy && (await this.replicas.isAlive(snapshot.takenBy)))) continue;
      await this.finish(snapshot, { status: 'failed', error: 'interrupted by a service restart' });
    }
  }

  private async finishTaking(snapshot: Snapshot, instanceId: string, shape: MachineShape): Promise<void> {
    try {
      const taken = await this.host.takeSnapshot(instanceId, snapshot.id, shape, { memory: snapshot.memory });
      const finished = await this.finish(snapshot, { status: 'ready', memory: taken.memory, sizeBytes: taken.sizeBytes, readyAt: this.clock.now() });
      // Deleted while it was taken: its files go too.
      if (!finished) await this.host.deleteSnapshot({ id: snapshot.id, workerId: snapshot.workerId });
    } catch (error) {
      this.logger.warn({ err: error, snapshot: snapshot.id }, 'a snapshot could not be taken');
      await this.finish(snapshot, { status: 'failed', error: (error as Error).message.slice(0, 500) }).catch(() => undefined);
    }
  }

  private finish(snapshot: Snapshot, outcome: Parameters<SnapshotStore['finish']>[2]): Promise<Snapshot | null> {
    return this.transactions.run(async (tx) => {
      const finished = await this.store.finish(tx, snapshot.id, outcome);
      if (!finished) return null;
      if (outcome.status === 'ready') await this.event(tx, finished, 'snapshot.ready', { memory: outcome.memory, size_mib: Math.ceil(outcome.sizeBytes / MIB) });
      else await this.event(tx, finished, 'snapshot.failed', { error: outcome.error });
      return finished;
    });
  }

  private event(tx: Transaction, snapshot: Snapshot, type: SnapshotEventType, data: Record<string, unknown>): Promise<unknown> {
    return appendEvent(tx, snapshot.accountId, { type, resourceType: 'snapshot', resourceId: snapshot.id, data: { name: snapshot.name, instance: snapshot.instanceName, ...data } });
  }
}
