// tcp.open: a guest TCP connection as a Node Duplex, with the channel's credit tied to the
// Duplex's own buffers in both directions.
import { Duplex } from 'node:stream';
import type { ChannelLink, HostChannel } from './channels';
import { CreditWriter } from './credit-writer';
import { peerText } from '../../protocol/peer-input';
import { AgentCallError } from './errors';

/**
 * A guest TCP connection as a Duplex. Reading: credit goes back as the consumer takes bytes out of
 * the readable buffer, so a paused reader stops the guest socket. Writing: callbacks wait for the
 * agent's credit, which it returns once the guest socket took the bytes.
 */
export class AgentTcpStream extends Duplex {
  private readonly writer: CreditWriter;
  private pushed = 0;
  private granted = 0;
  private remoteClosed = false;
  /** The guest's side ended (empty DATA): nothing more may come. */
  private remoteEnded = false;
  /** Bytes the agent may still send (checked: the guest is not trusted). */
  private allowance: number;

  constructor(
    private readonly client: ChannelLink,
    readonly channel: number,
    private readonly window: number,
    agentWindow: number,
  ) {
    super({ allowHalfOpen: true });
    this.allowance = window;
    this.writer = new CreditWriter(client, channel, agentWindow);
    // A guest can break the channel in the frames right after its tcp.open answer, before the
    // caller holds the stream: that error must not go unheard (which would throw). The caller
    // learns of it from openTcp (AgentClient rejects with it) or from its own listener.
    this.on('error', () => undefined);
  }

  channelHandler(): HostChannel {
    return {
      onData: (payload) => {
        if (this.remoteEnded) return this.broken('data after the end of the stream');
        if (payload.length === 0) {
          this.remoteEnded = true;
          this.push(null);
          return;
        }
        this.allowance -= payload.length;
        if (this.allowance < 0) return this.broken('agent exceeded its credit');
        this.pushed += payload.length;
        // Copy: the payload is a view into the decoder's buffer and the consumer may keep it.
        this.push(Buffer.from(payload));
        this.grantConsumed();
      },
      onWindow: (increment) => {
        if (!this.writer.grant(increment)) this.broken(`WINDOW of ${increment} bytes beyond the window`);
      },
      onEvent: () => undefined,
      onClose: (reason) => {
        this.remoteClosed = true;
        this.writer.fail(new Error('guest connection closed'));
        if (reason) this.destroy(new Error(`guest connection closed: ${peerText(reason, 200)}`));
        else {
          if (!this.remoteEnded) this.push(null);
          this.remoteEnded = true;
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

  /** The agent broke the protocol on this channel: counted against its link, and the stream ends. */
  private broken(reason: string): void {
    if (this.destroyed) return;
    const message = `tcp channel ${this.channel}: ${reason}`;
    this.client.peerFault(message);
    this.destroy(new AgentCallError('protocol', message));
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

  /**
   * Consumed = pushed minus what still sits in the readable buffer. Granted in quarter windows, even
   * when the reader is idle: every WINDOW frame costs the guest an interrupt and a read. No stall:
   * below a quarter ungranted, the agent's credit plus the bytes in flight is over three quarters.
   */
  private grantConsumed(): void {
    const grant = this.pushed - this.readableLength - this.granted;
    if (grant <= 0) return;
    if (grant >= this.window / 4) {
      this.granted += grant;
      this.allowance += grant;
      this.client.sendWindow(this.channel, grant);
    }
  }
}
