// The RFB client against a hostile VNC server (a taken-over QEMU), stood in for by a scripted server
// on a unix socket: after a valid handshake, random bytes and mutated valid server messages. Nothing
// throws out of the stream's listeners, the client ends cleanly when the server does, never holds
// more than its bound, and never takes a screen larger than the display device's 2560x1600; valid
// messages never cost the link. Plus the bounded reader on its own, the handshake's deadline, a
// clipboard bomb and a cut-text flood; and the screen's encoder, which a screen resizing in a loop
// must not make restart without end.
import fc from 'fast-check';
import { mkdtempSync, rmSync } from 'node:fs';
import type { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { deflateSync } from 'node:zlib';
import { CLIPBOARD_MAX_BYTES } from '../../src/compute/machine-display';
import { ENCODING_DESKTOP_SIZE, ENCODING_EXTENDED_CLIPBOARD, ENCODING_QEMU_EXTENDED_KEY, ENCODING_RAW, RFB_MAX_BUFFERED, RfbClient } from '../../src/compute/rfb-client';
import { RfbReader } from '../../src/compute/rfb-reader';
import { encodeScreen } from '../../src/media/screen-encoding';
import { standInServer, type StandInServer } from '../support/stand-in-server';

/** KISTE_FUZZ_SCALE=50 for a deeper run. */
const SCALE = Number(process.env.KISTE_FUZZ_SCALE ?? 1);
const runs = (n: number) => ({ numRuns: Math.round(n * SCALE) });

const dir = mkdtempSync(join(tmpdir(), 'krfb-hostile-'));
let servers = 0;

function serverInit(width: number, height: number, name = 'kiste-screen'): Buffer {
  const init = Buffer.alloc(24);
  init.writeUInt16BE(width, 0);
  init.writeUInt16BE(height, 2);
  init.writeUInt8(32, 4); // the pixel format the server offers (the client sets its own)
  init.writeUInt32BE(Buffer.byteLength(name), 20);
  return Buffer.concat([init, Buffer.from(name)]);
}

/**
 * A stand-in VNC server: a valid 3.8 handshake with `init`, then `after(socket)`. What the client
 * sends after the handshake (pixel format, encodings, requests) is read and ignored.
 */
async function vncServer(after: (socket: Socket) => void, init = serverInit(64, 48)): Promise<StandInServer> {
  return standInServer(join(dir, `vnc-${servers++}.sock`), (socket) => {
    let received = 0;
    let step = 0;
    socket.write('RFB 003.008\n');
    socket.on('data', (chunk) => {
      received += chunk.length;
      // client version (12), chosen security type (1), ClientInit (1)
      if (step === 0 && received >= 12) {
        step = 1;
        socket.write(Buffer.from([1, 1]));
      }
      if (step === 1 && received >= 13) {
        step = 2;
        socket.write(Buffer.from([0, 0, 0, 0]));
      }
      if (step === 2 && received >= 14) {
        step = 3;
        socket.write(init);
        after(socket);
      }
    });
  });
}

async function socketTo(path: string): Promise<Socket> {
  const { connect } = await import('node:net');
  return new Promise((resolve, reject) => {
    const socket = connect(path, () => resolve(socket));
    socket.once('error', reject);
  });
}

/** Connects, lets the server send `bytes` and end, and resolves once the client has ended too. */
async function session(bytes: Buffer, init?: Buffer): Promise<{ client: RfbClient; maxBuffered: number; cutTexts: string[]; warnings: string[] }> {
  const server = await vncServer((socket) => socket.end(bytes), init);
  const warnings: string[] = [];
  try {
    const client = await RfbClient.connect(await socketTo(server.path), { logger: { warn: (object, message) => warnings.push(`${message} ${JSON.stringify(object)}`) } });
    const cutTexts: string[] = [];
    client.onCutText = (text) => cutTexts.push(text);
    let maxBuffered = 0;
    const sampler = setInterval(() => (maxBuffered = Math.max(maxBuffered, client.bufferedBytes)), 1);
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('the client did not end after the server did')), 10_000);
      client.onClose(() => {
        clearTimeout(timer);
        resolve();
      });
    });
    clearInterval(sampler);
    return { client, maxBuffered, cutTexts, warnings };
  } finally {
    await server.close();
  }
}

// Valid server messages for a 64x48 screen, and their bytes.
type Message =
  | { kind: 'raw'; x: number; y: number; w: number; h: number }
  | { kind: 'size'; w: number; h: number }
  | { kind: 'key' }
  | { kind: 'bell' }
  | { kind: 'colours'; count: number }
  | { kind: 'text'; text: string }
  | { kind: 'clipboard'; text: string };

