// Host side of the kiste agent protocol (agent/PROTOCOL.md): one AgentClient per machine, over the
// byte stream of the machine's virtio-serial port (a unix socket QEMU serves). It resynchronises
// after every (re)connect and after an agent restart, correlates requests with responses, and
// turns stream channels into an async iterable (exec) or a Duplex (tcp) whose consumer's pace
// drives the WINDOW credit: a slow consumer slows the guest, never grows a buffer.
//
// The guest is not trusted (./agent/connection.ts): every answer is parsed into its method's
// declared shape (../protocol/agent-shapes.ts) before a caller sees it, every call has a deadline,
// and what the service holds for a guest that does not read is bounded (./agent/link-writer.ts).
//
// This file is the public entry: the AgentClient facade and re-exports. The parts live in
// ./agent/: connection (stream, SYNC, hello, reconnect), requests (ids, timeouts, answers),
// channels (routing stream frames), exec-handle, tcp-stream, credit-writer, link-writer, shapes,
// options, errors.
import { EventEmitter } from 'node:events';
import type { Duplex } from 'node:stream';
import type {
  AgentMethod,
  AgentMethods,
  DecoderStats,
  ExecExitEvent,
  ExecStartParams,
  HelloResult,
  MetricsResult,
  PersonaliseParams,
  PersonaliseResult,
  ReadyResult,
  TimeSetResult,
} from '../protocol/agent';
import { clampWindow } from '../protocol/agent';
import { AgentConnection, connectUnix } from './agent/connection';
import { AgentCallError } from './agent/errors';
import { ExecHandle } from './agent/exec-handle';
import { AgentClientOptions, NOOP_LOGGER, RequestOptions, ResolvedOptions, resolveOptions } from './agent/options';
import { HostKeyShape, type ParsedResult } from '../protocol/agent-shapes';
import { runToEnd, type RunResult } from './agent/run-to-end';
import { AgentTcpStream } from './agent/tcp-stream';
import type { GuestAgent } from './guest-agent';


export { AgentCallError } from './agent/errors';
export type { AgentCallErrorCode } from './agent/errors';
export type { AgentClientOptions, AgentLogger, RequestOptions } from './agent/options';
export { ExecHandle } from './agent/exec-handle';
export type { ExecChunk, ExecStream } from './agent/exec-stream';

export interface AgentClientEvents {
  connected: [hello: HelloResult];
  disconnected: [error: AgentCallError];
  ready: [ready: ReadyResult];
  event: [event: string, data: unknown];
}

export class AgentClient extends EventEmitter<AgentClientEvents> implements GuestAgent {
  private readonly opts: ResolvedOptions;
  private readonly connection: AgentConnection;

  constructor(options: AgentClientOptions) {
    super();
    this.opts = resolveOptions(options);
    this.connection = new AgentConnection(this.opts, options.logger ?? NOOP_LOGGER, {
      connected: (hello) => this.emit('connected', hello),
      disconnected: (error) => this.emit('disconnected', error),
      event: (event, data) => {
        if (event === 'ready') this.emit('ready', data as ReadyResult);
        this.emit('event', event, data);
      },
      linkDropped: (reason) => options.onLinkDropped?.(reason),
    });
  }

  /** A client for an agent behind a unix socket (QEMU's chardev, or the agent itself in tests). */
  static unixSocket(path: string, options: Omit<AgentClientOptions, 'connect'> = {}): AgentClient {
    return new AgentClient({ ...options, connect: () => connectUnix(path) });
  }

  /** Starts connecting (if not yet) and waits for the first completed hello. */
  start(timeoutMs = this.opts.requestTimeoutMs): Promise<HelloResult> {
    this.connection.start();
    return this.waitConnected(timeoutMs);
  }

  get connected(): boolean {
    return this.connection.connected;
  }

  /** The agent's answer to the latest hello (version, boot id: a new boot id means the guest rebooted). */
  get hello(): HelloResult | null {
    return this.connection.hello;
  }

  /** Frames decoded and bytes skipped on the current connection (stale fragments, padding). */
  get streamStats(): DecoderStats | null {
    return this.connection.streamStats;
  }

