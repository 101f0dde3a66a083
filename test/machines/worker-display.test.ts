// A machine's screen through kiste-worker (worker-api.yaml GetMachineScreen, OpenScreen,
// OpenScreenVideo): the display code the control plane runs (QemuMachineDisplay) over the worker's
// machines and agents instead of in-process ones, against a real desktop-lite guest: the desktop
// comes up, its RFB stream carries drawn pixels, a resize reaches the guest, the screen's video is
// encoded on the worker (VP8 over RTP, the viewer's pointer reaching the guest, a keyframe when
// asked, the encoder gone with the video), and a machine without a screen has none.
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readdirSync, readFileSync } from 'node:fs';
import { QemuMachineDisplay } from '../../src/compute/guest-display';
import { untilDesktopReady, type DisplaySize } from '../../src/compute/machine-display';
import { isScreenRtp } from '../../src/compute/remote-screen-video';
import { listQemuProcesses } from '../../src/compute/qemu';
import { RemoteGuestAgents } from '../../src/compute/remote-guest-agents';
import { RemoteMachines } from '../../src/compute/remote-machines';
import { RemoteImages } from '../../src/compute/remote-images';
import { ensureDesktopTestImage, TEST_IMAGE_DIR } from '../support/images';
import { adoptedWorkerClient } from '../support/adopted-worker';
import { colours, RfbClient } from '../support/rfb';
import { ServiceProcess } from '../support/service-process';

jest.setTimeout(900_000);

