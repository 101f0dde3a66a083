// Our own QMP (QEMU Machine Protocol) client over a unix socket.
//
// The protocol, as QEMU 7.2 speaks it:
// - The server sends a greeting `{"QMP": {"version": …, "capabilities": […]}}` as soon as it
//   accepts the connection; the client must answer with `qmp_capabilities` before any other command.
// - Every message is one JSON object followed by CRLF. Commands are `{"execute", "arguments", "id"}`;
//   answers are `{"return": …, "id"}` or `{"error": {"class", "desc"}, "id"}`, in command order.
//   Asynchronous events (`{"event", "data", "timestamp"}`: STOP, RESUME, SHUTDOWN, POWERDOWN,
//   MIGRATION, BLOCK_JOB_*, JOB_STATUS_CHANGE …) can arrive between any two answers.
// - A QMP socket serves ONE client at a time. A second client's connect() succeeds (the kernel
//   queues it in the listen backlog) but QEMU sends it no greeting until the first client has gone.
//   So "connected but no greeting" means "someone else holds the monitor": we fail with QmpBusyError
//   after a short greeting timeout instead of hanging. When our service dies, the kernel closes its
//   socket and the monitor is free again: reconnecting to an already running QEMU is simply a new
//   `QmpClient.connect` on the same path (that is how machines are re-adopted after a restart).
//
// Answers are matched by id (not by order) so that a command that timed out on our side cannot be
// mistaken for the answer to the next one; a late answer to a forgotten id is dropped.
//
// QEMU is a hostile peer (it runs next to the guest and may be taken over): every line is parsed
// into a declared shape (./qmp-shapes.ts), and so is every `return` value a caller reads (execute's
// `result` option). A line that does not fit is dropped with a warning (the command it names fails
// at once); a QEMU that keeps sending such lines loses its monitor link (PeerStrikes), and so does
// one whose line passes MAX_LINE_BYTES. Nothing QEMU sends can throw out of the socket's listeners.
import { EventEmitter } from 'node:events';
import { connect, Socket } from 'node:net';
import { parsePeerJson, PeerStrikes, type PeerShape } from '../../protocol/peer-input';
import {
  QmpAnswerIdShape, QmpErrorLineShape, QmpEventLineShape, QmpGreetingLineShape, QmpObjectShape, QmpReturnLineShape, type QmpEvent, type QmpGreeting,
} from './qmp-shapes';

export type { QmpEvent, QmpGreeting } from './qmp-shapes';

/**
 * Longest line accepted. The largest answer kiste asks for is query-named-block-nodes, which grows
 * by about 1.9 KB per disk layer (measured on QEMU 7.2: 57 KB for a 30-layer chain with a dirty
 * bitmap; query-block 23 KB, query-migrate and query-status under 1 KB). Chains are compacted to a
 * few layers, so 1 MiB is more than ten times any real answer, and bounds what a QEMU makes us hold.
 */
export const MAX_LINE_BYTES = 1024 * 1024;
/** Commands written that the monitor has not read yet, at most (a monitor that stopped reading loses its link). */
const MAX_UNREAD_BYTES = 1024 * 1024;

export interface QmpLogger {
  warn(object: object, message: string): void;
}

/** QEMU answered the command with an error (`class` is e.g. GenericError, CommandNotFound). */
export class QmpCommandError extends Error {
  constructor(
    readonly command: string,
    readonly errorClass: string,
    readonly desc: string,
  ) {
    super(`QMP ${command}: ${errorClass}: ${desc}`);
    this.name = 'QmpCommandError';
  }
}

/** The connection closed (QEMU exited, or close() was called) before the answer came. */
export class QmpClosedError extends Error {
  constructor(message = 'QMP connection closed') {
    super(message);
    this.name = 'QmpClosedError';
  }
}

/** QEMU broke the protocol (a line too long, garbage again and again, an answer of the wrong shape). */
export class QmpProtocolError extends QmpClosedError {
  constructor(message: string) {
    super(`QMP protocol error: ${message}`);
    this.name = 'QmpProtocolError';
  }
}

export class QmpTimeoutError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'QmpTimeoutError';
  }
}

