// New machines that start as copies instead of from nothing: a copy of a boot snapshot (an overlay
// on its disk, copies of its RAM, device state and console log), a fork with memory (the running
// source pauses while its disk forks and its device state and RAM are copied), a plain fork's
// copy-on-write disk; and the boot snapshots themselves (the store, their making and renewal).
// QEMU processes and the order of work on a machine stay the machine host's: this file asks for
// them through MachineProcesses.
import { chownSync, copyFileSync, existsSync, linkSync, rmSync } from 'node:fs';
import { BootSnapshotMaker } from './boot-snapshot-maker';
import { BootSnapshotStore, type BootSnapshot, type SnapshotShape } from './boot-snapshots';
import { nodeName, type DiskChains } from './disk-chain';
import type { PersonaliseOptions } from './guest-personalisation';
import type { ImageCatalogue } from './image-catalogue';
import type { MachineJail } from './jail';
import type { LayerStore } from './layers';
import type { Accelerator, CreatedMachine, ForkedMachine, GuestIdentity, HostImage, MachineShape, StartedFrom, StartedMachine } from './machine-host';
import { activeLayer, copyRamFile, createOverlay, liveFork, machineFiles, qcow2Header, saveMemory, type QemuMachine } from './qemu';

const MIB = 1048576;

/** Files of a machine's saved state that a new machine can continue. */
export interface SavedMachineState {
  disk: string;
  diskBytes: number;
  memoryFile: string;
  stateFile: string;
  serialLog: string;
  /** Whether the saved machine ran with a VM generation ID device (its device set must be the same). */
  generationId: boolean;
  /** The state file holds the RAM too (a live capture): there is no RAM file to copy. */
  ramInState?: boolean;
}

/** What copies need of the machine host: its QEMU processes, the order of work per machine, new disks. */
export interface MachineProcesses {
  /** Runs `work` after every earlier chain-changing work of the same machine has finished. */
  exclusive<T>(id: string, work: () => Promise<T>): Promise<T>;
  /** The machine's QEMU, when one runs (adopted after a service restart). */
  machine(id: string): Promise<QemuMachine | undefined>;
  machineDir(id: string): string;
  /** Admits the machine to the jail and gives it a first layer of its own on `backing` (with a VM generation ID device unless told otherwise). */
  newDisk(id: string, backing: string, sizeBytes: number | undefined, options?: { generationId?: boolean }): Promise<void>;
  /** A disk on the image, `diskMib` large (null: the image's own size). */
  createDisk(id: string, image: HostImage, diskMib: number | null): Promise<void>;
  boot(id: string, shape: MachineShape, image: HostImage, identity: GuestIdentity): Promise<StartedMachine>;
  /** Starts QEMU on the machine's saved state, waits for its agent, runs `beforePersonalise`, then personalises it and sets its clock. */
  continueSession(
    id: string, shape: MachineShape, image: HostImage, identity: GuestIdentity,
    personaliseOptions: PersonaliseOptions, beforePersonalise?: (machine: QemuMachine) => Promise<void>,
    restore?: { ramInState?: boolean },
  ): Promise<StartedMachine>;
  /** Asks the guest to flush its file systems; without an answer what follows is crash-consistent. */
  flushGuest(id: string, what: string): Promise<void>;
  stop(id: string, options: { saveSession: boolean }): Promise<{ sessionSaved: boolean }>;
  destroy(id: string): Promise<void>;
}

export interface CopySettings {
  accelerator: Accelerator;
  imagesDir: string;
  /** Restore new machines from boot snapshots and make those (default true; needs file-backed memory). */
  bootSnapshots?: boolean;
  fileBackedMemory?: boolean;
  templateSettled?: (id: string, image: HostImage) => Promise<void>;
  logger: { info(object: object, message: string): void; warn(object: object, message: string): void };
}

export class InstantCopies {
  private readonly snapshots: BootSnapshotStore;
  private readonly maker: BootSnapshotMaker;

