// The workers registered with this control plane (several hosts): added by the operator with a join
// token, their leases renewed by the heartbeat, drained for maintenance. The signing secret each one
// derives from its token is kept sealed, bound to the worker's id.
import { isIP } from 'node:net';
import { newJoinToken, workerSecretOf } from '../protocol/worker-join';
import { roomLeft, type Worker, type WorkerStore } from '../store/workers';
import type { WorkerFigures } from '../observability/metrics';
import type { RegisteredWorker, WorkerContact, WorkerRegistry } from '../compute/fleet-roster';
import type { Clock } from './clock';
import { newId } from './secrets';
import type { SecretBox } from './secret-box';

/** How long a heartbeat keeps a worker's lease (it is renewed every few seconds). */
export const WORKER_LEASE_MS = 30_000;
const NAME = /^[a-z][a-z0-9-]{0,62}$/;

export class WorkerAdminError extends Error {}

export class Workers implements WorkerRegistry {
  constructor(private readonly store: WorkerStore, private readonly secrets: SecretBox, private readonly clock: Clock) {}

  /** Registers a worker at `address` (https://host:port); the join token is shown once, to start the worker with. */
  async add(name: string, address: string, ceiling: { vcpu?: number; memoryMib?: number; diskMib?: number } = {}): Promise<{ worker: Worker; joinToken: string }> {
    if (!NAME.test(name)) throw new WorkerAdminError('a worker name is 1 to 63 lower-case letters, digits and dashes, starting with a letter');
    const url = checkedAddress(address);
    if (await this.store.findByName(name)) throw new WorkerAdminError(`a worker named ${name} is registered already`);
    const joinToken = newJoinToken();
    const id = newId();
    const worker = await this.store.add({
      id, name, address: url, sealedSecret: this.secrets.seal(workerSecretOf(joinToken).toString('hex'), id),
      maxVcpu: ceiling.vcpu ?? null, maxMemoryMib: ceiling.memoryMib ?? null, maxDiskMib: ceiling.diskMib ?? null,
    });
    return { worker, joinToken };
  }

  list(): Promise<Worker[]> {
    return this.store.list();
  }

  /** What each worker holds now (its machines' shapes). */
  loads(workerIds: readonly string[]): ReturnType<WorkerStore['loads']> {
    return this.store.loads(workerIds);
  }

  placedMachines(): ReturnType<WorkerStore['placedMachines']> {
    return this.store.placedMachines();
  }

  /** Each worker as operators see it (the metrics): whether it answers, and what placement could still give it. */
  async figures(): Promise<WorkerFigures[]> {
    const list = await this.store.list();
    const loads = await this.store.loads(list.map((worker) => worker.id));
    return list.map((worker) => {
      const room = roomLeft(worker, loads.get(worker.id));
      return {
        name: worker.name,
        state: worker.state,
        answers: this.isLive(worker),
        free: { vcpu: Math.max(0, room.vcpu), memoryMib: Math.max(0, room.memoryMib), diskMib: Math.max(0, room.diskMib) },
      };
    });
  }

  /** A worker whose lease runs: it answered within the last WORKER_LEASE_MS. */
  isLive(worker: Worker): boolean {
    return worker.leaseUntil !== null && worker.leaseUntil > this.clock.now();
  }

  /** A worker whose answering run is adopted: placement may give it machines (when it is active and has room). */
  isPlaceable(worker: Worker): boolean {
    return worker.placeableUntil !== null && worker.placeableUntil > this.clock.now();
  }

  /** Forgets the pinned certificate (the worker's was renewed): the next contact pins the new one, which the worker's signed hello must name. */
  async repin(name: string): Promise<void> {
    await this.store.unpin((await this.named(name)).id);
  }

  async drain(name: string): Promise<Worker> {
    return this.setState(name, 'draining');
  }

  async activate(name: string): Promise<Worker> {
    return this.setState(name, 'active');
  }

