// Machines on registered workers on other hosts (KISTE_COMPUTE=workers, issue 22). The control
// plane keeps a client per worker (fleet-roster.ts: TLS with the certificate pinned on first
// contact, every request signed, each worker's hello asked every few seconds, its lease in the
// database renewed while it answers, a run of it adopted under a new fencing epoch), and routes every machine call to the worker whose id the machine's row holds. A worker
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
  Accelerator, CreatedMachine, ForkedMachine, SnapshotRef, TakenSnapshot, GuestIdentity, HostCapacity, HostImage, ImageBuildState, ImageProfile, MachineShape, StartedMachine,
} from './machine-host';
import type { ServiceCompute, ServiceHost } from './service-compute';
import { WorkerUnreachableError } from './worker-client';
import type { MoveLimits } from './machine-moves';
import { relayMachineMove } from './machine-move-relay';
import type { WorkerMachineHost } from './worker-machine-host';
import { FleetRoster, type Member, type RosterSettings } from './fleet-roster';
import type { ScreenVideo, ScreenVideoEvents, ScreenVideoRequest } from '../media/screen-video';

/** How often each worker is asked whether it answers (its lease lasts several of these). */
const HEARTBEAT_MS = 5_000;

export type { RegisteredWorker, WorkerContact, WorkerRegistry } from './fleet-roster';

export interface FleetSettings extends RosterSettings {
  heartbeatMs?: number;
}

export class FleetMachineHost implements ServiceHost {
  private readonly roster: FleetRoster;

  constructor(private readonly settings: FleetSettings) {
    this.roster = new FleetRoster(settings);
  }

  get accelerator(): Accelerator {
    return this.up()[0]?.host.accelerator ?? this.settings.accelerator;
  }

  reachable(): boolean {
    return this.up().length > 0;
  }

  reachableFor(workerId: string | null): boolean {
    return this.roster.answers(workerId);
  }

  /** One round of heartbeats (FleetRoster); the ids of the workers that came back. */
  heartbeat(): Promise<string[]> {
    return this.roster.heartbeat();
  }

  /** Ends every worker's kept connections (at stop). */
  close(): void {
    this.roster.close();
  }

  /** The workers answering now. */
  private up(): Member[] {
    return this.roster.up();
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
    return this.roster.member(workerId);
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

  async takeSnapshot(id: string, snapshotId: string, shape: MachineShape, options: { memory: boolean }): Promise<TakenSnapshot> {
    return (await this.on(id)).takeSnapshot(id, snapshotId, shape, options);
  }

  /** The new machine is placed on the worker holding the snapshot's files (Placement.place with the snapshot as source). */
  async createFromSnapshot(id: string, snapshotId: string, images: { memory: HostImage; boot: HostImage }, shape: MachineShape, identity: GuestIdentity, options: { memory: boolean }): Promise<CreatedMachine> {
    return (await this.on(id)).createFromSnapshot(id, snapshotId, images, shape, identity, options);
  }

  async deleteSnapshot(snapshot: SnapshotRef): Promise<void> {
    if (snapshot.workerId === null) throw new WorkerUnreachableError(`snapshot ${snapshot.id} is held by no worker`);
    // Its files went with a lost host.
    if (await this.settings.registry.isLost(snapshot.workerId)) return;
    await this.member(snapshot.workerId).host.deleteSnapshot(snapshot);
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
    const removed = await Promise.all(this.up().map(async (member) => {
      const own = new Set(await this.roster.ownedOn(member.registered.id));
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

  async openVideo(id: string, request: ScreenVideoRequest, events: ScreenVideoEvents): Promise<ScreenVideo> {
    return (await this.on(id)).openVideo(id, request, events);
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
