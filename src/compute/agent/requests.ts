// Request/response correlation on channel 0: ids, per-request timeouts, and settling each pending
// call with the agent's answer. The table lives as long as the client; the connection empties it
// whenever a session ends, because the agent forgets every request then too. Answers come from the
// guest: each is parsed (ResponseShape, then the method's result shape) before anyone sees it.
import { CONTROL_CHANNEL, encodeJson, Frame, FrameKind, HEADER_BYTES, MAX_PAYLOAD, type AgentMethod } from '../../protocol/agent';
import { parsePeerJson, peerText, type PeerShape } from '../../protocol/peer-input';
import { ChannelInUseError } from './channels';
import { AgentCallError } from './errors';
import type { LinkWriter } from './link-writer';
import { AgentErrorShape, MAX_AGENT_TEXT, RESULT_SHAPES, ResponseShape } from '../../protocol/agent-shapes';

interface Pending {
  method: string;
  shape: PeerShape<unknown>;
  resolve: (value: unknown) => void;
  reject: (error: Error) => void;
  timer: NodeJS.Timeout;
  /** Date.now() after which an answer is late even if the timer has not run yet (a busy event loop reads I/O before timers). */
  deadline: number;
  timeoutMs: number;
  /** Runs synchronously with the response, before any later frame: channels register here. */
  onResult?: (result: unknown) => void;
}

export class RequestTable {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();

  constructor(
    /** Something from the guest that does not fit: logged and counted against the link. */
    private readonly peerFault: (reason: string) => void,
    /** An answer nobody waits for any more (it timed out here); the channel table closes what it opened. */
    private readonly onLateResult: (result: unknown) => void,
  ) {}

  /**
   * Writes the request on the link (null: not connected) and waits for its answer, at most
   * timeoutMs. The answer is the method's result, parsed; one that does not fit fails the call.
   */
  send(link: LinkWriter | null, method: AgentMethod, params: unknown, timeoutMs: number, onResult?: (result: unknown) => void): Promise<unknown> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      if (!link) return reject(new AgentCallError('disconnected', `${method}: connection to the agent lost`));
      const frame = encodeJson(FrameKind.REQUEST, CONTROL_CHANNEL, { id, method, params });
      if (frame.length - HEADER_BYTES > MAX_PAYLOAD) return reject(new AgentCallError('bad_request', `${method}: request too large`));
      if (!link.write([frame])) {
        return reject(new AgentCallError('stalled', `${method}: the agent is not reading (${link.held} bytes wait for it)`));
      }
      const waitMs = Math.max(1, timeoutMs);
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(timedOut(method, timeoutMs));
      }, waitMs);
      const deadline = Date.now() + waitMs;
      this.pending.set(id, { method, shape: RESULT_SHAPES[method] as PeerShape<unknown>, resolve, reject, timer, deadline, onResult, timeoutMs });
    });
  }

  /** A RESPONSE frame: settles its request. */
  onResponse(frame: Frame): void {
    const parsed = parsePeerJson(ResponseShape, frame.payload);
    if (!parsed.ok) return this.peerFault(parsed.reason);
    const message = parsed.value;
    const pending = this.pending.get(message.id);
    if (!pending) {
      if (message.id >= this.nextId) return this.peerFault(`agent response: to request ${message.id}, never sent`);
      if (message.error === undefined) this.onLateResult(message.result);
      return;
    }
    this.pending.delete(message.id);
    clearTimeout(pending.timer);
    if (Date.now() > pending.deadline) {
      // Past its deadline the caller has its timeout, whatever order the event loop ran things in.
      pending.reject(timedOut(pending.method, pending.timeoutMs));
      if (message.error === undefined) this.onLateResult(message.result);
      return;
    }
    if (message.error !== undefined) {
      const error = AgentErrorShape.parse(message.error);
      if (!error.ok) return this.badAnswer(pending, error.reason);
      pending.reject(new AgentCallError(error.value.code, `${pending.method}: ${peerText(error.value.message, MAX_AGENT_TEXT)}`));
      return;
    }
    const result = pending.shape.parse(message.result);
    if (!result.ok) return this.badAnswer(pending, result.reason);
    try {
      pending.onResult?.(result.value);
    } catch (error) {
      if (error instanceof ChannelInUseError) return this.badAnswer(pending, `${pending.method} result: ${error.message}`);
      pending.reject(error as Error);
      return;
    }
    pending.resolve(result.value);
  }

  /** The session ended: no answer will come for anything in flight. */
  failAll(error: AgentCallError): void {
    for (const [id, p] of this.pending) {
      clearTimeout(p.timer);
      this.pending.delete(id);
      p.reject(error);
    }
  }

  private badAnswer(pending: Pending, reason: string): void {
    this.peerFault(reason);
    pending.reject(new AgentCallError('bad_response', `${pending.method}: the agent's answer does not fit (${reason})`));
  }
}

function timedOut(method: string, timeoutMs: number): AgentCallError {
  return new AgentCallError('timeout', `${method}: no answer from the agent within ${timeoutMs} ms`);
}
