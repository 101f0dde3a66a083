// The byte stream to the host. In a guest it is the virtio-serial port; for tests (and any host
// without virtio) a unix socket the agent listens on or connects to. Each kind hands the session
// one Link per byte stream; a new Link means the peer may be a new host process.
import * as fs from 'node:fs';
import * as net from 'node:net';
import type { LinkConfig } from './config';
import type { Logger } from './log';

export interface Link {
  /** Queue one frame (possibly in pieces); done runs once it is handed to the OS. */
  send(parts: Buffer[], done?: () => void): void;
  /** Drop frames not yet handed to the OS: after a SYNC they describe a session that is gone. */
  dropQueued(): void;
}

export interface LinkHandlers {
  /** A new byte stream. announce: the agent has just started, so tell a host that may be waiting. */
  open(link: Link, announce: boolean): void;
  data(chunk: Buffer): void;
  closed(link: Link, reason: string): void;
}

const BACKOFF_MIN_MS = 50;
const BACKOFF_MAX_MS = 1000;

export function startLink(config: LinkConfig, handlers: LinkHandlers, log: Logger): { stop(): void } {
  switch (config.mode) {
    case 'device':
      return new DeviceLinkRunner(config.path, handlers, log);
    case 'listen':
      return listenLink(config.path, handlers, log);
    case 'connect':
      return connectLink(config.path, handlers, log);
  }
}

// --- unix sockets -------------------------------------------------------------------------------

class SocketLink implements Link {
  constructor(readonly socket: net.Socket) {}

  send(parts: Buffer[], done?: () => void): void {
    if (this.socket.destroyed) return;
    // Writes are bounded by channel credit, so the socket's own buffer needs no extra limit.
    this.socket.cork();
    for (let i = 0; i < parts.length; i += 1) this.socket.write(parts[i], i === parts.length - 1 ? done : undefined);
    this.socket.uncork();
  }

  dropQueued(): void {
    // Bytes already written to a socket cannot be taken back; the host skips them while it syncs.
  }
}

function listenLink(path: string, handlers: LinkHandlers, log: Logger): { stop(): void } {
  let current: SocketLink | null = null;
  let first = true;
  try {
    fs.unlinkSync(path);
  } catch {
    // no stale socket
  }
  const server = net.createServer((socket) => {
    // One host at a time, like a virtio port: a new connection replaces the old one.
    if (current) current.socket.destroy();
    const link = new SocketLink(socket);
    current = link;
    socket.setNoDelay?.(true);
    handlers.open(link, first);
    first = false;
    socket.on('data', (chunk: Buffer) => {
      if (current === link) handlers.data(chunk);
    });
    socket.on('error', (error) => log.debug('link socket error', { error: error.message }));
    socket.on('close', () => {
      if (current === link) current = null;
      handlers.closed(link, 'host disconnected');
    });
  });
  server.on('error', (error) => {
    log.error('cannot listen', { path, error: error.message });
    process.exitCode = 1;
  });
  server.listen(path, () => log.info('listening', { path }));
  return {
    stop: () => {
      server.close();
      current?.socket.destroy();
    },
  };
}

function connectLink(path: string, handlers: LinkHandlers, log: Logger): { stop(): void } {
  let stopped = false;
  let backoff = BACKOFF_MIN_MS;
  let socket: net.Socket | null = null;
  const connect = () => {
    if (stopped) return;
    const s = net.connect(path);
    socket = s;
    const link = new SocketLink(s);
    let opened = false;
    s.on('connect', () => {
      opened = true;
      backoff = BACKOFF_MIN_MS;
      handlers.open(link, true);
    });
    s.on('data', (chunk: Buffer) => handlers.data(chunk));
    s.on('error', (error) => log.debug('link socket error', { error: error.message }));
    s.on('close', () => {
      if (opened) handlers.closed(link, 'host disconnected');
      if (stopped) return;
      setTimeout(connect, backoff);
      backoff = Math.min(BACKOFF_MAX_MS, backoff * 2);
    });
  };
  connect();
  return {
    stop: () => {
      stopped = true;
      socket?.destroy();
    },
  };
}

