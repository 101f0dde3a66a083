// The machine host's values as worker-api.yaml carries them (snake_case JSON) and back: one place
// for both sides of the protocol, so the worker's answers and the control plane's requests agree.
import type { MoveStart } from './machine-moves';
import type { components } from '../generated/worker-api';
import * as validators from '../generated/worker-validators';
import type { ImageManifest } from '../../images';
import { parsePeerJson, peerText, type Parsed, type PeerShape } from '../protocol/peer-input';
import type { ExecStartParams } from '../protocol/agent';
import type { LayerBuildRequest } from './layer-builder';
import type { ForkedMachine, GuestIdentity, HostImage, ImageBuildState, MachineShape } from './machine-host';

type Wire = components['schemas'];

/** The version of worker-api.yaml both sides speak (`/w1/…`); a worker that says another is not used. */
export const WORKER_PROTOCOL_VERSION = 2;

/** The messages the protocol's streams carry as JSON text. */
type StreamMessage = 'ExecStreamEnd' | 'LayerBuildMessage' | 'LayerBuildStart' | 'MachineMoveStart' | 'MachineMoveEnd' | 'MachineMoveOutcome' | 'ScreenVideoMessage' | 'ScreenVideoCommand';

/** A JSON message of a worker stream, parsed into its schema in worker-api.yaml (the peer-input rule); never throws. */
export function parseStreamMessage<K extends StreamMessage>(schema: K, bytes: Buffer): Parsed<Wire[K]> {
  return parsePeerJson(streamShape<Wire[K]>(schema), bytes);
}

function streamShape<T>(schema: StreamMessage): PeerShape<T> {
  const validate = validators[schema]!;
  return {
    name: schema,
    parse: (value) => (validate(value) ? { ok: true, value: value as T } : { ok: false, reason: `does not fit ${schema} (${peerText(validate.errors?.[0]?.message ?? '', 200)})` }),
  };
}

/** worker-api.yaml's MachineId. */
const MACHINE_ID = /^[A-Za-z0-9-]{1,80}$/;

/** A machine's path in the protocol; an id outside its alphabet never becomes one (`.` or `..` would name another path). */
export function machinePath(id: string, action = ''): string {
  if (!MACHINE_ID.test(id)) throw new Error(`not a machine id: ${JSON.stringify(id).slice(0, 100)}`);
  return `/w1/machines/${id}${action ? `/${action}` : ''}`;
}

/** The agent's exec.start fields the protocol carries, the same names on both sides (the window stays each side's own). */
function execFields(params: ExecStartParams | Wire['ExecStart']): ExecStartParams {
  return {
    argv: params.argv,
    ...(params.cwd !== undefined ? { cwd: params.cwd } : {}),
    ...(params.env ? { env: params.env } : {}),
    ...(params.timeout_ms !== undefined ? { timeout_ms: params.timeout_ms } : {}),
    ...(params.output_limit_bytes !== undefined ? { output_limit_bytes: params.output_limit_bytes } : {}),
    ...(params.stdin !== undefined ? { stdin: params.stdin } : {}),
  };
}

