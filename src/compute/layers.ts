// Where disk layers live and which machine's chain uses which. Every qcow2 layer of every machine
// is a file in one folder, so a live fork can make the source's old top the shared backing of
// both machines without either machine's folder owning it. A layer is removed only when no
// remaining machine's chain uses it (images are never removed here).
import { existsSync, lstatSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { basename, dirname, isAbsolute, join, relative, resolve, sep } from 'node:path';
import { qcow2Header, type ImageInfo } from './qemu';

/** Layer files are `<machine id>-<n>.qcow2`: the machine whose disk made them. */
const LAYER_NAME = /^([A-Za-z0-9_-]{1,64})-(\d+)\.qcow2$/;
/** A named snapshot's folder (its id); its disk is `disk.qcow2` in it (see named-snapshots.ts). */
const SNAPSHOT_FOLDER = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
/** No chain is longer (checkpoints and forks are compacted long before). */
const MAX_CHAIN = 64;

export interface DiskState {
  /** File name (in the layers folder) of the machine's active top layer. */
  active: string;
  /** SSH host keys were generated on this disk. */
  hostKeysGenerated: boolean;
  /**
   * A new top layer being put on the running disk (checkpoint, live fork): written before QEMU
   * switches to it, so that a service killed in between can tell which file is the real top.
   */
  pending?: string;
  /**
   * Machines that run with a VM generation ID device (every disk made since boot snapshots); the
   * device set of a saved session must not change, so disks made before keep running without it.
   */
  generationId?: boolean;
  /** What the guest was last personalised with (a hash) and the host keys it answered. */
  personalised?: { identity: string; hostKeys: Array<{ algorithm: string; publicKey: string }> };
}

export class LayerStore {
  /** `imagesDir`: where the image disks that chains end on live; `snapshotsDir`: named snapshots' disks, which chains may back onto. */
  constructor(
    readonly dir: string,
    private readonly imagesDir: string,
    private readonly snapshotsDir?: string,
  ) {}

  path(name: string): string {
    return join(this.dir, name);
  }

  readState(machineDir: string): DiskState | null {
    const file = join(machineDir, 'disk.json');
    return existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as DiskState) : null;
  }

  /** Written atomically: a crash leaves the old or the new state, never half of one. */
  writeState(machineDir: string, state: DiskState): void {
    const file = join(machineDir, 'disk.json');
    writeFileSync(`${file}.tmp`, JSON.stringify(state));
    renameSync(`${file}.tmp`, file);
  }

  /** Files (absolute) of a chain that are layers, top first. */
  async layersOf(active: string): Promise<string[]> {
    return (await this.filesOf(active)).filter((file) => file.startsWith(this.dir + '/'));
  }

  /**
   * Every file (absolute) of a chain, top first, down to the image's disk. A machine's QEMU can
   * write the headers of its own layers, so the chain is walked one header at a time and every
   * backing name must be a layer of this store or a file of the image folder (a regular file, not
   * a link) before anything opens it.
   */
  async filesOf(active: string): Promise<string[]> {
    const files: string[] = [];
    for (let file: string | undefined = this.path(active); file; ) {
      this.checkChainFile(file);
      if (files.length >= MAX_CHAIN || files.includes(file)) throw new Error(`the disk chain of ${active} is longer than ${MAX_CHAIN} or loops`);
      files.push(file);
      const header = await qcow2Header(file);
      // A header the machine's QEMU wrote must not make anything that reads the chain as root open another file.
      const problem = headerProblem(header);
      if (problem) throw new Error(`the disk chain of ${active} has ${basename(file)}, which ${problem}`);
      const backing = header['backing-filename'];
      file = backing ? resolve(dirname(file), backing) : undefined;
    }
    return files;
  }

  /** The file a layer backs onto (null: none), checked like every chain file. */
  async backingOf(file: string): Promise<string | null> {
    this.checkChainFile(file);
    const backing = (await qcow2Header(file))['backing-filename'];
    if (!backing) return null;
    const resolved = resolve(dirname(file), backing);
    this.checkChainFile(resolved);
    return resolved;
  }

  /** A layer this machine's disk made (`<id>-<n>.qcow2` in this store), not someone else's. */
  isOwnLayer(id: string, file: string): boolean {
    return dirname(file) === this.dir && LAYER_NAME.exec(basename(file))?.[1] === id;
  }

  /** A file of the image folder (an image's disk, a derived layer), not a machine's or a snapshot's. */
  isImageFile(file: string): boolean {
    return this.imageVersionOf(file) !== null;
  }

  /** The image version (its folder's name) a file of the image folder belongs to; null for any other file. */
  imageVersionOf(file: string): string | null {
    const inImages = relative(this.imagesDir, file);
    return inImages !== '' && !inImages.startsWith('..') && !isAbsolute(inImages) ? inImages.split(sep)[0]! : null;
  }

  private checkChainFile(file: string): void {
    const snapshotDisk = this.snapshotsDir !== undefined && dirname(dirname(file)) === this.snapshotsDir && SNAPSHOT_FOLDER.test(basename(dirname(file))) && basename(file) === 'disk.qcow2';
    const ours = (dirname(file) === this.dir && LAYER_NAME.test(basename(file))) || this.isImageFile(file) || snapshotDisk;
    if (!ours || !lstatSync(file, { throwIfNoEntry: false })?.isFile()) throw new Error(`disk chain names ${JSON.stringify(file)}, which is not a kiste layer or image disk`);
  }

  /** Every layer file (absolute) the chains of these active layers use. */
  async usedBy(actives: string[], options: { strict?: boolean } = {}): Promise<Set<string>> {
    const used = new Set<string>();
    for (const active of actives) {
      const chain = options.strict ? await this.layersOf(active) : await this.layersOf(active).catch(() => []);
      for (const file of chain) used.add(file);
    }
    return used;
  }

  /**
   * Removes the layers of `active`'s chain that none of `keep` (other machines' active layers)
   * use; false (nothing removed) when one of those chains cannot be read.
   */
  async release(active: string, keep: string[]): Promise<boolean> {
    let used: Set<string>;
    try {
      used = await this.usedBy(keep, { strict: true });
    } catch {
      return false; // better a leftover file than a layer pulled from under another machine
    }
    for (const file of await this.layersOf(active).catch(() => [this.path(active)])) {
      if (!used.has(file)) rmSync(file, { force: true });
    }
    return true;
  }

  /**
   * Removes layer files no chain uses (left by a service killed between a merge and the removal
   * of the merged layer). Only while nothing changes chains: at start, before machines are driven.
   */
  async collectGarbage(actives: string[]): Promise<string[]> {
    const used = await this.usedBy(actives, { strict: true }); // a chain we cannot read: remove nothing
    for (const active of actives) used.add(this.path(active));
    const removed = readdirSync(this.dir).map((name) => this.path(name)).filter((file) => !used.has(file));
    for (const file of removed) rmSync(file, { force: true });
    return removed;
  }
}

/**
 * What makes a chain file unfit to be read (by qemu-img as root, by a move): anything but plain
 * qcow2 data in the file itself; the backing name is checked on its own (checkChainFile). Null: fit.
 */
export function headerProblem(header: ImageInfo): string | null {
  if (header.format !== 'qcow2') return `is ${header.format}, not qcow2`;
  const specific = header['format-specific'] as { type?: string; data?: Record<string, unknown> } | undefined;
  if (specific?.data?.['data-file'] !== undefined) return 'names an external data file';
  if (specific?.data?.encrypt !== undefined || (header as { encrypted?: boolean }).encrypted) return 'is encrypted';
  return null;
}
