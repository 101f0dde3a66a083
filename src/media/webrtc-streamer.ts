// The WebRTC stream of a machine's screen. The peer runs in the service (werift: WebRTC in
// TypeScript, no native code): its video is VP8 from the host encoder (ffmpeg), fed with the frames
// QEMU's VNC server hands out only when the screen changed, at most `fps` a second; the viewer's
// input comes back on data channels and goes in through QEMU (pointer: absolute positions; keys:
// by physical code). Offer and answer are exchanged in one request (no trickle): host candidates
// are known at once, TURN ones within the gathering time.
import { MediaStreamTrack, RTCPeerConnection, useNACK, usePLI, useREMB, useVP8, type RTCDataChannel } from 'werift';
import { RfbClient } from '../compute/rfb-client';
import { DEFAULT_STREAM_SETTINGS, OfferRejectedError, type DesktopStreamer, type DesktopStreamSettings, type OpenStream, type StreamRequest } from './desktop-streamer';
import { scancodeOf } from './key-codes';
import { startVp8Encoder, type VideoEncoder } from './vp8-encoder';

const CONNECT_WITHIN_MS = 20_000;
const GATHER_WITHIN_MS = 3_000;
/** Picture loss reports restart the encoder (a keyframe) at most this often. */
const KEYFRAME_EVERY_MS = 1_000;
const MAX_MESSAGE_BYTES = 96 * 1024;
/** The viewer says it is there every few seconds; a stream that hears nothing this long ends (a vanished tab). */
const SILENCE_MS = 30_000;
/** While the viewer has focus, the guest's clipboard is looked at this often (a short xclip in the guest). */
const CLIPBOARD_POLL_MS = 2_000;

export class WebRtcDesktopStreamer implements DesktopStreamer {
  constructor(private readonly settings: DesktopStreamSettings = DEFAULT_STREAM_SETTINGS) {}

  async open(request: StreamRequest): Promise<OpenStream> {
    const rfb = await RfbClient.connect(request.screen, { logger: this.settings.logger });
    const address = this.settings.hostAddress;
    const pc = new RTCPeerConnection({
      codecs: { video: [useVP8({ rtcpFeedback: [useNACK(), usePLI(), useREMB()] })] },
      iceServers: request.iceServers.map((server) => ({ urls: server.urls[0]!, username: server.username, credential: server.credential })),
      ...(address ? { iceInterfaceAddresses: { udp4: address }, iceAdditionalHostAddresses: [address], iceUseIpv6: false } : {}),
    });
    const stream = new ScreenStream(pc, rfb, this.settings, request);
    try {
      return { answerSdp: await stream.answer(request.offerSdp), close: (reason) => stream.close(reason) };
    } catch (error) {
      stream.close('the offer could not be answered');
      throw error;
    }
  }
}

class ScreenStream {
  private readonly track = new MediaStreamTrack({ kind: 'video' });
  private encoder: VideoEncoder | null = null;
  private starting = false;
  private dirty = false;
  /** Whether the screen's pixels have arrived yet (the framebuffer starts out black). */
  private haveScreen = false;
  private timer: NodeJS.Timeout | null = null;
  private lastKeyframe = 0;
  private closed = false;
  private buttons = 0;
  private control: RTCDataChannel | null = null;
  private clipboardTimer: NodeJS.Timeout | null = null;
  private lastHeard = Date.now();
  private lastFrameAt = 0;
  private readonly startedAt = Date.now();
  private rtpSource: VideoEncoder | null = null;
  private timestampShift = 0;
  private sequence = Math.floor(Math.random() * 0x10000);
  /** The clipboard text both sides agree on: only changes travel. */
  private clipboardText: string | null = null;

