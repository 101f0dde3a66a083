// exec: run argv in its own process group and stream its output as DATA frames, within the credit
// the host grants. When the credit is spent the agent stops reading the child's pipes, so the
// child blocks on a full pipe instead of the agent buffering: at most one read per pipe is held.
import { ChildProcess, spawn } from 'node:child_process';
import { accessSync, constants as fsConstants, statSync } from 'node:fs';
import * as os from 'node:os';
import type { Readable, Writable } from 'node:stream';
import {
  clampWindow,
  CreditReceiver,
  DEFAULT_WINDOW,
  encodeOutputHead,
  ExecExitEvent,
  ExecStatus,
  MAX_DATA_CHUNK,
  OUTPUT_HEADER_BYTES,
  OutputStreamName,
  syncSafeLength,
} from '../../src/protocol/agent';
import { AgentError, errnoCode } from './errors';
import { FifoPool } from './pipes';
import { Channel, ChannelSink, Reply, RequestContext } from './session';
import { bool, int, object, str, stringMap, strings } from './validate';

/** After the main process exits, pipes still open (a background child holds them) are let go after this long without output. */
const DRAIN_IDLE_MS = 500;
/** ...or after this much more output: what the exited process left in its pipes is at most two pipe buffers. */
const DRAIN_MAX_BYTES = 1024 * 1024;
const CANCEL_GRACE_MS = 2000;

interface ExecOptions {
  window: number;
  limit: number | undefined;
  timeoutMs: number | undefined;
  stdin: boolean;
}

type Ctx = RequestContext & { sink: ChannelSink };

interface CommandStreams {
  stdin: Writable | null;
  stdout: Readable;
  stderr: Readable;
}

let fifos: FifoPool | null = null;

/** Called when the agent stops: remove the FIFOs made ahead of time. */
export function disposeExec(): void {
  fifos?.dispose();
}

