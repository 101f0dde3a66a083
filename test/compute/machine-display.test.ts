// The screen of a machine for real: the desktop-lite image (Xorg on QEMU's bochs-display, an xterm
// as the session) booted once under TCG by a QemuMachineHost, seen and driven through QEMU's VNC
// server with a small RFB client, and through QemuMachineDisplay: state, connect, resize. Input over
// RFB must reach X through the virtio tablet and keyboard, the guest's tools (xdotool, xclip, xrandr)
// must work through exec, and a memory session (stop with session, resume) must keep all of it.
//
// No database: runs in the sqlite jest project only (jest.config.js), one guest boot.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { QemuMachineDisplay } from '../../src/compute/guest-display';
import type { HostImage, MachineShape } from '../../src/compute/machine-host';
import { QemuMachineHost } from '../../src/compute/qemu-machine-host';
import type { HostJail } from '../../src/compute/jail';
import { ensureDesktopTestImage, ensureTestImage, TEST_IMAGE_DIR } from '../support/images';
import { testJail } from '../support/jail';
import { colours as frameColours, RfbClient, typeText } from '../support/rfb';

jest.setTimeout(900_000);

const silent = { info: () => undefined, warn: () => undefined };
const SHAPE: MachineShape = { vcpu: 2, memoryMib: 1024, diskMib: 2048 };
const IDENTITY = { hostname: 'screen', authorizedKeys: [] };
const X_ENV = { DISPLAY: ':0', XAUTHORITY: '/home/kiste/.Xauthority' };
const XK_RETURN = 0xff0d;
const XT_RETURN = 0x1c;

/** Polls `check` until it is true; throws with `what` after the time limit. */
async function pollUntil(check: () => Promise<boolean>, options: { timeoutMs: number; intervalMs: number; what: string }): Promise<void> {
  const deadline = Date.now() + options.timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`waited ${options.timeoutMs} ms for ${options.what}`);
    await new Promise((resolve) => setTimeout(resolve, options.intervalMs));
  }
}

