// tcp.open: a guest TCP connection as a Node Duplex, with the channel's credit tied to the
// Duplex's own buffers in both directions.
import { Duplex } from 'node:stream';
import type { ChannelLink, HostChannel } from './channels';
import { CreditWriter } from './credit-writer';
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
