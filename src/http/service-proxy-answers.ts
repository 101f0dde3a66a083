// What the services' proxy answers itself: kiste's small pages for people and the spec's JSON
// envelope for scripts, plain answers on sockets that asked to upgrade, and the reading of an app's
// answer head to an upgrade (bounded in size and time: the app is not trusted).
import { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { errorEnvelope, KisteError, retryAfterOf } from '../errors';
import { ERRORS } from '../generated/errors';
import { servicePage } from './error-doc-page';
import { requestIdOf } from './request-id';

/** What a person's page is titled for the refusals people meet on a service's address. */
const PAGE_TITLES: Partial<Record<string, string>> = {
  A01: 'A private service',
  S14: 'A private service',
  A15: 'Refused',
  S10: 'No service here',
  S13: 'Nothing answers yet',
  K03: 'The machine is not running',
  L01: 'Too many requests',
};

/** A page for a person (a navigation), JSON for a script. */
export function isNavigation(req: IncomingMessage): boolean {
  const mode = req.headers['sec-fetch-mode'];
  if (mode) return mode === 'navigate';
  return /\btext\/html\b/.test(req.headers.accept ?? '');
}

/** A refusal: a page for a navigation, the envelope otherwise (an answer under way is cut instead). */
export function answerError(req: IncomingMessage, res: ServerResponse, error: KisteError, baseUrl: string): void {
  if (res.headersSent) return void res.destroy();
  const definition = ERRORS[error.code];
  const retryAfter = retryAfterOf(error);
  const headers: Record<string, string> = { 'cache-control': 'no-store', 'x-request-id': requestIdOf(req) };
  if (retryAfter !== null) headers['retry-after'] = String(retryAfter);
  if (isNavigation(req)) {
    const body = servicePage(PAGE_TITLES[error.code] ?? STATUS_CODES[definition.status] ?? 'Error', error.message, error.details.hint ?? definition.hint);
    res.writeHead(definition.status, { ...headers, 'content-type': 'text/html; charset=utf-8', 'content-length': Buffer.byteLength(body) });
    return void res.end(body);
  }
  const body = JSON.stringify(errorEnvelope(error, headers['x-request-id']!, baseUrl));
  res.writeHead(definition.status, { ...headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

/** A refusal on a socket that asked to upgrade: a plain answer, and the connection closed. */
export function rawError(socket: Duplex, error: KisteError): void {
  const definition = ERRORS[error.code];
  const body = `${error.message}\n`;
  socket.end(`HTTP/1.1 ${definition.status} ${STATUS_CODES[definition.status] ?? 'Error'}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
}

/** Largest answer head an app may send to an upgrade. */
const MAX_ANSWER_HEAD_BYTES = 32 * 1024;
const ANSWER_HEAD_MS = 10_000;

/** The app's answer head to an upgrade (its status and its bytes, the head and whatever came with it), bounded in size and time. */
export function readAnswerHead(guest: Duplex): Promise<{ status: number; bytes: Buffer }> {
  return new Promise((resolve, reject) => {
    let bytes = Buffer.alloc(0);
    const timer = setTimeout(() => finish(new Error('no answer in time')), ANSWER_HEAD_MS);
    const finish = (error: Error | null, status = 0) => {
      clearTimeout(timer);
      guest.off('data', onData);
      guest.off('end', onEnd);
      guest.pause();
      if (error) reject(error);
      else resolve({ status, bytes });
    };
    const onData = (chunk: Buffer) => {
      bytes = Buffer.concat([bytes, chunk]);
      const end = bytes.indexOf('\r\n\r\n');
      if (end < 0) return bytes.length > MAX_ANSWER_HEAD_BYTES ? finish(new Error('answer head too large')) : undefined;
      const status = /^HTTP\/1\.[01] (\d{3})[ \r]/.exec(bytes.subarray(0, Math.min(end + 2, 64)).toString('latin1'));
      finish(status ? null : new Error('not an HTTP answer'), Number(status?.[1] ?? 0));
    };
    const onEnd = () => finish(new Error('closed before answering'));
    guest.on('data', onData);
    guest.once('end', onEnd);
  });
}
