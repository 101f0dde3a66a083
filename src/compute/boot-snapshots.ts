// Boot snapshots: per image version and machine configuration, a machine booted once to ready and
// saved with its memory. A new machine of that configuration restores a copy instead of booting
// (a create then costs about what a resume costs) and is personalised afterwards.
//
// A snapshot lives in its image version's folder, `<version>/boot-snapshots/<key>/`, so it goes
// when the version goes and machines' disk chains may back onto it like onto the image's disk.
// Each making's files carry a name of their own (`<made>` below), because copies' overlays name
// their backing disk by path: a snapshot made again (after one failed to restore) must never put
// different contents under a path an existing machine backs onto.
//   disk-<made>.qcow2    the template's disk as it was when saved (backs onto the image's disk);
//                        world-readable like the image, every copy's overlay backs onto it; kept
//                        until the version goes, also after a newer making replaced the snapshot
//   memory-<made>.ram    the guest RAM file (root's only: each copy gets a copy, sparse or reflinked)
//   state-<made>.bin     device state, root's only
//   serial-<made>.log    the template's boot log, the start of each copy's console log
//   snapshot.json        what it was made from and its files; written last (by a rename), so a
//                        folder without it holds no ready snapshot
// The key covers everything the saved state depends on: image version, vcpu, memory, accelerator
// and the QEMU build (device state is not portable across QEMU versions). The disk size is not in
// it: a copy's overlay is larger and the guest grows its file system after the restore.
import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, chownSync, copyFileSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { acquireLock, type HeldLock } from '../../images/lock';
import type { Accelerator, HostImage, MachineShape } from './machine-host';
import { qemuBuild } from './qemu';

/** Bumped when the folder's layout or the way copies are made changes. */
const FORMAT = 2;
/** Machine ids of templates being booted for a snapshot (never an instance's: those are generated ids). */
const TEMPLATE_PREFIX = 'snapshot-';

export type SnapshotShape = Pick<MachineShape, 'vcpu' | 'memoryMib'>;

export interface BootSnapshot {
  key: string;
  dir: string;
  disk: string;
  memoryFile: string;
  stateFile: string;
  serialLog: string;
  /** The disk's virtual size when saved: a copy grows from it. */
  diskBytes: number;
}

interface SnapshotManifest {
  format: number;
  key: string;
  image_version: string;
  vcpu: number;
  memory_mib: number;
  accelerator: Accelerator;
  qemu: string;
  disk_bytes: number;
  created_at: string;
  /** From the template's start to its saved state. */
  made_in_ms: number;
  /** File names in the snapshot's folder. */
  files: { disk: string; memory: string; state: string; serial_log: string };
}

export class BootSnapshotStore {
  constructor(
    private readonly versionDir: (version: string) => string,
    private readonly accelerator: Accelerator,
  ) {}

  key(image: HostImage, shape: SnapshotShape): string {
    const inputs = { format: FORMAT, version: image.version, vcpu: shape.vcpu, memoryMib: shape.memoryMib, accelerator: this.accelerator, qemu: qemuBuild() };
    return createHash('sha256').update(JSON.stringify(inputs)).digest('hex').slice(0, 20);
  }

  /** The ready snapshot of this configuration, or null. */
  find(image: HostImage, shape: SnapshotShape): BootSnapshot | null {
    const key = this.key(image, shape);
    const dir = this.dirOf(image, key);
    let manifest: SnapshotManifest;
    try {
      manifest = JSON.parse(readFileSync(join(dir, 'snapshot.json'), 'utf8')) as SnapshotManifest;
    } catch {
      return null;
    }
    if (manifest.format !== FORMAT || manifest.key !== key) return null;
    return { key, dir, ...filesIn(dir, manifest.files), diskBytes: manifest.disk_bytes };
  }

  /** The machine id a template of this configuration boots as. */
  templateId(image: HostImage, shape: SnapshotShape): string {
    return `${TEMPLATE_PREFIX}${this.key(image, shape).slice(0, 16)}`;
  }

  isTemplate(id: string): boolean {
    return id.startsWith(TEMPLATE_PREFIX);
  }

  /** Held while a snapshot of this configuration is made (several services may share the image folder). */
  lock(image: HostImage, shape: SnapshotShape): Promise<HeldLock> {
    const key = this.key(image, shape);
    mkdirSync(this.rootOf(image), { recursive: true, mode: 0o755 });
    return acquireLock(join(this.rootOf(image), `${key}.lock`), `making boot snapshot ${key}`);
  }

