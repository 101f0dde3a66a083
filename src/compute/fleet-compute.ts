// Machines on registered workers on other hosts (KISTE_COMPUTE=workers, issue 22). The control
// plane keeps a client per worker (TLS with the certificate pinned on first contact, every request
// signed), asks each one's hello every few seconds (its lease in the database is renewed while it
// answers), and routes every machine call to the worker whose id the machine's row holds. A worker
// that does not answer fails its machines' calls at once as WorkerUnreachableError (503 N01); its
// machines run on, and when it answers again the reconciler adopts them and finishes what was cut
// short. New machines go where placement put them (the create's transaction; L13 when none has room).
import type { Duplex } from 'node:stream';
import type { ComputeCounts } from '../observability/metrics';
import { QemuMachineDisplay } from './guest-display';
import type { GuestAgent } from './guest-agent';
import type { BuiltLayer, LayerBuildRequest } from './layer-builder';
import type { DisplaySize, MachineDisplay } from './machine-display';
import type {
  Accelerator, CreatedMachine, ForkedMachine, GuestIdentity, HostCapacity, HostImage, ImageBuildState, ImageProfile, MachineShape, StartedMachine,
} from './machine-host';
import { RemoteImages } from './remote-images';
import type { ServiceCompute, ServiceHost } from './service-compute';
import { SupervisedWorker } from './supervised-worker';
import { introduceWorker, WorkerClient, WorkerUnreachableError, type WorkerHello } from './worker-client';
import { WORKER_PROTOCOL_VERSION } from './worker-wire';
import type { MoveLimits } from './machine-moves';
import { relayMachineMove } from './machine-move-relay';
import { withDeadline } from '../deadline';
import { WorkerMachineHost } from './worker-machine-host';
import { adoptWorker } from './worker-adoption';

/** How often each worker is asked whether it answers (its lease lasts several of these). */
const HEARTBEAT_MS = 5_000;
/** A heartbeat's hello: far below the lease (30 s), so a slow worker loses only its own. */
const HELLO_MS = 4_000;
/** Other calls' default deadline (machine operations give their own). */
const CALL_MS = 10_000;

/** A worker as the compute layer calls it: where, with which secret, trusting which certificate. */
export interface RegisteredWorker {
  id: string;
  name: string;
  address: string;
  secret: Buffer;
  certificatePem: string | null;
  /** The fencing epoch the worker was last adopted with (its row's). */
  epoch: number;
  /** Declared lost by the operator: nothing is placed on it, and its machines' files are taken as gone. */
  lost: boolean;
}

export interface WorkerContact {
  offer: { vcpu: number; memoryMib: number; diskMib: number };
  protocolVersion: number;
  /** Pinned now (first contact). */
  certificatePem?: string;
}

/** What the fleet needs of the registry of workers (the database's, through the domain). */
export interface WorkerRegistry {
  registered(): Promise<RegisteredWorker[]>;
  answered(id: string, contact: WorkerContact): Promise<void>;
  failed(id: string, message: string): Promise<void>;
  /** The worker a machine lives on (null: none, or no such machine). */
  workerOf(machineId: string): Promise<string | null>;
  machineIdsOn(workerId: string): Promise<string[]>;
  /** Machines with a move under way (their files may be on two workers). */
  movingMachineIds(): Promise<string[]>;
  /** Moves the worker's epoch from `from` to `to`; false when another replica did first (it adopts the worker). */
  fence(id: string, from: number, to: number): Promise<boolean>;
  isLost(workerId: string): Promise<boolean>;
}

export interface FleetSettings {
  registry: WorkerRegistry;
  profile: ImageProfile;
  /** What the control plane probed, until a worker says what it runs machines with. */
  accelerator: Accelerator;
  logger: { info(object: object, message: string): void; warn(object: object, message: string): void };
  heartbeatMs?: number;
}

/** One worker: its client while it answers (null otherwise), its images and host over that client. */
class Member {
  /** The client while the worker answers its heartbeat (SupervisedWorker's source). */
  worker: WorkerClient | null = null;
  /** Its hello's started_at: a new run (it was restarted) is a return even when no heartbeat was missed. */
  run: string | null = null;
  readonly calls = new SupervisedWorker(this);
  readonly images = new RemoteImages(this.calls);
  readonly host: WorkerMachineHost;

  constructor(public registered: RegisteredWorker, accelerator: Accelerator) {
    this.host = new WorkerMachineHost(this.calls, this.images, accelerator);
  }
}

export class FleetMachineHost implements ServiceHost {
  private readonly members = new Map<string, Member>();

