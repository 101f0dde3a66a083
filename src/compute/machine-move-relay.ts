// Moving a stopped machine between workers, as the control plane does it (drain): the target's
// ImportMachine stream opened first, then the source's ExportMachine stream relayed to it at the
// target's pace, its first and last messages checked against worker-api.yaml and its bytes against
// what the start declared and the machine's record allows. The target's verdict decides.
import type { RawData, WebSocket } from 'ws';
import { withDeadline } from '../deadline';
import { bufferOf } from '../net/websocket';
import { peerText } from '../protocol/peer-input';
import { moveTooLarge, type MoveLimits } from './machine-moves';
import { WorkerProtocolError, WorkerUnreachableError, type WorkerCalls } from './worker-client';
import { machinePath, parseStreamMessage } from './worker-wire';

/** How long the target may take to accept the stream. */
const IMPORT_OPEN_MS = 10_000;
/** An export flattens the disk before its stream opens: minutes for a large one. */
const MOVE_EXPORT_MS = 30 * 60_000;
/** The relay pauses the source while this much waits to reach the target. */
const MOVE_WINDOW_BYTES = 8 * 1024 * 1024;
/** A source that sends nothing for this long (the target slow or the link gone) ends the move. */
const MOVE_SILENCE_MS = 120_000;
/** After the last byte: the target checks the hashes and puts the machine in place. */
const MOVE_INSTALL_MS = 10 * 60_000;

/** The target's one answer: MachineMoveOutcome `moved`, or why not. */
function importOutcome(importer: WebSocket): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    importer.on('message', (data: RawData) => {
      const parsed = parseStreamMessage('MachineMoveOutcome', bufferOf(data));
      if (!parsed.ok) return reject(new WorkerProtocolError(`ImportMachine: ${parsed.reason}`));
      if (parsed.value.outcome === 'moved') resolve();
      else reject(new Error(`the target worker refused the machine: ${peerText(parsed.value.message, 500)}`));
    });
    importer.on('close', () => reject(new WorkerUnreachableError('ImportMachine: the target worker closed the stream without an outcome')));
    importer.on('error', () => undefined);
  });
}

/**
 * Relays an ExportMachine stream to an ImportMachine one: the start and end checked against the
 * spec, no more bytes than the start declared, the source paused while the target is behind.
 * Resolves when the source's stream ended whole; the target's outcome says whether it took it.
 */
function relayMove(exporter: WebSocket, importer: WebSocket, limits: MoveLimits): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    let declared: number | null = null;
    let relayed = 0;
    let ended = false;
    let silence: NodeJS.Timeout | undefined;
    const listen = () => {
      clearTimeout(silence);
      silence = setTimeout(() => fail(new Error(`ExportMachine: nothing came for ${MOVE_SILENCE_MS / 1000} s`)), MOVE_SILENCE_MS);
    };
    const fail = (error: Error) => {
      clearTimeout(silence);
      exporter.terminate();
      importer.terminate();
      reject(error);
    };
    listen();
    exporter.on('message', (data: RawData, isBinary: boolean) => {
      const bytes = bufferOf(data);
      if (ended) return fail(new WorkerProtocolError('ExportMachine: a message after its end'));
      listen();
      if (declared === null) {
        const start = isBinary ? null : parseStreamMessage('MachineMoveStart', bytes);
        if (!start?.ok) return fail(new WorkerProtocolError(`ExportMachine: ${start ? start.reason : 'the stream did not begin with its start'}`));
        const tooLarge = moveTooLarge(start.value.files, limits);
        if (tooLarge) return fail(new WorkerProtocolError(`ExportMachine: ${tooLarge}`));
        declared = start.value.files.reduce((sum, file) => sum + file.bytes, 0);
      } else if (isBinary) {
        relayed += bytes.length;
        if (relayed > declared) return fail(new WorkerProtocolError('ExportMachine: more bytes than its start declared'));
      } else {
        const end = parseStreamMessage('MachineMoveEnd', bytes);
        if (!end.ok || relayed !== declared) return fail(new WorkerProtocolError(`ExportMachine: ${end.ok ? 'it ended before every byte' : end.reason}`));
        ended = true;
        clearTimeout(silence);
      }
      importer.send(bytes, { binary: isBinary });
      if (importer.bufferedAmount > MOVE_WINDOW_BYTES) {
        exporter.pause();
        const wait = () => (importer.readyState !== importer.OPEN || importer.bufferedAmount <= MOVE_WINDOW_BYTES ? exporter.resume() : setTimeout(wait, 5));
        setTimeout(wait, 5);
      }
    });
    exporter.on('close', () => (ended ? resolve() : fail(new Error('ExportMachine: the source worker closed the stream before its end'))));
    exporter.on('error', () => undefined);
    importer.on('close', () => exporter.terminate());
  });
}

/**
 * Copies a stopped machine from `source` to `target`; resolves once the target has put it in place.
 * The source keeps its files (the caller removes them once the record names the target).
 */
export async function relayMachineMove(source: WorkerCalls, target: WorkerCalls, id: string, limits: MoveLimits): Promise<void> {
  let outcome!: Promise<void>;
  const importer = await target.upgrade(`${machinePath(id, 'import')}?disk_mib=${limits.diskMib}&memory_mib=${limits.memoryMib}`, 'ImportMachine', (ws) => {
    outcome = importOutcome(ws);
    outcome.catch(() => undefined); // awaited below; it may fail before then
    return ws;
  }, IMPORT_OPEN_MS);
  try {
    const relayed = source.upgrade(machinePath(id, 'export'), 'ExportMachine', (ws) => relayMove(ws, importer, limits), MOVE_EXPORT_MS);
    relayed.catch(() => undefined);
    // The target's verdict wins: a refusal mid-stream is the move's failure, not a worker gone.
    await Promise.race([relayed, outcome]);
    await withDeadline(outcome, MOVE_INSTALL_MS, () => new WorkerUnreachableError(`the target worker did not put the machine in place within ${MOVE_INSTALL_MS / 1000} s`));
  } finally {
    importer.terminate();
  }
}
