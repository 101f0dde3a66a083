// The two ends of moving a stopped machine between workers (ExportMachine, ImportMachine in
// worker-api.yaml): the sender streams the start, each file's bytes and their hashes at the pace the
// socket drains; the receiver takes exactly what the start declared, checks every hash, and only then
// puts the machine in place. What the relaying control plane (or a sender taken over) sends is
// untrusted: a message out of order, a byte too many or a hash that differs ends the stream, and the
// files written so far are removed.
import { createHash, type Hash } from 'node:crypto';
import { closeSync, createReadStream, openSync, statfsSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import type { RawData, WebSocket } from 'ws';
import type { components } from '../generated/worker-api';
import { moveTooLarge, type MoveLimits, type MoveStart, type MovedFileRole, type OutgoingMachine } from '../compute/machine-moves';
import { fromWire, parseStreamMessage, wire } from '../compute/worker-wire';
import { bufferOf } from '../net/websocket';

type Wire = components['schemas'];

/** Largest binary message either way. */
const CHUNK_BYTES = 1024 * 1024;
/** The sender waits while this much is not yet on its way. */
const SEND_WINDOW_BYTES = 8 * 1024 * 1024;
/** A receiver that hears nothing for this long gives the move up. */
const SILENCE_MS = 60_000;

/** Sends the machine's files, then closes; the flattened disk is removed at the end either way. */
export async function sendMachine(ws: WebSocket, outgoing: OutgoingMachine): Promise<void> {
  try {
    ws.send(JSON.stringify(wire.moveStart(outgoing.start)));
    const sha256: Partial<Record<MovedFileRole, string>> = {};
    for (const { role } of outgoing.start.files) {
      const hash = createHash('sha256');
      for await (const chunk of createReadStream(outgoing.paths[role]!, { highWaterMark: CHUNK_BYTES })) {
        if (ws.readyState !== ws.OPEN) return;
        hash.update(chunk as Buffer);
        ws.send(chunk as Buffer);
        while (ws.bufferedAmount > SEND_WINDOW_BYTES && ws.readyState === ws.OPEN) await new Promise((resolve) => setTimeout(resolve, 5));
      }
      sha256[role] = hash.digest('hex');
    }
    ws.send(JSON.stringify({ sha256: { ...sha256, disk: sha256.disk! } } satisfies Wire['MachineMoveEnd']));
    ws.close(1000);
  } catch {
    ws.terminate();
  } finally {
    outgoing.cleanUp();
  }
}

export interface MachineReceiver {
  incomingFolder(id: string): string;
  abandonIncoming(id: string): void;
  importMachine(id: string, start: MoveStart, received: Partial<Record<MovedFileRole, string>>, limits: MoveLimits): Promise<void>;
}

/** Receives a machine (of at most `limits`, from its record) on `ws` and answers one MachineMoveOutcome. */
export function receiveMachine(ws: WebSocket, id: string, limits: MoveLimits, receiver: MachineReceiver): void {
  const folder = receiver.incomingFolder(id);
  let start: MoveStart | null = null;
  let fileIndex = 0;
  let left = 0;
  let fd: number | null = null;
  let hash: Hash | null = null;
  const received: Partial<Record<MovedFileRole, string>> = {};
  const hashes: Partial<Record<MovedFileRole, string>> = {};
  let finished = false;
  /** Put in place now: a close meanwhile leaves the files to the install. */
  let installing = false;
  let silence: NodeJS.Timeout | undefined;

  const end = (outcome: Wire['MachineMoveOutcome']) => {
    if (finished) return;
    finished = true;
    clearTimeout(silence);
    if (fd !== null) closeSync(fd);
    fd = null;
    if (outcome.outcome !== 'moved') receiver.abandonIncoming(id);
    if (ws.readyState === ws.OPEN) {
      ws.send(JSON.stringify(outcome));
      ws.close(1000);
    }
  };
  const fail = (message: string) => end({ outcome: 'failed', message: message.slice(0, 2000) });
  const listen = () => {
    clearTimeout(silence);
    silence = setTimeout(() => fail(`nothing came for ${SILENCE_MS / 1000} s`), SILENCE_MS);
  };
  /** The next file's bytes begin (or none are left to come). */
  const nextFile = () => {
    if (fd !== null) {
      closeSync(fd);
      fd = null;
      hashes[start!.files[fileIndex]!.role] = hash!.digest('hex');
      fileIndex++;
    }
    while (start && fileIndex < start.files.length && start.files[fileIndex]!.bytes === 0) {
      const { role } = start.files[fileIndex]!;
      received[role] = join(folder, role);
      closeSync(openSync(received[role]!, 'w', 0o600));
      hashes[role] = createHash('sha256').digest('hex');
      fileIndex++;
    }
    if (!start || fileIndex >= start.files.length) return;
    const { role, bytes } = start.files[fileIndex]!;
    received[role] = join(folder, role);
    fd = openSync(received[role]!, 'w', 0o600);
    hash = createHash('sha256');
    left = bytes;
  };

  listen();
  ws.on('message', (data: RawData, isBinary: boolean) => {
    if (finished || installing) return; // nothing after the end counts
    listen();
    try {
      const bytes = bufferOf(data);
      if (!start) {
        if (isBinary) return fail('the stream did not begin with MachineMoveStart');
        const parsed = parseStreamMessage('MachineMoveStart', bytes);
        if (!parsed.ok) return fail(parsed.reason);
        const roles = parsed.value.files.map((file) => file.role);
        if (roles[0] !== 'disk' || new Set(roles).size !== roles.length) return fail('MachineMoveStart names the disk first and each file once');
        const tooLarge = moveTooLarge(parsed.value.files, limits);
        if (tooLarge) return fail(`the machine cannot come: ${tooLarge}`);
        const needed = parsed.value.files.reduce((sum, file) => sum + file.bytes, 0);
        const free = freeBytes(folder);
        if (needed > free) return fail(`this worker has ${free} bytes free, and the machine needs ${needed}`);
        start = fromWire.moveStart(parsed.value);
        return nextFile();
      }
      if (isBinary) {
        if (fd === null || bytes.length > left) return fail('more bytes came than MachineMoveStart declared');
        writeSync(fd, bytes);
        hash!.update(bytes);
        left -= bytes.length;
        if (left === 0) nextFile();
        return;
      }
      if (fd !== null || fileIndex < start.files.length) return fail('MachineMoveEnd came before every file\'s bytes');
      const parsed = parseStreamMessage('MachineMoveEnd', bytes);
      if (!parsed.ok) return fail(parsed.reason);
      for (const { role } of start.files) {
        if (parsed.value.sha256[role] !== hashes[role]) return fail(`the ${role} file's bytes do not match its SHA-256`);
      }
      clearTimeout(silence);
      installing = true;
      const moving = start;
      receiver.importMachine(id, moving, received, limits).then(() => end({ outcome: 'moved' }), (error: Error) => fail(error.message));
    } catch (error) {
      fail(error instanceof Error ? error.message : String(error));
    }
  });
  ws.on('close', () => {
    if (!finished && !installing) {
      finished = true;
      clearTimeout(silence);
      if (fd !== null) closeSync(fd);
      receiver.abandonIncoming(id);
    }
  });
}

/** Bytes free for an unprivileged writer on the folder's file system (a twentieth kept back). */
function freeBytes(folder: string): number {
  const stat = statfsSync(folder);
  return Math.floor(stat.bavail * stat.bsize * 0.95);
}