  constructor(
    readonly processes: MachineProcesses,
    private readonly parts: { jail: MachineJail; layers: LayerStore; chains: DiskChains; images: ImageCatalogue },
    private readonly settings: CopySettings,
  ) {
    const { layers, chains, images } = parts;
    this.snapshots = new BootSnapshotStore((version) => images.versionDir(version), settings.accelerator);
    this.maker = new BootSnapshotMaker(this.snapshots, {
      createImageSizedDisk: (id, image) => processes.createDisk(id, image, null),
      boot: (id, shape, image, identity) => processes.boot(id, shape, image, identity),
      flushGuest: (id) => processes.flushGuest(id, 'a boot snapshot'),
      stop: (id, stopOptions) => processes.stop(id, stopOptions),
      savedFiles: (id) => {
        const files = machineFiles(processes.machineDir(id));
        return { disk: layers.path(chains.state(id).active), memoryFile: files.memoryFile, stateFile: files.stateFile, serialLog: files.serialLog };
      },
      destroy: (id) => processes.destroy(id),
    }, { templateSettled: settings.templateSettled, logger: settings.logger });
  }

  /** A new machine from the ready boot snapshot of its configuration; null when there is none or it could not be restored. */
  async fromBootSnapshot(id: string, image: HostImage, shape: MachineShape, identity: GuestIdentity): Promise<CreatedMachine | null> {
    const snapshot = this.findBootSnapshot(image, shape);
    if (!snapshot) return null;
    try {
      return await this.restoreSnapshotCopy(id, image, shape, identity, snapshot);
    } catch (error) {
      // A snapshot this QEMU cannot load (or a copy that went wrong) costs a cold boot, not the machine.
      this.settings.logger.warn({ err: error, machine: id, snapshot: snapshot.key }, 'boot snapshot could not be restored; booting instead');
      this.snapshots.discard(snapshot);
      await this.processes.destroy(id);
      return null;
    }
  }

  /** A fork with memory: the source's state captured (in its turn), then the copy continues it. */
  async forkWithMemory(sourceId: string, targetId: string, image: HostImage, shape: MachineShape, identity: GuestIdentity): Promise<ForkedMachine> {
    const { sourcePausedMs } = await this.processes.exclusive(sourceId, () => this.captureRunning(sourceId, targetId));
    const started = await this.continueRestored(targetId, shape, image, identity, {});
    return { ...started, startedFrom: 'memory', sourcePausedMs };
  }

  /** Copy-on-write copy of another machine's disk (running or not); the copy boots fresh. */
  async forkDisk(sourceId: string, targetId: string): Promise<void> {
    const { jail } = this.parts;
    await this.processes.exclusive(sourceId, async () => {
      await jail.admit(targetId);
      const forkActive = `${targetId}-0.qcow2`;
      const machine = await this.processes.machine(sourceId);
      if (machine) {
        // What programs in the source wrote goes into the copy (not only what reached the disk).
        await this.processes.flushGuest(sourceId, 'a fork');
        await this.cutRunningDisk(sourceId, machine, forkActive);
      } else {
        await this.overlayOnStoppedDisk(sourceId, forkActive);
      }
      await this.adoptForkLayer(sourceId, targetId, forkActive, { generationId: true });
    });
  }

  /**
   * A stopped machine's disk as it is, under `overlay` (a layer file's name): the overlay is made
   * without opening the machine's top layer (its last QEMU wrote that header), its size read alone.
   */
  async overlayOnStoppedDisk(id: string, overlay: string): Promise<void> {
    const { layers, chains } = this.parts;
    const top = layers.path(chains.state(id).active);
    await createOverlay(top, layers.path(overlay), { sizeBytes: await ownLayerSize(layers, id, top), unsafe: true });
  }

  /**
   * The source's top freezes and becomes the shared backing of its new top and of `forkActive` (a
   * layer file's name): the copy's first layer, or what a snapshot copies the disk from.
   */
  cutRunningDisk(sourceId: string, machine: QemuMachine, forkActive: string): Promise<void> {
    const { jail, layers, chains } = this.parts;
    return chains.newTopLayer(sourceId, machine, (next) =>
      liveFork(machine.qmp, {
        newActiveFile: layers.path(next),
        newActiveNode: nodeName(next),
        forkFile: layers.path(forkActive),
        prepareFile: (file) => jail.ownLayer(sourceId, file),
        frozenSize: (file) => ownLayerSize(layers, sourceId, file),
      }),
    );
  }

