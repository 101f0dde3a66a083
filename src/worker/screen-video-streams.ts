// The worker's side of OpenScreenVideo (worker-api.yaml): the machine's screen encoded here
// (screen-encoding.ts) and sent as RTP packets, the control plane's commands taken in. The video is
// opened before the 101 (a screen that does not answer is refused with the reason); a command that
// does not fit ends the stream, and packets the control plane does not take in time are dropped
// (the viewer asks for a keyframe) instead of piling up here.
import type { RawData, WebSocket } from 'ws';
import type { components } from '../generated/worker-api';
import type { ScreenVideo, ScreenVideoEvents, ScreenVideoRequest, ScreenVideos } from '../media/screen-video';
import { bufferOf } from '../net/websocket';
import { parseStreamMessage } from '../compute/worker-wire';

/** Video not yet sent to the control plane beyond this: further packets are dropped. */
const MAX_UNSENT_VIDEO_BYTES = 2 * 1024 * 1024;

export interface OpenedScreenVideo {
  /** The stream is open: the video goes out on it, commands come in. */
  open(ws: WebSocket): void;
  /** The stream never opened: the video is closed. */
  abandon(): void;
}

export async function openScreenVideo(host: ScreenVideos & { isRunning(id: string): Promise<boolean> }, machine: string, request: ScreenVideoRequest): Promise<OpenedScreenVideo> {
  if (!(await host.isRunning(machine))) throw new Error(`machine ${machine} is not running`);
  let ws: WebSocket | null = null;
  let endedEarly: string | null = null;
  const open = () => ws !== null && ws.readyState === ws.OPEN;
  const send = (message: components['schemas']['ScreenVideoMessage']) => {
    if (open()) ws!.send(JSON.stringify(message));
  };
  const ended = (reason: string) => {
    send({ type: 'ended', reason: reason.slice(0, 2000) });
    ws?.close(1000);
  };
  const events: ScreenVideoEvents = {
    onRtp: (packet) => {
      if (open() && ws!.bufferedAmount < MAX_UNSENT_VIDEO_BYTES) ws!.send(packet, { binary: true });
    },
    onSize: (size) => send({ type: 'size', width: size.width, height: size.height }),
    onEnded: (reason) => (ws ? ended(reason) : (endedEarly = reason)),
  };
  const video = await host.openVideo(machine, request, events);
  return {
    open: (socket) => {
      ws = socket;
      socket.on('close', () => video.close());
      socket.on('error', () => video.close());
      if (endedEarly !== null) return ended(endedEarly);
      socket.on('message', (data: RawData, isBinary: boolean) => command(video, socket, data, isBinary));
    },
    abandon: () => video.close(),
  };
}

/** One command of the control plane; one that does not fit ends the stream. */
function command(video: ScreenVideo, ws: WebSocket, data: RawData, isBinary: boolean): void {
  const parsed = isBinary ? null : parseStreamMessage('ScreenVideoCommand', bufferOf(data));
  if (!parsed?.ok) {
    video.close();
    return void ws.close(1008, 'a message that does not fit ScreenVideoCommand');
  }
  const message = parsed.value;
  if (message.type === 'pointer' || message.type === 'key') return video.input(message);
  if (message.type === 'start') video.start();
  else video.keyframe();
}
