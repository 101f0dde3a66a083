// The chain of disk layers under one machine while it runs: new empty top layers (checkpoints, live
// forks), the "changed since the last checkpoint" bitmap that moves up with them, compaction of
// old checkpoint layers, and which file is the top after a service died in the middle of a switch.
// The layer files themselves and the per-machine disk.json are the LayerStore's.
import { basename, join } from 'node:path';
import { existsSync, rmSync } from 'node:fs';
import { nextMerge } from './checkpoint-policy';
import type { DiskState, LayerStore } from './layers';
import { activeLayer, addDirtyBitmap, chainNodes, commitIntoBase, dirtyBitmapCount, removeDirtyBitmap, type QemuMachine } from './qemu';

/** The dirty bitmap on the active layer: "the disk changed since the last checkpoint". */
export const CHANGES_BITMAP = 'since-checkpoint';

export interface ChainLogger {
  warn(object: object, message: string): void;
}

export class DiskChains {
  constructor(
    private readonly layers: LayerStore,
    private readonly machinesDir: string,
    private readonly logger: ChainLogger,
  ) {}

  state(id: string): DiskState {
    const state = this.layers.readState(this.dir(id));
    if (!state) throw new Error(`machine ${id} has no disk`);
    return state;
  }

  writeState(id: string, state: DiskState): void {
    this.layers.writeState(this.dir(id), state);
  }

  /** The active layer of every machine with a disk (but one). */
  activeLayers(ids: string[], exceptId?: string): string[] {
    return ids.filter((id) => id !== exceptId).map((id) => this.layers.readState(this.dir(id))?.active).filter((active): active is string => Boolean(active));
  }

  /**
   * Puts a new empty top layer on the running disk with `put` (which tells QEMU to switch) and
   * records it; the intent is written first (see DiskState.pending). The bitmap moves up with it.
   */
  async newTopLayer(id: string, machine: QemuMachine, put: (next: string) => Promise<unknown>): Promise<void> {
    const state = this.state(id);
    const next = nextLayerName(id, state.active);
    this.writeState(id, { ...state, pending: next });
    const frozen = await activeLayer(machine.qmp);
    await put(next);
    this.writeState(id, { ...state, active: next, pending: undefined });
    await trackChanges(machine);
    await removeDirtyBitmap(machine.qmp, { node: frozen.node, name: CHANGES_BITMAP }).catch(() => undefined); // frozen: it cannot change
  }

  /** Merges the oldest checkpoint layers until the chain is short enough (see checkpoint-policy). */
  async compact(id: string, machine: QemuMachine, otherActives: string[]): Promise<void> {
    for (;;) {
      const chain = (await chainNodes(machine.qmp)).filter((layer) => layer.file.startsWith(this.layers.dir + '/'));
      const frozen = chain.slice(1).reverse(); // oldest first
      const shared = await this.layers.usedBy(otherActives, { strict: true }); // unreadable: merge nothing
      const merge = nextMerge(frozen.map((layer) => layer.file), shared);
      if (!merge) return;
      // The names come from QEMU: merge (and remove) only layers this machine's disk made.
      if (!this.layers.isOwnLayer(id, merge.upper) || !this.layers.isOwnLayer(id, merge.lower)) {
        this.logger.warn({ machine: id, merge }, 'QEMU names layers that are not this machine\'s; not compacting');
        return;
      }
      const byFile = new Map(frozen.map((layer) => [layer.file, layer.node]));
      await commitIntoBase(machine.qmp, { jobId: 'compact', topNode: byFile.get(merge.upper)!, baseNode: byFile.get(merge.lower)! });
      rmSync(merge.upper, { force: true }); // out of the chain now: the layer above backs onto merge.lower
    }
  }

  /** The layer a running machine writes to, as QMP names it: only one of its own layers is believed. */
  async runningTop(id: string, machine: QemuMachine, recorded: string): Promise<string> {
    const file = (await activeLayer(machine.qmp)).file;
    if (this.layers.isOwnLayer(id, file)) return basename(file);
    this.logger.warn({ machine: id, file }, 'QEMU names a top layer that is not this machine\'s; keeping the recorded one');
    return recorded;
  }

  /** Which file is the top of a stopped machine's disk, after a run that may have died mid-switch. */
  async settledOffline(state: DiskState): Promise<string> {
    if (!state.pending) return state.active;
    const pending = this.layers.path(state.pending);
    if (existsSync(pending)) {
      const below = await this.layers.backingOf(pending).catch(() => null);
      if (below === this.layers.path(state.active)) return state.pending; // QEMU had switched
      rmSync(pending, { force: true });
    }
    return state.active;
  }

  private dir(id: string): string {
    return join(this.machinesDir, id);
  }
}

/** Starts "what changed since the last checkpoint" on the machine's active layer. */
export async function trackChanges(machine: QemuMachine): Promise<void> {
  const active = await activeLayer(machine.qmp);
  const known = await dirtyBitmapCount(machine.qmp, { node: active.node, name: CHANGES_BITMAP });
  if (known === undefined) await addDirtyBitmap(machine.qmp, { node: active.node, name: CHANGES_BITMAP });
}

/** QEMU node names are at most 31 characters: the layer's index names it. */
export function nodeName(layer: string): string {
  return `disk${layerIndex(layer)}`;
}

function layerIndex(name: string): number {
  return Number(/-(\d+)\.qcow2$/.exec(name)?.[1] ?? 0);
}

function nextLayerName(id: string, active: string): string {
  return `${id}-${layerIndex(active) + 1}.qcow2`;
}