  async remove(name: string): Promise<Worker> {
    const worker = await this.named(name);
    // Drained or lost first: placement never picks it then, so no create races the removal.
    if (worker.state === 'active') throw new WorkerAdminError(`drain ${name} first (npm run admin -- worker-drain --name ${name})`);
    if (!(await this.store.remove(worker.id))) throw new WorkerAdminError(`machines still live on ${name}: delete or move them first`);
    return worker;
  }

  async registered(): Promise<RegisteredWorker[]> {
    return (await this.store.list()).map((worker) => ({
      id: worker.id,
      name: worker.name,
      address: worker.address,
      secret: Buffer.from(this.secrets.open(worker.sealedSecret, worker.id), 'hex'),
      certificatePem: worker.certificatePem,
      epoch: worker.epoch,
      lost: worker.state === 'lost',
    }));
  }

  fence(id: string, from: number, to: number): Promise<boolean> {
    return this.store.fence(id, from, to);
  }

  /**
   * The operator says a worker is gone for good: it must not answer now (its lease ran out).
   * Returns it; its machines are then marked lost by the caller (WorkerLoss).
   */
  async markLost(name: string): Promise<Worker> {
    const worker = await this.named(name);
    if (worker.state === 'lost') return worker; // again: its machines not marked yet are marked
    if (!(await this.store.markLost(worker.id, this.clock.now()))) {
      throw new WorkerAdminError(`${name} still answers (its lease runs until ${worker.leaseUntil?.toISOString()}): drain it instead, or wait until it has not answered for ${WORKER_LEASE_MS / 1000} s`);
    }
    return { ...worker, state: 'lost' };
  }

  async returned(workerId: string): Promise<void> {
    await this.store.returnedFromLost(workerId);
  }

  /** Whether the worker was declared lost (a machine on it has no files any host can reach). */
  async isLost(workerId: string): Promise<boolean> {
    return (await this.store.findById(workerId))?.state === 'lost';
  }

  async answered(id: string, contact: WorkerContact): Promise<void> {
    if (contact.certificatePem && !(await this.store.pin(id, contact.certificatePem))) throw new WorkerAdminError('another replica pinned this worker\'s certificate first');
    await this.store.renewLease(id, {
      leaseUntil: new Date(this.clock.now().getTime() + WORKER_LEASE_MS),
      ...(contact.adopted ? { placeableUntil: new Date(this.clock.now().getTime() + WORKER_LEASE_MS) } : {}),
      vcpu: contact.offer.vcpu,
      memoryMib: contact.offer.memoryMib,
      diskMib: contact.offer.diskMib,
      protocolVersion: contact.protocolVersion,
    });
  }

  failed(id: string, message: string): Promise<void> {
    return this.store.recordFailure(id, message);
  }

  workerOf(machineId: string): Promise<string | null> {
    return this.store.workerOf(machineId);
  }

  machineIdsOn(workerId: string): Promise<string[]> {
    return this.store.machineIdsOn(workerId);
  }

  movingMachineIds(): Promise<string[]> {
    return this.store.movingMachineIds();
  }

  private async setState(name: string, state: 'active' | 'draining'): Promise<Worker> {
    const worker = await this.named(name);
    await this.store.setState(worker.id, state);
    return { ...worker, state };
  }

  private async named(name: string): Promise<Worker> {
    const worker = await this.store.findByName(name);
    if (!worker) throw new WorkerAdminError(`no worker named ${name}`);
    return worker;
  }
}

/** https://host:port, nothing else (no path, no credentials). */
function checkedAddress(address: string): string {
  let url: URL;
  try {
    url = new URL(address);
  } catch {
    throw new WorkerAdminError(`the worker's address must be https://host:port, got "${address}"`);
  }
  if (url.protocol !== 'https:' || !url.hostname || url.username || url.password || (url.pathname !== '/' && url.pathname !== '') || url.search || url.hash) {
    throw new WorkerAdminError(`the worker's address must be https://host:port, got "${address}"`);
  }
  const host = url.hostname.replace(/^\[|\]$/g, '');
  if (!isIP(host) && !/^[a-z0-9.-]+$/i.test(host)) throw new WorkerAdminError(`the worker's host "${host}" is not a name or an address`);
  return `https://${url.host}`;
}