  private async adoptForkLayer(sourceId: string, targetId: string, forkActive: string, state: { generationId: boolean }): Promise<void> {
    const { jail, layers, chains } = this.parts;
    jail.ownLayer(targetId, layers.path(forkActive));
    // The copy reads what it shares with the source: every layer under its own, and a named snapshot's
    // disk the source backs onto (images are public).
    await jail.shareLayers(targetId, sourceId, (await layers.filesOf(forkActive)).slice(1).filter((file) => !layers.isImageFile(file)));
    chains.writeState(targetId, { active: forkActive, hostKeysGenerated: false, generationId: state.generationId });
  }

  /**
   * A fork with memory, source side: the source pauses, its disk forks, its device state goes to
   * the copy's state file and its RAM file is copied; then it runs on. The copy's files are ready
   * for a restore. Answers how long the source's guest stood still.
   */
  private async captureRunning(sourceId: string, targetId: string): Promise<{ sourcePausedMs: number }> {
    const { jail, chains } = this.parts;
    const machine = await this.processes.machine(sourceId);
    if (!machine) throw new Error(`machine ${sourceId} is not running`);
    await jail.admit(targetId);
    const forkActive = `${targetId}-0.qcow2`;
    const target = machineFiles(this.processes.machineDir(targetId));
    const generationId = chains.state(sourceId).generationId ?? false;
    const sourcePausedMs = await this.capturePaused(sourceId, machine, { forkActive, stateFile: target.stateFile, memoryFile: target.memoryFile });
    await this.adoptForkLayer(sourceId, targetId, forkActive, { generationId });
    this.ownRunFiles(targetId, [target.memoryFile]);
    return { sourcePausedMs };
  }

  /**
   * A running machine's whole state at one moment, while its guest stands still: its disk cut into
   * `forkActive`, its device state into `stateFile` and a copy of its RAM file into `memoryFile`;
   * then it runs on. Answers how long the guest stood still. The caller holds the machine's turn.
   */
  async capturePaused(id: string, machine: QemuMachine, into: { forkActive: string; stateFile: string; memoryFile: string }): Promise<number> {
    const source = machineFiles(this.processes.machineDir(id));
    const pausedAt = Date.now();
    await machine.qmp.execute('stop');
    try {
      await this.cutRunningDisk(id, machine, into.forkActive);
      // quit: false leaves the source in "postmigrate"; cont takes its disks back and runs it.
      await saveMemory(machine, { stateFile: into.stateFile, quit: false, socketOwner: this.parts.jail.userOf(id) });
      if (machine.spec.memoryFile) await copyRamFile(source.memoryFile, into.memoryFile);
    } finally {
      await machine.qmp.execute('cont').catch((error: Error) => this.settings.logger.warn({ err: error, machine: id }, 'a machine whose state was captured did not run on'));
    }
    return Date.now() - pausedAt;
  }

  /** A new machine from a copy of a boot snapshot: overlay on its disk, copies of RAM, state and console log. */
  private restoreSnapshotCopy(id: string, image: HostImage, shape: MachineShape, identity: GuestIdentity, snapshot: BootSnapshot): Promise<CreatedMachine> {
    return this.restoreCopy(id, image, shape, identity, { ...snapshot, generationId: true }, 'snapshot');
  }

  /**
   * A new machine continuing saved machine state (a boot snapshot, a named snapshot): an overlay on
   * its disk, copies of its RAM, device state and console log, then its own identity.
   */
  async restoreCopy(
    id: string, image: HostImage, shape: MachineShape, identity: GuestIdentity, saved: SavedMachineState, startedFrom: StartedFrom,
    afterDisk?: (disk: string) => Promise<void>,
  ): Promise<CreatedMachine> {
    // Same size as saved (the guest's kernel knows that one); grown once it runs.
    await this.processes.newDisk(id, saved.disk, saved.diskBytes, { generationId: saved.generationId });
    await afterDisk?.(saved.disk);
    const files = machineFiles(this.processes.machineDir(id));
    if (!saved.ramInState) await copyRamFile(saved.memoryFile, files.memoryFile);
    linkOrCopy(saved.stateFile, files.stateFile);
    if (existsSync(saved.serialLog)) copyFileSync(saved.serialLog, files.serialLog);
    this.ownRunFiles(id, [files.memoryFile, files.serialLog]);
    const started = await this.continueRestored(id, shape, image, identity, { growToBytes: Math.max(shape.diskMib * MIB, saved.diskBytes), ramInState: saved.ramInState });
    return { ...started, startedFrom };
  }

