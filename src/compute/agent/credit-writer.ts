// Host → agent bytes of a stream channel (exec stdin, tcp), within the agent's credit and the
// link's room: bytes wait here until WINDOW frames grant credit and the link has room for data
// (LinkWriter), and the producer's callback waits with them, so a slow guest reader slows the
// host-side writer instead of growing a buffer. The guest is not trusted with its credit either:
// it never exceeds the window the agent opened the channel with (an honest agent only gives back
// what it took), so a WINDOW that would pass it, or one that grants nothing, is a protocol error.
import { encodeRawData, MAX_DATA_CHUNK } from '../../protocol/agent';
import type { ChannelLink } from './channels';

export class CreditWriter {
  private credit: number;
  private readonly queue: { data: Buffer; callback: (error?: Error | null) => void }[] = [];
  private failed: Error | null = null;
  private readonly resume = () => this.pump();

  constructor(
    private readonly client: ChannelLink,
    private readonly channel: number,
    /** The agent's initial credit: the most it may ever grant. */
    private readonly window: number,
  ) {
    this.credit = window;
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

  /** A WINDOW from the agent; false when it breaks the protocol (the owner resets the channel). */
  grant(increment: number): boolean {
    if (!Number.isInteger(increment) || increment <= 0 || this.credit + increment > this.window) return false;
    this.credit += increment;
    this.pump();
    return true;
  }

  fail(error: Error): void {
    this.failed = error;
    for (const item of this.queue.splice(0)) item.callback(error);
  }

  private pump(): void {
    while (!this.failed && this.queue.length > 0 && this.credit > 0 && this.client.dataRoom(this.resume)) {
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
