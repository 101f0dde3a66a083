// Where disk layers live and which machine's chain uses which. Every qcow2 layer of every machine
// is a file in one folder, so a live fork can make the source's old top the shared backing of
// both machines without either machine's folder owning it. A layer is removed only when no
// remaining machine's chain uses it (images are never removed here).
import { existsSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { backingChain } from './qemu';

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
  /** What the guest was last personalised with (a hash) and the host keys it answered. */
  personalised?: { identity: string; hostKeys: Array<{ algorithm: string; publicKey: string }> };
}

export class LayerStore {
  constructor(readonly dir: string) {}

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

  /** Every file (absolute) of a chain, top first, down to the image's disk. */
  async filesOf(active: string): Promise<string[]> {
    return (await backingChain(this.path(active))).map((layer) => layer.filename);
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
