// A small RFB 3.8 client (RFC 6143) for tests of a machine's screen: handshake with security type
// None, raw pixels (32 bits, little-endian, depth 24), the DesktopSize pseudo-encoding, pointer and
// key events (plain keysyms and QEMU's extended key event with XT scancodes), and cut text both ways
// (plain ClientCutText to the server; from the server, the Extended Clipboard pseudo-encoding, the
// only way QEMU's VNC server hands out the guest's clipboard).
import type { Duplex } from 'node:stream';
import { inflateSync } from 'node:zlib';

export const ENCODING_RAW = 0;
export const ENCODING_DESKTOP_SIZE = -223;
export const ENCODING_QEMU_EXTENDED_KEY = -258;
export const ENCODING_EXTENDED_CLIPBOARD = 0xc0a1e5ce | 0;

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

/** Reads exact byte counts from a stream. */
class Reader {
  private chunks: Buffer[] = [];
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
      this.ended = error ?? new Error('the RFB stream ended');
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
    const all = Buffer.concat(this.chunks);
    this.chunks = [all.subarray(n)];
    this.length -= n;
    return all.subarray(0, n);
  }
}

export class RfbClient {
  width = 0;
  height = 0;
  name = '';
  /** Clipboard text the server handed out (plain or extended ServerCutText), oldest first. */
  readonly cutTexts: string[] = [];
  private readonly reader: Reader;
  private framebuffer = Buffer.alloc(0);
  private readonly listeners = new Set<(pixels: boolean) => void>();
  private closed = false;

  private constructor(private readonly stream: Duplex) {
    this.reader = new Reader(stream);
  }