function encode(message: Message): Buffer {
  const rect = (x: number, y: number, w: number, h: number, encoding: number, body = Buffer.alloc(0)): Buffer => {
    const header = Buffer.alloc(16);
    header.writeUInt16BE(1, 2);
    header.writeUInt16BE(x, 4);
    header.writeUInt16BE(y, 6);
    header.writeUInt16BE(w, 8);
    header.writeUInt16BE(h, 10);
    header.writeInt32BE(encoding, 12);
    return Buffer.concat([header, body]);
  };
  switch (message.kind) {
    case 'raw':
      return rect(message.x, message.y, message.w, message.h, ENCODING_RAW, Buffer.alloc(message.w * message.h * 4, 0x7f));
    case 'size':
      return rect(0, 0, message.w, message.h, ENCODING_DESKTOP_SIZE);
    case 'key':
      return rect(0, 0, 64, 48, ENCODING_QEMU_EXTENDED_KEY);
    case 'bell':
      return Buffer.from([2]);
    case 'colours': {
      const header = Buffer.alloc(6);
      header.writeUInt8(1, 0);
      header.writeUInt16BE(message.count, 4);
      return Buffer.concat([header, Buffer.alloc(message.count * 6)]);
    }
    case 'text': {
      const text = Buffer.from(message.text, 'latin1');
      const header = Buffer.alloc(8);
      header.writeUInt8(3, 0);
      header.writeInt32BE(text.length, 4);
      return Buffer.concat([header, text]);
    }
    case 'clipboard': {
      const text = Buffer.from(`${message.text}\0`, 'utf8');
      const length = Buffer.alloc(4);
      length.writeUInt32BE(text.length, 0);
      const payload = deflateSync(Buffer.concat([length, text]));
      const header = Buffer.alloc(12);
      header.writeUInt8(3, 0);
      header.writeInt32BE(-(payload.length + 4), 4);
      header.writeUInt32BE(((1 << 28) | 1) >>> 0, 8);
      return Buffer.concat([header, payload]);
    }
  }
}

/** Stays within the 64x48 screen: a DesktopSize only to the same size, so later rectangles stay inside. */
const validMessage: fc.Arbitrary<Message> = fc.oneof(
  fc.record({ x: fc.nat(63), y: fc.nat(47) }).chain(({ x, y }) => fc.record({ kind: fc.constant('raw' as const), x: fc.constant(x), y: fc.constant(y), w: fc.nat(64 - x), h: fc.nat(48 - y) })),
  fc.constant<Message>({ kind: 'size', w: 64, h: 48 }),
  fc.constant<Message>({ kind: 'key' }),
  fc.constant<Message>({ kind: 'bell' }),
  fc.record({ kind: fc.constant('colours' as const), count: fc.nat(16) }),
  fc.record({ kind: fc.constant('text' as const), text: fc.string({ maxLength: 40 }).map((s) => s.replace(/[^\x20-\x7e]/g, '')) }),
  fc.record({ kind: fc.constant('clipboard' as const), text: fc.string({ maxLength: 40 }) }),
);

/** Byte-level mutations of a valid stream: overwritten bytes, a cut, an insertion. */
type Mutation = { kind: 'set'; at: number; value: number } | { kind: 'cut'; at: number; length: number } | { kind: 'insert'; at: number; bytes: Uint8Array };
const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({ kind: fc.constant('set' as const), at: fc.nat(), value: fc.integer({ min: 0, max: 255 }) }),
  fc.record({ kind: fc.constant('cut' as const), at: fc.nat(), length: fc.nat(16) }),
  fc.record({ kind: fc.constant('insert' as const), at: fc.nat(), bytes: fc.uint8Array({ maxLength: 16 }) }),
);

function mutate(bytes: Buffer, mutations: Mutation[]): Buffer {
  let out = Buffer.from(bytes);
  for (const m of mutations) {
    const at = m.at % (out.length + 1);
    if (m.kind === 'set' && at < out.length) out[at] = m.value;
    if (m.kind === 'cut') out = Buffer.concat([out.subarray(0, at), out.subarray(at + m.length)]);
    if (m.kind === 'insert') out = Buffer.concat([out.subarray(0, at), Buffer.from(m.bytes), out.subarray(at)]);
  }
  return out;
}

function expectSane(result: { client: RfbClient; maxBuffered: number }): void {
  const { client } = result;
  expect(client.isClosed).toBe(true);
  expect(client.width).toBeGreaterThanOrEqual(1);
  expect(client.width).toBeLessThanOrEqual(2560);
  expect(client.height).toBeGreaterThanOrEqual(1);
  expect(client.height).toBeLessThanOrEqual(1600);
  expect(client.framebuffer.length).toBe(client.width * client.height * 4);
  expect(result.maxBuffered).toBeLessThanOrEqual(RFB_MAX_BUFFERED + 256 * 1024);
}