  /**
   * Moves a saved template's files into place under names of this making: the disk public
   * (read-only for everyone, like the image), memory and state root's own. The manifest is renamed
   * into place last, so a reader sees all or nothing.
   */
  publish(image: HostImage, shape: SnapshotShape, files: Omit<BootSnapshot, 'key' | 'dir'>, madeInMs: number): BootSnapshot {
    const key = this.key(image, shape);
    const dir = this.dirOf(image, key);
    mkdirSync(dir, { recursive: true, mode: 0o755 });
    this.retireMemory(dir);
    const made = `${Date.now().toString(36)}-${randomBytes(3).toString('hex')}`;
    const names = { disk: `disk-${made}.qcow2`, memory: `memory-${made}.ram`, state: `state-${made}.bin`, serial_log: `serial-${made}.log` };
    const target = filesIn(dir, names);
    for (const [from, to, mode] of [
      [files.disk, target.disk, 0o644],
      [files.memoryFile, target.memoryFile, 0o600],
      [files.stateFile, target.stateFile, 0o600],
      [files.serialLog, target.serialLog, 0o600],
    ] as const) {
      if (!moveFile(from, to)) continue; // a template that never wrote a console line
      chownSync(to, 0, 0);
      chmodSync(to, mode);
    }
    const manifest: SnapshotManifest = {
      format: FORMAT, key, image_version: image.version, vcpu: shape.vcpu, memory_mib: shape.memoryMib, accelerator: this.accelerator,
      qemu: qemuBuild(), disk_bytes: files.diskBytes, created_at: new Date().toISOString(), made_in_ms: madeInMs, files: names,
    };
    writeFileSync(join(dir, 'snapshot.json.part'), `${JSON.stringify(manifest, null, 2)}\n`, { mode: 0o644 });
    renameSync(join(dir, 'snapshot.json.part'), join(dir, 'snapshot.json'));
    return { key, dir, ...target, diskBytes: files.diskBytes };
  }

  /**
   * The configurations that have snapshots on other versions of the image's profile (the ones this
   * host's users create): after a build, the new version gets snapshots of those.
   */
  configurationsInUse(image: HostImage, imagesDir: string): SnapshotShape[] {
    const shapes = new Map<string, SnapshotShape>();
    for (const version of safeReaddir(imagesDir)) {
      if (version === image.version || readJson<{ profile?: string }>(join(imagesDir, version, 'manifest.json'))?.profile !== image.profile) continue;
      const root = join(imagesDir, version, 'boot-snapshots');
      for (const key of safeReaddir(root)) {
        const manifest = readJson<SnapshotManifest>(join(root, key, 'snapshot.json'));
        if (manifest?.accelerator === this.accelerator) shapes.set(`${manifest.vcpu}/${manifest.memory_mib}`, { vcpu: manifest.vcpu, memoryMib: manifest.memory_mib });
      }
    }
    return [...shapes.values()];
  }

  /**
   * A snapshot that failed to restore: gone, so the next create boots and a new one is made. Its
   * disk stays (machines restored from it back onto it) until the image version goes.
   */
  discard(snapshot: BootSnapshot): void {
    rmSync(join(snapshot.dir, 'snapshot.json'), { force: true });
    this.retireMemory(snapshot.dir);
  }

  /** Removes the RAM, state and console files of earlier makings in a folder that holds no ready snapshot. */
  private retireMemory(dir: string): void {
    for (const name of safeReaddir(dir)) {
      if (/^(memory-.+\.ram|state-.+\.bin|serial-.+\.log|snapshot\.json\.part)$/.test(name)) rmSync(join(dir, name), { force: true });
    }
  }

  private rootOf(image: HostImage): string {
    return join(this.versionDir(image.version), 'boot-snapshots');
  }

  private dirOf(image: HostImage, key: string): string {
    return join(this.rootOf(image), key);
  }

}

/** A folder's entries; none when it cannot be read (it does not exist yet). */
export function safeReaddir(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

function readJson<T>(file: string): T | null {
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as T;
  } catch {
    return null;
  }
}

function filesIn(dir: string, names: SnapshotManifest['files']): Pick<BootSnapshot, 'disk' | 'memoryFile' | 'stateFile' | 'serialLog'> {
  return { disk: join(dir, names.disk), memoryFile: join(dir, names.memory), stateFile: join(dir, names.state), serialLog: join(dir, names.serial_log) };
}

/** Renames, or copies across file systems (the image folder may be on another); false when `from` does not exist. */
function moveFile(from: string, to: string): boolean {
  try {
    renameSync(from, to);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return false;
    if (code !== 'EXDEV') throw error;
    copyFileSync(from, to);
    unlinkSync(from);
  }
  return true;
}
