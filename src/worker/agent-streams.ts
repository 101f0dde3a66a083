// The worker's side of the guest agent's streams (worker-api.yaml: StartExec, AttachExec,
// SignalExec, CancelExec, OpenTcp): commands started here wait for the control plane to attach to
// their output, and byte streams are carried over WebSockets at the reader's pace on both sides.
import { randomBytes } from 'node:crypto';
import { pipeline, type Duplex } from 'node:stream';
import type { RawData, WebSocket } from 'ws';
import { AgentCallError } from '../compute/agent/errors';
import type { ExecStream } from '../compute/agent/exec-stream';
import type { components } from '../generated/worker-api';
import { bufferOf, byteStream } from '../net/websocket';

type Wire = components['schemas'];

/** A command nobody attached to within this time is cancelled (the control plane went away). */
export const ATTACH_WITHIN_MS = 30_000;
/** Open commands on one worker; one more is refused (a bound for a control plane gone wrong). */
export const MAX_OPEN_EXECS = 1024;
/** Open commands of one machine: one tenant's machine cannot take the worker's whole table. */
export const MAX_OPEN_EXECS_PER_MACHINE = 128;
/** Output written to the WebSocket but not yet flushed: past this, no more is taken from the agent. */
const SEND_HIGH_WATER = 1024 * 1024;
/**
 * What each message is charged beyond its bytes against SEND_HIGH_WATER (a frame, a callback): a
 * guest writing one byte at a time must not make a million messages fit under the bound.
 */
export const MESSAGE_OVERHEAD_BYTES = 64;
const STREAM_CODE = { stdout: 1, stderr: 2 } as const;

interface OpenExec {
  stream: ExecStream;
  machine: string;
  attached: boolean;
  timer: NodeJS.Timeout;
}

/** The exec ids the control plane holds, and the commands they name. */
export class ExecTable {
  private readonly open = new Map<string, OpenExec>();
  /** Open and starting commands per machine (a start holds its slot from before the agent is asked). */
  private readonly perMachine = new Map<string, number>();
  private total = 0;

  get size(): number {
    return this.open.size;
  }

  /** Starts through `start` and keeps the command until it is attached (or given up). */
  async start(machine: string, start: () => Promise<ExecStream>): Promise<Wire['ExecStarted']> {
    if (this.total >= MAX_OPEN_EXECS) throw new AgentCallError('too_many_channels', `this worker already has ${MAX_OPEN_EXECS} commands open`);
    const count = this.perMachine.get(machine) ?? 0;
    if (count >= MAX_OPEN_EXECS_PER_MACHINE) throw new AgentCallError('too_many_channels', `machine ${machine} already has ${MAX_OPEN_EXECS_PER_MACHINE} commands open`);
    this.take(machine, 1);
    let stream: ExecStream;
    try {
      stream = await start();
    } catch (error) {
      this.take(machine, -1);
      throw error;
    }
    const id = randomBytes(16).toString('hex');
    const timer = setTimeout(() => {
      // Nobody came for the output: stop the command rather than hold it (and the agent's channel).
      stream.giveUp(new AgentCallError('closed', 'nobody attached to the command'));
      this.leave(id);
    }, ATTACH_WITHIN_MS);
    timer.unref();
    this.open.set(id, { stream, machine, attached: false, timer });
    return { exec: id, pid: stream.pid };
  }

  private take(machine: string, slots: 1 | -1): void {
    this.total += slots;
    const count = (this.perMachine.get(machine) ?? 0) + slots;
    if (count > 0) this.perMachine.set(machine, count);
    else this.perMachine.delete(machine);
  }

  private leave(id: string): void {
    const entry = this.open.get(id);
    if (!entry) return;
    this.open.delete(id);
    this.take(entry.machine, -1);
  }

  /** The command, while it is open. */
  find(id: string): ExecStream | null {
    return this.open.get(id)?.stream ?? null;
  }

  /**
   * Takes the command for the one stream it may have: `carry` carries it over the WebSocket until
   * its exit (it leaves the table then); `abandon` gives it up when the stream never opened.
   */
  claim(id: string): { carry(ws: WebSocket): void; abandon(): void } | null {
    const entry = this.open.get(id);
    if (!entry || entry.attached) return null;
    entry.attached = true;
    clearTimeout(entry.timer);
    const leave = () => this.leave(id);
    return {
      carry: (ws) => void carryExec(entry.stream, ws).finally(leave),
      abandon: () => {
        entry.stream.giveUp(new AgentCallError('closed', 'the command\'s stream did not open'));
        leave();
      },
    };
  }

  /** Gives every command up (the worker is shutting down; the agent stops them). */
  closeAll(): void {
    for (const [id, entry] of this.open) {
      clearTimeout(entry.timer);
      entry.stream.giveUp(new AgentCallError('closed', 'the worker is shutting down'));
      this.leave(id);
    }
  }
}

/** Output out (one byte of stream, then the bytes), stdin in, then the end message and the close. */
async function carryExec(stream: ExecStream, ws: WebSocket): Promise<void> {
  let ended = false;
  ws.on('message', (data: RawData, isBinary: boolean) => {
    const bytes = bufferOf(data);
    const stdin = stream.stdin;
    if (isBinary) {
      if (!stdin || stdin.writableEnded) return ws.close(1008, 'the command takes no input');
      if (!stdin.write(bytes)) {
        ws.pause();
        stdin.once('drain', () => ws.resume());
      }
      return;
    }
    if (bytes.toString('utf8') === '{"type":"stdin_end"}' && stdin) return void stdin.end();
    ws.close(1008, 'the only text message is {"type":"stdin_end"}');
  });
  let waiting = 0;
  let wake: (() => void) | null = null;
  ws.on('error', () => undefined);
  ws.on('close', () => {
    wake?.();
    if (ended) return;
    // The control plane left before the end: the command is cancelled and its output dropped.
    stream.discard();
    void stream.cancel().catch(() => undefined);
  });
  let end: Wire['ExecStreamEnd'];
  try {
    for await (const chunk of stream) {
      if (ws.readyState !== ws.OPEN) break;
      const frame = Buffer.concat([Buffer.of(STREAM_CODE[chunk.stream]), chunk.data]);
      const cost = frame.length + MESSAGE_OVERHEAD_BYTES;
      waiting += cost;
      ws.send(frame, { binary: true }, () => {
        waiting -= cost;
        if (waiting < SEND_HIGH_WATER) wake?.();
      });
      // The next chunk is taken from the agent (and the agent given credit) only once this side keeps up.
      while (waiting >= SEND_HIGH_WATER && ws.readyState === ws.OPEN) await new Promise<void>((resolve) => (wake = resolve));
      wake = null;
    }
    end = { type: 'exit', exit: { ...(await stream.exit) } };
  } catch (error) {
    const failed = error instanceof AgentCallError ? error : new AgentCallError('internal', error instanceof Error ? error.message : String(error));
    end = { type: 'error', code: failed.code, message: failed.message.slice(0, 2000) };
  }
  ended = true;
  if (ws.readyState === ws.OPEN) {
    ws.send(JSON.stringify(end));
    ws.close(1000);
  }
}

/** A byte stream (a guest TCP stream, a machine's screen) and the WebSocket, piped both ways at the slower side's pace; either end closes both. */
export function carryBytes(guest: Duplex, ws: WebSocket): void {
  const socket = byteStream(ws);
  socket.on('error', () => undefined);
  guest.on('error', () => undefined);
  pipeline(socket, guest, () => socket.destroy());
  pipeline(guest, socket, () => guest.destroy());
}
