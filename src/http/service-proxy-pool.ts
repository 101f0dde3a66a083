// Agent streams kept open between requests to one service (docs/hosted-services.md "The proxy"): HTTP
// keep-alive to the app, so a page's twenty requests do not each open a channel through the agent
// (opening one costs about as much as the request). One Node http.Agent per machine and port, each
// holding a few idle streams for a few seconds (less than apps' own keep-alive, so an idle stream is
// rarely closed under a request); a stream the app closes is dropped. Streams are never shared
// between services: a hostile app's bytes left on one reach only its own next answer.
import { Agent, type AgentOptions, type ClientRequestArgs } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';

/** Idle streams kept per service, and for how long. */
const FREE_STREAMS = 4;
const IDLE_MS = 1_000;
/** Services with a pool at once (least recently used dropped beyond). */
const MAX_POOLS = 1_000;

/** A request's options naming the stream opened for it (taken when no idle one is free). */
export interface PooledRequestOptions {
  guestStream?: Duplex;
}

class GuestStreamAgent extends Agent {
  constructor(options: AgentOptions) {
    super(options);
  }

  /** The stream the request was given; an agent never opens one itself (the proxy does, to answer failures as its own). */
  override createConnection(options: ClientRequestArgs, callback?: (error: Error | null, stream: Duplex) => void): Duplex | undefined {
    const { guestStream } = options as ClientRequestArgs & PooledRequestOptions;
    if (!guestStream) {
      callback?.(new Error('no guest stream for a new connection'), undefined as unknown as Duplex);
      return undefined;
    }
    return asPooledSocket(guestStream);
  }
}

export class GuestStreamPools {
  private readonly agents = new Map<string, GuestStreamAgent>();

  /** The pool of a machine's port. */
  agentFor(instanceId: string, port: number): Agent {
    const key = `${instanceId}:${port}`;
    let agent = this.agents.get(key);
    if (agent) {
      this.agents.delete(key); // kept in use order
    } else {
      agent = new GuestStreamAgent({ keepAlive: true, keepAliveMsecs: 1_000, maxFreeSockets: FREE_STREAMS, timeout: IDLE_MS, scheduling: 'lifo' });
      if (this.agents.size >= MAX_POOLS) this.drop(this.agents.keys().next().value!);
    }
    this.agents.set(key, agent);
    return agent;
  }

  /** Whether a request to the machine's port would reuse an idle stream (then none needs opening). */
  hasIdle(instanceId: string, port: number): boolean {
    const agent = this.agents.get(`${instanceId}:${port}`);
    return Object.values(agent?.freeSockets ?? {}).some((sockets) => (sockets?.length ?? 0) > 0);
  }

  /** Every idle stream closed (shutdown). */
  close(): void {
    for (const key of [...this.agents.keys()]) this.drop(key);
  }

  private drop(key: string): void {
    this.agents.get(key)?.destroy();
    this.agents.delete(key);
  }
}

/**
 * An agent stream dressed as the socket http.Agent manages: keep-alive and no-delay are the agent
 * channel's business (no-ops), ref/unref are not needed (the stream holds no handle of its own), and
 * a timeout emits 'timeout' after that long without bytes either way (the agent closes idle streams on it).
 */
function asPooledSocket(stream: Duplex): Socket {
  const socket = stream as Duplex & Partial<Socket> & { timeout?: number; idleTimer?: NodeJS.Timeout };
  const arm = () => {
    if (socket.idleTimer) clearTimeout(socket.idleTimer);
    socket.idleTimer = socket.timeout ? setTimeout(() => socket.emit('timeout'), socket.timeout).unref() : undefined;
  };
  socket.setKeepAlive = () => socket as Socket;
  socket.setNoDelay = () => socket as Socket;
  socket.ref = () => socket as Socket;
  socket.unref = () => socket as Socket;
  socket.setTimeout = (ms: number, callback?: () => void) => {
    socket.timeout = ms;
    if (callback) socket.once('timeout', callback);
    arm();
    return socket as Socket;
  };
  stream.on('data', () => socket.timeout && arm());
  stream.on('close', () => socket.idleTimer && clearTimeout(socket.idleTimer));
  return socket as Socket;
}

