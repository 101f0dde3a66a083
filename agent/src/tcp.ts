// tcp.open: a byte stream to a port inside the guest (the SSH tunnel uses port 22). Both directions
// are flow-controlled: guest → host by the host's WINDOW credit (the socket is paused when it runs
// out), host → guest by credit the agent returns once the socket has taken the bytes.
import * as net from 'node:net';
import {
  clampWindow,
  CreditReceiver,
  DEFAULT_WINDOW,
  encodeRawData,
  MAX_DATA_CHUNK,
} from '../../src/protocol/agent';
import { AgentError, errnoCode } from './errors';
import { Channel, ChannelSink, Reply, RequestContext } from './session';
import { int, object, str } from './validate';

const CONNECT_TIMEOUT_MS = 10_000;

type Ctx = RequestContext & { sink: ChannelSink };

export async function tcpOpen(raw: unknown, ctx: Ctx): Promise<Reply> {
  const p = object(raw);
  const port = int(p, 'port', { min: 1, max: 65535 }) as number;
  const host = str(p, 'host', { optional: true, max: 255 }) ?? '127.0.0.1';
  const window = clampWindow(int(p, 'window_bytes', { optional: true, min: 0 }));
  const socket = net.connect({ host, port });
  try {
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
      socket.setTimeout(CONNECT_TIMEOUT_MS, () => reject(Object.assign(new Error('timed out'), { code: 'ETIMEDOUT' })));
    });
  } catch (error) {
    socket.destroy();
    throw new AgentError('connect_failed', `cannot connect to ${host}:${port}: ${errnoCode(error) ?? String(error)}`);
  }
  socket.setTimeout(0);
  socket.setNoDelay(true);
  let channel: TcpChannel;
  try {
    channel = ctx.openChannel((id) => new TcpChannel(id, socket, window, ctx.sink));
  } catch (error) {
    socket.destroy();
    throw error;
  }
  return new Reply({ channel: channel.id, window_bytes: DEFAULT_WINDOW }, () => channel.start());
}

export class TcpChannel implements Channel {
  readonly id: number;
  private credit: number;
  private readonly queue: Buffer[] = [];
  private readonly inbound = new CreditReceiver(DEFAULT_WINDOW);
  private ended = false;
  private eofSent = false;
  private socketClosed = false;
  private closed = false;
  private error: string | null = null;
  private paused = false;

  constructor(
    id: number,
    private readonly socket: net.Socket,
    window: number,
    private readonly sink: ChannelSink,
  ) {
    this.id = id;
    this.credit = window;
    socket.on('error', (error) => {
      this.error = errnoCode(error) ?? error.message;
    });
  }

  start(): void {
    this.socket.on('data', (chunk: Buffer) => {
      this.queue.push(chunk);
      this.flush();
    });
    this.socket.on('end', () => {
      this.ended = true;
      this.flush();
    });
    this.socket.on('close', () => {
      this.socketClosed = true;
      this.flush();
    });
    if (this.socket.destroyed) this.socketClosed = true;
    this.flush();
  }

  onData(payload: Buffer): void {
    if (this.closed || this.socket.destroyed) return;
    if (payload.length === 0) {
      this.socket.end(); // the host's side ended
      return;
    }
    this.socket.write(payload, () => this.sink.window(this.id, this.inbound.consumed(payload.length)));
  }

  onWindow(increment: number): void {
    this.credit += increment;
    this.flush();
  }

  onClose(): void {
    this.closed = true;
    this.socket.destroy();
  }

  reset(): void {
    this.closed = true;
    this.socket.destroy();
  }

  private flush(): void {
    if (this.closed) return;
    while (this.queue.length > 0 && this.credit > 0) {
      const chunk = this.queue[0];
      const piece = chunk.subarray(0, Math.min(this.credit, MAX_DATA_CHUNK));
      for (const frame of encodeRawData(this.id, piece)) this.sink.send(frame);
      this.credit -= piece.length;
      if (piece.length === chunk.length) this.queue.shift();
      else this.queue[0] = chunk.subarray(piece.length);
    }
    const blocked = this.queue.length > 0;
    if (blocked !== this.paused && !this.socket.destroyed) {
      this.paused = blocked;
      if (blocked) this.socket.pause();
      else this.socket.resume();
    }
    if (blocked) return;
    if (this.ended && !this.eofSent) {
      this.eofSent = true;
      this.sink.send(encodeRawData(this.id, Buffer.alloc(0))[0]);
    }
    if (this.socketClosed) {
      this.closed = true;
      this.sink.close(this.id, this.error ?? '');
    }
  }
}
