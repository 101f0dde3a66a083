// The worker's side of BuildLayer (worker-api.yaml): one WebSocket per build request. The control
// plane's first message says what to build; progress and log go back as the builder reports them,
// then the outcome. Closing the socket gives the request up (LayerBuilder removes the builder once
// no request waits for it). The builder reports through callbacks that cannot wait, so a control
// plane that reads slowly loses log text (counted and said), never the worker's memory.
import type { RawData, WebSocket } from 'ws';
import type { components } from '../generated/worker-api';
import { LayerBuildCancelled, type BuiltLayer, type LayerBuildRequest } from '../compute/layer-builder';
import { fromWire, parseStreamMessage } from '../compute/worker-wire';
import { bufferOf } from '../net/websocket';

type Message = components['schemas']['LayerBuildMessage'];

/** Build streams open at once; one more is refused before its handshake. */
export const MAX_LAYER_BUILD_STREAMS = 4;
/** How long the control plane may take to send the start message. */
export const START_WITHIN_MS = 30_000;
/** Written but not yet flushed to the control plane: past this, log pieces are dropped and only the latest progress is kept. */
const SEND_HIGH_WATER = 1024 * 1024;
/** The spec's bound on one log message's text. */
const LOG_PIECE_CHARS = 16_384;

export class LayerBuildStreams {
  private open = 0;

  constructor(private readonly buildLayer: (request: LayerBuildRequest) => Promise<BuiltLayer>) {}

  /** A place for one more build stream (null when all are taken): `carry` runs it, `abandon` gives the place back when the stream never opened. */
  claim(): { carry(ws: WebSocket): void; abandon(): void } | null {
    if (this.open >= MAX_LAYER_BUILD_STREAMS) return null;
    this.open += 1;
    let left = false;
    const leave = () => {
      if (left) return;
      left = true;
      this.open -= 1;
    };
    return { carry: (ws) => void this.carry(ws).finally(leave), abandon: leave };
  }

  private async carry(ws: WebSocket): Promise<void> {
    ws.on('error', () => undefined);
    const start = await firstMessage(ws);
    if (!start) return;
    const abort = new AbortController();
    ws.on('close', () => abort.abort()); // the control plane gave the build up
    ws.on('message', () => ws.close(1008, 'a build stream takes one message'));
    const sender = new PacedSender(ws);
    let end: Message;
    try {
      const built = await this.buildLayer({
        ...fromWire.layerBuildStart(start),
        signal: abort.signal,
        onProgress: (step, percent) => sender.progress(step.slice(0, 200), Math.min(100, Math.max(0, Math.round(percent)))),
        onLog: (text) => sender.log(text),
      });
      end = { type: 'built', packages: built.packages, virtual_bytes: built.virtualBytes };
    } catch (error) {
      end = { type: 'failed', message: (error instanceof Error ? error.message : String(error)).slice(0, 2000), cancelled: error instanceof LayerBuildCancelled };
    }
    if (ws.readyState !== ws.OPEN) return;
    sender.flush();
    ws.send(JSON.stringify(end));
    ws.close(1000);
  }
}

/** The start message (checked against the spec), or null when none fitting came in time (the stream is closed then). */
function firstMessage(ws: WebSocket): Promise<components['schemas']['LayerBuildStart'] | null> {
  return new Promise((resolve) => {
    const refuse = (reason: string) => {
      ws.close(1008, reason);
      resolve(null);
    };
    const timer = setTimeout(() => refuse('no start message in time'), START_WITHIN_MS);
    const closed = () => {
      clearTimeout(timer);
      resolve(null);
    };
    ws.once('close', closed);
    ws.once('message', (data: RawData, isBinary: boolean) => {
      clearTimeout(timer);
      ws.off('close', closed);
      if (isBinary) return refuse('the start message is text');
      const start = parseStreamMessage('LayerBuildStart', bufferOf(data));
      if (!start.ok) return refuse('the start message does not fit LayerBuildStart');
      resolve(start.value);
    });
  });
}

/** Sends progress and log at the control plane's pace: what does not fit under SEND_HIGH_WATER is dropped (log) or kept as the latest (progress). */
class PacedSender {
  private droppedBytes = 0;
  private pendingProgress: Message | null = null;

  constructor(private readonly ws: WebSocket) {}

  progress(step: string, percent: number): void {
    this.pendingProgress = { type: 'progress', step, percent };
    this.flush();
  }

  log(text: string): void {
    this.flush();
    for (let at = 0; at < text.length; at += LOG_PIECE_CHARS) {
      const piece = text.slice(at, at + LOG_PIECE_CHARS);
      if (!this.send({ type: 'log', text: piece })) this.droppedBytes += Buffer.byteLength(piece);
    }
  }

  /** Sends what waits (the count of dropped log bytes, the latest progress) once there is room. */
  flush(): void {
    if (this.droppedBytes > 0 && this.send({ type: 'log', text: `kiste: ${this.droppedBytes} bytes of the build log were dropped (the control plane read too slowly)\n` })) this.droppedBytes = 0;
    if (this.pendingProgress && this.send(this.pendingProgress)) this.pendingProgress = null;
  }

  /** False when there is no room now (or the stream is closed). */
  private send(message: Message): boolean {
    if (this.ws.readyState !== this.ws.OPEN || this.ws.bufferedAmount >= SEND_HIGH_WATER) return false;
    this.ws.send(JSON.stringify(message));
    return true;
  }
}
