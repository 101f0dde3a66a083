// The session with one agent: opening the byte stream, SYNC (resynchronisation on every new
// connection and after an agent restart, PROTOCOL.md), hello, reconnecting with backoff, and
// dispatching frames once the session stands. Everything in flight belongs to a session and fails
// with it, so the request and channel tables live here.
//
// Every byte on the link comes from a guest whose root may be hostile: what it sends is parsed
// into declared shapes (./shapes.ts), what does not fit is dropped with a warning and counted
// (PeerStrikes: a link that keeps sending garbage is closed and reopened), and nothing it sends
// may throw out of the stream's 'data' listener: any error while handling its frames costs the
// link, never the process. What the service holds towards it is bounded (LinkWriter).
import { randomBytes } from 'node:crypto';
import * as net from 'node:net';
import type { Duplex } from 'node:stream';
import {
  AgentMethod,
  CONTROL_CHANNEL,
  decodeSync,
  DecoderStats,
  encodeSync,
  Frame,
  FrameDecoder,
  FrameKind,
  HelloResult,
  MAX_PAYLOAD,
  SUPPORTED_PROTOCOL_VERSIONS,
  SyncPhase,
} from '../../protocol/agent';
import { parsePeerJson, PeerStrikes } from '../../protocol/peer-input';
import { ChannelTable } from './channels';
import { AgentCallError } from './errors';
import { LinkWriter } from './link-writer';
import type { AgentLogger, RequestOptions, ResolvedOptions } from './options';
import { RequestTable } from './requests';
import { EVENT_SHAPES, EventShape } from '../../protocol/agent-shapes';

type State = 'idle' | 'connecting' | 'syncing' | 'hello' | 'ready' | 'closed';

/** What the client facade hears from the session (it re-emits these as its events). */
export interface ConnectionListener {
  connected(hello: HelloResult): void;
  disconnected(error: AgentCallError): void;
  /** An EVENT on channel 0. */
  event(event: string, data: unknown): void;
  /** The link was closed because the agent sent what does not fit, or stopped reading (it is reopened). */
  linkDropped(reason: string): void;
}

export class AgentConnection {
  private state: State = 'idle';
  private stream: Duplex | null = null;
  private link: LinkWriter | null = null;
  private decoder: FrameDecoder | null = null;
  private readonly strikes: PeerStrikes;
  private syncNonce = '';
  private syncTimer: NodeJS.Timeout | null = null;
  private helloResult: HelloResult | null = null;
  private readonly readyWaiters = new Set<{ resolve: () => void; reject: (e: Error) => void }>();
  private reconnectDelay: number;
  private fatal: AgentCallError | null = null;
  private readonly requests: RequestTable;
  readonly channels: ChannelTable;
  /** Counts completed syncs: tests and logs use it to see a resynchronisation happened. */
  syncs = 0;

  constructor(
    private readonly opts: ResolvedOptions,
    private readonly log: AgentLogger,
    private readonly listener: ConnectionListener,
  ) {
    this.reconnectDelay = opts.reconnectMinMs;
    this.channels = new ChannelTable((parts) => this.sendFrame(parts));
    this.requests = new RequestTable(
      (reason) => this.peerFault(reason),
      (result) => this.channels.closeUnclaimed(result),
    );
    this.strikes = new PeerStrikes((reason) => this.dropLink(`the agent keeps sending what does not fit (${reason})`));
  }

  /** Starts connecting unless already under way (or closed). */
  start(): void {
    if (this.state === 'idle') void this.connectLoop();
  }

  get connected(): boolean {
    return this.state === 'ready';
  }

  get hello(): HelloResult | null {
    return this.helloResult;
  }

  get streamStats(): DecoderStats | null {
    return this.decoder ? { ...this.decoder.stats } : null;
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
    this.link = null;
  }

  /**
   * A request once the session stands; the timeout (every call has one) covers waiting for it too.
   * Resolves with the method's result, parsed.
   */
  async call(method: AgentMethod, params: unknown, options: RequestOptions, onResult?: (result: unknown) => void): Promise<unknown> {
    const timeoutMs = options.timeoutMs ?? this.opts.requestTimeoutMs;
    const deadline = Date.now() + timeoutMs;
    await this.whenReady(deadline);
    return this.requests.send(this.link, method, params, deadline - Date.now(), onResult);
  }

