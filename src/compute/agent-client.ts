// Host side of the kiste agent protocol (agent/PROTOCOL.md): one AgentClient per machine, over the
// byte stream of the machine's virtio-serial port (a unix socket QEMU serves). It resynchronises
// after every (re)connect and after an agent restart, correlates requests with responses, and
// turns stream channels into an async iterable (exec) or a Duplex (tcp) whose consumer's pace
// drives the WINDOW credit: a slow consumer slows the guest, never grows a buffer.
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import * as net from 'node:net';
import { Duplex, Writable } from 'node:stream';
import {
  AgentErrorCode,
  AgentMethod,
  AgentMethods,
  clampWindow,
  CONTROL_CHANNEL,
  CreditReceiver,
  decodeJson,
  decodeOutput,
  decodeSync,
  decodeWindow,
  DecoderStats,
  encodeClose,
  encodeJson,
  encodeRawData,
  encodeSync,
  encodeWindow,
  EventMessage,
  ExecExitEvent,
  ExecStartParams,
  Frame,
  FrameDecoder,
  FrameKind,
  HelloResult,
  MAX_DATA_CHUNK,
  MAX_PAYLOAD,
  MetricsResult,
  OUTPUT_HEADER_BYTES,
  OutputChunk,
  PersonaliseParams,
  PersonaliseResult,
  ReadyResult,
  ResponseMessage,
  SUPPORTED_PROTOCOL_VERSIONS,
  SyncPhase,
  TimeSetResult,
} from './agent-protocol';

// ---------------------------------------------------------------------------------------------
// Errors

export type AgentCallErrorCode = AgentErrorCode | 'timeout' | 'disconnected' | 'closed' | 'protocol';

/** A failed call. code is the agent's error code, or what went wrong on the way. */
export class AgentCallError extends Error {
  constructor(
    readonly code: AgentCallErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'AgentCallError';
  }

  /** The call may succeed if repeated (after the agent is back). */
  get retryable(): boolean {
    return this.code === 'timeout' || this.code === 'disconnected';
  }
}

// ---------------------------------------------------------------------------------------------
// Options

