// Real pipes for a command's stdout and stderr. Node gives children socketpairs, and on a socket a
// program that opens /dev/stdout or /dev/stderr (`echo x > /dev/stderr`, `tee /dev/stderr`) gets
// ENXIO. FIFOs are pipes: the agent makes them with mkfifo, ahead of time and in batches (one
// process per batch, off the exec path), opens both ends itself and unlinks the name at once.
// Without mkfifo it falls back to socketpairs. stdin stays a socketpair: a FIFO would make
// `cat /dev/stdin` block forever once the host has closed the input (opening a named FIFO waits
// for a writer), while a socketpair fails at once with ENXIO.
import { execFile } from 'node:child_process';
import { closeSync, constants, mkdtempSync, openSync, readdirSync, rmSync, unlinkSync } from 'node:fs';
import * as net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// Each refill forks the agent (slow under TCG, where a fork of a large process costs tens of ms): few, large batches.
const BATCH = 128;
const PREFIX = 'kiste-agent-fifo-';

export interface CommandPipes {
  /** What to hand to spawn's stdio. */
  stdio: ['ignore' | 'pipe', number, number];
  stdout: net.Socket;
  stderr: net.Socket;
  /** Close the child's ends in the agent, once spawn has passed them on. */
  closeChildEnds(): void;
  /** Close everything (spawn failed). */
  destroy(): void;
}

export class FifoPool {
  private dir: string | null = null;
  private ready: string[] = [];
  private filling: Promise<void> | null = null;
  private counter = 0;
  private disabled = false;

  constructor(private readonly env: Record<string, string>) {}

  /** Pipes for one command, or null when FIFOs are unavailable (use Node's socketpairs). */
  async open(withStdin: boolean): Promise<CommandPipes | null> {
    const names = await this.take(2);
    if (!names) return null;
    const fds: number[] = [];
    try {
      const [outName, errName] = names;
      // Our read end first, non-blocking (it may not wait for a writer); then the child's write end,
      // blocking as programs expect, which opens at once because a reader exists.
      const outRead = openSync(outName, constants.O_RDONLY | constants.O_NONBLOCK);
      fds.push(outRead);
      const outWrite = openSync(outName, constants.O_WRONLY);
      fds.push(outWrite);
      const errRead = openSync(errName, constants.O_RDONLY | constants.O_NONBLOCK);
      fds.push(errRead);
      const errWrite = openSync(errName, constants.O_WRONLY);
      fds.push(errWrite);
      for (const name of names) unlinkSync(name);
      const stdout = new net.Socket({ fd: outRead, readable: true, writable: false });
      const stderr = new net.Socket({ fd: errRead, readable: true, writable: false });
      const childEnds = [outWrite, errWrite];
      return {
        stdio: [withStdin ? 'pipe' : 'ignore', outWrite, errWrite],
        stdout,
        stderr,
        closeChildEnds: () => childEnds.splice(0).forEach(closeQuietly),
        destroy: () => {
          childEnds.splice(0).forEach(closeQuietly);
          stdout.destroy();
          stderr.destroy();
        },
      };
    } catch {
      fds.forEach(closeQuietly);
      for (const name of names) {
        try {
          unlinkSync(name);
        } catch {
          // already gone
        }
      }
      return null;
    }
  }

  private async take(count: number): Promise<string[] | null> {
    if (this.disabled) return null;
    if (this.ready.length < count) await this.refill();
    if (this.ready.length < count) return null;
    const names = this.ready.splice(0, count);
    if (this.ready.length < BATCH / 2) void this.refill();
    return names;
  }

  /** Remove the FIFO directory (the agent is stopping). */
  dispose(): void {
    if (this.dir) rmSync(this.dir, { recursive: true, force: true });
    this.dir = null;
    this.disabled = true;
  }

  private refill(): Promise<void> {
    this.filling ??= new Promise<void>((resolve) => {
      try {
        if (!this.dir) {
          sweepStale();
          this.dir = mkdtempSync(join(tmpdir(), `${PREFIX}${process.pid}-`));
        }
      } catch {
        this.disabled = true;
        return resolve();
      }
      const names = Array.from({ length: BATCH }, () => join(this.dir as string, `p${(this.counter += 1)}`));
      execFile('mkfifo', ['-m', '600', ...names], { env: this.env }, (error) => {
        if (error) this.disabled = true;
        else this.ready.push(...names);
        resolve();
      });
    }).finally(() => {
      this.filling = null;
    });
    return this.filling;
  }
}

/** FIFO directories of agents that are gone (killed, crashed): the pid in the name tells. */
function sweepStale(): void {
  for (const name of readdirSync(tmpdir())) {
    const pid = Number(new RegExp(`^${PREFIX}(\\d+)-`).exec(name)?.[1]);
    if (!pid || pid === process.pid) continue;
    try {
      process.kill(pid, 0);
    } catch (error) {
      if ((error as { code?: string }).code === 'ESRCH') rmSync(join(tmpdir(), name), { recursive: true, force: true });
    }
  }
}

function closeQuietly(fd: number): void {
  try {
    closeSync(fd);
  } catch {
    // already closed
  }
}
