// The one interface the instance domain uses to run machines. Its implementation drives QEMU,
// the image store and the guest agent; the domain knows none of them.
import type { AgentClient } from './agent-client';

export type Accelerator = 'kvm' | 'tcg';
export type ImageProfile = 'minimal' | 'desktop' | 'desktop-lite';

export interface HostImage {
  profile: ImageProfile;
  /** vYYYY.MM.DD-<hash8> */
  version: string;
  /** Content key of the image artifact (its disk's sha256). */
  artifactKey: string;
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

export interface MachineHost {
  readonly accelerator: Accelerator;
  /** The newest ready image of a profile, or null while none is ready yet. */
  currentImage(profile: ImageProfile): HostImage | null;
  imageBuildState(profile: ImageProfile): ImageBuildState;
  /** Null when machines can start in their jail (own user, files, network rules); else why not and what to do. */
  isolationProblem(): Promise<{ reason: string; hint: string } | null>;
  /** The disk of a new machine: a copy-on-write overlay of the image, `diskMib` large. */
  createDisk(id: string, image: HostImage, diskMib: number): Promise<void>;
  /** Copy-on-write copy of another machine's disk (running or not); the copy boots fresh. */
  forkDisk(sourceId: string, targetId: string): Promise<void>;
  /** Cold boot from the disk; resolves once SSH listens and the agent takes commands. */
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
  /** At start, after adopting: removes disk layers no machine uses any more. */
  removeUnusedLayers(): Promise<void>;
  /** Kills whatever runs and removes the machine's files. */
  destroy(id: string): Promise<void>;
  agent(id: string): AgentClient;
  /** The last lines of the serial console. */
  consoleTail(id: string, lines: number): Promise<string>;
  /** Machines this host has files or processes for (for reaping orphans). */
  knownMachineIds(): Promise<string[]>;
}
