// A small RFB 3.8 client (RFC 6143) for a machine's screen as QEMU's VNC server shows it: security
// type None, raw pixels (32 bits, little-endian, depth 24: bytes blue, green, red, unused), the
// DesktopSize pseudo-encoding, pointer events and QEMU's extended key event (XT scancodes, so keys
// go by physical position and the guest's layout decides the character). Cut text from the server
// is handed to `onCutText` (plain, or the Extended Clipboard pseudo-encoding's compressed form).
//
// The server is QEMU, which runs jailed next to a hostile guest: every size read from it is checked
// before anything is allocated or copied.
import type { Duplex } from 'node:stream';
import { inflateSync } from 'node:zlib';

export const ENCODING_RAW = 0;
export const ENCODING_DESKTOP_SIZE = -223;
export const ENCODING_QEMU_EXTENDED_KEY = -258;
export const ENCODING_EXTENDED_CLIPBOARD = 0xc0a1e5ce | 0;

/** Largest screen accepted from a server (the display device's own maximum is smaller). */
export const RFB_MAX_SIDE = 8192;
/** Largest cut text accepted from a server. */
const MAX_CUT_TEXT = 1024 * 1024;

const CLIPBOARD_TEXT = 1 << 0;
const CLIPBOARD_REQUEST = 1 << 25;
const CLIPBOARD_NOTIFY = 1 << 27;
const CLIPBOARD_PROVIDE = 1 << 28;

export interface RfbFrame {
  width: number;
  height: number;
  /** 4 bytes per pixel: blue, green, red, unused. */
  pixels: Buffer;
}

/** What an update changed: pixels (with their bounding box) and/or the screen's size. */
export interface RfbUpdate {
  pixels: boolean;
  resized: boolean;
}

/** Reads exact byte counts from a stream without copying what it already holds more than once. */
class Reader {
  private chunks: Buffer[] = [];
  private offset = 0;
  private length = 0;
  private waiter: (() => void) | undefined;
  private ended: Error | undefined;