describe('RfbClient against a hostile server', () => {
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  test('valid messages never cost the link: pixels land, texts and clipboards arrive, the link ends only with the server', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(validMessage, { maxLength: 12 }), async (messages) => {
        const result = await session(Buffer.concat(messages.map(encode)));
        expectSane(result);
        expect(result.client.closedReason).not.toMatch(/protocol error/);
        expect(result.warnings).toEqual([]);
        const texts = messages.filter((m): m is Extract<Message, { text: string }> => m.kind === 'text' || m.kind === 'clipboard').map((m) => m.text);
        expect(result.cutTexts).toEqual(texts);
      }),
      runs(40),
    );
  }, 60_000);

  test('a server that resizes: the screen shrinks and grows, and pixels land in the new layout', async () => {
    const pixel = (x: number, y: number, w: number, h: number, value: number): Buffer => {
      const bytes = encode({ kind: 'raw', x, y, w, h });
      bytes.fill(value, 16);
      return bytes;
    };
    const stream = Buffer.concat([
      encode({ kind: 'size', w: 16, h: 8 }),
      pixel(15, 7, 1, 1, 0x11),
      encode({ kind: 'size', w: 2560, h: 1600 }),
      pixel(2559, 1599, 1, 1, 0x22),
    ]);
    const server = await vncServer((socket) => socket.write(stream));
    try {
      const client = await RfbClient.connect(await socketTo(server.path));
      const sizes: string[] = [];
      await new Promise<void>((resolve) => {
        client.onUpdate(() => {
          sizes.push(`${client.width}x${client.height}:${client.framebuffer.length}`);
          if (sizes.length === 1) expect(client.framebuffer.readUInt32LE((7 * 16 + 15) * 4)).toBe(0);
          if (sizes.length === 2) expect(client.framebuffer.readUInt32LE((7 * 16 + 15) * 4)).toBe(0x11111111);
          if (sizes.length === 4) resolve();
        });
      });
      expect(sizes).toEqual(['16x8:512', '16x8:512', '2560x1600:16384000', '2560x1600:16384000']);
      expect(client.framebuffer.readUInt32LE((1599 * 2560 + 2559) * 4)).toBe(0x22222222);
      expect(client.isClosed).toBe(false);
      client.close();
    } finally {
      await server.close();
    }
  });

  test('random bytes and mutated valid messages after the handshake: no throw, bounded, the client ends cleanly', async () => {
    const randomBytes = fc.uint8Array({ maxLength: 2048 }).map((bytes) => Buffer.from(bytes));
    const mutated = fc.tuple(fc.array(validMessage, { minLength: 1, maxLength: 8 }), fc.array(mutation, { minLength: 1, maxLength: 4 })).map(([messages, mutations]) => mutate(Buffer.concat(messages.map(encode)), mutations));
    await fc.assert(
      fc.asyncProperty(fc.oneof(randomBytes, mutated), async (bytes) => expectSane(await session(bytes))),
      runs(120),
    );
  }, 60_000);

  test('a screen larger than the display device is refused: at the handshake, by DesktopSize, or by a rectangle', async () => {
    const huge = await vncServer(() => undefined, serverInit(4096, 4096));
    try {
      await expect(RfbClient.connect(await socketTo(huge.path))).rejects.toThrow(/RFB protocol error: RFB ServerInit/);
    } finally {
      await huge.close();
    }
    const resized = await session(encode({ kind: 'size', w: 2561, h: 1600 }));
    expect(resized.client.closedReason).toMatch(/protocol error: RFB rectangle/);
    expect(resized.client.width).toBe(64);
    const outside = await session(encode({ kind: 'raw', x: 60, y: 0, w: 8, h: 1 }));
    expect(outside.client.closedReason).toMatch(/protocol error: rectangle 8x1\+60\+0 outside the 64x48 screen/);
  });

  test('a cut text past the clipboard bound is skipped unread and dropped; a flood of them costs the link', async () => {
    const long = encode({ kind: 'text', text: 'x'.repeat(CLIPBOARD_MAX_BYTES + 1) });
    const bomb = (() => {
      // 32 MiB of zeros compress to about 32 KiB: inflating it stops at the clipboard bound
      const payload = deflateSync(Buffer.alloc(32 * 1024 * 1024));
      const header = Buffer.alloc(12);
      header.writeUInt8(3, 0);
      header.writeInt32BE(-(payload.length + 4), 4);
      header.writeUInt32BE(((1 << 28) | 1) >>> 0, 8);
      return Buffer.concat([header, payload]);
    })();
    const once = await session(Buffer.concat([long, bomb, encode({ kind: 'text', text: 'after' })]));
    expectSane(once);
    expect(once.cutTexts).toEqual(['after']);
    expect(once.client.closedReason).not.toMatch(/protocol error/);
    expect(once.warnings).toHaveLength(2);

    // 1 MiB cut texts, 21 of them: skipped as they stream, never held; the 20th costs the link
    const header = Buffer.alloc(8);
    header.writeUInt8(3, 0);
    header.writeInt32BE(1024 * 1024, 4);
    const text = Buffer.concat([header, Buffer.alloc(1024 * 1024, 0x78)]);
    const flood = await session(Buffer.concat(Array.from({ length: 21 }, () => text)));
    expectSane(flood);
    expect(flood.client.closedReason).toMatch(/protocol error: the server kept sending values that do not fit/);
    expect(flood.cutTexts).toEqual([]);
  }, 30_000);

  test('a server that says nothing cannot hang the handshake', async () => {
    const { createServer: create } = await import('node:net');
    const path = join(dir, 'silent.sock');
    const silent = create((socket) => socket.on('error', () => undefined));
    await new Promise<void>((resolve) => silent.listen(path, resolve));
    try {
      const socket = await socketTo(path);
      await expect(RfbClient.connect(socket, { handshakeTimeoutMs: 200 })).rejects.toThrow(/no handshake within 200 ms/);
      expect(socket.destroyed).toBe(true);
    } finally {
      await new Promise((resolve) => silent.close(resolve));
    }
  });

  test('the reader pauses a stream that delivers more than its bound and reads it all once drained', async () => {
    const stream = new PassThrough();
    const reader = new RfbReader(stream, 64 * 1024);
    const chunk = Buffer.alloc(16 * 1024, 1);
    let written = 0;
    for (let accepted = true; accepted && written < 64 * chunk.length; written += chunk.length) accepted = stream.write(chunk);
    await new Promise((resolve) => setImmediate(resolve));
    expect(stream.isPaused()).toBe(true);
    expect(reader.buffered).toBeLessThanOrEqual(64 * 1024 + chunk.length);
    expect(written).toBeLessThan(64 * chunk.length); // the writer was told to wait
    await expect(reader.read(64 * 1024 + 1)).rejects.toThrow(/out of bounds/);
    stream.end();
    await reader.skip(written - 16); // resumes the stream as it drains
    expect(stream.isPaused()).toBe(false);
    expect((await reader.read(16)).equals(Buffer.alloc(16, 1))).toBe(true);
    await expect(reader.read(1)).rejects.toThrow(/ended/);
  });

  test('a screen that resizes in a loop starts no encoder before the viewer is there, then at most one a second', async () => {
    // Each round: a new size, then pixels of it (what QEMU sends after a guest's xrandr).
    let wide = false;
    const server = await vncServer((socket) => {
      const flood = setInterval(() => {
        if (socket.destroyed) return clearInterval(flood);
        wide = !wide;
        const w = wide ? 80 : 64;
        socket.write(Buffer.concat([encode({ kind: 'size', w, h: 48 }), encode({ kind: 'raw', x: 0, y: 0, w, h: 48 })]));
      }, 20);
      socket.once('close', () => clearInterval(flood));
    });
    let started = 0;
    let left = 0;
    const placement = () => {
      started++;
      return { wrap: (command: string, args: string[]) => ({ command, args }), left: () => void left++ };
    };
    const endings: string[] = [];
    try {
      const video = await encodeScreen(await socketTo(server.path), { accountId: 'acct-1', fps: 30, kbps: 200 }, { onRtp: () => undefined, onSize: () => undefined, onEnded: (reason) => endings.push(reason) }, { encoders: { placement } });
      await new Promise((resolve) => setTimeout(resolve, 1000));
      expect(started).toBe(0);
      video.start();
      await new Promise((resolve) => setTimeout(resolve, 3500));
      // The first at start, then one a second at most while the size keeps changing (50 changes a second).
      expect(started).toBeGreaterThanOrEqual(2);
      expect(started).toBeLessThanOrEqual(5);
      video.close();
      for (const deadline = Date.now() + 5000; left < started && Date.now() < deadline; ) await new Promise((resolve) => setTimeout(resolve, 50));
      expect(left).toBe(started); // every encoder's place given back
      expect(endings).toEqual([]);
    } finally {
      await server.close();
    }
  });
});
