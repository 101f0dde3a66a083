// The host survives losing the stream: a dropped connection mid-stream, stale fragments of frames
// in either direction (as after a VM memory save and resume, where the agent never sees EOF), and
// an agent restart under a live connection. After each: in-flight work fails as "disconnected",
// the agent has reset its channels (the streaming command is gone), and the next request works.
import * as net from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AgentCallError, AgentClient, ExecHandle } from '../../src/compute/agent-client';
import { encodeFrame, encodeJson, encodeOutputHead, FrameKind } from '../../src/protocol/agent';
import { AgentProcess, eventually, FakeQemu, processGone, sleep } from './harness';

jest.setTimeout(60_000);

function nextEvent<T extends 'connected' | 'disconnected'>(client: AgentClient, event: T): Promise<unknown> {
  return new Promise((resolve) => client.once(event, resolve as never));
}

/** Starts a command with endless output and reads a little of it. */
async function streaming(client: AgentClient): Promise<{ handle: ExecHandle; rest: Promise<unknown> }> {
  const handle = await client.exec({ argv: ['head', '-c', '100000000000', '/dev/zero'] });
  const iterator = handle[Symbol.asyncIterator]();
  for (let i = 0; i < 5; i += 1) await iterator.next();
  const rest = (async () => {
    for (;;) if ((await iterator.next()).done) return 'ended';
  })().catch((e: unknown) => e);
  return { handle, rest };
}

async function expectDisconnected(handle: ExecHandle, rest: Promise<unknown>): Promise<void> {
  const error = await rest;
  expect(error).toBeInstanceOf(AgentCallError);
  expect((error as AgentCallError).code).toBe('disconnected');
  await expect(handle.exit).rejects.toMatchObject({ code: 'disconnected' });
}

describe('direct socket', () => {
  let agent: AgentProcess;

  beforeAll(async () => {
    agent = await AgentProcess.start();
  });

  afterAll(async () => {
    await agent?.stop();
  });

  test('socket killed mid-stream: reconnect, sync, next request works', async () => {
    let socket: net.Socket | null = null;
    const client = new AgentClient({
      connect: () => (socket = net.createConnection(agent.socketPath)),
      reconnectMinMs: 50,
      reconnectMaxMs: 200,
    });
    try {
      const first = await client.start();
      const { handle, rest } = await streaming(client);
      const disconnected = nextEvent(client, 'disconnected');
      const connected = nextEvent(client, 'connected');
      socket!.destroy();
      await disconnected;
      await expectDisconnected(handle, rest);
      const second = (await connected) as typeof first;
      expect(client.syncs).toBe(2);
      expect(second.boot_id).toBe(first.boot_id); // same guest, not rebooted
      await eventually(() => processGone(handle.pid), 5000, 'the streaming command to be killed');
      expect((await client.run({ argv: ['echo', 'still here'] })).stdout.toString()).toBe('still here\n');
    } finally {
      client.close();
    }
  });

  test('agent restart: requests made while it is down wait for it', async () => {
    const client = agent.client({ reconnectMinMs: 50, reconnectMaxMs: 100 });
    try {
      await client.start();
      await agent.kill('SIGKILL');
      await sleep(100);
      const pending = client.run({ argv: ['echo', 'after restart'] }, { timeoutMs: 15_000 });
      await sleep(300);
      await agent.restart();
      expect((await pending).stdout.toString()).toBe('after restart\n');
    } finally {
      client.close();
    }
  });

  test('a request times out; the client stays usable', async () => {
    const client = agent.client();
    try {
      await client.start();
      const error = await client.metrics(2000, { timeoutMs: 200 }).catch((e: unknown) => e);
      expect(error).toMatchObject({ code: 'timeout', retryable: true });
      expect((await client.run({ argv: ['true'] })).exit_code).toBe(0);
    } finally {
      client.close();
    }
  });
});

