// What the desktop domain needs to stream a machine's screen to a viewer, whatever carries it.
import type { Duplex } from 'node:stream';
import type { EncoderPlacement } from '../compute/jail/encoder-jail';
import type { RfbLogger } from '../compute/rfb-client';
import type { DisplaySize } from '../compute/machine-display';
import type { IceServer } from '../domain/ice-servers';

export interface DesktopStreamSettings {
  /** Most frames a second sent while the screen changes. */
  fps: number;
  /** Video bit rate, kbit/s. */
  kbps: number;
  /** The address host candidates are gathered on (the service's listen address); null: every interface. */
  hostAddress: string | null;
  /** Where an account's encoders run (their cgroup and user); unset: as the service, niced. */
  encoders?: { placement(accountId: string): EncoderPlacement };
  /** Where a screen's RFB messages that do not fit their shape are reported (QEMU is not trusted). */
  logger?: RfbLogger;
}

export const DEFAULT_STREAM_SETTINGS: DesktopStreamSettings = { fps: 15, kbps: 2000, hostAddress: null };

export interface StreamRequest {
  /** The account it streams for: its encoder runs in the account's share of the encoders' CPU. */
  accountId: string;
  offerSdp: string;
  iceServers: IceServer[];
  /** The machine's screen (RFB). */
  screen: Duplex;
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
