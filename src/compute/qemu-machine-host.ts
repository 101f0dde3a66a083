// MachineHost on this host's QEMU: images from the image store, one detached QEMU per machine
// (it outlives the service; a restart adopts it), the guest agent over virtio-serial, guest RAM in
// a file so a memory session saves and resumes in well under a second.
import { closeSync, constants, existsSync, fstatSync, mkdirSync, openSync, readdirSync, readFileSync, readSync, rmSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { connect } from 'node:net';
import { basename, dirname, isAbsolute, join, relative, sep } from 'node:path';
import { pruneImageVersions, readLatestImage } from '../../images';
import { AgentClient } from './agent-client';
import { nextMerge } from './checkpoint-policy';
import { DiskState, LayerStore } from './layers';
import { generateHostKeys } from './ssh-host-keys';
import type { DisplayHost } from './guest-display';
import type { DisplaySize } from './machine-display';
import type { MachineJail } from './jail';
import type { Accelerator, GuestIdentity, HostImage, ImageBuildState, ImageProfile, MachineHost, MachineShape, StartedMachine } from './machine-host';
import {
  activeLayer,
  addDirtyBitmap,
  adoptMachine,
  chainNodes,
  commitIntoBase,
  createOverlay,
  dirtyBitmapCount,
  killMachine,
  liveFork,
  machineFiles,
  MachineAlreadyRunningError,
  MachineSpec,
  QemuMachine,
  type StartOptions,
  removeDirtyBitmap,
  restoreMemory,
  saveMemory,
  snapshotActive,
  startMachine,
  stopMachine,
} from './qemu';

/** The dirty bitmap on the active layer: "the disk changed since the last checkpoint". */
const CHANGES_BITMAP = 'since-checkpoint';

export interface QemuHostOptions {
  dataDir: string;
  imagesDir: string;
  accelerator: Accelerator;
  /** Guest RAM in a file (share=on): saves write device state only. */
  fileBackedMemory?: boolean;
  /** Cold boot to "SSH listens, commands accepted"; generous under TCG. */
  bootTimeoutMs?: number;
  logger: { info(object: object, message: string): void; warn(object: object, message: string): void };
  /** Every QEMU runs in it (its own user, files, network rules, limits). */
  jail: MachineJail;
}

/** Where a host keeps its machines' folders and disk layers. */
export function machineHostFolders(dataDir: string): { machines: string; layers: string } {
  return { machines: join(dataDir, 'machines'), layers: join(dataDir, 'layers') };
}

interface ImageEntry {
  image: HostImage;
  dir: string;
  cmdline: string;
  /** The image's screen (manifest `display`); null: its machines have no display device. */
  display: DisplaySize | null;
}

export class QemuMachineHost implements MachineHost, DisplayHost {
  readonly accelerator: Accelerator;
  private readonly machinesDir: string;
  private readonly layers: LayerStore;
  private readonly running = new Map<string, QemuMachine>();
  private readonly agents = new Map<string, AgentClient>();
  private readonly images = new Map<ImageProfile, ImageEntry>();
  private readonly builds = new Map<ImageProfile, ImageBuildState>();
  /** Per machine: the tail of its queue of chain-changing work (checkpoints, forks, stops…). */
  private readonly queues = new Map<string, Promise<unknown>>();
  /** Per machine: the screen of the image its disk ends on (found once from the disk's chain). */
  private readonly displays = new Map<string, DisplaySize | null>();

  private readonly jail: MachineJail;

  constructor(private readonly options: QemuHostOptions) {
    this.accelerator = options.accelerator;
    this.jail = options.jail;
    const folders = machineHostFolders(options.dataDir);
    this.machinesDir = folders.machines;
    this.layers = new LayerStore(folders.layers, options.imagesDir);
    mkdirSync(this.machinesDir, { recursive: true });
    mkdirSync(this.layers.dir, { recursive: true });
  }

  /** Reads the newest built image of a profile (after a build, and at start). */
  async refreshImage(profile: ImageProfile): Promise<HostImage | null> {
    const latest = await readLatestImage(this.options.imagesDir, profile);
    if (!latest) return null;
    const image = { profile, version: latest.manifest.version, artifactKey: latest.manifest.sha256['disk.qcow2'] ?? latest.manifest.version };
    this.images.set(profile, { image, dir: latest.dir, cmdline: latest.manifest.kernel_cmdline, display: latest.manifest.display ?? null });
    this.builds.set(profile, { state: 'ready', step: null, error: null });
    return image;
  }

  setBuildState(profile: ImageProfile, state: ImageBuildState): void {
    if (this.images.has(profile) && state.state !== 'ready') return; // an older image stays usable
    this.builds.set(profile, state);
  }

  currentImage(profile: ImageProfile): HostImage | null {
    return this.images.get(profile)?.image ?? null;
  }

  imageBuildState(profile: ImageProfile): ImageBuildState {
    return this.builds.get(profile) ?? { state: 'building', step: null, error: null };
  }

  isolationProblem(): Promise<{ reason: string; hint: string } | null> {
    return this.jail.problem();
  }

  async createDisk(id: string, image: HostImage, diskMib: number): Promise<void> {
    const dir = this.machineDir(id);
    await this.jail.admit(id);
    const active = `${id}-0.qcow2`;
    await createOverlay(join(this.imageEntry(image).dir, 'disk.qcow2'), this.layers.path(active), { sizeBytes: diskMib * 1048576 });
    this.jail.ownLayer(id, this.layers.path(active));
    this.layers.writeState(dir, { active, hostKeysGenerated: false });
  }

  async forkDisk(sourceId: string, targetId: string): Promise<void> {
    await this.exclusive(sourceId, async () => {
      const targetDir = this.machineDir(targetId);
      await this.jail.admit(targetId);
      const forkActive = `${targetId}-0.qcow2`;
      const machine = await this.machine(sourceId);
      if (machine) {
        // What programs in the source wrote goes into the copy (not only what reached the disk).
        await this.flushGuest(sourceId, 'a fork');
        // The source's top freezes and becomes the shared backing of its new top and of the copy.
        await this.newTopLayer(sourceId, machine, (next) =>
          liveFork(machine.qmp, {
            newActiveFile: this.layers.path(next),
            newActiveNode: nodeName(next),
            forkFile: this.layers.path(forkActive),
            prepareFile: (file) => this.jail.ownLayer(sourceId, file),
          }),
        );
      } else {
        await createOverlay(this.layers.path(this.diskState(sourceId).active), this.layers.path(forkActive));
      }
      this.jail.ownLayer(targetId, this.layers.path(forkActive));
      // The copy reads what it shares with the source: every layer under its own (images are public).
      await this.jail.shareLayers(targetId, sourceId, (await this.layers.layersOf(forkActive)).slice(1));
      this.layers.writeState(targetDir, { active: forkActive, hostKeysGenerated: false });
    });
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
      await this.newTopLayer(id, machine, (next) =>
        snapshotActive(machine.qmp, { newFile: this.layers.path(next), newNode: nodeName(next), prepareFile: (file) => this.jail.ownLayer(id, file) }),
      );
      await this.compact(id, machine);
      return { taken: true };
    });
  }

  async boot(id: string, shape: MachineShape, image: HostImage, identity: GuestIdentity): Promise<StartedMachine> {
    const files = machineFiles(this.machineDir(id));
    rmSync(files.stateFile, { force: true });
    rmSync(files.memoryFile, { force: true });
    await this.exclusive(id, () =>
      this.jailed(id, shape, async (start) => {
        // Paused until its folder is sealed: the guest runs no instruction while QEMU's files are its own.
        const machine = await startMachine({ ...this.spec(id, shape, image), paused: true }, start);
        this.running.set(id, machine);
        await this.jail.seal(id);
        await trackChanges(machine);
        await machine.qmp.execute('cont');
      }),
    );
    return this.personalise(id, identity);
  }

  async resume(id: string, shape: MachineShape, image: HostImage, identity: GuestIdentity): Promise<StartedMachine> {
    const files = machineFiles(this.machineDir(id));
    await this.exclusive(id, () =>
      this.jailed(id, shape, async (start) => {
        const { machine } = await restoreMemory(this.spec(id, shape, image), { ...start, stateFile: files.stateFile, beforeLoad: () => this.jail.seal(id) });
        this.running.set(id, machine);
        await trackChanges(machine);
      }),
    );
    rmSync(files.stateFile, { force: true }); // the session is live again; a later stop saves a new one
    const agent = this.agent(id);
    await agent.waitConnected(60_000);
    // The guest clock stood still while the session was saved; set it while personalising.
    const [started] = await Promise.all([this.personalise(id, identity, { unlessUnchanged: true }), agent.setTime(Date.now())]);
    return started;
  }

  async refreshIdentity(id: string, identity: GuestIdentity): Promise<void> {
    await this.personalise(id, identity, { unlessUnchanged: true });
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
    this.dropAgent(id);
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
  async adopt(id: string): Promise<boolean> {
    const machine = await this.settleStart(id, await this.machine(id));
    const state = this.layers.readState(this.machineDir(id));
    if (state) {
      const active = machine ? await this.runningTop(id, machine, state.active) : await this.settledOffline(state);
      if (active !== state.active || state.pending) this.layers.writeState(this.machineDir(id), { ...state, active, pending: undefined });
    }
    return machine !== undefined;
  }

  /**
   * A QEMU whose start the last run of the service did not finish: a cold boot waits paused for its
   * folder to be sealed (sealed now, then it runs); a restore that never got its whole state is
   * dropped (the saved session is still there for the next resume).
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
    return machine;
  }

  /** Removes layer files that no machine's chain uses; only at start, before machines are driven. */
  async removeUnusedLayers(): Promise<void> {
    try {
      const removed = await this.layers.collectGarbage(await this.activeLayers());
      if (removed.length) this.options.logger.info({ removed }, 'removed disk layers no machine uses');
    } catch (error) {
      this.options.logger.warn({ err: error }, 'a disk chain could not be read; no layer removed');
    }
  }

  /** Removes image versions that are nobody's latest and that no machine's disk backs onto. */
  async removeUnusedImages(): Promise<void> {
    const inUse = new Set<string>();
    try {
      for (const active of await this.activeLayers()) {
        for (const file of await this.layers.filesOf(active)) {
          const inImages = relative(this.options.imagesDir, file);
          if (!inImages.startsWith('..') && !isAbsolute(inImages)) inUse.add(inImages.split(sep)[0]);
        }
      }
    } catch (error) {
      this.options.logger.warn({ err: error }, 'a disk chain could not be read; no image version removed');
      return;
    }
    const removed = await pruneImageVersions(this.options.imagesDir, { inUse });
    if (removed.length) this.options.logger.info({ removed }, 'removed image versions no machine uses');
  }

  destroy(id: string): Promise<void> {
    return this.exclusive(id, () => this.destroyNow(id));
  }

  private async destroyNow(id: string): Promise<void> {
    const machine = await this.machine(id);
    this.dropAgent(id);
    if (machine) await killMachine(machine);
    this.stopped(id);
    const state = this.layers.readState(this.machineDir(id));
    if (state) {
      const chain = await this.layers.layersOf(state.active).catch(() => [this.layers.path(state.active)]);
      if (!(await this.layers.release(state.active, await this.activeLayers(id)))) {
        this.options.logger.warn({ machine: id }, 'another disk chain could not be read; the layers of this disk are left in place');
      }
      // Layers another machine still uses outlive this one: its user (which a new machine may get)
      // loses them; until it has, the folder (and with it the user) stays, and the delete fails.
      await this.jail.releaseLayers(id, chain);
    }
    rmSync(this.machineDir(id), { recursive: true, force: true });
    this.displays.delete(id);
  }

  agent(id: string): AgentClient {
    let agent = this.agents.get(id);
    if (!agent) {
      const socket = machineFiles(this.machineDir(id)).agentSocket;
      agent = new AgentClient({ connect: () => connect(socket) });
      this.agents.set(id, agent);
    }
    return agent;
  }

  async consoleTail(id: string, lines: number): Promise<string> {
    const file = machineFiles(this.machineDir(id)).serialLog;
    let fd: number;
    try {
      // QEMU's file: opened only as a regular file, never through a link or into a FIFO.
      fd = openSync(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    } catch {
      return '';
    }
    let buffer: Buffer;
    try {
      const stat = fstatSync(fd);
      if (!stat.isFile()) return '';
      const length = Math.min(stat.size, lines * 512, 4 << 20); // enough bytes for the lines asked for
      buffer = Buffer.alloc(length);
      readSync(fd, buffer, 0, length, stat.size - length);
    } finally {
      closeSync(fd);
    }
    return buffer.toString('utf8').split(/\r?\n/).slice(-lines - 1).join('\n').replace(/^\n/, '');
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

  displaySocket(id: string): string {
    return machineFiles(this.machineDir(id)).displaySocket;
  }

  async knownMachineIds(): Promise<string[]> {
    return readdirSync(this.machinesDir);
  }

  /** The active layer of every machine this host has a disk for (but one). */
  private async activeLayers(exceptId?: string): Promise<string[]> {
    const ids = (await this.knownMachineIds()).filter((id) => id !== exceptId);
    return ids.map((id) => this.layers.readState(this.machineDir(id))?.active).filter((active): active is string => Boolean(active));
  }

  /** Asks the guest to flush its file systems before its disk is frozen; without an answer the copy is crash-consistent. */
  private async flushGuest(id: string, what: string): Promise<void> {
    await this.agent(id).syncFilesystems({ timeoutMs: 60_000 }).catch((error: Error) => {
      this.options.logger.warn({ err: error, machine: id }, `guest did not flush before ${what}; taking it crash-consistent`);
    });
  }

  /** Stops talking to machines (they keep running); for shutdown. */
  detachAll(): void {
    for (const id of [...this.agents.keys()]) this.dropAgent(id);
    for (const machine of this.running.values()) machine.qmp.close();
    this.running.clear();
  }

  /**
   * Host name, authorized keys and (once per disk) host keys and machine id. With unlessUnchanged, a
   * machine personalised with the same identity is left as it is: a resumed session has all of it
   * and was ready when saved (sshd's listening socket is restored state), so nothing is awaited but
   * the agent, which the caller has. Probing SSH again cost ~0.2–0.5 s of a resume under TCG.
   */
  private async personalise(id: string, identity: GuestIdentity, options: { unlessUnchanged?: boolean } = {}): Promise<StartedMachine> {
    const agent = this.agent(id);
    const dir = this.machineDir(id);
    const identityHash = createHash('sha256').update(JSON.stringify([identity.hostname, identity.authorizedKeys])).digest('hex');
    const state = this.diskState(id);
    if (options.unlessUnchanged && state.hostKeysGenerated && state.personalised?.identity === identityHash) return { hostKeys: state.personalised.hostKeys };
    await agent.waitReady(this.options.bootTimeoutMs ?? 300_000);
    const newKeys = state.hostKeysGenerated ? undefined : generateHostKeys();
    const result = await agent.personalise({
      hostname: identity.hostname,
      authorized_keys: identity.authorizedKeys,
      regenerate_host_keys: newKeys !== undefined,
      host_keys: newKeys?.map((key) => ({ algorithm: key.algorithm, private_key: key.privateKey, public_key: key.publicKey })),
    });
    const hostKeys = result.host_keys.map((key) => ({ algorithm: key.algorithm, publicKey: key.public_key }));
    this.layers.writeState(dir, { ...this.diskState(id), hostKeysGenerated: true, personalised: { identity: identityHash, hostKeys } });
    await agent.waitReady(60_000); // sshd restarts after new host keys
    return { hostKeys };
  }

  /**
   * Puts a new empty top layer on the running disk with `put` (which tells QEMU to switch) and
   * records it; the intent is written first (see DiskState.pending). The bitmap moves up with it.
   */
  private async newTopLayer(id: string, machine: QemuMachine, put: (next: string) => Promise<unknown>): Promise<void> {
    const dir = this.machineDir(id);
    const state = this.diskState(id);
    const next = nextLayerName(id, state.active);
    this.layers.writeState(dir, { ...state, pending: next });
    const frozen = await activeLayer(machine.qmp);
    await put(next);
    this.layers.writeState(dir, { ...state, active: next, pending: undefined });
    await trackChanges(machine);
    await removeDirtyBitmap(machine.qmp, { node: frozen.node, name: CHANGES_BITMAP }).catch(() => undefined); // frozen: it cannot change
  }

  /** Merges the oldest checkpoint layers until the chain is short enough (see checkpoint-policy). */
  private async compact(id: string, machine: QemuMachine): Promise<void> {
    for (;;) {
      const chain = (await chainNodes(machine.qmp)).filter((layer) => layer.file.startsWith(this.layers.dir + '/'));
      const frozen = chain.slice(1).reverse(); // oldest first
      const shared = await this.layers.usedBy(await this.activeLayers(id), { strict: true }); // unreadable: merge nothing
      const merge = nextMerge(frozen.map((layer) => layer.file), shared);
      if (!merge) return;
      // The names come from QEMU: merge (and remove) only layers this machine's disk made.
      if (!this.layers.isOwnLayer(id, merge.upper) || !this.layers.isOwnLayer(id, merge.lower)) {
        this.options.logger.warn({ machine: id, merge }, 'QEMU names layers that are not this machine\'s; not compacting');
        return;
      }
      const byFile = new Map(frozen.map((layer) => [layer.file, layer.node]));
      await commitIntoBase(machine.qmp, { jobId: 'compact', topNode: byFile.get(merge.upper)!, baseNode: byFile.get(merge.lower)! });
      rmSync(merge.upper, { force: true }); // out of the chain now: the layer above backs onto merge.lower
    }
  }

  /** The layer a running machine writes to, as QMP names it: only one of its own layers is believed. */
  private async runningTop(id: string, machine: QemuMachine, recorded: string): Promise<string> {
    const file = (await activeLayer(machine.qmp)).file;
    if (this.layers.isOwnLayer(id, file)) return basename(file);
    this.options.logger.warn({ machine: id, file }, 'QEMU names a top layer that is not this machine\'s; keeping the recorded one');
    return recorded;
  }

  /** Which file is the top of a stopped machine's disk, after a run that may have died mid-switch. */
  private async settledOffline(state: DiskState): Promise<string> {
    if (!state.pending) return state.active;
    const pending = this.layers.path(state.pending);
    if (existsSync(pending)) {
      const below = await this.layers.backingOf(pending).catch(() => null);
      if (below === this.layers.path(state.active)) return state.pending; // QEMU had switched
      rmSync(pending, { force: true });
    }
    return state.active;
  }

  /**
   * Starts a QEMU in the machine's jail: `work` gets the start options (launch wrapper, log file);
   * whatever happens, the run folder is sealed again, and a start that failed leaves neither a QEMU
   * nor its limits.
   */
  private async jailed(id: string, shape: MachineShape, work: (start: Pick<StartOptions, 'launch' | 'logFile'>) => Promise<void>): Promise<void> {
    if (!this.jail.hasUser(id)) await this.adoptIntoJail(id);
    const launch = await this.jail.beforeStart(id, { vcpu: shape.vcpu, memoryMib: shape.memoryMib });
    try {
      await work({ launch, logFile: machineFiles(this.machineDir(id)).qemuLog }); // seals before the guest runs
    } catch (error) {
      // A start that failed leaves no QEMU of its own behind (it may be paused, never sealed).
      const machine = error instanceof MachineAlreadyRunningError ? undefined : await this.machine(id).catch(() => undefined);
      if (machine) await killMachine(machine).catch(() => undefined);
      if (!(error instanceof MachineAlreadyRunningError)) this.stopped(id);
      await this.jail.seal(id).catch(() => undefined);
      throw error;
    }
  }

  /** A machine made before machines were jailed: a user of its own, its layers its own or shared. */
  private async adoptIntoJail(id: string): Promise<void> {
    await this.jail.admit(id);
    const chain = await this.layers.layersOf(this.diskState(id).active);
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
    if (known?.alive()) return known;
    this.running.delete(id);
    const files = machineFiles(this.machineDir(id));
    const adopted = await adoptMachine({
      id, pidFile: files.pidFile, qmpSocket: files.qmpSocket, agentSocket: files.agentSocket,
      memoryFile: this.options.fileBackedMemory === false ? undefined : files.memoryFile, // a save must know the RAM is a shared file
    });
    if (adopted) this.running.set(id, adopted);
    return adopted;
  }

  private dropAgent(id: string): void {
    this.agents.get(id)?.close();
    this.agents.delete(id);
  }

  private spec(id: string, shape: MachineShape, image: HostImage): MachineSpec {
    const files = machineFiles(this.machineDir(id));
    const entry = this.imageEntry(image);
    return {
      id,
      vcpu: shape.vcpu,
      memoryMib: shape.memoryMib,
      kernel: join(entry.dir, 'vmlinuz'),
      initrd: join(entry.dir, 'initrd.img'),
      disk: this.layers.path(this.diskState(id).active),
      appendArgs: entry.cmdline,
      accelerator: this.accelerator,
      qmpSocket: files.qmpSocket,
      agentSocket: files.agentSocket,
      serialLog: files.serialLog,
      pidFile: files.pidFile,
      memoryFile: this.options.fileBackedMemory === false ? undefined : files.memoryFile,
      // the image's screen; a restore gets the same devices as the boot it continues (same image)
      display: entry.display ? { socket: files.displaySocket, ...entry.display } : undefined,
    };
  }

  private imageEntry(image: HostImage): ImageEntry {
    const entry = this.images.get(image.profile);
    if (entry && entry.image.version === image.version) return entry;
    const dir = join(this.options.imagesDir, image.version);
    const manifest = readImageManifest(dir);
    if (!manifest) throw new Error(`image ${image.version} has no readable manifest.json`);
    return { image, dir, cmdline: manifest.kernel_cmdline, display: manifest.display ?? null };
  }

  private diskState(id: string) {
    const state = this.layers.readState(this.machineDir(id));
    if (!state) throw new Error(`machine ${id} has no disk`);
    return state;
  }

  private machineDir(id: string): string {
    return join(this.machinesDir, id);
  }
}

/** What the host reads of an image version's manifest.json (display: absent in images made before screens). */
function readImageManifest(dir: string): { kernel_cmdline: string; display?: DisplaySize | null } | null {
  try {
    return JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8')) as { kernel_cmdline: string; display?: DisplaySize | null };
  } catch {
    return null;
  }
}

/** Starts "what changed since the last checkpoint" on the machine's active layer. */
async function trackChanges(machine: QemuMachine): Promise<void> {
  const active = await activeLayer(machine.qmp);
  const known = await dirtyBitmapCount(machine.qmp, { node: active.node, name: CHANGES_BITMAP });
  if (known === undefined) await addDirtyBitmap(machine.qmp, { node: active.node, name: CHANGES_BITMAP });
}

/** QEMU node names are at most 31 characters: the layer's index names it. */
function nodeName(layer: string): string {
  return `disk${layerIndex(layer)}`;
}

function layerIndex(name: string): number {
  return Number(/-(\d+)\.qcow2$/.exec(name)?.[1] ?? 0);
}

function nextLayerName(id: string, active: string): string {
  return `${id}-${layerIndex(active) + 1}.qcow2`;
}
