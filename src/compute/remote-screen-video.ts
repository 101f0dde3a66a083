// A machine's screen video from its worker (worker-api.yaml OpenScreenVideo), as the control plane
// follows it: each binary message one RTP packet, each text message a ScreenVideoMessage. The worker
// is not trusted with the viewer's peer: a packet that is no RTP of the video's shape, or a message
// that does not fit, ends this video (the viewer's stream closes; nothing else is touched).
import type { RawData, WebSocket } from 'ws';
import { MAX_RTP_PACKET_BYTES, SCREEN_VIDEO_LIMITS, type ScreenInput, type ScreenVideo, type ScreenVideoEvents, type ScreenVideoRequest } from '../media/screen-video';
import { bufferOf } from '../net/websocket';
import { peerText } from '../protocol/peer-input';
import { machinePath, parseStreamMessage } from './worker-wire';
import type { components } from '../generated/worker-api';

/** RTP version 2, payload type 96 (VP8): the only packets a screen video carries. */
const RTP_VERSION = 2;
const VP8_PAYLOAD_TYPE = 96;
/** Input for the worker beyond this, still unsent, is given up: a link that does not drain queues nothing without end. */
const MAX_UNSENT_COMMAND_BYTES = 256 * 1024;
const ACCOUNT_ID = /^[A-Za-z0-9_-]{1,64}$/;

/** The path of a machine's OpenScreenVideo stream; a request outside the protocol's bounds never becomes one. */
export function screenVideoPath(id: string, request: ScreenVideoRequest): string {
  if (!ACCOUNT_ID.test(request.accountId)) throw new Error('not an account id');
  const whole = (value: number, { min, max }: { min: number; max: number }) => Math.min(max, Math.max(min, Math.round(value)));
  return `${machinePath(id, 'screen/video')}?account=${request.accountId}&fps=${whole(request.fps, SCREEN_VIDEO_LIMITS.fps)}&kbps=${whole(request.kbps, SCREEN_VIDEO_LIMITS.kbps)}`;
}

/**
 * Whether a worker's binary message is an RTP packet a screen video may carry: exactly the fixed
 * header the encoder writes (version 2; no padding, extension or CSRC list, whose lengths the
 * packet would name itself) with VP8's payload type, and a payload.
 */
export function isScreenRtp(packet: Buffer): boolean {
  return packet.length > 12 && packet.length <= MAX_RTP_PACKET_BYTES && packet[0] === RTP_VERSION << 6 && (packet[1]! & 0x7f) === VP8_PAYLOAD_TYPE;
}

/** The bytes a worker may send a video: its bit rate four times over (keyframes come in bursts), after a burst of this many. */
const VIDEO_BURST_BYTES = 2 * 1024 * 1024;
/** Text messages of a screen video are short (a size, a reason); larger ones are not parsed. */
const MAX_TEXT_MESSAGE_BYTES = 4096;

/** The video over an open OpenScreenVideo stream; `events.onEnded` says once why it ended unless it was closed here. */
export function followScreenVideo(ws: WebSocket, request: Pick<ScreenVideoRequest, 'kbps'>, events: ScreenVideoEvents): ScreenVideo {
  let ended = false;
  const end = (reason: string) => {
    if (ended) return;
    ended = true;
    ws.terminate();
    events.onEnded(reason);
  };
  const budget = new ByteBudget(request.kbps * 125 * 4, VIDEO_BURST_BYTES);
  ws.on('message', (data: RawData, isBinary: boolean) => {
    if (ended) return;
    const bytes = bufferOf(data);
    if (!budget.take(bytes.length)) return end('the worker sent more video than its bit rate allows');
    if (isBinary) {
      if (!isScreenRtp(bytes)) return end('the worker sent a video packet that is not one');
      try {
        return events.onRtp(bytes);
      } catch (error) {
        // The viewer's peer could not take it: this video ends, nothing else.
        return end(`a video packet could not be passed on: ${error instanceof Error ? error.message : String(error)}`);
      }
    }
    if (bytes.length > MAX_TEXT_MESSAGE_BYTES) return end(`the worker sent a message of more than ${MAX_TEXT_MESSAGE_BYTES} bytes`);
    const message = parseStreamMessage('ScreenVideoMessage', bytes);
    if (!message.ok) return end(`the worker sent a message that ${message.reason}`);
    const fitting = message.value;
    if (fitting.type === 'size') return events.onSize({ width: fitting.width, height: fitting.height });
    end(peerText(fitting.reason, 500) || 'the screen video ended');
  });
  ws.on('close', () => end('the worker closed the screen video'));
  ws.on('error', () => end('the screen video\'s link to the worker broke'));
  const send = (command: components['schemas']['ScreenVideoCommand']) => {
    // Input that cannot go out now is given up rather than queued without end.
    if (!ended && ws.readyState === ws.OPEN && ws.bufferedAmount < MAX_UNSENT_COMMAND_BYTES) ws.send(JSON.stringify(command));
  };
  return {
    start: () => send({ type: 'start' }),
    keyframe: () => send({ type: 'keyframe' }),
    input: (input: ScreenInput) => send(input),
    close: () => {
      if (ended) return;
      ended = true;
      ws.close(1000);
    },
  };
}

/** A token bucket of bytes: `perSecond` refilled continuously, at most `burst` held. */
class ByteBudget {
  private tokens: number;
  private at = Date.now();

  constructor(
    private readonly perSecond: number,
    private readonly burst: number,
  ) {
    this.tokens = burst;
  }

  take(bytes: number): boolean {
    const now = Date.now();
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.at) / 1000) * this.perSecond);
    this.at = now;
    if (bytes > this.tokens) return false;
    this.tokens -= bytes;
    return true;
  }
}