  /** What QEMU opens in run/ as the machine's user: that user's, nobody else's. */
  private ownRunFiles(id: string, files: string[]): void {
    const user = this.parts.jail.userOf(id);
    for (const file of files.filter((f) => existsSync(f))) chownSync(file, user.uid, user.gid);
  }

  /**
   * Runs a machine from a memory image that is not its own session (boot snapshot copy, fork with
   * memory) and gives it its identity: new host keys and machine id, renewed caches, its clock, a
   * disk grown to its size.
   */
  private continueRestored(id: string, shape: MachineShape, image: HostImage, identity: GuestIdentity, options: { growToBytes?: number; ramInState?: boolean }): Promise<StartedMachine> {
    return this.processes.continueSession(id, shape, image, identity, { restored: { diskBytes: options.growToBytes } }, async (machine) => {
      if (options.growToBytes === undefined) return;
      const top = await activeLayer(machine.qmp);
      await machine.qmp.execute('block_resize', { 'node-name': top.node, size: options.growToBytes });
    }, { ramInState: options.ramInState });
  }

  /** The boot snapshot of a configuration: ready, being made, or made now (null: off, or the making failed). */
  makeBootSnapshot(image: HostImage, shape: SnapshotShape): Promise<BootSnapshot | null> {
    return this.bootSnapshotsOn() ? this.maker.make(image, shape) : Promise.resolve(null);
  }

  /** The ready boot snapshot of a configuration (null: none, or snapshots are off). */
  findBootSnapshot(image: HostImage, shape: SnapshotShape): BootSnapshot | null {
    return this.bootSnapshotsOn() ? this.snapshots.find(image, shape) : null;
  }

  /** After an image build: the new version gets boot snapshots of the configurations in use on older ones, one after another. */
  async renewBootSnapshots(image: HostImage): Promise<void> {
    if (!this.bootSnapshotsOn()) return;
    for (const shape of this.snapshots.configurationsInUse(image, this.settings.imagesDir)) {
      if (this.maker.isStopped) return;
      await this.maker.make(image, shape);
    }
  }

  private bootSnapshotsOn(): boolean {
    return (this.settings.bootSnapshots ?? true) && this.settings.fileBackedMemory !== false;
  }

  /** Boot snapshots being made stop at their next step (service shutdown). */
  /** Whether this machine id is a boot snapshot template being made now (not a stray). */
  isMakingTemplate(id: string): boolean {
    return this.maker.isMaking(id);
  }

  stopMaking(): void {
    this.maker.stop();
  }

  /** A template booted for a boot snapshot, not anyone's machine. */
  isTemplate(id: string): boolean {
    return this.snapshots.isTemplate(id);
  }
}

/**
 * A saved state file into a new machine's run folder: a hard link where both are on one file system
 * (root reads it, to send it to QEMU, and removes it once restored; it stays root's and 0600), else
 * a copy. A live capture's state holds the RAM: copying it would cost as long as loading it.
 */
function linkOrCopy(from: string, to: string): void {
  rmSync(to, { force: true });
  try {
    linkSync(from, to);
  } catch {
    copyFileSync(from, to);
  }
}

/**
 * The virtual size of a layer a machine's QEMU names as its own (refused unless it is one of that
 * machine's layers), read from its header alone: an overlay on it is then made without opening it.
 */
export async function ownLayerSize(layers: LayerStore, id: string, file: string): Promise<number> {
  if (!layers.isOwnLayer(id, file)) throw new Error(`QEMU names ${JSON.stringify(file)} as the disk of ${id}, which is not one of its layers`);
  return (await qcow2Header(file))['virtual-size'];
}
