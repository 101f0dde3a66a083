// A guest that stops reading its port (issue 21): it opened channels with all the credit the
// protocol allows and reads nothing more, while tenants push bytes into its SSH tunnels. What the
// service holds for it stays under the link's bound (LinkWriter: the socket's write buffer plus
// each stream's own), requests still go out until even they would pass it, and a WINDOW that
// would give more credit than the channel's window is a protocol error of that channel.
import type { Duplex } from 'node:stream';
import * as net from 'node:net';
import { AgentCallError, AgentClient } from '../../src/compute/agent-client';
import { encodeJson, encodeWindow, FrameKind, MAX_PAYLOAD, MAX_WINDOW } from '../../src/protocol/agent';
import { DATA_HOLD_BYTES, LINK_HOLD_BYTES } from '../../src/compute/agent/link-writer';
import { HONEST, StandInAgent } from './stand-in-agent';

jest.setTimeout(60_000);

const MiB = 1024 * 1024;
const CHANNELS = 8;

let agent: StandInAgent;
let client: AgentClient;
let socket: net.Socket | null = null;
let nextChannel = 1;

beforeEach(async () => {
  agent = await StandInAgent.start();
  agent.answer = (request, a) => {
    // As much credit as the protocol allows, on every channel.
    if (request.method === 'tcp.open') return { channel: nextChannel++, window_bytes: MAX_WINDOW };
    return HONEST(request, a);
  };
  client = new AgentClient({
    connect: () => (socket = net.createConnection(agent.socketPath)),
    requestTimeoutMs: 5000,
    reconnectMinMs: 5,
    reconnectMaxMs: 20,
  });
  await client.start();
});

afterEach(async () => {
  client.close();
  await agent.close();
});

/** Writes `total` bytes as a producer does (waiting for each write's callback); resolves with what was accepted. */
function produce(stream: Duplex, total: number, stop: () => boolean): { accepted: () => number; done: Promise<void> } {
  let accepted = 0;
  const chunk = Buffer.alloc(256 * 1024, 7);
  const done = (async () => {
    while (!stop() && accepted < total) {
      await new Promise<void>((resolve, reject) => stream.write(chunk, (e) => (e ? reject(e) : resolve())));
      accepted += chunk.length;
    }
  })();
  return { accepted: () => accepted, done };
}

test('a guest that does not read: the service holds at most the link bound, whatever the tenants push', async () => {
  const streams = await Promise.all(Array.from({ length: CHANNELS }, () => client.openTcp(22)));
  for (const stream of streams) stream.on('error', () => undefined); // closing the client at the end fails them
  agent.socket!.pause(); // the guest stops reading
  let stop = false;
  // 8 channels x 16 MiB of credit: 128 MiB the guest said it would take.
  const producers = streams.map((stream) => produce(stream, MAX_WINDOW, () => stop));
  let held = 0;
  const holding = () => socket!.writableLength + streams.reduce((n, s) => n + s.writableLength, 0);
  const deadline = Date.now() + 3000;
  while (Date.now() < deadline) {
    held = Math.max(held, holding());
    await new Promise((r) => setTimeout(r, 5));
  }
  const accepted = producers.reduce((n, p) => n + p.accepted(), 0);
  console.log(`guest not reading: producers got ${(accepted / MiB).toFixed(1)} MiB accepted of ${(CHANNELS * MAX_WINDOW) / MiB} MiB; the service held at most ${(held / MiB).toFixed(2)} MiB`);
  // The stream data bound, one piece over it, and each stream's own small buffer (16 KiB + a chunk).
  expect(held).toBeLessThan(DATA_HOLD_BYTES + CHANNELS * 320 * 1024);
  expect(accepted).toBeLessThan(8 * MiB); // the kernel's socket buffers and ours, not 128 MiB

  // Requests still go out while stream data waits, even one of the largest size...
  const padded = (epoch: number) => ({ epoch_ms: epoch, padding: 'x'.repeat(MAX_PAYLOAD - 1000) }) as never;
  const small = client.setTime(5, { timeoutMs: 10_000 });
  const large = client.request('time.set', padded(6), { timeoutMs: 10_000 });
  // ...until one would pass the link's bound: that one fails at once, the link stays.
  await expect(client.request('time.set', padded(7), { timeoutMs: 10_000 })).rejects.toMatchObject({ code: 'stalled' });
  expect(socket!.writableLength).toBeLessThanOrEqual(LINK_HOLD_BYTES);
  expect(client.connected).toBe(true);

  // The guest reads again: everything flows, nothing was lost.
  let received = 0;
  agent.streamFrame = (frame) => {
    if (frame.kind === FrameKind.DATA) received += frame.payload.length;
  };
  agent.socket!.resume();
  expect(await small).toEqual({ previous_epoch_ms: 1, epoch_ms: 5 });
  expect(await large).toEqual({ previous_epoch_ms: 1, epoch_ms: 6 });
  stop = true;
  await Promise.all(producers.map((p) => p.done));
  const total = producers.reduce((n, p) => n + p.accepted(), 0);
  const deadlineAll = Date.now() + 20_000;
  while (received < total && Date.now() < deadlineAll) await new Promise((r) => setTimeout(r, 20));
  expect(received).toBe(total);
});

test('a WINDOW past the channel window is a protocol error of that channel, not more credit', async () => {
  const stream = await client.openTcp(22);
  const error = new Promise<Error>((resolve) => stream.once('error', resolve));
  const opened = nextChannel - 1;
  agent.send(encodeWindow(opened, 0xffffffff)); // "4 GiB more": the guest has 16 MiB at most
  const failed = await error;
  expect(failed).toBeInstanceOf(AgentCallError);
  expect((failed as AgentCallError).code).toBe('protocol');
  // The channel is closed towards the guest; the link and other calls go on.
  expect(await client.setTime(9)).toEqual({ previous_epoch_ms: 1, epoch_ms: 9 });

  // The same WINDOW in the bytes right behind the answer, before the caller holds the stream:
  // the open fails (nothing is emitted into the void, which would throw).
  agent.answer = (request, a) => {
    if (request.method !== 'tcp.open') return HONEST(request, a);
    a.send(Buffer.concat([encodeJson(FrameKind.RESPONSE, 0, { id: request.id, result: { channel: 99, window_bytes: MAX_WINDOW } }), encodeWindow(99, 0xffffffff)]));
    return undefined;
  };
  await expect(client.openTcp(22)).rejects.toMatchObject({ code: 'protocol' });
  expect(await client.setTime(10)).toEqual({ previous_epoch_ms: 1, epoch_ms: 10 });
});
