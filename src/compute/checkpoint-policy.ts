// How a machine's disk chain stays bounded while checkpoints keep adding layers.
//
// Every checkpoint freezes the active layer (it becomes the checkpoint: the disk as it was at that
// instant) and puts a new empty one on top. Past `maxFrozen` frozen layers, the two oldest
// neighbours are merged (block-commit of the upper into the lower), which keeps the newest
// checkpoints and drops the oldest. A layer another machine's chain uses (a live fork shares the
// layer that was frozen for it) is never merged: its content must not change under the other machine,
// and it may not be deleted. Such a layer only keeps the chain one longer until that machine goes.

/** Frozen layers kept per machine beyond which compaction merges (not counting shared ones). */
export const MAX_FROZEN_LAYERS = 3;

export interface Merge {
  /** The older layer, which receives the data. */
  lower: string;
  /** The newer layer, merged and then deleted. */
  upper: string;
}

/**
 * The next merge for a chain's frozen layers (oldest first, the image's own disk excluded), or
 * null when the chain is short enough or nothing may be merged.
 */
export function nextMerge(frozenOldestFirst: readonly string[], sharedWithOthers: ReadonlySet<string>, maxFrozen = MAX_FROZEN_LAYERS): Merge | null {
  if (frozenOldestFirst.length <= maxFrozen) return null;
  for (let i = 0; i + 1 < frozenOldestFirst.length; i++) {
    const lower = frozenOldestFirst[i];
    const upper = frozenOldestFirst[i + 1];
    if (!sharedWithOthers.has(lower) && !sharedWithOthers.has(upper)) return { lower, upper };
  }
  return null;
}
