// One host session over the current link: frame dispatch, hello, SYNC, request/response and the
// registry of stream channels. A session ends on SYNC or when the link goes: every channel is then
// reset (commands killed, TCP streams dropped), because the host that owned them has forgotten them.
import { randomBytes } from 'node:crypto';
import {
  AGENT_METHODS,
  CONTROL_CHANNEL,
  decodeJson,
  decodeSync,
  decodeWindow,
  encodeClose,
  encodeJson,
  encodeSync,
  encodeWindow,
  Frame,
  FrameDecoder,
  FrameKind,
  HelloResult,
  MAX_PAYLOAD,
  RequestMessage,
  SUPPORTED_PROTOCOL_VERSIONS,
  SyncPhase,
} from '../../src/protocol/agent';
import type { AgentConfig } from './config';
import { AgentError } from './errors';
import type { Link } from './link';
import type { Logger } from './log';
import { bootId, uptimeSeconds } from './procfs';
import { object } from './validate';
import { AGENT_VERSION } from './version';

/** A stream channel (exec or tcp) as the session sees it. */
export interface Channel {
  onData(payload: Buffer): void;
  onWindow(increment: number): void;
  /** The host closed the channel: release it, send nothing more on it. */
  onClose(reason: string): void;
  /** The session ended: release everything silently. */
  reset(): void;
}

/** What a request handler may do; tied to the session generation the request arrived in. */
export interface RequestContext {
  readonly config: AgentConfig;
  readonly log: Logger;
  /** False once the session that sent the request has ended (its answer would go nowhere). */
  current(): boolean;
  openChannel<C extends Channel>(make: (id: number) => C): C;
  channel(id: number): Channel | undefined;
}

/** What a channel may send. Frames of an ended session are dropped. */
export interface ChannelSink {
  send(parts: Buffer[]): void;
  window(channel: number, increment: number): void;
  event(channel: number, event: string, data: unknown): void;
  /** Send CLOSE and forget the channel. */
  close(channel: number, reason?: string): void;
}

/** A handler's answer plus work that must wait until the answer is on its way. */
export class Reply {
  constructor(
    readonly result: unknown,
    /** Runs right after the RESPONSE is queued: a channel may only start sending after its id is known. */
    readonly after?: () => void,
    /** Runs once the RESPONSE has been written out (shutdown). */
    readonly written?: () => void,
  ) {}
}

export type Handler = (params: unknown, ctx: RequestContext & { sink: ChannelSink }) => Promise<unknown>;

const MAX_CHANNELS = 1024;

export class Session {
  private link: Link | null = null;
  private readonly decoder = new FrameDecoder((frame) => this.onFrame(frame), MAX_PAYLOAD, true);
  private readonly channels = new Map<number, Channel>();
  private nextChannel = 1;
  private generation = 0;
  private helloDone = false;
  /** Identifies this agent process in ANNOUNCE frames. */
  private readonly instance = randomBytes(8).toString('hex');

  constructor(
    private readonly config: AgentConfig,
    private readonly log: Logger,
    private readonly handlers: Record<string, Handler>,
  ) {}

  attach(link: Link, announce: boolean): void {
    this.end('new link');
    this.link = link;
    // A fresh stream may start with a fragment of an old frame: skip to the host's SYNC.
    this.decoder.reset(true);
    if (announce) link.send([encodeSync(SyncPhase.ANNOUNCE, this.instance)]);
  }

  detach(link: Link, reason: string): void {
    if (this.link !== link) return;
    this.link = null;
    this.end(reason);
  }

  data(chunk: Buffer): void {
    this.decoder.push(chunk);
  }

  /** Unsolicited event on the control channel, only to a host that said hello. */
  broadcast(event: string, data: unknown): void {
    if (this.helloDone) this.write([encodeJson(FrameKind.EVENT, CONTROL_CHANNEL, { event, data })]);
  }

  private end(reason: string): void {
    this.generation += 1;
    this.helloDone = false;
    if (this.channels.size > 0) this.log.info('session ended, resetting channels', { reason, channels: this.channels.size });
    for (const channel of this.channels.values()) {
      try {
        channel.reset();
      } catch (error) {
        this.log.error('channel reset failed', { error: String(error) });
      }
    }
    this.channels.clear();
  }

  private write(parts: Buffer[], done?: () => void): void {
    this.link?.send(parts, done);
  }

