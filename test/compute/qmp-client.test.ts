// The QMP client against a scripted fake monitor (no QEMU needed): greeting and capabilities
// negotiation, answers matched by id, errors, events, timeouts, a busy monitor, closing.
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, Server, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { QmpBusyError, QmpClient, QmpClosedError, QmpCommandError, QmpTimeoutError } from '../../src/compute/qemu/qmp-client';

type Handler = (message: { execute: string; id?: string; arguments?: Record<string, unknown> }, send: (m: object) => void, socket: Socket) => void;

interface FakeMonitor {
  path: string;
  server: Server;
  received: string[];
  sockets: Socket[];
  close(): Promise<void>;
}

const GREETING = { QMP: { version: { qemu: { major: 7, minor: 2, micro: 22 }, package: 'fake' }, capabilities: ['oob'] } };

async function fakeMonitor(handler: Handler, options: { greet?: (socket: Socket, index: number) => boolean } = {}): Promise<FakeMonitor> {
  const dir = mkdtempSync(join(tmpdir(), 'kqmp-'));
  const path = join(dir, 'qmp.sock');
  const received: string[] = [];
  const sockets: Socket[] = [];
  const server = createServer((socket) => {
    const index = sockets.push(socket) - 1;
    const send = (m: object): void => {
      socket.write(`${JSON.stringify(m)}\r\n`);
    };
    if (options.greet?.(socket, index) ?? true) send(GREETING);
    let buffer = '';
    socket.on('data', (chunk) => {
      buffer += chunk.toString();
      let i: number;
      while ((i = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, i);
        buffer = buffer.slice(i + 1);
        const message = JSON.parse(line);
        received.push(message.execute);
        if (message.execute === 'qmp_capabilities') send({ return: {}, id: message.id });
        else handler(message, send, socket);
      }
    });
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(path, resolve));
  return {
    path,
    server,
    received,
    sockets,
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => server.close(resolve));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

describe('QmpClient', () => {
  const monitors: FakeMonitor[] = [];
  const clients: QmpClient[] = [];
  afterEach(async () => {
    for (const c of clients.splice(0)) c.destroy();
    for (const m of monitors.splice(0)) await m.close();
  });
  async function setup(handler: Handler, options?: Parameters<typeof fakeMonitor>[1]): Promise<{ monitor: FakeMonitor; client: QmpClient }> {
    const monitor = await fakeMonitor(handler, options);
    monitors.push(monitor);
    const client = await QmpClient.connect(monitor.path, { commandTimeoutMs: 2000 });
    clients.push(client);
    return { monitor, client };
  }

  test('reads the greeting, negotiates capabilities first, and returns command results', async () => {
    const { monitor, client } = await setup((m, send) => send({ return: { status: 'running', running: true }, id: m.id }));
    expect(client.greeting?.version.qemu).toEqual({ major: 7, minor: 2, micro: 22 });
    expect(await client.execute('query-status')).toEqual({ status: 'running', running: true });
    expect(monitor.received).toEqual(['qmp_capabilities', 'query-status']);
  });

  test('matches answers by id even when they come out of order, with events in between', async () => {
    const held: Array<{ id?: string; execute: string }> = [];
    const { client } = await setup((m, send) => {
      held.push(m);
      if (held.length === 2) {
        send({ event: 'STOP', timestamp: { seconds: 1, microseconds: 0 } });
        send({ return: 'second', id: held[1].id });
        send({ return: 'first', id: held[0].id });
      }
    });
    const events: string[] = [];
    client.on('event', (e) => events.push(e.event));
    const [a, b] = await Promise.all([client.execute('one'), client.execute('two')]);
    expect([a, b]).toEqual(['first', 'second']);
    expect(events).toEqual(['STOP']);
  });

  test('turns QMP errors into QmpCommandError with class and description', async () => {
    const { client } = await setup((m, send) => send({ error: { class: 'CommandNotFound', desc: `The command ${m.execute} has not been found` }, id: m.id }));
    const error = await client.execute('nope').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(QmpCommandError);
    expect(error).toMatchObject({ command: 'nope', errorClass: 'CommandNotFound' });
  });

  test('waitForEvent resolves on the matching event only', async () => {
    const { client } = await setup((m, send) => {
      send({ return: {}, id: m.id });
      send({ event: 'MIGRATION', data: { status: 'setup' } });
      send({ event: 'MIGRATION', data: { status: 'completed' } });
    });
    const completed = client.waitForEvent('MIGRATION', { match: (e) => e.data?.status === 'completed', timeoutMs: 2000 });
    await client.execute('migrate');
    expect((await completed).data).toEqual({ status: 'completed' });
    await expect(client.waitForEvent('NEVER', { timeoutMs: 50 })).rejects.toBeInstanceOf(QmpTimeoutError);
  });

  test('a command without answer times out, and its late answer does not confuse the next one', async () => {
    let first: { id?: string } | undefined;
    const { client } = await setup((m, send) => {
      if (m.execute === 'slow') first = m;
      else {
        send({ return: 'late answer to slow', id: first?.id });
        send({ return: 'fast', id: m.id });
      }
    });
    await expect(client.execute('slow', undefined, { timeoutMs: 50 })).rejects.toBeInstanceOf(QmpTimeoutError);
    expect(await client.execute('fast')).toBe('fast');
  });

  test('a monitor that accepts but does not greet is reported busy (another client holds it)', async () => {
    const monitor = await fakeMonitor(() => undefined, { greet: (_s, index) => index > 0 });
    monitors.push(monitor);
    await expect(QmpClient.connect(monitor.path, { greetingTimeoutMs: 100 })).rejects.toBeInstanceOf(QmpBusyError);
    // once the other client is gone the monitor greets: a reconnect works
    const client = await QmpClient.connect(monitor.path);
    clients.push(client);
    expect(client.greeting).toBeDefined();
  });

  test('fails fast when nothing listens', async () => {
    await expect(QmpClient.connect(join(tmpdir(), 'kiste-no-such-qmp.sock'))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  test('pending commands and waits fail with QmpClosedError when QEMU goes away; close() is clean', async () => {
    const { monitor, client } = await setup(() => undefined);
    const pending = client.execute('hang');
    const waiting = client.waitForEvent('SHUTDOWN');
    monitor.sockets[0].destroy(); // QEMU exits
    await expect(pending).rejects.toBeInstanceOf(QmpClosedError);
    await expect(waiting).rejects.toBeInstanceOf(QmpClosedError);
    await client.whenClosed();
    expect(client.closed).toBe(true);
    await expect(client.execute('after')).rejects.toBeInstanceOf(QmpClosedError);

    const second = await QmpClient.connect(monitor.path);
    clients.push(second);
    await second.close();
    expect(second.closed).toBe(true);
  });
});
