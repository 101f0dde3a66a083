// Instances: the spec's state table. Create and fork answer once the machine takes commands;
// stop, resume, restart, upgrade and delete wait up to `lifecycleWaitMs` and then go on in the
// background (the caller answers 202). Limits are checked under the account lock.
import type { Placement } from './placement';
import type { LiveReplicas } from './replicas';
import { KisteError } from '../errors';
import { AgentCallError } from '../compute/guest-agent';
import { cameFromUnreachableHost } from '../compute/machine-host';
import type { ForkedMachine, GuestAgents, GuestIdentity, HostChecks, HostImage, HostImages, ImageProfile, Machines, MachineShape, StartedMachine } from '../compute/machine-host';
import type { AccountStore } from '../store/accounts';
import type { DeviceKeyStore } from '../store/device-keys';
import { appendEvent } from '../store/events';
import type { Instance, InstanceStore } from '../store/instances';
import type { Clock } from './clock';
import { checkNewMachine, checkShape, checkStart } from './instance-limits';
import { generateInstanceName } from './instance-names';
import { InstanceCheckpoints } from './instance-checkpoints';
import { InstanceOperations, LifecycleOperation, OperationObserver, OperationOutcome } from './instance-operations';
import { MachineAvailabilityCheck } from './machine-availability';
import { InstanceReconciler, type ReconcileOptions } from './instance-reconciler';
import { forkInputOf, snapshotCreateInputOf, type ForkInput, type SnapshotCreateInput, type StopInput } from './operation-input';
import type { Snapshot, Snapshots } from './snapshots';
import type { Limits } from './limits';
import type { EnvironmentSetup } from './environment-setup';
import type { Environments } from './environments';
import type { Images } from './images';
import { newId } from './secrets';
import { parsePublicKey, PublicKeyError } from './ssh-public-key';
import type { Transactions } from './transactions';

const DEFAULT_AUTO_SNAPSHOT_SECONDS = 300;

export interface InstanceSettings {
  /** Which host image stands for the universal image on this host (minimal on small hosts and in tests). */
  imageProfile: ImageProfile;
  /** How long a lifecycle call waits before answering 202 (20 s in the spec). */
  lifecycleWaitMs: number;
}

export interface CreateInstance {
  name?: string | null;
  vcpu: number;
  memoryMib: number;
  diskMib: number;
  sshPublicKey: string;
  image?: string | null;
  environment?: string | null;
  ttlSeconds?: number | null;
  autoSnapshotSeconds?: number | null;
  /** A named snapshot (id or name) the machine is made from, instead of an image. */
  snapshot?: string | null;
}

export interface ForkRequest {
  name: string;
  ttlSeconds: number | null;
  /** The copy continues the source's memory and processes instead of booting fresh. */
  memory: boolean;
}

/** What a create applies besides the machine: the image it asked for and an environment version. */
export interface Provisioning {
  images: Pick<Images, 'forInstance'>;
  environments: Pick<Environments, 'forInstance'>;
  setup: Pick<EnvironmentSetup, 'apply' | 'notStarted'>;
  /** Where a new machine runs, and whether there is room (L13). */
  placement: Placement;
  /** Named snapshots new machines are made from. */
  snapshots: Pick<Snapshots, 'forCreate' | 'byId'>;
}

export interface LifecycleAnswer {
  instance: Instance;
  /** False when the operation goes on in the background (HTTP 202). */
  finished: boolean;
}

/** What instances ask of the host: machines' lives, their agents (metrics), whether a machine can start now (isolation, a ready image) and its host answers (room is the placement's). */
type InstanceHost = Machines & GuestAgents & Pick<HostChecks, 'isolationProblem' | 'reachableFor'> & Pick<HostImages, 'currentImage' | 'imageBuildState'>;

export class Instances {
  readonly operations: InstanceOperations;
  readonly checkpoints: InstanceCheckpoints;
  /** Whether machines can start now, and why not (also for GET /v1/status and /status.json). */
  readonly availability: MachineAvailabilityCheck;
  private readonly reconciler: InstanceReconciler;

