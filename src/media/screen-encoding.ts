// The encoding side of a desktop stream, on the host that runs the machine: QEMU's VNC server hands
// out frames only when the screen changed, at most `fps` a second go to the host encoder (ffmpeg,
// vp8-encoder.ts), and its RTP packets go out as one continuous stream; the viewer's pointer and
// keys go in through QEMU (absolute positions; keys by physical code). Its RFB reader checks every
// byte QEMU sends (rfb-client.ts): a screen that misbehaves ends this video, nothing else.
import type { Duplex } from 'node:stream';
import type { EncoderPlacement } from '../compute/jail/encoder-jail';
import { RfbClient, type RfbLogger } from '../compute/rfb-client';
import type { ScreenInput, ScreenVideo, ScreenVideoEvents, ScreenVideoRequest } from './screen-video';
import { startVp8Encoder, type VideoEncoder } from './vp8-encoder';

/** Picture loss reports and new screen sizes restart the encoder (a keyframe) at most this often. */
const KEYFRAME_EVERY_MS = 1_000;
/** Input for QEMU beyond this, still unsent, is dropped. */
const MAX_UNSENT_INPUT_BYTES = 256 * 1024;

export interface ScreenEncodingSettings {
  /** Where an account's encoders run (their cgroup and user); unset: as this process, niced. */
  encoders?: { placement(accountId: string): EncoderPlacement };
  /** Where a screen's RFB messages that do not fit their shape are reported (QEMU is not trusted). */
  logger?: RfbLogger;
}

/** Encodes the screen behind an RFB stream (its handshake done here: a screen that does not answer rejects). */
export async function encodeScreen(screen: Duplex, request: ScreenVideoRequest, events: ScreenVideoEvents, settings: ScreenEncodingSettings = {}): Promise<ScreenVideo> {
  let rfb: RfbClient;
  try {
    rfb = await RfbClient.connect(screen, { logger: settings.logger });
  } catch (error) {
    screen.destroy();
    throw error;
  }
  return new ScreenEncoding(rfb, screen, request, events, settings);
}

class ScreenEncoding implements ScreenVideo {
  private encoder: VideoEncoder | null = null;
  private starting = false;
  private dirty = false;
  /** Whether the screen's pixels have arrived yet (the framebuffer starts out black). */
  private haveScreen = false;
  private timer: NodeJS.Timeout | null = null;
  private lastKeyframe = 0;
  private closed = false;
  private lastFrameAt = 0;
  private readonly startedAt = Date.now();
  private rtpSource: VideoEncoder | null = null;
  private timestampShift = 0;
  private sequence = Math.floor(Math.random() * 0x10000);

  constructor(
    private readonly rfb: RfbClient,
    private readonly screen: Duplex,
    private readonly request: ScreenVideoRequest,
    private readonly events: ScreenVideoEvents,
    private readonly settings: ScreenEncodingSettings,
  ) {
    // A new size is taken up by the next frame (tick): a guest that resizes in a loop restarts no
    // encoder more often than a keyframe may come, and none before the viewer is there.
    rfb.onUpdate((update) => {
      if (update.pixels) this.haveScreen = true;
      if (update.pixels || update.resized) {
        this.dirty = true;
        // A change after a quiet spell goes out at once; during motion the frame rate caps it.
        if (this.timer && Date.now() - this.lastFrameAt >= this.frameIntervalMs) this.tick();
      }
    });
    screen.once('close', () => this.end('the machine\'s screen went away (it stopped?)'));
  }

  start(): void {
    if (this.timer || this.closed) return;
    void this.restartEncoder();
    this.rfb.requestUpdate(false);
    this.timer = setInterval(() => this.tick(), this.frameIntervalMs);
  }

  keyframe(): void {
    if (!this.timer || Date.now() - this.lastKeyframe < KEYFRAME_EVERY_MS) return;
    void this.restartEncoder();
  }

  input(input: ScreenInput): void {
    // Input QEMU does not read is dropped, not queued without end.
    if (this.closed || this.rfb.isClosed || this.screen.writableLength > MAX_UNSENT_INPUT_BYTES) return;
    if (input.type === 'pointer') this.rfb.pointer(input.x, input.y, input.buttons);
    else this.rfb.scancode(0, input.scancode, input.down);
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    this.encoder?.close();
    this.rfb.close();
  }

  /** Ended by itself: closed, and said so once. */
  private end(reason: string): void {
    if (this.closed) return;
    this.close();
    this.events.onEnded(reason);
  }

  private get frameIntervalMs(): number {
    return Math.round(1000 / this.request.fps);
  }

  private tick(): void {
    if (!this.dirty || !this.haveScreen || !this.encoder || this.rfb.isClosed) return;
    // The screen changed size: the next encoder is of the new size (at most one a KEYFRAME_EVERY_MS).
    if (this.encoder.width !== this.rfb.width || this.encoder.height !== this.rfb.height) {
      if (Date.now() - this.lastKeyframe >= KEYFRAME_EVERY_MS) void this.restartEncoder();
      return;
    }
    // A copy: the screen keeps changing while the encoder reads this frame.
    if (this.encoder.write(Buffer.from(this.rfb.framebuffer))) {
      this.dirty = false;
      this.lastFrameAt = Date.now();
      this.rfb.requestUpdate(true);
    }
  }

  /** A fresh encoder (its first frame is a keyframe) for the screen's current size; the video ends when none can start. */
  private async restartEncoder(): Promise<void> {
    if (this.closed || this.starting) return;
    this.starting = true;
    this.lastKeyframe = Date.now();
    try {
      this.encoder?.close();
      this.encoder = null;
      const { encoders } = this.settings;
      const encoder: VideoEncoder = await startVp8Encoder({
        width: this.rfb.width,
        height: this.rfb.height,
        kbps: this.request.kbps,
        place: encoders ? () => encoders.placement(this.request.accountId) : undefined,
        onRtp: (packet) => this.forward(packet, encoder),
        onError: (message) => {
          if (this.encoder === encoder) this.end(message);
        },
      });
      if (this.closed) return encoder.close();
      this.encoder = encoder;
      this.dirty = true;
      this.events.onSize({ width: encoder.width, height: encoder.height });
    } catch (error) {
      // Its place (cgroup) could not be made: no encoder runs outside it.
      this.end(`the encoder could not start: ${error instanceof Error ? error.message : String(error)}`);
    } finally {
      this.starting = false;
    }
  }

  /**
   * One RTP packet of the encoder to the viewer. Each encoder starts its own sequence numbers and
   * timestamps at random; the viewer must see one continuous stream, so sequence numbers are ours
   * and each encoder's timestamps are shifted to continue from the wall clock (90 kHz).
   */
  private forward(packet: Buffer, from: VideoEncoder): void {
    if (packet.length < 12 || from !== this.encoder) return;
    const timestamp = packet.readUInt32BE(4);
    if (this.rtpSource !== from) {
      this.rtpSource = from;
      const now = Math.round((Date.now() - this.startedAt) * 90);
      this.timestampShift = (now - timestamp) >>> 0;
    }
    packet.writeUInt16BE(this.sequence, 2);
    this.sequence = (this.sequence + 1) & 0xffff;
    packet.writeUInt32BE((timestamp + this.timestampShift) >>> 0, 4);
    this.events.onRtp(packet);
  }
}