/** Connected, but no greeting: another client holds the monitor (one client at a time). */
export class QmpBusyError extends Error {
  constructor(path: string) {
    super(`QMP socket ${path} accepted the connection but sent no greeting: another client is connected`);
    this.name = 'QmpBusyError';
  }
}

export interface QmpConnectOptions {
  /** How long to wait for connect() itself (ENOENT/ECONNREFUSED fail at once, no retry here). */
  connectTimeoutMs?: number;
  /** How long to wait for the greeting before concluding the monitor is busy. */
  greetingTimeoutMs?: number;
  /** Default timeout of execute(). */
  commandTimeoutMs?: number;
  /** Where lines that do not fit their shape are reported. */
  logger?: QmpLogger;
}

export interface ExecuteOptions<T = unknown> {
  timeoutMs?: number;
  /** The shape the answer's `return` must have; an answer that does not fit fails the command. */
  result?: PeerShape<T>;
}

interface Pending {
  command: string;
  result?: PeerShape<unknown>;
  resolve: (value: unknown) => void;
  reject: (error: Error) => void;
  timer?: NodeJS.Timeout;
}

type Waiter = { match: (e: QmpEvent) => boolean; resolve: (e: QmpEvent) => void; reject: (error: Error) => void; timer: NodeJS.Timeout };

/**
 * Emits 'event' (QmpEvent) for every asynchronous event and 'close' once when the connection ends.
 */
export class QmpClient extends EventEmitter {
  private readonly lines = new LineSplitter(MAX_LINE_BYTES);
  private readonly strikes: PeerStrikes;
  private nextId = 1;
  private readonly pending = new Map<string, Pending>();
  private readonly waiters = new Set<Waiter>();
  private closedError: Error | undefined;
  private readonly closedPromise: Promise<void>;
  private resolveClosed!: () => void;
  greeting: QmpGreeting | undefined;

  private constructor(
    private readonly socket: Socket,
    readonly path: string,
    private readonly commandTimeoutMs: number,
    private readonly logger: QmpLogger,
  ) {
    super();
    this.closedPromise = new Promise((resolve) => (this.resolveClosed = resolve));
    this.strikes = new PeerStrikes((reason) => this.fail(`QEMU kept sending lines that do not fit (${reason}); monitor link closed`));
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('error', (error) => this.shutdown(new QmpClosedError(`QMP connection error: ${error.message}`)));
    socket.on('close', () => this.shutdown(new QmpClosedError()));
  }

  /** Connects, reads the greeting and negotiates capabilities. */
  static async connect(path: string, options: QmpConnectOptions = {}): Promise<QmpClient> {
    const socket = await openSocket(path, options.connectTimeoutMs ?? 2000);
    const client = new QmpClient(socket, path, options.commandTimeoutMs ?? 30_000, options.logger ?? { warn: () => undefined });
    try {
      client.greeting = await client.readGreeting(options.greetingTimeoutMs ?? 3000);
      await client.execute('qmp_capabilities');
      return client;
    } catch (error) {
      client.destroy();
      throw error;
    }
  }

  /** True once the connection has ended (QEMU gone or closed by us). */
  get closed(): boolean {
    return this.closedError !== undefined;
  }

  /** Resolves when the connection has ended, whoever ended it. */
  whenClosed(): Promise<void> {
    return this.closedPromise;
  }

  /**
   * Runs a command and resolves with its `return` value: checked against `result` when given, and
   * of unknown shape without it (a caller that reads fields of the answer passes a shape).
   */
  execute(command: string, args?: Record<string, unknown>, options?: { timeoutMs?: number }): Promise<unknown>;
  execute<T>(command: string, args: Record<string, unknown> | undefined, options: ExecuteOptions<T> & { result: PeerShape<T> }): Promise<T>;
  execute(command: string, args?: Record<string, unknown>, options: ExecuteOptions = {}): Promise<unknown> {
    if (this.closedError) return Promise.reject(this.closedError);
    // Commands are small and few at a time: a monitor holding this much unread is not reading.
    if (this.socket.writableLength > MAX_UNREAD_BYTES) {
      this.fail(`the monitor left ${this.socket.writableLength} bytes of commands unread`);
      return Promise.reject(this.closedError!);
    }
    const id = `kiste-${this.nextId++}`;
    return new Promise<unknown>((resolve, reject) => {
      const entry: Pending = { command, result: options.result, resolve, reject };
      const timeoutMs = options.timeoutMs ?? this.commandTimeoutMs;
      if (timeoutMs > 0) {
        entry.timer = setTimeout(() => {
          this.pending.delete(id);
          reject(new QmpTimeoutError(`QMP ${command}: no answer within ${timeoutMs} ms`));
        }, timeoutMs);
      }
      this.pending.set(id, entry);
      const message: Record<string, unknown> = { execute: command, id };
      if (args) message.arguments = args;
      this.socket.write(`${JSON.stringify(message)}\n`);
    });
  }

