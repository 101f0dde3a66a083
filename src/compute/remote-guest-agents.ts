// Guest agents on a kiste-worker, through worker-api.yaml: the control plane's stand-in for the
// in-process agent clients (issue 22). The worker's answers and stream messages are untrusted
// input like the agent's own: what the agent's shapes declare is checked again here. Failures
// come out as the AgentCallError the domain already handles: a worker out of reach is a lost agent
// link (retryable), an answer that does not fit is a bad response.
import { Writable, type Duplex } from 'node:stream';
import type { RawData, WebSocket } from 'ws';
import type { components } from '../generated/worker-api';
import type { ExecExitEvent, ExecStartParams, MetricsResult } from '../protocol/agent';
import { EVENT_SHAPES, RESULT_SHAPES } from '../protocol/agent-shapes';
import { bufferOf, byteStream } from '../net/websocket';
import { peerText } from '../protocol/peer-input';
import { AgentCallError } from './agent/errors';
import type { ExecChunk, ExecStream } from './agent/exec-stream';
import { AGENT_REQUEST_MS, type RequestOptions } from './agent/options';
import { runToEnd, type RunResult } from './agent/run-to-end';
import type { GuestAgent } from './guest-agent';
import type { GuestAgents } from './machine-host';
import { machinePath, parseStreamMessage, wire } from './worker-wire';
import { WorkerCallError, WorkerProtocolError, WorkerTimeoutError, WorkerUnreachableError, type WorkerCalls } from './worker-client';

type Wire = components['schemas'];

/** Output received but not yet read, past which the stream from the worker is paused. */
const RECEIVE_HIGH_WATER = 1024 * 1024;
/** What each message is charged beyond its bytes (the chunk object, the buffer it keeps): tiny chunks do not multiply under the bound. */
const MESSAGE_OVERHEAD_BYTES = 64;
/** A newer chunk of the same stream is appended to the last one queued while it is smaller than this. */
const MERGE_BELOW_BYTES = 64 * 1024;
/** As AgentClient's: how long after a command's timeout its exit may take before run() gives up. */
const EXIT_GRACE_MS = 30_000;
/** Added to an agent call's own timeout for the hop to the worker. */
const HOP_MS = 5_000;

export class RemoteGuestAgents implements GuestAgents {
  constructor(private readonly worker: WorkerCalls) {}

  agent(id: string): GuestAgent {
    return new RemoteGuestAgent(this.worker, machinePath(id, 'agent'));
  }
}

class RemoteGuestAgent implements GuestAgent {
  constructor(
    private readonly worker: WorkerCalls,
    /** `/w1/machines/<id>/agent`. */
    private readonly path: string,
  ) {}

  async metrics(sampleMs?: number, options?: RequestOptions): Promise<MetricsResult> {
    const body: Wire['MetricsRequest'] = sampleMs === undefined ? {} : { sample_ms: sampleMs };
    // The agent samples for sample_ms before it answers.
    const timeoutMs = (options?.timeoutMs ?? 10_000) + (sampleMs ?? 0);
    const answer = await agentCall(() => this.worker.call('POST', `${this.path}/metrics`, 'AgentMetrics', body, hop({ timeoutMs })));
    const parsed = RESULT_SHAPES.metrics.parse(answer);
    if (!parsed.ok) throw new AgentCallError('bad_response', `the worker's metrics do not fit: ${parsed.reason}`);
    return parsed.value;
  }

  async exec(params: ExecStartParams, options?: RequestOptions): Promise<ExecStream> {
    const body = wire.execStart(params, options?.timeoutMs);
    const started = (await agentCall(() => this.worker.call('POST', `${this.path}/execs`, 'StartExec', body, hop(options)))) as Wire['ExecStarted'];
    return agentCall(() => this.worker.upgrade(`/w1/execs/${started.exec}/stream`, 'AttachExec', (ws) => new RemoteExec(this.worker, started.exec, started.pid, ws, params.stdin === true)));
  }

  run(params: ExecStartParams, options: RequestOptions = {}): Promise<RunResult> {
    return runToEnd((p, o) => this.exec(p, o), params, options, EXIT_GRACE_MS);
  }

