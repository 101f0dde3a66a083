// Machines driven through kiste-worker (worker-api.yaml) instead of in-process (issue 22): a real
// guest is created, stopped with its memory, resumed and destroyed over the protocol; a worker
// killed with -9 leaves its machine running and the next worker adopts it; a failed operation
// comes back as the worker's message, a request that does not fit as 400.
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { listQemuProcesses } from '../../src/compute/qemu';
import { RemoteMachines } from '../../src/compute/remote-machines';
import { WorkerCallError, WorkerClient } from '../../src/compute/worker-client';
import { readWorkerSecret } from '../../src/worker/worker-secret';
import { ensureTestImage, TEST_IMAGE_DIR } from '../support/images';
import { ServiceProcess } from '../support/service-process';

jest.setTimeout(600_000);

const SSH_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMh0vbf5v3M0Kz1cl5q3lM1kP1nN7zQ0b3hVv0ZQk6d1 test@kiste';
const SHAPE = { vcpu: 1, memoryMib: 768, diskMib: 2048 };

describe('machines through kiste-worker', () => {
  let dataDir: string;
  const workers: ServiceProcess[] = [];
  let machines: RemoteMachines;
  let client: WorkerClient;
  const id = randomUUID();

  async function startWorker(): Promise<void> {
    const worker = new ServiceProcess(
      { KISTE_DATA_DIR: dataDir, KISTE_IMAGE_DIR: TEST_IMAGE_DIR, KISTE_ACCELERATOR: 'tcg' },
      { entry: 'src/worker/main.ts', ready: 'kiste-worker is listening' },
    );
    workers.push(worker);
    await worker.listening();
    client = new WorkerClient({ socketPath: join(dataDir, 'worker.sock'), secret: readWorkerSecret(join(dataDir, 'worker.secret'), { create: false }) });
    machines = new RemoteMachines(client);
  }

  beforeAll(async () => {
    await ensureTestImage();
    dataDir = mkdtempSync(join(tmpdir(), 'kiste-worker-machines-'));
    await startWorker();
  });
  afterAll(async () => {
    for (const qemu of listQemuProcesses().filter((p) => p.machineDir?.startsWith(dataDir))) process.kill(qemu.pid, 'SIGKILL');
    for (const worker of workers) await worker.ensureStopped();
    rmSync(dataDir, { recursive: true, force: true });
  });

  const qemuOf = (machine: string) => listQemuProcesses().filter((p) => p.machineId === machine).map((p) => p.pid);

  it('creates a machine, stops it with its memory, resumes it and reads its console', async () => {
    const { current } = await machines.imageState('minimal');
    expect(current).not.toBeNull();
    const created = await machines.create(id, current!, SHAPE, { hostname: 'remote', authorizedKeys: [SSH_KEY] });
    expect(created.hostKeys.length).toBeGreaterThan(0);
    expect(['boot', 'snapshot']).toContain(created.startedFrom);
    expect(await machines.isRunning(id)).toBe(true);
    expect(await machines.knownMachineIds()).toContain(id);
    expect(qemuOf(id)).toHaveLength(1);

    expect(await machines.stop(id, { saveSession: true })).toEqual({ sessionSaved: true });
    expect(await machines.isRunning(id)).toBe(false);
    expect(await machines.hasSession(id)).toBe(true);
    expect(qemuOf(id)).toEqual([]);
    const resumed = await machines.resume(id, SHAPE, current!, { hostname: 'remote', authorizedKeys: [SSH_KEY] });
    expect(resumed.hostKeys.map((key) => key.publicKey)).toEqual(created.hostKeys.map((key) => key.publicKey));
    expect(await machines.isRunning(id)).toBe(true);
    expect((await machines.consoleTail(id, 50)).length).toBeGreaterThan(0);
  });

  it('outlives a worker killed with -9; the next worker adopts it', async () => {
    const [pid] = qemuOf(id);
    workers.at(-1)!.killHard();
    await workers.at(-1)!.waitExit(10_000);
    expect(qemuOf(id)).toEqual([pid]);
    await startWorker();
    expect(await machines.adopt(id)).toBe(true);
    expect(await machines.isRunning(id)).toBe(true);
    expect(qemuOf(id)).toEqual([pid]);
  });

  it('answers a failed operation with its message, and a request that does not fit with 400', async () => {
    const { current } = await machines.imageState('minimal');
    const error = await machines.resume(randomUUID(), SHAPE, current!, { hostname: 'ghost', authorizedKeys: [] }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(WorkerCallError);
    expect(error).toMatchObject({ status: 500, code: 'failed' });
    const refused = await client.call('POST', `/w1/machines/${randomUUID()}/create`, 'CreateMachine', { image: current, shape: { vcpu: 1 }, identity: { hostname: '../../etc', authorized_keys: [] } }).catch((e: unknown) => e);
    expect(refused).toMatchObject({ status: 400, code: 'bad_request' });
    const traversal = await client.call('DELETE', '/w1/machines/..%2F..%2Fetc', 'DestroyMachine').catch((e: unknown) => e);
    expect(traversal).toMatchObject({ status: 400, code: 'bad_request' }); // not in canonical form: never routed
  });

  it('destroys the machine and removes strays', async () => {
    await machines.destroy(id);
    expect(qemuOf(id)).toEqual([]);
    expect(await machines.knownMachineIds()).not.toContain(id);
    // The failed resume above left a folder for its unknown id: no record owns it, so it goes.
    const strays = await machines.knownMachineIds();
    expect(strays.length).toBeGreaterThan(0);
    expect((await machines.removeStrays([])).sort()).toEqual(strays.sort());
    expect(await machines.knownMachineIds()).toEqual([]);
  });
});
