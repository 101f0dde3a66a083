// The receiving end of moving a machine (ImportMachine): what arrives is untrusted (a relaying control
// plane, or a sender taken over). It takes exactly what the start declared, checks every hash, and
// only then hands the files over to be put in place; a message out of order, a byte too many, a hash
// that differs or a stream that breaks off ends the move with nothing left behind. The sending end
// streams each file whole, at the socket's pace, with the hashes the receiver checks.
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { WebSocket, WebSocketServer } from 'ws';
import type { MoveStart, MovedFileRole } from '../../src/compute/machine-moves';
import { receiveMachine, sendMachine } from '../../src/worker/machine-move-streams';

const sha = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');
const START = { base: 'v1/disk.qcow2', base_sha256: 'a'.repeat(64), state: { host_keys_generated: true, generation_id: true, personalised: null } };

describe('moving a machine over a stream', () => {
  let dir: string;
  let server: WebSocketServer;
  let port: number;
  let imported: { start: MoveStart; files: Partial<Record<MovedFileRole, Buffer>> } | null;
  let abandoned: number;

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'kiste-move-'));
    imported = null;
    abandoned = 0;
    server = new WebSocketServer({ port: 0, host: '127.0.0.1' });
    await new Promise((resolve) => server.once('listening', resolve));
    port = (server.address() as AddressInfo).port;
    server.on('connection', (ws) => receiveMachine(ws, 'machine-1', { diskMib: 64, memoryMib: 8 }, {
      incomingFolder: () => {
        rmSync(join(dir, 'incoming'), { recursive: true, force: true });
        mkdirSync(join(dir, 'incoming'));
        return join(dir, 'incoming');
      },
      abandonIncoming: () => {
        abandoned++;
        rmSync(join(dir, 'incoming'), { recursive: true, force: true });
      },
      importMachine: async (_id, start, received) => {
        imported = { start, files: Object.fromEntries(Object.entries(received).map(([role, path]) => [role, readFileSync(path!)])) };
      },
    }));
  });
  afterEach(async () => {
    await new Promise((resolve) => server.close(resolve));
    rmSync(dir, { recursive: true, force: true });
  });

  /** Sends `messages` (strings as text, buffers as binary) and returns the receiver's outcome. */
  async function sendRaw(messages: (string | Buffer)[], closeEarly = false): Promise<unknown> {
    const ws = new WebSocket(`ws://127.0.0.1:${port}`);
    await new Promise((resolve) => ws.once('open', resolve));
    const outcome = new Promise((resolve) => {
      ws.once('message', (data) => resolve(JSON.parse(String(data))));
      ws.once('close', () => resolve(null));
    });
    for (const message of messages) ws.send(message, { binary: Buffer.isBuffer(message) });
    if (closeEarly) ws.close();
    return outcome;
  }

  const disk = Buffer.from('the flattened disk'.repeat(1000));
  const ram = Buffer.alloc(3 * 1024 * 1024, 7);
  const start = JSON.stringify({ ...START, files: [{ role: 'disk', bytes: disk.length }, { role: 'ram', bytes: ram.length }] });
  const end = JSON.stringify({ sha256: { disk: sha(disk), ram: sha(ram) } });

  it('takes a whole stream and hands over exactly its bytes', async () => {
    expect(await sendRaw([start, disk.subarray(0, 100), disk.subarray(100), ram.subarray(0, 1024 * 1024), ram.subarray(1024 * 1024), end])).toEqual({ outcome: 'moved' });
    expect(imported!.start).toMatchObject({ base: 'v1/disk.qcow2', baseSha256: 'a'.repeat(64), state: { hostKeysGenerated: true, generationId: true, personalised: null } });
    expect(imported!.files.disk!.equals(disk)).toBe(true);
    expect(imported!.files.ram!.equals(ram)).toBe(true);
  });

  it.each([
    ['bytes before the start', () => [disk, start, end], /did not begin with MachineMoveStart/],
    ['a start that does not fit', () => [JSON.stringify({ ...START, base: '../../etc/shadow', files: [{ role: 'disk', bytes: 1 }] })], /does not fit MachineMoveStart/],
    ['a start without the disk first', () => [JSON.stringify({ ...START, files: [{ role: 'ram', bytes: 1 }] })], /disk first/],
    ['more bytes than declared', () => [start, disk, Buffer.concat([ram, Buffer.from('x')])], /more bytes came than/],
    ['the end before every byte', () => [start, disk, end], /before every file's bytes/],
    ['a file larger than the machine', () => [JSON.stringify({ ...START, files: [{ role: 'disk', bytes: 1 }, { role: 'ram', bytes: 9 * 1048576 }] })], /ram file .* is larger than a machine/],
    ['more than the worker has free', () => [JSON.stringify({ ...START, files: [{ role: 'disk', bytes: 4 * 1024 ** 4 }] })], /larger than a machine|bytes free/],
    ['a hash that differs', () => [start, disk, ram, JSON.stringify({ sha256: { disk: sha(disk), ram: sha(Buffer.from('other')) } })], /ram file's bytes do not match/],
  ])('ends the move on %s, leaving nothing', async (_what, messages, reason) => {
    expect(await sendRaw(messages())).toEqual({ outcome: 'failed', message: expect.stringMatching(reason) });
    expect(imported).toBeNull();
    expect(abandoned).toBe(1);
    expect(existsSync(join(dir, 'incoming'))).toBe(false);
  });

  it('leaves nothing when the stream breaks off', async () => {
    await sendRaw([start, disk.subarray(0, 10)], true);
    for (let i = 0; i < 100 && abandoned === 0; i++) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(abandoned).toBe(1);
    expect(imported).toBeNull();
  });

  it('the sender streams each file whole with the hashes the receiver checks, and cleans up after', async () => {
    const diskPath = join(dir, 'disk.qcow2');
    const ramPath = join(dir, 'memory.ram');
    writeFileSync(diskPath, disk);
    writeFileSync(ramPath, ram);
    let cleaned = false;
    const relay = new WebSocketServer({ port: 0, host: '127.0.0.1' });
    await new Promise((resolve) => relay.once('listening', resolve));
    relay.on('connection', (ws) => void sendMachine(ws, {
      start: { base: 'v1/disk.qcow2', baseSha256: 'a'.repeat(64), state: { hostKeysGenerated: false, generationId: true, personalised: null }, files: [{ role: 'disk', bytes: disk.length }, { role: 'ram', bytes: ram.length }] },
      paths: { disk: diskPath, ram: ramPath, state: undefined },
      cleanUp: () => (cleaned = true),
    }));
    // What the sender sends, relayed as it comes to the receiver.
    const from = new WebSocket(`ws://127.0.0.1:${(relay.address() as AddressInfo).port}`);
    const to = new WebSocket(`ws://127.0.0.1:${port}`);
    await new Promise((resolve) => to.once('open', resolve));
    const outcome = new Promise((resolve) => to.once('message', (data) => resolve(JSON.parse(String(data)))));
    from.on('message', (data, isBinary) => to.send(data as Buffer, { binary: isBinary }));
    expect(await outcome).toEqual({ outcome: 'moved' });
    expect(imported!.files.disk!.equals(disk)).toBe(true);
    expect(imported!.files.ram!.equals(ram)).toBe(true);
    await new Promise((resolve) => from.readyState === from.CLOSED ? resolve(null) : from.once('close', resolve));
    expect(cleaned).toBe(true);
    await new Promise((resolve) => relay.close(resolve));
  });
});
