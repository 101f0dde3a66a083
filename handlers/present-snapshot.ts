// Snapshot rows → SnapshotResponse.
import type { components } from '../src/generated/api';
import type { Snapshot } from '../src/domain/snapshots';
import { iso } from './present';

const MIB = 1048576;

export function presentSnapshot(snapshot: Snapshot): components['schemas']['SnapshotResponse'] {
  return {
    id: snapshot.id,
    object: 'snapshot',
    name: snapshot.name,
    instance_id: snapshot.instanceId,
    instance_name: snapshot.instanceName,
    status: snapshot.status as 'pending' | 'ready' | 'failed',
    size_mib: snapshot.sizeBytes === null ? null : Math.ceil(Number(snapshot.sizeBytes) / MIB),
    image_version: snapshot.imageVersion,
    memory: snapshot.memory,
    source: { vcpu: snapshot.vcpu, memory_mib: snapshot.memoryMib, disk_mib: snapshot.diskMib },
    progress: snapshot.status === 'pending' ? (snapshot.progress ?? 0) : null,
    error: snapshot.error,
    created_at: iso(snapshot.createdAt),
    ready_at: iso(snapshot.readyAt),
  };
}
