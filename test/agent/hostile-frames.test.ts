// Hostile guests against the host side of the agent link (issue 21). Root in a guest can stop the
// agent and write anything to the port: random bytes, valid headers with JSON of any shape (null,
// arrays, huge or foreign ids, wrong types), events for channels that are open, WINDOW with any
// increment, DATA and CLOSE for any channel, SYNC markers. Against a real AgentClient (a stand-in
// agent plays the guest): the process stays up (a throw in the socket's listener would fail the
// test as an uncaught error), every call in flight settles with a value of its declared shape or
// an AgentCallError, and once the agent is back (it announces itself, as a restarted agent does)
// the next call works. A flood costs bounded memory, and another machine's link keeps answering.
import fc from 'fast-check';
import { AgentCallError, AgentClient, ExecHandle } from '../../src/compute/agent-client';
import {
  encodeFrame,
  encodeHeader,
  encodeJson,
  encodeSync,
  encodeWindow,
  FrameDecoder,
  FrameKind,
  HEADER_BYTES,
  SYNC_PATTERN,
  SyncPhase,
} from '../../src/protocol/agent';
import { EVENT_SHAPES, RESULT_SHAPES } from '../../src/protocol/agent-shapes';
import { HONEST, StandInAgent, VALID_METRICS, type Request } from './stand-in-agent';

jest.setTimeout(120_000);

/** KISTE_FUZZ_SCALE=50 for a deeper run. */
const SCALE = Number(process.env.KISTE_FUZZ_SCALE ?? 1);

const PENDING = -777; // stands for the id of the request in flight
const OPEN_EXEC = -778; // stand for the channels the host has open
const OPEN_TCP = -779;

const json = fc.oneof(fc.constant(null), fc.constant([]), fc.constant(2 ** 64), fc.jsonValue({ maxDepth: 3 }));
const channel = fc.oneof(fc.constant(0), fc.constant(OPEN_EXEC), fc.constant(OPEN_TCP), fc.nat({ max: 0xffffffff }));
const id = fc.oneof(fc.constant(PENDING), fc.constant(PENDING), fc.integer(), fc.constant(2 ** 60), fc.double(), fc.string(), fc.constant(null));
const exitData = fc.record(
  {
    channel: fc.oneof(fc.constant(OPEN_EXEC), fc.integer()),
    status: fc.oneof(fc.constantFrom('exited', 'signaled', 'bogus'), json),
    exit_code: fc.oneof(fc.integer({ min: -1, max: 300 }), fc.double(), json),
    signal: fc.oneof(fc.constant(null), fc.integer(), json),
    duration_ms: fc.oneof(fc.nat(), fc.double(), json),
    stdout_bytes: fc.oneof(fc.nat(), json),
    stderr_bytes: fc.oneof(fc.nat(), json),
  },
  { requiredKeys: [] },
);

const item = fc.oneof(
  fc.record({ t: fc.constant('bytes' as const), bytes: fc.uint8Array({ maxLength: 300 }) }),
  fc.record({
    t: fc.constant('response' as const),
    body: fc.oneof(
      json,
      fc.record({ id, result: fc.oneof(json, fc.record({ channel, pid: fc.integer(), window_bytes: fc.integer() })), error: fc.oneof(json, fc.record({ code: fc.string(), message: json })) }, { requiredKeys: ['id'] }),
    ),
  }),
  fc.record({
    t: fc.constant('event' as const),
    channel,
    body: fc.oneof(json, fc.record({ event: fc.oneof(fc.constantFrom('ready', 'exec.exit'), fc.string()), data: fc.oneof(json, exitData) }, { requiredKeys: [] })),
  }),
  fc.record({ t: fc.constant('window' as const), channel, increment: fc.oneof(fc.nat({ max: 0xffffffff }), fc.constantFrom(0, 1, 0xffffffff)), short: fc.boolean() }),
  fc.record({ t: fc.constant('data' as const), channel, bytes: fc.uint8Array({ maxLength: 2000 }) }),
  fc.record({ t: fc.constant('close' as const), channel, bytes: fc.uint8Array({ maxLength: 100 }) }),
  fc.record({ t: fc.constant('sync' as const), phase: fc.constantFrom(SyncPhase.SYNC, SyncPhase.SYNC_OK, SyncPhase.ANNOUNCE), nonce: fc.uint8Array({ minLength: 8, maxLength: 8 }) }),
  fc.record({ t: fc.constant('header' as const), kind: fc.integer({ min: 0, max: 255 }), length: fc.nat({ max: 0xffffffff }), rest: fc.uint8Array({ maxLength: 64 }) }),
);
type Item = typeof item extends fc.Arbitrary<infer T> ? T : never;

