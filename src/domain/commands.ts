// Commands run in an instance: exec streams ordered output and ends with a completion; each run is
// a record (counts and outcome, never the output). A client-chosen id makes exec idempotent: the
// same id with the same request answers the recorded outcome instead of running again. A client
// that goes away, or an interrupt, cancels the command.
import { createHash } from 'node:crypto';
import { KisteError } from '../errors';
import { AgentCallError, type ExecStream } from '../compute/guest-agent';
import type { GuestAgents } from '../compute/machine-host';
import type { Command, CommandOutcome, CommandStore } from '../store/commands';
import { appendEvent } from '../store/events';
import type { Clock } from './clock';
import type { Instances } from './instances';
import { newId } from './secrets';
import type { Transactions } from './transactions';

/** Output a command may write before it is stopped (output_limit_exceeded), unless the settings say otherwise. */
export const OUTPUT_LIMIT_BYTES = 256 * 1024 * 1024;

export interface CommandSettings {
  /** Bytes of output (stdout and stderr together) a command may write before it is stopped. */
  outputLimitBytes: number;
}

export interface ExecInput {
  argv: string[];
  cwd?: string | null;
  env?: Record<string, string>;
  id?: string | null;
  timeoutMs?: number;
}

export type ExecEvent =
  | { type: 'started'; id: string; instance: string }
  | { type: 'output'; id: string; sequence: number; stream: 'stdout' | 'stderr'; data_base64: string }
  | {
      type: 'completed'; id: string; instance: string; exit_code: number; status: 'exited' | 'signaled' | 'timed_out' | 'cancelled' | 'output_limit_exceeded';
      duration_ms: number; stdout_bytes: number; stderr_bytes: number; signal: number | null;
    }
  | { type: 'failed'; id: string; instance: string; message: string };

export class Commands {
  /** Cancel functions of commands running in this process. */
  private readonly cancels = new Map<string, () => void>();

  constructor(
    private readonly transactions: Transactions,
    private readonly store: CommandStore,
    private readonly instances: Instances,
    private readonly host: GuestAgents,
    private readonly environments: { variables(accountId: string, versionId: string | null): Promise<Record<string, string>> },
    private readonly clock: Clock,
    private readonly settings: CommandSettings = { outputLimitBytes: OUTPUT_LIMIT_BYTES },
  ) {}

  /** Checks and records the command, then streams it. Errors before the stream are thrown here. */
  async exec(accountId: string, name: string, input: ExecInput, clientGone: AbortSignal): Promise<AsyncIterable<ExecEvent>> {
    const instance = await this.instances.running(accountId, name);
    const requestHash = hashRequest(input);
    // The environment's variables are every command's; the request's own env is laid over them.
    const variables = await this.environments.variables(accountId, instance.environmentVersionId);
    const start = (instanceId: string) => this.startInAgent(instanceId, { ...input, env: { ...variables, ...input.env } });
    if (input.id) {
      const existing = await this.store.findById(input.id);
      if (existing) {
        if (existing.accountId !== accountId || existing.instanceId !== instance.id || existing.requestHash !== requestHash) {
          throw new KisteError('P11', { message: 'This command id was used for a different request', param: 'id' });
        }
        if (existing.status === 'running') throw new KisteError('P11', { message: 'A command with this id is still running', param: 'id' });
        return replay(existing, name);
      }
    }
    const id = input.id ?? newId();
    // A client's id must be recorded before the command runs (two requests with the same id race
    // to the unique row, and only the winner may run). An id made here is unique already, so the
    // agent starts the command while the record is written: it saves a transaction's time per exec.
    const startEarly = input.id ? null : start(instance.id);
    startEarly?.catch(() => undefined); // awaited in stream(); this only keeps an early failure from going unhandled
    let record: Command;
    try {
      record = await this.transactions.run(async (tx) => {
        const created = await this.store.createRunning(tx, { id, accountId, instanceId: instance.id, requestHash, startedAt: this.clock.now() });
        await appendEvent(tx, accountId, { type: 'command.started', resourceType: 'command', resourceId: id, data: { instance: name } });
        return created;
      });
    } catch (error) {
      if (startEarly) cancelOnceStarted(startEarly);
      throw error;
    }
    return this.stream(record, name, clientGone, () => startEarly ?? start(record.instanceId));
  }

  list(accountId: string, instanceId: string): Promise<Command[]> {
    return this.store.list(accountId, instanceId);
  }

  async get(accountId: string, instanceId: string, id: string): Promise<Command> {
    const command = await this.store.find(accountId, instanceId, id);
    if (!command) throw new KisteError('C01', { param: 'id' });
    return command;
  }

