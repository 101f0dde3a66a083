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

/**
 * Frames to the host's byte stream, joined into one buffer per callback of the event loop. A
 * virtio port's write() takes one buffer per call (a writev is a write per piece), and each becomes
 * its own virtio buffer and doorbell: a 13-byte frame header written apart from its payload costs as
 * much as 32 KiB. Unix sockets gain nothing from it but use the same writer, so the tests run the
 * one the guest runs.
 */
export class StreamLink implements Link {
  private pending: Buffer[] = [];
  private callbacks: (() => void)[] = [];
  private scheduled = false;

  constructor(readonly stream: net.Socket) {}

  send(parts: Buffer[], done?: () => void): void {
    if (this.stream.destroyed) return;
    for (const part of parts) this.pending.push(part);
    if (done) this.callbacks.push(done);
    if (!this.scheduled) {
      this.scheduled = true;
      queueMicrotask(() => this.flush());
    }
  }

  dropQueued(): void {
    // What the stream took cannot be taken back; the host skips it while it syncs.
    this.pending = [];
    this.callbacks = [];
  }

  private flush(): void {
    this.scheduled = false;
    if (this.stream.destroyed || this.pending.length === 0) return;
    const data = this.pending.length === 1 ? this.pending[0] : Buffer.concat(this.pending);
    const callbacks = this.callbacks;
    this.pending = [];
    this.callbacks = [];
    // Writes are bounded by channel credit, so the stream's own buffer needs no extra limit.
    this.stream.write(data, callbacks.length === 0 ? undefined : () => callbacks.forEach((callback) => callback()));
  }
}

// --- unix sockets -------------------------------------------------------------------------------

function listenLink(path: string, handlers: LinkHandlers, log: Logger): { stop(): void } {
  let current: StreamLink | null = null;
  let first = true;
  try {
    fs.unlinkSync(path);
  } catch {
    // no stale socket
  }
  const server = net.createServer((socket) => {
    // One host at a time, like a virtio port: a new connection replaces the old one.
    if (current) current.stream.destroy();
    const link = new StreamLink(socket);
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
      current?.stream.destroy();
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
    const link = new StreamLink(s);
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
// The port is opened non-blocking and driven by the event loop (epoll on the character device),
// never by blocking reads and writes on the thread pool: a blocking write to a virtio port makes
// the vCPU spin until the host has taken the buffer, and each thread-pool round trip costs
// milliseconds on an emulated CPU (a read returns at most one 4 KiB buffer, a write takes at most
// 32 KiB). Node's net.Socket refuses an fd that libuv classes as a file, so the stream handle comes
// from pipe_wrap: libuv opens a pipe handle on any pollable fd.
//
// While no host is connected the port reads EOF (and polls as readable), so on EOF the runner
// closes the fd and opens the port again after a backoff. Writes made then wait in the stream.

interface PipeHandle {
  open(fd: number): number;
}
interface PipeWrap {
  Pipe: new (type: number) => PipeHandle;
  constants: { SOCKET: number };
}

/** A stream over an already open, pollable fd (the fd is the stream's from now on). */
export function streamOverFd(fd: number): net.Socket {
  const { Pipe, constants } = (process as unknown as { binding(name: 'pipe_wrap'): PipeWrap }).binding('pipe_wrap');
  const handle = new Pipe(constants.SOCKET);
  const status = handle.open(fd);
  if (status !== 0) {
    fs.closeSync(fd);
    throw new Error(`cannot poll the agent port (libuv error ${status})`);
  }
  // allowHalfOpen: end() would shut down a socket, which this is not; the runner destroys it on EOF.
  return new net.Socket({ handle, readable: true, writable: true, allowHalfOpen: true } as net.SocketConstructorOpts);
}

class DeviceLinkRunner {
  private stopped = false;
  private stream: net.Socket | null = null;
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
    this.stream?.destroy();
    this.stream = null;
  }

  private open(): void {
    if (this.stopped) return;
    fs.open(this.path, fs.constants.O_RDWR | fs.constants.O_NOCTTY | fs.constants.O_NONBLOCK, (error, fd) => {
      if (error) {
        this.log.warn('cannot open agent port, retrying', { path: this.path, error: error.message });
        return this.retry();
      }
      if (this.stopped) return fs.close(fd, () => undefined);
      let stream: net.Socket;
      try {
        stream = streamOverFd(fd);
      } catch (e) {
        this.log.error('cannot use agent port', { path: this.path, error: String(e) });
        return this.retry();
      }
      this.stream = stream;
      const link = new StreamLink(stream);
      let ended = false;
      let heard = false;
      const end = (reason: string) => {
        if (ended) return;
        ended = true;
        if (this.stream === stream) this.stream = null;
        stream.destroy();
        // Without a host the port reads EOF at every try: only a link a host used is worth a line.
        if (heard) this.log.info('agent port closed, reopening', { reason });
        this.handlers.closed(link, reason);
        this.retry();
      };
      stream.on('data', (chunk: Buffer) => {
        heard = true;
        this.backoff = BACKOFF_MIN_MS;
        this.handlers.data(chunk);
      });
      // EOF: no host on the other side (now, or any more).
      stream.on('end', () => end('host disconnected'));
      stream.on('error', (e) => {
        this.log.warn('agent port failed', { error: e.message });
        end(`port error: ${e.message}`);
      });
      stream.on('close', () => end('port closed'));
      // Every new link announces the agent. Without a host the write goes with the closed fd. With
      // one, the session it had is gone (a new link ends it): a port that read a stale EOF after a
      // restore reopens under a host that has just synced, and without the announcement that
      // host's hello would wait out its request timeout before it synced again.
      this.handlers.open(link, true);
    });
  }

  private retry(): void {
    if (this.stopped) return;
    setTimeout(() => this.open(), this.backoff);
    this.backoff = Math.min(BACKOFF_MAX_MS, this.backoff * 2);
  }
}