  async openTcp(port: number, host?: string, options?: RequestOptions): Promise<Duplex> {
    // The protocol carries streams to the guest's loopback only (all kiste asks for).
    if (host !== undefined) throw new AgentCallError('bad_request', 'a worker opens TCP streams to the guest\'s loopback only');
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new AgentCallError('bad_request', `not a port: ${port}`);
    const stream = await agentCall(() => this.worker.upgrade(`${this.path}/tcp/${port}`, 'OpenTcp', byteStream, hop(options)));
    // Broken by what came with the 101: the open failed.
    if (stream.errored) throw new AgentCallError('bad_response', `tcp stream to port ${port}: ${stream.errored.message}`);
    return stream;
  }
}

/** A command running on a worker, read from its exec stream at this side's pace. */
class RemoteExec implements ExecStream {
  readonly exit: Promise<ExecExitEvent>;
  readonly stdin: Writable | null;
  private readonly chunks: ExecChunk[] = [];
  private queuedBytes = 0;
  private sequence = 0;
  private ended = false;
  private error: AgentCallError | null = null;
  private exitEvent: ExecExitEvent | null = null;
  private discarding = false;
  private iterating = false;
  private wake: (() => void) | null = null;
  private resolveExit!: (exit: ExecExitEvent) => void;
  private rejectExit!: (error: Error) => void;

  constructor(
    private readonly worker: WorkerCalls,
    private readonly execId: string,
    readonly pid: number,
    private readonly ws: WebSocket,
    withStdin: boolean,
  ) {
    this.exit = new Promise((resolve, reject) => {
      this.resolveExit = resolve;
      this.rejectExit = reject;
    });
    this.exit.catch(() => undefined); // a caller that never awaits exit must not crash the process
    this.stdin = withStdin
      ? new Writable({
          write: (chunk: Buffer, _encoding, callback) => {
            if (this.ws.readyState !== this.ws.OPEN) return callback(this.error ?? new AgentCallError('disconnected', 'the command\'s stream is closed'));
            this.ws.send(chunk, { binary: true }, (error) => callback(error ?? undefined));
          },
          final: (callback) => {
            if (this.ws.readyState === this.ws.OPEN) this.ws.send('{"type":"stdin_end"}');
            callback();
          },
        })
      : null;
    this.stdin?.on('error', () => undefined);
    ws.on('message', (data: RawData, isBinary: boolean) => this.received(bufferOf(data), isBinary));
    ws.on('error', () => undefined);
    ws.on('close', () => this.failed(new AgentCallError('disconnected', 'the worker closed the command\'s stream before its end')));
  }

  signal(signal: NodeJS.Signals | number): Promise<boolean> {
    return agentCall(async () => ((await this.worker.call('POST', `/w1/execs/${this.execId}/signal`, 'SignalExec', { signal })) as { delivered: boolean }).delivered);
  }

  cancel(graceMs?: number): Promise<boolean> {
    const body = graceMs === undefined ? {} : { grace_ms: graceMs };
    return agentCall(async () => ((await this.worker.call('POST', `/w1/execs/${this.execId}/cancel`, 'CancelExec', body)) as { accepted: boolean }).accepted);
  }

  discard(): void {
    this.discarding = true;
    this.chunks.splice(0);
    this.queuedBytes = 0;
    this.ws.resume();
  }

  giveUp(error: AgentCallError): void {
    this.abandon(error);
  }

  [Symbol.asyncIterator](): AsyncIterator<ExecChunk> {
    if (this.iterating) throw new Error('exec output can be iterated only once');
    this.iterating = true;
    return {
      next: async (): Promise<IteratorResult<ExecChunk>> => {
        for (;;) {
          const chunk = this.chunks.shift();
          if (chunk) {
            this.queuedBytes -= chunk.data.length + MESSAGE_OVERHEAD_BYTES;
            if (this.queuedBytes < RECEIVE_HIGH_WATER / 2) this.ws.resume();
            return { value: chunk, done: false };
          }
          if (this.error) throw this.error;
          if (this.exitEvent) return { value: undefined, done: true };
          await new Promise<void>((resolve) => (this.wake = resolve));
        }
      },
      return: async (): Promise<IteratorResult<ExecChunk>> => {
        this.discard();
        return { value: undefined, done: true };
      },
    };
  }

