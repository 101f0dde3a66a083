// A small RFB 3.8 client (RFC 6143) for a machine's screen as QEMU's VNC server shows it: security
// type None, raw pixels (32 bits, little-endian, depth 24: bytes blue, green, red, unused), the
// DesktopSize pseudo-encoding, pointer events and QEMU's extended key event (XT scancodes, so keys
// go by physical position and the guest's layout decides the character). Cut text from the server
// is handed to `onCutText` (plain, or the Extended Clipboard pseudo-encoding's compressed form).
//
// The server is QEMU, which runs jailed next to a hostile guest (and may be taken over): every
// message is decoded into a declared shape (../protocol/peer-input.ts) before anything is
// allocated or copied.
// The screen is at most the display device's DISPLAY_MAX (a larger framebuffer or rectangle, an
// encoding we did not ask for, an unknown message: a protocol error, the link is closed); a cut text
// past CLIPBOARD_MAX_BYTES is skipped unread and dropped, and a server that keeps sending such values
// loses its link (PeerStrikes). At most RFB_MAX_BUFFERED bytes are held unread, the handshake has a
// deadline, and nothing the server sends throws out of a stream listener.
import type { Duplex } from 'node:stream';
import { inflateSync } from 'node:zlib';
import { CLIPBOARD_MAX_BYTES } from './machine-display';
import { PeerStrikes } from '../protocol/peer-input';
import { RfbReader } from './rfb-reader';
import {
  ClipboardTextShape, CutTextShape, ENCODING_DESKTOP_SIZE, ENCODING_EXTENDED_CLIPBOARD, ENCODING_QEMU_EXTENDED_KEY, ENCODING_RAW, MAX_EXTENDED_CLIPBOARD_BYTES, RectangleShape, ServerInitShape,
} from './rfb-shapes';

export { ENCODING_DESKTOP_SIZE, ENCODING_EXTENDED_CLIPBOARD, ENCODING_QEMU_EXTENDED_KEY, ENCODING_RAW } from './rfb-shapes';

/** Unread bytes held: the largest single read (a compressed clipboard) with room for a socket chunk. */
export const RFB_MAX_BUFFERED = MAX_EXTENDED_CLIPBOARD_BYTES + 256 * 1024;
const HANDSHAKE_TIMEOUT_MS = 10_000;

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

export interface RfbLogger {
  warn(object: object, message: string): void;
}

export interface RfbConnectOptions {
  encodings?: number[];
  /** Where values the server sent that do not fit are reported. */
  logger?: RfbLogger;
  handshakeTimeoutMs?: number;
}

