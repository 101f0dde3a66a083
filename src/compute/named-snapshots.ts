// Named snapshots on the host that runs the machine (docs/snapshots.md): a snapshot's files live
// in `<data>/snapshots/<snapshot id>/` — a standalone qcow2 that backs onto the image disk its
// machine's chain ends on (only what differs from the image), and with memory the RAM, device state
// and console log a new machine continues, plus `snapshot.json`. A snapshot's disk is a chain file
// new machines back onto (LayerStore accepts it, the jail shows it read-only); the image version it
// backs onto stays while it exists (versionsInUse).
// A snapshot is taken in its machine's turn (no checkpoint merges layers under the copy); it is
// written to `<id>.part` and renamed once whole. Deleting one whose disk new machines still back
// onto leaves a `deleted` mark: the folder goes once no chain uses it (sweep()).
import { chmodSync, copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { createHash } from 'node:crypto';
import { Type, type Static } from '@sinclair/typebox';
import { parsePeerJson, peerShape } from '../protocol/peer-input';
import { safeReaddir } from './boot-snapshots';
import type { DiskChains } from './disk-chain';
import { type InstantCopies, type MachineProcesses, type SavedMachineState } from './instant-copies';
import type { MachineJail } from './jail';
import { headerProblem, type LayerStore } from './layers';
import type { Accelerator, CreatedMachine, GuestIdentity, HostImage, MachineShape, TakenSnapshot } from './machine-host';
import { captureLive, copyRamFile, machineFiles, qcow2Header, qemuBuild, rebaseOffline, rebaseUnsafe } from './qemu';

const MIB = 1048576;
const SNAPSHOT_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const FILES = { disk: 'disk.qcow2', memory: 'memory.ram', state: 'state.bin', serialLog: 'serial.log', manifest: 'snapshot.json', deleted: 'deleted' };

/** `snapshot.json`: what a restore needs to know, and what must match for its memory to be continued. */
const ManifestSchema = Type.Object({
  format: Type.Literal(1),
  disk_bytes: Type.Integer({ minimum: 1, maximum: Number.MAX_SAFE_INTEGER }),
  memory: Type.Union([
    Type.Object({
      qemu: Type.String({ maxLength: 1000 }),
      accelerator: Type.String({ maxLength: 16 }),
      /** The CPU the guest saw: the host's own under KVM (`-cpu host`), QEMU's default model under TCG. */
      cpu: Type.String({ maxLength: 200 }),
      vcpu: Type.Integer({ minimum: 1, maximum: 1024 }),
      memory_mib: Type.Integer({ minimum: 1, maximum: 1 << 30 }),
      generation_id: Type.Boolean(),
      /** The state file holds the RAM (a live capture of a running machine); else a RAM file is beside it. */
      ram_in_state: Type.Boolean(),
    }),
    Type.Null(),
  ]),
});
type SnapshotManifest = Static<typeof ManifestSchema>;
const ManifestShape = peerShape('named snapshot manifest', ManifestSchema);

export interface NamedSnapshotSettings {
  /** Where snapshots' folders are (root's; machine users may pass through). */
  dir: string;
  accelerator: Accelerator;
  logger: { info(object: object, message: string): void; warn(object: object, message: string): void };
}

export class NamedSnapshots {
  /** Creates from each snapshot running now: a delete meanwhile only marks it (their disks are not in a chain yet). */
  private readonly creating = new Map<string, number>();

  constructor(
    private readonly machines: MachineProcesses,
    private readonly parts: { jail: MachineJail; layers: LayerStore; chains: DiskChains; copies: InstantCopies },
    private readonly settings: NamedSnapshotSettings,
  ) {}

  /** Takes the snapshot in the machine's turn: its disk (cut while it runs) and, with `memory`, its memory. */
  take(id: string, snapshotId: string, shape: MachineShape, options: { memory: boolean }): Promise<TakenSnapshot> {
    checkId(snapshotId);
    return this.machines.exclusive(id, async () => {
      const machine = await this.machines.machine(id);
      const run = machineFiles(this.machines.machineDir(id));
      const hasSession = !machine && existsSync(run.stateFile) && existsSync(run.memoryFile);
      if (options.memory && !machine && !hasSession) throw new Error(`machine ${id} is stopped without a saved session: its snapshot can hold only its disk`);
      const state = this.parts.chains.state(id);
      const cut = `${snapshotId}-0.qcow2`; // a layer of the snapshot's own: the disk at the moment of the cut
      let part: string | undefined;
      let pausedMs = 0;
      try {
        let memory: { stateFile: string; memoryFile: string; ramInState: boolean } | null = null;
        part = this.folderOf(`${snapshotId}.part`);
        rmSync(part, { recursive: true, force: true });
        mkdirSync(this.settings.dir, { recursive: true, mode: 0o755 });
        mkdirSync(part, { mode: 0o755 });
        const into = { stateFile: join(part, FILES.state), memoryFile: join(part, FILES.memory) };
        if (machine && options.memory) {
          // The RAM goes while the guest runs; it stands still only for the disk cut and the last pages with the device state.
          const captured = await captureLive(machine, {
            stateFile: into.stateFile, memoryMib: shape.memoryMib, socketOwner: this.parts.jail.userOf(id), atSwitchover: () => this.parts.copies.cutRunningDisk(id, machine, cut),
          });
          pausedMs = captured.pausedMs;
          memory = { ...into, ramInState: true };
        } else if (machine) {
          await this.machines.flushGuest(id, 'a snapshot'); // what programs wrote is in it, not only what reached the disk
          await this.parts.copies.cutRunningDisk(id, machine, cut);
        } else {
          await this.parts.copies.overlayOnStoppedDisk(id, cut);
          if (options.memory) {
            await copyRamFile(run.memoryFile, into.memoryFile);
            copyFileSync(run.stateFile, into.stateFile);
            memory = { ...into, ramInState: false };
          }
        }
        await this.flatten(id, cut, join(part, FILES.disk), join(part, 'work'));
        if (memory && existsSync(run.serialLog)) copyFileSync(run.serialLog, join(part, FILES.serialLog));
        const manifest: SnapshotManifest = {
          format: 1,
          disk_bytes: (await qcow2Header(join(part, FILES.disk)))['virtual-size'],
          memory: memory
            ? { qemu: qemuBuild(), accelerator: this.settings.accelerator, cpu: guestCpu(this.settings.accelerator), vcpu: shape.vcpu, memory_mib: shape.memoryMib, generation_id: state.generationId ?? false, ram_in_state: memory.ramInState }
            : null,
        };
        writeFileSync(join(part, FILES.manifest), `${JSON.stringify(manifest, null, 2)}\n`, { mode: 0o644 });
        for (const name of readdirSync(part)) chmodSync(join(part, name), name === FILES.manifest ? 0o644 : 0o600); // the disk: read by machines made from it, through ACLs
        const whole = part.slice(0, -'.part'.length);
        renameSync(part, whole);
        part = undefined;
        return { memory: manifest.memory !== null, sizeBytes: allocatedBytes(whole), pausedMs };
      } finally {
        rmSync(this.parts.layers.path(cut), { force: true });
        if (part) rmSync(part, { recursive: true, force: true });
      }
    });
  }

  /**
   * The disk `cut` shows (a layer of the snapshot's own on the machine's chain as it was) as one
   * qcow2 at `output` holding every cluster the chain holds above its image disk, backing onto that
   * image disk alone. qemu-img (root) never reads a file a machine's QEMU can still write: the
   * chain's layers are copied byte for byte into a root-only folder first, their copies chained to
   * each other by us (`rebase -u`, which reads no backing file) and their headers checked there, so
   * a QEMU that rewrites a header while this runs changes nothing that is read. Image disks and
   * snapshot disks (root's, read-only to machines) are read where they are.
   */
  private async flatten(id: string, cut: string, output: string, work: string): Promise<void> {
    const { layers } = this.parts;
    const chain = await layers.filesOf(cut); // names checked (a first look; the copies are what counts)
    const base = chain.at(-1)!;
    if (!layers.isImageFile(base)) throw new Error(`the disk chain of ${cut} does not end on an image disk`);
    // A header may name another machine's layer or another snapshot's disk: only what the machine's
    // own user may read is its disk (its layers, those shared by its fork source, its snapshot's).
    await this.parts.jail.assertReadable(id, chain.slice(1, -1).filter((file) => !layers.isImageFile(file))); // images are everyone's
    mkdirSync(work, { mode: 0o700 });
    const copies = chain.slice(0, -1).map((file, index) => (dirname(file) === layers.dir ? join(work, `${index}.qcow2`) : file));
    for (const [index, file] of chain.slice(0, -1).entries()) {
      if (copies[index] !== file) await copyRamFile(file, copies[index]!); // cp --sparse: a layer's holes stay holes
    }
    for (let index = copies.length - 1; index >= 0; index--) {
      if (copies[index] === chain[index]) continue; // a snapshot's disk: root's, already on its image
      const problem = headerProblem(await qcow2Header(copies[index]!));
      if (problem) throw new Error(`a layer of the disk chain of ${cut} ${problem}`);
      await rebaseUnsafe(copies[index]!, copies[index + 1] ?? base);
    }
    await rebaseOffline(copies[0]!, base);
    renameSync(copies[0]!, output);
    rmSync(work, { recursive: true, force: true });
  }

  /**
   * A new machine from the snapshot: its memory continued when asked, the snapshot has one and it
   * was saved by this QEMU build and accelerator for this shape; else (or when that restore fails)
   * its disk booted. The disk is the snapshot's, grown to the machine's size.
   */
  async create(id: string, snapshotId: string, images: { memory: HostImage; boot: HostImage }, shape: MachineShape, identity: GuestIdentity, options: { memory: boolean }): Promise<CreatedMachine> {
    checkId(snapshotId);
    this.creating.set(snapshotId, (this.creating.get(snapshotId) ?? 0) + 1);
    try {
      return await this.createFrom(id, snapshotId, images, shape, identity, options);
    } finally {
      const left = (this.creating.get(snapshotId) ?? 1) - 1;
      if (left > 0) this.creating.set(snapshotId, left);
      else this.creating.delete(snapshotId);
    }
  }

  private async createFrom(id: string, snapshotId: string, images: { memory: HostImage; boot: HostImage }, shape: MachineShape, identity: GuestIdentity, options: { memory: boolean }): Promise<CreatedMachine> {
    const found = this.find(snapshotId);
    if (!found) throw new Error(`the files of snapshot ${snapshotId} are not on this host`);
    const { dir, manifest } = found;
    const saved: SavedMachineState = {
      disk: join(dir, FILES.disk), diskBytes: manifest.disk_bytes, memoryFile: join(dir, FILES.memory), stateFile: join(dir, FILES.state), serialLog: join(dir, FILES.serialLog),
      generationId: manifest.memory?.generation_id ?? true,
      ramInState: manifest.memory?.ram_in_state ?? false,
    };
    const mismatch = !options.memory ? 'not asked for' : !saved.ramInState && !existsSync(saved.memoryFile) ? 'the snapshot holds no RAM file' : this.memoryMismatch(manifest, shape);
    if (!mismatch) {
      try {
        return await this.parts.copies.restoreCopy(id, images.memory, shape, identity, saved, 'snapshot_memory', (disk) => this.parts.jail.grantRead(id, [disk]));
      } catch (error) {
        this.settings.logger.warn({ err: error, machine: id, snapshot: snapshotId }, 'a snapshot\'s memory could not be continued; booting its disk');
        await this.machines.destroy(id);
      }
    } else if (options.memory && manifest.memory) {
      this.settings.logger.info({ machine: id, snapshot: snapshotId, reason: mismatch }, 'booting a snapshot\'s disk instead of continuing its memory');
    }
    await this.newDiskOn(id, saved.disk, Math.max(shape.diskMib * MIB, manifest.disk_bytes));
    const started = await this.machines.boot(id, shape, images.boot, identity);
    return { ...started, startedFrom: 'snapshot_disk' };
  }

  /** The machine's first layer on the snapshot's disk, which its user may then read. */
  private async newDiskOn(id: string, disk: string, sizeBytes: number): Promise<void> {
    await this.machines.newDisk(id, disk, sizeBytes);
    await this.parts.jail.grantRead(id, [disk]);
  }

  /** Removes the snapshot's files; a disk machines still back onto is marked and goes once they are gone. */
  async delete(snapshotId: string, activeLayers: string[]): Promise<void> {
    checkId(snapshotId);
    const found = this.find(snapshotId, { deletedToo: true });
    rmSync(this.folderOf(`${snapshotId}.part`), { recursive: true, force: true });
    if (!found) return;
    if (!(await this.inUse(found.dir, activeLayers))) {
      rmSync(found.dir, { recursive: true, force: true });
      return;
    }
    writeFileSync(join(found.dir, FILES.deleted), '');
    for (const name of [FILES.memory, FILES.state, FILES.serialLog]) rmSync(join(found.dir, name), { force: true });
  }

  /**
   * Folders of deleted snapshots no chain uses any more, and snapshots never finished (`.part`, left
   * by a service that died while taking one: only at start, when none is being taken).
   */
  async sweep(activeLayers: string[], options: { atStart: boolean }): Promise<void> {
    for (const name of safeReaddir(this.settings.dir)) {
      const dir = this.folderOf(name);
      if (name.endsWith('.part') ? options.atStart : existsSync(join(dir, FILES.deleted)) && !(await this.inUse(dir, activeLayers))) {
        rmSync(dir, { recursive: true, force: true });
      }
    }
  }

  /** Every snapshot disk on this host. */
  disks(): string[] {
    return safeReaddir(this.settings.dir).filter((name) => SNAPSHOT_ID.test(name)).map((name) => join(this.folderOf(name), FILES.disk)).filter((disk) => existsSync(disk));
  }

  /** Image versions the snapshots here back onto. */
  async versionsInUse(): Promise<Set<string>> {
    const versions = new Set<string>();
    for (const name of safeReaddir(this.settings.dir)) {
      const disk = join(this.folderOf(name), FILES.disk);
      if (name.endsWith('.part') || !existsSync(disk)) continue;
      const base = await this.parts.layers.backingOf(disk);
      const version = base && this.parts.layers.imageVersionOf(base);
      if (version) versions.add(version);
    }
    return versions;
  }

  private memoryMismatch(manifest: SnapshotManifest, shape: MachineShape): string | null {
    const memory = manifest.memory;
    if (!memory) return 'the snapshot holds no memory';
    if (memory.vcpu !== shape.vcpu || memory.memory_mib !== shape.memoryMib) return 'the machine has another vCPU count or memory size than the snapshot\'s';
    if (memory.qemu !== qemuBuild() || memory.accelerator !== this.settings.accelerator) return 'the snapshot was saved by another QEMU build or accelerator';
    if (memory.cpu !== guestCpu(this.settings.accelerator)) return 'the snapshot was saved on another CPU';
    return null;
  }

  /**
   * Whether a machine's chain (of these active layers) uses the snapshot's disk, or a create from it
   * runs; a chain that cannot be read counts as using it.
   */
  private async inUse(dir: string, activeLayers: string[]): Promise<boolean> {
    if (this.creating.has(basename(dir))) return true;
    const disk = join(dir, FILES.disk);
    for (const active of activeLayers) {
      const files = await this.parts.layers.filesOf(active).catch(() => null);
      if (!files || files.includes(disk)) return true;
    }
    return false;
  }

  private find(snapshotId: string, options: { deletedToo?: boolean } = {}): { dir: string; manifest: SnapshotManifest } | null {
    const dir = this.folderOf(snapshotId);
    if (!existsSync(join(dir, FILES.manifest))) return null;
    if (!options.deletedToo && existsSync(join(dir, FILES.deleted))) return null;
    const manifest = parsePeerJson(ManifestShape, readText(join(dir, FILES.manifest)));
    if (manifest.ok) return { dir, manifest: manifest.value };
    this.settings.logger.warn({ snapshot: snapshotId, dir, reason: manifest.reason }, 'a snapshot\'s manifest is unreadable');
    return options.deletedToo ? { dir, manifest: { format: 1, disk_bytes: 1, memory: null } } : null;
  }

  private folderOf(name: string): string {
    return join(this.settings.dir, name);
  }
}

let hostCpu: string | undefined;

/** What CPU a guest of this accelerator sees: the host's model and features under KVM (`-cpu host`). */
function guestCpu(accelerator: string): string {
  if (accelerator !== 'kvm') return 'qemu-default';
  hostCpu ??= (() => {
    const info = readText('/proc/cpuinfo').split('\n');
    const field = (name: string) => info.find((line) => line.startsWith(name))?.split(':')[1]?.trim() ?? '';
    return `host:${field('model name')}:${createHash('sha256').update(field('flags')).digest('hex').slice(0, 16)}`;
  })();
  return hostCpu;
}

function checkId(snapshotId: string): void {
  if (!SNAPSHOT_ID.test(snapshotId)) throw new Error(`${JSON.stringify(snapshotId)} is not a snapshot id`);
}

/** Bytes the files of a folder take on disk (sparse RAM files count what they hold). */
function allocatedBytes(dir: string): number {
  return readdirSync(dir).reduce((sum, name) => sum + statSync(join(dir, name)).blocks * 512, 0);
}

function readText(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return '';
  }
}
