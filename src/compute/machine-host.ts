// What the domain asks of a host that runs machines, split by job: host checks, images, guest
// agents, machines. Its implementation drives QEMU, the image store and the guest agent; the
// domain knows none of them.
import type { ImageManifest } from '../../images';
import type { BuiltLayer, LayerBuildRequest } from './layer-builder';
import type { GuestAgent } from './guest-agent';

export type Accelerator = 'kvm' | 'tcg';

/**
 * The host that runs machines cannot be reached now (a worker that is down or being restarted):
 * the API answers 503 N01 with Retry-After, machines run on, and an operation it cut short stays
 * open for the reconciler to finish once the host is back.
 */
export class HostUnreachableError extends Error {}

/** The host took a call but gave no whole answer in time: what it did is not known (a worker's deadline). */
export class HostTimeoutError extends Error {}

/** Whether a failure came from a host out of reach, directly or as the cause of another (an agent call's). */
export function cameFromUnreachableHost(error: unknown): boolean {
  return causedBy(error, HostUnreachableError);
}

/** Whether a failure leaves the machine's state unknown: its host out of reach, or no answer in time. */
export function leftStateUnknown(error: unknown): boolean {
  return causedBy(error, HostUnreachableError) || causedBy(error, HostTimeoutError);
}

function causedBy(error: unknown, kind: typeof HostUnreachableError | typeof HostTimeoutError): boolean {
  for (let current = error, depth = 0; current instanceof Error && depth < 4; current = current.cause, depth++) {
    if (current instanceof kind) return true;
  }
  return false;
}
export type ImageProfile = 'minimal' | 'desktop' | 'desktop-lite';

export interface HostImage {
  profile: ImageProfile;
  /** vYYYY.MM.DD-<hash8> */
  version: string;
  /** Content key of the image artifact (its disk's sha256). */
  artifactKey: string;
  /** A derived layer (Debian packages built on image version `version`) a new disk starts from instead of the image's own disk. */
  layer?: { version: string; key: string } | null;
}

export interface ImageBuildState {
  state: 'building' | 'ready' | 'failed';
  /** What the build is doing now, for the K06 message. */
  step: string | null;
  error: string | null;
}

export interface MachineShape {
  vcpu: number;
  memoryMib: number;
  diskMib: number;
}

export interface GuestIdentity {
  hostname: string;
  authorizedKeys: string[];
}

export interface HostKey {
  algorithm: string;
  publicKey: string;
}

export interface StartedMachine {
  /** Host keys after personalisation (unchanged when a session was resumed). */
  hostKeys: HostKey[];
}

/**
 * How a new machine came to run: a cold boot, a copy of a boot snapshot, a copy of a running
 * machine's memory, or from a named snapshot (continuing its memory, or booting its disk).
 */
export type StartedFrom = 'boot' | 'snapshot' | 'memory' | 'snapshot_memory' | 'snapshot_disk';

/** What a named snapshot's files hold on the host that took them. */
export interface TakenSnapshot {
  /** It holds the machine's memory (a new machine can continue it). */
  memory: boolean;
  /** Bytes its files take on the host (its disk beyond the image, and its memory). */
  sizeBytes: number;
  /** How long the guest stood still for it (0 when it was not running). */
  pausedMs: number;
}

/** A named snapshot's files, and the worker holding them (null: the local one). */
export interface SnapshotRef {
  id: string;
  workerId: string | null;
}

export interface CreatedMachine extends StartedMachine {
  startedFrom: StartedFrom;
  /** The image it started from when that is not the one asked for (several hosts: its worker serves another version). */
  image?: HostImage;
}

export interface ForkedMachine extends CreatedMachine {
  /** Fork with memory: how long the source's guest stood still while it was copied. */
  sourcePausedMs?: number;
}

export interface HostCapacity {
  /** Memory the host has free for new guests now (before its reserve). */
  freeMemoryMib: number;
}

/**
 * What the host is and can take: the domain checks new and starting machines against it, and
 * refuses to create machines while they cannot be isolated.
 */
export interface HostChecks {
  readonly accelerator: Accelerator;
  /** False while the host cannot be reached at all (a worker being started again): its calls would fail at once with HostUnreachableError. */
  reachable(): boolean;
  /** Whether the host of a machine placed on `workerId` answers now (several hosts: that worker; otherwise the same as reachable()). */
  reachableFor(workerId: string | null): boolean;
  /** Null when machines can start in their jail (own user, files, network rules); else why not and what to do. */
  isolationProblem(): Promise<{ reason: string; hint: string } | null>;
  /** What the host can still take (the domain checks new and starting machines against it). */
  capacity(): Promise<HostCapacity>;
}

