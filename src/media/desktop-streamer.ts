// What the desktop domain needs to stream a machine's screen to a viewer, whatever carries it.
import type { DisplaySize } from '../compute/machine-display';
import type { IceServer } from '../domain/ice-servers';
import type { ScreenVideo, ScreenVideoEvents } from './screen-video';

export interface DesktopStreamSettings {
  /** Most frames a second sent while the screen changes. */
  fps: number;
  /** Video bit rate, kbit/s. */
  kbps: number;
  /** The address host candidates are gathered on (the service's listen address); null: every interface. */
  hostAddress: string | null;
}

export const DEFAULT_STREAM_SETTINGS: DesktopStreamSettings = { fps: 15, kbps: 2000, hostAddress: null };

export interface StreamRequest {
  offerSdp: string;
  iceServers: IceServer[];
  /** The machine's screen as video, encoded where the machine runs (rejects when it cannot be reached). */
  openVideo(quality: { fps: number; kbps: number }, events: ScreenVideoEvents): Promise<ScreenVideo>;
  /** Sets the guest's screen size (the viewer's window). */
  resize(size: DisplaySize): Promise<DisplaySize>;
  /** The guest desktop's clipboard. */
  clipboard: { read(): Promise<string>; write(text: string): Promise<void> };
  /** The stream ended by itself (the viewer left, the machine stopped, it never connected). */
  onEnded(reason: string): void;
}

export interface OpenStream {
  answerSdp: string;
  close(reason: string): void;
}

/** What the desktop domain needs to stream a screen to a viewer. */
export interface DesktopStreamer {
  open(request: StreamRequest): Promise<OpenStream>;
}

/** Thrown for an offer the peer cannot answer (no video section, malformed SDP). */
export class OfferRejectedError extends Error {}