  constructor(
    private readonly transactions: Transactions,
    private readonly stores: { instances: InstanceStore; accounts: AccountStore; deviceKeys: DeviceKeyStore },
    private readonly host: InstanceHost,
    private readonly limits: Limits,
    private readonly clock: Clock,
    private readonly settings: InstanceSettings,
    private readonly provisioning: Provisioning,
    replicas: LiveReplicas,
    logger: { error(object: object, message: string): void; warn(object: object, message: string): void },
    observer?: OperationObserver,
  ) {
    this.operations = new InstanceOperations(transactions, stores.instances, clock, logger, replicas.me, observer);
    this.checkpoints = new InstanceCheckpoints(transactions, stores.instances, host, clock, logger);
    this.availability = new MachineAvailabilityCheck(host, settings.imageProfile);
    this.reconciler = new InstanceReconciler(stores.instances, this.operations, host, clock, replicas, {
      interruptedWork: (row) => this.interruptedWork(row),
      stopOutcome: (row, saveSession) => this.stopOutcome(row, saveSession),
      startableImage: () => this.startableImage(),
    });
  }

  list(accountId: string): Promise<Instance[]> {
    return this.stores.instances.list(accountId);
  }

  async get(accountId: string, name: string): Promise<Instance> {
    const instance = await this.stores.instances.findByName(accountId, name);
    if (!instance) throw new KisteError('K01', { message: `No instance named ${name}`, param: 'name' });
    return instance;
  }

  /** The image version the platform serves now (null while none is built). */
  latestImageVersion(): string | null {
    return this.host.currentImage(this.settings.imageProfile)?.version ?? null;
  }

  /**
   * What every start needs: the host can jail machines (else K09, which no retry mends) and the
   * newest image of its universal profile (else K06 while it is still being built).
   */
  private startableImage(): Promise<HostImage> {
    return this.availability.startableImage();
  }

  async create(accountId: string, request: CreateInstance): Promise<Instance> {
    if (request.snapshot) return this.createFromSnapshot(accountId, request, request.snapshot);
    const sshKey = validKey(request.sshPublicKey);
    const chosen = await this.provisioning.images.forInstance(accountId, request.image);
    if (chosen.minDiskMib !== null && request.diskMib < chosen.minDiskMib) {
      throw new KisteError('K29', { message: `The image ${chosen.label} needs a disk of at least ${chosen.minDiskMib} MiB`, param: 'disk_mib' });
    }
    const environment = request.environment ? await this.provisioning.environments.forInstance(accountId, request.environment) : null;
    const served = await this.startableImage();
    // A private image with a derived layer: the disk starts from the layer, the kernel is the served one's.
    const image = chosen.layer ? { ...served, artifactKey: chosen.artifactKey ?? served.artifactKey, layer: chosen.layer } : served;
    const shape = { vcpu: request.vcpu, memoryMib: request.memoryMib, diskMib: request.diskMib };
    checkShape(this.limits, shape); // a shape never allowed is L08, not a retryable L13
    await this.provisioning.placement.precheck(shape);
    const now = this.clock.now();
    const instance = await this.insert(accountId, request.name ?? null, shape, 'create', null, (name) => ({
      image: chosen.label,
      imageId: chosen.imageId,
      components: chosen.components.map(({ id, version }) => ({ id, version })),
      imageProfile: image.profile,
      artifactKey: image.artifactKey,
      environmentVersionId: environment?.versionId ?? null,
      setupStatus: environment ? 'pending' : 'none',
      sshPublicKey: sshKey,
      autoSnapshotSeconds: request.autoSnapshotSeconds ?? DEFAULT_AUTO_SNAPSHOT_SECONDS,
      expiresAt: request.ttlSeconds ? new Date(now.getTime() + request.ttlSeconds * 1000) : null,
      guestHostname: name,
    }));
    const final = await this.operations.run(instance, async () => {
      const identity = await this.identity(instance);
      return startedOutcome(image, identity, await this.host.create(instance.id, image, shape, identity));
    });
    if (environment && final && final.status !== 'running') await this.provisioning.setup.notStarted(final, environment);
    const started = this.startedOrFailed(final);
    if (!environment) return started;
    await this.provisioning.setup.apply(started, environment); // files now; clones and the script go on in the background
    return (await this.stores.instances.findById(started.id)) ?? started;
  }

