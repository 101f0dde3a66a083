// Memory sessions: save a running machine's memory and device state to a file and quit QEMU; later
// start QEMU again with the same command line and continue exactly where the guest was.
//
// QEMU 7.2 has no `migrate file:` (it came in 8.x), so the state goes through a shell pipe:
//   save:    migrate        {"uri": "exec:cat > STATE.part && mv -f STATE.part STATE"}
//   restore: -incoming defer, then migrate-incoming {"uri": "exec:cat STATE"}
// The `.part` + rename matters twice: a crash in the middle of a save never leaves a truncated
// state file that looks complete, and QEMU reports the migration "completed" when it has handed the
// last byte to the pipe, possibly before `cat` has written it: the rename tells us `cat` is done.
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
// we lift the limit, since the "network" is a local pipe.
//
// If anything fails before the state file is complete, the guest is resumed (`cont`) and keeps
// running: a failed save never loses the machine.
import { fsyncSync, existsSync, openSync, closeSync, rmSync, statSync } from 'node:fs';
import type { MachineSpec } from './command-line';
import { logTail, QemuMachine, qemuLogFile, StartOptions, startMachine, stopMachine } from './qemu-process';
import { shellQuote } from '../../shell-quote';
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

interface MigrationInfo {
  status?: string;
  'error-desc'?: string;
}

export async function saveMemory(machine: QemuMachine, options: SaveOptions): Promise<SaveResult> {
  const started = Date.now();
  const timeoutMs = options.timeoutMs ?? 120_000;
  const ignoreShared = Boolean(machine.spec.memoryFile);
  const { stateFile } = options;
  const part = `${stateFile}.part`;
  rmSync(part, { force: true });
  rmSync(stateFile, { force: true });
  const qmp = machine.qmp;

  await qmp.execute('stop');
  try {
    await qmp.execute('migrate-set-capabilities', { capabilities: [{ capability: 'x-ignore-shared', state: ignoreShared }] });
    await qmp.execute('migrate-set-parameters', { 'max-bandwidth': UNLIMITED_BANDWIDTH });
    await qmp.execute('migrate', { uri: `exec:cat > ${shellQuote(part)} && mv -f ${shellQuote(part)} ${shellQuote(stateFile)}` });
    const final = await pollUntil(
      async () => {
        const info = await qmp.execute<MigrationInfo>('query-migrate');
        return info.status === 'completed' || info.status === 'failed' || info.status === 'cancelled' ? info : undefined;
      },
      timeoutMs,
      10,
    );
    if (!final) {
      await qmp.execute('migrate_cancel').catch(() => undefined);
      throw new Error(`memory save of ${machine.id} did not complete within ${timeoutMs} ms`);
    }
    if (final.status !== 'completed') throw new Error(`memory save of ${machine.id} ${final.status}: ${final['error-desc'] ?? 'no detail'}`);
    const written = await pollUntil(() => (existsSync(stateFile) ? true : undefined), Math.max(1000, timeoutMs - (Date.now() - started)), 5);
    if (!written) throw new Error(`memory save of ${machine.id}: migration completed but ${stateFile} was not written`);
  } catch (error) {
    rmSync(part, { force: true });
    rmSync(stateFile, { force: true });
    await qmp.execute('cont').catch(() => undefined); // keep the machine running
    throw error;
  }
  if (options.durable) {
    fsyncFile(stateFile);
    if (machine.spec.memoryFile) fsyncFile(machine.spec.memoryFile);
  }
  const saveMs = Date.now() - started;
  if (options.quit ?? true) await stopMachine(machine, { powerdownTimeoutMs: 0 });
  return { stateFile, stateBytes: statSync(stateFile).size, ignoreShared, saveMs, totalMs: Date.now() - started };
}

export interface RestoreOptions extends StartOptions {
  stateFile: string;
  timeoutMs?: number;
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
  if (spec.memoryFile && !existsSync(spec.memoryFile)) throw new Error(`saved session needs its RAM file ${spec.memoryFile}, which is missing`);

  const machine = await startMachine({ ...spec, incoming: true }, options);
  try {
    const qmp = machine.qmp;
    await qmp.execute('migrate-set-capabilities', { capabilities: [{ capability: 'x-ignore-shared', state: Boolean(spec.memoryFile) }] });
    await qmp.execute('migrate-incoming', { uri: `exec:cat ${shellQuote(options.stateFile)}` });
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
    // The source was paused before the save, so the destination comes up paused (it was running
    // only when the state recorded a running guest): continue it.
    if (status !== 'running') await qmp.execute('cont');
  } catch (error) {
    const alive = machine.alive();
    if (alive) await stopMachine(machine, { powerdownTimeoutMs: 0 }).catch(() => undefined);
    const log = alive ? '' : `\n${logTail(qemuLogFile(spec, options), 1500)}`;
    throw new Error(`restore of ${spec.id} failed${alive ? '' : ' (QEMU exited)'}: ${(error as Error).message}${log}`);
  }
  return { machine, restoreMs: Date.now() - started };
}

function fsyncFile(path: string): void {
  const fd = openSync(path, 'r+');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}
