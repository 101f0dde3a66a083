// The real service as a child process (`node --import tsx src/server.ts`) on a free loopback port,
// for tests of start-up, signals and crashes. tsx as a loader, not its CLI: the CLI is a second
// process that relays signals, and under load it once reported a SIGTERM death (143) for a service
// that handles SIGTERM; signals here must reach the service itself.
import { ChildProcess, execFile, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import path from 'node:path';
import { egressTable } from '../../src/compute/jail';
import { testUidBaseFor } from './jail';

const ROOT = path.resolve(__dirname, '../..');

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** One run of the service, in its own process group (so kill -9 takes the whole service down). */
export class ServiceProcess {
  readonly child: ChildProcess;
  output = '';
  readonly exited: Promise<Exit>;
  private exit: Exit | null = null;
  /** The nftables table of the uid base chosen here (none when env names a base). */
  private readonly ownTable: string | null;

  /**
   * `env` is all of the child's KISTE_* configuration (the test process's own are not passed on),
   * over three defaults: log level info, machines in-process (KISTE_COMPUTE; the suites that run a
   * worker say so), and the minimal image profile (the service builds its
   * profile's image at start; the default, desktop, is far too slow a build for tests). Its machine
   * uids (and so its network rules) are its data folder's own unless env names a base.
   */
  constructor(
    env: Record<string, string>,
    /** Another program of the repository (src/worker/main.ts), the log line that says it is ready, and the network namespace it runs in (a worker on "another host"). */
    private readonly program: { entry: string; ready: string; netns?: string } = { entry: 'src/server.ts', ready: 'kiste is listening' },
  ) {
    const base = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith('KISTE_')));
    const ownBase = env.KISTE_MACHINE_UID_BASE || !env.KISTE_DATA_DIR ? null : testUidBaseFor(env.KISTE_DATA_DIR);
    this.ownTable = ownBase === null ? null : egressTable(ownBase);
    const argv = [process.execPath, '--import', 'tsx', program.entry];
    // `ip netns exec` enters the namespace and execs the program: the pid (and process group) stay the program's.
    const [command, ...args] = program.netns ? ['ip', 'netns', 'exec', program.netns, ...argv] : argv;
    this.child = spawn(command!, args, {
      cwd: ROOT,
      env: { ...base, KISTE_LOG_LEVEL: 'info', KISTE_IMAGE_PROFILE: 'minimal', KISTE_COMPUTE: 'in-process', ...(ownBase === null ? {} : { KISTE_MACHINE_UID_BASE: String(ownBase) }), ...env } as NodeJS.ProcessEnv,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    this.child.stdout!.on('data', (chunk) => (this.output += chunk));
    this.child.stderr!.on('data', (chunk) => (this.output += chunk));
    this.exited = new Promise((resolve) =>
      this.child.once('exit', (code, signal) => {
        this.exit = { code, signal };
        resolve(this.exit);
      }),
    );
  }

  get running(): boolean {
    return this.exit === null;
  }

  /** Resolves once the log says it listens; fails if the process exits first. */
  async listening(timeoutMs = 60_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!this.output.includes(this.program.ready)) {
      if (!this.running) throw new Error(`service exited (${JSON.stringify(this.exit)}) before listening:\n${this.output}`);
      if (Date.now() > deadline) throw new Error(`service did not listen within ${timeoutMs} ms:\n${this.output}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  async waitExit(timeoutMs: number): Promise<Exit & { ms: number }> {
    const started = Date.now();
    const result = await Promise.race([
      this.exited,
      new Promise<null>((resolve) => setTimeout(() => resolve(null), timeoutMs).unref()),
    ]);
    if (!result) throw new Error(`service still running after ${timeoutMs} ms:\n${this.output}`);
    return { ...result, ms: Date.now() - started };
  }

  signal(signal: NodeJS.Signals): void {
    this.child.kill(signal);
  }

  /** kill -9 of the whole process group: the service and anything it started. */
  killHard(): void {
    process.kill(-this.child.pid!, 'SIGKILL');
  }

  /** Last resort in afterEach: nothing of ours keeps running. */
  async ensureStopped(): Promise<void> {
    if (this.running) {
      try {
        process.kill(-this.child.pid!, 'SIGKILL');
      } catch {
        // already gone
      }
      await this.waitExit(10_000).catch(() => undefined);
    }
    // A service leaves its network rules in place at exit (its machines may run on): the table of a
    // uid base this harness chose goes with the test, or every run would leave one more behind.
    if (this.ownTable) await new Promise((resolve) => execFile('nft', ['delete', 'table', 'inet', this.ownTable!], resolve));
  }
}
