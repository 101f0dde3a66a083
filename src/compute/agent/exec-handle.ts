// exec: a running command's output as an async iterable whose reader's pace is the command's
// pace (credit goes back only as chunks are taken), its completion as a promise, and its stdin.
// The guest is not trusted to end what it started: a command with a timeout, and one being
// cancelled, ends here too (exitGraceMs after the agent should have ended it) if no exit comes.
import { Writable } from 'node:stream';
import { CreditReceiver, decodeOutput, ExecExitEvent, OUTPUT_HEADER_BYTES } from '../../protocol/agent';
import type { ChannelLink, HostChannel } from './channels';
import { CreditWriter } from './credit-writer';
import { AgentCallError } from './errors';
import { EVENT_SHAPES } from '../../protocol/agent-shapes';
import type { ExecChunk, ExecStream } from './exec-stream';

const DEFAULT_CANCEL_GRACE_MS = 2000;

/**
 * A running command. Iterate it for ordered output chunks (credit goes back to the agent as each
 * chunk is taken, so iteration speed is the command's output speed); `exit` resolves with the
 * completion. The connection dropping rejects both with AgentCallError('disconnected').
 */
export class ExecHandle implements ExecStream {
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
  private exitTimer: NodeJS.Timeout | null = null;
  private exitDueAt = 0;

  /** timeoutMs: the command's own timeout (0: none); its exit is due exitGraceMs after it. */
  constructor(
    private readonly client: ChannelLink,
    readonly channel: number,
    readonly pid: number,
    window: number,
    stdinWindow: number,
    timeoutMs: number,
    private readonly exitGraceMs: number,
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
    if (timeoutMs > 0) this.exitDueIn(timeoutMs + exitGraceMs, `the command did not end ${exitGraceMs} ms after its timeout`);
  }

  /** Sends a signal to the command's process group. */
  async signal(signal: NodeJS.Signals | number): Promise<boolean> {
    const result = await this.client.request('exec.signal', { channel: this.channel, signal });
    return result.delivered;
  }

  /** SIGTERM, then SIGKILL after graceMs; completes with status cancelled. */
  async cancel(graceMs?: number): Promise<boolean> {
    this.exitDueIn((graceMs ?? DEFAULT_CANCEL_GRACE_MS) + this.exitGraceMs, 'the command did not end after it was cancelled');
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

  /** The host gives the command up (a deadline, too much output): the agent stops it, readers and exit fail with error. */
  giveUp(error: AgentCallError): void {
    this.onReset(error);
  }

  /** @internal */
  channelHandler(): HostChannel {
    return {
      onData: (payload) => {
        if (this.exitEvent) return this.broken('output after the exit');
        const chunk = decodeOutput(payload);
        this.allowance -= payload.length;
        if (!chunk || chunk.sequence !== this.expectedSequence || this.allowance < 0) {
          // Frames on one stream cannot be lost or reordered, nor exceed credit: a broken or hostile agent.
          return this.broken('bad output chunk');
        }
        this.expectedSequence += 1;
        // Copied: the payload is a view into the decoder's buffer, which a small chunk would keep alive.
        const owned = { ...chunk, data: Buffer.from(chunk.data) };
        if (this.discarding) this.consumed(owned);
        else this.chunks.push(owned);
        this.notify();
      },
      onWindow: (increment) => {
        if (!this.writer?.grant(increment)) this.broken(`WINDOW of ${increment} bytes beyond the stdin window`);
      },
      onEvent: (event, data) => {
        if (event !== 'exec.exit' || this.exitEvent || this.error) return;
        const exit = EVENT_SHAPES['exec.exit'].parse(data);
        if (!exit.ok || exit.value.channel !== this.channel) return this.broken(exit.ok ? 'exit event for another channel' : exit.reason);
        this.exitEvent = exit.value;
        this.clearExitTimer();
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

  /** The agent broke the protocol on this channel: counted against its link, and the command is given up. */
  private broken(reason: string): void {
    if (this.exitEvent || this.error) return;
    const message = `exec channel ${this.channel}: ${reason}`;
    this.client.peerFault(message);
    this.onReset(new AgentCallError('protocol', message));
  }

  private onReset(error: AgentCallError): void {
    if (this.exitEvent || this.error) return;
    this.clearExitTimer();
    this.error = error;
    this.rejectExit(error);
    this.writer?.fail(error);
    this.client.closeChannel(this.channel, error.message);
    this.notify();
  }

  /** The exit must come within ms (the earliest deadline set wins); otherwise the command is given up. */
  private exitDueIn(ms: number, reason: string): void {
    if (this.exitEvent || this.error) return;
    const at = Date.now() + ms;
    if (this.exitTimer && this.exitDueAt <= at) return;
    this.clearExitTimer();
    this.exitDueAt = at;
    this.exitTimer = setTimeout(() => {
      this.exitTimer = null;
      this.onReset(new AgentCallError('timeout', `exec channel ${this.channel}: ${reason}`));
    }, Math.min(ms, 2 ** 31 - 1)); // setTimeout's limit (timeouts are a day at most)
  }

  private clearExitTimer(): void {
    if (this.exitTimer) clearTimeout(this.exitTimer);
    this.exitTimer = null;
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