  /**
   * A machine made from a named snapshot, on the host holding it: it continues the snapshot's
   * memory when it has one and the shape keeps its vCPUs and memory (the host may still boot
   * instead, e.g. another QEMU build), else it boots the snapshot's disk on the current image.
   */
  private async createFromSnapshot(accountId: string, request: CreateInstance, idOrName: string): Promise<Instance> {
    if (request.image || request.environment) throw new KisteError('S05', { param: request.image ? 'image' : 'environment' });
    const sshKey = validKey(request.sshPublicKey);
    const snapshot = await this.provisioning.snapshots.forCreate(accountId, idOrName);
    if (request.diskMib < snapshot.diskMib) throw new KisteError('S06', { message: `Snapshot ${snapshot.name} needs a disk of at least ${snapshot.diskMib} MiB`, param: 'disk_mib' });
    const boot = await this.startableImage();
    const shape = { vcpu: request.vcpu, memoryMib: request.memoryMib, diskMib: request.diskMib };
    checkShape(this.limits, shape);
    await this.provisioning.placement.precheck(shape);
    const memory = snapshot.memory && snapshot.vcpu === shape.vcpu && snapshot.memoryMib === shape.memoryMib && snapshot.imageVersion !== null;
    const now = this.clock.now();
    const instance = await this.insert(accountId, request.name ?? null, shape, 'create', { workerId: snapshot.workerId }, (name) => ({
      image: snapshot.image,
      imageId: null,
      imageProfile: snapshot.imageProfile,
      artifactKey: snapshot.artifactKey,
      imageVersion: snapshot.imageVersion,
      sshPublicKey: sshKey,
      autoSnapshotSeconds: request.autoSnapshotSeconds ?? DEFAULT_AUTO_SNAPSHOT_SECONDS,
      expiresAt: request.ttlSeconds ? new Date(now.getTime() + request.ttlSeconds * 1000) : null,
      guestHostname: name,
      fromSnapshotId: snapshot.id,
      operationInput: { snapshot_id: snapshot.id, memory } satisfies SnapshotCreateInput,
    }));
    const final = await this.operations.run(instance, () => this.fromSnapshotWork(instance, snapshot, boot, memory));
    return this.startedOrFailed(final);
  }

  private async fromSnapshotWork(instance: Instance, snapshot: Snapshot, boot: HostImage, memory: boolean): Promise<OperationOutcome> {
    const identity = await this.identity(instance);
    const saved = { profile: snapshot.imageProfile as ImageProfile, version: snapshot.imageVersion ?? boot.version, artifactKey: snapshot.artifactKey };
    const created = await this.host.createFromSnapshot(instance.id, snapshot.id, { memory: saved, boot }, shapeOf(instance), identity, { memory });
    return startedOutcome(created.startedFrom === 'snapshot_memory' ? saved : boot, identity, created);
  }

  async fork(accountId: string, sourceName: string, request: ForkRequest): Promise<Instance> {
    const source = await this.get(accountId, sourceName);
    if (source.status !== 'running') throw new KisteError('K03', { message: `Instance ${sourceName} must be running to fork it` });
    const image = forkImage(source, request.memory, await this.startableImage());
    const shape = { vcpu: source.vcpu, memoryMib: source.memoryMib, diskMib: source.diskMib };
    await this.provisioning.placement.precheck(shape);
    const now = this.clock.now();
    const { name, ttlSeconds } = request;
    const copy = await this.insert(accountId, name, shape, 'fork', source, (copyName) => ({
      image: source.image,
      imageId: source.imageId,
      components: source.components ?? undefined,
      imageProfile: source.imageProfile,
      artifactKey: source.artifactKey,
      imageVersion: source.imageVersion,
      sshPublicKey: source.sshPublicKey,
      autoSnapshotSeconds: source.autoSnapshotSeconds,
      environmentVersionId: source.environmentVersionId,
      // The copy's disk holds what the source's setup did so far; a setup still going on is not the copy's.
      setupStatus: source.setupStatus === 'pending' || source.setupStatus === 'running' ? 'failed' : source.setupStatus,
      setupError: source.setupStatus === 'pending' || source.setupStatus === 'running' ? 'The machine was forked while its environment setup was running' : source.setupError,
      expiresAt: ttlSeconds ? new Date(now.getTime() + ttlSeconds * 1000) : null, // never the source's deadline
      guestHostname: copyName,
      operationInput: { source_id: source.id, memory: request.memory } satisfies ForkInput,
    }));
    const final = await this.operations.run(copy, async () => {
      const identity = await this.identity(copy);
      return startedOutcome(image, identity, await this.host.fork(source.id, copy.id, image, shape, identity, { memory: request.memory }));
    });
    return this.startedOrFailed(final);
  }