  constructor(private readonly settings: FleetSettings) {}

  get accelerator(): Accelerator {
    return this.up()[0]?.host.accelerator ?? this.settings.accelerator;
  }

  reachable(): boolean {
    return this.up().length > 0;
  }

  reachableFor(workerId: string | null): boolean {
    return workerId !== null && Boolean(this.members.get(workerId)?.worker);
  }

  /**
   * One round of heartbeats: every registered worker is asked its hello (first contact pins its
   * certificate); the ids of the workers that came back (or were restarted) are returned.
   */
  async heartbeat(): Promise<string[]> {
    const registered = await this.settings.registry.registered();
    for (const id of this.members.keys()) if (!registered.some((worker) => worker.id === id)) this.members.delete(id);
    const back = await Promise.all(registered.map(async (worker) => ((await this.beat(worker)) ? worker.id : null)));
    return back.filter((id): id is string => id !== null);
  }

  private async beat(worker: RegisteredWorker): Promise<boolean> {
    let member = this.members.get(worker.id);
    if (!member) {
      member = new Member(worker, this.settings.accelerator);
      this.members.set(worker.id, member);
    }
    member.registered = worker;
    try {
      let hello: WorkerHello | null = null;
      let pinned: string | undefined;
      if (worker.certificatePem === null) {
        // First contact: the introduction's own signed hello is this beat's.
        ({ hello, certificatePem: pinned } = await introduceWorker(worker.address, worker.secret, HELLO_MS));
        worker.certificatePem = pinned;
        this.settings.logger.info({ worker: worker.name, fingerprint: hello.tls_fingerprint }, 'first contact with a worker: its certificate is pinned');
      }
      const client = member.worker ?? new WorkerClient({ endpoint: { address: worker.address, certificatePem: worker.certificatePem! }, secret: worker.secret, timeoutMs: CALL_MS });
      // A short deadline of its own: one worker that is slow to answer must not hold back the other workers' leases.
      hello ??= await withDeadline(client.hello(), HELLO_MS, () => new WorkerUnreachableError(`the worker did not answer its hello within ${HELLO_MS} ms`));
      if (hello.protocol_version !== WORKER_PROTOCOL_VERSION) throw new Error(`the worker speaks protocol ${hello.protocol_version}, this control plane ${WORKER_PROTOCOL_VERSION}`);
      let adopted = false;
      if (hello.epoch === 0 || hello.epoch !== worker.epoch) {
        // A run nobody adopted (it started), or one the records moved past (declared lost, or revived
        // from an older state): fenced under the next epoch, then rid of what no record owns.
        adopted = await this.adoptRun(worker, client, hello.epoch);
        if (!adopted) return false; // another replica adopts it now; this one reads the new epoch next time
      } else {
        client.epoch = hello.epoch;
      }
      await this.settings.registry.answered(worker.id, {
        offer: { vcpu: hello.offer.vcpu, memoryMib: hello.offer.memory_mib, diskMib: hello.offer.disk_mib },
        protocolVersion: hello.protocol_version,
        ...(pinned ? { certificatePem: pinned } : {}),
      });
      const back = adopted || member.worker === null || member.run !== hello.started_at;
      member.worker = client;
      member.run = hello.started_at;
      void member.images.refresh(this.settings.profile).catch(() => null); // read at its own pace
      if (back) this.settings.logger.info({ worker: worker.name }, 'worker answers: its machines are adopted and what it cut short is finished');
      return back;
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      if (member.worker) this.settings.logger.warn({ worker: worker.name, err: message }, 'worker does not answer: calls for its machines answer N01 until it does');
      member.worker?.close();
      member.worker = null;
      await this.settings.registry.failed(worker.id, message).catch(() => undefined);
      return false;
    }
  }

  /**
   * Adopts a run of the worker under the epoch after both its own and its row's: the row first, by
   * compare-and-set (false: another replica got there first), then the worker is fenced and removes
   * every machine none of its rows owns (a machine on its way to it counts as its own).
   */
  private async adoptRun(worker: RegisteredWorker, client: WorkerClient, helloEpoch: number): Promise<boolean> {
    const epoch = Math.max(worker.epoch, helloEpoch) + 1;
    if (!(await this.settings.registry.fence(worker.id, worker.epoch, epoch))) return false;
    worker.epoch = epoch;
    const owned = [...(await this.settings.registry.machineIdsOn(worker.id)), ...(await this.settings.registry.movingMachineIds())];
    const removed = await adoptWorker(client, epoch, owned);
    this.settings.logger.info({ worker: worker.name, epoch, removed }, removed.length ? 'worker adopted: machines no record owns were removed' : 'worker adopted');
    return true;
  }