describe("a machine's screen through kiste-worker", () => {
  let dataDir: string;
  let worker: ServiceProcess;
  let machines: RemoteMachines;
  let display: QemuMachineDisplay;
  const id = randomUUID();

  let images: RemoteImages;
  let agents: RemoteGuestAgents;

  beforeAll(async () => {
    await ensureDesktopTestImage();
    dataDir = mkdtempSync(join(tmpdir(), 'kiste-worker-display-'));
    worker = new ServiceProcess(
      { KISTE_DATA_DIR: dataDir, KISTE_IMAGE_DIR: TEST_IMAGE_DIR, KISTE_ACCELERATOR: 'tcg', KISTE_IMAGE_PROFILE: 'desktop-lite', KISTE_BOOT_SNAPSHOTS: 'off' },
      { entry: 'src/worker/main.ts', ready: 'kiste-worker is listening' },
    );
    await worker.listening();
    const client = await adoptedWorkerClient(dataDir);
    machines = new RemoteMachines(client);
    images = new RemoteImages(client);
    agents = new RemoteGuestAgents(client);
    display = new QemuMachineDisplay({
      imageDisplay: (machine) => machines.imageDisplay(machine),
      openScreen: (machine) => machines.openScreen(machine),
      openVideo: (machine, request, events) => machines.openVideo(machine, request, events),
      isRunning: (machine) => machines.isRunning(machine),
      agent: (machine) => agents.agent(machine),
    });
  }, 30 * 60_000);
  let lastPointer = '';
  const guestPointer = async () => {
    const result = await agents.agent(id).run({ argv: ['sh', '-c', 'DISPLAY=:0 XAUTHORITY=/home/kiste/.Xauthority xdotool getmouselocation 2>&1'], timeout_ms: 10_000 }, { timeoutMs: 10_000 });
    return (lastPointer = result.stdout.toString());
  };
  afterAll(async () => {
    for (const qemu of listQemuProcesses().filter((p) => p.machineDir?.startsWith(dataDir))) process.kill(qemu.pid, 'SIGKILL');
    await worker?.ensureStopped();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('shows the desktop: ready, drawn pixels over RFB, a resize, its video encoded on the worker; a machine without a screen has none', async () => {
    const current = await images.refresh('desktop-lite');
    expect(current).not.toBeNull();
    await machines.create(id, current!, { vcpu: 2, memoryMib: 1024, diskMib: 2048 }, { hostname: 'screen', authorizedKeys: [] });
    expect(await machines.imageDisplay(id)).toEqual({ width: expect.any(Number), height: expect.any(Number) });
    await untilDesktopReady(display, id, 300_000);
    expect(await display.state(id)).toBe('ready');

    const rfb = await RfbClient.connect(await display.connect(id));
    try {
      let drawn = 0;
      const deadline = Date.now() + 60_000;
      while ((drawn = colours(await rfb.frame(false))) <= 1 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 1000));
      expect(drawn).toBeGreaterThan(1);
    } finally {
      rfb.close();
    }
    await expect(display.resize(id, { width: 1024, height: 768 })).resolves.toEqual({ width: 1024, height: 768 });

    // The screen as video, encoded on the worker in an encoder of its own.
    const packets: Buffer[] = [];
    const sizes: DisplaySize[] = [];
    const endings: string[] = [];
    const video = await display.video(id, { accountId: 'acct-screen', fps: 10, kbps: 800 }, {
      onRtp: (packet) => packets.push(packet),
      onSize: (size) => sizes.push(size),
      onEnded: (reason) => endings.push(reason),
    });
    try {
      await new Promise((resolve) => setTimeout(resolve, 1000));
      expect({ packets: packets.length, encoders: encodersOf(worker.child.pid!) }).toEqual({ packets: 0, encoders: 0 }); // nothing before the viewer is there
      video.start();
      // The whole screen first (an idle desktop sends nothing after it).
      await until('video packets', () => packets.length >= 1, 60_000);
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(sizes[0]).toEqual({ width: 1024, height: 768 });
      expect(packets.every(isScreenRtp)).toBe(true);
      expect(isVp8Keyframe(packets[0]!)).toBe(true);
      const sequences = packets.map((packet) => packet.readUInt16BE(2));
      expect(sequences.slice(1)).toEqual(sequences.slice(0, -1).map((sequence) => (sequence + 1) & 0xffff));
      expect(encodersOf(worker.child.pid!)).toBe(1);
      // The viewer's pointer reaches the guest's X server.
      video.input({ type: 'pointer', x: 321, y: 123, buttons: 0 });
      // (QEMU scales it to its tablet's range and back: a pixel off at most.)
      const near = (text: string) => {
        const at = /x:(\d+) y:(\d+) /.exec(text);
        return at !== null && Math.abs(Number(at[1]) - 321) <= 1 && Math.abs(Number(at[2]) - 123) <= 1;
      };
      await until('the guest pointer to move', async () => near(await guestPointer()), 30_000).catch((error) => {
        throw new Error(`${error.message} (xdotool: ${lastPointer})`);
      });
      // A keyframe when asked: a fresh encoder, its size said again, its first packet a keyframe.
      await new Promise((resolve) => setTimeout(resolve, 1100));
      const before = packets.length;
      video.keyframe();
      await until('a second encoder', () => sizes.length === 2, 30_000);
      video.input({ type: 'pointer', x: 400, y: 300, buttons: 0 }); // something to draw
      await until('a keyframe', () => packets.slice(before).some(isVp8Keyframe), 30_000);
    } finally {
      video.close();
    }
    await until('the encoder to end', () => encodersOf(worker.child.pid!) === 0, 10_000);
    expect(endings).toEqual([]); // closed by the viewer's side: no end to report

    const unknown = randomUUID();
    expect(await machines.imageDisplay(unknown)).toBeNull();
    expect(await display.state(unknown)).toBe('none');
    await expect(display.connect(unknown)).rejects.toMatchObject({ reason: 'none' });
    await machines.destroy(id);
    await expect(machines.openScreen(id)).rejects.toMatchObject({ status: 500, message: expect.stringContaining('not running') });
  });
});

/** The video encoders (ffmpeg) the worker process started. */
function encodersOf(pid: number): number {
  let count = 0;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const [, comm, rest] = /^\d+ \((.*)\) (.*)$/s.exec(stat)!;
      if (comm === 'ffmpeg' && Number(rest!.split(' ')[1]) === pid) count++;
    } catch {
      // gone meanwhile
    }
  }
  return count;
}

/** Whether an RTP packet starts a VP8 keyframe (RFC 7741: the descriptor's S bit, partition 0, and the payload header's P bit clear). */
function isVp8Keyframe(packet: Buffer): boolean {
  let at = 12 + (packet[0]! & 0x0f) * 4;
  if (packet[0]! & 0x10) at += 4 + packet.readUInt16BE(at + 2) * 4; // header extension
  const descriptor = packet[at]!;
  if ((descriptor & 0x10) === 0 || (descriptor & 0x0f) !== 0) return false;
  at++;
  if (descriptor & 0x80) {
    const extended = packet[at++]!;
    if (extended & 0x80) at += packet[at]! & 0x80 ? 2 : 1; // picture id
    if (extended & 0x40) at++; // TL0PICIDX
    if (extended & 0x30) at++; // TID / KEYIDX
  }
  return (packet[at]! & 0x01) === 0;
}

async function until(what: string, probe: () => boolean | Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}