  constructor(
    private readonly pc: RTCPeerConnection,
    private readonly rfb: RfbClient,
    private readonly settings: DesktopStreamSettings,
    private readonly request: StreamRequest,
  ) {
    rfb.onUpdate((update) => {
      if (update.resized) void this.restartEncoder();
      if (update.pixels) this.haveScreen = true;
      if (update.pixels || update.resized) {
        this.dirty = true;
        // A change after a quiet spell goes out at once; during motion the frame rate caps it.
        if (Date.now() - this.lastFrameAt >= this.frameIntervalMs) this.tick();
      }
    });
    request.screen.once('close', () => this.close('the machine\'s screen went away (it stopped?)'));
    pc.onDataChannel.subscribe((channel) => this.attach(channel));
    pc.connectionStateChange.subscribe((state) => {
      if (state === 'connected') this.begin();
      if (state === 'failed' || state === 'closed') this.close(`the connection ${state}`);
    });
    setTimeout(() => {
      if (this.pc.connectionState !== 'connected') this.close('the viewer did not connect in time');
    }, CONNECT_WITHIN_MS).unref();
  }

  async answer(offerSdp: string): Promise<string> {
    try {
      await this.pc.setRemoteDescription({ type: 'offer', sdp: offerSdp });
    } catch (error) {
      throw new OfferRejectedError(`the offer is not a usable session description: ${error instanceof Error ? error.message : String(error)}`);
    }
    const video = this.pc.getTransceivers().find((transceiver) => transceiver.kind === 'video');
    if (!video) throw new OfferRejectedError('the offer has no video section to receive the screen on');
    video.setDirection('sendonly');
    await video.sender.replaceTrack(this.track);
    video.sender.onPictureLossIndication.subscribe(() => void this.keyframe());
    await this.pc.setLocalDescription(await this.pc.createAnswer());
    await this.gathered();
    return this.pc.localDescription!.sdp;
  }

  close(reason: string): void {
    if (this.closed) return;
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    this.watchClipboard(false);
    this.encoder?.close();
    this.rfb.close();
    void this.pc.close().catch(() => undefined);
    this.request.onEnded(reason);
  }

