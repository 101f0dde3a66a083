// The framing of agent/PROTOCOL.md: any chunking decodes to the same frames; the sync pattern
// never appears inside a well-formed stream (not even across frames); and a stream that starts
// with garbage or a stale fragment of a frame recovers at the next SYNC.
import fc from 'fast-check';
import {
  CreditReceiver,
  decodeOutput,
  decodeSync,
  encodeClose,
  encodeFrame,
  encodeJson,
  encodeOutputHead,
  encodeRawData,
  encodeSync,
  encodeWindow,
  Frame,
  FrameDecoder,
  FrameKind,
  HEADER_BYTES,
  MAX_DATA_CHUNK,
  OUTPUT_HEADER_BYTES,
  OutputStreamName,
  SYNC_CHANNEL,
  SYNC_FRAME_BYTES,
  SYNC_PAD,
  SYNC_PATTERN,
  SyncPhase,
  syncSafeLength,
} from '../../src/protocol/agent';

/** KISTE_FUZZ_SCALE=50 for a deeper run. */
const SCALE = Number(process.env.KISTE_FUZZ_SCALE ?? 1);
const runs = (n: number) => ({ numRuns: Math.round(n * SCALE) });

interface Decoded {
  kind: number;
  channel: number;
  payload: string;
}

function decodeAll(bytes: Buffer, cuts: number[], scanning = false): Decoded[] {
  const out: Decoded[] = [];
  const decoder = new FrameDecoder((f: Frame) => out.push({ kind: f.kind, channel: f.channel, payload: f.payload.toString('hex') }), undefined, scanning);
  let at = 0;
  for (const cut of [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b)) {
    decoder.push(bytes.subarray(at, cut));
    at = cut;
  }
  decoder.push(bytes.subarray(at));
  return out;
}

/** The SYNC frame inside encodeSync's bytes (pad, frame, pad, frame). */
function syncFrame(bytes: Buffer): Buffer {
  return bytes.subarray(SYNC_PAD, SYNC_PAD + SYNC_FRAME_BYTES);
}

function asDecoded(frames: Buffer[]): Decoded[] {
  return frames.map((f) => ({ kind: f[4], channel: f.readUInt32BE(5), payload: f.subarray(HEADER_BYTES).toString('hex') }));
}

/** Exec output the way the agent cuts it (agent/src/exec.ts flush). */
function outputFrames(channel: number, stream: OutputStreamName, firstSequence: number, data: Buffer): Buffer[] {
  const frames: Buffer[] = [];
  let sequence = firstSequence;
  let rest = data;
  while (rest.length > 0) {
    let piece = rest.subarray(0, MAX_DATA_CHUNK);
    let head = encodeOutputHead(channel, stream, sequence, piece.length);
    const safe = syncSafeLength(head, piece);
    piece = piece.subarray(0, safe);
    head = encodeOutputHead(channel, stream, sequence, piece.length);
    frames.push(Buffer.concat([head, piece]));
    sequence += 1;
    rest = rest.subarray(piece.length);
  }
  return frames;
}

// Payloads built to provoke the pattern: random bytes mixed with pieces of the pattern itself.
const patternPiece = fc.tuple(fc.nat(SYNC_PATTERN.length), fc.nat(SYNC_PATTERN.length)).map(([a, b]) => SYNC_PATTERN.subarray(Math.min(a, b), Math.max(a, b)));
const nastyBytes = fc
  .array(fc.oneof(fc.uint8Array({ maxLength: 40 }).map((a) => Buffer.from(a)), patternPiece, fc.constant(SYNC_PATTERN), fc.constant(Buffer.alloc(5))), { maxLength: 8 })
  .map((parts) => Buffer.concat(parts));
const channelId = fc.oneof(fc.integer({ min: 1, max: 40 }), fc.constantFrom(0x16, 0x1607, 0x160700, 0x07ffffff, 0xfffffffe, 0xf09f93a6));

