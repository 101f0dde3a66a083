// One QEMU process per running machine: start it detached, find it again after the service
// restarted, stop it, kill it, and find QEMUs that nobody owns any more.
//
// Detached, not `-daemonize`: we spawn QEMU in its own session (setsid, so no signal sent to the
// service's process group or terminal reaches it) with stdin from /dev/null and stdout/stderr
// appended to a log file, and never wait for it. It keeps running when the service dies; the service
// finds it again through the pid file and the QMP socket. We avoid `-daemonize` because the daemon
// sends its stderr to /dev/null after startup (QEMU's late fatal errors, e.g. a KVM MSR abort, would
// be lost) and chdirs to /.
//
// Identity: every machine's QEMU runs with `-name kiste-<id>` and `-pidfile <machine dir>/run/qemu.pid`.
// A pid from a pid file is only trusted after /proc/<pid>/cmdline shows both (pids are reused), and
// orphan reaping only considers processes whose pid file lies under the given machines root, so
// other QEMUs on the host (and other test runs) are never touched.
import { execFileSync, spawn } from 'node:child_process';
import { closeSync, constants, existsSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { basename, dirname, relative, isAbsolute } from 'node:path';
import { buildQemuArgs, MachineSpec, processName } from './command-line';
import { QmpBusyError, QmpClient, type QmpLogger } from './qmp-client';
import { QueryStatusShape } from './qmp-shapes';
import { shellWord } from '../../shell-quote';
import { pollUntil, sleep } from './wait';

/** What is needed to find and control a running machine (a subset of its MachineSpec). */
export type MachineRef = Pick<MachineSpec, 'id' | 'pidFile' | 'qmpSocket' | 'agentSocket'> & Partial<Pick<MachineSpec, 'memoryFile'>>;

export interface StartOptions {
  /** argv builder; memory restore passes the same one with `incoming: true` in the spec. */
  buildArgs?: (spec: MachineSpec) => string[];
  /** Default: $KISTE_QEMU_BINARY or `qemu-system-x86_64` from PATH. */
  qemuBinary?: string;
  /** QEMU's own stdout/stderr; default `<dir of pidFile>/qemu.log`. */
  logFile?: string;
  /** How long QEMU may take until its QMP monitor answers. */
  readyTimeoutMs?: number;
  /**
   * Wraps QEMU's command (the jail: its user, cgroup and limits); the wrapper must end by exec'ing
   * the command it was given, so the spawned pid is QEMU's.
   */
  launch?: (command: string, args: string[]) => { command: string; args: string[] };
  /** Where the monitor link reports what QEMU sent that does not fit the protocol. */
  logger?: QmpLogger;
}

export class MachineStartError extends Error {
  constructor(
    message: string,
    readonly logTail: string,
  ) {
    super(logTail ? `${message}\n${logTail}` : message);
    this.name = 'MachineStartError';
  }
}

export class MachineAlreadyRunningError extends Error {
  constructor(
    readonly id: string,
    readonly pid: number,
  ) {
    super(`machine ${id} is already running as pid ${pid}`);
    this.name = 'MachineAlreadyRunningError';
  }
}

/** A running QEMU we control through its QMP connection. */
export class QemuMachine {
  constructor(
    readonly spec: MachineRef,
    readonly pid: number,
    readonly qmp: QmpClient,
  ) {}

  get id(): string {
    return this.spec.id;
  }

  alive(): boolean {
    return processAlive(this.pid);
  }

  /** Resolves true once the process is gone, false if it is still there after timeoutMs. */
  async waitForExit(timeoutMs: number): Promise<boolean> {
    return (await pollUntil(() => (processAlive(this.pid) ? undefined : true), timeoutMs, 25)) ?? false;
  }

  /** `query-status`: running, paused, inmigrate, postmigrate, shutdown, … */
  async status(): Promise<string> {
    const answer = await this.qmp.execute('query-status', undefined, { result: QueryStatusShape });
    return answer.status;
  }

  /** Lets go of the machine (closes QMP) and leaves it running, as a service shutdown does. */
  detach(): Promise<void> {
    return this.qmp.close();
  }
}

/** Where QEMU's own stdout/stderr go. */
export function qemuLogFile(spec: Pick<MachineSpec, 'pidFile'>, options: Pick<StartOptions, 'logFile'> = {}): string {
  return options.logFile ?? `${dirname(spec.pidFile)}/qemu.log`;
}

/** The only environment a QEMU gets. */
const QEMU_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

export function qemuBinary(): string {
  return process.env.KISTE_QEMU_BINARY ?? 'qemu-system-x86_64';
}

let build: string | undefined;

/** The QEMU build that runs machines (`QEMU emulator version …`): a saved memory image is restored only by the same one. */
export function qemuBuild(): string {
  build ??= execFileSync(qemuBinary(), ['--version'], { encoding: 'utf8' }).split('\n')[0]!.trim();
  return build;
}

/** Starts QEMU detached and returns once its QMP monitor has answered. */
export async function startMachine(spec: MachineSpec, options: StartOptions = {}): Promise<QemuMachine> {
  const args = (options.buildArgs ?? buildQemuArgs)(spec);
  const running = findOwnProcess(spec);
  if (running !== undefined) throw new MachineAlreadyRunningError(spec.id, running);

  for (const path of [spec.pidFile, spec.serialLog, spec.qmpSocket, spec.agentSocket]) mkdirSync(dirname(path), { recursive: true });
  // Leftovers of a QEMU that was killed (a clean exit removes them): a stale socket file would make
  // us connect to nothing, a stale pid file would name someone else's pid.
  for (const path of [spec.pidFile, spec.qmpSocket, spec.agentSocket]) rmSync(path, { force: true });
  // A cold boot never needs the RAM of an earlier run (a restore passes `incoming`): start from an
  // empty file, which also avoids QEMU refusing a leftover file smaller than a grown memory size.
  if (spec.memoryFile && !spec.incoming) rmSync(spec.memoryFile, { force: true });

  const logFile = qemuLogFile(spec, options);
  const binary = options.qemuBinary ?? qemuBinary();
  const launched = options.launch?.(binary, args) ?? { command: binary, args };
  // Never through a link: the log may lie where the machine's own (jailed) QEMU could put one.
  const logFd = openSync(logFile, constants.O_WRONLY | constants.O_APPEND | constants.O_CREAT | constants.O_NOFOLLOW, 0o600);
  let child;
  try {
    writeSync(logFd, `${START_HEADER}${new Date().toISOString()} ${[launched.command, ...launched.args].map(shellWord).join(' ')}\n`);
    // Nothing of the service's environment (secrets, database URL) or working folder goes along.
    child = spawn(launched.command, launched.args, { detached: true, stdio: ['ignore', logFd, logFd], env: { PATH: QEMU_PATH }, cwd: '/' });
  } finally {
    closeSync(logFd);
  }
  child.unref(); // the service may exit while QEMU runs on
  let exited: string | undefined;
  child.on('error', (error) => (exited = `could not start ${binary}: ${error.message}`));
  child.on('exit', (code, signal) => (exited = `QEMU exited during startup (${signal ? `signal ${signal}` : `exit code ${code}`})`));

  const deadline = Date.now() + (options.readyTimeoutMs ?? 30_000);
  for (;;) {
    if (exited) throw new MachineStartError(exited, logTail(logFile));
    if (Date.now() > deadline) {
      if (child.pid) killPid(child.pid);
      throw new MachineStartError(`QEMU did not answer on QMP within ${options.readyTimeoutMs ?? 30_000} ms`, logTail(logFile));
    }
    try {
      // The socket exists early, but the greeting only comes once QEMU's main loop runs: allow it
      // the whole remaining start time rather than the usual short "is the monitor busy" wait.
      const qmp = await QmpClient.connect(spec.qmpSocket, { greetingTimeoutMs: Math.max(100, deadline - Date.now()), logger: options.logger });
      return new QemuMachine(spec, child.pid!, qmp);
    } catch (error) {
      if (error instanceof QmpBusyError) continue; // deadline passed while waiting: reported above
      await sleep(20);
    }
  }
}

/**
 * Finds a machine that kept running while the service was away: the pid file names the process,
 * /proc confirms it is this machine's QEMU, and a new QMP connection takes over control.
 * Undefined when the machine is not running (no pid file, dead pid, or a pid that is not ours).
 * Throws QmpBusyError when another client still holds its monitor (an older service still alive).
 */
export async function adoptMachine(ref: MachineRef, options: { greetingTimeoutMs?: number; logger?: QmpLogger } = {}): Promise<QemuMachine | undefined> {
  const pid = findOwnProcess(ref);
  if (pid === undefined) return undefined;
  const qmp = await QmpClient.connect(ref.qmpSocket, { greetingTimeoutMs: options.greetingTimeoutMs ?? 3000, logger: options.logger });
  return new QemuMachine(ref, pid, qmp);
}

export type StopOutcome = 'powerdown' | 'quit' | 'killed' | 'not-running';

export interface StopOptions {
  /** How long the guest may take to power off after the ACPI power button; 0 skips it. */
  powerdownTimeoutMs?: number;
  /** How long QEMU may take to exit after `quit`. */
  quitTimeoutMs?: number;
}

/**
 * Stops a machine, as gently as it lets us: ACPI power button (the guest shuts down cleanly and
 * QEMU exits by itself), then QMP `quit` (QEMU exits at once, the guest does not notice: like
 * pulling the plug, but QEMU flushes its disk caches), then SIGKILL.
 */
export async function stopMachine(machine: QemuMachine, options: StopOptions = {}): Promise<StopOutcome> {
  if (!machine.alive()) {
    cleanupLeftovers(machine.spec);
    machine.qmp.destroy();
    return 'not-running';
  }
  const powerdownTimeoutMs = options.powerdownTimeoutMs ?? 30_000;
  const quitTimeoutMs = options.quitTimeoutMs ?? 10_000;
  let outcome: StopOutcome | undefined;
  if (powerdownTimeoutMs > 0 && !machine.qmp.closed) {
    try {
      await machine.qmp.execute('system_powerdown', undefined, { timeoutMs: 5000 });
      if (await machine.waitForExit(powerdownTimeoutMs)) outcome = 'powerdown';
    } catch {
      // QMP gone or refused: fall through to the harder ways
    }
  }
  if (!outcome && !machine.qmp.closed) {
    try {
      await machine.qmp.execute('quit', undefined, { timeoutMs: 5000 });
    } catch {
      // QEMU may close the connection before or instead of answering quit
    }
    if (await machine.waitForExit(quitTimeoutMs)) outcome = 'quit';
  }
  if (!outcome) {
    await killPidAndWait(machine.pid);
    outcome = 'killed';
  }
  machine.qmp.destroy();
  cleanupLeftovers(machine.spec);
  return outcome;
}

/** SIGKILL: the machine is gone at once (guest state lost, disk as the guest last flushed it). */
export async function killMachine(machine: QemuMachine): Promise<void> {
  await killPidAndWait(machine.pid);
  machine.qmp.destroy();
  cleanupLeftovers(machine.spec);
}

export interface QemuProcessInfo {
  pid: number;
  machineId: string;
  pidFile: string | undefined;
  /** The directory of the pid file (inside the machine's directory). */
  machineDir: string | undefined;
}

/** All live processes on this host started with `-name kiste-…` (ours, by our naming). */
export function listQemuProcesses(): QemuProcessInfo[] {
  const found: QemuProcessInfo[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const pid = Number(entry);
    const args = readCmdline(pid);
    if (!args || !basename(args[0] ?? '').startsWith('qemu-system')) continue;
    const name = argValue(args, '-name');
    if (!name?.startsWith(processName(''))) continue;
    if (!processAlive(pid)) continue;
    const pidFile = argValue(args, '-pidfile');
    found.push({ pid, machineId: name.slice(processName('').length), pidFile, machineDir: pidFile ? dirname(pidFile) : undefined });
  }
  return found;
}

export interface ReapOptions {
  /** Only QEMUs whose pid file lies under this directory are considered. */
  machinesRoot: string;
  /** Default: the machine's directory no longer exists. */
  isOrphan?: (info: QemuProcessInfo) => boolean;
  /** A QEMU that would not end (one stuck in the kernel outlives SIGKILL): told, and the others reaped on. */
  onSurvivor?: (info: QemuProcessInfo, error: Error) => void;
}

/** Kills our QEMU processes that belong to no machine any more; returns what it killed. */
export async function reapOrphans(options: ReapOptions): Promise<QemuProcessInfo[]> {
  const isOrphan = options.isOrphan ?? ((info: QemuProcessInfo) => !info.machineDir || !existsSync(info.machineDir));
  const reaped: QemuProcessInfo[] = [];
  for (const info of listQemuProcesses()) {
    if (!info.pidFile || !isUnder(options.machinesRoot, info.pidFile)) continue;
    if (!isOrphan(info)) continue;
    try {
      await killPidAndWait(info.pid);
    } catch (error) {
      if (!options.onSurvivor) throw error;
      options.onSurvivor(info, error as Error);
      continue;
    }
    reaped.push(info);
  }
  return reaped;
}

/** The pid of this machine's live QEMU according to its pid file, if /proc confirms it. */
export function findOwnProcess(ref: Pick<MachineSpec, 'id' | 'pidFile'>): number | undefined {
  let pid: number;
  try {
    pid = Number.parseInt(readFileSync(ref.pidFile, 'utf8').trim(), 10);
  } catch {
    return undefined;
  }
  if (!Number.isInteger(pid) || pid <= 0 || !processAlive(pid)) return undefined;
  const args = readCmdline(pid);
  if (!args) return undefined;
  return argValue(args, '-name') === processName(ref.id) && argValue(args, '-pidfile') === ref.pidFile ? pid : undefined;
}

/** True while the process exists and is not a zombie (a zombie has exited, it only awaits reaping). */
export function processAlive(pid: number): boolean {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return false;
  }
  // Field 3 (state) follows the command name in parentheses, which may itself contain ") ".
  const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
  return state !== 'Z' && state !== 'X';
}

