// What the service holds for one agent link while the guest does not read: bounded. A guest can
// stop reading its port at any time (and grant itself all the credit the protocol allows first),
// so every byte towards it waits here, in the stream's own write buffer, under two bounds:
// - stream data (tcp tunnels, terminal and exec stdin) goes out only while the link holds less
//   than DATA_HOLD_BYTES; writers wait on 'drain' (and their producers on them);
// - everything else (requests, WINDOW, CLOSE, SYNC) is small and still goes out, up to
//   LINK_HOLD_BYTES: room for one request of the largest size on top of the data. A frame that
//   would pass it is not written: a request fails ('stalled'), anything else costs the link.
import type { Duplex } from 'node:stream';
import { MAX_DATA_CHUNK, MAX_PAYLOAD } from '../../protocol/agent';

export const DATA_HOLD_BYTES = 1024 * 1024;
export const LINK_HOLD_BYTES = DATA_HOLD_BYTES + MAX_DATA_CHUNK + MAX_PAYLOAD + 64 * 1024;

export class LinkWriter {
  private readonly waiting = new Set<() => void>();

  constructor(private readonly stream: Duplex) {
    stream.on('drain', () => this.wake());
  }

  /** Bytes written to the link that the peer has not taken yet (in this process, not the kernel's). */
  get held(): number {
    return this.stream.writableLength;
  }

  /**
   * True when stream data may go out now; otherwise `wake` runs (once) when it may again. The wake
   * is the stream's 'drain', which comes because DATA_HOLD_BYTES is above any socket's high-water
   * mark (16-64 KiB): the write that filled the link returned false.
   */
  dataRoom(wake: () => void): boolean {
    if (this.held < DATA_HOLD_BYTES) return true;
    this.waiting.add(wake);
    return false;
  }

  /** Writes one frame (its parts together) unless it would pass LINK_HOLD_BYTES; false: not written. */
  write(parts: Buffer[]): boolean {
    if (this.stream.destroyed) return true; // gone: the session ends with it, nothing to hold
    const size = parts.reduce((n, part) => n + part.length, 0);
    if (this.held + size > LINK_HOLD_BYTES) return false;
    if (parts.length === 1) {
      this.stream.write(parts[0]);
      return true;
    }
    this.stream.cork();
    for (const part of parts) this.stream.write(part);
    this.stream.uncork();
    return true;
  }

  private wake(): void {
    const waiting = [...this.waiting];
    this.waiting.clear();
    for (const wake of waiting) wake();
  }
}