const frameArb: fc.Arbitrary<Buffer[]> = fc.oneof(
  fc.record({ id: fc.nat(), method: fc.string(), params: fc.dictionary(fc.string(), fc.jsonValue()) }).map((m) => [encodeJson(FrameKind.REQUEST, 0, m)]),
  fc.record({ id: fc.nat(), result: fc.jsonValue() }).map((m) => [encodeJson(FrameKind.RESPONSE, 0, m)]),
  fc.tuple(channelId, fc.string()).map(([ch, ev]) => [encodeJson(FrameKind.EVENT, ch, { event: ev, data: null })]),
  fc.tuple(channelId, nastyBytes).map(([ch, data]) => encodeRawData(ch, data).map((parts) => Buffer.concat(parts))),
  fc.tuple(channelId, fc.constantFrom<OutputStreamName>('stdout', 'stderr'), fc.oneof(fc.nat(1000), fc.constantFrom(0x16, 0x1607ff, 0xffffffff, 2 ** 40)), nastyBytes).map(
    ([ch, stream, seq, data]) => outputFrames(ch, stream, seq, data),
  ),
  fc.tuple(channelId, fc.nat({ max: 0xffffffff })).map(([ch, n]) => [encodeWindow(ch, n)]),
  fc.tuple(channelId, fc.string({ maxLength: 30 })).map(([ch, reason]) => [encodeClose(ch, reason)]),
);

