// Host → agent bytes of a stream channel (exec stdin, tcp), within the agent's credit: bytes wait
// here until WINDOW frames grant room, and the producer's callback waits with them, so a slow
// guest reader slows the host-side writer instead of growing a buffer.
import { encodeRawData, MAX_DATA_CHUNK } from '../agent-protocol';
import type { ChannelLink } from './channels';

export class CreditWriter {
  private credit: number;
  private readonly queue: { data: Buffer; callback: (error?: Error | null) => void }[] = [];
  private failed: Error | null = null;

  constructor(
    private readonly client: ChannelLink,
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