export interface AgentLogger {
  debug(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

export interface AgentClientOptions {
  /** Opens a new byte stream to the agent: for a machine, a connection to QEMU's chardev socket. */
  connect: () => Duplex | Promise<Duplex>;
  /** Default per-request timeout. */
  requestTimeoutMs?: number;
  /** SYNC is repeated (with a new nonce) this often until the agent answers. */
  syncRetryMs?: number;
  /** Reconnect after the stream ends (default true). */
  reconnect?: boolean;
  reconnectMinMs?: number;
  reconnectMaxMs?: number;
  /** Output credit per exec / tcp channel. */
  windowBytes?: number;
  hostVersion?: string;
  logger?: AgentLogger;
}

export interface RequestOptions {
  timeoutMs?: number;
}

interface Pending {
  method: string;
  resolve: (value: unknown) => void;
  reject: (error: Error) => void;
  timer: NodeJS.Timeout;
  /** Runs synchronously with the response, before any later frame: channels register here. */
  onResult?: (result: unknown) => void;
}

/** A stream channel as the client sees it. */
interface HostChannel {
  onData(payload: Buffer): void;
  onWindow(increment: number): void;
  onEvent(event: string, data: unknown): void;
  onClose(reason: string): void;
  /** The session is gone (disconnect, agent restart): fail with error. */
  onReset(error: AgentCallError): void;
}

type State = 'idle' | 'connecting' | 'syncing' | 'hello' | 'ready' | 'closed';

const NOOP_LOGGER: AgentLogger = { debug: () => undefined, warn: () => undefined };

// ---------------------------------------------------------------------------------------------
// Client

export interface AgentClientEvents {
  connected: [hello: HelloResult];
  disconnected: [error: AgentCallError];
  ready: [ready: ReadyResult];
  event: [event: string, data: unknown];
}

export class AgentClient extends EventEmitter<AgentClientEvents> {
  private readonly opts: Required<Omit<AgentClientOptions, 'logger' | 'hostVersion'>> & Pick<AgentClientOptions, 'hostVersion'>;
  private readonly log: AgentLogger;
  private state: State = 'idle';
  private stream: Duplex | null = null;
  private decoder: FrameDecoder | null = null;
  private syncNonce = '';
  private syncTimer: NodeJS.Timeout | null = null;
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private readonly channels = new Map<number, HostChannel>();
  private helloResult: HelloResult | null = null;
  private readonly readyWaiters = new Set<{ resolve: () => void; reject: (e: Error) => void }>();
  private reconnectDelay: number;
  private fatal: AgentCallError | null = null;
  /** Counts completed syncs: tests and logs use it to see a resynchronisation happened. */
  syncs = 0;

  constructor(options: AgentClientOptions) {
    super();
    this.opts = {
      connect: options.connect,
      requestTimeoutMs: options.requestTimeoutMs ?? 10_000,
      syncRetryMs: options.syncRetryMs ?? 1000,
      reconnect: options.reconnect ?? true,
      reconnectMinMs: options.reconnectMinMs ?? 100,
      reconnectMaxMs: options.reconnectMaxMs ?? 2000,
      windowBytes: clampWindow(options.windowBytes ?? 1024 * 1024),
      hostVersion: options.hostVersion,
    };
    this.log = options.logger ?? NOOP_LOGGER;
    this.reconnectDelay = this.opts.reconnectMinMs;
  }

  /** A client for an agent behind a unix socket (QEMU's chardev, or the agent itself in tests). */
  static unixSocket(path: string, options: Omit<AgentClientOptions, 'connect'> = {}): AgentClient {
    return new AgentClient({ ...options, connect: () => connectUnix(path) });
  }

  /** Starts connecting (if not yet) and waits for the first completed hello. */
  start(timeoutMs = this.opts.requestTimeoutMs): Promise<HelloResult> {
    if (this.state === 'idle') void this.connectLoop();
    return this.waitConnected(timeoutMs);
  }

  get connected(): boolean {
    return this.state === 'ready';
  }

  /** The agent's answer to the latest hello (version, boot id: a new boot id means the guest rebooted). */
  get hello(): HelloResult | null {
    return this.helloResult;
  }

  /** Frames decoded and bytes skipped on the current connection (stale fragments, padding). */
  get streamStats(): DecoderStats | null {
    return this.decoder ? { ...this.decoder.stats } : null;
  }

  async waitConnected(timeoutMs: number): Promise<HelloResult> {
    await this.whenReady(Date.now() + timeoutMs);
    return this.helloResult as HelloResult;
  }

  close(): void {
    if (this.state === 'closed') return;
    this.state = 'closed';
    this.clearSyncTimer();
    const error = new AgentCallError('closed', 'agent client closed');
    this.failSession(error);
    for (const w of this.readyWaiters) w.reject(error);
    this.readyWaiters.clear();
    this.stream?.destroy();
    this.stream = null;
  }

  // --- methods ---------------------------------------------------------------------------------

  request<M extends AgentMethod>(method: M, params: AgentMethods[M]['params'], options: RequestOptions = {}): Promise<AgentMethods[M]['result']> {
    return this.call(method, params, options) as Promise<AgentMethods[M]['result']>;
  }

  ready(options?: RequestOptions): Promise<ReadyResult> {
    return this.request('ready', {}, options);
  }

  /** Resolves once SSH listens and commands are accepted (the create answer waits for this). */
  async waitReady(timeoutMs: number): Promise<ReadyResult> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const left = deadline - Date.now();
      if (left <= 0) throw new AgentCallError('timeout', `machine not ready after ${timeoutMs} ms`);
      try {
        const ready = await this.ready({ timeoutMs: left });
        if (ready.ssh_listening) return ready;
      } catch (error) {
        if (!(error instanceof AgentCallError) || !error.retryable) throw error;
      }
      // The agent also says so unasked; poll anyway in case that event was lost to a reconnect.
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          this.off('ready', done);
          resolve();
        };
        const timer = setTimeout(done, Math.min(500, Math.max(0, deadline - Date.now())));
        this.on('ready', done);
      });
    }
  }

  metrics(sampleMs?: number, options?: RequestOptions): Promise<MetricsResult> {
    return this.request('metrics', sampleMs === undefined ? {} : { sample_ms: sampleMs }, options);
  }

  /** Host name, authorized keys and (first boot, fork) new SSH host keys. Key generation is slow under TCG. */
  personalise(params: PersonaliseParams, options: RequestOptions = { timeoutMs: 300_000 }): Promise<PersonaliseResult> {
    return this.request('personalise', params, options);
  }

  setTime(epochMs = Date.now(), options?: RequestOptions): Promise<TimeSetResult> {
    return this.request('time.set', { epoch_ms: epochMs }, options);
  }

  syncFilesystems(options: RequestOptions = { timeoutMs: 300_000 }): Promise<Record<string, never>> {
    return this.request('fs.sync', {}, options);
  }

  shutdown(reboot: boolean, options?: RequestOptions): Promise<{ accepted: true }> {
    return this.request('shutdown', { reboot }, options);
  }

  /** Starts a command; its output is read from the handle, at the reader's pace. */
  async exec(params: ExecStartParams, options?: RequestOptions): Promise<ExecHandle> {
    const window = clampWindow(params.window_bytes ?? this.opts.windowBytes);
    let handle: ExecHandle | null = null;
    await this.call('exec.start', { ...params, window_bytes: window }, options ?? {}, (raw) => {
      const result = raw as AgentMethods['exec.start']['result'];
      handle = new ExecHandle(this, result.channel, result.pid, window, params.stdin ? result.window_bytes : 0);
      this.channels.set(result.channel, handle.channelHandler());
    });
    return handle as unknown as ExecHandle;
  }

  /** Runs a command to its end and collects its output (for small outputs). */
  async run(params: ExecStartParams, options?: RequestOptions): Promise<ExecExitEvent & { stdout: Buffer; stderr: Buffer }> {
    const handle = await this.exec(params, options);
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    for await (const chunk of handle) (chunk.stream === 'stdout' ? out : err).push(chunk.data);
    const exit = await handle.exit;
    return { ...exit, stdout: Buffer.concat(out), stderr: Buffer.concat(err) };
  }

  /** A byte stream to a TCP port inside the guest. */
  async openTcp(port: number, host?: string, options?: RequestOptions): Promise<Duplex> {
    const window = this.opts.windowBytes;
    let stream: AgentTcpStream | null = null;
    await this.call('tcp.open', { port, host, window_bytes: window }, options ?? {}, (raw) => {
      const result = raw as AgentMethods['tcp.open']['result'];
      stream = new AgentTcpStream(this, result.channel, window, result.window_bytes);
      this.channels.set(result.channel, stream.channelHandler());
    });
    return stream as unknown as Duplex;
  }

  // --- internals used by channels --------------------------------------------------------------

  /** @internal */
  sendFrame(parts: Buffer[]): void {
    const stream = this.stream;
    if (!stream || this.state !== 'ready' || stream.destroyed) return;
    if (parts.length === 1) {
      stream.write(parts[0]);
      return;
    }
    if (stream instanceof net.Socket) stream.cork();
    for (const part of parts) stream.write(part);
    if (stream instanceof net.Socket) stream.uncork();
  }

  /** @internal */
  sendWindow(channel: number, increment: number): void {
    if (increment > 0 && this.channels.has(channel)) this.sendFrame([encodeWindow(channel, increment)]);
  }

  /** @internal Close a channel from the host side. */
  closeChannel(channel: number, reason = ''): void {
    if (this.channels.delete(channel)) this.sendFrame([encodeClose(channel, reason)]);
  }

  // --- requests --------------------------------------------------------------------------------

  private async call(method: string, params: unknown, options: RequestOptions, onResult?: (result: unknown) => void): Promise<unknown> {
    const timeoutMs = options.timeoutMs ?? this.opts.requestTimeoutMs;
    const deadline = Date.now() + timeoutMs;
    await this.whenReady(deadline);
    return this.send(method, params, deadline - Date.now(), onResult);
  }

  private send(method: string, params: unknown, timeoutMs: number, onResult?: (result: unknown) => void): Promise<unknown> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      if (!this.stream) return reject(new AgentCallError('disconnected', `${method}: connection to the agent lost`));
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new AgentCallError('timeout', `${method}: no answer from the agent within ${timeoutMs} ms`));
      }, Math.max(1, timeoutMs));
      this.pending.set(id, { method, resolve, reject, timer, onResult });
      const frame = encodeJson(FrameKind.REQUEST, CONTROL_CHANNEL, { id, method, params });
      if (frame.length - 9 > MAX_PAYLOAD) {
        clearTimeout(timer);
        this.pending.delete(id);
        reject(new AgentCallError('bad_request', `${method}: request too large`));
        return;
      }
      this.stream?.write(frame);
    });
  }

  private whenReady(deadline: number): Promise<void> {
    if (this.state === 'ready') return Promise.resolve();
    if (this.fatal) return Promise.reject(this.fatal);
    if (this.state === 'closed') return Promise.reject(new AgentCallError('closed', 'agent client closed'));
    if (this.state === 'idle') void this.connectLoop();
    return new Promise((resolve, reject) => {
      const waiter = {
        resolve: () => {
          clearTimeout(timer);
          this.readyWaiters.delete(waiter);
          resolve();
        },
        reject: (error: Error) => {
          clearTimeout(timer);
          this.readyWaiters.delete(waiter);
          reject(error);
        },
      };
      const timer = setTimeout(
        () => waiter.reject(new AgentCallError('disconnected', 'agent not connected')),
        Math.max(1, deadline - Date.now()),
      );
      this.readyWaiters.add(waiter);
    });
  }

  // --- connection ------------------------------------------------------------------------------

  private async connectLoop(): Promise<void> {
    while (this.state === 'idle' || this.state === 'connecting') {
      this.state = 'connecting';
      let stream: Duplex;
      try {
        stream = await this.opts.connect();
        if (stream instanceof net.Socket && stream.connecting) {
          await new Promise<void>((resolve, reject) => {
            stream.once('connect', resolve);
            stream.once('error', reject);
          });
        }
      } catch (error) {
        this.log.debug({ error: String(error) }, 'agent connect failed');
        if (!this.opts.reconnect) return this.giveUp(new AgentCallError('disconnected', `cannot connect to agent: ${String(error)}`));
        await delay(this.reconnectDelay);
        this.reconnectDelay = Math.min(this.opts.reconnectMaxMs, this.reconnectDelay * 2);
        continue;
      }
      if ((this.state as State) === 'closed') {
        stream.destroy();
        return;
      }
      this.attach(stream);
      return;
    }
  }

  private attach(stream: Duplex): void {
    this.stream = stream;
    // Whatever arrives before our SYNC_OK is stale (a fragment from before a VM pause, an old session).
    this.decoder = new FrameDecoder((frame) => this.onFrame(frame), MAX_PAYLOAD, true);
    const decoder = this.decoder;
    stream.on('data', (chunk: Buffer) => {
      if (this.stream === stream) decoder.push(chunk);
    });
    stream.on('error', (error) => this.log.debug({ error: error.message }, 'agent stream error'));
    stream.on('close', () => this.streamGone(stream));
    this.startSync();
  }

  private startSync(): void {
    this.state = 'syncing';
    this.clearSyncTimer();
    const send = () => {
      this.syncNonce = randomBytes(8).toString('hex');
      this.stream?.write(encodeSync(SyncPhase.SYNC, this.syncNonce));
      this.syncTimer = setTimeout(send, this.opts.syncRetryMs);
    };
    send();
  }

  private clearSyncTimer(): void {
    if (this.syncTimer) clearTimeout(this.syncTimer);
    this.syncTimer = null;
  }

  private streamGone(stream: Duplex): void {
    if (this.stream !== stream) return;
    this.stream = null;
    this.decoder = null;
    this.clearSyncTimer();
    if (this.state === 'closed') return;
    const error = new AgentCallError('disconnected', 'connection to the agent lost');
    this.failSession(error);
    this.emit('disconnected', error);
    if (!this.opts.reconnect) return this.giveUp(error);
    this.state = 'connecting';
    const wait = this.reconnectDelay;
    this.reconnectDelay = Math.min(this.opts.reconnectMaxMs, this.reconnectDelay * 2);
    setTimeout(() => {
      if (this.state === 'connecting') {
        this.state = 'idle';
        void this.connectLoop();
      }
    }, wait);
  }

  private giveUp(error: AgentCallError): void {
    this.fatal = error;
    this.state = 'closed';
    for (const w of this.readyWaiters) w.reject(error);
    this.readyWaiters.clear();
    this.stream?.destroy();
  }

  /** The agent-side session ended: every request and channel in flight is lost (the agent reset them too). */
  private failSession(error: AgentCallError): void {
    for (const [id, p] of this.pending) {
      clearTimeout(p.timer);
      this.pending.delete(id);
      p.reject(error);
    }
    const channels = [...this.channels.values()];
    this.channels.clear();
    for (const channel of channels) channel.onReset(error);
  }

  private async sayHello(): Promise<void> {
    this.state = 'hello';
    try {
      const result = (await this.send(
        'hello',
        { protocol_versions: [...SUPPORTED_PROTOCOL_VERSIONS], host_version: this.opts.hostVersion },
        this.opts.requestTimeoutMs,
      )) as HelloResult;
      if (this.state !== 'hello') return;
      this.helloResult = result;
      this.state = 'ready';
      this.syncs += 1;
      this.reconnectDelay = this.opts.reconnectMinMs;
      this.emit('connected', result);
      for (const w of [...this.readyWaiters]) w.resolve();
    } catch (error) {
      if (this.state !== 'hello') return;
      if (error instanceof AgentCallError && error.code === 'unsupported_protocol') return this.giveUp(error);
      // Lost or timed out: start over on the same stream.
      this.log.warn({ error: String(error) }, 'agent hello failed, resynchronising');
      if (this.stream) this.startSync();
    }
  }

  // --- frames ----------------------------------------------------------------------------------

  private onFrame(frame: Frame): void {
    if (frame.kind === FrameKind.SYNC) return this.onSync(frame);
    if (this.state !== 'hello' && this.state !== 'ready') return; // stale frames before our SYNC_OK
    switch (frame.kind) {
      case FrameKind.RESPONSE:
        return this.onResponse(frame);
      case FrameKind.EVENT:
        return this.onEvent(frame);
      case FrameKind.DATA:
        return this.channels.get(frame.channel)?.onData(frame.payload);
      case FrameKind.WINDOW:
        return this.channels.get(frame.channel)?.onWindow(decodeWindow(frame));
      case FrameKind.CLOSE: {
        const channel = this.channels.get(frame.channel);
        this.channels.delete(frame.channel);
        return channel?.onClose(frame.payload.toString('utf8'));
      }
      default:
        return; // REQUEST never flows agent → host
    }
  }

  private onSync(frame: Frame): void {
    const marker = decodeSync(frame);
    if (!marker) return;
    if (marker.phase === SyncPhase.SYNC_OK && this.state === 'syncing' && marker.nonce === this.syncNonce) {
      // Only the answer to our latest SYNC counts: everything after it is the new session.
      this.clearSyncTimer();
      void this.sayHello();
    } else if (marker.phase === SyncPhase.ANNOUNCE && (this.state === 'hello' || this.state === 'ready')) {
      // The agent restarted under a live connection: its session, and all we had in flight, is gone.
      const error = new AgentCallError('disconnected', 'the agent restarted');
      this.log.warn({ stats: this.decoder?.stats }, 'agent restarted, resynchronising');
      this.failSession(error);
      this.emit('disconnected', error);
      this.startSync();
    }
  }

  private onResponse(frame: Frame): void {
    let message: ResponseMessage;
    try {
      message = decodeJson(frame) as ResponseMessage;
    } catch {
      return this.log.warn({}, 'unparsable agent response dropped');
    }
    const pending = this.pending.get(message.id);
    if (!pending) {
      // A late answer to a request that timed out here. If it opened a channel, nobody will ever
      // read it: close it, so the agent stops the command instead of blocking it forever.
      const channel = (message.result as { channel?: unknown } | undefined)?.channel;
      if (typeof channel === 'number' && !this.channels.has(channel)) this.sendFrame([encodeClose(channel, 'request timed out')]);
      return;
    }
    this.pending.delete(message.id);
    clearTimeout(pending.timer);
    if (message.error) {
      pending.reject(new AgentCallError(message.error.code, `${pending.method}: ${message.error.message}`));
      return;
    }
    try {
      pending.onResult?.(message.result);
    } catch (error) {
      pending.reject(error as Error);
      return;
    }
    pending.resolve(message.result);
  }

  private onEvent(frame: Frame): void {
    let message: EventMessage;
    try {
      message = decodeJson(frame) as EventMessage;
    } catch {
      return this.log.warn({}, 'unparsable agent event dropped');
    }
    if (frame.channel !== CONTROL_CHANNEL) {
      this.channels.get(frame.channel)?.onEvent(message.event, message.data);
      return;
    }
    if (message.event === 'ready') this.emit('ready', message.data as ReadyResult);
    this.emit('event', message.event, message.data);
  }
}