  async stop(accountId: string, name: string, saveSession: boolean): Promise<LifecycleAnswer> {
    const instance = await this.get(accountId, name);
    if (instance.status === 'stopped' && !instance.operation) return { instance, finished: true };
    // The wish to save the memory goes with the claim: a stop finished by the reconciler keeps it.
    const operationInput = { save_session: saveSession } satisfies StopInput;
    return this.lifecycle(instance, 'stop', { status: 'stopping', desiredState: 'stopped', operationInput }, () => this.stopOutcome(instance, saveSession));
  }

  async resume(accountId: string, name: string): Promise<LifecycleAnswer> {
    const instance = await this.get(accountId, name);
    if (instance.status === 'running' && !instance.operation) return { instance, finished: true };
    await this.checkCanStart(instance);
    const image = await this.startableImage();
    return this.lifecycle(instance, 'resume', { status: 'starting', desiredState: 'running' }, () => this.resumeWork(instance, image));
  }

  /** Continues the saved session, or boots the disk when there is none. */
  private async resumeWork(instance: Instance, image: HostImage): Promise<OperationOutcome> {
    const how = (await this.host.hasSession(instance.id)) ? 'resume' : 'boot';
    return this.bootOutcome(instance, image, shapeOf(instance), how);
  }

  /** Powers off what runs, drops the saved session and boots the disk afresh (restart, and upgrade of a running machine). */
  private async freshBootWork(instance: Instance, image: HostImage): Promise<OperationOutcome> {
    if (await this.host.isRunning(instance.id)) await this.host.stop(instance.id, { saveSession: false });
    await this.host.discardSession(instance.id);
    return this.bootOutcome(instance, image, shapeOf(instance), 'boot');
  }

  /** Fresh boot from the instance's own disk: files stay, a pending image update applies, a saved session is dropped. */
  async restart(accountId: string, name: string): Promise<LifecycleAnswer> {
    const instance = await this.get(accountId, name);
    if (instance.status !== 'running') await this.checkCanStart(instance);
    const image = await this.startableImage();
    return this.lifecycle(instance, 'restart', { status: 'starting', desiredState: 'running' }, () => this.freshBootWork(instance, image));
  }

  /** Running: reboot onto the newest image (files and packages stay). Stopped: drop the saved session. */
  async upgrade(accountId: string, name: string): Promise<LifecycleAnswer> {
    const instance = await this.get(accountId, name);
    if (instance.status === 'running') {
      const image = await this.startableImage();
      return this.lifecycle(instance, 'upgrade', { status: 'starting' }, () => this.freshBootWork(instance, image));
    }
    return this.lifecycle(instance, 'upgrade', {}, async () => {
      await this.host.discardSession(instance.id);
      return { update: { sessionSaved: false }, event: null };
    });
  }

  async delete(accountId: string, name: string): Promise<LifecycleAnswer> {
    const instance = await this.get(accountId, name);
    return this.lifecycle(instance, 'delete', { status: 'deleting', desiredState: 'deleted' }, async () => {
      await this.host.destroy(instance.id);
      return { update: {}, event: { type: 'instance.deleted' }, deleted: true };
    });
  }

  async rename(accountId: string, name: string, newName: string): Promise<Instance> {
    const instance = await this.get(accountId, name);
    if (newName === name) return instance;
    return this.transactions.run(async (tx) => {
      if (await this.stores.instances.findByName(accountId, newName, tx)) throw new KisteError('K02', { param: 'name' });
      await appendEvent(tx, accountId, {
        type: 'instance.renamed', resourceType: 'instance', resourceId: instance.id, data: { name: newName, previous_name: name },
      });
      return this.stores.instances.update(instance.id, { name: newName }, tx); // the guest follows at its next cold boot
    });
  }

  async extend(accountId: string, name: string, ttlSeconds: number): Promise<Instance> {
    const instance = await this.get(accountId, name);
    const from = instance.expiresAt ?? this.clock.now();
    return this.stores.instances.update(instance.id, { expiresAt: new Date(from.getTime() + ttlSeconds * 1000) });
  }

