// What the API's WebSockets and the worker's streams do the same way: whether a request asks for a
// WebSocket (RFC 6455 §4.2.1), the answer to a refused upgrade, a message's bytes.
import { ServerResponse, type IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { Duplex } from 'node:stream';
import type { RawData, WebSocket } from 'ws';

/**
 * The response that answers an upgrade request on its own socket when it is refused — or null
 * when that socket still owes an earlier request's answer (a client sent the upgrade pipelined
 * behind a plain request): HTTP cannot answer out of order, so the connection is dropped. Node
 * throws from assignSocket then, and a throw in an 'upgrade' listener ends the process.
 */
export function upgradeResponse(req: IncomingMessage, socket: Duplex): ServerResponse | null {
  socket.on('error', () => socket.destroy());
  const res = new ServerResponse(req);
  res.shouldKeepAlive = false;
  try {
    res.assignSocket(socket as Socket);
  } catch {
    socket.destroy();
    return null;
  }
  return res;
}

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

/**
 * A WebSocket that carries bytes only (binary messages both ways) as a Duplex, read at its reader's
 * pace (the socket is paused while the Duplex's buffer is full). A text message is not bytes: it
 * ends the stream with an error before anything of it is read. Ending the Duplex closes the socket.
 */
export function byteStream(ws: WebSocket): Duplex {
  const stream = new Duplex({
    read: () => ws.resume(),
    write: (chunk: Buffer, _encoding, callback) => {
      if (ws.readyState !== ws.OPEN) return callback(new Error('the stream is closed'));
      ws.send(chunk, { binary: true }, (error) => callback(error ?? undefined));
    },
    final: (callback) => {
      if (ws.readyState === ws.OPEN) ws.close(1000);
      callback();
    },
    destroy: (error, callback) => {
      if (ws.readyState === ws.OPEN || ws.readyState === ws.CONNECTING) ws.terminate();
      callback(error);
    },
  });
  ws.on('message', (data: RawData, isBinary: boolean) => {
    if (stream.destroyed) return;
    if (!isBinary) return void stream.destroy(new Error('a text message on a byte stream'));
    if (!stream.push(bufferOf(data))) ws.pause();
  });
  ws.on('close', () => {
    if (!stream.destroyed) stream.push(null);
  });
  ws.on('error', (error) => stream.destroy(error));
  // An error before its reader listens (a message that came with the 101) must not throw from the
  // event loop; the reader sees it as `errored` and the close.
  stream.on('error', () => undefined);
  return stream;
}