  /** Asks a running command to stop (status cancelled); false when it had already finished. */
  async interrupt(accountId: string, instanceId: string, id: string): Promise<{ accepted: boolean; command: Command }> {
    const command = await this.get(accountId, instanceId, id);
    const cancel = this.cancels.get(id);
    if (command.status !== 'running' || !cancel) return { accepted: false, command };
    const updated = await this.store.recordCancelRequest(id, this.clock.now());
    cancel();
    return { accepted: true, command: updated };
  }

  private startInAgent(instanceId: string, input: ExecInput): Promise<ExecStream> {
    return this.host.agent(instanceId).exec({
      argv: input.argv,
      cwd: input.cwd ?? null,
      env: input.env,
      timeout_ms: input.timeoutMs ?? 0,
      output_limit_bytes: this.settings.outputLimitBytes,
    });
  }

  private async *stream(record: Command, name: string, clientGone: AbortSignal, start: () => Promise<ExecStream>): AsyncIterable<ExecEvent> {
    const id = record.id;
    // An interrupt may come while the agent is still starting the command: remember it.
    let interruptedEarly = false;
    this.cancels.set(id, () => void (interruptedEarly = true));
    const starting = start();
    starting.catch(() => undefined); // awaited below; a stream closed before that must not leave it unhandled
    let exec: ExecStream | undefined;
    let settled = false;
    const settle = (data: CommandOutcome) => {
      settled = true;
      return this.finish(record, data, name);
    };
    const cancel = () => void exec?.cancel().catch(() => undefined);
    try {
      yield { type: 'started', id, instance: name };
      try {
        exec = await starting;
      } catch (error) {
        const message = error instanceof AgentCallError || error instanceof Error ? error.message : String(error);
        await settle({ status: 'failed', errorMessage: message });
        yield { type: 'failed', id, instance: name, message };
        return;
      }
      this.cancels.set(id, cancel);
      clientGone.addEventListener('abort', cancel);
      // The client went away, or an interrupt came, while the agent was starting the command.
      if (clientGone.aborted || interruptedEarly) cancel();
      try {
        let sequence = 0;
        for await (const chunk of exec) {
          if (clientGone.aborted) continue; // drain: the command is being cancelled
          yield { type: 'output', id, sequence: sequence++, stream: chunk.stream, data_base64: chunk.data.toString('base64') };
        }
        const exit = await exec.exit;
        await settle({
          status: 'finished', completionStatus: exit.status, exitCode: exit.exit_code, signal: exit.signal,
          durationMs: BigInt(exit.duration_ms), stdoutBytes: BigInt(exit.stdout_bytes), stderrBytes: BigInt(exit.stderr_bytes),
        });
        yield {
          type: 'completed', id, instance: name, exit_code: exit.exit_code, status: exit.status,
          duration_ms: exit.duration_ms, stdout_bytes: exit.stdout_bytes, stderr_bytes: exit.stderr_bytes, signal: exit.signal,
        };
      } catch (error) {
        const message = error instanceof Error ? error.message : String(error);
        await settle({ status: 'failed', errorMessage: message });
        yield { type: 'failed', id, instance: name, message };
      }
    } finally {
      clientGone.removeEventListener('abort', cancel);
      this.cancels.delete(id);
      if (!settled) {
        // The stream was closed before the command ended (the client left at once): stop it, close the record.
        cancelOnceStarted(starting);
        await this.finish(record, { status: 'failed', errorMessage: 'the client went away before the command finished' }, name).catch(() => undefined);
      }
    }
  }

  private async finish(record: Command, data: CommandOutcome, name: string): Promise<void> {
    await this.transactions.run(async (tx) => {
      await this.store.finish(tx, record.id, data, this.clock.now());
      await appendEvent(tx, record.accountId, {
        type: 'command.completed', resourceType: 'command', resourceId: record.id, data: { instance: name, status: data.completionStatus ?? data.status },
      });
    });
  }
}

/** Cancels a command whose start may still be under way (nothing to do if it failed to start). */
function cancelOnceStarted(starting: Promise<ExecStream>): void {
  void starting.then((handle) => handle.cancel(), () => undefined).catch(() => undefined);
}

function hashRequest(input: ExecInput): string {
  return createHash('sha256')
    .update(JSON.stringify([input.argv, input.cwd ?? null, Object.entries(input.env ?? {}).sort(), input.timeoutMs ?? 0]))
    .digest('hex');
}

async function* replay(command: Command, name: string): AsyncIterable<ExecEvent> {
  yield { type: 'started', id: command.id, instance: name };
  if (command.status === 'failed' || command.completionStatus === null) {
    yield { type: 'failed', id: command.id, instance: name, message: command.errorMessage ?? 'the command failed' };
    return;
  }
  yield {
    type: 'completed', id: command.id, instance: name, exit_code: command.exitCode ?? 0,
    status: command.completionStatus as 'exited', duration_ms: Number(command.durationMs ?? 0),
    stdout_bytes: Number(command.stdoutBytes ?? 0), stderr_bytes: Number(command.stderrBytes ?? 0), signal: command.signal,
  };
}