// ---------------------------------------------------------------------------------------------
// Host → agent bytes of a stream channel, within the agent's credit.

class CreditWriter {
  private credit: number;
  private readonly queue: { data: Buffer; callback: (error?: Error | null) => void }[] = [];
  private failed: Error | null = null;

  constructor(
    private readonly client: AgentClient,
    private readonly channel: number,
    credit: number,
  ) {
    this.credit = credit;
  }

  write(data: Buffer, callback: (error?: Error | null) => void): void {
    if (this.failed) return callback(this.failed);
    this.queue.push({ data, callback });
    this.pump();
  }

  /** Half-close: empty DATA. */
  end(): void {
    if (!this.failed) for (const frame of encodeRawData(this.channel, Buffer.alloc(0))) this.client.sendFrame(frame);
  }

  grant(increment: number): void {
    this.credit += increment;
    this.pump();
  }

  fail(error: Error): void {
    this.failed = error;
    for (const item of this.queue.splice(0)) item.callback(error);
  }

  private pump(): void {
    while (this.queue.length > 0 && this.credit > 0) {
      const item = this.queue[0];
      const piece = item.data.subarray(0, Math.min(this.credit, MAX_DATA_CHUNK));
      for (const frame of encodeRawData(this.channel, piece)) this.client.sendFrame(frame);
      this.credit -= piece.length;
      if (piece.length === item.data.length) {
        this.queue.shift();
        item.callback(); // the Writable's own buffer is the backpressure towards the producer
      } else {
        item.data = item.data.subarray(piece.length);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// exec

export type ExecChunk = OutputChunk;

/**
 * A running command. Iterate it for ordered output chunks (credit goes back to the agent as each
 * chunk is taken, so iteration speed is the command's output speed); `exit` resolves with the
 * completion. The connection dropping rejects both with AgentCallError('disconnected').
 */
export class ExecHandle implements AsyncIterable<ExecChunk> {
  readonly exit: Promise<ExecExitEvent>;
  /** Present when started with stdin: true; ending it closes the command's input. */
  readonly stdin: Writable | null;
  private readonly chunks: ExecChunk[] = [];
  private readonly credit: CreditReceiver;
  /** Bytes the agent may still send: the guest is not trusted to respect credit, so it is checked. */
  private allowance: number;
  private wake: (() => void) | null = null;
  private exitEvent: ExecExitEvent | null = null;
  private error: Error | null = null;
  private discarding = false;
  private iterating = false;
  private expectedSequence = 0;
  private resolveExit!: (event: ExecExitEvent) => void;
  private rejectExit!: (error: Error) => void;
  private readonly writer: CreditWriter | null;

  constructor(
    private readonly client: AgentClient,
    readonly channel: number,
    readonly pid: number,
    window: number,
    stdinWindow: number,
  ) {
    this.credit = new CreditReceiver(window);
    this.allowance = window;
    this.exit = new Promise((resolve, reject) => {
      this.resolveExit = resolve;
      this.rejectExit = reject;
    });
    this.exit.catch(() => undefined); // a caller that never awaits exit must not crash the process
    this.writer = stdinWindow > 0 ? new CreditWriter(client, channel, stdinWindow) : null;
    const writer = this.writer;
    this.stdin = writer
      ? new Writable({
          write: (chunk: Buffer, _encoding, callback) => writer.write(chunk, callback),
          final: (callback) => {
            writer.end();
            callback();
          },
        })
      : null;
    this.stdin?.on('error', () => undefined);
  }

  /** Sends a signal to the command's process group. */
  async signal(signal: NodeJS.Signals | number): Promise<boolean> {
    const result = await this.client.request('exec.signal', { channel: this.channel, signal });
    return result.delivered;
  }

  /** SIGTERM, then SIGKILL after graceMs; completes with status cancelled. */
  async cancel(graceMs?: number): Promise<boolean> {
    const result = await this.client.request('exec.cancel', { channel: this.channel, grace_ms: graceMs });
    return result.accepted;
  }

  /** Output received but not yet taken by the reader: never more than the window. */
  get bufferedBytes(): number {
    return this.chunks.reduce((n, c) => n + OUTPUT_HEADER_BYTES + c.data.length, 0);
  }

  /** Stop reading: further output is thrown away as it arrives (the command runs on; see cancel()). */
  discard(): void {
    this.discarding = true;
    for (const chunk of this.chunks.splice(0)) this.consumed(chunk);
  }

  [Symbol.asyncIterator](): AsyncIterator<ExecChunk> {
    if (this.iterating) throw new Error('exec output can be iterated only once');
    this.iterating = true;
    return {
      next: async (): Promise<IteratorResult<ExecChunk>> => {
        for (;;) {
          const chunk = this.chunks.shift();
          if (chunk) {
            this.consumed(chunk);
            return { value: chunk, done: false };
          }
          if (this.error) throw this.error;
          if (this.exitEvent) return { value: undefined, done: true };
          await new Promise<void>((resolve) => (this.wake = resolve));
        }
      },
      return: async (): Promise<IteratorResult<ExecChunk>> => {
        this.discard();
        return { value: undefined, done: true };
      },
    };
  }

  /** @internal */
  channelHandler(): HostChannel {
    return {
      onData: (payload) => {
        const chunk = decodeOutput(payload);
        this.allowance -= payload.length;
        if (!chunk || chunk.sequence !== this.expectedSequence || this.allowance < 0) {
          // Frames on one stream cannot be lost or reordered, nor exceed credit: a broken or hostile agent.
          return this.onReset(new AgentCallError('protocol', `exec channel ${this.channel}: bad output chunk`));
        }
        this.expectedSequence += 1;
        if (this.discarding) this.consumed(chunk);
        else this.chunks.push(chunk);
        this.notify();
      },
      onWindow: (increment) => this.writer?.grant(increment),
      onEvent: (event, data) => {
        if (event !== 'exec.exit') return;
        this.exitEvent = data as ExecExitEvent;
        this.resolveExit(this.exitEvent);
        this.writer?.fail(new Error('command finished'));
        this.notify();
      },
      onClose: () => {
        if (!this.exitEvent) this.onReset(new AgentCallError('protocol', `exec channel ${this.channel} closed without an exit`));
      },
      onReset: (error) => this.onReset(error),
    };
  }

  private onReset(error: AgentCallError): void {
    if (this.exitEvent || this.error) return;
    this.error = error;
    this.rejectExit(error);
    this.writer?.fail(error);
    this.client.closeChannel(this.channel, error.message);
    this.notify();
  }

  private consumed(chunk: ExecChunk): void {
    const grant = this.credit.consumed(OUTPUT_HEADER_BYTES + chunk.data.length);
    this.allowance += grant;
    this.client.sendWindow(this.channel, grant);
  }

  private notify(): void {
    const wake = this.wake;
    this.wake = null;
    wake?.();
  }
}

// ---------------------------------------------------------------------------------------------
// tcp.open

/**
 * A guest TCP connection as a Duplex. Reading: credit goes back as the consumer takes bytes out of
 * the readable buffer, so a paused reader stops the guest socket. Writing: callbacks wait for the
 * agent's credit, which it returns once the guest socket took the bytes.
 */
class AgentTcpStream extends Duplex {
  private readonly writer: CreditWriter;
  private pushed = 0;
  private granted = 0;
  private remoteClosed = false;
  /** Bytes the agent may still send (checked: the guest is not trusted). */
  private allowance: number;

  constructor(
    private readonly client: AgentClient,
    readonly channel: number,
    private readonly window: number,
    agentWindow: number,
  ) {
    super({ allowHalfOpen: true });
    this.allowance = window;
    this.writer = new CreditWriter(client, channel, agentWindow);
  }

  channelHandler(): HostChannel {
    return {
      onData: (payload) => {
        if (payload.length === 0) {
          this.push(null);
          return;
        }
        this.allowance -= payload.length;
        if (this.allowance < 0) {
          this.destroy(new AgentCallError('protocol', `tcp channel ${this.channel}: agent exceeded its credit`));
          return;
        }
        this.pushed += payload.length;
        // Copy: the payload is a view into the decoder's buffer and the consumer may keep it.
        this.push(Buffer.from(payload));
        this.grantConsumed();
      },
      onWindow: (increment) => this.writer.grant(increment),
      onEvent: () => undefined,
      onClose: (reason) => {
        this.remoteClosed = true;
        this.writer.fail(new Error('guest connection closed'));
        if (reason) this.destroy(new Error(`guest connection closed: ${reason}`));
        else {
          this.push(null);
          // The writable side is over too: finish it so 'close' follows once the reader is done.
          if (!this.writableEnded) this.end();
        }
      },
      onReset: (error) => {
        this.remoteClosed = true;
        this.destroy(error);
      },
    };
  }

  override _read(): void {
    this.grantConsumed();
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    if (this.remoteClosed) return callback();
    this.writer.write(chunk, callback);
  }

  override _final(callback: (error?: Error | null) => void): void {
    if (!this.remoteClosed) this.writer.end();
    callback();
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.writer.fail(error ?? new Error('stream destroyed'));
    if (!this.remoteClosed) this.client.closeChannel(this.channel, error?.message ?? '');
    this.remoteClosed = true;
    callback(error);
  }

  /** Consumed = pushed minus what still sits in the readable buffer. */
  private grantConsumed(): void {
    const grant = this.pushed - this.readableLength - this.granted;
    if (grant <= 0) return;
    if (grant >= this.window / 4 || this.readableLength === 0) {
      this.granted += grant;
      this.allowance += grant;
      this.client.sendWindow(this.channel, grant);
    }
  }
}

// ---------------------------------------------------------------------------------------------

function connectUnix(path: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.createConnection(path);
    socket.once('connect', () => {
      socket.off('error', reject);
      resolve(socket);
    });
    socket.once('error', reject);
  });
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
