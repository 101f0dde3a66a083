// The stream channels (exec, tcp) of the current session: routing DATA, WINDOW, CLOSE and channel
// EVENT frames to their handlers, and the host's side of closing. Ids are the agent's; a frame for
// an id no longer here belongs to a channel already closed and is dropped (PROTOCOL.md).
import type { AgentMethod, AgentMethods, Frame } from '../../protocol/agent';
import { decodeWindow, encodeClose, encodeWindow, FrameKind, SYNC_CHANNEL } from '../../protocol/agent';
import type { AgentCallError } from './errors';
import type { RequestOptions } from './options';
import type { ParsedResult } from '../../protocol/agent-shapes';

/** A stream channel as the client sees it. */
export interface HostChannel {
  onData(payload: Buffer): void;
  onWindow(increment: number): void;
  onEvent(event: string, data: unknown): void;
  onClose(reason: string): void;
  /** The session is gone (disconnect, agent restart): fail with error. */
  onReset(error: AgentCallError): void;
}

/**
 * What a channel's owner (ExecHandle, AgentTcpStream) needs from the client. AgentClient is one;
 * the narrow type keeps those classes free of the client's module.
 */
export interface ChannelLink {
  request<M extends AgentMethod>(method: M, params: AgentMethods[M]['params'], options?: RequestOptions): Promise<ParsedResult<M>>;
  sendFrame(parts: Buffer[]): void;
  /** True when stream data may be sent now; otherwise `wake` runs once when it may again (LinkWriter). */
  dataRoom(wake: () => void): boolean;
  /** The agent broke the protocol on a channel: logged and counted against its link. */
  peerFault(reason: string): void;
  sendWindow(channel: number, increment: number): void;
  closeChannel(channel: number, reason?: string): void;
}

export class ChannelTable {
  private readonly channels = new Map<number, HostChannel>();

  constructor(private readonly sendFrame: (parts: Buffer[]) => void) {}

  /** Throws when the id is in use: a guest answering with an open channel's id would take its frames over. */
  register(channel: number, handler: HostChannel): void {
    if (this.channels.has(channel)) throw new ChannelInUseError(channel);
    this.channels.set(channel, handler);
  }

  /** DATA, WINDOW or CLOSE on a stream channel. */
  onFrame(frame: Frame): void {
    switch (frame.kind) {
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
        return;
    }
  }

  onEvent(channel: number, event: string, data: unknown): void {
    this.channels.get(channel)?.onEvent(event, data);
  }

  /** Returns credit to the agent; nothing once the channel is closed. */
  sendWindow(channel: number, increment: number): void {
    if (increment > 0 && this.channels.has(channel)) this.sendFrame([encodeWindow(channel, increment)]);
  }

  /** Closes a channel from the host side (once). */
  close(channel: number, reason = ''): void {
    if (this.channels.delete(channel)) this.sendFrame([encodeClose(channel, reason)]);
  }

  /**
   * A late answer to a request that timed out here. If it opened a channel, nobody will ever read
   * it: close it, so the agent stops the command instead of blocking it forever.
   */
  closeUnclaimed(result: unknown): void {
    const channel = typeof result === 'object' && result !== null ? (result as { channel?: unknown }).channel : undefined;
    if (!Number.isInteger(channel) || (channel as number) <= 0 || (channel as number) >= SYNC_CHANNEL) return;
    if (!this.channels.has(channel as number)) this.sendFrame([encodeClose(channel as number, 'request timed out')]);
  }

  /** The session ended: every channel is gone on the agent's side too. */
  resetAll(error: AgentCallError): void {
    const channels = [...this.channels.values()];
    this.channels.clear();
    for (const channel of channels) channel.onReset(error);
  }
}

/** The agent named a channel id that is still open for another stream. */
export class ChannelInUseError extends Error {
  constructor(readonly channel: number) {
    super(`channel ${channel} is already open`);
  }
}
