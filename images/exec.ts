// Running the build's external tools (mmdebstrap, tar, mkfs.ext4, qemu-img) without blocking the
// service's event loop, with their output turned into progress lines and their stderr kept for
// error messages.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';

// util-linux setpriv: the tool gets SIGTERM if this process dies (even by SIGKILL), so that a killed
// service or CLI does not leave mmdebstrap running on a half-built root filesystem
const SETPRIV = ['/usr/bin/setpriv', '/bin/setpriv'].find((p) => existsSync(p));

export interface RunOptions {
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  signal?: AbortSignal;
  /** each complete output line (stdout and stderr), trimmed */
  onLine?: (line: string) => void;
  /** collect stdout and return it */
  captureStdout?: boolean;
}

export class CommandError extends Error {
  constructor(
    message: string,
    readonly command: string,
    readonly exitCode: number | null,
    readonly outputTail: string,
  ) {
    super(message);
    this.name = 'CommandError';
  }
}

const TAIL_LINES = 40;

/** Runs a command to completion; rejects with the tail of its output when it fails. */
export function run(command: string, args: string[], opts: RunOptions = {}): Promise<string> {
  return new Promise((resolvePromise, reject) => {
    if (opts.signal?.aborted) return reject(abortError());
    const [file, argv] = SETPRIV ? [SETPRIV, ['--pdeathsig', 'TERM', '--', command, ...args]] : [command, args];
    const child = spawn(file, argv, {
      cwd: opts.cwd,
      env: opts.env ?? process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const tail: string[] = [];
    let stdout = '';
    const splitters = new Map<NodeJS.ReadableStream, string>();
    const feed = (stream: NodeJS.ReadableStream, isStdout: boolean) => {
      splitters.set(stream, '');
      stream.setEncoding('utf8');
      stream.on('data', (chunk: string) => {
        if (isStdout && opts.captureStdout) {
          stdout += chunk;
          return;
        }
        const text = (splitters.get(stream) ?? '') + chunk;
        const lines = text.split(/\r?\n|\r/);
        splitters.set(stream, lines.pop() ?? '');
        for (const raw of lines) emit(raw);
      });
    };
    const emit = (raw: string) => {
      const line = raw.trim();
      if (!line) return;
      tail.push(line);
      if (tail.length > TAIL_LINES) tail.shift();
      opts.onLine?.(line);
    };
    feed(child.stdout, true);
    feed(child.stderr, false);

    const onAbort = () => child.kill('SIGTERM');
    opts.signal?.addEventListener('abort', onAbort, { once: true });

    child.on('error', (err) => {
      opts.signal?.removeEventListener('abort', onAbort);
      reject(new CommandError(`${command}: ${err.message}`, command, null, ''));
    });
    child.on('close', (code, sig) => {
      opts.signal?.removeEventListener('abort', onAbort);
      for (const rest of splitters.values()) emit(rest);
      if (opts.signal?.aborted) return reject(abortError());
      if (code === 0) return resolvePromise(stdout);
      const outputTail = tail.join('\n');
      reject(
        new CommandError(
          `${command} ${sig ? `was killed by ${sig}` : `exited with ${code}`}${outputTail ? `:\n${outputTail}` : ''}`,
          command,
          code,
          outputTail,
        ),
      );
    });
  });
}

export function abortError(): Error {
  const err = new Error('image build aborted');
  err.name = 'AbortError';
  return err;
}