// --- virtio-serial port -------------------------------------------------------------------------
//
// A character device: libuv cannot poll it as a stream, so reads and writes are blocking calls on
// the thread pool (main.ts enlarges it). A virtio port reads EOF while no host is connected, so on
// EOF the runner keeps the fd and retries the read with backoff (reopening would race a write that
// blocks until a host is back); on a real error it closes the fd and reopens with backoff.

class DeviceLink implements Link {
  private queue: { parts: Buffer[]; done?: () => void }[] = [];
  private writing = false;
  dead = false;

  constructor(
    readonly fd: number,
    private readonly onError: (error: Error) => void,
  ) {}

  send(parts: Buffer[], done?: () => void): void {
    if (this.dead) return;
    this.queue.push({ parts: [...parts], done });
    this.pump();
  }

  dropQueued(): void {
    // Keep the frame being written: cutting it short would leave a fragment (the host skips it anyway).
    this.queue = this.writing ? this.queue.slice(0, 1) : [];
  }

  private pump(): void {
    if (this.writing || this.dead || this.queue.length === 0) return;
    // Gather several frames per writev: one thread-pool round trip per frame would cap throughput.
    const buffers: Buffer[] = [];
    let bytes = 0;
    for (const item of this.queue) {
      for (const part of item.parts) {
        buffers.push(part);
        bytes += part.length;
      }
      if (buffers.length >= 512 || bytes >= 1024 * 1024) break;
    }
    this.writing = true;
    fs.writev(this.fd, buffers, (error, written) => {
      this.writing = false;
      if (this.dead) return;
      if (error) return this.onError(error);
      this.consume(written);
      this.pump();
    });
  }

  /** Remove written bytes from the queue (a virtio port takes at most 32 KiB per write). */
  private consume(written: number): void {
    let left = written;
    while (left > 0 && this.queue.length > 0) {
      const item = this.queue[0];
      while (left > 0 && item.parts.length > 0) {
        const part = item.parts[0];
        if (part.length <= left) {
          left -= part.length;
          item.parts.shift();
        } else {
          item.parts[0] = part.subarray(left);
          left = 0;
        }
      }
      if (item.parts.length === 0) {
        this.queue.shift();
        item.done?.();
      }
    }
  }
}

class DeviceLinkRunner {
  private stopped = false;
  private link: DeviceLink | null = null;
  private announce = true;
  private backoff = BACKOFF_MIN_MS;

  constructor(
    private readonly path: string,
    private readonly handlers: LinkHandlers,
    private readonly log: Logger,
  ) {
    this.open();
  }

  stop(): void {
    this.stopped = true;
    this.close();
  }

  private open(): void {
    if (this.stopped) return;
    fs.open(this.path, fs.constants.O_RDWR | fs.constants.O_NOCTTY, (error, fd) => {
      if (error) {
        this.log.warn('cannot open agent port, retrying', { path: this.path, error: error.message });
        return this.retry(() => this.open());
      }
      const link = new DeviceLink(fd, (e) => this.fail(link, e));
      this.link = link;
      this.log.info('agent port open', { path: this.path });
      this.handlers.open(link, this.announce);
      this.announce = false;
      this.read(link);
    });
  }

  private read(link: DeviceLink): void {
    const buffer = Buffer.allocUnsafe(64 * 1024);
    fs.read(link.fd, buffer, 0, buffer.length, null, (error, n) => {
      if (link.dead) return;
      if (error) return this.fail(link, error);
      if (n === 0) {
        // No host on the other side: this session is over; wait for the next one on the same fd.
        this.handlers.closed(link, 'host disconnected');
        this.handlers.open(link, false);
        return this.retry(() => this.read(link));
      }
      this.backoff = BACKOFF_MIN_MS;
      this.handlers.data(buffer.subarray(0, n));
      this.read(link);
    });
  }

  private fail(link: DeviceLink, error: Error): void {
    if (link.dead) return;
    this.log.warn('agent port failed, reopening', { error: error.message });
    this.handlers.closed(link, `port error: ${error.message}`);
    this.close();
    this.retry(() => this.open());
  }

  private close(): void {
    const link = this.link;
    this.link = null;
    if (!link || link.dead) return;
    link.dead = true;
    fs.close(link.fd, () => undefined);
  }

  private retry(next: () => void): void {
    if (this.stopped) return;
    setTimeout(next, this.backoff);
    this.backoff = Math.min(BACKOFF_MAX_MS, this.backoff * 2);
  }
}