describe('through a fake QEMU chardev (the agent never sees the host go)', () => {
  let dir: string;
  let qemu: FakeQemu;
  let agent: AgentProcess;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'kiste-qemu-'));
    qemu = new FakeQemu(dir);
    await qemu.listen();
    agent = await AgentProcess.start({ mode: 'connect', connectPath: qemu.guestPath });
    await qemu.waitGuest();
  });

  afterAll(async () => {
    await agent?.stop();
    qemu?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  function hostClient(): AgentClient {
    return AgentClient.unixSocket(qemu.hostPath, { reconnectMinMs: 50, reconnectMaxMs: 200, syncRetryMs: 1000 });
  }

  test('host dropped mid-stream; stale frames from before reach the next host first', async () => {
    const client = hostClient();
    try {
      await client.start();
      const { handle, rest } = await streaming(client);
      // Half an output frame and a whole one, as if left in the virtqueue when the VM paused.
      const stale = Buffer.concat([encodeOutputHead(1, 'stdout', 3, 500), Buffer.alloc(500, 0x61)]);
      qemu.staleForHost.push(stale.subarray(200), stale, encodeJson(FrameKind.EVENT, 0, { event: 'ready', data: {} }));
      const connected = nextEvent(client, 'connected');
      let staleReady = false;
      client.on('ready', () => (staleReady = true));
      qemu.dropHost();
      await expectDisconnected(handle, rest);
      await connected;
      expect(client.syncs).toBe(2);
      expect(client.streamStats!.droppedBytes).toBeGreaterThan(stale.length);
      expect(staleReady).toBe(false); // nothing from before the SYNC_OK was taken as current
      // The agent only learnt of the new host from its SYNC, and reset the command then.
      await eventually(() => processGone(handle.pid), 5000, 'the streaming command to be killed');
      expect((await client.run({ argv: ['echo', 'ok'] })).stdout.toString()).toBe('ok\n');
    } finally {
      client.close();
    }
  });

  for (const missing of [900, 20, 3]) {
    test(`a request frame cut ${missing} bytes short is dropped at the next SYNC, without a retry`, async () => {
      // The previous host died in the middle of writing a frame.
      const raw = net.createConnection(qemu.hostPath);
      await new Promise((r) => raw.once('connect', r));
      raw.on('data', () => undefined);
      const frame = encodeJson(FrameKind.REQUEST, 0, { id: 1, method: 'shutdown', params: { reboot: false }, pad: 'x'.repeat(1000) });
      raw.write(frame.subarray(0, frame.length - missing));
      await sleep(200);
      raw.destroy();
      await sleep(50);

      const client = hostClient();
      try {
        const started = Date.now();
        await client.start(5000);
        // SYNC is retried every second; a fast start shows the first one was found inside the fragment.
        expect(Date.now() - started).toBeLessThan(900);
        expect((await client.run({ argv: ['echo', 'ok'] })).stdout.toString()).toBe('ok\n');
        expect(agent.commands()).not.toContain('poweroff');
      } finally {
        client.close();
      }
    });
  }

  test('a long DATA frame cut short does not disturb the next session', async () => {
    const raw = net.createConnection(qemu.hostPath);
    await new Promise((r) => raw.once('connect', r));
    raw.write(encodeFrame(FrameKind.DATA, 12345, Buffer.alloc(50_000, 0xff)).subarray(0, 30_000));
    await sleep(100);
    raw.destroy();
    const next = hostClient();
    try {
      await next.start(5000);
      expect((await next.run({ argv: ['echo', 'fine'] })).stdout.toString()).toBe('fine\n');
    } finally {
      next.close();
    }
  });

  test('agent restart under a live connection: ANNOUNCE, resync, next request works', async () => {
    const client = hostClient();
    try {
      const before = await client.start();
      const { handle, rest } = await streaming(client);
      const disconnected = nextEvent(client, 'disconnected');
      const connected = nextEvent(client, 'connected');
      await agent.restart();
      const why = (await disconnected) as AgentCallError;
      expect(why.message).toBe('the agent restarted'); // learnt from ANNOUNCE: the connection itself stayed up
      await expectDisconnected(handle, rest);
      const after = (await connected) as typeof before;
      expect(after.boot_id).toBe(before.boot_id);
      expect((await client.run({ argv: ['echo', 'new agent'] })).stdout.toString()).toBe('new agent\n');
      await eventually(() => processGone(handle.pid), 5000, 'the old command to die with its reader');
    } finally {
      client.close();
    }
  });
});
