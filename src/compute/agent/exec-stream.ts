// A running command as its callers see it, wherever it runs: ExecHandle (this process holds the
// agent's link) and RemoteExec (a worker holds it; worker-api.yaml's exec stream) both are one.
import type { Writable } from 'node:stream';
import type { ExecExitEvent, OutputChunk } from '../../protocol/agent';
import type { AgentCallError } from './errors';

export type ExecChunk = OutputChunk;

/**
 * Iterate it for ordered output chunks, at the reader's pace (the command's output waits while the
 * reader does); `exit` resolves with the completion. A lost link rejects both with AgentCallError.
 */
export interface ExecStream extends AsyncIterable<ExecChunk> {
  readonly exit: Promise<ExecExitEvent>;
  /** Present when started with stdin: true; ending it closes the command's input. */
  readonly stdin: Writable | null;
  /** The command's pid in the guest. */
  readonly pid: number;
  /** Sends a signal to the command's process group. */
  signal(signal: NodeJS.Signals | number): Promise<boolean>;
  /** SIGTERM, then SIGKILL after graceMs; completes with status cancelled. */
  cancel(graceMs?: number): Promise<boolean>;
  /** Stop reading: further output is thrown away as it arrives (the command runs on; see cancel()). */
  discard(): void;
  /** The host gives the command up (a deadline, too much output): it is stopped, readers and exit fail with error. */
  giveUp(error: AgentCallError): void;
}
