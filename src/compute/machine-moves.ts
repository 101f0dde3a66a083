// Moving a stopped machine from one worker to another (drain, issue 22): its disk, flattened into one
// overlay on the image disk it ends on (whatever chain of checkpoints and forks it had here), and its
// saved session (device state and RAM file) when it has one. The receiving worker needs the same
// image disk (by its path under its images folder), gives the machine a jail user of its own, and
// checks every file's bytes against the sender's hashes before anything is put in place.
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, chownSync, constants, copyFileSync, createReadStream, existsSync, linkSync, lstatSync, mkdirSync, readFileSync, realpathSync, renameSync, rmSync, statSync } from 'node:fs';
import { basename, dirname, isAbsolute, join, relative } from 'node:path';
import { promisify } from 'node:util';
import type { MachineJail } from './jail';
import type { DiskChains } from './disk-chain';
import { headerProblem, type LayerStore } from './layers';
import { machineFiles } from './qemu/machine-files';
import { qcow2Header, qemuImgBinary } from './qemu/disks';

const run = promisify(execFile);

export type MovedFileRole = 'disk' | 'state' | 'ram';

/** What the receiver learns first: the disk's state and the files that follow, in this order. */
export interface MoveStart {
  /** The image disk the flattened disk is an overlay on, relative to the images folder. */
  base: string;
  /** SHA-256 of that image disk: the receiver's must be the same bytes, not only the same name. */
  baseSha256: string;
  state: { hostKeysGenerated: boolean; generationId: boolean; personalised: { identity: string; hostKeys: { algorithm: string; publicKey: string }[] } | null };
  files: { role: MovedFileRole; bytes: number }[];
}

/** What the receiver accepts, from the machine's row (the control plane names it): no file larger than the machine. */
export interface MoveLimits {
  diskMib: number;
  memoryMib: number;
}

/** A session's device state is at most this (as a save bounds it). */
const STATE_LIMIT_BYTES = 256 * 1024 * 1024;
/** qcow2's own tables beside the data (a flattened disk of the machine's size). */
const QCOW2_OVERHEAD_BYTES = 64 * 1024 * 1024;

/** Whether the declared files fit a machine of these limits; the reason when not. */
export function moveTooLarge(files: MoveStart['files'], limits: MoveLimits): string | null {
  const most: Record<MovedFileRole, number> = { disk: limits.diskMib * 1048576 + QCOW2_OVERHEAD_BYTES, ram: limits.memoryMib * 1048576, state: STATE_LIMIT_BYTES };
  const over = files.find((file) => file.bytes > most[file.role]);
  return over ? `its ${over.role} file (${over.bytes} bytes) is larger than a machine of ${limits.diskMib} MiB of disk and ${limits.memoryMib} MiB of memory holds` : null;
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
        baseSha256: await baseIdentity(base),
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

  /**
   * Puts a received machine in place: its disk (checked: plain qcow2 of at most the machine's size,
   * rebased onto this worker's copy of the same image disk) under a layer name no file has, its own
   * jail user, its session.
   */
  async install(id: string, start: MoveStart, received: Partial<Record<MovedFileRole, string>>, limits: MoveLimits): Promise<void> {
    const { jail, layers, chains, imagesDir } = this.parts;
    if (layers.readState(this.parts.machineDir(id))) throw new Error(`machine ${id} is on this worker already`);
    const base = realpathOrNull(join(imagesDir, start.base));
    const inImages = base === null ? '..' : relative(realpathOrNull(imagesDir) ?? imagesDir, base);
    if (base === null || inImages.startsWith('..') || isAbsolute(inImages) || !lstatSync(base).isFile()) {
      throw new Error(`this worker lacks the image disk ${start.base} the machine's disk is an overlay on`);
    }
    if ((await baseIdentity(base)) !== start.baseSha256) {
      throw new Error(`this worker's image disk ${start.base} is not the source's (another build): serve the same image files on both, e.g. one KISTE_IMAGE_DIR copied to every worker`);
    }
    if (!received.disk) throw new Error('no disk was received');
    // Read without opening anything it names: a disk from another host is untrusted.
    const header = await qcow2Header(received.disk);
    const problem = headerProblem(header) ?? (header['virtual-size'] > limits.diskMib * 1048576 ? `is larger (${header['virtual-size']} bytes) than the machine's ${limits.diskMib} MiB` : null);
    if (problem) throw new Error(`the received disk ${problem}`);
    // Unsafe rebase: only the header's backing name changes, to this worker's copy of the same image disk.
    await run(qemuImgBinary(), ['rebase', '-q', '-u', '-f', 'qcow2', '-F', 'qcow2', '-b', base, received.disk], { timeout: 60_000 });
    await jail.admit(id);
    // A fresh layer name: a layer of this id may still be here, shared by a fork made before it left.
    const active = freeLayerName(layers, id);
    const disk = layers.path(active);
    // Its state first: until the layer is in place, a collection of unused layers reads a chain it cannot follow and removes nothing.
    chains.writeState(id, { active, hostKeysGenerated: start.state.hostKeysGenerated, generationId: start.state.generationId, ...(start.state.personalised ? { personalised: start.state.personalised } : {}) });
    linkSync(received.disk, disk); // fails rather than replace a file of that name
    rmSync(received.disk, { force: true });
    jail.ownLayer(id, disk);
    const files = machineFiles(this.parts.machineDir(id));
    if (received.state) {
      rmSync(files.stateFile, { force: true }); // a new file: never written through a link a restore made
      copyFileSync(received.state, files.stateFile, constants.COPYFILE_EXCL);
      chmodSync(files.stateFile, 0o600);
    }
    if (received.ram) {
      renameSync(received.ram, files.memoryFile);
      const user = jail.userOf(id);
      chownSync(files.memoryFile, user.uid, user.gid);
      chmodSync(files.memoryFile, 0o600);
    }
    this.abandon(id);
  }
}

/** The first `<id>-<n>.qcow2` no file in the layers folder has. */
function freeLayerName(layers: LayerStore, id: string): string {
  for (let n = 0; ; n++) if (!existsSync(layers.path(`${id}-${n}.qcow2`))) return `${id}-${n}.qcow2`;
}

function realpathOrNull(path: string): string | null {
  try {
    return realpathSync(path);
  } catch {
    return null;
  }
}

/** SHA-256 of an image disk: its manifest's when it is an image version's disk (read at build), else of its bytes. */
async function baseIdentity(base: string): Promise<string> {
  if (basename(base) === 'disk.qcow2') {
    try {
      const manifest = JSON.parse(readFileSync(join(dirname(base), 'manifest.json'), 'utf8')) as { sha256?: Record<string, string> };
      const sha = manifest.sha256?.['disk.qcow2'];
      if (typeof sha === 'string' && /^[0-9a-f]{64}$/.test(sha)) return sha;
    } catch {
      // no manifest beside it (a derived layer): its bytes
    }
  }
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(base)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}
