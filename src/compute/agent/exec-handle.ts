// exec: a running command's output as an async iterable whose reader's pace is the command's
// pace (credit goes back only as chunks are taken), its completion as a promise, and its stdin.
import { Writable } from 'node:stream';
import { CreditReceiver, decodeOutput, ExecExitEvent, OUTPUT_HEADER_BYTES, OutputChunk } from '../agent-protocol';
import type { ChannelLink, HostChannel } from './channels';
import { CreditWriter } from './credit-writer';
import { AgentCallError } from './errors';

export type ExecChunk = OutputChunk;

/**
 * A running command. Iterate it for ordered output chunks (credit goes back to the agent as each
 * chunk is taken, so iteration speed is the command's output speed); `exit` resolves with the
 * completion. The connection dropping rejects both with AgentCallError('disconnected').
 */
export class ExecHandle implements AsyncIterable<ExecChunk> {
  readonly exit: Promise<ExecExitEvent>;
  /** Present when started with stdin: true; ending it closes the command's input. */
  readonly stdin: Writable | null;
  private readonly chunks: ExecChunk[] = [];
  private readonly credit: CreditReceiver;
  /** Bytes the agent may still send: the guest is not trusted to respect credit, so it is checked. */
  private allowance: number;
  private wake: (() => void) | null = null;
  private exitEvent: ExecExitEvent | null = null;
  private error: Error | null = null;
  private discarding = false;
  private iterating = false;
  private expectedSequence = 0;
  private resolveExit!: (event: ExecExitEvent) => void;
  private rejectExit!: (error: Error) => void;
  private readonly writer: CreditWriter | null;

  constructor(
    private readonly client: ChannelLink,
    readonly channel: number,
    readonly pid: number,
    window: number,
    stdinWindow: number,
  ) {
    this.credit = new CreditReceiver(window);
    this.allowance = window;
    this.exit = new Promise((resolve, reject) => {
      this.resolveExit = resolve;
      this.rejectExit = reject;
    });
    this.exit.catch(() => undefined); // a caller that never awaits exit must not crash the process
    this.writer = stdinWindow > 0 ? new CreditWriter(client, channel, stdinWindow) : null;
    const writer = this.writer;
    this.stdin = writer
      ? new Writable({
          write: (chunk: Buffer, _encoding, callback) => writer.write(chunk, callback),
          final: (callback) => {
            writer.end();
            callback();
          },
        })
      : null;
    this.stdin?.on('error', () => undefined);
  }

  /** Sends a signal to the command's process group. */
  async signal(signal: NodeJS.Signals | number): Promise<boolean> {
    const result = await this.client.request('exec.signal', { channel: this.channel, signal });
    return result.delivered;
  }

  /** SIGTERM, then SIGKILL after graceMs; completes with status cancelled. */
  async cancel(graceMs?: number): Promise<boolean> {
    const result = await this.client.request('exec.cancel', { channel: this.channel, grace_ms: graceMs });
    return result.accepted;
  }

  /** Output received but not yet taken by the reader: never more than the window. */
  get bufferedBytes(): number {
    return this.chunks.reduce((n, c) => n + OUTPUT_HEADER_BYTES + c.data.length, 0);
  }

  /** Stop reading: further output is thrown away as it arrives (the command runs on; see cancel()). */
  discard(): void {
    this.discarding = true;
    for (const chunk of this.chunks.splice(0)) this.consumed(chunk);
  }

  [Symbol.asyncIterator](): AsyncIterator<ExecChunk> {
    if (this.iterating) throw new Error('exec output can be iterated only once');
    this.iterating = true;
    return {
      next: async (): Promise<IteratorResult<ExecChunk>> => {
        for (;;) {
          const chunk = this.chunks.shift();
          if (chunk) {
            this.consumed(chunk);
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

  /** @internal */
  channelHandler(): HostChannel {
    return {
      onData: (payload) => {
        const chunk = decodeOutput(payload);
        this.allowance -= payload.length;
        if (!chunk || chunk.sequence !== this.expectedSequence || this.allowance < 0) {
          // Frames on one stream cannot be lost or reordered, nor exceed credit: a broken or hostile agent.
          return this.onReset(new AgentCallError('protocol', `exec channel ${this.channel}: bad output chunk`));
        }
        this.expectedSequence += 1;
        if (this.discarding) this.consumed(chunk);
        else this.chunks.push(chunk);
        this.notify();
      },
      onWindow: (increment) => this.writer?.grant(increment),
      onEvent: (event, data) => {
        if (event !== 'exec.exit') return;
        this.exitEvent = data as ExecExitEvent;
        this.resolveExit(this.exitEvent);
        this.writer?.fail(new Error('command finished'));
        this.notify();
      },
      onClose: () => {
        if (!this.exitEvent) this.onReset(new AgentCallError('protocol', `exec channel ${this.channel} closed without an exit`));
      },
      onReset: (error) => this.onReset(error),
    };
  }

  private onReset(error: AgentCallError): void {
    if (this.exitEvent || this.error) return;
    this.error = error;
    this.rejectExit(error);
    this.writer?.fail(error);
    this.client.closeChannel(this.channel, error.message);
    this.notify();
  }

  private consumed(chunk: ExecChunk): void {
    const grant = this.credit.consumed(OUTPUT_HEADER_BYTES + chunk.data.length);
    this.allowance += grant;
    this.client.sendWindow(this.channel, grant);
  }

  private notify(): void {
    const wake = this.wake;
    this.wake = null;
    wake?.();
  }
}
