// The host-side video encoder of a desktop stream: Debian's ffmpeg (libvpx VP8, realtime, niced)
// reading raw BGRX frames on stdin and writing RTP to a UDP port on loopback that only this process
// reads. Frames are written only when the screen changed, so an idle desktop costs no encoding at
// all (0 fps); timestamps are the frames' arrival times. A keyframe is had by starting the encoder
// afresh (a new viewer, a picture loss report, a new screen size), which takes a fraction of a second.
// Where it runs (its cgroup, its user) is the placement's to say (compute/jail/encoder-jail.ts).
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createSocket, type Socket } from 'node:dgram';
import type { EncoderPlacement } from '../compute/jail/encoder-jail';

export interface VideoEncoderOptions {
  width: number;
  height: number;
  /** Target bit rate in kbit/s. */
  kbps: number;
  /** The encoder's program (default `ffmpeg` on PATH). */
  ffmpeg?: string;
  /** Where and as whom it runs, asked for as it starts (default: here, as the service). */
  place?(): EncoderPlacement;
  onRtp(packet: Buffer): void;
  onError(message: string): void;
}

/** What the desktop stream needs of an encoder. */
export interface VideoEncoder {
  readonly width: number;
  readonly height: number;
  /** Hands over one frame (BGRX, width × height × 4 bytes); false when the encoder is still busy with the last one (the frame is dropped). */
  write(frame: Buffer): boolean;
  close(): void;
}

/** Largest RTP packet ffmpeg writes: below a typical path MTU once SRTP and UDP headers are added. */
const RTP_PACKET_BYTES = 1200;

export async function startVp8Encoder(options: VideoEncoderOptions): Promise<VideoEncoder> {
  const placement = options.place?.(); // first: when it cannot be had, nothing else was made
  const socket: Socket = createSocket('udp4');
  let closed = false;
  let released = false;
  /** The process is gone (or never came): its place and its socket go with it, once. */
  const release = () => {
    if (released) return;
    released = true;
    placement?.left();
    socket.close();
  };
  // The first sender is the encoder: the socket is connected to it, so the kernel drops datagrams
  // from anyone else on this host (other processes can reach a loopback port too).
  let sender: number | null = null;
  socket.on('message', (packet, from) => {
    if (sender === null) {
      if (from.address !== '127.0.0.1') return;
      sender = from.port;
      socket.connect(from.port, '127.0.0.1');
    } else if (from.port !== sender) {
      return;
    }
    options.onRtp(packet);
  });
  let child: ChildProcessWithoutNullStreams;
  try {
    await new Promise<void>((resolve, reject) => {
      socket.once('error', reject);
      socket.bind(0, '127.0.0.1', () => {
        socket.off('error', reject);
        resolve();
      });
    });
    socket.on('error', (error) => options.onError(`encoder socket: ${error.message}`));
    const port = socket.address().port;
    const args = [
      '-n', '10', options.ffmpeg ?? 'ffmpeg',
      '-hide_banner', '-loglevel', 'error', '-nostdin',
      '-f', 'rawvideo', '-pix_fmt', 'bgr0', '-video_size', `${options.width}x${options.height}`,
      // each frame's time is when it arrived: frames come only when the screen changed
      '-use_wallclock_as_timestamps', '1', '-i', 'pipe:0',
      '-an', '-fps_mode', 'passthrough',
      '-c:v', 'libvpx', '-deadline', 'realtime', '-cpu-used', '16', '-threads', '2',
      '-b:v', `${options.kbps}k`, '-maxrate', `${Math.round(options.kbps * 1.5)}k`, '-bufsize', `${options.kbps}k`,
      '-lag-in-frames', '0', '-auto-alt-ref', '0', '-error-resilient', '1', '-g', '600',
      '-f', 'rtp', '-payload_type', '96', `rtp://127.0.0.1:${port}?pkt_size=${RTP_PACKET_BYTES}`,
    ];
    const launch = placement?.wrap('nice', args) ?? { command: 'nice', args };
    // stdin is a pipe of ours; the child ignores a closed one (-nostdin is about interaction, not input).
    child = spawn(launch.command, launch.args, { stdio: ['pipe', 'pipe', 'pipe'] });
  } catch (error) {
    release();
    throw error;
  }
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString('utf8')).slice(-2000);
  });
  child.stdout.resume();
  let busy = false;
  child.stdin.on('error', () => undefined);
  child.on('exit', (code, signal) => {
    release();
    if (!closed) options.onError(`the encoder exited (${signal ?? code})${stderr ? `: ${stderr.trim()}` : ''}`);
    closed = true;
  });
  child.on('error', (error) => {
    release();
    if (!closed) options.onError(`the encoder could not start: ${error.message}`);
    closed = true;
  });
  return {
    width: options.width,
    height: options.height,
    write(frame) {
      if (closed || busy) return false;
      busy = !child.stdin.write(frame);
      if (busy) child.stdin.once('drain', () => (busy = false));
      return true;
    },
    close() {
      if (closed) return;
      closed = true;
      child.stdin.destroy();
      child.kill('SIGKILL');
    },
  };
}
