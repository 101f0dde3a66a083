// A stand-in for the guest agent, for fault injection: it speaks just enough of the protocol
// (SYNC_OK with the host's nonce, hello, a few methods with valid answers) for a real AgentClient
// to stand a session on a unix socket, and lets a test write anything at all to the host or stop
// reading from it. Hostile behaviour is the test's; this only keeps the honest part short.
import { mkdtempSync, rmSync } from 'node:fs';
import * as net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AgentClient, AgentClientOptions } from '../../src/compute/agent-client';
import {
  decodeJson,
  decodeSync,
  encodeJson,
  encodeSync,
  Frame,
  FrameDecoder,
  FrameKind,
  MAX_PAYLOAD,
  SyncPhase,
} from '../../src/protocol/agent';

export interface Request {
  id: number;
  method: string;
  params: Record<string, unknown>;
}

/** What the stand-in answers: a result, or nothing (undefined: the test answers, or no one does). */
export type Answerer = (request: Request, agent: StandInAgent) => unknown;

export const VALID_METRICS = {
  cpu: { cores: 2, load_1: 0.1, load_5: 0.2, load_15: 0.3, percent: 12.5 },
  memory: { total_mib: 1024, used_mib: 300, available_mib: 724 },
  disk: { total_mib: 4096, used_mib: 1000, available_mib: 3096 },
  uptime_seconds: 42,
  processes: [{ pid: 1, name: 'systemd', command: '/sbin/init', user: 'root', cpu_percent: 0, memory_mib: 12 }],
};

/** A well-behaved agent's answers to hello, metrics and time.set. */
export const HONEST: Answerer = (request) => {
  switch (request.method) {
    case 'hello':
      return { protocol_version: 1, agent_version: 'stand-in', boot_id: '0f0f0f0f-0000-4000-8000-000000000000', uptime_seconds: 1, methods: ['hello', 'metrics', 'time.set'], max_payload: MAX_PAYLOAD };
    case 'metrics':
      return VALID_METRICS;
    case 'time.set':
      return { previous_epoch_ms: 1, epoch_ms: Number(request.params.epoch_ms) || 0 };
    default:
      return undefined;
  }
};

export class StandInAgent {
  readonly socketPath: string;
  private readonly dir: string;
  private readonly server: net.Server;
  /** The current connection from the host. */
  socket: net.Socket | null = null;
  connections = 0;
  requests: Request[] = [];
  /** Frames from the host other than SYNC and REQUEST (DATA, WINDOW, CLOSE); the payload is a view, copy to keep it. */
  streamFrame: (frame: Frame) => void = () => undefined;
  answer: Answerer = HONEST;
  private syncedWaiters: (() => void)[] = [];
  synced = false;

  private constructor() {
    this.dir = mkdtempSync(join(tmpdir(), 'kiste-stand-in-'));
    this.socketPath = join(this.dir, 'agent.sock');
    this.server = net.createServer((socket) => this.accept(socket));
  }

  static async start(): Promise<StandInAgent> {
    const agent = new StandInAgent();
    await new Promise<void>((resolve) => agent.server.listen(agent.socketPath, resolve));
    return agent;
  }

  client(options: Partial<AgentClientOptions> = {}): AgentClient {
    return AgentClient.unixSocket(this.socketPath, { requestTimeoutMs: 2000, reconnectMinMs: 5, reconnectMaxMs: 20, syncRetryMs: 200, ...options });
  }

  /** Raw bytes to the host. */
  send(bytes: Buffer): void {
    if (this.socket && !this.socket.destroyed) this.socket.write(bytes);
  }

  respond(id: number, body: { result?: unknown; error?: unknown }): void {
    this.send(encodeJson(FrameKind.RESPONSE, 0, { id, ...body }));
  }

  /** Resolves once the current connection completed SYNC (the next frames are the session's). */
  whenSynced(): Promise<void> {
    return this.synced ? Promise.resolve() : new Promise((resolve) => this.syncedWaiters.push(resolve));
  }

  async close(): Promise<void> {
    this.socket?.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    rmSync(this.dir, { recursive: true, force: true });
  }

  private accept(socket: net.Socket): void {
    this.socket?.destroy();
    this.socket = socket;
    this.connections += 1;
    this.synced = false;
    socket.on('error', () => undefined);
    const decoder = new FrameDecoder((frame) => this.onFrame(socket, frame), MAX_PAYLOAD, true);
    socket.on('data', (chunk: Buffer) => decoder.push(chunk));
  }

  private onFrame(socket: net.Socket, frame: Frame): void {
    if (socket !== this.socket) return;
    if (frame.kind === FrameKind.SYNC) {
      const marker = decodeSync(frame);
      if (marker?.phase !== SyncPhase.SYNC) return;
      socket.write(encodeSync(SyncPhase.SYNC_OK, marker.nonce));
      this.synced = true;
      for (const wake of this.syncedWaiters.splice(0)) wake();
      return;
    }
    if (frame.kind !== FrameKind.REQUEST) return this.streamFrame(frame);
    const request = decodeJson(frame) as Request;
    this.requests.push(request);
    const result = this.answer(request, this);
    if (result !== undefined) this.respond(request.id, { result });
  }
}
