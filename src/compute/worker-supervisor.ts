// The local kiste-worker of a one-box install, as the control plane runs it (issue 22): a child
// process of its own that dies with the control plane (setpriv --pdeathsig), is started again with
// backoff when it exits or stops answering, and is `up` only while it answers `hello` with its
// secret. While it is not up, calls that need it answer N01; its machines run on meanwhile (their
// QEMUs are detached) and the next worker adopts them. A worker left by an earlier control plane
// (its pid file) is ended before a new one starts: two workers would fight over the machines'
// agent sockets, which take one client each.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { readWorkerSecret } from '../worker/worker-secret';
import { WorkerClient } from './worker-client';
import { adoptionNeed } from './worker-adoption';
import { relayWorkerOutput } from './worker-output';

export type WorkerState = 'starting' | 'up' | 'down' | 'stopped';

export interface WorkerSupervisorSettings {
  dataDir: string;
  /** The worker's environment: the control plane's configuration (never its database URL: the worker opens none). */
  env: NodeJS.ProcessEnv;
  logger: { info(object: object, message: string): void; warn(object: object, message: string): void };
  /** How often an up worker is asked `hello`; three failures in a row restart it (default 5 s). */
  checkEveryMs?: number;
  /** Backoff between starts (default 500 ms, doubling up to 30 s; back to the minimum after a minute up). */
  restartMinMs?: number;
  restartMaxMs?: number;
  /** How long a started worker may take to answer (default 120 s: it checks the jail at start). */
  startWithinMs?: number;
  onState?: (state: WorkerState) => void;
  /**
   * Adopts a run of the worker that is not adopted under this client's epoch yet (its hello says
   * another): fences it with a higher epoch and removes what no record owns. It is up only after.
   */
  adopt(client: WorkerClient, helloEpoch: number): Promise<void>;
  /** Removes the strays of a run adopted already whose removal failed (its hello says so). */
  removeStrays(client: WorkerClient): Promise<void>;
  /** Where the worker's log lines go, marked as its own (default: this process's stdout). */
  output?: (line: string) => void;
}

/** At most one removal of strays again per this long. */
const REMOVE_AGAIN_MS = 60_000;

/** Where the worker's program is: compiled beside this file, or its source under tsx (tests, `npm run dev`). */
function workerCommand(): string[] {
  return __filename.endsWith('.ts') ? ['--import', 'tsx', join(__dirname, '../worker/main.ts')] : [join(__dirname, '../worker/main.js')];
}

export class WorkerSupervisor {
  private child: ChildProcess | null = null;
  private current: WorkerState = 'stopped';
  private client: WorkerClient | null = null;
  private restartMs: number;
  private timer: NodeJS.Timeout | null = null;
  private failedChecks = 0;
  private upSince = 0;
  private stopping = false;
  private lastRemoval = 0;
  private readonly socketPath: string;
  private readonly pidFile: string;

  constructor(private readonly settings: WorkerSupervisorSettings) {
    this.socketPath = join(settings.dataDir, 'worker.sock');
    this.pidFile = join(settings.dataDir, 'worker.pid');
    this.restartMs = settings.restartMinMs ?? 500;
  }

  get state(): WorkerState {
    return this.current;
  }

  /** The client of the worker while it is up; null otherwise (the caller answers N01). */
  get worker(): WorkerClient | null {
    return this.current === 'up' ? this.client : null;
  }

  /** The worker's pid while one runs. */
  get pid(): number | null {
    return this.child?.pid ?? null;
  }

  /** Starts the worker; resolves once it is up, or when the first try to start it failed (it keeps trying). */
  async start(): Promise<WorkerState> {
    this.stopping = false;
    endStaleWorker(this.pidFile);
    this.launch();
    await new Promise<void>((resolve) => {
      const settled = () => this.current !== 'starting';
      if (settled()) return resolve();
      const poll = setInterval(() => {
        if (!settled()) return;
        clearInterval(poll);
        resolve();
      }, 50);
    });
    return this.current;
  }

  /** Ends the worker (SIGTERM, then SIGKILL after 15 s); its machines keep running. */
  async stop(): Promise<void> {
    this.stopping = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const child = this.child;
    this.setState('stopped');
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill('SIGTERM');
    const killer = setTimeout(() => child.kill('SIGKILL'), 15_000);
    await exited;
    clearTimeout(killer);
  }

