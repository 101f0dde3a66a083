// Memory sessions: save a running machine's memory and device state to a file and quit QEMU; later
// start QEMU again with the same command line and continue exactly where the guest was.
//
// The state travels over a unix socket next to the QMP socket (migrationSocket), never through
// `exec:` (QEMU 7.2 has no `migrate file:`, and its seccomp sandbox forbids starting programs):
//   save:    we listen and write what arrives to STATE.part; `migrate {"uri": "unix:SOCKET"}`; once
//            QEMU reports "completed" and has closed the connection, STATE.part is renamed to STATE
//   restore: -incoming defer, `migrate-incoming {"uri": "unix:SOCKET"}` (QEMU listens), and we
//            connect and send STATE
// The `.part` + rename means a crash in the middle of a save never leaves a truncated state file
// that looks complete. The listening socket belongs to the machine's jail user (socketOwner), mode
// 0600: only that QEMU (and root) can connect to it, and only the first connection is taken.
//
// Two storage modes, chosen by the MachineSpec:
// - anonymous RAM: the whole guest RAM goes into the state file (zero pages are skipped);
// - file-backed RAM (`memoryFile`, share=on): the guest RAM already IS a file. With the migration
//   capability `x-ignore-shared` set on both sides, only device state (and small non-shared RAM
//   blocks such as option ROMs) is written, and the restored QEMU maps the same RAM file. The RAM
//   file must not change between save and restore (copy it only while no QEMU uses it).
//
// Before migrating we pause the guest (`stop`): the save is then a single pass over RAM with no
// dirty-page rounds, and the state is a consistent snapshot of a paused machine. QEMU 7.2 limits
// migration to 128 MiB/s by default (max-bandwidth), which alone made saves ~10x slower here;
// we lift the limit, since the "network" is a local socket.
//
// If anything fails before the state file is complete, the guest is resumed (`cont`) and keeps
// running: a failed save never loses the machine.
import { withDeadline } from '../../deadline';
import { chmodSync, chownSync, closeSync, constants, createReadStream, createWriteStream, existsSync, fsyncSync, openSync, renameSync, rmSync, statSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { dirname, join } from 'node:path';
import { finished } from 'node:stream/promises';
import { MAX_SOCKET_PATH, type MachineSpec } from './command-line';
import { logTail, QemuMachine, qemuLogFile, StartOptions, startMachine, stopMachine } from './qemu-process';
import { QueryMigrateShape } from './qmp-shapes';
import { pollUntil } from './wait';

const UNLIMITED_BANDWIDTH = 2 ** 40; // bytes per second: effectively no limit for a local pipe

export interface SaveOptions {
  stateFile: string;
  /** Whole save, from pause to state file written. */
  timeoutMs?: number;
  /** fsync the state file (and the RAM file) so the session survives a host crash, not only a service restart. */
  durable?: boolean;
  /** Quit QEMU after the save (default true: a saved session releases its compute). */
  quit?: boolean;
  /** The user QEMU runs as: the migration socket is made theirs (mode 0600) so it can connect. */
  socketOwner?: { uid: number; gid: number };
}

/** The migration's state once it is one of `wanted`, or has failed or been cancelled; undefined past the time. */
function migrationReaching(qmp: QemuMachine['qmp'], wanted: string[], timeoutMs: number, intervalMs: number) {
  return pollUntil(async () => {
    const info = await qmp.execute('query-migrate', undefined, { result: QueryMigrateShape });
    return wanted.includes(info.status ?? '') || info.status === 'failed' || info.status === 'cancelled' ? info : undefined;
  }, timeoutMs, intervalMs);
}

/** The `.part` file a state is written to (renamed once whole); neither it nor an older state is left. */
function clearedPart(stateFile: string): string {
  const part = `${stateFile}.part`;
  rmSync(part, { force: true });
  rmSync(stateFile, { force: true });
  return part;
}

/** Where a machine's state is sent and received: beside its QMP socket. */
export function migrationSocket(spec: Pick<MachineSpec, 'qmpSocket'>): string {
  const path = join(dirname(spec.qmpSocket), 'migrate.sock');
  if (Buffer.byteLength(path) > MAX_SOCKET_PATH) throw new Error(`migration socket path is longer than ${MAX_SOCKET_PATH} bytes (unix socket limit): ${path}`);
  return path;
}

/**
 * The most a saved state may hold: device state and non-shared RAM blocks with file-backed RAM,
 * the whole RAM otherwise (a QEMU sending more is not saving a machine: refused, not stored).
 */
function stateLimitBytes(spec: Partial<Pick<MachineSpec, 'memoryMib' | 'memoryFile'>>): number {
  if (spec.memoryFile) return 256 * 1048576;
  return ((spec.memoryMib ?? 65_536) + 256) * 1048576; // an adopted machine's size is not known: 64 GiB
}

export interface SaveResult {
  stateFile: string;
  stateBytes: number;
  /** True when only device state was written (file-backed RAM + x-ignore-shared). */
  ignoreShared: boolean;
  /** From pause to state file complete. */
  saveMs: number;
  /** Including QEMU's exit. */
  totalMs: number;
}

export async function saveMemory(machine: QemuMachine, options: SaveOptions): Promise<SaveResult> {
  const started = Date.now();
  const timeoutMs = options.timeoutMs ?? 120_000;
  const ignoreShared = Boolean(machine.spec.memoryFile);
  const { stateFile } = options;
  const part = clearedPart(stateFile);
  const qmp = machine.qmp;

  const socket = migrationSocket(machine.spec);
  let receiver: StateReceiver | undefined;
  let paused = false;
  try {
    receiver = await receiveState(socket, part, { ...options, limitBytes: stateLimitBytes(machine.spec) });
    await qmp.execute('stop');
    paused = true;
    // pause-before-switchover off: a live capture that failed may have left it on, and a save would then wait in pre-switchover.
    await qmp.execute('migrate-set-capabilities', { capabilities: [{ capability: 'x-ignore-shared', state: ignoreShared }, { capability: 'pause-before-switchover', state: false }] });
    await qmp.execute('migrate-set-parameters', { 'max-bandwidth': UNLIMITED_BANDWIDTH });
    await qmp.execute('migrate', { uri: `unix:${socket}` });
    const final = await migrationReaching(qmp, ['completed'], timeoutMs, 10);
    if (!final) {
      await qmp.execute('migrate_cancel').catch(() => undefined);
      throw new Error(`memory save of ${machine.id} did not complete within ${timeoutMs} ms`);
    }
    if (final.status !== 'completed') throw new Error(`memory save of ${machine.id} ${final.status}: ${final['error-desc'] ?? 'no detail'}`);
    // "completed" means QEMU has sent the last byte; the file is complete once the stream ended.
    await withDeadline(receiver.written, Math.max(1000, timeoutMs - (Date.now() - started)), () => new Error(`memory save of ${machine.id}: migration completed but ${stateFile} was not written`));
    if (options.durable) fsyncFile(part);
    renameSync(part, stateFile);
  } catch (error) {
    receiver?.close();
    rmSync(part, { force: true });
    rmSync(stateFile, { force: true });
    if (paused) await qmp.execute('cont').catch(() => undefined); // keep the machine running
    throw error;
  }
  receiver.close();
  if (options.durable && machine.spec.memoryFile) fsyncFile(machine.spec.memoryFile);
  const saveMs = Date.now() - started;
  if (options.quit ?? true) await stopMachine(machine, { powerdownTimeoutMs: 0 });
  return { stateFile, stateBytes: statSync(stateFile).size, ignoreShared, saveMs, totalMs: Date.now() - started };
}

export interface LiveCaptureOptions {
  stateFile: string;
  /** While the guest stands still at the end (QEMU waits in `pre-switchover`): the disk cut. */
  atSwitchover(): Promise<void>;
  /** The whole capture. */
  timeoutMs?: number;
  socketOwner?: { uid: number; gid: number };
  /** The guest's memory size (an adopted machine's QEMU does not say): bounds what is taken. */
  memoryMib: number;
}

/**
 * The running machine's whole state in one file (RAM and devices: the stream a restore with
 * `ramInState` loads), taken while the guest runs: QEMU sends its RAM while it runs, then stops it
 * for the last dirty pages and waits (`pause-before-switchover`) while `atSwitchover` runs; the
 * device state follows and the guest runs on. Only that end is a pause (its length is answered),
 * not the copy of the RAM. The stream holds RAM pages sent again while they changed: it may be
 * larger than the RAM, up to three times it (more is refused).
 */
export async function captureLive(machine: QemuMachine, options: LiveCaptureOptions): Promise<{ pausedMs: number; stateBytes: number }> {
  const started = Date.now();
  const timeoutMs = options.timeoutMs ?? 300_000;
  const { stateFile } = options;
  const part = clearedPart(stateFile);
  const qmp = machine.qmp;
  const socket = migrationSocket(machine.spec);
  const limitBytes = (options.memoryMib * 3 + 256) * 1048576; // the size limit (L16) counts a pending snapshot so (snapshotMostBytes)
  const receiver = await receiveState(socket, part, { socketOwner: options.socketOwner, limitBytes });
  let pausedAt: number | undefined;
  let pausedMs = 0;
  try {
    await qmp.execute('migrate-set-capabilities', { capabilities: [{ capability: 'x-ignore-shared', state: false }, { capability: 'pause-before-switchover', state: true }] });
    await qmp.execute('migrate-set-parameters', { 'max-bandwidth': UNLIMITED_BANDWIDTH });
    await qmp.execute('migrate', { uri: `unix:${socket}` });
    const status = (wanted: string[]) => migrationReaching(qmp, wanted, Math.max(1000, timeoutMs - (Date.now() - started)), 2);
    const switching = await status(['pre-switchover', 'completed']);
    if (!switching) throw new Error(`the memory of ${machine.id} was not sent within ${timeoutMs} ms`);
    if (switching.status !== 'pre-switchover') throw new Error(`the memory capture of ${machine.id} ${switching.status}: ${switching['error-desc'] ?? 'no detail'}`);
    pausedAt = Date.now();
    await options.atSwitchover();
    await qmp.execute('migrate-continue', { state: 'pre-switchover' });
    const final = await status(['completed']);
    if (!final || final.status !== 'completed') throw new Error(`the memory capture of ${machine.id} ${final?.status ?? 'did not complete'}: ${final?.['error-desc'] ?? 'no detail'}`);
    await qmp.execute('cont'); // postmigrate: cont takes its disks back and runs the guest on
    pausedMs = Date.now() - pausedAt;
    pausedAt = undefined;
    await withDeadline(receiver.written, Math.max(1000, timeoutMs - (Date.now() - started)), () => new Error(`the memory capture of ${machine.id} completed but ${stateFile} was not written`));
    renameSync(part, stateFile);
  } catch (error) {
    await qmp.execute('migrate_cancel').catch(() => undefined);
    rmSync(part, { force: true });
    throw error;
  } finally {
    receiver.close();
    if (pausedAt !== undefined || (await machine.status().catch(() => 'running')) !== 'running') await qmp.execute('cont').catch(() => undefined);
    await qmp.execute('migrate-set-capabilities', { capabilities: [{ capability: 'pause-before-switchover', state: false }] }).catch(() => undefined);
  }
  return { pausedMs, stateBytes: statSync(stateFile).size };
}

/**
 * A machine a save left paused because the process driving it died (the save of a stop, the source
 * of a fork with memory): the migration streamed to that process, so it fails or is cancelled
 * here. Answers the machine's state once no migration runs: `paused` (the save did not complete)
 * or `postmigrate` (it did). Whether it runs on is the caller's to decide.
 */
export async function settleInterruptedSave(machine: QemuMachine, timeoutMs = 10_000): Promise<string> {
  const settled = await pollUntil(async () => {
    const info = await machine.qmp.execute('query-migrate', undefined, { result: QueryMigrateShape });
    return ['active', 'setup', 'device', 'pre-switchover', 'cancelling', 'wait-unplug'].includes(info.status ?? '') ? undefined : true;
  }, timeoutMs, 50);
  if (!settled) await machine.qmp.execute('migrate_cancel');
  return machine.status();
}

export interface RestoreOptions extends StartOptions {
  stateFile: string;
  timeoutMs?: number;
  /**
   * Runs once QEMU listens for the state and we are connected, before a byte of it is sent: the
   * jail seals the machine's files here, before QEMU parses anything the last run left.
   */
  beforeLoad?: () => Promise<void> | void;
  /** The state holds the RAM too (captureLive): loaded into a new RAM file, not mapped from a copy. */
  ramInState?: boolean;
}

export interface RestoreResult {
  machine: QemuMachine;
  /** From spawning QEMU to the guest running again. */
  restoreMs: number;
}

/**
 * Starts the machine from a saved session. `spec` must describe the same machine the state was
 * saved from (same devices, same disk chain, same RAM size and memory file); `incoming` is set here.
 */
export async function restoreMemory(spec: MachineSpec, options: RestoreOptions): Promise<RestoreResult> {
  const started = Date.now();
  const timeoutMs = options.timeoutMs ?? 120_000;
  if (!existsSync(options.stateFile)) throw new Error(`no saved session: ${options.stateFile} does not exist`);
  // Without its RAM file an ignore-shared state would resume onto zeroed memory: refuse.
  if (spec.memoryFile && !options.ramInState && !existsSync(spec.memoryFile)) throw new Error(`saved session needs its RAM file ${spec.memoryFile}, which is missing`);

  const machine = await startMachine({ ...spec, incoming: true }, options);
  let sender: { close(): void } | undefined;
  try {
    const qmp = machine.qmp;
    await qmp.execute('migrate-set-capabilities', { capabilities: [{ capability: 'x-ignore-shared', state: Boolean(spec.memoryFile) && !options.ramInState }] });
    // QEMU listens; nothing of the guest has run yet, so the socket it made is its own.
    const socket = migrationSocket(spec);
    rmSync(socket, { force: true });
    await qmp.execute('migrate-incoming', { uri: `unix:${socket}` });
    sender = await sendState(socket, options.stateFile, timeoutMs, options.beforeLoad);
    // QEMU 7.2 exits when an incoming migration fails, so a dead process or a closed QMP ends the wait.
    const status = await pollUntil(
      async () => {
        const current = await machine.status();
        return current === 'inmigrate' ? undefined : current;
      },
      timeoutMs,
      5,
    );
    if (!status) throw new Error(`restore of ${spec.id} did not finish within ${timeoutMs} ms`);
    sender.close();
    // The source was paused before the save, so the destination comes up paused (it was running
    // only when the state recorded a running guest): continue it.
    if (status !== 'running') await qmp.execute('cont');
  } catch (error) {
    sender?.close();
    const alive = machine.alive();
    if (alive) await stopMachine(machine, { powerdownTimeoutMs: 0 }).catch(() => undefined);
    const log = alive ? '' : `\n${logTail(qemuLogFile(spec, options), 1500)}`;
    throw new Error(`restore of ${spec.id} failed${alive ? '' : ' (QEMU exited)'}: ${(error as Error).message}${log}`);
  }
  return { machine, restoreMs: Date.now() - started };
}

interface StateReceiver {
  /** Resolves once the first connection has ended and everything it sent is in the file. */
  written: Promise<void>;
  close(): void;
}

/** Listens on `socket` and writes the first connection's bytes (at most limitBytes) to `file`. */
async function receiveState(socket: string, file: string, options: Pick<SaveOptions, 'socketOwner'> & { limitBytes: number }): Promise<StateReceiver> {
  rmSync(socket, { force: true });
  let connection: Socket | undefined;
  const server: Server = createServer({ pauseOnConnect: true });
  const written = new Promise<void>((resolve, reject) => {
    server.once('connection', (peer) => {
      connection = peer;
      server.close(); // one sender only
      const out = createWriteStream(file, { flags: 'wx', mode: 0o600 });
      let received = 0;
      peer.on('data', (chunk: Buffer) => {
        received += chunk.length;
        if (received > options.limitBytes) peer.destroy(new Error(`the state sent is larger than ${options.limitBytes} bytes`));
      });
      peer.pipe(out);
      peer.resume();
      peer.once('error', (error) => {
        out.destroy();
        reject(error);
      });
      finished(out).then(resolve, reject);
    });
  });
  written.catch(() => undefined); // awaited by the caller once the migration completed
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(socket, () => resolve());
  });
  chmodSync(socket, 0o600);
  if (options.socketOwner) chownSync(socket, options.socketOwner.uid, options.socketOwner.gid);
  return {
    written,
    close: () => {
      server.close();
      connection?.destroy();
      rmSync(socket, { force: true });
    },
  };
}

/**
 * Connects to QEMU's incoming migration socket (once it exists), runs beforeLoad, and starts
 * sending the state file. QEMU judges the stream (the caller watches its status); close() drops
 * the connection afterwards.
 */
async function sendState(socket: string, file: string, timeoutMs: number, beforeLoad?: () => Promise<void> | void): Promise<{ close(): void }> {
  const ready = await pollUntil(() => (existsSync(socket) ? true : undefined), timeoutMs, 2);
  if (!ready) throw new Error(`QEMU did not listen on ${socket}`);
  const peer = connect(socket);
  try {
    await new Promise<void>((resolve, reject) => {
      peer.once('connect', resolve);
      peer.once('error', reject);
    });
    peer.on('error', () => undefined); // QEMU exits on a bad stream: its status tells
    await beforeLoad?.();
  } catch (error) {
    peer.destroy();
    throw error;
  }
  createReadStream(file).on('error', () => peer.destroy()).pipe(peer);
  return { close: () => peer.destroy() };
}

function fsyncFile(path: string): void {
  const fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK); // never a link or FIFO the guest's QEMU put there
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}
