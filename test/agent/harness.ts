// Runs the real agent bundle (built by agent/build.ts) as a child process over a unix socket, with
// its root, /proc and system commands pointed at a temporary directory. A FakeQemu relay stands in
// for QEMU's chardev where a test needs a byte stream that outlives the host's connection.
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import * as net from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { AgentClient, AgentClientOptions } from '../../src/compute/agent-client';

const REPO = resolve(__dirname, '../..');

let bundle: string | null = null;

/**
 * Builds agent/dist/kiste-agent.js once per test process. Test files run in parallel; build.ts
 * writes to a temporary name and renames, and the output is deterministic, so parallel builds agree.
 */
export function buildAgentBundle(): string {
  if (bundle) return bundle;
  const outfile = join(REPO, 'agent/dist/kiste-agent.js');
  execFileSync(join(REPO, 'node_modules/.bin/tsx'), [join(REPO, 'agent/build.ts'), '--outfile', outfile], { cwd: REPO, stdio: 'pipe' });
  bundle = outfile;
  return outfile;
}

export interface AgentOptions {
  /** 'listen': the agent serves the socket; 'connect': it connects to one (FakeQemu.guestPath); 'device': KISTE_AGENT_PORT in env. */
  mode?: 'listen' | 'connect' | 'device';
  connectPath?: string;
  proc?: string;
  sshPort?: number;
  env?: Record<string, string>;
  /** Reuse a directory (restart an agent with the same root and socket). */
  dir?: string;
}

export class AgentProcess {
  readonly root: string;
  readonly socketPath: string;
  readonly commandLog: string;
  readonly stderr: string[] = [];
  child!: ChildProcess;
  private exited: Promise<void> = Promise.resolve();

  constructor(
    readonly dir: string,
    private readonly opts: AgentOptions,
  ) {
    this.root = join(dir, 'root');
    this.socketPath = join(dir, 'agent.sock');
    this.commandLog = join(dir, 'commands.log');
  }

  static async start(opts: AgentOptions = {}): Promise<AgentProcess> {
    const dir = opts.dir ?? mkdtempSync(join(tmpdir(), 'kiste-agent-'));
    const agent = new AgentProcess(dir, opts);
    agent.prepare();
    await agent.launch();
    return agent;
  }

  /** A fresh agent process with the same directory and socket (an agent restart). */
  async restart(): Promise<void> {
    await this.kill('SIGKILL');
    await this.launch();
  }

  get pid(): number {
    return this.child.pid as number;
  }

  commands(): string[] {
    if (!existsSync(this.commandLog)) return [];
    return readFileSync(this.commandLog, 'utf8')
      .split('\n')
      .map((line) => line.trimEnd())
      .filter(Boolean);
  }

  /** Resident memory of the agent process, in KiB. */
  rssKib(): number {
    const status = readFileSync(`/proc/${this.pid}/status`, 'utf8');
    return Number(/^VmRSS:\s+(\d+)/m.exec(status)?.[1] ?? 0);
  }

  client(options: Partial<AgentClientOptions> = {}): AgentClient {
    return AgentClient.unixSocket(this.socketPath, { requestTimeoutMs: 10_000, reconnectMaxMs: 200, ...options });
  }

  async kill(signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill(signal);
    await this.exited;
  }

  async stop(): Promise<void> {
    await this.kill('SIGTERM');
    rmSync(this.dir, { recursive: true, force: true });
  }

  private prepare(): void {
    mkdirSync(join(this.root, 'etc'), { recursive: true });
    mkdirSync(join(this.dir, 'tmp'), { recursive: true });
    writeFileSync(join(this.root, 'etc/passwd'), 'root:x:0:0:root:/root:/bin/bash\n');
    // Stand-ins for the commands that would change the host running the tests.
    const bin = join(this.dir, 'bin');
    mkdirSync(bin, { recursive: true });
    for (const name of ['hostname', 'date', 'systemctl', 'sync', 'poweroff', 'reboot']) {
      const script = join(bin, name);
      writeFileSync(script, `#!/bin/sh\necho "${name} $*" >> '${this.commandLog}'\n`);
      chmodSync(script, 0o755);
    }
  }

