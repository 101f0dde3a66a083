// Boots an image with QEMU directly, the way a smoke test needs it (the real QEMU driver lives in
// src/): a qcow2 overlay of a larger virtual size on the image's disk, the agent's virtio-serial port
// on a unix socket, the serial console in a file. Used by boot.test.ts.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, promises as fs, readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';

export interface SmokeVmOptions {
  kernel: string;
  initrd: string;
  disk: string;
  cmdline: string;
  /** folder for the overlay, sockets and logs (created) */
  workDir: string;
  /** virtual size of the overlay, e.g. '4G' */
  diskSize: string;
  memoryMiB?: number;
  cpus?: number;
  /** accelerator argument, default TCG (multi-threaded) */
  accel?: string;
  cpu?: string;
  agentPort?: string;
  extraArgs?: string[];
  /**
   * QEMU runs under coreutils `timeout`: if the test process dies without killing it, the VM still
   * ends after this many seconds (default 900)
   */
  maxLifetimeSeconds?: number;
}

export interface SmokeVm {
  process: ChildProcess;
  startedAt: number;
  consolePath: string;
  overlayPath: string;
  agentSocketPath: string;
  /** the QEMU command line, for messages */
  argv: string[];
  console(): string;
  /** waits until the console matches; returns ms since QEMU started */
  waitForConsole(pattern: RegExp, timeoutMs: number): Promise<number>;
  /** connects to the agent port (retrying while QEMU creates the socket) */
  connectAgent(timeoutMs: number): Promise<AgentLink>;
  /** SIGTERM, then SIGKILL; resolves once the process is gone */
  kill(): Promise<void>;
}

export interface AgentLink {
  socket: Socket;
  /** waits for the next JSON line whose `type` matches */
  next(type: string, timeoutMs: number): Promise<Record<string, unknown>>;
  send(line: string): void;
  close(): void;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function startSmokeVm(opts: SmokeVmOptions): Promise<SmokeVm> {
  await fs.mkdir(opts.workDir, { recursive: true });
  const overlayPath = join(opts.workDir, 'overlay.qcow2');
  const consolePath = join(opts.workDir, 'console.log');
  const agentSocketPath = join(opts.workDir, 'agent.sock');
  const qemuLog = join(opts.workDir, 'qemu.log');
  for (const p of [overlayPath, consolePath, agentSocketPath]) await fs.rm(p, { force: true });
  const img = spawnSync('qemu-img', ['create', '-q', '-f', 'qcow2', '-F', 'qcow2', '-b', opts.disk, overlayPath, opts.diskSize], { encoding: 'utf8' });
  if (img.status !== 0) throw new Error(`qemu-img create failed: ${img.stderr}`);

  const argv = [
    '-name', 'kiste-image-smoke',
    '-nodefaults',
    '-no-user-config',
    '-display', 'none',
    '-accel', opts.accel ?? 'tcg,thread=multi',
    '-machine', 'q35',
    '-cpu', opts.cpu ?? 'max',
    '-m', String(opts.memoryMiB ?? 1024),
    '-smp', String(opts.cpus ?? 2),
    '-kernel', opts.kernel,
    '-initrd', opts.initrd,
    '-append', opts.cmdline,
    '-blockdev', `driver=qcow2,node-name=disk0,file.driver=file,file.filename=${overlayPath}`,
    '-device', 'virtio-blk-pci,drive=disk0',
    '-netdev', 'user,id=n0',
    '-device', 'virtio-net-pci,netdev=n0',
    '-device', 'virtio-rng-pci',
    '-device', 'virtio-serial-pci',
    '-chardev', `socket,id=agent,path=${agentSocketPath},server=on,wait=off`,
    '-device', `virtserialport,chardev=agent,name=${opts.agentPort ?? 'org.kiste.agent'}`,
    '-serial', `file:${consolePath}`,
    '-no-reboot',
    ...(opts.extraArgs ?? []),
  ];
  const log = await fs.open(qemuLog, 'w');
  const child = spawn('timeout', ['--kill-after=5', String(opts.maxLifetimeSeconds ?? 900), 'qemu-system-x86_64', ...argv], {
    stdio: ['ignore', log.fd, log.fd],
  });
  await log.close();
  const startedAt = Date.now();
  let exited: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  const exitedPromise = new Promise<void>((r) => child.once('exit', (code, signal) => ((exited = { code, signal }), r())));

  const readConsole = () => (existsSync(consolePath) ? readFileSync(consolePath, 'utf8') : '');
  const qemuError = () => `QEMU exited (${exited?.code ?? exited?.signal}): ${readFileSync(qemuLog, 'utf8').slice(-2000)}`;

  return {
    process: child,
    startedAt,
    consolePath,
    overlayPath,
    agentSocketPath,
    argv,
    console: readConsole,
    async waitForConsole(pattern, timeoutMs) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        if (pattern.test(readConsole())) return Date.now() - startedAt;
        if (exited) throw new Error(`${qemuError()}\nwhile waiting for ${pattern}`);
        if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${pattern} on the serial console`);
        await sleep(100);
      }
    },
    async connectAgent(timeoutMs) {
      const deadline = Date.now() + timeoutMs;
      let socket: Socket | undefined;
      while (!socket) {
        if (exited) throw new Error(qemuError());
        try {
          socket = await new Promise<Socket>((res, rej) => {
            const s = connect(agentSocketPath);
            s.once('connect', () => res(s));
            s.once('error', rej);
          });
        } catch (err) {
          if (Date.now() > deadline) throw err;
          await sleep(50);
        }
      }
      const conn = socket;
      conn.setEncoding('utf8');
      const lines: Record<string, unknown>[] = [];
      const waiters: Array<() => void> = [];
      let buffer = '';
      conn.on('data', (chunk: string) => {
        buffer += chunk;
        let nl;
        while ((nl = buffer.indexOf('\n')) >= 0) {
          const line = buffer.slice(0, nl);
          buffer = buffer.slice(nl + 1);
          try {
            lines.push(JSON.parse(line) as Record<string, unknown>);
          } catch {
            lines.push({ type: 'garbage', line });
          }
        }
        waiters.splice(0).forEach((w) => w());
      });
      return {
        socket: conn,
        async next(type, waitMs) {
          const until = Date.now() + waitMs;
          for (;;) {
            const i = lines.findIndex((l) => l.type === type);
            if (i >= 0) return lines.splice(i, 1)[0]!;
            if (exited) throw new Error(qemuError());
            const left = until - Date.now();
            if (left <= 0) throw new Error(`no "${type}" message from the agent within ${waitMs} ms`);
            await new Promise<void>((r) => {
              const t = setTimeout(r, Math.min(left, 500));
              waiters.push(() => (clearTimeout(t), r()));
            });
          }
        },
        send(line) {
          conn.write(`${line}\n`);
        },
        close() {
          conn.destroy();
        },
      };
    },
    async kill() {
      if (exited) return;
      // `timeout` passes SIGTERM on to QEMU; SIGKILL to QEMU itself if it does not go
      child.kill('SIGTERM');
      const timer = setTimeout(() => {
        spawnSync('pkill', ['-KILL', '-P', String(child.pid)]);
        child.kill('SIGKILL');
      }, 5000);
      await exitedPromise;
      clearTimeout(timer);
    },
  };
}
