// tcp.open through the real agent: an echo round trip, bulk both ways, half-close, and backpressure
// in each direction (a side that stops reading stops the other side's writer).
import { createHash, randomBytes } from 'node:crypto';
import * as net from 'node:net';
import type { Duplex } from 'node:stream';
import { AgentCallError, AgentClient } from '../../src/compute/agent-client';
import { AgentProcess, eventually, sleep } from './harness';

jest.setTimeout(30_000);

const WINDOW = 256 * 1024;

let agent: AgentProcess;
let client: AgentClient;
const servers: net.Server[] = [];

beforeAll(async () => {
  agent = await AgentProcess.start();
  client = agent.client({ windowBytes: WINDOW });
  await client.start();
});

afterAll(async () => {
  client?.close();
  for (const s of servers) s.close();
  await agent?.stop();
});

/**
 * The value once it stopped growing (the same over 500 ms), however long the flow took to fill the
 * buffers on a loaded host; the callers check that it stopped far below what was offered.
 */
async function settled(read: () => number, withinMs = 20_000): Promise<number> {
  const until = Date.now() + withinMs;
  let last = read();
  for (;;) {
    await sleep(500);
    const now = read();
    if (now === last || Date.now() > until) return now;
    last = now;
  }
}

async function listen(onConnection: (socket: net.Socket) => void): Promise<number> {
  const server = net.createServer((socket) => {
    socket.on('error', () => undefined); // resets when the agent drops a connection
    onConnection(socket);
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return (server.address() as net.AddressInfo).port;
}

function readAll(stream: Duplex): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => resolve(Buffer.concat(chunks)));
    stream.on('error', reject);
    stream.resume(); // a 'data' listener alone does not restart a stream that was paused explicitly
  });
}

test('echo round trip and half-close', async () => {
  const port = await listen((socket) => socket.pipe(socket));
  const stream = await client.openTcp(port);
  const received = readAll(stream);
  stream.write('hello ');
  stream.end('guest');
  expect((await received).toString()).toBe('hello guest');
  await eventually(() => stream.destroyed, 3000, 'stream to close');
});

test('bulk both ways at once (32 MiB through an echo server)', async () => {
  const port = await listen((socket) => socket.pipe(socket));
  const stream = await client.openTcp(port);
  const data = randomBytes(32 * 1024 * 1024);
  const started = performance.now();
  const received = readAll(stream);
  stream.end(data);
  const echoed = await received;
  const seconds = (performance.now() - started) / 1000;
  expect(echoed.length).toBe(data.length);
  expect(createHash('sha256').update(echoed).digest('hex')).toBe(createHash('sha256').update(data).digest('hex'));
  console.log(`tcp.open echo: ${((2 * data.length) / 1e6 / seconds).toFixed(1)} MB/s (both directions together)`);
});

test('guest → host backpressure: a paused reader stops the guest writer', async () => {
  let written = 0;
  let serverSocket: net.Socket | null = null;
  const port = await listen((socket) => {
    serverSocket = socket;
    const chunk = Buffer.alloc(64 * 1024, 1);
    const pump = () => {
      while (written < 64 * 1024 * 1024) {
        written += chunk.length;
        if (!socket.write(chunk)) return void socket.once('drain', pump);
      }
      socket.end();
    };
    pump();
  });
  const stream = await client.openTcp(port);
  stream.pause();
  const stalledAt = await settled(() => written);
  await sleep(300);
  expect(written).toBe(stalledAt);
  // One window on the host + the agent's held chunk + loopback socket buffers; far below 64 MiB.
  expect(stalledAt).toBeLessThan(16 * 1024 * 1024);
  expect(stream.readableLength).toBeLessThanOrEqual(WINDOW + 64 * 1024);
  // Reading resumes the flow: every byte arrives.
  expect((await readAll(stream)).length).toBe(64 * 1024 * 1024);
  expect(written).toBe(64 * 1024 * 1024);
  expect(serverSocket).not.toBeNull();
  console.log(`tcp backpressure: guest writer stalled after ${(stalledAt / 2 ** 20).toFixed(1)} MiB while the host read nothing`);
});

test('host → guest backpressure: a guest that does not read stops the host writer', async () => {
  let guest: net.Socket | null = null;
  let guestReceived = 0;
  const port = await listen((socket) => {
    guest = socket;
    socket.pause();
    socket.on('data', (c: Buffer) => (guestReceived += c.length));
  });
  const stream = await client.openTcp(port);
  let accepted = 0;
  const chunk = Buffer.alloc(64 * 1024, 2);
  let stop = false;
  const writer = (async () => {
    while (!stop && accepted < 64 * 1024 * 1024) {
      await new Promise<void>((resolve, reject) => stream.write(chunk, (e) => (e ? reject(e) : resolve())));
      accepted += chunk.length;
    }
  })();
  const stalledAt = await settled(() => accepted);
  await sleep(300);
  expect(accepted).toBe(stalledAt);
  expect(stalledAt).toBeLessThan(16 * 1024 * 1024);
  // Let the guest read: everything flows again.
  stop = true;
  await eventually(() => guest !== null);
  guest!.resume();
  await writer;
  stream.end();
  await eventually(() => guestReceived === accepted, 10_000, 'guest to receive everything');
  console.log(`tcp backpressure: host writer stalled after ${(stalledAt / 2 ** 20).toFixed(1)} MiB while the guest read nothing`);
});

test('the guest closing ends the stream; a closed port is connect_failed', async () => {
  const port = await listen((socket) => socket.end('bye'));
  const stream = await client.openTcp(port);
  expect((await readAll(stream)).toString()).toBe('bye');

  const closed = await listen(() => undefined);
  servers.pop()!.close();
  await sleep(50);
  const error = await client.openTcp(closed).catch((e: unknown) => e);
  expect(error).toBeInstanceOf(AgentCallError);
  expect((error as AgentCallError).code).toBe('connect_failed');
  expect((error as Error).message).toMatch(/ECONNREFUSED/);
});

test('destroying the host stream closes the guest socket', async () => {
  let guestClosed = false;
  const port = await listen((socket) => {
    socket.on('close', () => (guestClosed = true));
    socket.on('error', () => undefined);
    socket.resume();
  });
  const stream = await client.openTcp(port);
  stream.write('x');
  await sleep(50);
  stream.destroy();
  await eventually(() => guestClosed, 3000, 'guest socket to close');
});