  /** Handshake (3.8, security None, shared), raw 32-bit pixels, the encodings given (raw first). */
  static async connect(stream: Duplex, encodings: number[] = [ENCODING_RAW, ENCODING_DESKTOP_SIZE, ENCODING_QEMU_EXTENDED_KEY, ENCODING_EXTENDED_CLIPBOARD]): Promise<RfbClient> {
    const client = new RfbClient(stream);
    const r = client.reader;
    const version = (await r.read(12)).toString('latin1');
    if (!/^RFB 003\.00[38]\n$/.test(version)) throw new Error(`not an RFB server: ${JSON.stringify(version)}`);
    stream.write('RFB 003.008\n');
    const count = (await r.read(1))[0]!;
    if (count === 0) throw new Error(`RFB server refused: ${(await r.read((await r.read(4)).readUInt32BE(0))).toString()}`);
    const types = [...(await r.read(count))];
    if (!types.includes(1)) throw new Error(`RFB server offers no security type None: ${types.join(',')}`);
    stream.write(Buffer.from([1]));
    const result = (await r.read(4)).readUInt32BE(0);
    if (result !== 0) throw new Error(`RFB security handshake failed (${result})`);
    stream.write(Buffer.from([1])); // ClientInit: shared
    const init = await r.read(24);
    client.width = init.readUInt16BE(0);
    client.height = init.readUInt16BE(2);
    client.name = (await r.read(init.readUInt32BE(20))).toString('utf8');
    client.framebuffer = Buffer.alloc(client.width * client.height * 4);
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

  /** Asks for an update and resolves with the framebuffer once one has arrived. */
  async frame(incremental = false, timeoutMs = 30_000): Promise<RfbFrame> {
    const updated = this.nextUpdate(timeoutMs);
    this.requestUpdate(incremental);
    await updated;
    return { width: this.width, height: this.height, pixels: Buffer.from(this.framebuffer) };
  }

  requestUpdate(incremental: boolean): void {
    const request = Buffer.alloc(10);
    request.writeUInt8(3, 0);
    request.writeUInt8(incremental ? 1 : 0, 1);
    request.writeUInt16BE(this.width, 6);
    request.writeUInt16BE(this.height, 8);
    this.stream.write(request);
  }

  /**
   * Resolves after the next FramebufferUpdate with pixels (or a new size) has been applied; updates
   * with only pseudo-encodings (QEMU acknowledges its extended key event with one) do not count.
   */
  nextUpdate(timeoutMs = 30_000): Promise<void> {
    return new Promise((resolve, reject) => {
      const done = (pixels: boolean) => {
        if (!pixels) return;
        clearTimeout(timer);
        this.listeners.delete(done);
        resolve();
      };
      const timer = setTimeout(() => {
        this.listeners.delete(done);
        reject(new Error(`no framebuffer update within ${timeoutMs} ms`));
      }, timeoutMs);
      this.listeners.add(done);
    });
  }

  pointer(x: number, y: number, buttons = 0): void {
    const event = Buffer.alloc(6);
    event.writeUInt8(5, 0);
    event.writeUInt8(buttons, 1);
    event.writeUInt16BE(x, 2);
    event.writeUInt16BE(y, 4);
    this.stream.write(event);
  }

  key(keysym: number, down: boolean): void {
    const event = Buffer.alloc(8);
    event.writeUInt8(4, 0);
    event.writeUInt8(down ? 1 : 0, 1);
    event.writeUInt32BE(keysym, 4);
    this.stream.write(event);
  }

  /** QEMU's extended key event: the XT scancode, independent of any keymap. */
  scancode(keysym: number, xtScancode: number, down: boolean): void {
    const event = Buffer.alloc(12);
    event.writeUInt8(255, 0);
    event.writeUInt8(0, 1);
    event.writeUInt16BE(down ? 1 : 0, 2);
    event.writeUInt32BE(keysym, 4);
    event.writeUInt32BE(xtScancode, 8);
    this.stream.write(event);
  }

  /** Types printable ASCII with plain key events (keysym = the character's code). */
  type(text: string): void {
    for (const char of text) {
      this.key(char.codePointAt(0)!, true);
      this.key(char.codePointAt(0)!, false);
    }
  }

  cutText(text: string): void {
    const data = Buffer.from(text, 'latin1');
    const message = Buffer.alloc(8 + data.length);
    message.writeUInt8(6, 0);
    message.writeUInt32BE(data.length, 4);
    data.copy(message, 8);
    this.stream.write(message);
  }

  close(): void {
    this.closed = true;
    this.stream.destroy();
  }

  /** Distinct pixel values of a frame (the unused byte ignored). */
  static colours(frame: RfbFrame): number {
    const seen = new Set<number>();
    for (let at = 0; at + 4 <= frame.pixels.length; at += 4) seen.add(frame.pixels.readUInt32LE(at) & 0xffffff);
    return seen.size;
  }

  /** Extended clipboard: a notice that the server has text is answered with a request for it. */
  private extendedCutText(flags: number, payload: Buffer): void {
    if (flags & CLIPBOARD_NOTIFY && flags & CLIPBOARD_TEXT) {
      const request = Buffer.alloc(12);
      request.writeUInt8(6, 0);
      request.writeInt32BE(-4, 4);
      request.writeUInt32BE((CLIPBOARD_REQUEST | CLIPBOARD_TEXT) >>> 0, 8);
      this.stream.write(request);
    } else if (flags & CLIPBOARD_PROVIDE && flags & CLIPBOARD_TEXT) {
      const data = inflateSync(payload);
      this.cutTexts.push(data.subarray(4, 4 + data.readUInt32BE(0)).toString('utf8').replace(/\0$/, ''));
    }
  }

  private async pump(): Promise<void> {
    const r = this.reader;
    try {
      for (;;) {
        const type = (await r.read(1))[0];
        if (type === 0) {
          const rects = (await r.read(3)).readUInt16BE(1);
          let pixels = false;
          for (let i = 0; i < rects; i++) {
            const header = await r.read(12);
            const [x, y, w, h] = [header.readUInt16BE(0), header.readUInt16BE(2), header.readUInt16BE(4), header.readUInt16BE(6)];
            const encoding = header.readInt32BE(8);
            if (encoding === ENCODING_RAW) {
              const data = await r.read(w * h * 4);
              for (let row = 0; row < h; row++) data.copy(this.framebuffer, ((y + row) * this.width + x) * 4, row * w * 4, (row + 1) * w * 4);
              pixels = true;
            } else if (encoding === ENCODING_DESKTOP_SIZE) {
              this.width = w;
              this.height = h;
              this.framebuffer = Buffer.alloc(w * h * 4);
              pixels = true;
            } else if (encoding === ENCODING_QEMU_EXTENDED_KEY) {
              // the server acknowledges the extended key event: nothing to read
            } else {
              throw new Error(`unexpected RFB encoding ${encoding}`);
            }
          }
          for (const listener of [...this.listeners]) listener(pixels);
        } else if (type === 1) {
          const header = await r.read(5);
          await r.read(header.readUInt16BE(3) * 6);
        } else if (type === 2) {
          // bell
        } else if (type === 3) {
          const length = (await r.read(7)).readInt32BE(3);
          if (length >= 0) this.cutTexts.push((await r.read(length)).toString('latin1'));
          else this.extendedCutText((await r.read(4)).readUInt32BE(0), await r.read(-length - 4));
        } else {
          throw new Error(`unexpected RFB server message ${type}`);
        }
      }
    } catch (error) {
      if (!this.closed) this.stream.destroy(error as Error);
    }
  }
}