  /** Ends every worker's kept connections (at stop). */
  close(): void {
    for (const member of this.members.values()) member.worker?.close();
    this.members.clear();
  }

  /** The workers answering now. */
  private up(): Member[] {
    return [...this.members.values()].filter((member) => member.worker !== null);
  }

  /**
   * The host of the worker a machine lives on (read from its row at every call: a machine that
   * moved to another worker is found there by every replica at once); N01 when it does not answer.
   */
  private async on(machineId: string): Promise<WorkerMachineHost> {
    const workerId = await this.settings.registry.workerOf(machineId);
    if (workerId === null) throw new WorkerUnreachableError(`machine ${machineId} is placed on no worker`);
    return this.member(workerId).host;
  }

  private member(workerId: string): Member {
    const member = this.members.get(workerId);
    if (!member?.worker) throw new WorkerUnreachableError(`worker ${workerId} does not answer now`);
    return member;
  }

  /**
   * Copies a stopped machine from one worker to another (drain): what the source sends is relayed to
   * the target at the target's pace, its first and last messages checked on the way; resolves once
   * the target has put the machine in place. The source keeps its files (see destroyOn).
   */
  async move(id: string, from: string, to: string, limits: MoveLimits): Promise<void> {
    await relayMachineMove(this.member(from).calls, this.member(to).calls, id, limits);
  }

  /** Removes a machine's files from one worker (the source of a move, once the target holds it). */
  async destroyOn(workerId: string, id: string): Promise<void> {
    await this.member(workerId).host.destroy(id);
  }

  async isolationProblem(): Promise<{ reason: string; hint: string } | null> {
    const up = this.up();
    if (up.length === 0) return { reason: 'no registered worker answers now', hint: 'start a worker (npm run admin -- worker-add, then kiste-worker with its join token) or check its address' };
    const problems = await Promise.all(up.map((member) => member.host.isolationProblem().catch(() => null)));
    return problems.every((problem) => problem !== null) ? problems[0]! : null;
  }

  async capacity(): Promise<HostCapacity> {
    const free = await Promise.all(this.up().map((member) => member.host.capacity().then((c) => c.freeMemoryMib, () => 0)));
    return { freeMemoryMib: Math.max(0, ...free) };
  }

  /** The image a worker answering now serves (every worker builds its own; the same recipe gives the same version). */
  currentImage(profile: ImageProfile): HostImage | null {
    for (const member of this.up()) {
      const image = member.images.currentImage(profile);
      if (image) return image;
    }
    return null;
  }

  imageBuildState(profile: ImageProfile): ImageBuildState {
    const states = this.up().map((member) => member.images.imageBuildState(profile));
    return states.find((state) => state.state === 'ready') ?? states[0] ?? { state: 'building', step: 'waiting for a worker to answer', error: null };
  }

  async imageManifest(image: HostImage): ReturnType<ServiceHost['imageManifest']> {
    for (const member of this.up()) {
      const manifest = await member.images.imageManifest(image).catch(() => null);
      if (manifest) return manifest;
    }
    return null;
  }

  buildLayer(request: LayerBuildRequest): Promise<BuiltLayer> {
    const member = this.up()[0];
    if (!member) return Promise.reject(new WorkerUnreachableError('no worker answers now to build the layer'));
    return member.images.buildLayer(request);
  }

  async refreshImage(profile: ImageProfile): Promise<HostImage | null> {
    await Promise.all(this.up().map((member) => member.images.refresh(profile).catch(() => null)));
    return this.currentImage(profile);
  }

  agent(id: string): GuestAgent {
    const on = () => this.on(id).then((host) => host.agent(id));
    return {
      exec: (params, options) => on().then((agent) => agent.exec(params, options)),
      run: (params, options) => on().then((agent) => agent.run(params, options)),
      metrics: (sampleMs, options) => on().then((agent) => agent.metrics(sampleMs, options)),
      openTcp: (port, host, options) => on().then((agent) => agent.openTcp(port, host, options)),
    };
  }

  /**
   * A new machine starts from the image its worker serves: each worker builds its own, so the
   * version asked for (another worker's) may not be there. A private image's layer sits on the
   * version it was built on and is asked for as it is.
   */
  async create(id: string, image: HostImage, shape: MachineShape, identity: GuestIdentity): Promise<CreatedMachine> {
    const host = await this.on(id);
    const served = host.currentImage(image.profile);
    const used = !image.layer && served && served.version !== image.version ? served : image;
    const created = await host.create(id, used, shape, identity);
    return used === image ? created : { ...created, image: used };
  }

