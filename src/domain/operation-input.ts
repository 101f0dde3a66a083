// What a lifecycle operation records beside its claim (Instance.operationInput) so that whoever
// finishes it after a crash, or after its worker went away, does what the caller asked. Read back
// from the database as untyped JSON: parsed here, and ignored when it does not fit.

/** A fork is made again from its source. */
export interface ForkInput {
  source_id: string;
  memory: boolean;
}

/** A stop keeps the caller's wish to save the machine's memory. */
export interface StopInput {
  save_session: boolean;
}

export function forkInputOf(value: unknown): ForkInput | null {
  if (typeof value !== 'object' || value === null) return null;
  const { source_id: sourceId, memory } = value as Record<string, unknown>;
  return typeof sourceId === 'string' && typeof memory === 'boolean' ? { source_id: sourceId, memory } : null;
}

export function stopInputOf(value: unknown): StopInput | null {
  if (typeof value !== 'object' || value === null) return null;
  const { save_session: saveSession } = value as Record<string, unknown>;
  return typeof saveSession === 'boolean' ? { save_session: saveSession } : null;
}

/** A create from a named snapshot is made again from that snapshot (continuing its memory or not). */
export interface SnapshotCreateInput {
  snapshot_id: string;
  memory: boolean;
}

export function snapshotCreateInputOf(value: unknown): SnapshotCreateInput | null {
  if (typeof value !== 'object' || value === null) return null;
  const { snapshot_id: snapshotId, memory } = value as Record<string, unknown>;
  return typeof snapshotId === 'string' && typeof memory === 'boolean' ? { snapshot_id: snapshotId, memory } : null;
}