  /** Counts completed syncs: tests and logs use it to see a resynchronisation happened. */
  get syncs(): number {
    return this.connection.syncs;
  }

  async waitConnected(timeoutMs: number): Promise<HelloResult> {
    await this.connection.whenReady(Date.now() + timeoutMs);
    return this.connection.hello as HelloResult;
  }

  close(): void {
    this.connection.close();
  }

  // --- methods ---------------------------------------------------------------------------------

  /** A request with a deadline (options.timeoutMs, else the client's default); the answer is parsed into its shape. */
  request<M extends AgentMethod>(method: M, params: AgentMethods[M]['params'], options: RequestOptions = {}): Promise<ParsedResult<M>> {
    return this.connection.call(method, params, options) as Promise<ParsedResult<M>>;
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

  /**
   * Host name, authorized keys and (first boot, fork) new SSH host keys and machine id. Key
   * generation is slow under TCG.
   */
  async personalise(params: PersonaliseParams, options: RequestOptions = { timeoutMs: 300_000 }): Promise<PersonaliseResult> {
    const result = await this.request('personalise', params, options);
    // Each key on its own: one odd file in the guest's /etc/ssh costs that key, not the start.
    const hostKeys = result.host_keys.flatMap((raw) => {
      const key = HostKeyShape.parse(raw);
      if (key.ok) return [{ algorithm: key.value.algorithm, public_key: key.value.public_key }];
      this.connection.peerFault(key.reason);
      return [];
    });
    return { ...result, host_keys: hostKeys };
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

  /**
   * Starts a command; its output is read from the handle, at the reader's pace. A command with a
   * timeout ends on the host's side too if the guest does not end it (ExecHandle).
   */
  async exec(params: ExecStartParams, options?: RequestOptions): Promise<ExecHandle> {
    const window = clampWindow(params.window_bytes ?? this.opts.windowBytes);
    let handle: ExecHandle | null = null;
    // The channel registers synchronously with the response, so no frame of it can arrive unrouted.
    await this.connection.call('exec.start', { ...params, window_bytes: window }, options ?? {}, (raw) => {
      const result = raw as AgentMethods['exec.start']['result'];
      handle = new ExecHandle(this, result.channel, result.pid, window, params.stdin ? result.window_bytes : 0, params.timeout_ms ?? 0, this.opts.exitGraceMs);
      this.connection.channels.register(result.channel, handle.channelHandler());
    });
    return handle as unknown as ExecHandle;
  }

  /** Runs a command to its end and collects its output (runToEnd: bounded, with a deadline). */
  run(params: ExecStartParams, options: RequestOptions = {}): Promise<RunResult> {
    return runToEnd((p, o) => this.exec(p, o), params, options, this.opts.exitGraceMs);
  }

  /** A byte stream to a TCP port inside the guest. */
  async openTcp(port: number, host?: string, options?: RequestOptions): Promise<Duplex> {
    const window = this.opts.windowBytes;
    let stream: AgentTcpStream | null = null;
    await this.connection.call('tcp.open', { port, host, window_bytes: window }, options ?? {}, (raw) => {
      const result = raw as AgentMethods['tcp.open']['result'];
      stream = new AgentTcpStream(this, result.channel, window, result.window_bytes);
      this.connection.channels.register(result.channel, stream.channelHandler());
    });
    const opened = stream as unknown as AgentTcpStream;
    // Broken by the frames that came with the answer (see AgentTcpStream): the open failed.
    if (opened.errored) throw opened.errored;
    return opened;
  }

  // --- internals used by channels (ChannelLink) ------------------------------------------------

  /** @internal */
  sendFrame(parts: Buffer[]): void {
    this.connection.sendFrame(parts);
  }

  /** @internal */
  dataRoom(wake: () => void): boolean {
    return this.connection.dataRoom(wake);
  }

  /** @internal */
  peerFault(reason: string): void {
    this.connection.peerFault(reason);
  }

  /** @internal */
  sendWindow(channel: number, increment: number): void {
    this.connection.channels.sendWindow(channel, increment);
  }

  /** @internal Close a channel from the host side. */
  closeChannel(channel: number, reason = ''): void {
    this.connection.channels.close(channel, reason);
  }
}
