// MachineDisplay on QEMU machines: the screen of a machine whose image has one (manifest.json
// `display`, images/profiles/display.ts). Pixels and input go through QEMU's own VNC server on the
// machine's display socket (src/compute/qemu/command-line.ts); what only the guest knows (is the
// desktop up, which size has the screen) is asked through the guest agent with short shell
// commands (Node in a guest under TCG takes seconds to start; sh, xdotool and xrandr do not).
import type { Duplex } from 'node:stream';
import type { GuestAgent } from './guest-agent';
import type { ScreenVideo, ScreenVideoEvents, ScreenVideoRequest, ScreenVideos } from '../media/screen-video';
import { CLIPBOARD_MAX_BYTES, DISPLAY_MAX, DISPLAY_MIN, ScreenSize, type DisplaySize, type DisplayState, type MachineDisplay } from './machine-display';
import { peerShape, peerText } from '../protocol/peer-input';

/** A machine's screen as a host has it: the image's screen, a fresh RFB stream of it, and its video. */
export interface MachineScreens extends ScreenVideos {
  /** The screen of the machine's image; null when it has none (or the machine is unknown). */
  imageDisplay(id: string): Promise<DisplaySize | null>;
  /** A new connection to QEMU's VNC server of the running machine; rejects when it cannot be reached. */
  openScreen(id: string): Promise<Duplex>;
}

/** What a display needs of the machine host: QemuMachineHost in this process, or a worker's (RemoteMachines and RemoteGuestAgents). */
export interface DisplayHost extends MachineScreens {
  isRunning(id: string): Promise<boolean>;
  agent(id: string): GuestAgent;
}

/** The size the guest says its screen has after a resize (guest output: bounded before it is passed on). */
const ReportedSizeShape = peerShape('guest screen size', ScreenSize);

/** The guest's side, as the display images set it up (images/profiles/display.ts). */
const GUEST = {
  user: 'kiste',
  env: { DISPLAY: ':0', XAUTHORITY: '/home/kiste/.Xauthority' },
  sessionUnit: 'kiste-desktop.service',
};

/**
 * Prints `ready` when X on :0 accepts the desktop user's cookie, the session unit runs and has a
 * window on the screen; else `starting`.
 */
const READY_PROBE = [
  `systemctl is-active --quiet ${GUEST.sessionUnit} || { echo starting; exit 0; }`,
  'xdotool search --onlyvisible --limit 1 --name "" >/dev/null 2>&1 && echo ready || echo starting',
].join('\n');

/**
 * Sets the screen to $1 x $2 (integers; nothing else reaches the shell) on the first connected
 * output, and prints the size the screen has afterwards: "W H". A size the output does not offer
 * is added as a mode with CVT reduced-blanking-like timings at 60 Hz (the display device is virtual:
 * the timings only have to be valid; Debian 12 has no `cvt` in the X server's package).
 */
const RESIZE_SCRIPT = [
  'set -eu',
  'w=$1 h=$2',
  'out=$(xrandr --query | awk \'$2 == "connected" { print $1; exit }\')',
  '[ -n "$out" ] || { echo "no connected output" >&2; exit 1; }',
  'mode="${w}x${h}"',
  // the modes the output offers (indented lines under it, up to the next output)
  'offered=$(xrandr --query | awk -v out="$out" \'/^[^ ]/ { on = ($1 == out) } on && /^   / { print $1 }\')',
  'if ! printf "%s\\n" "$offered" | grep -qx "$mode"; then',
  '  mode="kiste-${w}x${h}"',
  '  if ! printf "%s\\n" "$offered" | grep -qx "$mode"; then',
  '    htotal=$((w + 160)) vtotal=$((h + 31))',
  '    khz=$((htotal * vtotal * 60 / 1000))',
  '    clock=$((khz / 1000)).$(printf %03d $((khz % 1000)))',
  '    xrandr --newmode "$mode" "$clock" "$w" $((w + 48)) $((w + 80)) "$htotal" "$h" $((h + 3)) $((h + 9)) "$vtotal" +hsync -vsync 2>/dev/null || true',
  '    xrandr --addmode "$out" "$mode"',
  '  fi',
  'fi',
  'xrandr --output "$out" --mode "$mode"',
  'xrandr --query | sed -n \'s/^Screen 0: .* current \\([0-9]*\\) x \\([0-9]*\\),.*/\\1 \\2/p\'',
].join('\n');

/**
 * The size a resize asks the guest for: whole pixels within DISPLAY_MIN..DISPLAY_MAX, the width a
 * multiple of 8 (the horizontal granularity of CVT timings, which video modes keep to).
 */
export function clampDisplaySize(size: DisplaySize): DisplaySize {
  const clamp = (value: number, min: number, max: number) => Math.min(max, Math.max(min, Number.isFinite(value) ? Math.round(value) : min));
  return {
    width: Math.floor(clamp(size.width, DISPLAY_MIN.width, DISPLAY_MAX.width) / 8) * 8,
    height: clamp(size.height, DISPLAY_MIN.height, DISPLAY_MAX.height),
  };
}

