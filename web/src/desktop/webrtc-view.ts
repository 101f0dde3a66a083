// The desktop over WebRTC: a video of the machine's screen (VP8 from the host's encoder) and the
// viewer's input on two data channels: `input` (pointer moves; unordered, never retransmitted: a
// late move is worth nothing) and `control` (buttons, wheel, keys by physical code, the window's
// size, the clipboard; reliable). One request carries the offer with its candidates and brings back
// the answer. The clipboard follows focus: while this tab has it, text copied here goes to the machine
// and text copied there comes here.
import { api, ok } from '../api';
import type { DesktopSession } from './desktop-session';

export interface ScreenView {
  disconnect(): void;
  setScale(fit: boolean): void;
  focus(): void;
}

export interface ScreenEvents {
  connected(): void;
  /** The stream ended, or (`neverConnected`) it never got going: then the recovery console is the way in. */
  disconnected(neverConnected: boolean): void;
}

/** How long ICE may take before the viewer gives up on WebRTC. */
const CONNECT_WITHIN_MS = 8_000;
const GATHER_WITHIN_MS = 2_000;
const RESIZE_SETTLE_MS = 400;
/** The stream ends when it hears nothing from the viewer for 30 s: a ping keeps it while this tab lives. */
const PING_EVERY_MS = 5_000;

