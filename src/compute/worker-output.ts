// The local worker's log lines, as the service passes them on to its own output: each line bounded,
// and marked as the worker's (`"source":"worker"` in a JSON line, `[worker] ` before any other), so
// a worker taken over through a guest cannot pass its lines off as the service's.
import type { Readable } from 'node:stream';

/** Longer lines are cut (a worker's own log lines are far shorter). */
export const WORKER_LINE_MAX = 16 * 1024;

export function workerLine(line: string): string {
  const bounded = line.length > WORKER_LINE_MAX ? `${line.slice(0, WORKER_LINE_MAX)}…` : line;
  if (bounded.startsWith('{')) {
    try {
      const parsed: unknown = JSON.parse(bounded);
      if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed)) return JSON.stringify({ ...parsed, source: 'worker' });
    } catch {
      // not JSON after all: marked as text below
    }
  }
  return `[worker] ${bounded.replace(/[\u0000-\u0008\u000b-\u001f\u007f]/g, '?')}`;
}

/**
 * Passes each line of `from` on to `write`, marked. A line past WORKER_LINE_MAX is cut there and the
 * rest of it dropped, so a worker that writes without newlines holds no more than that in memory.
 */
export function relayWorkerOutput(from: Readable, write: (line: string) => void): void {
  let pending = '';
  let dropping = false;
  from.setEncoding('utf8');
  from.on('data', (chunk: string) => {
    let text = pending + chunk;
    pending = '';
    for (let end = text.indexOf('\n'); end !== -1; end = text.indexOf('\n')) {
      if (!dropping) write(workerLine(text.slice(0, end)));
      dropping = false;
      text = text.slice(end + 1);
    }
    if (dropping) return;
    if (text.length > WORKER_LINE_MAX) {
      write(workerLine(text)); // cut by workerLine
      dropping = true; // until its newline
    } else {
      pending = text;
    }
  });
  from.on('end', () => {
    if (pending && !dropping) write(workerLine(pending));
  });
}
