// A machine's screen as encoded video with its input: what a desktop stream needs of the host that
// runs the machine. The encoding (screen-encoding.ts) runs where the machine's RFB socket is — the
// worker, or this process when machines run in it — so the control plane never reads a machine's
// pixels nor runs its encoder; the viewer's WebRTC peer (webrtc-streamer.ts) only forwards packets.
import type { DisplaySize } from '../compute/machine-display';

export interface ScreenVideoRequest {
  /** The account it streams for: its encoder runs in the account's share of the encoders' CPU. */
  accountId: string;
  /** Most frames a second sent while the screen changes. */
  fps: number;
  /** Video bit rate, kbit/s. */
  kbps: number;
}

/** Bounds of a request (worker-api.yaml OpenScreenVideo). */
export const SCREEN_VIDEO_LIMITS = { fps: { min: 1, max: 60 }, kbps: { min: 100, max: 20_000 } } as const;

/** Largest RTP packet a screen video carries (the encoder writes at most 1200 bytes). */
export const MAX_RTP_PACKET_BYTES = 1500;

/** What the video hands out: its packets, its frame size and its end. */
export interface ScreenVideoEvents {
  /** One RTP packet (VP8, payload type 96); sequence numbers and timestamps run on across encoder restarts. */
  onRtp(packet: Buffer): void;
  /** The frames that follow have this size. */
  onSize(size: DisplaySize): void;
  /** The video ended by itself (the screen went away, the encoder failed); called once. */
  onEnded(reason: string): void;
}

/** The viewer's input, in the screen's terms: RFB pointer events and PC scancodes. */
export type ScreenInput =
  | { type: 'pointer'; x: number; y: number; buttons: number }
  | { type: 'key'; scancode: number; down: boolean };

export interface ScreenVideo {
  /** The viewer is connected: frames flow (a full screen first, then what changed). */
  start(): void;
  /** The viewer lost pictures: the next frame is a keyframe (at most one a second). */
  keyframe(): void;
  input(input: ScreenInput): void;
  /** Ends the video (no onEnded for a close asked for). */
  close(): void;
}

/** A machine's screen as video: the machine host's (this process) or a worker's (OpenScreenVideo). */
export interface ScreenVideos {
  openVideo(id: string, request: ScreenVideoRequest, events: ScreenVideoEvents): Promise<ScreenVideo>;
}