  /**
   * Resolves with the next event named `name` that satisfies `match`. Create the wait BEFORE
   * running the command that causes the event, or a fast event is missed.
   */
  waitForEvent(name: string, options: { timeoutMs?: number; match?: (e: QmpEvent) => boolean } = {}): Promise<QmpEvent> {
    if (this.closedError) return Promise.reject(this.closedError);
    const timeoutMs = options.timeoutMs ?? this.commandTimeoutMs;
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        match: (e) => e.event === name && (options.match ? options.match(e) : true),
        resolve: (e) => {
          clearTimeout(waiter.timer);
          this.waiters.delete(waiter);
          resolve(e);
        },
        reject: (error) => {
          clearTimeout(waiter.timer);
          this.waiters.delete(waiter);
          reject(error);
        },
        timer: setTimeout(() => waiter.reject(new QmpTimeoutError(`QMP event ${name} did not arrive within ${timeoutMs} ms`)), timeoutMs),
      };
      this.waiters.add(waiter);
    });
  }

  /** Closes our side cleanly (QEMU keeps running) and waits until the socket is closed. */
  async close(): Promise<void> {
    if (!this.closedError) this.socket.end();
    const timer = setTimeout(() => this.socket.destroy(), 1000);
    await this.closedPromise;
    clearTimeout(timer);
  }

  /** Drops the connection at once, as a crashing process would. */
  destroy(): void {
    this.socket.destroy();
    this.shutdown(new QmpClosedError());
  }

  private readGreeting(timeoutMs: number): Promise<QmpGreeting> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.off('greeting', onGreeting);
        reject(new QmpBusyError(this.path));
      }, timeoutMs);
      const onGreeting = (g: QmpGreeting): void => {
        clearTimeout(timer);
        resolve(g);
      };
      this.once('greeting', onGreeting);
      this.closedPromise.then(() => {
        clearTimeout(timer);
        reject(this.closedError);
      });
    });
  }

  private onData(chunk: Buffer): void {
    try {
      const lines = this.lines.push(chunk);
      if (lines === 'overflow') return this.fail(`a line longer than ${MAX_LINE_BYTES} bytes; monitor link closed`);
      for (const line of lines) {
        if (this.closedError) return;
        this.onLine(line);
      }
    } catch (error) {
      // Only a bug (ours, or an 'event' listener's) gets here: it costs the link, not the process.
      this.fail(`reading the monitor failed: ${(error as Error).message}`);
    }
  }

  private onLine(line: Buffer): void {
    const json = parsePeerJson(QmpObjectShape, line);
    if (!json.ok) return this.misfit(undefined, json.reason);
    const message = json.value;
    if ('QMP' in message) {
      const greeting = QmpGreetingLineShape.parse(message);
      if (!greeting.ok) return this.misfit(message, greeting.reason);
      if (this.greeting) return this.misfit(message, 'a second greeting');
      this.greeting = greeting.value.QMP;
      this.emit('greeting', greeting.value.QMP);
    } else if (!this.greeting) {
      this.misfit(message, 'not a greeting');
    } else if ('event' in message) {
      const event = QmpEventLineShape.parse(message);
      if (!event.ok) return this.misfit(message, event.reason);
      for (const waiter of [...this.waiters]) if (waiter.match(event.value)) waiter.resolve(event.value);
      this.emit('event', event.value);
    } else if ('error' in message) {
      const error = QmpErrorLineShape.parse(message);
      if (!error.ok) return this.misfit(message, error.reason);
      const { class: errorClass, desc } = error.value.error;
      this.answer(error.value.id, (command) => ({ error: new QmpCommandError(command, errorClass, desc.slice(0, 2000)) }));
    } else {
      const answer = QmpReturnLineShape.parse(message);
      if (!answer.ok) return this.misfit(message, answer.reason);
      this.answer(answer.value.id, (_command, result) => {
        const parsed = result ? result.parse(answer.value.return) : { ok: true as const, value: answer.value.return };
        return parsed.ok ? { value: parsed.value } : { misfit: parsed.reason };
      });
    }
  }

  /** Settles the command `id` names with what `outcome` makes of the answer. */
  private answer(id: string | undefined, outcome: (command: string, result?: PeerShape<unknown>) => { value: unknown } | { error: Error } | { misfit: string }): void {
    if (id === undefined) return this.misfit(undefined, 'an answer without id');
    const entry = this.pending.get(id);
    if (!entry) return; // answer to a command that already timed out
    const settled = outcome(entry.command, entry.result);
    if ('misfit' in settled) return this.misfit({ id }, settled.misfit);
    this.settle(id);
    if ('error' in settled) entry.reject(settled.error);
    else entry.resolve(settled.value);
  }

  /**
   * A line that does not fit: before the greeting it ends the link (not a monitor); after it, it is
   * dropped with a warning, and the command it names (if any) fails now.
   */
  private misfit(message: unknown, reason: string): void {
    if (!this.greeting) return this.fail(`the monitor did not start with a greeting (${reason})`);
    const named = message === undefined ? undefined : QmpAnswerIdShape.parse(message);
    const id = named?.ok ? named.value.id : undefined;
    const entry = id === undefined ? undefined : this.pending.get(id);
    if (entry) {
      this.settle(id!);
      entry.reject(new QmpProtocolError(`${entry.command}: the answer does not fit (${reason})`));
    }
    this.logger.warn({ socket: this.path, reason }, 'QMP: dropped a line from QEMU that does not fit');
    this.strikes.strike(reason);
  }

  private settle(id: string): void {
    clearTimeout(this.pending.get(id)?.timer);
    this.pending.delete(id);
  }

  /** A protocol error: the link is given up and everything waiting on it fails with the reason. */
  private fail(reason: string): void {
    this.logger.warn({ socket: this.path, reason }, 'QMP: protocol error, monitor link closed');
    this.socket.destroy();
    this.shutdown(new QmpProtocolError(reason));
  }

  private shutdown(error: Error): void {
    if (this.closedError) return;
    this.closedError = error;
    for (const entry of this.pending.values()) {
      clearTimeout(entry.timer);
      entry.reject(error);
    }
    this.pending.clear();
    for (const waiter of [...this.waiters]) waiter.reject(error);
    this.resolveClosed();
    this.emit('close');
  }
}