  /**
   * Writes one frame (its parts together); dropped unless the session stands, as the agent would
   * ignore it. A frame the link has no room for even now (the agent stopped reading long ago)
   * costs the link.
   */
  sendFrame(parts: Buffer[]): void {
    const link = this.link;
    if (!link || this.state !== 'ready') return;
    if (!link.write(parts)) this.dropLink(`the agent does not read (${link.held} bytes wait for it)`);
  }

  /** Room for stream data now (ChannelLink.dataRoom); with no session standing, frames are dropped anyway. */
  dataRoom(wake: () => void): boolean {
    return !this.link || this.state !== 'ready' || this.link.dataRoom(wake);
  }

  /** Something from the guest that does not fit: dropped (by the caller), logged, counted. */
  peerFault(reason: string): void {
    this.log.warn({ reason }, 'agent sent something that does not fit; dropped');
    this.strikes.strike(reason);
  }

  /** Resolves once hello completed; a call made while (re)connecting waits here rather than failing at once. */
  whenReady(deadline: number): Promise<void> {
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
    this.link = new LinkWriter(stream);
    this.strikes.reset();
    // Whatever arrives before our SYNC_OK is stale (a fragment from before a VM pause, an old session).
    this.decoder = new FrameDecoder((frame) => this.onFrame(frame), MAX_PAYLOAD, true);
    const decoder = this.decoder;
    stream.on('data', (chunk: Buffer) => {
      if (this.stream !== stream) return;
      try {
        decoder.push(chunk);
      } catch (error) {
        // A frame we could not handle: whatever state it left behind goes with the link.
        this.dropLink(`error while handling the agent's frames: ${error instanceof Error ? error.message : String(error)}`);
      }
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
      this.syncTimer = setTimeout(send, this.opts.syncRetryMs);
      if (this.link && !this.link.write([encodeSync(SyncPhase.SYNC, this.syncNonce)])) this.dropLink('the agent does not read its SYNC');
    };
    send();
  }

  private clearSyncTimer(): void {
    if (this.syncTimer) clearTimeout(this.syncTimer);
    this.syncTimer = null;
  }

  /** Closes the current link (it is reopened with backoff): a guest that misbehaves loses its link, not the service. */
  private dropLink(reason: string): void {
    const stream = this.stream;
    if (!stream) return;
    this.log.warn({ reason, stats: this.decoder?.stats }, 'agent link closed, reconnecting');
    this.listener.linkDropped(reason);
    this.decoder?.reset(true); // stops the decoder's loop at once: no more frames of this link
    stream.destroy();
    this.streamGone(stream);
  }

  private streamGone(stream: Duplex): void {
    if (this.stream !== stream) return;
    this.stream = null;
    this.link = null;
    this.decoder = null;
    this.clearSyncTimer();
    if (this.state === 'closed') return;
    const error = new AgentCallError('disconnected', 'connection to the agent lost');
    this.failSession(error);
    this.listener.disconnected(error);
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
    this.requests.failAll(error);
    this.channels.resetAll(error);
  }

  private async sayHello(): Promise<void> {
    this.state = 'hello';
    try {
      const result = (await this.requests.send(
        this.link,
        'hello',
        { protocol_versions: [...SUPPORTED_PROTOCOL_VERSIONS], host_version: this.opts.hostVersion },
        this.opts.requestTimeoutMs,
      )) as HelloResult;
      if (this.state !== 'hello') return;
      this.helloResult = result;
      this.state = 'ready';
      this.syncs += 1;
      this.reconnectDelay = this.opts.reconnectMinMs;
      this.listener.connected(result);
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
        return this.requests.onResponse(frame);
      case FrameKind.EVENT:
        return this.onEvent(frame);
      case FrameKind.DATA:
      case FrameKind.WINDOW:
      case FrameKind.CLOSE:
        return this.channels.onFrame(frame);
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
      this.listener.disconnected(error);
      this.startSync();
    }
  }

  private onEvent(frame: Frame): void {
    const parsed = parsePeerJson(EventShape, frame.payload);
    if (!parsed.ok) return this.peerFault(parsed.reason);
    const { event, data } = parsed.value;
    // A stream channel's events are checked by the channel's owner (exec.exit: ExecHandle).
    if (frame.channel !== CONTROL_CHANNEL) return this.channels.onEvent(frame.channel, event, data);
    if (event !== 'ready') return this.log.debug({ event }, 'unknown agent event dropped');
    const ready = EVENT_SHAPES.ready.parse(data);
    if (!ready.ok) return this.peerFault(ready.reason);
    this.listener.event(event, ready.value);
  }
}

/** Connects to a unix socket (QEMU's chardev, or the agent itself in tests). */
export function connectUnix(path: string): Promise<net.Socket> {
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