export const wire = {
  moveStart: (start: MoveStart): Wire['MachineMoveStart'] => ({
    base: start.base,
    base_sha256: start.baseSha256,
    state: {
      host_keys_generated: start.state.hostKeysGenerated,
      generation_id: start.state.generationId,
      personalised: start.state.personalised
        ? { identity: start.state.personalised.identity, host_keys: start.state.personalised.hostKeys.map((key) => ({ algorithm: key.algorithm, public_key: key.publicKey })) }
        : null,
    },
    files: start.files.map((file) => ({ role: file.role, bytes: file.bytes })),
  }),
  /** `requestTimeoutMs`: how long the agent may take to start it. */
  execStart: (params: ExecStartParams, requestTimeoutMs?: number): Wire['ExecStart'] => ({
    ...execFields(params),
    ...(requestTimeoutMs !== undefined ? { request_timeout_ms: Math.min(Math.max(1, Math.round(requestTimeoutMs)), 600_000) } : {}),
  }),
  image: (image: HostImage): Wire['HostImage'] => ({
    profile: image.profile,
    version: image.version,
    artifact_key: image.artifactKey,
    layer: image.layer ?? null,
  }),
  shape: (shape: MachineShape): Wire['MachineShape'] => ({ vcpu: shape.vcpu, memory_mib: shape.memoryMib, disk_mib: shape.diskMib }),
  identity: (identity: GuestIdentity): Wire['GuestIdentity'] => ({ hostname: identity.hostname, authorized_keys: identity.authorizedKeys }),
  /** Only the declared fields of the worker's manifest file (the control plane refuses any other). */
  manifest: (manifest: ImageManifest): Wire['ImageManifest'] => manifestFields(manifest),
  layerBuildStart: (request: Pick<LayerBuildRequest, 'base' | 'key' | 'packages' | 'diskMib'>): Wire['LayerBuildStart'] => ({
    base: wire.image(request.base),
    key: request.key,
    packages: request.packages,
    disk_mib: request.diskMib,
  }),
  started: (started: Partial<ForkedMachine> & Pick<ForkedMachine, 'hostKeys'>): Wire['StartedMachine'] => ({
    host_keys: started.hostKeys.map((key) => ({ algorithm: key.algorithm, public_key: key.publicKey })),
    ...(started.startedFrom ? { started_from: started.startedFrom } : {}),
    ...(started.sourcePausedMs !== undefined ? { source_paused_ms: Math.round(started.sourcePausedMs) } : {}),
  }),
};

export const fromWire = {
  moveStart: (start: Wire['MachineMoveStart']): MoveStart => ({
    base: start.base,
    baseSha256: start.base_sha256,
    state: {
      hostKeysGenerated: start.state.host_keys_generated,
      generationId: start.state.generation_id,
      personalised: start.state.personalised
        ? { identity: start.state.personalised.identity, hostKeys: start.state.personalised.host_keys.map((key) => ({ algorithm: key.algorithm, publicKey: key.public_key })) }
        : null,
    },
    files: start.files.map((file) => ({ role: file.role, bytes: file.bytes })),
  }),
  execStart: (body: Wire['ExecStart']): ExecStartParams => execFields(body),
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
  manifest: (manifest: Wire['ImageManifest']): ImageManifest => manifestFields(manifest),
  layerBuildStart: (start: Wire['LayerBuildStart']): Pick<LayerBuildRequest, 'base' | 'key' | 'packages' | 'diskMib'> => ({
    base: fromWire.image(start.base),
    key: start.key,
    packages: start.packages,
    diskMib: start.disk_mib,
  }),
};

/** The manifest's fields, the same names on both sides; the optional ones only when present. */
function manifestFields(manifest: ImageManifest | Wire['ImageManifest']): ImageManifest & Wire['ImageManifest'] {
  return {
    version: manifest.version,
    profile: manifest.profile,
    description: manifest.description,
    created_at: manifest.created_at,
    kernel: manifest.kernel,
    kernel_cmdline: manifest.kernel_cmdline,
    packages: manifest.packages,
    ...(manifest.package_sizes_kib ? { package_sizes_kib: manifest.package_sizes_kib } : {}),
    sizes: manifest.sizes,
    sha256: manifest.sha256,
    recipe_hash: manifest.recipe_hash,
    agent: { guest_path: manifest.agent.guest_path, port: manifest.agent.port, sha256: manifest.agent.sha256 },
    disk: { format: manifest.disk.format, filesystem: manifest.disk.filesystem, device: manifest.disk.device, grows_on_boot: manifest.disk.grows_on_boot },
    suite: manifest.suite,
    ...(manifest.display !== undefined ? { display: manifest.display ? { width: manifest.display.width, height: manifest.display.height } : null } : {}),
    ...(manifest.previous_version !== undefined ? { previous_version: manifest.previous_version } : {}),
    ...(manifest.release_notes ? { release_notes: manifest.release_notes } : {}),
  };
}
