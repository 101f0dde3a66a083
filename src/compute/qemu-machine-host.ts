// MachineHost on this host's QEMU: one detached QEMU per machine (it outlives the service; a
// restart adopts it), guest RAM in a file so a memory session saves and resumes in well under a
// second, and new machines restored from boot snapshots when one of their configuration is ready.
// The parts live beside it: image-catalogue (images), disk-chain + layers (disk layers),
// instant-copies (machines started as copies: of a boot snapshot, of a running machine; and the
// boot snapshots themselves), guest-personalisation (identity), agent-registry (agents),
// console-tail (the serial log); this file runs QEMU processes and keeps them in order.
import { MachineMoves, type MoveLimits, type MoveStart, type MovedFileRole, type OutgoingMachine } from './machine-moves';
import { LayerBuilder, type BuiltLayer, type LayerBuildRequest } from './layer-builder';
import type { ImageManifest } from '../../images';
import { existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { freemem } from 'node:os';
import { connect } from 'node:net';
import type { Duplex } from 'node:stream';
import { encodeScreen, type ScreenEncodingSettings } from '../media/screen-encoding';
import type { ScreenVideo, ScreenVideoEvents, ScreenVideoRequest } from '../media/screen-video';
import { dirname, join } from 'node:path';
import type { AgentClient } from './agent-client';
import { AgentRegistry } from './agent-registry';
import type { BootSnapshot, SnapshotShape } from './boot-snapshots';
import { readConsoleTail } from './console-tail';
import { CHANGES_BITMAP, DiskChains, nodeName, trackChanges } from './disk-chain';
import type { DisplayHost } from './guest-display';
import { GuestPersonalisation, type PersonaliseOptions } from './guest-personalisation';
import { ImageCatalogue, readImageManifest } from './image-catalogue';
import { InstantCopies } from './instant-copies';
import { LayerStore } from './layers';
import type { DisplaySize } from './machine-display';
import type { MachineJail, QemuFiles } from './jail';
import type {
  Accelerator, CreatedMachine, ForkedMachine, GuestIdentity, HostCapacity, HostImage, ImageBuildState, ImageProfile, MachineHost, MachineShape, SnapshotRef, StartedMachine, TakenSnapshot,
} from './machine-host';
import { NamedSnapshots } from './named-snapshots';
import {
  activeLayer,
  adoptMachine,
  createOverlay,
  dirtyBitmapCount,
  findOwnProcess,
  killMachine,
  machineFiles,
  MachineAlreadyRunningError,
  MachineSpec,
  QemuMachine,
  reapOrphans,
  type StartOptions,
  restoreMemory,
  settleInterruptedSave,
  saveMemory,
  snapshotActive,
  startMachine,
  stopMachine,
} from './qemu';

const MIB = 1048576;

export interface QemuHostOptions {
  dataDir: string;
  imagesDir: string;
  accelerator: Accelerator;
  /** Guest RAM in a file (share=on): saves write device state only. */
  fileBackedMemory?: boolean;
  /** Cold boot to "SSH listens, commands accepted"; generous under TCG. */
  bootTimeoutMs?: number;
  /** Restore new machines from boot snapshots and make those (default true; needs file-backed memory). */
  bootSnapshots?: boolean;
  /**
   * Before a template is saved as a boot snapshot: waits until everything its image starts is up
   * (the desktop, for images with a screen) beyond SSH and the agent.
   */
  templateSettled?: (id: string, image: HostImage) => Promise<void>;
  logger: { info(object: object, message: string): void; warn(object: object, message: string): void };
  /** Every QEMU runs in it (its own user, files, network rules, limits). */
  jail: MachineJail;
  /** A machine's agent link was dropped because the guest misbehaved (the service counts these). */
  onAgentLinkDropped?: (id: string, reason: string) => void;
  /** Where the video encoders of desktop streams run (per account); unset: as this process, niced. */
  encoders?: ScreenEncodingSettings['encoders'];
}

/** Where a host keeps its machines' folders and disk layers. */
export function machineHostFolders(dataDir: string): { machines: string; layers: string; snapshots: string } {
  return { machines: join(dataDir, 'machines'), layers: join(dataDir, 'layers'), snapshots: join(dataDir, 'snapshots') };
}

export class QemuMachineHost implements MachineHost, DisplayHost {
  readonly accelerator: Accelerator;
  private readonly machinesDir: string;
  private readonly layers: LayerStore;
  private readonly chains: DiskChains;
  private readonly moves: MachineMoves;
  private readonly images: ImageCatalogue;
  private readonly agents: AgentRegistry;
  private readonly personalisation: GuestPersonalisation;
  private readonly running = new Map<string, QemuMachine>();
  /** Per machine: the tail of its queue of chain-changing work (checkpoints, forks, stops…). */
  private readonly queues = new Map<string, Promise<unknown>>();
  /** Per machine: the screen of the image its disk ends on (found once from the disk's chain). */
  private readonly displays = new Map<string, DisplaySize | null>();
  private readonly copies: InstantCopies;
  private readonly snapshots: NamedSnapshots;
  private readonly layerBuilder: LayerBuilder;

  private readonly jail: MachineJail;

  constructor(private readonly options: QemuHostOptions) {
    this.accelerator = options.accelerator;
    this.jail = options.jail;
    const folders = machineHostFolders(options.dataDir);
    this.machinesDir = folders.machines;
    this.layers = new LayerStore(folders.layers, options.imagesDir, folders.snapshots);
    this.chains = new DiskChains(this.layers, this.machinesDir, options.logger);
    this.images = new ImageCatalogue(options.imagesDir);
    this.agents = new AgentRegistry((id) => machineFiles(this.machineDir(id)).agentSocket, options.onAgentLinkDropped);
    this.moves = new MachineMoves({ jail: this.jail, layers: this.layers, chains: this.chains, imagesDir: options.imagesDir, machineDir: (id) => this.machineDir(id) });
    this.copies = new InstantCopies({
      exclusive: (id, work) => this.exclusive(id, work),
      machine: (id) => this.machine(id),
      machineDir: (id) => this.machineDir(id),
      newDisk: (id, backing, sizeBytes, diskOptions) => this.newDisk(id, backing, sizeBytes, diskOptions),
      createDisk: (id, image, diskMib) => this.createDisk(id, image, diskMib),
      boot: (id, shape, image, identity) => this.boot(id, shape, image, identity),
      continueSession: (id, shape, image, identity, personaliseOptions, beforePersonalise, restore) => this.continueSession(id, shape, image, identity, personaliseOptions, beforePersonalise, restore),
      flushGuest: (id, what) => this.flushGuest(id, what),
      stop: (id, stopOptions) => this.stop(id, stopOptions),
      destroy: (id) => this.destroy(id),
    }, { jail: this.jail, layers: this.layers, chains: this.chains, images: this.images }, options);
    this.snapshots = new NamedSnapshots(this.copies.processes, { jail: this.jail, layers: this.layers, chains: this.chains, copies: this.copies }, { ...options, dir: folders.snapshots });
    this.layerBuilder = new LayerBuilder({
      createDisk: (id, image, diskMib) => this.createDisk(id, image, diskMib),
      boot: (id, shape, image, identity) => this.boot(id, shape, image, identity),
      agent: (id) => this.agent(id),
      flushGuest: (id, what) => this.flushGuest(id, what),
      stop: (id, stopOptions) => this.stop(id, stopOptions),
      diskTop: (id) => this.layers.path(this.chains.state(id).active),
      destroy: (id) => this.destroy(id),
    }, (version) => this.images.versionDir(version), options.logger);
    this.personalisation = new GuestPersonalisation((id) => this.agent(id), { read: (id) => this.chains.state(id), write: (id, state) => this.chains.writeState(id, state) }, options.bootTimeoutMs ?? 300_000);
    mkdirSync(this.machinesDir, { recursive: true });
    mkdirSync(this.layers.dir, { recursive: true });
  }

  /** Reads the newest built image of a profile (after a build, and at start). */
  refreshImage(profile: ImageProfile): Promise<HostImage | null> {
    return this.images.refresh(profile);
  }

  setBuildState(profile: ImageProfile, state: ImageBuildState): void {
    this.images.setBuildState(profile, state);
  }

  currentImage(profile: ImageProfile): HostImage | null {
    return this.images.current(profile);
  }

  imageBuildState(profile: ImageProfile): ImageBuildState {
    return this.images.buildState(profile);
  }

  async imageManifest(image: HostImage): Promise<ImageManifest | null> {
    return this.images.manifest(image);
  }

  buildLayer(request: LayerBuildRequest): Promise<BuiltLayer> {
    return this.layerBuilder.build(request);
  }

  /** In the process that asks: always. */
  reachableFor(): boolean {
    return this.reachable();
  }

  reachable(): boolean {
    return true;
  }

  isolationProblem(): Promise<{ reason: string; hint: string } | null> {
    return this.jail.problem();
  }

  async capacity(): Promise<HostCapacity> {
    return { freeMemoryMib: Math.floor(freemem() / MIB) };
  }

  async create(id: string, image: HostImage, shape: MachineShape, identity: GuestIdentity): Promise<CreatedMachine> {
    // Boot snapshots are of the image's own disk: a machine on a derived layer boots cold.
    // A snapshot that cannot be restored is discarded (with what was made of the copy) and costs a cold boot.
    const copied = image.layer ? null : await this.copies.fromBootSnapshot(id, image, shape, identity);
    if (copied) return copied;
    await this.createDisk(id, image, shape.diskMib);
    const started = await this.boot(id, shape, image, identity);
    if (!image.layer) void this.copies.makeBootSnapshot(image, shape); // never awaited by a create (resolves null when off)
    return { ...started, startedFrom: 'boot' };
  }

  async fork(sourceId: string, targetId: string, image: HostImage, shape: MachineShape, identity: GuestIdentity, options: { memory: boolean }): Promise<ForkedMachine> {
    if (!options.memory) {
      await this.forkDisk(sourceId, targetId);
      return { ...(await this.boot(targetId, shape, image, identity)), startedFrom: 'boot' };
    }
    return this.copies.forkWithMemory(sourceId, targetId, image, shape, identity);
  }

  /** The disk of a new machine: a copy-on-write overlay of the image, `diskMib` large. */
  async createDisk(id: string, image: HostImage, diskMib: number | null): Promise<void> {
    if (image.layer) {
      const layer = await this.layerBuilder.find(image.layer.version, image.layer.key);
      if (!layer) throw new Error(`the derived layer ${image.layer.key} of ${image.layer.version} is missing`);
      // Never smaller than the layer (its file system was grown to the builder's disk; the domain refuses less).
      await this.newDisk(id, layer.disk, Math.max(diskMib === null ? 0 : diskMib * MIB, layer.virtualBytes));
      return;
    }
    await this.newDisk(id, join(this.images.entry(image).dir, 'disk.qcow2'), diskMib === null ? undefined : diskMib * MIB);
  }

  private async newDisk(id: string, backing: string, sizeBytes: number | undefined, options: { generationId?: boolean } = {}): Promise<void> {
    await this.jail.admit(id);
    const active = `${id}-0.qcow2`;
    await createOverlay(backing, this.layers.path(active), { sizeBytes });
    this.jail.ownLayer(id, this.layers.path(active));
    this.chains.writeState(id, { active, hostKeysGenerated: false, generationId: options.generationId ?? true });
  }

  /** A stopped machine's files to send to another worker (drain); refused while it runs. */
  exportMachine(id: string): Promise<OutgoingMachine> {
    return this.exclusive(id, async () => {
      if (await this.machine(id)) throw new Error(`machine ${id} runs: stop it before it moves`);
      return this.moves.outgoing(id);
    });
  }

  /** Where the files of a machine on its way here are written. */
  incomingFolder(id: string): string {
    return this.moves.staging(id);
  }

  abandonIncoming(id: string): void {
    this.moves.abandon(id);
  }

  /** Puts a machine received from another worker in place (stopped, its session kept). */
  importMachine(id: string, start: MoveStart, received: Partial<Record<MovedFileRole, string>>, limits: MoveLimits): Promise<void> {
    return this.exclusive(id, () => this.moves.install(id, start, received, limits));
  }

  /** Copy-on-write copy of another machine's disk (running or not); the copy boots fresh. */
  forkDisk(sourceId: string, targetId: string): Promise<void> {
    return this.copies.forkDisk(sourceId, targetId);
  }

  /**
   * Starts QEMU on the machine's saved state, waits for its agent, runs `beforePersonalise`, then
   * personalises it and sets its clock (it stood still while the state was saved) at once.
   */
  private async continueSession(
    id: string, shape: MachineShape, image: HostImage, identity: GuestIdentity,
    personaliseOptions: PersonaliseOptions, beforePersonalise?: (machine: QemuMachine) => Promise<void>, restore: { ramInState?: boolean } = {},
  ): Promise<StartedMachine> {
    const machine = await this.startFromSession(id, shape, image, restore);
    const agent = this.agent(id);
    await agent.waitConnected(60_000);
    await beforePersonalise?.(machine);
    const [started] = await Promise.all([this.personalisation.personalise(id, identity, personaliseOptions), agent.setTime(Date.now())]);
    return started;
  }

  /**
   * A checkpoint of a running machine's disk, taken only when the guest wrote to it since the last
   * one (or since it started: bitmaps do not outlive QEMU). The guest flushes its file systems
   * first, so the frozen layer holds what programs had written. Then the chain is compacted.
   */
  async checkpoint(id: string): Promise<{ taken: boolean }> {
    return this.exclusive(id, async () => {
      const machine = await this.machine(id);
      if (!machine) return { taken: false };
      await this.flushGuest(id, 'a checkpoint');
      const active = await activeLayer(machine.qmp);
      const changedBytes = await dirtyBitmapCount(machine.qmp, { node: active.node, name: CHANGES_BITMAP });
      if (changedBytes === 0) return { taken: false };
      await this.chains.newTopLayer(id, machine, (next) =>
        snapshotActive(machine.qmp, { newFile: this.layers.path(next), newNode: nodeName(next), prepareFile: (file) => this.jail.ownLayer(id, file) }),
      );
      await this.chains.compact(id, machine, await this.activeLayers(id));
      this.jail.showLayers(id, await this.layers.layersOf(this.chains.state(id).active)); // merged layers leave its view
      return { taken: true };
    });
  }

  async boot(id: string, shape: MachineShape, image: HostImage, identity: GuestIdentity): Promise<StartedMachine> {
    const files = machineFiles(this.machineDir(id));
    rmSync(files.stateFile, { force: true });
    rmSync(files.memoryFile, { force: true });
    await this.exclusive(id, () =>
      this.jailed(id, shape, image, async (start) => {
        // Paused until its folder is sealed: the guest runs no instruction while QEMU's files are its own.
        const machine = await startMachine({ ...this.spec(id, shape, image), paused: true }, start);
        this.running.set(id, machine);
        await this.jail.seal(id);
        await trackChanges(machine);
        await machine.qmp.execute('cont');
      }),
    );
    return this.personalisation.personalise(id, identity);
  }

  resume(id: string, shape: MachineShape, image: HostImage, identity: GuestIdentity): Promise<StartedMachine> {
    return this.continueSession(id, shape, image, identity, { unlessUnchanged: true });
  }

  /** Starts QEMU on the machine's saved state (its own session or a copy) and forgets the state file. */
  private async startFromSession(id: string, shape: MachineShape, image: HostImage, restore: { ramInState?: boolean } = {}): Promise<QemuMachine> {
    const files = machineFiles(this.machineDir(id));
    let restored: QemuMachine | undefined;
    await this.exclusive(id, () =>
      this.jailed(id, shape, image, async (start) => {
        const { machine } = await restoreMemory(this.spec(id, shape, image), { ...start, stateFile: files.stateFile, ramInState: restore.ramInState, beforeLoad: () => this.jail.seal(id) });
        this.running.set(id, machine);
        await trackChanges(machine);
        restored = machine;
      }),
    );
    rmSync(files.stateFile, { force: true }); // the session is live again; a later stop saves a new one
    return restored!;
  }

  async refreshIdentity(id: string, identity: GuestIdentity): Promise<void> {
    await this.personalisation.personalise(id, identity, { unlessUnchanged: true });
  }

  async hasSession(id: string): Promise<boolean> {
    return existsSync(machineFiles(this.machineDir(id)).stateFile);
  }

  async discardSession(id: string): Promise<void> {
    const files = machineFiles(this.machineDir(id));
    rmSync(files.stateFile, { force: true });
    if (!(await this.machine(id))) rmSync(files.memoryFile, { force: true });
  }

  stop(id: string, options: { saveSession: boolean }): Promise<{ sessionSaved: boolean }> {
    return this.exclusive(id, () => this.stopNow(id, options));
  }

  private async stopNow(id: string, options: { saveSession: boolean }): Promise<{ sessionSaved: boolean }> {
    const machine = await this.machine(id);
    if (!machine) return { sessionSaved: await this.hasSession(id) };
    this.agents.drop(id);
    if (options.saveSession && (await this.hasSession(id)) && (await machine.status().catch(() => '')) === 'postmigrate') {
      // A save that completed before the service went away: only QEMU's quit was left to do.
      await stopMachine(machine, { powerdownTimeoutMs: 0 });
      this.stopped(id);
      return { sessionSaved: true };
    }
    if (options.saveSession) {
      try {
        await saveMemory(machine, { stateFile: machineFiles(this.machineDir(id)).stateFile, durable: true, socketOwner: this.jail.userOf(id) });
        this.stopped(id);
        return { sessionSaved: true };
      } catch (error) {
        this.options.logger.warn({ err: error, machine: id }, 'memory session could not be saved; stopping without it');
      }
    }
    await stopMachine(machine, { powerdownTimeoutMs: 15_000 });
    this.stopped(id);
    rmSync(machineFiles(this.machineDir(id)).memoryFile, { force: true });
    return { sessionSaved: false };
  }

  async isRunning(id: string): Promise<boolean> {
    return (await this.machine(id)) !== undefined;
  }

  /** After a service restart: reconnects, and settles a new top layer the last run was putting on. */
  /** One at a time with the machine's other operations: a worker adopts while the control plane may start or stop it. */
  adopt(id: string): Promise<boolean> {
    return this.exclusive(id, () => this.adoptNow(id));
  }

  private async adoptNow(id: string): Promise<boolean> {
    const machine = await this.settleStart(id, await this.machine(id));
    const state = this.layers.readState(this.machineDir(id));
    if (state) {
      const active = machine ? await this.chains.runningTop(id, machine, state.active) : await this.chains.settledOffline(state);
      if (active !== state.active || state.pending) this.chains.writeState(id, { ...state, active, pending: undefined });
    }
    return machine !== undefined;
  }

  /**
   * A QEMU whose start the last run of the service did not finish: a cold boot waits paused for its
   * folder to be sealed (sealed now, then it runs); a restore that never got its whole state is
   * dropped (the saved session is still there for the next resume). One that a save left paused
   * (the source of a fork with memory, a stop's save) runs on.
   */
  private async settleStart(id: string, machine: QemuMachine | undefined): Promise<QemuMachine | undefined> {
    if (!machine) return undefined;
    const status = await machine.status().catch(() => '');
    if (status === 'inmigrate') {
      await killMachine(machine);
      this.stopped(id);
      return undefined;
    }
    if (this.jail.hasUser(id)) await this.jail.seal(id);
    if (status === 'prelaunch') {
      await trackChanges(machine);
      await machine.qmp.execute('cont');
    }
    if (status === 'paused' || status === 'postmigrate' || status === 'finish-migrate') await this.runOnAfterInterruptedSave(id, machine);
    return machine;
  }

  /**
   * Runs on a machine a save left paused when the service died: one whose save did not complete,
   * and the source of a fork with memory (its state went to the copy's folder). One whose own
   * session was being saved (a stop: memory.state or its .part in its folder; a running machine
   * has neither) stays as it is, for the stop to finish. A QEMU that does not answer is adopted
   * as it is: it runs, and the operation that follows deals with it.
   */
  private async runOnAfterInterruptedSave(id: string, machine: QemuMachine): Promise<void> {
    try {
      const settled = await settleInterruptedSave(machine);
      const { stateFile } = machineFiles(this.machineDir(id));
      const ownSave = existsSync(stateFile) || existsSync(`${stateFile}.part`);
      if (settled === 'paused' || (settled === 'postmigrate' && !ownSave)) await machine.qmp.execute('cont');
    } catch (error) {
      this.options.logger.warn({ err: error, machine: id }, 'a machine a save left paused could not be run on');
    }
  }

  /**
   * Removes every machine that is none of `owned`, none `alsoKeep` names and no template or layer
   * builder being run — its files, and any QEMU of this host's machines folder, also one whose folder is already
   * gone. At start before machines are driven, and when the worker is adopted (`alsoKeep` then
   * names what the new epoch's commands addressed meanwhile).
   */
  async removeStrays(owned: readonly string[], alsoKeep: (id: string) => boolean = () => false): Promise<string[]> {
    const owns = new Set(owned);
    const keeps = (id: string) => owns.has(id) || alsoKeep(id) || this.copies.isMakingTemplate(id) || this.layerBuilder.isBuilding(id);
    const removed: string[] = [];
    for (const id of await this.knownMachineIds()) {
      if (keeps(id)) continue;
      // One that cannot be removed now is left for the next removal, not a reason to keep the others.
      const failed = await this.destroy(id).then(() => false, (error: unknown) => {
        this.options.logger.warn({ err: error, machine: id }, 'a machine no record owns could not be removed');
        return true;
      });
      if (!failed) removed.push(id);
    }
    // Files of a move that never finished (the worker or its control plane went away meanwhile);
    // one on its way now is of a machine the control plane names as owned.
    for (const name of readdirSync(this.machinesDir).filter((entry) => entry.startsWith('.incoming-'))) {
      if (keeps(name.slice('.incoming-'.length))) continue;
      try {
        rmSync(join(this.machinesDir, name), { recursive: true, force: true });
      } catch (error) {
        this.options.logger.warn({ err: error, folder: name }, 'the files of a move that never finished could not be removed');
      }
    }
    const reaped = await reapOrphans({
      machinesRoot: this.machinesDir,
      isOrphan: (info) => !keeps(info.machineId),
      onSurvivor: (info, error) => this.options.logger.warn({ err: error, machine: info.machineId, pid: info.pid }, 'a QEMU no record owns would not end; left for the next removal'),
    });
    for (const info of reaped) if (!removed.includes(info.machineId)) removed.push(info.machineId);
    if (reaped.length) this.options.logger.warn({ machines: reaped.map((info) => info.machineId) }, 'killed QEMUs that belong to no machine');
    return removed;
  }

  /** Removes layer files that no machine's chain uses; only at start, before machines are driven. */
  async removeUnusedLayers(): Promise<void> {
    try {
      const actives = await this.activeLayers();
      const removed = await this.layers.collectGarbage(actives);
      if (removed.length) this.options.logger.info({ removed }, 'removed disk layers no machine uses');
      await this.snapshots.sweep(actives, { atStart: true });
    } catch (error) {
      this.options.logger.warn({ err: error }, 'a disk chain could not be read; no layer removed');
    }
  }

  /**
   * Removes image versions (with their boot snapshots and derived layers) that are nobody's latest,
   * that no machine's disk backs onto and that are not in `keep` (versions private images' layers sit on); returns those removed.
   */
  async removeUnusedImages(keep: ReadonlySet<string> = new Set()): Promise<string[]> {
    const inUse = new Set<string>(keep);
    try {
      for (const version of await this.snapshots.versionsInUse()) inUse.add(version);
      for (const active of await this.activeLayers()) {
        for (const file of await this.layers.filesOf(active)) {
          const version = this.layers.imageVersionOf(file);
          if (version) inUse.add(version);
        }
      }
    } catch (error) {
      this.options.logger.warn({ err: error }, 'a disk chain could not be read; no image version removed');
      return [];
    }
    const removed = await this.images.removeUnused(inUse);
    if (removed.length) this.options.logger.info({ removed }, 'removed image versions no machine uses');
    return removed;
  }

  /** The boot snapshot of a configuration: ready, being made, or made now (null: off, or the making failed). */
  makeBootSnapshot(image: HostImage, shape: SnapshotShape): Promise<BootSnapshot | null> {
    return this.copies.makeBootSnapshot(image, shape);
  }

  /** The ready boot snapshot of a configuration (null: none, or snapshots are off). */
  findBootSnapshot(image: HostImage, shape: SnapshotShape): BootSnapshot | null {
    return this.copies.findBootSnapshot(image, shape);
  }

  /** After an image build: the new version gets boot snapshots of the configurations in use on older ones, one after another. */
  renewBootSnapshots(image: HostImage): Promise<void> {
    return this.copies.renewBootSnapshots(image);
  }

  destroy(id: string): Promise<void> {
    return this.exclusive(id, () => this.destroyNow(id));
  }

  private async destroyNow(id: string): Promise<void> {
    const machine = await this.machine(id);
    this.agents.drop(id);
    if (machine) await killMachine(machine);
    this.stopped(id);
    const state = this.layers.readState(this.machineDir(id));
    if (state) {
      // Its layers and a snapshot's disk it backs onto (its user was let read it), not images; of a
      // chain that cannot be read, its top and every snapshot disk.
      const chain = await this.layers.filesOf(state.active).then((files) => files.filter((file) => !this.layers.isImageFile(file)))
        .catch(() => [this.layers.path(state.active), ...this.snapshots.disks()]);
      if (!(await this.layers.release(state.active, await this.activeLayers(id)))) {
        this.options.logger.warn({ machine: id }, 'another disk chain could not be read; the layers of this disk are left in place');
      }
      // Layers another machine still uses outlive this one: its user (which a new machine may get)
      // loses them; until it has, the folder (and with it the user) stays, and the delete fails.
      await this.jail.releaseLayers(id, chain);
    }
    rmSync(this.machineDir(id), { recursive: true, force: true });
    this.displays.delete(id);
    if (state) await this.snapshots.sweep(await this.activeLayers(), { atStart: false }).catch((error: unknown) => this.options.logger.warn({ err: error }, 'deleted snapshots could not be swept'));
  }

  takeSnapshot(id: string, snapshotId: string, shape: MachineShape, options: { memory: boolean }): Promise<TakenSnapshot> {
    return this.snapshots.take(id, snapshotId, shape, options);
  }

  createFromSnapshot(id: string, snapshotId: string, images: { memory: HostImage; boot: HostImage }, shape: MachineShape, identity: GuestIdentity, options: { memory: boolean }): Promise<CreatedMachine> {
    return this.snapshots.create(id, snapshotId, images, shape, identity, options);
  }

  async deleteSnapshot(snapshot: SnapshotRef): Promise<void> {
    await this.snapshots.delete(snapshot.id, await this.activeLayers());
  }

  agent(id: string): AgentClient {
    return this.agents.get(id);
  }

  async consoleTail(id: string, lines: number): Promise<string> {
    return readConsoleTail(machineFiles(this.machineDir(id)).serialLog, lines);
  }

  /** The screen of the image the machine's disk was made from (its chain ends on that image's disk). */
  async imageDisplay(id: string): Promise<DisplaySize | null> {
    if (this.displays.has(id)) return this.displays.get(id)!;
    const state = this.layers.readState(this.machineDir(id));
    if (!state) return null;
    const imageDisk = (await this.layers.filesOf(state.active)).at(-1)!;
    const display = dirname(imageDisk) === this.layers.dir ? null : readImageManifest(dirname(imageDisk))?.display ?? null;
    this.displays.set(id, display);
    return display;
  }

  /** The machine's screen as video, encoded on this host (screen-encoding.ts). */
  async openVideo(id: string, request: ScreenVideoRequest, events: ScreenVideoEvents): Promise<ScreenVideo> {
    return encodeScreen(await this.openScreen(id), request, events, { encoders: this.options.encoders, logger: this.options.logger });
  }

  /** A new connection to QEMU's VNC server of the machine (its display socket). */
  openScreen(id: string): Promise<Duplex> {
    const path = machineFiles(this.machineDir(id)).displaySocket;
    if (!existsSync(path)) return Promise.reject(new Error(`machine ${id} runs without its display socket (started before it had one?)`));
    return new Promise<Duplex>((resolve, reject) => {
      const socket = connect(path);
      socket.once('connect', () => {
        socket.removeAllListeners('error');
        resolve(socket);
      });
      socket.once('error', reject);
    });
  }

  /** Machines (and boot snapshot templates) this host has files for: reconcile removes the ones no row knows. */
  /** Machines with a folder here (not the folders of machines on their way here from another worker, `.incoming-<id>`). */
  async knownMachineIds(): Promise<string[]> {
    return readdirSync(this.machinesDir).filter((name) => !name.startsWith('.'));
  }

  /** The active layer of every machine this host has a disk for (but one). */
  private async activeLayers(exceptId?: string): Promise<string[]> {
    return this.chains.activeLayers(await this.knownMachineIds(), exceptId);
  }

  /** Asks the guest to flush its file systems before its disk is frozen; without an answer the copy is crash-consistent. */
  private async flushGuest(id: string, what: string): Promise<void> {
    await this.agent(id).syncFilesystems({ timeoutMs: 60_000 }).catch((error: Error) => {
      this.options.logger.warn({ err: error, machine: id }, `guest did not flush before ${what}; taking it crash-consistent`);
    });
  }

  /** Stops talking to machines (they keep running); for shutdown. Boot snapshots being made stop at their next step. */
  detachAll(): void {
    this.copies.stopMaking();
    this.agents.dropAll();
    for (const [id, machine] of this.running) {
      machine.qmp.close();
      // A template is nobody's machine: it does not outlive the service (the next start would remove it anyway).
      if (this.copies.isTemplate(id) || LayerBuilder.isBuilder(id)) void killMachine(machine).catch(() => undefined);
    }
    this.running.clear();
  }

  /**
   * Starts a QEMU in the machine's jail: `work` gets the start options (launch wrapper, log file);
   * whatever happens, the run folder is sealed again, and a start that failed leaves neither a QEMU
   * nor its limits.
   */
  private async jailed(id: string, shape: MachineShape, image: HostImage, work: (start: Pick<StartOptions, 'launch' | 'logFile' | 'logger'>) => Promise<void>): Promise<void> {
    if (!this.jail.hasUser(id)) await this.adoptIntoJail(id);
    const running = findOwnProcess({ id, pidFile: machineFiles(this.machineDir(id)).pidFile });
    if (running !== undefined) throw new MachineAlreadyRunningError(id, running); // its view and console log are in use: left alone
    const launch = await this.jail.beforeStart(id, { vcpu: shape.vcpu, memoryMib: shape.memoryMib }, await this.qemuFiles(id, shape, image));
    try {
      await work({ launch, logFile: machineFiles(this.machineDir(id)).qemuLog, logger: this.options.logger }); // seals before the guest runs
    } catch (error) {
      // A start that failed leaves no QEMU of its own behind (it may be paused, never sealed).
      const machine = error instanceof MachineAlreadyRunningError ? undefined : await this.machine(id).catch(() => undefined);
      if (machine) await killMachine(machine).catch(() => undefined);
      if (!(error instanceof MachineAlreadyRunningError)) this.stopped(id);
      await this.jail.seal(id).catch(() => undefined);
      throw error;
    }
  }

  /** What the machine's QEMU opens besides its run folder: its chain's layers, and read-only its kernel, initrd and image disks. */
  private async qemuFiles(id: string, shape: MachineShape, image: HostImage): Promise<QemuFiles> {
    const spec = this.spec(id, shape, image);
    const chain = await this.layers.filesOf(this.chains.state(id).active);
    const isLayer = (file: string) => dirname(file) === this.layers.dir;
    return { layers: chain.filter(isLayer), readOnly: [spec.kernel, ...(spec.initrd ? [spec.initrd] : []), ...chain.filter((file) => !isLayer(file))] };
  }

  /** A machine made before machines were jailed: a user of its own, its layers its own or shared. */
  private async adoptIntoJail(id: string): Promise<void> {
    await this.jail.admit(id);
    const chain = await this.layers.layersOf(this.chains.state(id).active);
    // Layers it shares with a machine it was forked from stay as they were made then (world-readable).
    for (const file of chain.filter((layer) => this.layers.isOwnLayer(id, layer))) this.jail.ownLayer(id, file);
    this.options.logger.info({ machine: id, uid: this.jail.userOf(id).uid }, 'machine made before the jail now has a user of its own');
  }

  /** QEMU is gone: forget it and drop its limits. */
  private stopped(id: string): void {
    this.running.delete(id);
    this.jail.afterStop(id);
  }

  /** Runs `work` after every earlier chain-changing work of the same machine has finished. */
  private exclusive<T>(id: string, work: () => Promise<T>): Promise<T> {
    const previous = this.queues.get(id) ?? Promise.resolve();
    const next = previous.catch(() => undefined).then(work);
    const tail = next.catch(() => undefined);
    this.queues.set(id, tail);
    void tail.then(() => {
      if (this.queues.get(id) === tail) this.queues.delete(id);
    });
    return next;
  }

  private async machine(id: string): Promise<QemuMachine | undefined> {
    const known = this.running.get(id);
    if (known?.alive() && !known.qmp.closed) return known;
    // Gone, or its monitor link closed (QEMU broke the protocol): the link is opened again, as after
    // a restart. A QEMU that still runs but does not take a new link (it is quitting) stays known as
    // it was: its calls fail, it is not forgotten.
    this.running.delete(id);
    const files = machineFiles(this.machineDir(id));
    const adopted = await adoptMachine({
      id, pidFile: files.pidFile, qmpSocket: files.qmpSocket, agentSocket: files.agentSocket,
      memoryFile: this.options.fileBackedMemory === false ? undefined : files.memoryFile, // a save must know the RAM is a shared file
    }, { logger: this.options.logger }).catch((error: unknown) => {
      if (known?.alive()) return known;
      throw error;
    });
    if (adopted) this.running.set(id, adopted);
    return adopted;
  }

  private spec(id: string, shape: MachineShape, image: HostImage): MachineSpec {
    const files = machineFiles(this.machineDir(id));
    const entry = this.images.entry(image);
    const state = this.chains.state(id);
    return {
      id,
      vcpu: shape.vcpu,
      memoryMib: shape.memoryMib,
      kernel: join(entry.dir, 'vmlinuz'),
      initrd: join(entry.dir, 'initrd.img'),
      disk: this.layers.path(state.active),
      appendArgs: entry.cmdline,
      accelerator: this.accelerator,
      qmpSocket: files.qmpSocket,
      agentSocket: files.agentSocket,
      serialLog: files.serialLog,
      pidFile: files.pidFile,
      memoryFile: this.options.fileBackedMemory === false ? undefined : files.memoryFile,
      // the image's screen; a restore gets the same devices as the boot it continues (same image)
      display: entry.display ? { socket: files.displaySocket, ...entry.display } : undefined,
      generationId: state.generationId ?? false,
    };
  }

  private machineDir(id: string): string {
    return join(this.machinesDir, id);
  }
}