  private async launch(): Promise<void> {
    this.stderr.length = 0;
    const env: Record<string, string> = {
      PATH: `${join(this.dir, 'bin')}:${process.env.PATH ?? '/usr/bin:/bin'}`,
      KISTE_AGENT_ROOT: this.root,
      KISTE_AGENT_PROC: this.opts.proc ?? '/proc',
      KISTE_AGENT_SSH_PORT: String(this.opts.sshPort ?? 1),
      KISTE_AGENT_LOG: 'info',
      // The agent's FIFOs go here and are removed with the directory.
      TMPDIR: join(this.dir, 'tmp'),
      ...this.opts.env,
    };
    const mode = this.opts.mode ?? 'listen';
    if (mode === 'listen') env.KISTE_AGENT_LISTEN = this.socketPath;
    else if (mode === 'connect') env.KISTE_AGENT_CONNECT = this.opts.connectPath as string;
    const child = spawn(process.execPath, [buildAgentBundle()], { env, stdio: ['ignore', 'ignore', 'pipe'] });
    this.child = child;
    this.exited = new Promise((resolve) => child.once('exit', () => resolve()));
    const started = new Promise<void>((resolve, reject) => {
      let buffered = '';
      child.stderr?.on('data', (chunk: Buffer) => {
        buffered += chunk.toString('utf8');
        const lines = buffered.split('\n');
        buffered = lines.pop() ?? '';
        for (const line of lines) {
          this.stderr.push(line);
          if (line.includes('"listening"') || line.includes('"kiste agent started"')) resolve();
        }
      });
      child.once('exit', (code) => reject(new Error(`agent exited early (${code}): ${this.stderr.join('\n')}`)));
    });
    await started;
    if ((this.opts.mode ?? 'listen') === 'listen') {
      while (!this.stderr.some((l) => l.includes('"listening"'))) await sleep(10);
    }
  }
}

/**
 * QEMU's side of the virtio port, in miniature: the guest end (the agent, connecting) and the host
 * end (a client) are separate connections. The guest end stays up while hosts come and go, and
 * while no host is connected nothing is read from the guest (QEMU leaves it in the virtqueue):
 * exactly the situation in which a half-sent frame meets the next host.
 */
export class FakeQemu {
  readonly guestPath: string;
  readonly hostPath: string;
  private guest: net.Socket | null = null;
  private host: net.Socket | null = null;
  private readonly guestServer: net.Server;
  private readonly hostServer: net.Server;
  private guestWaiters: (() => void)[] = [];
  /** Bytes the next host connection receives before anything from the guest. */
  readonly staleForHost: Buffer[] = [];

  constructor(dir: string) {
    this.guestPath = join(dir, 'guest.sock');
    this.hostPath = join(dir, 'host.sock');
    this.guestServer = net.createServer((socket) => {
      this.guest?.destroy();
      this.guest = socket;
      socket.pause();
      socket.on('data', (chunk) => this.host?.write(chunk));
      socket.on('close', () => {
        if (this.guest === socket) this.guest = null;
      });
      socket.on('error', () => undefined);
      this.link();
      for (const w of this.guestWaiters.splice(0)) w();
    });
    this.hostServer = net.createServer((socket) => {
      this.host?.destroy();
      this.host = socket;
      socket.pause();
      // Left in the virtqueue from before: the next host reads it first.
      for (const bytes of this.staleForHost.splice(0)) socket.write(bytes);
      socket.on('data', (chunk) => this.guest?.write(chunk));
      socket.on('close', () => {
        if (this.host !== socket) return;
        this.host = null;
        this.guest?.pause();
      });
      socket.on('error', () => undefined);
      this.link();
    });
  }

  async listen(): Promise<void> {
    await Promise.all([
      new Promise<void>((r) => this.guestServer.listen(this.guestPath, r)),
      new Promise<void>((r) => this.hostServer.listen(this.hostPath, r)),
    ]);
  }

  waitGuest(): Promise<void> {
    return this.guest ? Promise.resolve() : new Promise((r) => this.guestWaiters.push(r));
  }

  /** Cut the host's connection the way a dying host process would. */
  dropHost(): void {
    this.host?.destroy();
    this.host = null;
    this.guest?.pause();
  }

  close(): void {
    this.guest?.destroy();
    this.host?.destroy();
    this.guestServer.close();
    this.hostServer.close();
  }

  private link(): void {
    if (this.guest && this.host) {
      this.guest.resume();
      this.host.resume();
    }
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** A TCP port nobody listens on (yet). */
export async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise<void>((r) => server.close(() => r()));
  return port;
}

/** Is the process gone (or a zombie nobody reaped yet)? */
export function processGone(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return true;
  }
}

export async function eventually(check: () => boolean, timeoutMs = 5000, what = 'condition'): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}