  constructor(stream: Duplex) {
    stream.on('data', (chunk: Buffer) => {
      this.chunks.push(chunk);
      this.length += chunk.length;
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

  async read(n: number): Promise<Buffer> {
    while (this.length < n) {
      if (this.ended) throw this.ended;
      await new Promise<void>((resolve) => (this.waiter = resolve));
      this.waiter = undefined;
    }
    const first = this.chunks[0]!;
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

  private consume(n: number): void {
    this.offset += n;
    this.length -= n;
    if (this.offset === this.chunks[0]!.length) {
      this.chunks.shift();
      this.offset = 0;
    }
  }
}

export class RfbClient {
  width = 0;
  height = 0;
  name = '';
  /** The screen as last updated (BGRX). */
  framebuffer = Buffer.alloc(0);
  /** Called with text the server put on its clipboard. */
  onCutText: ((text: string) => void) | null = null;
  private readonly reader: Reader;
  private readonly listeners = new Set<(update: RfbUpdate) => void>();
  private closed = false;

  private constructor(private readonly stream: Duplex) {
    this.reader = new Reader(stream);
  }

  /** Handshake (3.8, security None, shared: other viewers stay), raw 32-bit pixels, the encodings given. */
  static async connect(
    stream: Duplex,
    encodings: number[] = [ENCODING_RAW, ENCODING_DESKTOP_SIZE, ENCODING_QEMU_EXTENDED_KEY, ENCODING_EXTENDED_CLIPBOARD],
  ): Promise<RfbClient> {
    const client = new RfbClient(stream);
    const r = client.reader;
    const version = (await r.read(12)).toString('latin1');
    if (!/^RFB 003\.00[38]\n$/.test(version)) throw new Error(`not an RFB server: ${JSON.stringify(version)}`);
    stream.write('RFB 003.008\n');
    const count = (await r.read(1))[0]!;
    if (count === 0) throw new Error(`RFB server refused: ${(await r.read(Math.min(4096, (await r.read(4)).readUInt32BE(0)))).toString()}`);
    const types = [...(await r.read(count))];
    if (!types.includes(1)) throw new Error(`RFB server offers no security type None: ${types.join(',')}`);
    stream.write(Buffer.from([1]));
    if ((await r.read(4)).readUInt32BE(0) !== 0) throw new Error('RFB security handshake failed');
    stream.write(Buffer.from([1])); // ClientInit: shared
    const init = await r.read(24);
    client.resize(init.readUInt16BE(0), init.readUInt16BE(2));
    const nameLength = init.readUInt32BE(20);
    if (nameLength > 4096) throw new Error('RFB server name too long');
    client.name = (await r.read(nameLength)).toString('utf8');
    // SetPixelFormat: 32 bpp, depth 24, little-endian, true colour, 8 bits each, red 16, green 8, blue 0
    const format = Buffer.alloc(20);
    format.writeUInt8(0, 0);
    format.writeUInt8(32, 4);
    format.writeUInt8(24, 5);
    format.writeUInt8(0, 6);
    format.writeUInt8(1, 7);
    format.writeUInt16BE(255, 8);
    format.writeUInt16BE(255, 10);
    format.writeUInt16BE(255, 12);
    format.writeUInt8(16, 14);
    format.writeUInt8(8, 15);
    format.writeUInt8(0, 16);
    stream.write(format);
    const setEncodings = Buffer.alloc(4 + 4 * encodings.length);
    setEncodings.writeUInt8(2, 0);
    setEncodings.writeUInt16BE(encodings.length, 2);
    encodings.forEach((encoding, i) => setEncodings.writeInt32BE(encoding, 4 + 4 * i));
    stream.write(setEncodings);
    void client.pump();
    return client;
  }

  /** Runs on every FramebufferUpdate (also those with only pseudo-encodings: then pixels and resized are false). */
  onUpdate(listener: (update: RfbUpdate) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Asks for an update and resolves with a copy of the screen once pixels (or a new size) arrived. */
  async frame(incremental = false, timeoutMs = 30_000): Promise<RfbFrame> {
    const updated = this.nextUpdate(timeoutMs);
    this.requestUpdate(incremental);
    await updated;
    return { width: this.width, height: this.height, pixels: Buffer.from(this.framebuffer) };
  }

  /** Resolves after the next update with pixels or a new size. */
  nextUpdate(timeoutMs = 30_000): Promise<void> {
    return new Promise((resolve, reject) => {
      const stop = this.onUpdate((update) => {
        if (!update.pixels && !update.resized) return;
        clearTimeout(timer);
        stop();
        resolve();
      });
      const timer = setTimeout(() => {
        stop();
        reject(new Error(`no framebuffer update within ${timeoutMs} ms`));
      }, timeoutMs);
    });
  }

  requestUpdate(incremental: boolean): void {
    const request = Buffer.alloc(10);
    request.writeUInt8(3, 0);
    request.writeUInt8(incremental ? 1 : 0, 1);
    request.writeUInt16BE(this.width, 6);
    request.writeUInt16BE(this.height, 8);
    this.write(request);
  }

  /** Absolute pointer position in screen pixels; buttons: bit 0 left, 1 middle, 2 right, 3/4 wheel up/down. */
  pointer(x: number, y: number, buttons = 0): void {
    const event = Buffer.alloc(6);
    event.writeUInt8(5, 0);
    event.writeUInt8(buttons & 0xff, 1);
    event.writeUInt16BE(clamp(x, this.width), 2);
    event.writeUInt16BE(clamp(y, this.height), 4);
    this.write(event);
  }

  /** A plain key event (the keysym alone: the server maps it through its own keymap). */
  key(keysym: number, down: boolean): void {
    const event = Buffer.alloc(8);
    event.writeUInt8(4, 0);
    event.writeUInt8(down ? 1 : 0, 1);
    event.writeUInt32BE(keysym >>> 0, 4);
    this.write(event);
  }

  /** QEMU's extended key event: the XT scancode, independent of any keymap. */
  scancode(keysym: number, xtScancode: number, down: boolean): void {
    const event = Buffer.alloc(12);
    event.writeUInt8(255, 0);
    event.writeUInt8(0, 1);
    event.writeUInt16BE(down ? 1 : 0, 2);
    event.writeUInt32BE(keysym >>> 0, 4);
    event.writeUInt32BE(xtScancode >>> 0, 8);
    this.write(event);
  }

  /** Plain ClientCutText (Latin-1). */
  cutText(text: string): void {
    const data = Buffer.from(text, 'latin1');
    const message = Buffer.alloc(8 + data.length);
    message.writeUInt8(6, 0);
    message.writeUInt32BE(data.length, 4);
    data.copy(message, 8);
    this.write(message);
  }

  get isClosed(): boolean {
    return this.closed;
  }

  close(): void {
    this.closed = true;
    this.stream.destroy();
  }

  private write(data: Buffer | string): void {
    if (!this.closed && !this.stream.destroyed) this.stream.write(data);
  }

  private resize(width: number, height: number): void {
    if (width < 1 || height < 1 || width > RFB_MAX_SIDE || height > RFB_MAX_SIDE) throw new Error(`RFB screen size ${width}x${height} out of range`);
    this.width = width;
    this.height = height;
    this.framebuffer = Buffer.alloc(width * height * 4);
  }

  /** Extended clipboard: a notice that the server has text is answered with a request for it. */
  private extendedCutText(flags: number, payload: Buffer): void {
    if (flags & CLIPBOARD_NOTIFY && flags & CLIPBOARD_TEXT) {
      const request = Buffer.alloc(12);
      request.writeUInt8(6, 0);
      request.writeInt32BE(-4, 4);
      request.writeUInt32BE((CLIPBOARD_REQUEST | CLIPBOARD_TEXT) >>> 0, 8);
      this.write(request);
    } else if (flags & CLIPBOARD_PROVIDE && flags & CLIPBOARD_TEXT) {
      const data = inflateSync(payload, { maxOutputLength: MAX_CUT_TEXT + 4 });
      const length = Math.min(data.readUInt32BE(0), data.length - 4);
      this.onCutText?.(data.subarray(4, 4 + length).toString('utf8').replace(/\0$/, ''));
    }
  }

  private async pump(): Promise<void> {
    const r = this.reader;
    try {
      for (;;) {
        const type = (await r.read(1))[0];
        if (type === 0) {
          const rects = (await r.read(3)).readUInt16BE(1);
          const update: RfbUpdate = { pixels: false, resized: false };
          for (let i = 0; i < rects; i++) {
            const header = await r.read(12);
            const [x, y, w, h] = [header.readUInt16BE(0), header.readUInt16BE(2), header.readUInt16BE(4), header.readUInt16BE(6)];
            const encoding = header.readInt32BE(8);
            if (encoding === ENCODING_RAW) {
              if (x + w > this.width || y + h > this.height) throw new Error(`RFB rectangle ${w}x${h}+${x}+${y} outside the ${this.width}x${this.height} screen`);
              const rowBytes = w * 4;
              for (let row = 0; row < h; row++) (await r.read(rowBytes)).copy(this.framebuffer, ((y + row) * this.width + x) * 4);
              update.pixels = true;
            } else if (encoding === ENCODING_DESKTOP_SIZE) {
              this.resize(w, h);
              update.resized = true;
            } else if (encoding === ENCODING_QEMU_EXTENDED_KEY) {
              // the server acknowledges the extended key event: nothing to read
            } else {
              throw new Error(`unexpected RFB encoding ${encoding}`);
            }
          }
          for (const listener of [...this.listeners]) listener(update);
        } else if (type === 1) {
          const header = await r.read(5);
          await r.read(header.readUInt16BE(3) * 6);
        } else if (type === 2) {
          // bell
        } else if (type === 3) {
          const length = (await r.read(7)).readInt32BE(3);
          if (Math.abs(length) > MAX_CUT_TEXT) throw new Error('RFB cut text too long');
          if (length >= 0) this.onCutText?.((await r.read(length)).toString('latin1'));
          else this.extendedCutText((await r.read(4)).readUInt32BE(0), await r.read(-length - 4));
        } else {
          throw new Error(`unexpected RFB server message ${type}`);
        }
      }
    } catch (error) {
      if (!this.closed) this.stream.destroy(error as Error);
      this.closed = true;
    }
  }
}

function clamp(value: number, size: number): number {
  return Math.max(0, Math.min(size - 1, Math.round(value)));
}
