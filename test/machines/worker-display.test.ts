// A machine's screen through kiste-worker (worker-api.yaml GetMachineScreen, OpenScreen): the
// display code the control plane runs (QemuMachineDisplay) over the worker's machines and agents
// instead of in-process ones, against a real desktop-lite guest: the desktop comes up, its RFB
// stream carries drawn pixels, a resize reaches the guest, and a machine without a screen has none.
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { QemuMachineDisplay } from '../../src/compute/guest-display';
import { untilDesktopReady } from '../../src/compute/machine-display';
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
    const agents = new RemoteGuestAgents(client);
    display = new QemuMachineDisplay({
      imageDisplay: (machine) => machines.imageDisplay(machine),
      openScreen: (machine) => machines.openScreen(machine),
      isRunning: (machine) => machines.isRunning(machine),
      agent: (machine) => agents.agent(machine),
    });
  }, 30 * 60_000);
  afterAll(async () => {
    for (const qemu of listQemuProcesses().filter((p) => p.machineDir?.startsWith(dataDir))) process.kill(qemu.pid, 'SIGKILL');
    await worker?.ensureStopped();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('shows the desktop: ready, drawn pixels over RFB, a resize; a machine without a screen has none', async () => {
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

    const unknown = randomUUID();
    expect(await machines.imageDisplay(unknown)).toBeNull();
    expect(await display.state(unknown)).toBe('none');
    await expect(display.connect(unknown)).rejects.toMatchObject({ reason: 'none' });
    await machines.destroy(id);
    await expect(machines.openScreen(id)).rejects.toMatchObject({ status: 500, message: expect.stringContaining('not running') });
  });
});