describe('the screen of a desktop-lite machine', () => {
  let dataDir: string;
  let jail: HostJail;
  let host: QemuMachineHost;
  let display: QemuMachineDisplay;
  let lite: HostImage;
  let minimal: HostImage;
  let rfb: RfbClient | undefined;
  const id = 'screen';

  /** A shell script in the guest as the desktop user, with the X environment. */
  async function guest(script: string): Promise<{ stdout: string; stderr: string; exitCode: number }> {
    const result = await host.agent(id).run({ argv: ['runuser', '-u', 'kiste', '--', 'sh', '-c', script], env: X_ENV, timeout_ms: 60_000 });
    return { stdout: result.stdout.toString(), stderr: result.stderr.toString(), exitCode: result.exit_code };
  }

  async function pointerAt(): Promise<{ x: number; y: number }> {
    const location = await guest('xdotool getmouselocation');
    const match = /x:(\d+) y:(\d+)/.exec(location.stdout);
    if (!match) throw new Error(`xdotool getmouselocation: ${location.stdout}${location.stderr}`);
    return { x: Number(match[1]), y: Number(match[2]) };
  }

  async function waitReady(limitMs: number): Promise<number> {
    const started = Date.now();
    await pollUntil(async () => (await display.state(id)) === 'ready', { timeoutMs: limitMs, intervalMs: 1000, what: 'the desktop to be ready' });
    return Date.now() - started;
  }

  async function openRfb(): Promise<RfbClient> {
    rfb?.close();
    rfb = await RfbClient.connect(await display.connect(id));
    return rfb;
  }

  /** Full frames until one is not a single colour (the session may still be drawing). */
  async function drawnFrame(client: RfbClient): Promise<number> {
    let colours = 0;
    await pollUntil(async () => (colours = frameColours(await client.frame(false))) > 1, { timeoutMs: 60_000, intervalMs: 1000, what: 'a drawn frame' });
    return colours;
  }

  beforeAll(async () => {
    await Promise.all([ensureDesktopTestImage(), ensureTestImage()]);
    dataDir = mkdtempSync(join(tmpdir(), 'kiste-display-'));
    jail = testJail(dataDir, TEST_IMAGE_DIR);
    host = new QemuMachineHost({ dataDir, imagesDir: TEST_IMAGE_DIR, accelerator: 'tcg', logger: silent, jail });
    lite = (await host.refreshImage('desktop-lite'))!;
    minimal = (await host.refreshImage('minimal'))!;
    display = new QemuMachineDisplay(host);
  }, 30 * 60_000);

  afterAll(async () => {
    rfb?.close();
    if (!host) return;
    for (const known of await host.knownMachineIds()) await host.destroy(known);
    await jail.unloadFirewall();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('has no display without a screen in the image, and nothing to show while stopped', async () => {
    expect(lite).not.toBeNull();
    expect(minimal).not.toBeNull();
    await host.createDisk('plain', minimal, 1024);
    expect(await host.imageDisplay('plain')).toBeNull(); // an image built before screens: no display
    expect(await display.state('plain')).toBe('none');
    await expect(display.connect('plain')).rejects.toThrow(/has no display/);
    await expect(display.resize('plain', { width: 800, height: 600 })).rejects.toThrow(/has no display/);
    expect(await display.state('nobody')).toBe('none');

    await host.createDisk(id, lite, SHAPE.diskMib);
    expect(await host.imageDisplay(id)).toEqual({ width: 1280, height: 720 });
    expect(await display.state(id)).toBe('stopped');
    await expect(display.connect(id)).rejects.toThrow(/not running/);
  });

  it('boots to a ready desktop: RFB shows the 1280x720 screen with the xterm drawn on it', async () => {
    const started = Date.now();
    await host.boot(id, SHAPE, lite, IDENTITY);
    const bootedMs = Date.now() - started;
    expect(['starting', 'ready']).toContain(await display.state(id));
    await waitReady(300_000);
    const readyMs = Date.now() - started;
    const client = await openRfb();
    expect([client.width, client.height]).toEqual([1280, 720]);
    const colours = await drawnFrame(client);
    // the session's window has the keyboard. Sampled until the session has settled: a session that
    // the unit starts again (X up before the machine was renamed, a slow TCG boot) focuses its new
    // xterm a moment later. The last sample and the session's journal explain a failure.
    let focus = { stdout: '', stderr: '', exitCode: -1 };
    const focused = async (): Promise<boolean> => {
      focus = await guest('xdotool getwindowfocus getwindowpid; pgrep -x xterm');
      const [focusPid, xtermPid] = focus.stdout.trim().split('\n');
      return /^\d+$/.test(focusPid ?? '') && focusPid === xtermPid;
    };
    await pollUntil(focused, { timeoutMs: 30_000, intervalMs: 500, what: 'the xterm to have the keyboard' }).catch(async (error: Error) => {
      const journal = await host.agent(id).run({ argv: ['journalctl', '-b', '--no-pager', '-n', '60', '-u', 'kiste-desktop.service', '-u', 'kiste-display.service'], timeout_ms: 30_000 });
      throw new Error(`${error.message}; last sample ${JSON.stringify(focus)}; journal:\n${journal.stdout.toString()}`);
    });
    const [focusPid, xtermPid] = focus.stdout.trim().split('\n');
    expect(focusPid).toBe(xtermPid);
    // X on its own VT, the text console (fbcon) with a login on tty1 for when X is broken
    const consoles = (await guest('systemctl is-active kiste-display.service getty@tty1.service; cat /sys/class/graphics/fb0/name')).stdout.split('\n');
    expect(consoles.slice(0, 2)).toEqual(['active', 'active']);
    expect(consoles[2]).toMatch(/^bochs.*drmfb$/); // the display device's framebuffer console
    console.log(`desktop-lite ${lite.version}: boot (SSH + agent) ${(bootedMs / 1000).toFixed(1)} s, desktop ready ${(readyMs / 1000).toFixed(1)} s after the start (TCG); ${colours} colours on screen`);
  });

  it('takes scripted input with xdotool', async () => {
    const moved = await guest('xdotool mousemove 100 200 && xdotool getmouselocation');
    expect(moved.stdout).toMatch(/^x:100 y:200 /);
  });

  it('moves the guest pointer with RFB pointer events (virtio tablet)', async () => {
    rfb!.pointer(700, 500);
    let at = { x: 0, y: 0 };
    // absolute coordinates are scaled to the tablet's range and back: a pixel or two off
    await pollUntil(async () => {
      at = await pointerAt();
      return Math.abs(at.x - 700) <= 3 && Math.abs(at.y - 500) <= 3;
    }, { timeoutMs: 30_000, intervalMs: 500, what: `the pointer at 700,500 (last ${JSON.stringify(at)})` });
  });

  it('types into the xterm with RFB key events (keysyms, and QEMU extended key events with scancodes)', async () => {
    typeText(rfb!, 'touch /tmp/typed-over-rfb');
    rfb!.scancode(XK_RETURN, XT_RETURN, true);
    rfb!.scancode(XK_RETURN, XT_RETURN, false);
    await pollUntil(async () => (await guest('test -e /tmp/typed-over-rfb && echo yes')).stdout.trim() === 'yes', {
      timeoutMs: 30_000,
      intervalMs: 500,
      what: 'the command typed over RFB to run in the xterm',
    });
  });

  it('has the clipboard tool for the agent: xclip sets and reads the X clipboard', async () => {
    await guest('printf clip-%s 1 | xclip -selection clipboard >/dev/null 2>&1');
    expect((await guest('timeout 10 xclip -o -selection clipboard')).stdout).toBe('clip-1');
  });

  it('resizes the screen: the RFB client gets the new size, out-of-range sizes are clamped', async () => {
    const client = rfb!;
    const resized = client.nextUpdate();
    expect(await display.resize(id, { width: 1024, height: 768 })).toEqual({ width: 1024, height: 768 });
    client.requestUpdate(true);
    await resized;
    await pollUntil(async () => {
      if (client.width !== 1024) client.requestUpdate(true);
      return client.width === 1024 && client.height === 768;
    }, { timeoutMs: 30_000, intervalMs: 500, what: 'the RFB DesktopSize 1024x768' });
    expect((await client.frame(false)).pixels.length).toBe(1024 * 768 * 4);
    // a size no output offers is made (cvt), the width rounded to 8; too large is clamped
    expect(await display.resize(id, { width: 1101.4, height: 700 })).toEqual({ width: 1096, height: 700 });
    expect(await display.resize(id, { width: 9000, height: 100 })).toEqual({ width: 2560, height: 480 });
    expect(await display.resize(id, { width: 1024, height: 768 })).toEqual({ width: 1024, height: 768 });
    expect((await guest('xrandr --query | head -n 1')).stdout).toMatch(/current 1024 x 768/);
  });

  it('keeps the display through a memory session (stop with session, resume)', async () => {
    rfb?.close();
    rfb = undefined;
    const before = (await guest('pgrep -x xterm')).stdout.trim();
    expect(await host.stop(id, { saveSession: true })).toEqual({ sessionSaved: true });
    expect(await display.state(id)).toBe('stopped');
    await expect(display.connect(id)).rejects.toThrow(/not running/);
    const resumeStarted = Date.now();
    await host.resume(id, SHAPE, lite, IDENTITY);
    const resumeMs = Date.now() - resumeStarted;
    await waitReady(60_000);
    const readyMs = Date.now() - resumeStarted;
    expect((await guest('pgrep -x xterm')).stdout.trim()).toBe(before); // the same session goes on
    const client = await openRfb();
    expect([client.width, client.height]).toEqual([1024, 768]);
    await drawnFrame(client);
    client.pointer(200, 300);
    await pollUntil(async () => {
      const at = await pointerAt();
      return Math.abs(at.x - 200) <= 3 && Math.abs(at.y - 300) <= 3;
    }, { timeoutMs: 30_000, intervalMs: 500, what: 'the pointer at 200,300 after the resume' });
    expect((await guest('timeout 10 xclip -o -selection clipboard')).stdout).toBe('clip-1'); // the X session's state
    console.log(`desktop-lite resume ${(resumeMs / 1000).toFixed(1)} s, display ready ${(readyMs / 1000).toFixed(1)} s after the resume started`);
  });

  it('a fork has a screen of its own: it boots fresh to its own desktop while the source keeps its', async () => {
    rfb?.close();
    rfb = undefined;
    const fork = 'screen-fork';
    await host.forkDisk(id, fork);
    expect(await host.imageDisplay(fork)).toEqual({ width: 1280, height: 720 });
    await host.boot(fork, SHAPE, lite, { hostname: 'screen-fork', authorizedKeys: [] });
    await pollUntil(async () => (await display.state(fork)) === 'ready', { timeoutMs: 300_000, intervalMs: 1000, what: "the fork's desktop" });
    const forkScreen = await RfbClient.connect(await display.connect(fork));
    try {
      // a fresh boot: the size of the image, not the source's 1024x768
      expect([forkScreen.width, forkScreen.height]).toEqual([1280, 720]);
      await drawnFrame(forkScreen);
    } finally {
      forkScreen.close();
    }
    expect(await display.state(id)).toBe('ready');
    await host.destroy(fork);
  }, 400_000);
});
