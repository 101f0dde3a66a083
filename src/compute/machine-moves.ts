// Moving a stopped machine from one worker to another (drain, issue 22): its disk, flattened into one
// overlay on the image disk it ends on (whatever chain of checkpoints and forks it had here), and its
// saved session (device state and RAM file) when it has one. The receiving worker needs the same
// image disk (by its path under its images folder), gives the machine a jail user of its own, and
// checks every file's bytes against the sender's hashes before anything is put in place.
import { execFile } from 'node:child_process';
import { chmodSync, chownSync, copyFileSync, existsSync, lstatSync, mkdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { isAbsolute, join, relative } from 'node:path';
import { promisify } from 'node:util';
import type { MachineJail } from './jail';
import type { DiskChains } from './disk-chain';
import type { LayerStore } from './layers';
import { machineFiles } from './qemu/machine-files';
import { qemuImgBinary } from './qemu/disks';

const run = promisify(execFile);

export type MovedFileRole = 'disk' | 'state' | 'ram';

/** What the receiver learns first: the disk's state and the files that follow, in this order. */
export interface MoveStart {
  /** The image disk the flattened disk is an overlay on, relative to the images folder. */
  base: string;
  state: { hostKeysGenerated: boolean; generationId: boolean; personalised: { identity: string; hostKeys: { algorithm: string; publicKey: string }[] } | null };
  files: { role: MovedFileRole; bytes: number }[];
}

/** A machine's files ready to be sent; `cleanUp` removes what the sending made (the flattened disk). */
export interface OutgoingMachine {
  start: MoveStart;
  paths: Record<MovedFileRole, string | undefined>;
  cleanUp(): void;
}

export interface MoveParts {
  jail: MachineJail;
  layers: LayerStore;
  chains: DiskChains;
  imagesDir: string;
  machineDir(id: string): string;
}

export class MachineMoves {
  constructor(private readonly parts: MoveParts) {}

  /** The stopped machine's files, its disk flattened onto the image disk (the caller holds the machine and knows it does not run). */
  async outgoing(id: string): Promise<OutgoingMachine> {
    const { layers, chains, imagesDir } = this.parts;
    const state = chains.state(id);
    const chain = await layers.filesOf(state.active);
    const base = chain.at(-1)!;
    const relativeBase = relative(imagesDir, base);
    if (relativeBase === '' || relativeBase.startsWith('..') || isAbsolute(relativeBase)) throw new Error(`the disk of ${id} ends on ${base}, not on an image disk`);
    const files = machineFiles(this.parts.machineDir(id));
    const flattened = join(this.parts.machineDir(id), 'move-out.qcow2');
    rmSync(flattened, { force: true });
    // Only what differs from the image disk: every layer of the chain, checkpoints and forks' shared ones included.
    await run(qemuImgBinary(), ['convert', '-q', '-O', 'qcow2', '-F', 'qcow2', '-B', base, layers.path(state.active), flattened], { timeout: 30 * 60_000 });
    const session = existsSync(files.stateFile);
    const paths: OutgoingMachine['paths'] = { disk: flattened, state: session ? files.stateFile : undefined, ram: session && existsSync(files.memoryFile) ? files.memoryFile : undefined };
    return {
      start: {
        base: relativeBase,
        state: { hostKeysGenerated: state.hostKeysGenerated, generationId: state.generationId === true, personalised: state.personalised ?? null },
        files: (['disk', 'state', 'ram'] as const).filter((role) => paths[role]).map((role) => ({ role, bytes: statSync(paths[role]!).size })),
      },
      paths,
      cleanUp: () => rmSync(flattened, { force: true }),
    };
  }

  /** A folder for the files of a machine on its way here (removed by `abandon` or taken by `install`). */
  staging(id: string): string {
    const dir = join(this.parts.machineDir(id), '..', `.incoming-${id}`);
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    return dir;
  }

  abandon(id: string): void {
    rmSync(join(this.parts.machineDir(id), '..', `.incoming-${id}`), { recursive: true, force: true });
  }

  /** Puts a received machine in place: its own jail user, its disk rebased onto this worker's image disk, its session. */
  async install(id: string, start: MoveStart, received: Partial<Record<MovedFileRole, string>>): Promise<void> {
    const { jail, layers, chains, imagesDir } = this.parts;
    if (layers.readState(this.parts.machineDir(id))) throw new Error(`machine ${id} is on this worker already`);
    const base = join(imagesDir, start.base);
    const inImages = relative(imagesDir, base);
    if (inImages.startsWith('..') || isAbsolute(inImages) || !lstatSync(base, { throwIfNoEntry: false })?.isFile()) {
      throw new Error(`this worker lacks the image disk ${start.base} the machine's disk is an overlay on`);
    }
    if (!received.disk) throw new Error('no disk was received');
    await jail.admit(id);
    const active = `${id}-0.qcow2`;
    const disk = layers.path(active);
    // Unsafe rebase: only the header's backing name changes, to this worker's copy of the same image disk.
    await run(qemuImgBinary(), ['rebase', '-q', '-u', '-f', 'qcow2', '-F', 'qcow2', '-b', base, received.disk]);
    renameSync(received.disk, disk);
    jail.ownLayer(id, disk);
    const files = machineFiles(this.parts.machineDir(id));
    if (received.state) {
      copyFileSync(received.state, files.stateFile);
      chmodSync(files.stateFile, 0o600);
    }
    if (received.ram) {
      renameSync(received.ram, files.memoryFile);
      const user = jail.userOf(id);
      chownSync(files.memoryFile, user.uid, user.gid);
      chmodSync(files.memoryFile, 0o600);
    }
    chains.writeState(id, { active, hostKeysGenerated: start.state.hostKeysGenerated, generationId: start.state.generationId, ...(start.state.personalised ? { personalised: start.state.personalised } : {}) });
    this.abandon(id);
  }
}
