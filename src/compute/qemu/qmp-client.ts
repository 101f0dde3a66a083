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
import { EventEmitter } from 'node:events';
import { connect, Socket } from 'node:net';

export interface QmpEvent {
  event: string;
  data?: Record<string, unknown>;
  timestamp?: { seconds: number; microseconds: number };
}

export interface QmpGreeting {
  version: { qemu: { major: number; minor: number; micro: number }; package: string };
  capabilities: string[];
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
}

interface Pending {
  command: string;
  resolve: (value: unknown) => void;
  reject: (error: Error) => void;
  timer?: NodeJS.Timeout;
}

type Waiter = { match: (e: QmpEvent) => boolean; resolve: (e: QmpEvent) => void; reject: (error: Error) => void; timer: NodeJS.Timeout };

/**
 * Emits 'event' (QmpEvent) for every asynchronous event and 'close' once when the connection ends.
 */
export class QmpClient extends EventEmitter {
  private buffer = '';
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
  ) {
    super();
    this.closedPromise = new Promise((resolve) => (this.resolveClosed = resolve));
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => this.onData(chunk));
    socket.on('error', (error) => this.shutdown(new QmpClosedError(`QMP connection error: ${error.message}`)));
    socket.on('close', () => this.shutdown(new QmpClosedError()));
  }

  /** Connects, reads the greeting and negotiates capabilities. */
  static async connect(path: string, options: QmpConnectOptions = {}): Promise<QmpClient> {
    const socket = await openSocket(path, options.connectTimeoutMs ?? 2000);
    const client = new QmpClient(socket, path, options.commandTimeoutMs ?? 30_000);
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

  /** Runs a command and resolves with its `return` value. */
  execute<T = unknown>(command: string, args?: Record<string, unknown>, options: { timeoutMs?: number } = {}): Promise<T> {
    if (this.closedError) return Promise.reject(this.closedError);
    const id = `kiste-${this.nextId++}`;
    return new Promise<T>((resolve, reject) => {
      const entry: Pending = { command, resolve: resolve as (v: unknown) => void, reject };
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

  private onData(chunk: string): void {
    this.buffer += chunk;
    let newline: number;
    while ((newline = this.buffer.indexOf('\n')) >= 0) {
      const line = this.buffer.slice(0, newline).trim();
      this.buffer = this.buffer.slice(newline + 1);
      if (line) this.onMessage(line);
    }
  }

  private onMessage(line: string): void {
    let message: Record<string, unknown>;
    try {
      message = JSON.parse(line) as Record<string, unknown>;
    } catch {
      // Not QMP (wrong socket?): nothing after this can be trusted.
      this.socket.destroy();
      this.shutdown(new QmpClosedError(`QMP protocol error: not JSON: ${line.slice(0, 200)}`));
      return;
    }
    if ('QMP' in message) {
      this.emit('greeting', message.QMP as QmpGreeting);
      return;
    }
    if (typeof message.event === 'string') {
      const event = message as unknown as QmpEvent;
      for (const waiter of [...this.waiters]) if (waiter.match(event)) waiter.resolve(event);
      this.emit('event', event);
      return;
    }
    const id = typeof message.id === 'string' ? message.id : undefined;
    const entry = id ? this.pending.get(id) : undefined;
    if (!id || !entry) return; // answer to a command that already timed out
    this.pending.delete(id);
    clearTimeout(entry.timer);
    if ('error' in message) {
      const error = message.error as { class?: string; desc?: string };
      entry.reject(new QmpCommandError(entry.command, error.class ?? 'GenericError', error.desc ?? ''));
    } else {
      entry.resolve(message.return);
    }
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
