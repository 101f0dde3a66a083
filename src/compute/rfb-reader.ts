// Exact byte counts from an RFB server's stream, with a bound on what is held: the stream is paused
// while more than `maxBuffered` bytes wait unread (the server's socket then fills, and a server that
// floods only slows itself down), and bytes a message must skip are dropped as they come instead of
// being collected first.
import type { Duplex } from 'node:stream';

export class RfbReader {
  private chunks: Buffer[] = [];
  private offset = 0;
  private length = 0;
  private paused = false;
  private waiter: (() => void) | undefined;
  private ended: Error | undefined;

  constructor(
    private readonly stream: Duplex,
    private readonly maxBuffered: number,
  ) {
    stream.on('data', (chunk: Buffer) => {
      this.chunks.push(chunk);
      this.length += chunk.length;
      if (this.length > this.maxBuffered && !this.paused) {
        this.paused = true;
        stream.pause();
      }
      this.waiter?.();
    });
    const end = (error?: Error) => {
      this.ended ??= error ?? new Error('the RFB stream ended');
      this.waiter?.();
    };
    stream.on('end', () => end());
    stream.on('close', () => end());
    stream.on('error', end);
  }

  /** True once the stream has ended or failed. */
  get hasEnded(): boolean {
    return this.ended !== undefined;
  }

  /** Bytes received and not read yet. */
  get buffered(): number {
    return this.length;
  }

  /** The next `n` bytes (n at most maxBuffered); a view of the stream's chunk when it holds them all. */
  async read(n: number): Promise<Buffer> {
    if (!Number.isInteger(n) || n < 0 || n > this.maxBuffered) throw new Error(`RFB read of ${n} bytes is out of bounds`);
    while (this.length < n) await this.more();
    this.relieve();
    const first = this.chunks[0];
    if (n === 0 || !first) return Buffer.alloc(0);
    if (first.length - this.offset >= n) {
      const out = first.subarray(this.offset, this.offset + n);
      this.consume(n);
      return out;
    }
    const out = Buffer.allocUnsafe(n);
    let filled = 0;
    while (filled < n) {
      const chunk = this.chunks[0]!;
      const take = Math.min(n - filled, chunk.length - this.offset);
      chunk.copy(out, filled, this.offset, this.offset + take);
      filled += take;
      this.consume(take);
    }
    return out;
  }

  /** Drops the next `n` bytes as they arrive (any count: nothing is collected). */
  async skip(n: number): Promise<void> {
    let left = n;
    while (left > 0) {
      if (this.length === 0) await this.more();
      const take = Math.min(left, this.length, this.chunks[0]!.length - this.offset);
      this.consume(take);
      left -= take;
      this.relieve();
    }
  }

  private async more(): Promise<void> {
    if (this.ended) throw this.ended;
    this.relieve();
    await new Promise<void>((resolve) => (this.waiter = resolve));
    this.waiter = undefined;
    if (this.ended && this.length === 0) throw this.ended;
  }

  /** Lets the stream flow again once what it holds is under the bound (or a read needs more). */
  private relieve(): void {
    if (this.paused && this.length <= this.maxBuffered) {
      this.paused = false;
      this.stream.resume();
    }
  }

  private consume(n: number): void {
    this.offset += n;
    this.length -= n;
    if (this.offset === this.chunks[0]!.length) {
      this.chunks.shift();
      this.offset = 0;
    }
  }
}