/** The images a host runs machines from, and the layers it builds on them. */
export interface HostImages {
  /** The newest ready image of a profile, or null while none is ready yet. */
  currentImage(profile: ImageProfile): HostImage | null;
  imageBuildState(profile: ImageProfile): ImageBuildState;
  /** What an image version holds (packages, sizes, release notes), from its manifest; null when unreadable. */
  imageManifest(image: HostImage): Promise<ImageManifest | null>;
  /** Builds (or finds) the derived layer of `request.key` on `request.base` in a builder machine. */
  buildLayer(request: LayerBuildRequest): Promise<BuiltLayer>;
}

/** A running machine's guest agent: commands, byte streams, metrics. */
export interface GuestAgents {
  agent(id: string): GuestAgent;
}

/** Machines' lives on a host: create, fork, start, stop, checkpoint, destroy, and finding them again after a restart. */
export interface Machines {
  /**
   * A new machine on the image, running once SSH listens and the agent takes commands: restored
   * from the boot snapshot of its configuration when one is ready (then personalised), else booted
   * cold, and a snapshot of that configuration is made in the background.
   */
  create(id: string, image: HostImage, shape: MachineShape, identity: GuestIdentity): Promise<CreatedMachine>;
  /**
   * A copy of a running machine under its own identity. Plain: a copy-on-write copy of its disk
   * that boots fresh. With memory: the copy also continues the source's RAM and processes (the
   * source pauses briefly); `image` must then be the one the source runs.
   */
  fork(sourceId: string, targetId: string, image: HostImage, shape: MachineShape, identity: GuestIdentity, options: { memory: boolean }): Promise<ForkedMachine>;
  /** Cold boot from the machine's existing disk; resolves once SSH listens and the agent takes commands. */
  boot(id: string, shape: MachineShape, image: HostImage, identity: GuestIdentity): Promise<StartedMachine>;
  /** Continues the saved memory session; resolves once the agent answers again. */
  resume(id: string, shape: MachineShape, image: HostImage, identity: GuestIdentity): Promise<StartedMachine>;
  /** A running machine takes a changed identity (host name, authorized keys) now; nothing happens when it is unchanged. */
  refreshIdentity(id: string, identity: GuestIdentity): Promise<void>;
  hasSession(id: string): Promise<boolean>;
  discardSession(id: string): Promise<void>;
  /** Stops the machine; with saveSession its memory is saved first (false back when the guest could not be saved). */
  stop(id: string, options: { saveSession: boolean }): Promise<{ sessionSaved: boolean }>;
  isRunning(id: string): Promise<boolean>;
  /** After a service restart: reconnects to a machine still running; false when there is none. */
  adopt(id: string): Promise<boolean>;
  /**
   * Freezes the running disk as a checkpoint when it changed since the last one, and keeps the
   * chain of checkpoint layers bounded; `taken` is false when nothing changed or it is not running.
   */
  checkpoint(id: string): Promise<{ taken: boolean }>;
  /**
   * At start after adopting, and when a worker is adopted: removes every machine (files, QEMU) that
   * is none of `owned` (the machines the records own), none `alsoKeep` names (asked as it goes) and
   * no boot snapshot template or layer builder being run; returns their ids.
   */
  removeStrays(owned: readonly string[], alsoKeep?: (id: string) => boolean): Promise<string[]>;
  /** At start, after adopting: removes disk layers no machine uses any more. */
  removeUnusedLayers(): Promise<void>;
  /** Kills whatever runs and removes the machine's files. */
  destroy(id: string): Promise<void>;
  /**
   * Keeps the machine's disk as it is now, and with `memory` its memory (a running guest's, or its
   * saved session's), in a named snapshot's files that outlive the machine. `shape` is the one the
   * machine runs (or its session was saved) with: a memory restore needs the same.
   */
  takeSnapshot(id: string, snapshotId: string, shape: MachineShape, options: { memory: boolean }): Promise<TakenSnapshot>;
  /**
   * A new machine from a named snapshot: with `memory` it continues the snapshot's memory when the
   * snapshot has one this host can restore, else (or when that fails) it boots the snapshot's disk.
   * `image` is the one the snapshot's machine ran for a memory restore, the current one for a boot.
   */
  createFromSnapshot(id: string, snapshotId: string, images: { memory: HostImage; boot: HostImage }, shape: MachineShape, identity: GuestIdentity, options: { memory: boolean }): Promise<CreatedMachine>;
  /** Removes a named snapshot's files (a disk that machines made from it still back onto stays until they are gone). */
  deleteSnapshot(snapshot: SnapshotRef): Promise<void>;
  /** The last lines of the serial console. */
  consoleTail(id: string, lines: number): Promise<string>;
  /** Machines this host has files or processes for (for reaping orphans). */
  knownMachineIds(): Promise<string[]>;
}

/**
 * Everything one host does, split by job above so each caller holds only the part it uses (and a
 * worker protocol client can stand in for each part).
 */
export interface MachineHost extends HostChecks, HostImages, GuestAgents, Machines {}