export class DisplayUnavailableError extends Error {
  constructor(
    readonly reason: 'none' | 'stopped' | 'unreachable',
    message: string,
  ) {
    super(message);
    this.name = 'DisplayUnavailableError';
  }
}

export class QemuMachineDisplay implements MachineDisplay {
  constructor(
    private readonly host: DisplayHost,
    private readonly options: { probeTimeoutMs?: number; resizeTimeoutMs?: number } = {},
  ) {}

  async state(id: string): Promise<DisplayState> {
    if (!(await this.host.imageDisplay(id))) return 'none';
    if (!(await this.host.isRunning(id))) return 'stopped';
    const timeoutMs = this.options.probeTimeoutMs ?? 5_000;
    try {
      const result = await this.host.agent(id).run({ argv: ['sh', '-c', READY_PROBE], env: GUEST.env, timeout_ms: timeoutMs }, { timeoutMs });
      return result.exit_code === 0 && result.stdout.toString().trim() === 'ready' ? 'ready' : 'starting';
    } catch {
      return 'starting'; // the agent does not answer yet (booting, resuming)
    }
  }

  connect(id: string): Promise<Duplex> {
    return this.reach(id, () => this.host.openScreen(id));
  }

  video(id: string, request: ScreenVideoRequest, events: ScreenVideoEvents): Promise<ScreenVideo> {
    return this.reach(id, () => this.host.openVideo(id, request, events));
  }

  /** Opens something of a running machine's screen; why it cannot be had is a DisplayUnavailableError. */
  private async reach<T>(id: string, open: () => Promise<T>): Promise<T> {
    if (!(await this.host.imageDisplay(id))) throw new DisplayUnavailableError('none', `machine ${id} has no display (its image has no screen)`);
    if (!(await this.host.isRunning(id))) throw new DisplayUnavailableError('stopped', `machine ${id} is not running`);
    try {
      return await open();
    } catch (error) {
      throw new DisplayUnavailableError('unreachable', `the display of machine ${id} does not answer: ${error instanceof Error ? error.message : String(error)}`);
    }
  }

  async resize(id: string, size: DisplaySize): Promise<DisplaySize> {
    if (!(await this.host.imageDisplay(id))) throw new DisplayUnavailableError('none', `machine ${id} has no display (its image has no screen)`);
    if (!(await this.host.isRunning(id))) throw new DisplayUnavailableError('stopped', `machine ${id} is not running`);
    const wanted = clampDisplaySize(size);
    const result = await this.asDesktopUser(id, ['sh', '-c', RESIZE_SCRIPT, 'kiste-resize', String(wanted.width), String(wanted.height)], {
      timeoutMs: this.options.resizeTimeoutMs ?? 30_000,
    });
    const now = /^(\d{1,6}) (\d{1,6})$/m.exec(result.stdout.toString());
    if (result.exit_code !== 0 || !now) {
      throw new Error(`the guest could not set its screen to ${wanted.width}x${wanted.height}: ${peerText(result.stderr.toString().trim(), 500) || `exit ${result.exit_code}`}`);
    }
    const reported = ReportedSizeShape.parse({ width: Number(now[1]), height: Number(now[2]) });
    if (!reported.ok) throw new Error(`the guest reported a screen size that does not fit: ${reported.reason}`);
    return reported.value;
  }

  async readClipboard(id: string): Promise<string> {
    const result = await this.asDesktopUser(id, ['sh', '-c', 'timeout 5 xclip -o -selection clipboard 2>/dev/null || true'], { outputLimitBytes: CLIPBOARD_MAX_BYTES });
    return result.stdout.toString('utf8');
  }

  async writeClipboard(id: string, text: string): Promise<void> {
    // The text goes as an argument (no NUL can be in one); xclip stays in the background to serve
    // the selection, so its output is closed or the command would never end.
    const clipped = Buffer.from(text.replace(/\0/g, ''), 'utf8').subarray(0, CLIPBOARD_MAX_BYTES).toString('utf8');
    const result = await this.asDesktopUser(id, ['sh', '-c', 'printf %s "$1" | xclip -i -selection clipboard >/dev/null 2>&1', 'kiste-clipboard', clipped]);
    if (result.exit_code !== 0) throw new Error(`the guest could not take the clipboard (exit ${result.exit_code})`);
  }

  /** A short command as the desktop user on its X display (the display must be there). */
  private async asDesktopUser(id: string, argv: string[], limits: { timeoutMs?: number; outputLimitBytes?: number } = {}) {
    if (!(await this.host.imageDisplay(id))) throw new DisplayUnavailableError('none', `machine ${id} has no display (its image has no screen)`);
    const timeoutMs = limits.timeoutMs ?? 10_000;
    const outputLimitBytes = limits.outputLimitBytes;
    return this.host.agent(id).run(
      { argv: ['runuser', '-u', GUEST.user, '--', ...argv], env: GUEST.env, timeout_ms: timeoutMs, ...(outputLimitBytes ? { output_limit_bytes: outputLimitBytes } : {}) },
      { timeoutMs },
    );
  }
}
