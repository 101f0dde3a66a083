// The screen of a machine, as the desktop features see it: whether its desktop can be shown, a
// remote-framebuffer (RFB) stream of it, and its size. The implementation sits on QEMU's own VNC
// server (pixels and input never pass through guest code on the way out) and the guest agent.
import type { Duplex } from 'node:stream';
import { Type } from '@sinclair/typebox';
import type { ScreenVideo, ScreenVideoEvents, ScreenVideoRequest } from '../media/screen-video';

/**
 * - `none`: the machine's image has no display (e.g. the minimal profile);
 * - `stopped`: the machine is not running;
 * - `starting`: it runs, but the desktop session does not draw on the display yet;
 * - `ready`: the desktop is up.
 */
export type DisplayState = 'none' | 'stopped' | 'starting' | 'ready';

export interface DisplaySize {
  width: number;
  height: number;
}

/** Bounds a resize is clamped to (the display device's memory holds 4 bytes per pixel). */
export const DISPLAY_MIN: DisplaySize = { width: 640, height: 480 };
export const DISPLAY_MAX: DisplaySize = { width: 2560, height: 1600 };
/** A screen size as a guest or its QEMU reports it: nothing beyond what the display device can show. */
export const ScreenSize = Type.Object({ width: Type.Integer({ minimum: 1, maximum: DISPLAY_MAX.width }), height: Type.Integer({ minimum: 1, maximum: DISPLAY_MAX.height }) });

export interface MachineDisplay {
  state(id: string): Promise<DisplayState>;
  /**
   * A fresh RFB 3.8 connection to the machine's screen (security type None; one per viewer).
   * Rejects when the machine is not running or has no display.
   */
  connect(id: string): Promise<Duplex>;
  /**
   * The machine's screen as encoded video with its input, encoded where the machine runs (one per
   * viewer). Rejects when the machine is not running, has no display or its screen does not answer.
   */
  video(id: string, request: ScreenVideoRequest, events: ScreenVideoEvents): Promise<ScreenVideo>;
  /** Sets the size of the guest's screen, clamped to DISPLAY_MIN..DISPLAY_MAX; resolves with the size set. */
  resize(id: string, size: DisplaySize): Promise<DisplaySize>;
  /** The text on the guest desktop's clipboard (at most CLIPBOARD_MAX_BYTES; empty when there is none). */
  readClipboard(id: string): Promise<string>;
  /** Puts text on the guest desktop's clipboard (cut to CLIPBOARD_MAX_BYTES). */
  writeClipboard(id: string, text: string): Promise<void>;
}

/** Largest clipboard text carried either way. */
export const CLIPBOARD_MAX_BYTES = 64 * 1024;

/**
 * Waits until a running machine's desktop is up (at once for machines without a screen); a
 * desktop that is not up within `timeoutMs` is an error.
 */
export async function untilDesktopReady(display: Pick<MachineDisplay, 'state'>, id: string, timeoutMs = 180_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const state = await display.state(id);
    if (state === 'ready' || state === 'none') return;
    if (state === 'stopped') throw new Error(`machine ${id} stopped before its desktop was up`);
    if (Date.now() > deadline) throw new Error(`the desktop of machine ${id} was not up within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}