  async logs(accountId: string, name: string, lines: number): Promise<string> {
    const instance = await this.get(accountId, name);
    return this.host.consoleTail(instance.id, lines);
  }

  async running(accountId: string, name: string): Promise<Instance> {
    const instance = await this.get(accountId, name);
    if (instance.status !== 'running') throw new KisteError('K03', { message: `Instance ${name} is ${instance.status}, not running` });
    // A stream (exec, tunnel, terminal) must not begin towards a host that does not answer: N01 now, not an error inside the stream.
    if (!this.host.reachableFor(instance.workerId)) throw new KisteError('N01', { message: `The host of instance ${name} cannot be reached right now; the machine runs on` });
    return instance;
  }

  /** What the compute side holds of the account's machines (the export's `compute`); null when it cannot be reached. */
  async computeExport(accountId: string): Promise<{ machines: { name: string; running: boolean; session_saved: boolean }[] } | null> {
    try {
      const rows = await this.list(accountId);
      const machines = await Promise.all(rows.map(async (row) => ({ name: row.name, running: await this.host.isRunning(row.id), session_saved: await this.host.hasSession(row.id) })));
      return { machines };
    } catch (error) {
      if (cameFromUnreachableHost(error)) return null;
      throw error;
    }
  }

  /** A live usage sample from the guest (409 K03 when it is not running). */
  async metrics(accountId: string, name: string) {
    const instance = await this.running(accountId, name);
    try {
      const sample = await this.host.agent(instance.id).metrics();
      return { ...sample, sampledAt: this.clock.now() };
    } catch (error) {
      // A silent agent, or one whose answer is not a sample (the guest is not trusted): the machine's matter, not the service's.
      if (error instanceof AgentCallError && !cameFromUnreachableHost(error)) throw new KisteError('K10', { message: `Instance ${name}'s guest agent did not give a sample (${error.message})` });
      throw error;
    }
  }

  /** Background: running instances past their deadline stop, with their session when the guest answers. */
  async expireDue(): Promise<number> {
    let stopped = 0;
    for (const instance of await this.stores.instances.expired(this.clock.now())) {
      try {
        const claimed = await this.operations.claim(instance, 'expire', { status: 'stopping', desiredState: 'stopped' });
        await this.operations.run(claimed, async () => {
          const outcome = await this.stopOutcome(instance, true);
          return { ...outcome, update: { ...outcome.update, expiresAt: null }, event: { type: 'instance.stopped', data: { ...outcome.event?.data, reason: 'expired' } } };
        });
        stopped++;
      } catch (error) {
        if (!(error instanceof KisteError && error.code === 'K05')) throw error;
      }
    }
    return stopped;
  }

  /** Makes the rows true again (InstanceReconciler): at start, and when the machines' host is back. */
  reconcile(options?: ReconcileOptions): Promise<void> {
    return this.reconciler.reconcile(options);
  }

  /** The work that finishes a start the service died in, or null when it is not one. */
  private interruptedWork(row: Instance): ((image: HostImage) => Promise<OperationOutcome>) | null {
    switch (row.operation) {
      case 'resume':
        return (image) => this.resumeWork(row, image);
      case 'restart':
      case 'upgrade':
        return (image) => this.freshBootWork(row, image);
      case 'fork': {
        const input = forkInputOf(row.operationInput);
        return input ? (image) => this.forkAgainWork(row, input, image) : null;
      }
      case 'create': {
        const fromSnapshot = snapshotCreateInputOf(row.operationInput);
        if (fromSnapshot) return (image) => this.createFromSnapshotAgainWork(row, fromSnapshot, image);
        // A create on the universal image without an environment is made again from the start; one
        // with a private image or an environment needs what only the caller's request held, and
        // ends in the error state below.
        return row.imageId === null && row.environmentVersionId === null ? (image) => this.createAgainWork(row, image) : null;
      }
      default:
        return null;
    }
  }

  /** What a create cut short left is removed, and the machine is created as the caller asked. */
  private async createAgainWork(row: Instance, image: HostImage): Promise<OperationOutcome> {
    await this.host.destroy(row.id);
    const identity = await this.identity(row);
    return startedOutcome(image, identity, await this.host.create(row.id, image, shapeOf(row), identity));
  }