  private gathered(): Promise<void> {
    if (this.pc.iceGatheringState === 'complete') return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, GATHER_WITHIN_MS);
      this.pc.iceGatheringStateChange.subscribe((state) => {
        if (state !== 'complete') return;
        clearTimeout(timer);
        resolve();
      });
    });
  }

  private get frameIntervalMs(): number {
    return Math.round(1000 / this.settings.fps);
  }

  /** Connected: frames flow (a full screen first, then only changes, at most fps a second). */
  private begin(): void {
    if (this.timer || this.closed) return;
    void this.restartEncoder();
    this.rfb.requestUpdate(false);
    this.timer = setInterval(() => this.tick(), this.frameIntervalMs);
    this.lastHeard = Date.now();
  }

  private tick(): void {
    if (Date.now() - this.lastHeard > SILENCE_MS) return this.close('the viewer went silent');
    if (!this.dirty || !this.haveScreen || !this.encoder || this.rfb.isClosed) return;
    // The screen changed size while an encoder started: it needs one of the new size.
    if (this.encoder.width !== this.rfb.width || this.encoder.height !== this.rfb.height) return void this.restartEncoder();
    // A copy: the screen keeps changing while the encoder reads this frame.
    if (this.encoder.write(Buffer.from(this.rfb.framebuffer))) {
      this.dirty = false;
      this.lastFrameAt = Date.now();
      this.rfb.requestUpdate(true);
    }
  }

  private async keyframe(): Promise<void> {
    if (Date.now() - this.lastKeyframe < KEYFRAME_EVERY_MS) return;
    await this.restartEncoder();
  }

  /** A fresh encoder (its first frame is a keyframe) for the screen's current size; the stream ends when none can start. */
  private async restartEncoder(): Promise<void> {
    if (this.closed || this.starting) return;
    this.starting = true;
    this.lastKeyframe = Date.now();
    try {
      this.encoder?.close();
      this.encoder = null;
      const encoder: VideoEncoder = await startVp8Encoder({
        width: this.rfb.width,
        height: this.rfb.height,
        kbps: this.settings.kbps,
        place: this.settings.encoders ? () => this.settings.encoders!.placement(this.request.accountId) : undefined,
        onRtp: (packet) => this.forward(packet, encoder),
        onError: (message) => {
          if (this.encoder === encoder) this.close(message);
        },
      });
      if (this.closed) return encoder.close();
      this.encoder = encoder;
      this.dirty = true;
      this.control?.send(JSON.stringify({ type: 'size', width: encoder.width, height: encoder.height }));
    } catch (error) {
      // Its place (cgroup) could not be made: no encoder runs outside it.
      this.close(`the encoder could not start: ${error instanceof Error ? error.message : String(error)}`);
    } finally {
      this.starting = false;
    }
  }

  /** While the viewer has focus: the guest's clipboard, when it changed, goes to the viewer. */
  private watchClipboard(on: boolean): void {
    if (this.clipboardTimer) clearInterval(this.clipboardTimer);
    this.clipboardTimer = null;
    if (!on || this.closed) return;
    let reading = false;
    const look = async () => {
      if (reading) return;
      reading = true;
      try {
        const text = await this.request.clipboard.read();
        if (text && text !== this.clipboardText && this.control?.readyState === 'open') {
          this.clipboardText = text;
          this.control.send(JSON.stringify({ type: 'clipboard', text }));
        }
      } catch {
        // the guest is busy or its desktop restarts: the next look may succeed
      } finally {
        reading = false;
      }
    };
    void look();
    this.clipboardTimer = setInterval(() => void look(), CLIPBOARD_POLL_MS);
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
    this.track.writeRtp(packet);
  }

  private attach(channel: RTCDataChannel): void {
    if (channel.label === 'control') {
      this.control = channel;
      // The viewer closed its connection (a reload, a switch to the recovery console, the tab closed).
      channel.stateChanged.subscribe((state) => {
        if (state === 'closed' || state === 'closing') this.close('the viewer left');
      });
    }
    channel.onMessage.subscribe((data) => {
      this.lastHeard = Date.now();
      const text = typeof data === 'string' ? data : data.toString('utf8');
      if (text.length > MAX_MESSAGE_BYTES) return;
      let message: Record<string, unknown>;
      try {
        message = JSON.parse(text) as Record<string, unknown>;
      } catch {
        return;
      }
      this.input(message);
    });
  }

  /** One message from the viewer; anything malformed is ignored. */
  private input(message: Record<string, unknown>): void {
    const number = (value: unknown) => (typeof value === 'number' && Number.isFinite(value) ? value : null);
    switch (message.type) {
      case 'pointer': {
        const x = number(message.x);
        const y = number(message.y);
        const buttons = number(message.buttons);
        if (x === null || y === null) return;
        if (buttons !== null) this.buttons = buttons & 0x07;
        this.rfb.pointer(x, y, this.buttons);
        return;
      }
      case 'wheel': {
        const x = number(message.x);
        const y = number(message.y);
        const dy = number(message.dy);
        if (x === null || y === null || !dy) return;
        const bit = dy < 0 ? 0x08 : 0x10; // buttons 4 and 5: one click per message
        this.rfb.pointer(x, y, this.buttons | bit);
        this.rfb.pointer(x, y, this.buttons);
        return;
      }
      case 'key': {
        const scancode = typeof message.code === 'string' ? scancodeOf(message.code) : null;
        if (scancode !== null) this.rfb.scancode(0, scancode, message.down === true);
        return;
      }
      case 'clipboard': {
        // Text the viewer copied: to the guest's clipboard (unless it is what the guest has already).
        if (typeof message.text !== 'string' || message.text === this.clipboardText) return;
        this.clipboardText = message.text;
        void this.request.clipboard.write(message.text).catch(() => undefined);
        return;
      }
      case 'clipboard-watch':
        this.watchClipboard(message.on === true);
        return;
      case 'resize': {
        const width = number(message.width);
        const height = number(message.height);
        if (width === null || height === null) return;
        void this.request.resize({ width, height }).catch(() => undefined);
        return;
      }
    }
  }
}