  private launch(): void {
    this.setState('starting');
    this.failedChecks = 0;
    this.client = null; // a new run is adopted anew
    // setpriv: the worker gets SIGTERM when this process ends, however it ends (kill -9 included).
    const child = spawn('setpriv', ['--pdeathsig', 'SIGTERM', '--', process.execPath, ...workerCommand()], {
      env: { ...this.settings.env, KISTE_DATA_DIR: this.settings.dataDir },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.child = child;
    const write = this.settings.output ?? ((line: string) => process.stdout.write(`${line}\n`));
    relayWorkerOutput(child.stdout!, write);
    relayWorkerOutput(child.stderr!, write);
    if (child.pid) writeFileSync(this.pidFile, `${child.pid}\n`, { mode: 0o600 });
    const ended = (detail: object, message: string) => {
      if (this.child !== child) return;
      this.child = null;
      rmSync(this.pidFile, { force: true });
      if (this.stopping) return;
      this.settings.logger.warn(detail, message);
      this.down();
    };
    // A spawn that fails (no setpriv, no node) emits 'error' and may never emit 'exit'.
    child.once('error', (error) => ended({ err: error }, 'kiste-worker could not be started; trying again'));
    child.once('exit', (code, signal) => ended({ code, signal }, 'kiste-worker exited; starting it again'));
    const startedAt = Date.now();
    const deadline = startedAt + (this.settings.startWithinMs ?? 120_000);
    const tryHello = async () => {
      if (this.child !== child || this.stopping) return;
      if (await this.answers()) {
        this.upSince = Date.now();
        this.setState('up');
        this.settings.logger.info({ pid: child.pid, ms: Date.now() - startedAt }, 'kiste-worker is up');
        return this.schedule(() => this.check(child), this.settings.checkEveryMs ?? 5000);
      }
      if (Date.now() > deadline) {
        this.settings.logger.warn({ pid: child.pid }, 'kiste-worker did not answer in time; starting it again');
        return void child.kill('SIGKILL'); // its exit starts the next one
      }
      this.schedule(tryHello, 200);
    };
    this.schedule(tryHello, 100);
  }

  /** Whether the worker answers hello with its secret (read once it is there: the first start makes it), adopted under this client's epoch. */
  private async answers(): Promise<boolean> {
    try {
      const secretFile = join(this.settings.dataDir, 'worker.secret');
      if (!existsSync(secretFile) || !existsSync(this.socketPath)) return false;
      this.client ??= new WorkerClient({ endpoint: { socketPath: this.socketPath }, secret: readWorkerSecret(secretFile, { create: false }), timeoutMs: 5000 });
      const hello = await this.client.hello();
      const need = adoptionNeed(hello, this.client.epoch);
      if (need === 'adopt') {
        await this.settings.adopt(this.client, hello.epoch).catch((error: Error) => {
          this.settings.logger.warn({ err: error.message }, 'kiste-worker could not be adopted; trying again');
          throw error;
        });
      } else if (need === 'remove-strays' && Date.now() - this.lastRemoval > REMOVE_AGAIN_MS) {
        // Adopted, but its strays were not removed: that is tried again now and then, the worker serving meanwhile.
        this.lastRemoval = Date.now();
        const client = this.client;
        void this.settings.removeStrays(client).catch((error: Error) => this.settings.logger.warn({ err: error.message }, 'kiste-worker\'s strays could not be removed; trying again'));
      }
      return true;
    } catch {
      return false;
    }
  }

  private async check(child: ChildProcess): Promise<void> {
    if (this.child !== child || this.stopping) return;
    if (await this.answers()) {
      this.failedChecks = 0;
      if (Date.now() - this.upSince > 60_000) this.restartMs = this.settings.restartMinMs ?? 500;
    } else if (++this.failedChecks >= 3) {
      this.settings.logger.warn({ pid: child.pid }, 'kiste-worker stopped answering; starting it again');
      this.setState('down');
      return void child.kill('SIGKILL');
    }
    this.schedule(() => this.check(child), this.settings.checkEveryMs ?? 5000);
  }

  private down(): void {
    this.setState('down');
    const wait = this.restartMs;
    this.restartMs = Math.min(this.restartMs * 2, this.settings.restartMaxMs ?? 30_000);
    this.schedule(() => this.launch(), wait);
  }

  private schedule(run: () => void | Promise<void>, ms: number): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = null;
      void run();
    }, ms);
  }

  private setState(state: WorkerState): void {
    if (state === this.current) return;
    this.current = state;
    this.settings.onState?.(state);
  }
}

/** Ends a worker an earlier control plane left running (its pid file names it, and it is a kiste-worker). */
function endStaleWorker(pidFile: string): void {
  let pid: number;
  try {
    pid = Number(readFileSync(pidFile, 'utf8').trim());
  } catch {
    return;
  }
  rmSync(pidFile, { force: true });
  if (!Number.isInteger(pid) || pid <= 1) return;
  try {
    const command = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    if (!/worker[/\\]main\.(ts|js)/.test(command)) return; // the pid was reused by something else
    process.kill(pid, 'SIGKILL');
  } catch {
    // gone already
  }
}