  /** What a create from a snapshot cut short left is removed, and it is made again from the snapshot (which must still exist). */
  private async createFromSnapshotAgainWork(row: Instance, input: SnapshotCreateInput, image: HostImage): Promise<OperationOutcome> {
    const snapshot = await this.provisioning.snapshots.byId(row.accountId, input.snapshot_id);
    if (!snapshot) throw new Error('interrupted by a service restart, and its snapshot is gone');
    await this.host.destroy(row.id);
    return this.fromSnapshotWork(row, snapshot, image, input.memory);
  }

  /** What a fork cut short left is removed, and the copy is made again from its source (which must still run). */
  private async forkAgainWork(copy: Instance, input: ForkInput, current: HostImage): Promise<OperationOutcome> {
    const source = await this.stores.instances.findById(input.source_id);
    if (!source || source.accountId !== copy.accountId || !(await this.host.isRunning(source.id))) {
      throw new Error('interrupted by a service restart, and its source no longer runs to be forked again');
    }
    await this.host.destroy(copy.id);
    const image = forkImage(source, input.memory, current);
    const identity = await this.identity(copy);
    return startedOutcome(image, identity, await this.host.fork(source.id, copy.id, image, shapeOf(copy), identity, { memory: input.memory }));
  }

  private async lifecycle(
    instance: Instance,
    operation: LifecycleOperation,
    transitional: Parameters<InstanceOperations['claim']>[2],
    work: () => Promise<OperationOutcome>,
  ): Promise<LifecycleAnswer> {
    const claimed = await this.operations.claim(instance, operation, transitional);
    if (instance.desiredState !== 'running' && transitional.desiredState === 'running') {
      // It counts as running from its claim: starts claimed at once must still fit together.
      await this.provisioning.placement.confirmStart(claimed).catch(async (error: unknown) => {
        await this.stores.instances.update(instance.id, { status: instance.status, desiredState: instance.desiredState, operation: null, operationStartedAt: null });
        throw error;
      });
    }
    const running = this.operations.run(claimed, work);
    const finished = await this.operations.waitAtMost(running, this.settings.lifecycleWaitMs);
    if (finished) {
      const final = await running;
      // Still open when its host could not be reached: the reconciler finishes it later (202).
      return { instance: final ?? claimed, finished: final === null || final.operation === null };
    }
    return { instance: (await this.stores.instances.findById(instance.id)) ?? claimed, finished: false };
  }

  private async insert(
    accountId: string,
    requestedName: string | null,
    shape: MachineShape,
    operation: 'create' | 'fork',
    /** What the new machine is a copy of (a machine, a snapshot): placed on its host. */
    source: { workerId: string | null } | null,
    fields: (name: string) => Omit<Parameters<InstanceStore['create']>[1], 'id' | 'accountId' | 'name' | 'status' | 'desiredState' | 'vcpu' | 'memoryMib' | 'diskMib' | 'workerId'>,
  ): Promise<Instance> {
    const now = this.clock.now();
    return this.transactions.run(async (tx) => {
      await this.stores.accounts.lockForUpdate(tx, accountId);
      checkNewMachine(this.limits, await this.stores.instances.footprint(accountId, tx), shape);
      let name = requestedName;
      if (name && (await this.stores.instances.findByName(accountId, name, tx))) throw new KisteError('K02', { param: 'name' });
      while (!name || (await this.stores.instances.findByName(accountId, name, tx))) name = generateInstanceName();
      const workerId = await this.provisioning.placement.place(tx, shape, source);
      const created = await this.stores.instances.create(tx, {
        id: newId(),
        accountId,
        name,
        status: 'starting',
        desiredState: 'running',
        ...shape,
        ...fields(name),
        workerId,
        operation,
        operationOwner: this.operations.owner,
        operationStartedAt: now,
        createdAt: now,
      });
      await appendEvent(tx, accountId, { type: 'instance.created', resourceType: 'instance', resourceId: created.id, data: { name } });
      return created;
    });
  }

  private async checkCanStart(instance: Instance): Promise<void> {
    const footprint = await this.stores.instances.footprint(instance.accountId);
    const others = footprint.runningMachines - (instance.desiredState === 'running' ? 1 : 0);
    checkStart(this.limits, { ...footprint, runningMachines: others });
    await this.provisioning.placement.checkStart(instance);
  }

