// The one error type of the host side of the agent protocol. Callers (the exec endpoint, the
// machine host) branch on `code` and `retryable`, so the agent's own codes and the ways a call can
// fail on the way (timeout, lost connection) share one type.
import type { AgentErrorCode } from '../agent-protocol';

export type AgentCallErrorCode = AgentErrorCode | 'timeout' | 'disconnected' | 'closed' | 'protocol';

/** A failed call. code is the agent's error code, or what went wrong on the way. */
export class AgentCallError extends Error {
  constructor(
    readonly code: AgentCallErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'AgentCallError';
  }

  /** The call may succeed if repeated (after the agent is back). */
  get retryable(): boolean {
    return this.code === 'timeout' || this.code === 'disconnected';
  }
}