  private onFrame(frame: Frame): void {
    switch (frame.kind) {
      case FrameKind.SYNC: {
        const marker = decodeSync(frame);
        if (!marker || marker.phase !== SyncPhase.SYNC) return;
        this.end('sync');
        this.link?.dropQueued();
        this.write([encodeSync(SyncPhase.SYNC_OK, marker.nonce)]);
        return;
      }
      case FrameKind.REQUEST: {
        let message: RequestMessage;
        try {
          message = decodeJson(frame) as RequestMessage;
        } catch {
          this.log.warn('unparsable request dropped', { bytes: frame.payload.length });
          return;
        }
        if (typeof message !== 'object' || message === null || typeof message.id !== 'number') return;
        void this.request(message);
        return;
      }
      case FrameKind.DATA:
        this.channels.get(frame.channel)?.onData(frame.payload);
        return;
      case FrameKind.WINDOW:
        this.channels.get(frame.channel)?.onWindow(decodeWindow(frame));
        return;
      case FrameKind.CLOSE: {
        const channel = this.channels.get(frame.channel);
        if (!channel) return;
        this.channels.delete(frame.channel);
        channel.onClose(frame.payload.toString('utf8'));
        return;
      }
      default:
        // RESPONSE and EVENT only flow agent → host.
        return;
    }
  }

  private async request(message: RequestMessage): Promise<void> {
    const generation = this.generation;
    const respond = (body: object, done?: () => void) => {
      if (generation === this.generation) this.write([encodeJson(FrameKind.RESPONSE, CONTROL_CHANNEL, { id: message.id, ...body })], done);
    };
    try {
      if (message.method === 'hello') {
        const result = await this.hello(message.params);
        if (generation !== this.generation) return;
        this.helloDone = true;
        return respond({ result });
      }
      if (!this.helloDone) throw new AgentError('hello_required', 'send hello first');
      const handler = Object.prototype.hasOwnProperty.call(this.handlers, message.method) ? this.handlers[message.method] : undefined;
      if (!handler) throw new AgentError('unknown_method', `unknown method ${String(message.method)}`);
      const out = await handler(message.params, this.context(generation));
      if (out instanceof Reply) {
        if (generation !== this.generation) return; // handlers release their channels via reset()
        respond({ result: out.result }, out.written);
        out.after?.();
      } else {
        respond({ result: out ?? {} });
      }
    } catch (error) {
      if (error instanceof AgentError) return respond({ error: { code: error.code, message: error.message } });
      this.log.error('request failed', { method: message.method, error: error instanceof Error ? error.stack : String(error) });
      respond({ error: { code: 'internal', message: error instanceof Error ? error.message : String(error) } });
    }
  }

  private async hello(raw: unknown): Promise<HelloResult> {
    const params = object(raw);
    const offered = Array.isArray(params.protocol_versions) ? params.protocol_versions.filter((v): v is number => typeof v === 'number') : [];
    const common = SUPPORTED_PROTOCOL_VERSIONS.filter((v) => offered.includes(v));
    if (common.length === 0) {
      throw new AgentError('unsupported_protocol', `agent speaks protocol versions ${SUPPORTED_PROTOCOL_VERSIONS.join(', ')}; host offered ${offered.join(', ') || 'none'}`);
    }
    const [boot, uptime] = await Promise.all([bootId(this.config.proc), uptimeSeconds(this.config.proc)]);
    return {
      protocol_version: Math.max(...common),
      agent_version: AGENT_VERSION,
      boot_id: boot,
      uptime_seconds: uptime ?? 0,
      methods: AGENT_METHODS.filter((m) => m === 'hello' || m in this.handlers),
      max_payload: MAX_PAYLOAD,
    };
  }

  private context(generation: number): RequestContext & { sink: ChannelSink } {
    const current = () => generation === this.generation;
    const sink: ChannelSink = {
      send: (parts) => {
        if (current()) this.write(parts);
      },
      window: (channel, increment) => {
        if (current() && increment > 0) this.write([encodeWindow(channel, increment)]);
      },
      event: (channel, event, data) => {
        if (current()) this.write([encodeJson(FrameKind.EVENT, channel, { event, data })]);
      },
      close: (channel, reason = '') => {
        if (!current()) return;
        this.channels.delete(channel);
        this.write([encodeClose(channel, reason)]);
      },
    };
    return {
      config: this.config,
      log: this.log,
      sink,
      current,
      channel: (id) => (current() ? this.channels.get(id) : undefined),
      openChannel: <C extends Channel>(make: (id: number) => C) => {
        if (!current()) throw new AgentError('internal', 'session ended');
        if (this.channels.size >= MAX_CHANNELS) throw new AgentError('too_many_channels', `at most ${MAX_CHANNELS} open channels`);
        const id = this.allocate();
        const channel = make(id);
        this.channels.set(id, channel);
        return channel;
      },
    };
  }

  /** Channel ids grow and are not reused soon, so a late frame for a closed channel hits nothing. */
  private allocate(): number {
    for (;;) {
      const id = this.nextChannel;
      this.nextChannel = id >= 0xfffffffe ? 1 : id + 1;
      if (!this.channels.has(id)) return id;
    }
  }
}

