// The QMP client against a hostile monitor (a taken-over QEMU), stood in for by a scripted server on
// a unix socket: random and mutated lines, non-objects, null, answers of the wrong shape, lines too
// long, a line that never ends, garbage floods. Whatever comes, nothing throws out of the socket's
// listeners, every pending command settles (with its answer or a protocol error), what the client
// holds stays bounded, and another machine's monitor keeps answering.
import fc from 'fast-check';
import { mkdtempSync, rmSync } from 'node:fs';
import type { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { activeLayer, chainNodes, dirtyBitmapCount } from '../../src/compute/qemu/disks';
import { MAX_LINE_BYTES, QmpClient, QmpClosedError, QmpCommandError, QmpProtocolError } from '../../src/compute/qemu/qmp-client';
import { QueryStatusShape } from '../../src/compute/qemu/qmp-shapes';
import { standInServer, type StandInServer } from '../support/stand-in-server';

/** KISTE_FUZZ_SCALE=50 for a deeper run. */
const SCALE = Number(process.env.KISTE_FUZZ_SCALE ?? 1);
const runs = (n: number) => ({ numRuns: Math.round(n * SCALE) });

const GREETING = { QMP: { version: { qemu: { major: 7, minor: 2, micro: 22 }, package: 'stand-in' }, capabilities: ['oob'] } };
/** The id placeholder in scripted lines: replaced by the id of the command being answered. */
const ID = '$ID';

/** What the stand-in sends for one command (after the greeting and qmp_capabilities). */
type Script = (command: { execute: string; id: string }, socket: Socket) => void;

const dir = mkdtempSync(join(tmpdir(), 'kqmp-hostile-'));
let monitors = 0;

async function monitor(script: Script, options: { greeting?: string } = {}): Promise<StandInServer> {
  return standInServer(join(dir, `qmp-${monitors++}.sock`), (socket) => {
    socket.write(`${options.greeting ?? JSON.stringify(GREETING)}\r\n`);
    let buffer = '';
    socket.on('data', (chunk) => {
      buffer += chunk.toString();
      for (let i = buffer.indexOf('\n'); i >= 0; i = buffer.indexOf('\n')) {
        const command = JSON.parse(buffer.slice(0, i)) as { execute: string; id: string };
        buffer = buffer.slice(i + 1);
        if (command.execute === 'qmp_capabilities') socket.write(`${JSON.stringify({ return: {}, id: command.id })}\r\n`);
        else script(command, socket);
      }
    });
  });
}

/** Sends lines (with $ID replaced by the command's id) and then, for `probe` commands, a valid answer. */
function send(lines: string[], options: { answer?: boolean } = {}): Script {
  return (command, socket) => {
    if (command.execute !== 'probe') return void socket.write(`${JSON.stringify({ return: { status: 'running' }, id: command.id })}\r\n`);
    for (const line of lines) socket.write(`${line.split(ID).join(command.id)}\r\n`);
    if (options.answer ?? true) socket.write(`${JSON.stringify({ return: { status: 'running' }, id: command.id })}\r\n`);
  };
}

function settled<T>(promise: Promise<T>): Promise<{ ok: true; value: T } | { ok: false; error: unknown }> {
  return promise.then(
    (value) => ({ ok: true as const, value }),
    (error: unknown) => ({ ok: false as const, error }),
  );
}

async function withClient<T>(script: Script, work: (client: QmpClient) => Promise<T>): Promise<T> {
  const m = await monitor(script);
  const client = await QmpClient.connect(m.path, { commandTimeoutMs: 2000 });
  try {
    return await work(client);
  } finally {
    client.destroy();
    await m.close();
  }
}

// Lines a taken-over QEMU could send: random JSON (null, numbers, arrays …), random text, and
// valid lines with one field replaced by a random value or a piece cut out.
const templates = [
  GREETING,
  { return: { status: 'running' }, id: ID },
  { error: { class: 'GenericError', desc: 'no' }, id: ID },
  { event: 'BLOCK_JOB_COMPLETED', data: { device: 'compact', len: 1 }, timestamp: { seconds: 1, microseconds: 2 } },
];
const jsonValue = fc.jsonValue({ maxDepth: 3 });
const mutatedField = fc
  .record({ template: fc.constantFrom(...templates), key: fc.constantFrom('return', 'id', 'error', 'event', 'data', 'timestamp', 'QMP', 'class', 'desc'), value: jsonValue })
  .map(({ template, key, value }) => {
    const copy = structuredClone(template) as Record<string, unknown>;
    if ((key === 'class' || key === 'desc') && 'error' in copy) (copy.error as Record<string, unknown>)[key] = value;
    else copy[key] = value;
    return JSON.stringify(copy);
  });
const cutTemplate = fc.record({ template: fc.constantFrom(...templates), from: fc.nat(200), length: fc.nat(20) }).map(({ template, from, length }) => {
  const text = JSON.stringify(template);
  return text.slice(0, from) + text.slice(from + length);
});
const hostileLine = fc.oneof(jsonValue.map((v) => JSON.stringify(v)), fc.constant('null'), fc.string({ maxLength: 80 }), mutatedField, cutTemplate);

describe('QmpClient against a hostile monitor', () => {
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  test('random and mutated lines: the pending command settles, nothing throws, and a link that stays open still answers', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(hostileLine, { maxLength: 30 }), async (lines) =>
        withClient(send([...lines, JSON.stringify({ return: { status: 'running' }, id: ID }), '{"event": "SENTINEL"}'], { answer: false }), async (client) => {
          const sentinel = settled(client.waitForEvent('SENTINEL', { timeoutMs: 2000 }));
          const probe = await settled(client.execute('probe', undefined, { result: QueryStatusShape, timeoutMs: 2000 }));
          if (probe.ok) expect(QueryStatusShape.parse(probe.value).ok).toBe(true);
          else expect(probe.error instanceof QmpCommandError || probe.error instanceof QmpProtocolError).toBe(true);
          const end = await sentinel; // every scripted line has been read (or the link was given up)
          if (end.ok) expect(await client.execute('after', undefined, { result: QueryStatusShape })).toEqual({ status: 'running' });
          else await expect(client.execute('after')).rejects.toBeInstanceOf(QmpProtocolError);
        }),
      ),
      runs(150),
    );
  }, 60_000);

  test('answers of the wrong shape fail the callers that read them with a protocol error, never a TypeError', async () => {
    let answer: unknown;
    const script: Script = (command, socket) => socket.write(`${JSON.stringify({ return: answer, id: command.id })}\r\n`);
    const nodeLike = fc.record({ 'node-name': fc.oneof(fc.string(), jsonValue), file: fc.oneof(fc.string(), jsonValue), drv: fc.string(), image: jsonValue }, { requiredKeys: [] });
    const blockLike = fc.record({ device: fc.oneof(fc.string(), jsonValue), qdev: fc.oneof(fc.constant('disk0'), jsonValue), inserted: fc.oneof(fc.record({ 'node-name': jsonValue, file: jsonValue }), jsonValue) }, { requiredKeys: [] });
    const answers = fc.oneof(jsonValue, fc.array(nodeLike, { maxLength: 4 }), fc.array(blockLike, { maxLength: 4 }));
    await fc.assert(
      fc.asyncProperty(answers, async (value) => {
        answer = value;
        await withClient(script, async (client) => {
          for (const call of [() => activeLayer(client), () => chainNodes(client), () => dirtyBitmapCount(client, { node: 'disk0', name: 'b' })]) {
            const outcome = await settled<unknown>(call());
            if (!outcome.ok) expect(outcome.error instanceof QmpProtocolError || /no disk attached/.test(String(outcome.error))).toBe(true);
          }
        });
      }),
      runs(100),
    );
  }, 60_000);

  test('a garbage flood costs the monitor link, not the process; the pending command fails with the reason', async () => {
    await withClient(send(Array.from({ length: 50 }, () => 'null'), { answer: false }), async (client) => {
      const probe = await settled(client.execute('probe'));
      expect(probe.ok).toBe(false);
      expect(String((probe as { error: unknown }).error)).toMatch(/QMP protocol error: QEMU kept sending lines that do not fit/);
      await client.whenClosed();
      expect(client.closed).toBe(true);
    });
  });

  test('a line that never ends is cut at MAX_LINE_BYTES: the link closes, the command fails, another monitor keeps answering', async () => {
    let written = 0;
    let stopped!: () => void;
    const writerStopped = new Promise<void>((resolve) => (stopped = resolve));
    const chunk = Buffer.alloc(64 * 1024, 'a');
    const endless: Script = (command, socket) => {
      if (command.execute !== 'probe') return;
      const pump = (): void => {
        while (!socket.destroyed && socket.writable) {
          written += chunk.length;
          if (!socket.write(chunk)) return void socket.once('drain', pump);
        }
      };
      socket.once('close', () => stopped());
      socket.write('{"return": "');
      pump();
    };
    const healthy = await monitor(send([]));
    const neighbour = await QmpClient.connect(healthy.path);
    try {
      await withClient(endless, async (client) => {
        const before = process.memoryUsage().arrayBuffers;
        const [probe, other] = await Promise.all([settled(client.execute('probe', undefined, { timeoutMs: 10_000 })), neighbour.execute('probe', undefined, { result: QueryStatusShape })]);
        expect(other).toEqual({ status: 'running' });
        expect(String((probe as { error: unknown }).error)).toMatch(/QMP protocol error: a line longer than 1048576 bytes/);
        await writerStopped; // the stand-in could not go on writing: nobody reads that socket any more
        // What went into the socket before the client gave up: the bound plus the kernel's socket buffers.
        expect(written).toBeLessThan(MAX_LINE_BYTES + 8 * 1024 * 1024);
        expect(process.memoryUsage().arrayBuffers - before).toBeLessThan(16 * 1024 * 1024);
        expect(await neighbour.execute('probe', undefined, { result: QueryStatusShape })).toEqual({ status: 'running' });
      });
    } finally {
      neighbour.destroy();
      await healthy.close();
    }
  }, 30_000);

  test('a monitor that stops reading loses its link before the commands for it pile up', async () => {
    const m = await standInServer(join(dir, `qmp-${monitors++}.sock`), (socket) => {
      socket.write(`${JSON.stringify(GREETING)}\r\n`);
      socket.once('data', (chunk) => {
        const command = JSON.parse(chunk.toString().split('\n')[0]!) as { id: string };
        socket.write(`${JSON.stringify({ return: {}, id: command.id })}\r\n`);
        socket.pause(); // reads nothing more
      });
    });
    const client = await QmpClient.connect(m.path, { commandTimeoutMs: 60_000 });
    try {
      const padding = 'x'.repeat(8192);
      const calls: Promise<unknown>[] = [];
      let refused: unknown;
      for (let n = 0; n < 2000 && refused === undefined; n++) {
        calls.push(client.execute('probe', { padding }).catch((error: unknown) => void (refused ??= error)));
        await new Promise((resolve) => setImmediate(resolve));
      }
      expect(refused).toBeInstanceOf(QmpProtocolError);
      expect(String((refused as Error).message)).toMatch(/unread/);
      // Bounded: the link went before 2000 commands of 8 KiB (16 MiB) were held.
      expect(calls.length).toBeLessThan(1000);
      await Promise.all(calls); // every command settled (with the link's error)
    } finally {
      client.destroy();
      await m.close();
    }
  }, 30_000);

  test('a monitor that does not start with a greeting is a protocol error, not a busy monitor', async () => {
    const m = await monitor(send([]), { greeting: 'null' });
    try {
      await expect(QmpClient.connect(m.path, { greetingTimeoutMs: 2000 })).rejects.toThrow(/QMP protocol error: the monitor did not start with a greeting/);
    } finally {
      await m.close();
    }
  });
});