describe('framing', () => {
  test('any chunking decodes to the frames sent', () => {
    fc.assert(
      fc.property(fc.array(frameArb, { maxLength: 25 }), fc.array(fc.nat(), { maxLength: 30 }), (groups, cuts) => {
        const frames = groups.flat();
        const bytes = Buffer.concat(frames);
        expect(decodeAll(bytes, cuts)).toEqual(asDecoded(frames));
      }),
      runs(400),
    );
  });

  test('the sync pattern never occurs in a stream without SYNC frames, not even across frames', () => {
    fc.assert(
      fc.property(fc.array(frameArb, { maxLength: 25 }), (groups) => {
        expect(Buffer.concat(groups.flat()).indexOf(SYNC_PATTERN)).toBe(-1);
      }),
      runs(1000),
    );
  });

  test('cut DATA still carries every byte, in order', () => {
    fc.assert(
      fc.property(nastyBytes, fc.nat(50), (data, channel) => {
        const raw = Buffer.concat(encodeRawData(channel, data).map((parts) => Buffer.concat(parts).subarray(HEADER_BYTES)));
        expect(raw.equals(data)).toBe(true);
        const frames = outputFrames(channel, 'stdout', 7, data);
        const chunks = frames.map((f) => decodeOutput(f.subarray(HEADER_BYTES))!);
        expect(Buffer.concat(chunks.map((c) => c.data)).equals(data)).toBe(true);
        expect(chunks.map((c) => c.sequence)).toEqual(chunks.map((_, i) => 7 + i));
      }),
      runs(100),
    );
  });

  test('garbage before a SYNC is skipped in scanning mode', () => {
    fc.assert(
      fc.property(nastyBytes, fc.array(frameArb, { maxLength: 10 }), fc.array(fc.nat(), { maxLength: 20 }), (garbage, groups, cuts) => {
        fc.pre(garbage.indexOf(SYNC_PATTERN) < 0);
        const frames = groups.flat();
        const sync = encodeSync(SyncPhase.SYNC_OK, '0123456789abcdef');
        const decoded = decodeAll(Buffer.concat([garbage, sync, ...frames]), cuts, true);
        expect(decoded).toEqual(asDecoded([syncFrame(sync), syncFrame(sync), ...frames]));
      }),
      runs(400),
    );
  });

  test('a stale fragment of a frame, however much of it is missing, gives way to the next SYNC', () => {
    fc.assert(
      fc.property(
        fc.oneof(fc.integer({ min: 1, max: 200 }), fc.integer({ min: 1, max: 200_000 })),
        // How many bytes of it never came; small values hit the pad and the first SYNC copy.
        fc.oneof(fc.integer({ min: 1, max: 120 }), fc.nat()),
        fc.array(frameArb, { maxLength: 10 }),
        fc.array(fc.nat(), { maxLength: 20 }),
        (payloadLength, missingSeed, groups, cuts) => {
          // A frame that was cut off after `sent` bytes (the host died, the VM was paused)...
          const stale = encodeFrame(FrameKind.DATA, 3, Buffer.alloc(payloadLength, 0x41));
          const sent = stale.length - 1 - (missingSeed % (stale.length - 1));
          const frames = groups.flat();
          const sync = encodeSync(SyncPhase.SYNC, 'fedcba9876543210');
          // ...then the next host's SYNC, with a decoder that was NOT told about the reconnect.
          const decoded = decodeAll(Buffer.concat([stale.subarray(0, sent), sync, ...frames]), cuts, false);
          const first = decoded.findIndex((d) => d.kind === FrameKind.SYNC);
          const last = decoded.map((d) => d.kind).lastIndexOf(FrameKind.SYNC);
          expect(first).toBeGreaterThanOrEqual(0);
          // Before the SYNC there is at most the stale frame, completed by the zero pad.
          expect(first).toBeLessThanOrEqual(1);
          expect(decoded.slice(first, last + 1).every((d) => d.payload === asDecoded([syncFrame(sync)])[0].payload)).toBe(true);
          expect(decoded.slice(last + 1)).toEqual(asDecoded(frames));
        },
      ),
      runs(400),
    );
  });

  test('a fragment that swallows the start of the first SYNC copy still syncs on the second, byte by byte', () => {
    for (let missing = 1; missing <= 2 * (SYNC_PAD + SYNC_FRAME_BYTES); missing += 1) {
      const stale = encodeFrame(FrameKind.DATA, 3, Buffer.alloc(100, 0x41)).subarray(0, HEADER_BYTES + 100 - missing);
      const sync = encodeSync(SyncPhase.SYNC, '1111111111111111');
      const bytes = Buffer.concat([stale, sync, encodeWindow(4, 9)]);
      const decoded = decodeAll(bytes, Array.from({ length: bytes.length }, (_, i) => i));
      expect(decoded.filter((d) => d.kind === FrameKind.SYNC).length).toBeGreaterThanOrEqual(1);
      expect(decoded[decoded.length - 1]).toEqual(asDecoded([encodeWindow(4, 9)])[0]);
    }
  });

  test('invalid headers send the decoder scanning for the next SYNC', () => {
    const out: Frame[] = [];
    const decoder = new FrameDecoder((f) => out.push(f));
    const bad = Buffer.from([0, 0, 0, 9, 99, 0, 0, 0, 0, 1, 2, 3, 4]); // kind 99
    const huge = Buffer.from([0x7f, 0, 0, 0, 1, 0, 0, 0, 0]); // 2 GiB
    decoder.push(Buffer.concat([bad, huge, encodeWindow(1, 5)]));
    expect(out).toHaveLength(0);
    decoder.push(encodeSync(SyncPhase.ANNOUNCE, '00000000000000ff'));
    decoder.push(encodeWindow(2, 7));
    expect(out.map((f) => [f.kind, f.channel])).toEqual([
      [FrameKind.SYNC, SYNC_CHANNEL],
      [FrameKind.SYNC, SYNC_CHANNEL],
      [FrameKind.WINDOW, 2],
    ]);
    expect(decodeSync(out[0])).toEqual({ phase: SyncPhase.ANNOUNCE, nonce: '00000000000000ff' });
    expect(decoder.stats.droppedBytes).toBeGreaterThan(0);
  });

  test('a long frame arriving in small pieces is joined once', () => {
    const payload = Buffer.alloc(3 * 1024 * 1024, 7);
    const frame = encodeFrame(FrameKind.REQUEST, 0, payload);
    const out: Frame[] = [];
    const decoder = new FrameDecoder((f) => out.push(f));
    const started = performance.now();
    for (let i = 0; i < frame.length; i += 1000) decoder.push(frame.subarray(i, i + 1000));
    expect(out).toHaveLength(1);
    expect(out[0].payload.equals(payload)).toBe(true);
    // Joining on every piece would copy ~4.7 GB here.
    expect(performance.now() - started).toBeLessThan(2000);
  });

  test('credit is returned in batches of a quarter window', () => {
    const receiver = new CreditReceiver(1000);
    expect(receiver.consumed(100)).toBe(0);
    expect(receiver.consumed(100)).toBe(0);
    expect(receiver.consumed(100)).toBe(300);
    expect(receiver.consumed(249)).toBe(0);
    expect(receiver.consumed(1)).toBe(250);
  });

  test('output chunk header round trip', () => {
    const head = encodeOutputHead(9, 'stderr', 2 ** 40 + 5, 3);
    const chunk = decodeOutput(Buffer.concat([head.subarray(HEADER_BYTES), Buffer.from('abc')]))!;
    expect(chunk).toEqual({ stream: 'stderr', sequence: 2 ** 40 + 5, data: Buffer.from('abc') });
    expect(head.length).toBe(HEADER_BYTES + OUTPUT_HEADER_BYTES);
  });
});