  async fork(sourceId: string, targetId: string, image: HostImage, shape: MachineShape, identity: GuestIdentity, options: { memory: boolean }): Promise<ForkedMachine> {
    return (await this.on(targetId)).fork(sourceId, targetId, image, shape, identity, options);
  }

  async boot(id: string, shape: MachineShape, image: HostImage, identity: GuestIdentity): Promise<StartedMachine> {
    return (await this.on(id)).boot(id, shape, image, identity);
  }

  async resume(id: string, shape: MachineShape, image: HostImage, identity: GuestIdentity): Promise<StartedMachine> {
    return (await this.on(id)).resume(id, shape, image, identity);
  }

  async refreshIdentity(id: string, identity: GuestIdentity): Promise<void> {
    return (await this.on(id)).refreshIdentity(id, identity);
  }

  async hasSession(id: string): Promise<boolean> {
    return (await this.on(id)).hasSession(id);
  }

  async discardSession(id: string): Promise<void> {
    return (await this.on(id)).discardSession(id);
  }

  async stop(id: string, options: { saveSession: boolean }): Promise<{ sessionSaved: boolean }> {
    return (await this.on(id)).stop(id, options);
  }

  async isRunning(id: string): Promise<boolean> {
    return (await this.on(id)).isRunning(id);
  }

  async adopt(id: string): Promise<boolean> {
    return (await this.on(id)).adopt(id);
  }

  async checkpoint(id: string): Promise<{ taken: boolean }> {
    return (await this.on(id)).checkpoint(id);
  }

  /** Each worker answering now removes what none of its own machines' rows owns (a machine on its way to it counts as its own). */
  async removeStrays(owned: readonly string[]): Promise<string[]> {
    const moving = await this.settings.registry.movingMachineIds();
    const removed = await Promise.all(this.up().map(async (member) => {
      const own = new Set([...(await this.settings.registry.machineIdsOn(member.registered.id)), ...moving]);
      return member.host.removeStrays(owned.filter((id) => own.has(id)));
    }));
    return removed.flat();
  }

  async removeUnusedLayers(): Promise<void> {
    await Promise.all(this.up().map((member) => member.host.removeUnusedLayers()));
  }

  async destroy(id: string): Promise<void> {
    const workerId = await this.settings.registry.workerOf(id);
    // Its files went with its host: if that host ever answers again, its adoption removes them.
    if (workerId !== null && (await this.settings.registry.isLost(workerId))) return;
    await (await this.on(id)).destroy(id);
  }

  async consoleTail(id: string, lines: number): Promise<string> {
    return (await this.on(id)).consoleTail(id, lines);
  }

  async knownMachineIds(): Promise<string[]> {
    return (await Promise.all(this.up().map((member) => member.host.knownMachineIds()))).flat();
  }

  async imageDisplay(id: string): Promise<DisplaySize | null> {
    return (await this.on(id)).imageDisplay(id);
  }

  async openScreen(id: string): Promise<Duplex> {
    return (await this.on(id)).openScreen(id);
  }
}

export class FleetCompute implements ServiceCompute {
  readonly kind = 'workers';
  readonly inProcess = null;
  readonly host: FleetMachineHost;
  readonly display: MachineDisplay;
  private readonly backListeners: ((workerId: string) => void)[] = [];
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;

  constructor(private readonly settings: FleetSettings & { machineDisplay?: MachineDisplay }) {
    this.host = new FleetMachineHost(settings);
    this.display = settings.machineDisplay ?? new QemuMachineDisplay(this.host);
  }

  /** One round of heartbeats now, and the images of the workers that answered read (start()'s caller reconciles and starts machines), then one every few seconds. */
  async start(profile: ImageProfile): Promise<boolean> {
    await this.host.heartbeat().catch((error: Error) => this.settings.logger.warn({ err: error.message }, 'the workers could not be read'));
    await this.host.refreshImage(profile);
    this.schedule();
    return this.host.reachable();
  }

  onBack(listener: (workerId: string) => void): void {
    this.backListeners.push(listener);
  }

  async counts(): Promise<ComputeCounts | null> {
    return null;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.host.close();
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      void this.host.heartbeat()
        .then((back) => {
          for (const workerId of back) for (const listener of this.backListeners) listener(workerId);
        })
        .catch((error: Error) => this.settings.logger.warn({ err: error.message }, 'the workers could not be read'))
        .finally(() => this.schedule());
    }, this.settings.heartbeatMs ?? HEARTBEAT_MS).unref();
  }
}