function openSocket(path: string, timeoutMs: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(path);
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new QmpTimeoutError(`QMP connect to ${path}: no connection within ${timeoutMs} ms`));
    }, timeoutMs);
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.removeAllListeners('error');
      resolve(socket);
    });
    socket.once('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
  });
}

/**
 * Splits a byte stream into lines (without their CR LF) of at most `maxBytes`; a longer line, even
 * one whose end has not come yet, is an overflow. Holds at most `maxBytes` of a partial line.
 */
class LineSplitter {
  private parts: Buffer[] = [];
  private size = 0;

  constructor(private readonly maxBytes: number) {}

  push(chunk: Buffer): Buffer[] | 'overflow' {
    const lines: Buffer[] = [];
    let start = 0;
    for (let newline = chunk.indexOf(10); newline >= 0; newline = chunk.indexOf(10, start)) {
      const line = this.take(chunk.subarray(start, newline));
      if (line === undefined) return 'overflow';
      if (line.length) lines.push(line);
      start = newline + 1;
    }
    const rest = chunk.subarray(start);
    if (this.size + rest.length > this.maxBytes) return 'overflow';
    if (rest.length) {
      this.parts.push(Buffer.from(rest)); // a copy: a slice would keep the socket's whole chunk alive
      this.size += rest.length;
    }
    return lines;
  }

  private take(end: Buffer): Buffer | undefined {
    if (this.size + end.length > this.maxBytes) return undefined;
    const line = this.parts.length ? Buffer.concat([...this.parts, end]) : end;
    this.parts = [];
    this.size = 0;
    const last = line.length - 1;
    return last >= 0 && line[last] === 13 ? line.subarray(0, last) : line;
  }
}
