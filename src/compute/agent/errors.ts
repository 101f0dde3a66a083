// The one error type of the host side of the agent protocol. Callers (the exec endpoint, the
// machine host) branch on `code` and `retryable`, so the agent's own codes and the ways a call can
// fail on the way (timeout, lost connection) share one type.
import type { AgentErrorCode } from '../../protocol/agent';

/**
 * Besides the agent's own: timeout (no answer in time), disconnected (the session ended), closed
 * (the client was closed), protocol (a stream channel broke the protocol), bad_response (an answer
 * that does not fit its method's shape), stalled (the agent does not read what was sent to it).
 */
export type AgentCallErrorCode = AgentErrorCode | 'timeout' | 'disconnected' | 'closed' | 'protocol' | 'bad_response' | 'stalled';

/** A failed call. code is the agent's error code, or what went wrong on the way. */
export class AgentCallError extends Error {
  constructor(
    readonly code: AgentCallErrorCode,
    message: string,
    /** What it came from (a worker out of reach: the API answers N01). */
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'AgentCallError';
  }

  /** The call may succeed if repeated (after the agent is back). */
  get retryable(): boolean {
    return this.code === 'timeout' || this.code === 'disconnected' || this.code === 'stalled';
  }
}