interface Open {
  pendingId: number;
  execChannel: number;
  tcpChannel: number;
}

function resolvePlaceholders(value: unknown, open: Open): unknown {
  if (value === PENDING) return open.pendingId;
  if (value === OPEN_EXEC) return open.execChannel;
  if (value === OPEN_TCP) return open.tcpChannel;
  if (Array.isArray(value)) return value.map((v) => resolvePlaceholders(v, open));
  if (value && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, resolvePlaceholders(v, open)]));
  return value;
}

function encodeItem(it: Item, open: Open): Buffer {
  const ch = (c: number) => resolvePlaceholders(c, open) as number;
  const jsonBytes = (value: unknown) => Buffer.from(JSON.stringify(resolvePlaceholders(value, open)) ?? 'null', 'utf8');
  switch (it.t) {
    case 'bytes':
      return Buffer.from(it.bytes);
    case 'response':
      return encodeFrame(FrameKind.RESPONSE, 0, jsonBytes(it.body));
    case 'event':
      return encodeFrame(FrameKind.EVENT, ch(it.channel), jsonBytes(it.body));
    case 'window':
      return it.short ? encodeFrame(FrameKind.WINDOW, ch(it.channel), Buffer.from([1, 2])) : encodeWindow(ch(it.channel), it.increment);
    case 'data':
      return encodeFrame(FrameKind.DATA, ch(it.channel), Buffer.from(it.bytes));
    case 'close':
      return encodeFrame(FrameKind.CLOSE, ch(it.channel), Buffer.from(it.bytes));
    case 'sync':
      return encodeSync(it.phase, Buffer.from(it.nonce).toString('hex'));
    case 'header': {
      const header = Buffer.alloc(HEADER_BYTES);
      header.writeUInt32BE(it.length, 0);
      header.writeUInt8(it.kind, 4);
      return Buffer.concat([header, Buffer.from(it.rest)]);
    }
  }
}

