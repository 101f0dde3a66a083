// A machine's guest agent as code outside src/compute uses it (MachineHost.agent): the requests it
// makes, not the connection's upkeep. AgentClient implements it; the domain depends on this alone.
import type { Duplex } from 'node:stream';
import type { ExecExitEvent, ExecStartParams, MetricsResult } from '../protocol/agent';
import type { ExecStream } from './agent/exec-stream';
import type { RequestOptions } from './agent/options';

// What the agent's callers need along with it: its errors and the exec handle.
export { AgentCallError } from './agent/errors';
export type { AgentCallErrorCode } from './agent/errors';
export type { ExecChunk, ExecStream } from './agent/exec-stream';
export type { RequestOptions } from './agent/options';

export interface GuestAgent {
  /** Starts a command; its output is read from the handle, at the reader's pace. */
  exec(params: ExecStartParams, options?: RequestOptions): Promise<ExecStream>;
  /** Runs a command to its end and collects its output (for small outputs). */
  run(params: ExecStartParams, options?: RequestOptions): Promise<ExecExitEvent & { stdout: Buffer; stderr: Buffer }>;
  metrics(sampleMs?: number, options?: RequestOptions): Promise<MetricsResult>;
  /** A byte stream to a TCP port inside the guest. */
  openTcp(port: number, host?: string, options?: RequestOptions): Promise<Duplex>;
}
