// MachineHost on this host's QEMU: images from the image store, one detached QEMU per machine
// (it outlives the service; a restart adopts it), the guest agent over virtio-serial, guest RAM in
// a file so a memory session saves and resumes in well under a second.
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, openSync, readSync, closeSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { readLatestImage } from '../../images';
import { AgentClient } from './agent-client';
import { LayerStore } from './layers';
import type { Accelerator, GuestIdentity, HostImage, ImageBuildState, ImageProfile, MachineHost, MachineShape, StartedMachine } from './machine-host';
import {
  adoptMachine,
  createOverlay,
  killMachine,
  liveFork,
  machineFiles,
  MachineSpec,
  QemuMachine,
  restoreMemory,
  saveMemory,
  startMachine,
  stopMachine,
} from './qemu';

export interface QemuHostOptions {
  dataDir: string;
  imagesDir: string;
  accelerator: Accelerator;
  /** Guest RAM in a file (share=on): saves write device state only. */
  fileBackedMemory?: boolean;
  /** Cold boot to "SSH listens, commands accepted"; generous under TCG. */
  bootTimeoutMs?: number;
  logger: { info(object: object, message: string): void; warn(object: object, message: string): void };
}

interface ImageEntry {
  image: HostImage;
  dir: string;
  cmdline: string;
}

export class QemuMachineHost implements MachineHost {
  readonly accelerator: Accelerator;
  private readonly machinesDir: string;
  private readonly layers: LayerStore;
  private readonly running = new Map<string, QemuMachine>();
  private readonly agents = new Map<string, AgentClient>();
  private readonly images = new Map<ImageProfile, ImageEntry>();
  private readonly builds = new Map<ImageProfile, ImageBuildState>();

  constructor(private readonly options: QemuHostOptions) {
    this.accelerator = options.accelerator;
    this.machinesDir = join(options.dataDir, 'machines');
    this.layers = new LayerStore(join(options.dataDir, 'layers'));
    mkdirSync(this.machinesDir, { recursive: true });
    mkdirSync(this.layers.dir, { recursive: true });
  }