function settleWithin<T>(promise: Promise<T>, ms: number, what: string): Promise<{ ok: true; value: T } | { ok: false; error: unknown }> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms`)), ms);
    promise.then(
      (value) => (clearTimeout(timer), resolve({ ok: true, value })),
      (error: unknown) => (clearTimeout(timer), resolve({ ok: false, error })),
    );
  });
}

/**
 * The link works again: a call is answered. One sent before the host read the agent's
 * announcement fails as 'disconnected' (retryable), as any call in flight during a restart does.
 */
async function answeredWithin(client: AgentClient, ms: number): Promise<unknown> {
  const deadline = Date.now() + ms;
  for (;;) {
    try {
      return await client.setTime(12345, { timeoutMs: Math.max(1, deadline - Date.now()) });
    } catch (error) {
      if (!(error instanceof AgentCallError && error.retryable) || Date.now() > deadline) throw error;
    }
  }
}

function expectAgentError(outcome: { ok: boolean; error?: unknown }): void {
  if (!outcome.ok) expect(outcome.error).toBeInstanceOf(AgentCallError);
}

describe('a hostile agent link', () => {
  let agent: StandInAgent;
  let client: AgentClient;
  let nextChannel = 10;

  beforeAll(async () => {
    agent = await StandInAgent.start();
    client = agent.client();
    await client.start();
  });

  afterAll(async () => {
    client?.close();
    await agent?.close();
  });

  /** A session with an exec (with stdin) and a tcp channel open and a metrics call waiting for its answer. */
  async function openSession(): Promise<{ open: Open; exec: ExecHandle; execDone: Promise<unknown>; metrics: Promise<unknown> }> {
    const execChannel = nextChannel++;
    const tcpChannel = nextChannel++;
    agent.answer = (request: Request, a) => {
      if (request.method === 'exec.start') return { channel: execChannel, pid: 100, window_bytes: 256 * 1024 };
      if (request.method === 'tcp.open') return { channel: tcpChannel, window_bytes: 256 * 1024 };
      if (request.method === 'metrics') return undefined; // answered (or not) by the garbage
      return HONEST(request, a);
    };
    await client.waitConnected(5000);
    const exec = await client.exec({ argv: ['cat'], stdin: true, timeout_ms: 0 });
    const execDone = (async () => {
      for await (const chunk of exec) void chunk;
      return exec.exit;
    })().catch((error: unknown) => error);
    exec.stdin!.write(Buffer.alloc(1000, 1));
    const tcp = await client.openTcp(22);
    tcp.on('error', () => undefined);
    tcp.resume();
    tcp.write(Buffer.alloc(1000, 2));
    const before = agent.requests.length;
    const metrics = client.metrics(10, { timeoutMs: 3000 });
    metrics.catch(() => undefined);
    const deadline = Date.now() + 2000;
    while (!agent.requests.slice(before).some((r) => r.method === 'metrics')) {
      if (Date.now() > deadline) throw new Error('metrics request never arrived');
      await new Promise((r) => setTimeout(r, 2));
    }
    const pendingId = agent.requests.slice(before).find((r) => r.method === 'metrics')!.id;
    return { open: { pendingId, execChannel, tcpChannel }, exec, execDone, metrics };
  }

  test('garbage never throws into the service; calls in flight settle with a declared shape or an error; the link recovers', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(item, { minLength: 1, maxLength: 40 }), async (items) => {
        const { open, execDone, metrics } = await openSession();
        agent.send(Buffer.concat(items.map((it) => encodeItem(it, open))));
        // The agent is back (a restarted agent announces itself): in-flight work fails, the session is new.
        agent.answer = HONEST;
        agent.send(encodeSync(SyncPhase.ANNOUNCE, '0102030405060708'));

        const sample = await settleWithin(metrics, 5000, 'the metrics call');
        if (sample.ok) expect(RESULT_SHAPES.metrics.parse(sample.value).ok).toBe(true);
        else expectAgentError(sample);
        const exit = await settleWithin(execDone, 5000, 'the exec');
        expect(exit.ok).toBe(true);
        const ended = (exit as { value: unknown }).value;
        if (!(ended instanceof AgentCallError)) expect(EVENT_SHAPES['exec.exit'].parse(ended).ok).toBe(true);

        expect(await answeredWithin(client, 5000)).toEqual({ previous_epoch_ms: 1, epoch_ms: 12345 });
      }),
      { numRuns: Math.round(60 * SCALE) },
    );
  });

  test('a link that keeps sending what does not fit is closed and reopened', async () => {
    await client.waitConnected(5000);
    const connectionsBefore = agent.connections;
    for (let i = 0; i < 30; i++) agent.send(encodeJson(FrameKind.RESPONSE, 0, null));
    const deadline = Date.now() + 5000;
    while (agent.connections === connectionsBefore) {
      if (Date.now() > deadline) throw new Error('the link was not reopened');
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(await answeredWithin(client, 5000)).toEqual({ previous_epoch_ms: 1, epoch_ms: 12345 });
  });

  test('an answer naming a channel that is still open fails that call; the open stream keeps its frames', async () => {
    await client.waitConnected(5000);
    agent.answer = (request, a) => (request.method === 'tcp.open' ? { channel: 41, window_bytes: 65536 } : HONEST(request, a));
    const first = await client.openTcp(22, undefined, { timeoutMs: 3000 });
    const got: Buffer[] = [];
    first.on('data', (chunk: Buffer) => got.push(chunk));
    // The guest answers the next opening with the same id: that opening fails, nothing is taken over.
    await expect(client.openTcp(80, undefined, { timeoutMs: 3000 })).rejects.toMatchObject({ code: 'bad_response' });
    agent.socket!.write(encodeFrame(FrameKind.DATA, 41, Buffer.from('still mine')));
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(Buffer.concat(got).toString()).toBe('still mine');
    expect(first.destroyed).toBe(false);
    first.destroy();
    agent.answer = HONEST;
  });

  test('answers that do not fit their method fail that call (bad_response), never pass a wrong type on', async () => {
    await client.waitConnected(5000);
    const cases: unknown[] = [
      { ...VALID_METRICS, disk: { total_mib: 1e999, used_mib: 0, available_mib: 0 } },
      { ...VALID_METRICS, disk: { total_mib: -5, used_mib: 0, available_mib: 0 } },
      { ...VALID_METRICS, cpu: { ...VALID_METRICS.cpu, percent: 'a lot' } },
      { ...VALID_METRICS, processes: [{ ...VALID_METRICS.processes[0], command: 'x'.repeat(100_000) }] },
      null,
      [],
    ];
    for (const result of cases) {
      agent.answer = (request, a) => (request.method === 'metrics' ? result : HONEST(request, a));
      await expect(client.metrics(10, { timeoutMs: 3000 })).rejects.toMatchObject({ code: 'bad_response' });
    }
    agent.answer = (request, a) => (request.method === 'time.set' ? { previous_epoch_ms: '1', epoch_ms: 2 } : HONEST(request, a));
    await expect(client.setTime(2, { timeoutMs: 3000 })).rejects.toMatchObject({ code: 'bad_response' });
    agent.answer = HONEST;
  });
});

test('a flood of frames costs bounded memory, and another machine keeps answering meanwhile', async () => {
  const hostile = await StandInAgent.start();
  const other = await StandInAgent.start();
  const hostileClient = hostile.client();
  const otherClient = other.client();
  try {
    await Promise.all([hostileClient.start(), otherClient.start()]);
    // Frames that are each allowed (late frames for closed channels are dropped, PROTOCOL.md), 128 MiB of them.
    const batch = Buffer.concat([
      ...Array.from({ length: 15 }, (_, i) => encodeFrame(FrameKind.DATA, 1000 + i, Buffer.alloc(64 * 1024, i))),
      ...Array.from({ length: 4000 }, (_, i) => encodeWindow(5000 + i, 0xffffffff)),
      ...Array.from({ length: 200 }, (_, i) => encodeFrame(FrameKind.CLOSE, 9000 + i, Buffer.alloc(1000, 0x41))),
    ]);
    const rounds = Math.ceil((128 * 1024 * 1024) / batch.length);
    const rssBefore = process.memoryUsage().rss;
    let rssMax = rssBefore;
    const latencies: number[] = [];
    let flooding = true;
    const probe = (async () => {
      while (flooding) {
        const started = Date.now();
        await otherClient.setTime(1, { timeoutMs: 5000 });
        latencies.push(Date.now() - started);
        rssMax = Math.max(rssMax, process.memoryUsage().rss);
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    for (let i = 0; i < rounds; i++) {
      const socket = hostile.socket!;
      if (!socket.write(batch)) await new Promise((r) => socket.once('drain', r));
      rssMax = Math.max(rssMax, process.memoryUsage().rss);
    }
    flooding = false;
    await probe;
    const stats = hostileClient.streamStats!;
    console.log(`flood: ${rounds} x ${(batch.length / 2 ** 20).toFixed(1)} MiB, ${stats.frames} frames; rss +${((rssMax - rssBefore) / 2 ** 20).toFixed(0)} MiB; other machine: ${latencies.length} calls, slowest ${Math.max(...latencies)} ms`);
    expect(hostileClient.connected).toBe(true); // nothing here breaks the protocol: the link stays
    expect(rssMax - rssBefore).toBeLessThan(96 * 1024 * 1024);
    expect(latencies.length).toBeGreaterThan(5);
    expect(Math.max(...latencies)).toBeLessThan(2000);
    expect(await hostileClient.setTime(3, { timeoutMs: 5000 })).toEqual({ previous_epoch_ms: 1, epoch_ms: 3 });
  } finally {
    hostileClient.close();
    otherClient.close();
    await Promise.all([hostile.close(), other.close()]);
  }
});

test('the frame decoder never holds more than one frame of the largest size, whatever arrives', () => {
  const maxPayload = 4096;
  fc.assert(
    fc.property(
      fc.array(
        fc.oneof(
          fc.uint8Array({ maxLength: 3000 }).map((b) => Buffer.from(b)),
          fc.record({ kind: fc.integer({ min: 1, max: 7 }), length: fc.nat({ max: maxPayload + 5 }) }).map(({ kind, length }) => encodeHeader(kind as FrameKind, 1, Math.max(0, length - 5))),
          fc.constant(SYNC_PATTERN),
          fc.constant(SYNC_PATTERN.subarray(0, 9)),
        ),
        { maxLength: 60 },
      ),
      (chunks) => {
        const decoder = new FrameDecoder(() => undefined, maxPayload, true);
        for (const chunk of chunks) {
          decoder.push(chunk);
          expect(decoder.buffered).toBeLessThanOrEqual(HEADER_BYTES + maxPayload + chunk.length);
        }
      },
    ),
    { numRuns: Math.round(300 * SCALE) },
  );
});
