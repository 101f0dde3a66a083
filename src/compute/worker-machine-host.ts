// The control plane's MachineHost when machines run on a kiste-worker (issue 22): every job of the
// host — its checks, images, guest agents, machines and screens — over worker-api.yaml. The
// domain holds it as it holds the in-process QemuMachineHost; what the worker answers is checked
// by the worker client before anything here reads it.
import type { Duplex } from 'node:stream';
import type { components } from '../generated/worker-api';
import type { DisplayHost } from './guest-display';
import type { GuestAgent } from './guest-agent';
import type { BuiltLayer, LayerBuildRequest } from './layer-builder';
import type { DisplaySize } from './machine-display';
import type {
  Accelerator, CreatedMachine, ForkedMachine, SnapshotRef, TakenSnapshot, GuestIdentity, HostCapacity, HostImage, HostImages, ImageBuildState, ImageProfile, MachineHost, MachineShape, StartedMachine,
} from './machine-host';
import { RemoteGuestAgents } from './remote-guest-agents';
import { RemoteMachines } from './remote-machines';
import type { WorkerCalls } from './worker-client';
import type { ScreenVideo, ScreenVideoEvents, ScreenVideoRequest } from '../media/screen-video';

/** The worker's images as the control plane keeps them: read synchronously, refreshed from the worker. */
export interface WorkerImages extends HostImages {
  /** Asks the worker for the profile's image and build now; the served image, or null while none is ready. */
  refresh(profile: ImageProfile): Promise<HostImage | null>;
}

export class WorkerMachineHost implements MachineHost, DisplayHost {
  private readonly machines: RemoteMachines;
  private readonly agents: RemoteGuestAgents;
  private knownAccelerator: Accelerator;

  constructor(
    private readonly worker: WorkerCalls,
    private readonly images: WorkerImages,
    /** What the control plane probed, until the worker says what it runs machines with. */
    accelerator: Accelerator,
  ) {
    this.machines = new RemoteMachines(worker);
    this.agents = new RemoteGuestAgents(worker);
    this.knownAccelerator = accelerator;
  }

  get accelerator(): Accelerator {
    return this.knownAccelerator;
  }

  reachableFor(): boolean {
    return this.reachable();
  }

  reachable(): boolean {
    return this.worker.reachable();
  }

  /** The worker's checks now (its accelerator is remembered for `accelerator`). */
  async checks(): Promise<components['schemas']['WorkerChecks']> {
    const checks = (await this.worker.call('GET', '/w1/checks', 'WorkerChecks', undefined, 30_000)) as components['schemas']['WorkerChecks'];
    this.knownAccelerator = checks.accelerator;
    return checks;
  }

  /** What the worker counted in its current run. */
  async counts(): Promise<{ run: string; agentLinksDropped: number }> {
    const counters = (await this.worker.call('GET', '/w1/counters', 'WorkerCounters')) as components['schemas']['WorkerCounters'];
    return { run: counters.started_at, agentLinksDropped: counters.guest_links_dropped.agent };
  }

  async isolationProblem(): Promise<{ reason: string; hint: string } | null> {
    return (await this.checks()).isolation_problem;
  }

  async capacity(): Promise<HostCapacity> {
    return { freeMemoryMib: (await this.checks()).capacity.free_memory_mib };
  }

  currentImage(profile: ImageProfile): HostImage | null {
    return this.images.currentImage(profile);
  }

  imageBuildState(profile: ImageProfile): ImageBuildState {
    return this.images.imageBuildState(profile);
  }

  imageManifest(image: HostImage): ReturnType<HostImages['imageManifest']> {
    return this.images.imageManifest(image);
  }

  buildLayer(request: LayerBuildRequest): Promise<BuiltLayer> {
    return this.images.buildLayer(request);
  }

  refreshImage(profile: ImageProfile): Promise<HostImage | null> {
    return this.images.refresh(profile);
  }

  agent(id: string): GuestAgent {
    return this.agents.agent(id);
  }

  create(id: string, image: HostImage, shape: MachineShape, identity: GuestIdentity): Promise<CreatedMachine> {
    return this.machines.create(id, image, shape, identity);
  }

  fork(sourceId: string, targetId: string, image: HostImage, shape: MachineShape, identity: GuestIdentity, options: { memory: boolean }): Promise<ForkedMachine> {
    return this.machines.fork(sourceId, targetId, image, shape, identity, options);
  }

  takeSnapshot(id: string, snapshotId: string, shape: MachineShape, options: { memory: boolean }): Promise<TakenSnapshot> {
    return this.machines.takeSnapshot(id, snapshotId, shape, options);
  }

  createFromSnapshot(id: string, snapshotId: string, images: { memory: HostImage; boot: HostImage }, shape: MachineShape, identity: GuestIdentity, options: { memory: boolean }): Promise<CreatedMachine> {
    return this.machines.createFromSnapshot(id, snapshotId, images, shape, identity, options);
  }

  deleteSnapshot(snapshot: SnapshotRef): Promise<void> {
    return this.machines.deleteSnapshot(snapshot);
  }

  boot(id: string, shape: MachineShape, image: HostImage, identity: GuestIdentity): Promise<StartedMachine> {
    return this.machines.boot(id, shape, image, identity);
  }

  resume(id: string, shape: MachineShape, image: HostImage, identity: GuestIdentity): Promise<StartedMachine> {
    return this.machines.resume(id, shape, image, identity);
  }

  refreshIdentity(id: string, identity: GuestIdentity): Promise<void> {
    return this.machines.refreshIdentity(id, identity);
  }

  hasSession(id: string): Promise<boolean> {
    return this.machines.hasSession(id);
  }

  discardSession(id: string): Promise<void> {
    return this.machines.discardSession(id);
  }

  stop(id: string, options: { saveSession: boolean }): Promise<{ sessionSaved: boolean }> {
    return this.machines.stop(id, options);
  }

  isRunning(id: string): Promise<boolean> {
    return this.machines.isRunning(id);
  }

  adopt(id: string): Promise<boolean> {
    return this.machines.adopt(id);
  }

  checkpoint(id: string): Promise<{ taken: boolean }> {
    return this.machines.checkpoint(id);
  }

  removeStrays(owned: readonly string[]): Promise<string[]> {
    return this.machines.removeStrays(owned);
  }

  removeUnusedLayers(): Promise<void> {
    return this.machines.removeUnusedLayers();
  }

  destroy(id: string): Promise<void> {
    return this.machines.destroy(id);
  }

  consoleTail(id: string, lines: number): Promise<string> {
    return this.machines.consoleTail(id, lines);
  }

  knownMachineIds(): Promise<string[]> {
    return this.machines.knownMachineIds();
  }

  imageDisplay(id: string): Promise<DisplaySize | null> {
    return this.machines.imageDisplay(id);
  }

  openScreen(id: string): Promise<Duplex> {
    return this.machines.openScreen(id);
  }

  openVideo(id: string, request: ScreenVideoRequest, events: ScreenVideoEvents): Promise<ScreenVideo> {
    return this.machines.openVideo(id, request, events);
  }
}