export async function execStart(raw: unknown, ctx: Ctx): Promise<Reply> {
  const p = object(raw);
  const argv = strings(p, 'argv', { min: 1, max: 4096 });
  if (argv[0] === '') throw new AgentError('bad_request', 'argv[0] must not be empty');
  const cwd = str(p, 'cwd', { optional: true, max: 4096 });
  const env = stringMap(p, 'env');
  const timeoutMs = int(p, 'timeout_ms', { optional: true, min: 0, max: 30 * 86_400_000 });
  const limit = int(p, 'output_limit_bytes', { optional: true, min: 0 });
  const stdin = bool(p, 'stdin', false);
  const window = clampWindow(int(p, 'window_bytes', { optional: true, min: 0 }));

  const dir = cwd ?? defaultCwd(ctx.config.commandEnv.HOME);
  if (cwd) checkDirectory(cwd);
  if (!ctx.current()) throw new AgentError('internal', 'session ended');

  fifos ??= new FifoPool(ctx.config.commandEnv);
  const pipes = await fifos.open(stdin);
  if (!ctx.current()) {
    pipes?.destroy();
    throw new AgentError('internal', 'session ended');
  }
  const child = spawn(argv[0], argv.slice(1), {
    cwd: dir,
    env: { ...ctx.config.commandEnv, ...env },
    // Own session and process group: signals and kills reach everything the command started.
    detached: true,
    stdio: pipes ? pipes.stdio : [stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
  });
  const spawnError = new Promise<Error>((resolve) => child.once('error', resolve));
  // The child has its ends now; ours must go or the pipes never reach end of file.
  pipes?.closeChildEnds();
  if (child.pid === undefined) {
    pipes?.destroy();
    const error = await spawnError;
    const code = errnoCode(error);
    const why = code === 'ENOENT' ? 'no such file or directory' : code === 'EACCES' ? 'permission denied' : error.message;
    throw new AgentError('spawn_failed', `cannot run ${argv[0]}: ${why}${code ? ` (${code})` : ''}`);
  }
  const streams: CommandStreams = pipes
    ? { stdin: child.stdin, stdout: pipes.stdout, stderr: pipes.stderr }
    : { stdin: child.stdin, stdout: child.stdout as Readable, stderr: child.stderr as Readable };
  let channel: ExecChannel;
  try {
    channel = ctx.openChannel((id) => new ExecChannel(id, child, streams, { window, limit, timeoutMs: timeoutMs || undefined, stdin }, ctx.sink));
  } catch (error) {
    killGroup(child.pid, 'SIGKILL');
    pipes?.destroy();
    throw error;
  }
  return new Reply({ channel: channel.id, pid: child.pid, window_bytes: stdin ? DEFAULT_WINDOW : 0 }, () => channel.start());
}

export async function execSignal(raw: unknown, ctx: Ctx): Promise<{ delivered: boolean }> {
  const p = object(raw);
  const channel = execChannel(ctx, int(p, 'channel', { min: 0 }) as number);
  const signal = p.signal;
  const number = typeof signal === 'number' ? signal : typeof signal === 'string' ? os.constants.signals[signal as NodeJS.Signals] : undefined;
  if (number === undefined || !Object.values(os.constants.signals).includes(number)) {
    throw new AgentError('bad_request', `unknown signal ${JSON.stringify(signal)}`);
  }
  return { delivered: channel.signal(number) };
}

export async function execCancel(raw: unknown, ctx: Ctx): Promise<{ accepted: boolean }> {
  const p = object(raw);
  const channel = execChannel(ctx, int(p, 'channel', { min: 0 }) as number);
  const grace = int(p, 'grace_ms', { optional: true, min: 0, max: 600_000 }) ?? CANCEL_GRACE_MS;
  return { accepted: channel.cancel(grace) };
}

function execChannel(ctx: Ctx, id: number): ExecChannel {
  const channel = ctx.channel(id);
  if (!(channel instanceof ExecChannel)) throw new AgentError('no_such_channel', `no running command on channel ${id}`);
  return channel;
}

// Synchronous stats: a local directory answers at once, while a thread-pool round trip costs
// milliseconds in an emulated guest (each one wakes an idle thread), on every exec.
function defaultCwd(home: string | undefined): string {
  if (home) {
    try {
      if (statSync(home).isDirectory()) return home;
    } catch {
      // fall through
    }
  }
  return '/';
}

function checkDirectory(cwd: string): void {
  try {
    if (!statSync(cwd).isDirectory()) throw new AgentError('bad_request', `cwd ${cwd} is not a directory`);
    accessSync(cwd, fsConstants.X_OK);
  } catch (error) {
    if (error instanceof AgentError) throw error;
    throw new AgentError('bad_request', `cwd ${cwd} is not usable: ${errnoCode(error) ?? String(error)}`);
  }
}

function killGroup(pid: number, signal: NodeJS.Signals | number): boolean {
  try {
    process.kill(-pid, signal);
    return true;
  } catch {
    return false; // the group is gone
  }
}

export class ExecChannel implements Channel {
  readonly id: number;
  private credit: number;
  private readonly queue: { stream: OutputStreamName; data: Buffer }[] = [];
  private sequence = 0;
  private accepted = 0;
  private afterExit = 0;
  private readonly sent = { stdout: 0, stderr: 0 };
  private readonly pipes = new Map<Readable, OutputStreamName>();
  private paused = false;
  private started = false;
  private finished = false;
  private exit: { code: number | null; signal: NodeJS.Signals | null; at: number } | null = null;
  private reason: ExecStatus | null = null;
  private readonly startedAt = performance.now();
  private readonly timers = new Set<NodeJS.Timeout>();
  private drainTimer: NodeJS.Timeout | null = null;
  private readonly stdinCredit = new CreditReceiver(DEFAULT_WINDOW);
  private readonly pid: number;

  constructor(
    id: number,
    child: ChildProcess,
    private readonly streams: CommandStreams,
    private readonly opts: ExecOptions,
    private readonly sink: ChannelSink,
  ) {
    this.id = id;
    this.pid = child.pid as number;
    this.credit = opts.window;
    streams.stdin?.on('error', () => streams.stdin?.destroy()); // EPIPE: the command does not read its input
    child.on('exit', (code, signal) => this.onExit(code, signal));
    if (opts.timeoutMs !== undefined) this.timer(opts.timeoutMs, () => this.terminate('timed_out', 'SIGKILL'));
  }

  /** Called once the RESPONSE carrying the channel id is queued: output may flow from now on. */
  start(): void {
    this.started = true;
    for (const [pipe, stream] of [
      [this.streams.stdout, 'stdout'],
      [this.streams.stderr, 'stderr'],
    ] as const) {
      this.pipes.set(pipe, stream);
      pipe.on('data', (chunk: Buffer) => this.accept(stream, chunk));
      pipe.on('end', () => this.pipeDone(pipe));
      pipe.on('close', () => this.pipeDone(pipe));
      pipe.on('error', () => this.pipeDone(pipe));
    }
    this.flush();
  }

  signal(signal: number): boolean {
    return this.alive() && killGroup(this.pid, signal);
  }

  cancel(graceMs: number): boolean {
    if (this.finished || !this.alive()) return false;
    this.terminate('cancelled', 'SIGTERM');
    this.timer(graceMs, () => {
      if (this.alive()) killGroup(this.pid, 'SIGKILL');
    });
    return true;
  }

  onData(payload: Buffer): void {
    const stdin = this.streams.stdin;
    if (!this.opts.stdin || !stdin || stdin.destroyed) return;
    if (payload.length === 0) {
      stdin.end();
      return;
    }
    // Credit goes back only once the child took the bytes: a command that does not read its input stalls the host, not the agent.
    stdin.write(payload, () => this.sink.window(this.id, this.stdinCredit.consumed(payload.length)));
  }

  onWindow(increment: number): void {
    this.credit += increment;
    this.flush();
  }

  onClose(): void {
    // The host gave up on the command (its client went away): stop it like a cancel, silently.
    this.finished = true;
    if (this.alive()) {
      killGroup(this.pid, 'SIGTERM');
      const t = setTimeout(() => this.alive() && killGroup(this.pid, 'SIGKILL'), CANCEL_GRACE_MS);
      t.unref();
    }
    this.release();
  }

  reset(): void {
    this.finished = true;
    if (this.alive()) killGroup(this.pid, 'SIGKILL');
    this.release();
  }

  /** Is there a process group worth signalling? While the main process lives, its pid is its group id. */
  private alive(): boolean {
    return this.exit === null || this.pipes.size > 0;
  }

  private timer(ms: number, fn: () => void): void {
    const t = setTimeout(() => {
      this.timers.delete(t);
      fn();
    }, ms);
    this.timers.add(t);
  }

  private terminate(reason: ExecStatus, signal: NodeJS.Signals): void {
    if (this.finished) return;
    this.reason ??= reason;
    killGroup(this.pid, signal);
  }

  private accept(stream: OutputStreamName, chunk: Buffer): void {
    if (this.finished || this.reason === 'output_limit_exceeded') return;
    let data = chunk;
    if (this.opts.limit !== undefined && this.accepted + data.length > this.opts.limit) {
      data = data.subarray(0, this.opts.limit - this.accepted);
      this.terminate('output_limit_exceeded', 'SIGKILL');
      this.detachPipes();
    }
    if (data.length > 0) {
      this.accepted += data.length;
      this.queue.push({ stream, data });
    }
    if (this.exit) {
      this.afterExit += chunk.length;
      if (this.afterExit > DRAIN_MAX_BYTES) this.detachPipes();
    }
    this.flush();
  }

  private flush(): void {
    if (!this.started || this.finished) return;
    while (this.queue.length > 0 && this.credit > OUTPUT_HEADER_BYTES) {
      const item = this.queue[0];
      let piece = item.data.subarray(0, Math.min(this.credit - OUTPUT_HEADER_BYTES, MAX_DATA_CHUNK));
      let head = encodeOutputHead(this.id, item.stream, this.sequence, piece.length);
      const safe = syncSafeLength(head, piece);
      if (safe < piece.length) {
        piece = piece.subarray(0, safe);
        head = encodeOutputHead(this.id, item.stream, this.sequence, piece.length);
      }
      this.sink.send([head, piece]);
      this.sequence += 1;
      this.credit -= OUTPUT_HEADER_BYTES + piece.length;
      this.sent[item.stream] += piece.length;
      if (piece.length === item.data.length) this.queue.shift();
      else item.data = item.data.subarray(piece.length);
    }
    const blocked = this.queue.length > 0;
    if (blocked !== this.paused) {
      this.paused = blocked;
      for (const pipe of this.pipes.keys()) {
        if (blocked) pipe.pause();
        else pipe.resume();
      }
    }
    this.armDrainTimer();
    this.maybeFinish();
  }

  private onExit(code: number | null, signal: NodeJS.Signals | null): void {
    this.exit = { code, signal, at: performance.now() };
    // Timeout and cancel end with the main process; what it left running in the background stays.
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    this.armDrainTimer();
    this.maybeFinish();
  }

  private pipeDone(pipe: Readable): void {
    if (!this.pipes.delete(pipe)) return;
    this.maybeFinish();
  }

  private detachPipes(): void {
    for (const pipe of this.pipes.keys()) pipe.destroy();
    this.pipes.clear();
  }

  /** After exit, pipes held open by a background child are let go once they stay quiet (while not waiting for credit). */
  private armDrainTimer(): void {
    if (this.drainTimer) clearTimeout(this.drainTimer);
    this.drainTimer = null;
    if (!this.exit || this.pipes.size === 0 || this.paused || this.finished) return;
    this.drainTimer = setTimeout(() => {
      this.drainTimer = null;
      this.detachPipes();
      this.maybeFinish();
    }, DRAIN_IDLE_MS);
  }

  private maybeFinish(): void {
    if (this.finished || !this.exit || this.pipes.size > 0 || this.queue.length > 0) return;
    this.finished = true;
    const signal = this.exit.signal ? (os.constants.signals[this.exit.signal] ?? null) : null;
    const event: ExecExitEvent = {
      channel: this.id,
      status: this.reason ?? (signal !== null ? 'signaled' : 'exited'),
      exit_code: signal !== null ? 128 + signal : (this.exit.code ?? 0),
      signal,
      duration_ms: Math.round(this.exit.at - this.startedAt),
      stdout_bytes: this.sent.stdout,
      stderr_bytes: this.sent.stderr,
    };
    this.release();
    this.sink.event(this.id, 'exec.exit', event);
    this.sink.close(this.id);
  }

  private release(): void {
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    if (this.drainTimer) clearTimeout(this.drainTimer);
    this.drainTimer = null;
    this.detachPipes();
    this.queue.length = 0;
    this.streams.stdin?.destroy();
  }
}
