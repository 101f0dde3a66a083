// Request/response correlation on channel 0: ids, per-request timeouts, and settling each pending
// call with the agent's answer. The table lives as long as the client; the connection empties it
// whenever a session ends, because the agent forgets every request then too.
import type { Duplex } from 'node:stream';
import { CONTROL_CHANNEL, decodeJson, encodeJson, Frame, FrameKind, MAX_PAYLOAD, ResponseMessage } from '../agent-protocol';
import { AgentCallError } from './errors';
import type { AgentLogger } from './options';

interface Pending {
  method: string;
  resolve: (value: unknown) => void;
  reject: (error: Error) => void;
  timer: NodeJS.Timeout;
  /** Runs synchronously with the response, before any later frame: channels register here. */
  onResult?: (result: unknown) => void;
}

export class RequestTable {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();

  constructor(
    private readonly log: AgentLogger,
    /** An answer nobody waits for any more (it timed out here); the channel table closes what it opened. */
    private readonly onLateResult: (result: unknown) => void,
  ) {}

  /** Writes the request on stream (null: not connected) and waits for its answer. */
  send(stream: Duplex | null, method: string, params: unknown, timeoutMs: number, onResult?: (result: unknown) => void): Promise<unknown> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      if (!stream) return reject(new AgentCallError('disconnected', `${method}: connection to the agent lost`));
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new AgentCallError('timeout', `${method}: no answer from the agent within ${timeoutMs} ms`));
      }, Math.max(1, timeoutMs));
      this.pending.set(id, { method, resolve, reject, timer, onResult });
      const frame = encodeJson(FrameKind.REQUEST, CONTROL_CHANNEL, { id, method, params });
      if (frame.length - 9 > MAX_PAYLOAD) {
        clearTimeout(timer);
        this.pending.delete(id);
        reject(new AgentCallError('bad_request', `${method}: request too large`));
        return;
      }
      stream.write(frame);
    });
  }

  /** A RESPONSE frame: settles its request. */
  onResponse(frame: Frame): void {
    let message: ResponseMessage;
    try {
      message = decodeJson(frame) as ResponseMessage;
    } catch {
      return this.log.warn({}, 'unparsable agent response dropped');
    }
    const pending = this.pending.get(message.id);
    if (!pending) {
      this.onLateResult(message.result);
      return;
    }
    this.pending.delete(message.id);
    clearTimeout(pending.timer);
    if (message.error) {
      pending.reject(new AgentCallError(message.error.code, `${pending.method}: ${message.error.message}`));
      return;
    }
    try {
      pending.onResult?.(message.result);
    } catch (error) {
      pending.reject(error as Error);
      return;
    }
    pending.resolve(message.result);
  }

  /** The session ended: no answer will come for anything in flight. */
  failAll(error: AgentCallError): void {
    for (const [id, p] of this.pending) {
      clearTimeout(p.timer);
      this.pending.delete(id);
      p.reject(error);
    }
  }
}
