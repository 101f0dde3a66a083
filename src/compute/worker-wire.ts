// The machine host's values as worker-api.yaml carries them (snake_case JSON) and back: one place
// for both sides of the protocol, so the worker's answers and the control plane's requests agree.
import type { components } from '../generated/worker-api';
import type { ForkedMachine, GuestIdentity, HostImage, ImageBuildState, MachineShape } from './machine-host';

type Wire = components['schemas'];

/** worker-api.yaml's MachineId. */
const MACHINE_ID = /^[A-Za-z0-9-]{1,80}$/;

/** A machine's path in the protocol; an id outside its alphabet never becomes one (`.` or `..` would name another path). */
export function machinePath(id: string, action = ''): string {
  if (!MACHINE_ID.test(id)) throw new Error(`not a machine id: ${JSON.stringify(id).slice(0, 100)}`);
  return `/w1/machines/${id}${action ? `/${action}` : ''}`;
}

export const wire = {
  image: (image: HostImage): Wire['HostImage'] => ({
    profile: image.profile,
    version: image.version,
    artifact_key: image.artifactKey,
    layer: image.layer ?? null,
  }),
  shape: (shape: MachineShape): Wire['MachineShape'] => ({ vcpu: shape.vcpu, memory_mib: shape.memoryMib, disk_mib: shape.diskMib }),
  identity: (identity: GuestIdentity): Wire['GuestIdentity'] => ({ hostname: identity.hostname, authorized_keys: identity.authorizedKeys }),
  started: (started: Partial<ForkedMachine> & Pick<ForkedMachine, 'hostKeys'>): Wire['StartedMachine'] => ({
    host_keys: started.hostKeys.map((key) => ({ algorithm: key.algorithm, public_key: key.publicKey })),
    ...(started.startedFrom ? { started_from: started.startedFrom } : {}),
    ...(started.sourcePausedMs !== undefined ? { source_paused_ms: Math.round(started.sourcePausedMs) } : {}),
  }),
};

export const fromWire = {
  image: (image: Wire['HostImage']): HostImage => ({
    profile: image.profile,
    version: image.version,
    artifactKey: image.artifact_key,
    ...(image.layer ? { layer: image.layer } : {}),
  }),
  shape: (shape: Wire['MachineShape']): MachineShape => ({ vcpu: shape.vcpu, memoryMib: shape.memory_mib, diskMib: shape.disk_mib }),
  identity: (identity: Wire['GuestIdentity']): GuestIdentity => ({ hostname: identity.hostname, authorizedKeys: identity.authorized_keys }),
  started: (started: Wire['StartedMachine']): ForkedMachine => ({
    hostKeys: started.host_keys.map((key) => ({ algorithm: key.algorithm, publicKey: key.public_key })),
    startedFrom: started.started_from ?? 'boot',
    ...(started.source_paused_ms !== undefined ? { sourcePausedMs: started.source_paused_ms } : {}),
  }),
  buildState: (build: Wire['ImageState']['build']): ImageBuildState => ({ state: build.state, step: build.step, error: build.error }),
};
