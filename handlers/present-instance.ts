// Instance rows → InstanceResponse.
import type { components } from '../src/generated/api';
import type { Instance } from '../src/store/instances';
import { iso } from './present';

type InstanceResponse = components['schemas']['InstanceResponse'];

export function presentInstance(instance: Instance, latestImageVersion: string | null): InstanceResponse {
  return {
    id: instance.id,
    object: 'instance',
    created: Math.floor(instance.createdAt.getTime() / 1000),
    name: instance.name,
    image: instance.image,
    artifact_key: instance.artifactKey,
    components: (instance.components as unknown as InstanceResponse['components'] | null) ?? [],
    profile: 'desktop',
    status: instance.status,
    desired_state: instance.desiredState,
    vcpu: instance.vcpu,
    memory_mib: instance.memoryMib,
    disk_mib: instance.diskMib,
    created_at: iso(instance.createdAt),
    updated_at: iso(instance.updatedAt),
    setup_status: instance.setupStatus,
    auto_snapshot_seconds: instance.autoSnapshotSeconds,
    environment_version_id: instance.environmentVersionId,
    expires_at: iso(instance.expiresAt),
    image_version: instance.imageVersion,
    last_checkpoint_at: iso(instance.lastCheckpointAt),
    last_offsite_at: null,
    latest_image_version: latestImageVersion,
    session_saved: instance.status === 'stopped' && instance.sessionSaved,
    setup_error: instance.setupError,
    ssh_host: `${instance.name}.kiste`,
    ssh_port: 22,
    update_available: instance.imageVersion && latestImageVersion ? instance.imageVersion !== latestImageVersion : null,
    started_from: (instance.startedFrom as InstanceResponse['started_from']) ?? null,
    snapshot_id: instance.fromSnapshotId,
  };
}