/** The server broke the protocol; the link is closed. */
export class RfbProtocolError extends Error {
  constructor(readonly reason: string) {
    super(`RFB protocol error: ${reason}`);
    this.name = 'RfbProtocolError';
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
  /** Why the link ended, once it has. */
  closedReason: string | undefined;
  private readonly reader: RfbReader;
  private readonly listeners = new Set<(update: RfbUpdate) => void>();
  private readonly closeListeners = new Set<(reason: string) => void>();
  private readonly strikes: PeerStrikes;
  /** Grows to the largest screen seen, never shrinks: a server that resizes again and again costs no allocations. */
  private store = Buffer.alloc(0);

  private constructor(
    private readonly stream: Duplex,
    private readonly encodings: readonly number[],
    private readonly logger: RfbLogger,
  ) {
    this.reader = new RfbReader(stream, RFB_MAX_BUFFERED);
    this.strikes = new PeerStrikes((reason) => this.fail(`the server kept sending values that do not fit (${reason})`));
  }

  /** Handshake (3.8, security None, shared: other viewers stay), raw 32-bit pixels, the encodings given. */
  static async connect(stream: Duplex, options: RfbConnectOptions = {}): Promise<RfbClient> {
    const encodings = options.encodings ?? [ENCODING_RAW, ENCODING_DESKTOP_SIZE, ENCODING_QEMU_EXTENDED_KEY, ENCODING_EXTENDED_CLIPBOARD];
    const client = new RfbClient(stream, encodings, options.logger ?? { warn: () => undefined });
    const timeoutMs = options.handshakeTimeoutMs ?? HANDSHAKE_TIMEOUT_MS;
    const deadline = setTimeout(() => stream.destroy(new RfbProtocolError(`no handshake within ${timeoutMs} ms`)), timeoutMs);
    try {
      await client.handshake();
    } catch (error) {
      stream.destroy();
      throw error;
    } finally {
      clearTimeout(deadline);
    }
    void client.pump();
    return client;
  }

  private async handshake(): Promise<void> {
    const r = this.reader;
    const stream = this.stream;
    const version = (await r.read(12)).toString('latin1');
    if (!/^RFB 003\.00[38]\n$/.test(version)) throw new RfbProtocolError(`not an RFB server: ${JSON.stringify(version)}`);
    stream.write('RFB 003.008\n');
    const count = (await r.read(1))[0]!;
    if (count === 0) {
      const reason = await r.read(Math.min(200, (await r.read(4)).readUInt32BE(0)));
      throw new Error(`RFB server refused: ${JSON.stringify(reason.toString('latin1'))}`);
    }
    const types = [...(await r.read(count))];
    if (!types.includes(1)) throw new Error(`RFB server offers no security type None: ${types.join(',')}`);
    stream.write(Buffer.from([1]));
    if ((await r.read(4)).readUInt32BE(0) !== 0) throw new Error('RFB security handshake failed');
    stream.write(Buffer.from([1])); // ClientInit: shared
    const bytes = await r.read(24);
    const init = ServerInitShape.parse({ width: bytes.readUInt16BE(0), height: bytes.readUInt16BE(2), nameLength: bytes.readUInt32BE(20) });
    if (!init.ok) throw new RfbProtocolError(init.reason);
    this.resize(init.value.width, init.value.height);
    this.name = (await r.read(init.value.nameLength)).toString('utf8');
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
    const setEncodings = Buffer.alloc(4 + 4 * this.encodings.length);
    setEncodings.writeUInt8(2, 0);
    setEncodings.writeUInt16BE(this.encodings.length, 2);
    this.encodings.forEach((encoding, i) => setEncodings.writeInt32BE(encoding, 4 + 4 * i));
    stream.write(setEncodings);
  }

  /** Bytes the server sent that are not read yet (at most RFB_MAX_BUFFERED and one socket chunk). */
  get bufferedBytes(): number {
    return this.reader.buffered;
  }

  /** Runs once when the link ends (closed by us, by the server, or for a protocol error). */
  onClose(listener: (reason: string) => void): () => void {
    if (this.closedReason !== undefined) {
      listener(this.closedReason);
      return () => undefined;
    }
    this.closeListeners.add(listener);
    return () => this.closeListeners.delete(listener);
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

  /** Resolves after the next update with pixels or a new size; rejects when the link ends first. */
  nextUpdate(timeoutMs = 30_000): Promise<void> {
    return new Promise((resolve, reject) => {
      const settle = (error?: Error): void => {
        clearTimeout(timer);
        stopUpdates();
        stopClose();
        if (error) reject(error);
        else resolve();
      };
      const stopUpdates = this.onUpdate((update) => {
        if (update.pixels || update.resized) settle();
      });
      const timer = setTimeout(() => settle(new Error(`no framebuffer update within ${timeoutMs} ms`)), timeoutMs);
      const stopClose = this.onClose((reason) => settle(new Error(`the RFB link ended: ${reason}`)));
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
    return this.closedReason !== undefined;
  }

  close(): void {
    this.finish('closed by the client');
  }

  private write(data: Buffer | string): void {
    if (!this.isClosed && !this.stream.destroyed) this.stream.write(data);
  }

  private finish(reason: string): void {
    if (this.closedReason !== undefined) return;
    this.closedReason = reason;
    this.stream.destroy();
    for (const listener of [...this.closeListeners]) listener(reason);
    this.closeListeners.clear();
  }

  /** A protocol error: the link is given up. */
  private fail(reason: string): void {
    if (this.isClosed) return;
    this.logger.warn({ reason }, 'RFB: protocol error, screen link closed');
    this.finish(`protocol error: ${reason}`);
  }

  /** A value that does not fit, skipped: dropped with a warning; too many of them cost the link. */
  private drop(reason: string): void {
    this.logger.warn({ reason }, 'RFB: dropped a message from the server that does not fit');
    this.strikes.strike(reason);
  }

  private resize(width: number, height: number): void {
    const bytes = width * height * 4;
    if (this.store.length < bytes) this.store = Buffer.alloc(bytes);
    this.width = width;
    this.height = height;
    this.framebuffer = this.store.subarray(0, bytes);
  }

  private async pump(): Promise<void> {
    try {
      for (;;) {
        const type = (await this.reader.read(1))[0];
        if (type === 0) await this.framebufferUpdate();
        else if (type === 1) await this.reader.skip((await this.reader.read(5)).readUInt16BE(3) * 6); // colour map: we asked for true colour
        else if (type === 2) continue; // bell
        else if (type === 3) await this.serverCutText();
        else throw new RfbProtocolError(`unknown server message ${type}`);
      }
    } catch (error) {
      // Also what a listener threw: it costs this link, never the process.
      if (error instanceof RfbProtocolError) this.fail(error.reason);
      else if (!this.reader.hasEnded) this.fail((error as Error).message);
      else this.finish((error as Error).message);
    }
  }

  /** FramebufferUpdate: at most 65535 rectangles (a u16), each read as it comes, nothing allocated per rectangle. */
  private async framebufferUpdate(): Promise<void> {
    const r = this.reader;
    const rects = (await r.read(3)).readUInt16BE(1);
    const update: RfbUpdate = { pixels: false, resized: false };
    for (let i = 0; i < rects; i++) {
      const header = await r.read(12);
      const encoding = header.readInt32BE(8);
      const parsed = RectangleShape.parse({ x: header.readUInt16BE(0), y: header.readUInt16BE(2), width: header.readUInt16BE(4), height: header.readUInt16BE(6), encoding });
      if (!parsed.ok) throw new RfbProtocolError(parsed.reason);
      if (!this.encodings.includes(encoding)) throw new RfbProtocolError(`a rectangle in encoding ${encoding}, which was not asked for`);
      const rect = parsed.value;
      if (rect.encoding === ENCODING_RAW) {
        const { x, y, width: w, height: h } = rect;
        if (x + w > this.width || y + h > this.height) throw new RfbProtocolError(`rectangle ${w}x${h}+${x}+${y} outside the ${this.width}x${this.height} screen`);
        for (let row = 0; row < h; row++) (await r.read(w * 4)).copy(this.framebuffer, ((y + row) * this.width + x) * 4);
        update.pixels = true;
      } else if (rect.encoding === ENCODING_DESKTOP_SIZE) {
        this.resize(rect.width, rect.height);
        update.resized = true;
      } // ENCODING_QEMU_EXTENDED_KEY: the server acknowledges the extended key event, nothing follows
    }
    for (const listener of [...this.listeners]) listener(update);
  }

  /** ServerCutText: a text too long (or malformed) is skipped unread and dropped. */
  private async serverCutText(): Promise<void> {
    const r = this.reader;
    const length = (await r.read(7)).readInt32BE(3);
    const parsed = CutTextShape.parse({ length });
    if (!parsed.ok) {
      await r.skip(Math.abs(length));
      return this.drop(parsed.reason);
    }
    if (length >= 0) return this.onCutText?.((await r.read(length)).toString('latin1'));
    const flags = (await r.read(4)).readUInt32BE(0);
    const payload = await r.read(-length - 4);
    if (flags & CLIPBOARD_NOTIFY && flags & CLIPBOARD_TEXT) {
      // the server has text: ask for it
      const request = Buffer.alloc(12);
      request.writeUInt8(6, 0);
      request.writeInt32BE(-4, 4);
      request.writeUInt32BE((CLIPBOARD_REQUEST | CLIPBOARD_TEXT) >>> 0, 8);
      this.write(request);
    } else if (flags & CLIPBOARD_PROVIDE && flags & CLIPBOARD_TEXT) {
      const text = inflateClipboardText(payload);
      if (typeof text === 'string') this.onCutText?.(text);
      else this.drop(text.reason);
    }
  }
}

/** The text of an Extended Clipboard `provide` (zlib: a u32 length, then the text and a NUL). */
function inflateClipboardText(payload: Buffer): string | { reason: string } {
  let data: Buffer;
  try {
    data = inflateSync(payload, { maxOutputLength: CLIPBOARD_MAX_BYTES + 4 });
  } catch (error) {
    return { reason: `RFB clipboard text: ${(error as Error).message.slice(0, 100)}` };
  }
  const parsed = ClipboardTextShape.parse({ length: data.length >= 4 ? data.readUInt32BE(0) : -1 });
  if (!parsed.ok) return parsed;
  return data.subarray(4, 4 + Math.min(parsed.value.length, data.length - 4)).toString('utf8').replace(/\0$/, '');
}

function clamp(value: number, size: number): number {
  return Math.max(0, Math.min(size - 1, Math.round(value)));
}