  /** Reads the newest built image of a profile (after a build, and at start). */
  async refreshImage(profile: ImageProfile): Promise<HostImage | null> {
    const latest = await readLatestImage(this.options.imagesDir, profile);
    if (!latest) return null;
    const image = { profile, version: latest.manifest.version, artifactKey: latest.manifest.sha256['disk.qcow2'] ?? latest.manifest.version };
    this.images.set(profile, { image, dir: latest.dir, cmdline: latest.manifest.kernel_cmdline });
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

  async createDisk(id: string, image: HostImage, diskMib: number): Promise<void> {
    const dir = this.machineDir(id);
    mkdirSync(dir, { recursive: true });
    const active = `${id}-0.qcow2`;
    await createOverlay(join(this.imageEntry(image).dir, 'disk.qcow2'), this.layers.path(active), { sizeBytes: diskMib * 1048576 });
    this.layers.writeState(dir, { active, hostKeysGenerated: false });
  }

  async forkDisk(sourceId: string, targetId: string): Promise<void> {
    const source = this.diskState(sourceId);
    const targetDir = this.machineDir(targetId);
    mkdirSync(targetDir, { recursive: true });
    const forkActive = `${targetId}-0.qcow2`;
    const machine = await this.machine(sourceId);
    if (machine) {
      // The source's top freezes and becomes the shared backing of its new top and of the copy.
      const next = nextLayerName(sourceId, source.active);
      await liveFork(machine.qmp, {
        newActiveFile: this.layers.path(next),
        newActiveNode: `disk${layerIndex(next)}`, // QEMU node names are at most 31 characters
        forkFile: this.layers.path(forkActive),
      });
      this.layers.writeState(this.machineDir(sourceId), { ...source, active: next });
    } else {
      await createOverlay(this.layers.path(source.active), this.layers.path(forkActive));
    }
    this.layers.writeState(targetDir, { active: forkActive, hostKeysGenerated: false });
  }

  async boot(id: string, shape: MachineShape, image: HostImage, identity: GuestIdentity): Promise<StartedMachine> {
    const files = machineFiles(this.machineDir(id));
    rmSync(files.stateFile, { force: true });
    rmSync(files.memoryFile, { force: true });
    const machine = await startMachine(this.spec(id, shape, image));
    this.running.set(id, machine);
    return this.personalise(id, identity);
  }

  async resume(id: string, shape: MachineShape, image: HostImage, identity: GuestIdentity): Promise<StartedMachine> {
    const files = machineFiles(this.machineDir(id));
    const { machine } = await restoreMemory(this.spec(id, shape, image), { stateFile: files.stateFile });
    this.running.set(id, machine);
    rmSync(files.stateFile, { force: true }); // the session is live again; a later stop saves a new one
    const agent = this.agent(id);
    await agent.waitConnected(60_000);
    await agent.setTime(Date.now()); // the guest clock stood still while the session was saved
    return this.personalise(id, identity);
  }

  async hasSession(id: string): Promise<boolean> {
    return existsSync(machineFiles(this.machineDir(id)).stateFile);
  }

  async discardSession(id: string): Promise<void> {
    const files = machineFiles(this.machineDir(id));
    rmSync(files.stateFile, { force: true });
    if (!(await this.machine(id))) rmSync(files.memoryFile, { force: true });
  }

  async stop(id: string, options: { saveSession: boolean }): Promise<{ sessionSaved: boolean }> {
    const machine = await this.machine(id);
    if (!machine) return { sessionSaved: await this.hasSession(id) };
    this.dropAgent(id);
    if (options.saveSession) {
      try {
        await saveMemory(machine, { stateFile: machineFiles(this.machineDir(id)).stateFile, durable: true });
        this.running.delete(id);
        return { sessionSaved: true };
      } catch (error) {
        this.options.logger.warn({ err: error, machine: id }, 'memory session could not be saved; stopping without it');
      }
    }
    await stopMachine(machine, { powerdownTimeoutMs: 15_000 });
    this.running.delete(id);
    rmSync(machineFiles(this.machineDir(id)).memoryFile, { force: true });
    return { sessionSaved: false };
  }

  async isRunning(id: string): Promise<boolean> {
    return (await this.machine(id)) !== undefined;
  }

  async adopt(id: string): Promise<boolean> {
    return (await this.machine(id)) !== undefined;
  }

  async destroy(id: string): Promise<void> {
    const machine = await this.machine(id);
    this.dropAgent(id);
    if (machine) await killMachine(machine);
    this.running.delete(id);
    const state = this.layers.readState(this.machineDir(id));
    if (state) {
      const others = (await this.knownMachineIds()).filter((other) => other !== id).map((other) => this.layers.readState(this.machineDir(other))?.active);
      await this.layers.release(state.active, others.filter((active): active is string => Boolean(active)));
    }
    rmSync(this.machineDir(id), { recursive: true, force: true });
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
    if (!existsSync(file)) return '';
    const size = statSync(file).size;
    const length = Math.min(size, lines * 512, 4 << 20); // enough bytes for the lines asked for
    const buffer = Buffer.alloc(length);
    const fd = openSync(file, 'r');
    try {
      readSync(fd, buffer, 0, length, size - length);
    } finally {
      closeSync(fd);
    }
    return buffer.toString('utf8').split(/\r?\n/).slice(-lines - 1).join('\n').replace(/^\n/, '');
  }

  async knownMachineIds(): Promise<string[]> {
    return readdirSync(this.machinesDir);
  }

  /** Stops talking to machines (they keep running); for shutdown. */
  detachAll(): void {
    for (const id of [...this.agents.keys()]) this.dropAgent(id);
    for (const machine of this.running.values()) machine.qmp.close();
    this.running.clear();
  }

  private async personalise(id: string, identity: GuestIdentity): Promise<StartedMachine> {
    const agent = this.agent(id);
    await agent.waitReady(this.options.bootTimeoutMs ?? 300_000);
    const dir = this.machineDir(id);
    const state = this.diskState(id);
    const result = await agent.personalise({
      hostname: identity.hostname,
      authorized_keys: identity.authorizedKeys,
      regenerate_host_keys: !state.hostKeysGenerated,
    });
    if (!state.hostKeysGenerated) this.layers.writeState(dir, { ...state, hostKeysGenerated: true });
    await agent.waitReady(60_000); // sshd restarts after new host keys
    return { hostKeys: result.host_keys.map((key) => ({ algorithm: key.algorithm, publicKey: key.public_key })) };
  }

  private async machine(id: string): Promise<QemuMachine | undefined> {
    const known = this.running.get(id);
    if (known?.alive()) return known;
    this.running.delete(id);
    const files = machineFiles(this.machineDir(id));
    const adopted = await adoptMachine({ id, pidFile: files.pidFile, qmpSocket: files.qmpSocket, agentSocket: files.agentSocket });
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
    };
  }

  private imageEntry(image: HostImage): ImageEntry {
    const entry = this.images.get(image.profile);
    if (entry && entry.image.version === image.version) return entry;
    const dir = join(this.options.imagesDir, image.version);
    const manifest = JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8')) as { kernel_cmdline: string };
    return { image, dir, cmdline: manifest.kernel_cmdline };
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

function layerIndex(name: string): number {
  return Number(/-(\d+)\.qcow2$/.exec(name)?.[1] ?? 0);
}

function nextLayerName(id: string, active: string): string {
  return `${id}-${layerIndex(active) + 1}.qcow2`;
}