function readCmdline(pid: number): string[] | undefined {
  try {
    const raw = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    return raw.split('\0').filter((part, i, all) => part !== '' || i < all.length - 1);
  } catch {
    return undefined;
  }
}

function argValue(args: string[], flag: string): string | undefined {
  const i = args.indexOf(flag);
  return i >= 0 ? args[i + 1] : undefined;
}

function isUnder(root: string, path: string): boolean {
  const rel = relative(root, path);
  return rel !== '' && !rel.startsWith('..') && !isAbsolute(rel);
}

function killPid(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

async function killPidAndWait(pid: number): Promise<void> {
  killPid(pid);
  const gone = await pollUntil(() => (processAlive(pid) ? undefined : true), 10_000, 20);
  if (!gone) throw new Error(`pid ${pid} survived SIGKILL for 10 s`);
}

/** After QEMU is gone: a clean exit removes the pid file and sockets, a kill leaves them. */
function cleanupLeftovers(ref: MachineRef): void {
  for (const path of [ref.pidFile, ref.qmpSocket, ref.agentSocket]) rmSync(path, { force: true });
}

/** The line startMachine writes before each start: the time and the command line. */
const START_HEADER = '--- ';

/**
 * The end of what the last start wrote to a QEMU log file (its fatal errors are the last lines),
 * without that start's header: the command line is long and would push the error out of view.
 * '' when unreadable or when the start printed nothing.
 */
export function logTail(path: string, bytes = 4000): string {
  try {
    const text = readFileSync(path, 'utf8');
    const later = text.lastIndexOf(`\n${START_HEADER}`);
    const header = later >= 0 ? later + 1 : text.startsWith(START_HEADER) ? 0 : -1;
    const end = header < 0 ? -1 : text.indexOf('\n', header);
    const lastStart = header < 0 ? text : end < 0 ? '' : text.slice(end + 1);
    return lastStart.slice(-bytes).trim();
  } catch {
    return '';
  }
}