  /**
   * Device keys added or deleted since the machine started are taken now (the spec: at the next
   * tunnel opening or start). The host name stays what the guest has until its next cold boot.
   */
  async refreshAuthorizedKeys(instance: Instance): Promise<void> {
    const identity = await this.identity(instance);
    await this.host.refreshIdentity(instance.id, { ...identity, hostname: instance.guestHostname });
  }

  private async identity(instance: Instance): Promise<GuestIdentity> {
    const deviceKeys = await this.stores.deviceKeys.list(instance.accountId);
    const current = (await this.stores.instances.findById(instance.id)) ?? instance;
    return { hostname: current.name, authorizedKeys: [current.sshPublicKey, ...deviceKeys.map((key) => key.publicKey)] };
  }

  private async bootOutcome(instance: Instance, image: HostImage, shape: MachineShape, how: 'boot' | 'resume'): Promise<OperationOutcome> {
    const identity = await this.identity(instance);
    const started = how === 'resume'
      ? await this.host.resume(instance.id, shape, image, identity)
      : await this.host.boot(instance.id, shape, image, identity);
    return runningOutcome(started, how === 'boot' ? { image, hostname: identity.hostname } : null, { resumed: how === 'resume' });
  }

  private async stopOutcome(instance: Instance, saveSession: boolean): Promise<OperationOutcome> {
    const { sessionSaved } = await this.host.stop(instance.id, { saveSession });
    return {
      update: { status: 'stopped', desiredState: 'stopped', sessionSaved },
      event: { type: 'instance.stopped', data: { session_saved: sessionSaved } },
    };
  }

  private startedOrFailed(final: Instance | null): Instance {
    if (!final) throw new KisteError('K01');
    // Cut short by a worker that went away: the reconciler makes it once the worker is back.
    if (final.operation !== null) throw new KisteError('N01', { message: `Instance ${final.name} is being made; the compute worker went away meanwhile and it is finished once the worker is back` });
    if (final.status !== 'running') throw new KisteError('K08', { message: `Instance ${final.name} could not be started: ${final.errorMessage ?? 'unknown error'}` });
    return final;
  }
}

/** A new machine (create, fork) runs: its image and host name are what it started with. */
function startedOutcome(image: HostImage, identity: GuestIdentity, started: ForkedMachine): OperationOutcome {
  const paused = started.sourcePausedMs === undefined ? {} : { source_paused_ms: started.sourcePausedMs };
  const outcome = runningOutcome(started, { image: started.image ?? image, hostname: identity.hostname }, { resumed: false, started_from: started.startedFrom, ...paused });
  return { ...outcome, update: { ...outcome.update, startedFrom: started.startedFrom } };
}

/** The row after a start: running, with the host keys it answered (and, after a boot, its image and host name). */
function runningOutcome(started: StartedMachine, booted: { image: HostImage; hostname: string } | null, data: Record<string, unknown>): OperationOutcome {
  return {
    update: {
      status: 'running',
      desiredState: 'running',
      sessionSaved: false,
      errorMessage: null,
      sshHostKeys: started.hostKeys.map((key) => ({ algorithm: key.algorithm, public_key: key.publicKey })),
      ...(booted ? { imageVersion: booted.image.version, artifactKey: booted.image.artifactKey, guestHostname: booted.hostname } : {}),
    },
    event: { type: 'instance.running', data },
  };
}

/** A copy of the memory runs the kernel and devices the source runs; a fresh boot takes the newest image. */
function forkImage(source: Instance, memory: boolean, current: HostImage): HostImage {
  return memory && source.imageVersion
    ? { profile: source.imageProfile as ImageProfile, version: source.imageVersion, artifactKey: source.artifactKey ?? source.imageVersion }
    : current;
}

/** The shape a machine's row records (vCPUs, memory, disk). */
export function shapeOf(instance: Instance): MachineShape {
  return { vcpu: instance.vcpu, memoryMib: instance.memoryMib, diskMib: instance.diskMib };
}

function validKey(key: string): string {
  try {
    return parsePublicKey(key).line;
  } catch (error) {
    if (error instanceof PublicKeyError) throw new KisteError('A12', { message: `Invalid SSH public key: ${error.message}`, param: 'ssh_public_key' });
    throw error;
  }
}
