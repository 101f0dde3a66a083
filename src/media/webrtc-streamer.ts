// The WebRTC stream of a machine's screen. The peer runs in the service (werift: WebRTC in
// TypeScript, no native code); its video is VP8 encoded where the machine runs (screen-encoding.ts,
// on the worker), which this peer only forwards. The viewer's input comes back on data channels and
// goes to the screen as pointer positions and PC scancodes; resizes and the clipboard go through the
// guest. Offer and answer are exchanged in one request (no trickle): host candidates are known at
// once, TURN ones within the gathering time.
import { MediaStreamTrack, RTCPeerConnection, useNACK, usePLI, useREMB, useVP8, type RTCDataChannel } from 'werift';
import { DEFAULT_STREAM_SETTINGS, OfferRejectedError, type DesktopStreamer, type DesktopStreamSettings, type OpenStream, type StreamRequest } from './desktop-streamer';
import { scancodeOf } from './key-codes';
import type { ScreenVideo } from './screen-video';

const CONNECT_WITHIN_MS = 20_000;
const GATHER_WITHIN_MS = 3_000;
const MAX_MESSAGE_BYTES = 96 * 1024;
/** The viewer says it is there every few seconds; a stream that hears nothing this long ends (a vanished tab). */
const SILENCE_MS = 30_000;
/** While the viewer has focus, the guest's clipboard is looked at this often (a short xclip in the guest). */
const CLIPBOARD_POLL_MS = 2_000;
/** Control messages (sizes, the clipboard) the viewer has not taken beyond this are dropped. */
const MAX_UNSENT_CONTROL_BYTES = 256 * 1024;
/** Pointer positions are RFB's 16-bit ones. */
const MAX_POSITION = 0xffff;

export class WebRtcDesktopStreamer implements DesktopStreamer {
  constructor(private readonly settings: DesktopStreamSettings = DEFAULT_STREAM_SETTINGS) {}

  async open(request: StreamRequest): Promise<OpenStream> {
    const address = this.settings.hostAddress;
    const pc = new RTCPeerConnection({
      codecs: { video: [useVP8({ rtcpFeedback: [useNACK(), usePLI(), useREMB()] })] },
      iceServers: request.iceServers.map((server) => ({ urls: server.urls[0]!, username: server.username, credential: server.credential })),
      ...(address ? { iceInterfaceAddresses: { udp4: address }, iceAdditionalHostAddresses: [address], iceUseIpv6: false } : {}),
    });
    const stream = new ScreenStream(pc, request);
    try {
      await stream.accept(request.offerSdp);
      await stream.watch(this.settings);
      return { answerSdp: await stream.answer(), close: (reason) => stream.close(reason) };
    } catch (error) {
      stream.close('the offer could not be answered');
      throw error;
    }
  }
}

class ScreenStream {
  private readonly track = new MediaStreamTrack({ kind: 'video' });
  private video: ScreenVideo | null = null;
  private closed = false;
  private endedBecause: string | null = null;
  private buttons = 0;
  private control: RTCDataChannel | null = null;
  private clipboardTimer: NodeJS.Timeout | null = null;
  private silenceTimer: NodeJS.Timeout | null = null;
  private lastHeard = Date.now();
  /** The clipboard text both sides agree on: only changes travel. */
  private clipboardText: string | null = null;

  constructor(
    private readonly pc: RTCPeerConnection,
    private readonly request: StreamRequest,
  ) {
    pc.onDataChannel.subscribe((channel) => this.attach(channel));
    pc.connectionStateChange.subscribe((state) => {
      if (state === 'connected') this.begin();
      if (state === 'failed' || state === 'closed') this.close(`the connection ${state}`);
    });
  }

