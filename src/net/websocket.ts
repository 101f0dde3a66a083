// What the API's WebSockets and the worker's streams read the same way: whether a request asks for a
// WebSocket (RFC 6455 §4.2.1), before either answers anything, and a message's bytes.
import type { IncomingMessage } from 'node:http';
import type { RawData } from 'ws';

export function isWebSocketHandshake(req: IncomingMessage): boolean {
  return (
    req.method === 'GET' &&
    String(req.headers.upgrade ?? '').toLowerCase() === 'websocket' &&
    typeof req.headers['sec-websocket-key'] === 'string' &&
    req.headers['sec-websocket-version'] === '13'
  );
}

/** A message's payload as one Buffer, whichever form ws delivered it in. */
export function bufferOf(data: RawData): Buffer {
  return Array.isArray(data) ? Buffer.concat(data) : Buffer.isBuffer(data) ? data : Buffer.from(data);
}