  private received(bytes: Buffer, isBinary: boolean): void {
    if (this.ended) return this.broken('a message after the end');
    if (isBinary) {
      const stream = bytes[0] === 1 ? 'stdout' : bytes[0] === 2 ? 'stderr' : null;
      if (!stream || bytes.length < 2) return this.broken('an output message without its stream or bytes');
      if (this.discarding) return;
      const last = this.chunks.at(-1);
      if (last && last.stream === stream && last.data.length < MERGE_BELOW_BYTES) {
        // One chunk instead of many small ones (the order within a stream is kept; its sequence is the first's).
        last.data = Buffer.concat([last.data, bytes.subarray(1)]);
        this.queuedBytes += bytes.length - 1;
      } else {
        // Copied: a view would keep the socket's whole read buffer alive while it waits.
        this.chunks.push({ stream, sequence: this.sequence++, data: Buffer.from(bytes.subarray(1)) });
        this.queuedBytes += bytes.length - 1 + MESSAGE_OVERHEAD_BYTES;
      }
      // The worker takes no more from the agent while this side does not read: the guest waits.
      if (this.queuedBytes >= RECEIVE_HIGH_WATER) this.ws.pause();
      return this.notify();
    }
    const end = parseStreamMessage('ExecStreamEnd', bytes);
    if (!end.ok) return this.broken(`an end message that ${end.reason}`);
    const message = end.value;
    this.ended = true;
    if (message.type === 'error') return this.failed(new AgentCallError(message.code, peerText(message.message, 2000)));
    const exit = EVENT_SHAPES['exec.exit'].parse(message.exit);
    if (!exit.ok) return this.broken(`an exit that does not fit: ${exit.reason}`);
    this.exitEvent = exit.value;
    this.resolveExit(exit.value);
    this.stdin?.destroy();
    this.ws.close(1000); // the end: a worker that keeps the stream open holds nothing here
    this.notify();
  }

  /** The worker broke the stream's protocol: the command is given up. */
  private broken(reason: string): void {
    this.abandon(new AgentCallError('bad_response', `exec stream ${this.execId}: ${reason}`));
  }

  /**
   * This side gives the command up: closing the stream cancels it on the worker, and so does an
   * explicit cancel, in case the worker is not reading the stream (its stdin waits on the guest).
   */
  private abandon(error: AgentCallError): void {
    if (this.exitEvent || this.error) return;
    this.failed(error);
    this.cancel().catch(() => undefined);
  }

  private failed(error: AgentCallError): void {
    if (this.exitEvent || this.error) return;
    this.ended = true;
    this.error = error;
    this.rejectExit(error);
    this.stdin?.destroy();
    // Closing gives the command up on the worker; a paused socket would never read the close's answer.
    this.ws.resume();
    if (this.ws.readyState === this.ws.OPEN) this.ws.close(1000);
    this.notify();
  }

  private notify(): void {
    const wake = this.wake;
    this.wake = null;
    wake?.();
  }
}

/**
 * The worker call's deadline: the agent call's own time (the agent's default where the caller names
 * none, as on one host) and the hop. The worker client's shorter default cut commands short on a
 * loaded host that a local agent would have run.
 */
function hop(options?: RequestOptions): number {
  return (options?.timeoutMs ?? AGENT_REQUEST_MS) + HOP_MS;
}

/** A worker call on behalf of an agent call: its failures as the AgentCallError the caller handles. */
async function agentCall<T>(call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (error) {
    if (error instanceof WorkerCallError) {
      throw new AgentCallError(error.agentCode ?? (error.status === 404 ? 'no_such_channel' : 'internal'), error.message);
    }
    if (error instanceof WorkerUnreachableError) throw new AgentCallError('disconnected', error.message, { cause: error });
    if (error instanceof WorkerTimeoutError) throw new AgentCallError('timeout', error.message);
    if (error instanceof WorkerProtocolError) throw new AgentCallError('bad_response', error.message);
    throw error;
  }
}