  /** Takes the viewer's offer: refused (before anything is opened) when it cannot carry the screen. */
  async accept(offerSdp: string): Promise<void> {
    try {
      await this.pc.setRemoteDescription({ type: 'offer', sdp: offerSdp });
    } catch (error) {
      throw new OfferRejectedError(`the offer is not a usable session description: ${error instanceof Error ? error.message : String(error)}`);
    }
    const video = this.pc.getTransceivers().find((transceiver) => transceiver.kind === 'video');
    if (!video) throw new OfferRejectedError('the offer has no video section to receive the screen on');
    video.setDirection('sendonly');
    await video.sender.replaceTrack(this.track);
    video.sender.onPictureLossIndication.subscribe(() => this.video?.keyframe());
  }

  /** Opens the screen's video where the machine runs; its packets go to the viewer as they come. */
  async watch(settings: DesktopStreamSettings): Promise<void> {
    let size = '';
    const video = await this.request.openVideo({ fps: settings.fps, kbps: settings.kbps }, {
      onRtp: (packet) => {
        try {
          this.track.writeRtp(packet);
        } catch (error) {
          this.close(`a video packet could not be sent: ${error instanceof Error ? error.message : String(error)}`);
        }
      },
      onSize: ({ width, height }) => {
        if (`${width}x${height}` === size) return; // a keyframe of the same size: nothing to tell the viewer
        size = `${width}x${height}`;
        this.send({ type: 'size', width, height });
      },
      onEnded: (reason) => this.close(reason),
    });
    if (this.closed) return video.close(); // the viewer or the screen left meanwhile
    this.video = video;
    if (this.pc.connectionState === 'connected') this.begin();
  }

  /** The answer for the viewer; the stream ended meanwhile (the screen went away) is an error. From now on the viewer has CONNECT_WITHIN_MS to connect. */
  async answer(): Promise<string> {
    await this.pc.setLocalDescription(await this.pc.createAnswer());
    await this.gathered();
    if (this.closed) throw new Error(this.endedBecause ?? 'the stream ended before it was answered');
    setTimeout(() => {
      if (this.pc.connectionState !== 'connected') this.close('the viewer did not connect in time');
    }, CONNECT_WITHIN_MS).unref();
    return this.pc.localDescription!.sdp;
  }

  close(reason: string): void {
    if (this.closed) return;
    this.closed = true;
    this.endedBecause = reason;
    if (this.silenceTimer) clearInterval(this.silenceTimer);
    this.watchClipboard(false);
    this.video?.close();
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

  /** Connected (and the video open): frames flow, and a viewer that goes silent ends the stream. */
  private begin(): void {
    if (this.silenceTimer || this.closed || !this.video) return;
    this.video.start();
    this.lastHeard = Date.now();
    this.silenceTimer = setInterval(() => {
      if (Date.now() - this.lastHeard > SILENCE_MS) this.close('the viewer went silent');
    }, 1_000);
  }

  /** A message on the control channel; dropped while the viewer does not take what was sent before. */
  private send(message: object): void {
    if (this.control?.readyState === 'open' && this.control.bufferedAmount < MAX_UNSENT_CONTROL_BYTES) this.control.send(JSON.stringify(message));
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
          this.send({ type: 'clipboard', text });
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
        this.pointer(x, y, this.buttons);
        return;
      }
      case 'wheel': {
        const x = number(message.x);
        const y = number(message.y);
        const dy = number(message.dy);
        if (x === null || y === null || !dy) return;
        const bit = dy < 0 ? 0x08 : 0x10; // buttons 4 and 5: one click per message
        this.pointer(x, y, this.buttons | bit);
        this.pointer(x, y, this.buttons);
        return;
      }
      case 'key': {
        const scancode = typeof message.code === 'string' ? scancodeOf(message.code) : null;
        if (scancode !== null) this.video?.input({ type: 'key', scancode, down: message.down === true });
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

  /** A pointer event at a position of the screen (whole pixels in RFB's range). */
  private pointer(x: number, y: number, buttons: number): void {
    const position = (value: number) => Math.min(MAX_POSITION, Math.max(0, Math.round(value)));
    this.video?.input({ type: 'pointer', x: position(x), y: position(y), buttons });
  }
}
