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

/** Whether a worker's binary message is an RTP packet a screen video may carry. */
export function isScreenRtp(packet: Buffer): boolean {
  return packet.length >= 12 && packet.length <= MAX_RTP_PACKET_BYTES && packet[0]! >> 6 === RTP_VERSION && (packet[1]! & 0x7f) === VP8_PAYLOAD_TYPE;
}

/** The video over an open OpenScreenVideo stream; `events.onEnded` says once why it ended unless it was closed here. */
export function followScreenVideo(ws: WebSocket, events: ScreenVideoEvents): ScreenVideo {
  let ended = false;
  const end = (reason: string) => {
    if (ended) return;
    ended = true;
    ws.terminate();
    events.onEnded(reason);
  };
  ws.on('message', (data: RawData, isBinary: boolean) => {
    if (ended) return;
    const bytes = bufferOf(data);
    if (isBinary) {
      if (!isScreenRtp(bytes)) return end('the worker sent a video packet that is not one');
      return events.onRtp(bytes);
    }
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