export async function openWebRtcView(target: HTMLElement, session: DesktopSession, fit: boolean, events: ScreenEvents): Promise<ScreenView> {
  const pc = new RTCPeerConnection({ iceServers: session.ice_servers.map((server) => ({ ...server })) });
  const input = pc.createDataChannel('input', { ordered: false, maxRetransmits: 0 });
  const control = pc.createDataChannel('control');
  const transceiver = pc.addTransceiver('video', { direction: 'recvonly' });
  // VP8 only: the host encodes nothing else, and a short offer stays within the request's size limit.
  const vp8 = (RTCRtpReceiver.getCapabilities('video')?.codecs ?? []).filter((codec) => /^video\/(VP8|rtx)$/i.test(codec.mimeType));
  if (vp8.length) transceiver.setCodecPreferences(vp8);
  // Show each frame as soon as it is decoded: a desktop is interactive, smoothness matters less than delay.
  if ('jitterBufferTarget' in transceiver.receiver) (transceiver.receiver as RTCRtpReceiver & { jitterBufferTarget: number }).jitterBufferTarget = 0;

  const video = document.createElement('video');
  video.autoplay = true;
  video.muted = true;
  video.playsInline = true;
  video.tabIndex = 0;
  video.setAttribute('aria-label', 'Machine screen (video)');
  video.className = 'desktop-video';
  video.srcObject = new MediaStream([transceiver.receiver.track]);
  target.replaceChildren(video);

  let ended = false;
  let everConnected = false;
  const end = (neverConnected: boolean) => {
    if (ended) return;
    ended = true;
    cleanup();
    pc.close();
    events.disconnected(neverConnected);
  };
  const giveUp = setTimeout(() => !everConnected && end(true), CONNECT_WITHIN_MS);
  pc.addEventListener('connectionstatechange', () => {
    if (pc.connectionState === 'failed' || pc.connectionState === 'closed') end(!everConnected);
    if (pc.connectionState === 'disconnected' && everConnected) end(false);
  });
  video.addEventListener('playing', () => {
    if (everConnected || ended) return;
    everConnected = true;
    clearTimeout(giveUp);
    sendSize();
    if (document.hasFocus()) onFocus();
    events.connected();
  });

  // --- clipboard --------------------------------------------------------------------------------
  let clipboardText: string | null = null;
  control.addEventListener('message', (event: MessageEvent) => {
    let message: { type?: string; text?: unknown };
    try {
      message = JSON.parse(String(event.data));
    } catch {
      return;
    }
    if (message.type === 'clipboard' && typeof message.text === 'string') {
      clipboardText = message.text;
      void navigator.clipboard?.writeText(message.text).catch(() => undefined);
    }
  });
  const onFocus = () => {
    send(control, { type: 'clipboard-watch', on: true });
    void navigator.clipboard?.readText().then(
      (text) => {
        if (text && text !== clipboardText) {
          clipboardText = text;
          send(control, { type: 'clipboard', text });
        }
      },
      () => undefined, // not allowed to read it: the machine keeps its own clipboard
    );
  };
  const onBlur = () => send(control, { type: 'clipboard-watch', on: false });

  // --- input ------------------------------------------------------------------------------------
  /** The guest pixel under a point of the video (the picture is letterboxed inside the element when fitted). */
  const guestPoint = (event: MouseEvent) => {
    const box = video.getBoundingClientRect();
    const width = video.videoWidth || 1;
    const height = video.videoHeight || 1;
    const scale = fitNow ? Math.min(box.width / width, box.height / height) : 1;
    const left = box.left + (box.width - width * scale) / 2;
    const top = box.top + (box.height - height * scale) / 2;
    return { x: Math.round((event.clientX - left) / scale), y: Math.round((event.clientY - top) / scale) };
  };
  // Browser buttons (1 left, 2 right, 4 middle) to RFB's (1 left, 2 middle, 4 right).
  const buttonsOf = (event: MouseEvent) => (event.buttons & 1) | ((event.buttons & 4) >> 1) | ((event.buttons & 2) << 1);
  const send = (channel: RTCDataChannel, message: object) => {
    if (channel.readyState === 'open' && channel.bufferedAmount < 64 * 1024) channel.send(JSON.stringify(message));
  };
  const onMove = (event: PointerEvent) => send(input, { type: 'pointer', ...guestPoint(event) });
  const onButton = (event: PointerEvent) => {
    if (event.type === 'pointerdown') video.focus();
    send(control, { type: 'pointer', ...guestPoint(event), buttons: buttonsOf(event) });
  };
  const onWheel = (event: WheelEvent) => {
    event.preventDefault();
    if (event.deltaY) send(control, { type: 'wheel', ...guestPoint(event), dy: Math.sign(event.deltaY) });
  };
  const onKey = (event: KeyboardEvent) => {
    if (!event.code) return;
    event.preventDefault(); // the machine's shortcuts, not the browser's
    send(control, { type: 'key', code: event.code, down: event.type === 'keydown' });
  };
  const noMenu = (event: Event) => event.preventDefault();
  let resizeTimer: number | undefined;
  const sendSize = () => send(control, { type: 'resize', width: Math.round(target.clientWidth), height: Math.round(target.clientHeight) });
  const onWindowResize = () => {
    window.clearTimeout(resizeTimer);
    resizeTimer = window.setTimeout(sendSize, RESIZE_SETTLE_MS);
  };
  video.addEventListener('pointermove', onMove);
  video.addEventListener('pointerdown', onButton);
  video.addEventListener('pointerup', onButton);
  video.addEventListener('wheel', onWheel, { passive: false });
  video.addEventListener('keydown', onKey);
  video.addEventListener('keyup', onKey);
  video.addEventListener('contextmenu', noMenu);
  window.addEventListener('resize', onWindowResize);
  const ping = window.setInterval(() => send(control, { type: 'ping' }), PING_EVERY_MS);
  window.addEventListener('focus', onFocus);
  window.addEventListener('blur', onBlur);
  const cleanup = () => {
    window.clearInterval(ping);
    window.removeEventListener('focus', onFocus);
    window.removeEventListener('blur', onBlur);
    clearTimeout(giveUp);
    window.clearTimeout(resizeTimer);
    window.removeEventListener('resize', onWindowResize);
    video.srcObject = null;
    video.remove();
  };

  let fitNow = fit;
  const applyScale = () => video.classList.toggle('natural', !fitNow);
  applyScale();

  // --- offer / answer -----------------------------------------------------------------------------
  try {
    await pc.setLocalDescription(await pc.createOffer());
    await gathered(pc);
    const id = new URL(session.offer_url).pathname.split('/').at(-2)!;
    const answer = await ok(api.POST('/v1/desktop/native/{session}/offer', { params: { path: { session: id } }, body: { sdp: pc.localDescription!.sdp } }));
    await pc.setRemoteDescription({ type: 'answer', sdp: answer.sdp });
  } catch (error) {
    end(true);
    throw error;
  }
  return {
    disconnect: () => end(false),
    setScale(value) {
      fitNow = value;
      applyScale();
    },
    focus: () => video.focus(),
  };
}

function gathered(pc: RTCPeerConnection): Promise<void> {
  if (pc.iceGatheringState === 'complete') return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, GATHER_WITHIN_MS);
    pc.addEventListener('icegatheringstatechange', () => {
      if (pc.iceGatheringState !== 'complete') return;
      clearTimeout(timer);
      resolve();
    });
  });
}
