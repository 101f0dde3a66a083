// The real service as a child process (`node --import tsx src/server.ts`) on a free loopback port,
// for tests of start-up, signals and crashes. tsx as a loader, not its CLI: the CLI is a second
// process that relays signals, and under load it once reported a SIGTERM death (143) for a service
// that handles SIGTERM; signals here must reach the service itself.
import { ChildProcess, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import path from 'node:path';

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

  /**
   * `env` is all of the child's KISTE_* configuration (the test process's own are not passed on),
   * over two defaults: log level info, and the minimal image profile (the service builds its
   * profile's image at start; the default, desktop, is far too slow a build for tests).
   */
  constructor(env: Record<string, string>) {
    const base = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith('KISTE_')));
    this.child = spawn(process.execPath, ['--import', 'tsx', 'src/server.ts'], {
      cwd: ROOT,
      env: { ...base, KISTE_LOG_LEVEL: 'info', KISTE_IMAGE_PROFILE: 'minimal', ...env } as NodeJS.ProcessEnv,
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
    while (!this.output.includes('kiste is listening')) {
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
    if (!this.running) return;
    try {
      process.kill(-this.child.pid!, 'SIGKILL');
    } catch {
      // already gone
    }
    await this.waitExit(10_000).catch(() => undefined);
  }
}

