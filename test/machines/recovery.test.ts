// Crash safety: kill -9 of the service while a machine runs. The machine keeps running (QEMU is
// detached), the restarted service adopts it (QMP and agent reconnect), commands still run, a QEMU
// no record owns is killed (even one whose folder is gone), and a delete afterwards leaves no QEMU
// process and no disk; the same for a machine restored from a boot snapshot, which also stops with
// its session and resumes it. (kill -9 in the middle of an operation: recovery-midway.test.ts.)
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import request from 'supertest';
import { listQemuProcesses } from '../../src/compute/qemu';
import { openDatabase } from '../../src/db/database';
import { checkContract } from '../support/contract';
import { freshDatabaseUrl, FreshDatabase } from '../support/database';
import { ensureTestImage, TEST_IMAGE_DIR } from '../support/images';
import { adminKey, cleanUp, execOf, notTemplate, retryWhileImageNotReady, serviceEnv, SSH_KEY, waitUntil } from '../support/service-recovery';
import { ServiceProcess, freePort } from '../support/service-process';

jest.setTimeout(900_000);

describe('kill -9 of the service with a running machine', () => {
  let fresh: FreshDatabase;
  const started: ServiceProcess[] = [];

  beforeAll(async () => {
    await ensureTestImage();
    fresh = await freshDatabaseUrl();
  });
  afterAll(() => cleanUp(fresh, started));

  it('adopts the machine after a restart and deletes it cleanly', async () => {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const env = serviceEnv(fresh, port);
    const api = () => request(url);
    const first = new ServiceProcess(env);
    started.push(first);
    await first.listening();
    const auth = await adminKey(url, 'recovery');
    const created = await retryWhileImageNotReady(() => api().post('/v1/instances').set(auth)
      .send({ profile: 'desktop', name: 'survivor', vcpu: 1, memory_mib: 768, disk_mib: 2048, ssh_public_key: SSH_KEY }));
    expect(created.status).toBe(200);
    const id = created.body.id as string;
    const qemuBefore = listQemuProcesses().filter((p) => p.machineId === id);
    expect(qemuBefore).toHaveLength(1);
    const stray = await retryWhileImageNotReady(() => api().post('/v1/instances').set(auth)
      .send({ profile: 'desktop', name: 'stray', vcpu: 1, memory_mib: 768, disk_mib: 2048, ssh_public_key: SSH_KEY }));
    expect(stray.status).toBe(200);
    const strayId = stray.body.id as string;

    first.killHard();
    await first.waitExit(10_000);
    expect(listQemuProcesses().filter((p) => p.machineId === id).map((p) => p.pid)).toEqual(qemuBefore.map((p) => p.pid));
    // A QEMU that no record owns and whose folder is gone (as a delete cut short can leave one):
    // the next start must kill it.
    const database = await openDatabase({ url: fresh.url, dataDir: fresh.dataDir });
    try {
      await database.prisma.instance.delete({ where: { id: strayId } });
    } finally {
      await database.close();
    }
    rmSync(join(fresh.dataDir, 'machines', strayId), { recursive: true, force: true });
    expect(listQemuProcesses().filter((p) => p.machineId === strayId)).toHaveLength(1);

    const second = new ServiceProcess(env);
    started.push(second);
    await second.listening();
    expect(listQemuProcesses().filter((p) => p.machineId === strayId)).toEqual([]);
    const after = await api().get('/v1/instances/survivor').set(auth).expect(checkContract).expect(200);
    expect(after.body.status).toBe('running');
    const ran = await api().post('/v1/instances/survivor/exec').set(auth).buffer(true).send({ argv: ['echo', 'adopted'] }).expect(checkContract).expect(200);
    const lines = ran.text.trim().split('\n').map((line) => JSON.parse(line));
    expect(lines.at(-1)).toMatchObject({ type: 'completed', exit_code: 0 });
    expect(Buffer.from(lines.find((l) => l.type === 'output').data_base64, 'base64').toString()).toBe('adopted\n');

    await api().delete('/v1/instances/survivor').set(auth).expect(checkContract).expect(200);
    expect(listQemuProcesses().filter((p) => p.machineId === id)).toEqual([]);
    expect(readdirSync(join(fresh.dataDir, 'machines')).filter(notTemplate)).toEqual([]);
    expect(readdirSync(join(fresh.dataDir, 'layers')).filter(notTemplate)).toEqual([]);
  });
});

describe('kill -9 of the service with a machine restored from a boot snapshot', () => {
  let fresh: FreshDatabase;
  const started: ServiceProcess[] = [];
  /** A configuration few other tests use, so its snapshot is made here (or found, made by this test's other run). */
  const SHAPE = { vcpu: 1, memory_mib: 736, disk_mib: 2560 };

  beforeAll(async () => {
    await ensureTestImage();
    fresh = await freshDatabaseUrl();
  });
  afterAll(() => cleanUp(fresh, started));

  /** A ready boot snapshot of SHAPE on the served image version (its folder's snapshot.json is written last). */
  const snapshotReady = () => {
    const served = (JSON.parse(readFileSync(join(TEST_IMAGE_DIR, 'latest.json'), 'utf8')) as Record<string, { version: string }>).minimal.version;
    const root = join(TEST_IMAGE_DIR, served, 'boot-snapshots');
    return existsSync(root) && readdirSync(root).some((key) => {
      try {
        const manifest = JSON.parse(readFileSync(join(root, key, 'snapshot.json'), 'utf8')) as { vcpu: number; memory_mib: number };
        return manifest.vcpu === SHAPE.vcpu && manifest.memory_mib === SHAPE.memory_mib;
      } catch {
        return false;
      }
    });
  };

  it('adopts the restored copy after a restart; it runs commands, keeps its identity, and stops with its session', async () => {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const env = serviceEnv(fresh, port, { KISTE_BOOT_SNAPSHOTS: 'on' });
    const api = () => request(url);
    const first = new ServiceProcess(env);
    started.push(first);
    await first.listening();
    const auth = await adminKey(url, 'restored');
    const create = (name: string) => retryWhileImageNotReady(() => api().post('/v1/instances').set(auth).send({ profile: 'desktop', name, ...SHAPE, ssh_public_key: SSH_KEY }));
    const startedFrom = async (id: string) => {
      const events = await api().get('/v1/events').query({ tail: 200 }).set(auth).expect(200);
      return events.body.data.find((e: { type: string; resource_id: string }) => e.type === 'instance.running' && e.resource_id === id)?.data.started_from;
    };

    // The first create of the configuration makes its snapshot in the background (or finds it made).
    expect((await create('maker')).status).toBe(200);
    await waitUntil('the boot snapshot of the configuration', snapshotReady, 600_000, 1000);
    const created = await create('restored');
    expect(created.status).toBe(200);
    const id = created.body.id as string;
    expect(await startedFrom(id)).toBe('snapshot');
    const machineId = (await execOf(api, auth, 'restored', ['cat', '/etc/machine-id']))!;
    const qemuBefore = listQemuProcesses().filter((p) => p.machineId === id).map((p) => p.pid);
    expect(qemuBefore).toHaveLength(1);

    first.killHard();
    await first.waitExit(10_000);
    const second = new ServiceProcess(env);
    started.push(second);
    await second.listening();
    expect((await api().get('/v1/instances/restored').set(auth).expect(checkContract).expect(200)).body.status).toBe('running');
    expect(listQemuProcesses().filter((p) => p.machineId === id).map((p) => p.pid)).toEqual(qemuBefore); // adopted, not rebooted
    expect(await execOf(api, auth, 'restored', ['hostname'])).toBe('restored\n');
    expect(await execOf(api, auth, 'restored', ['cat', '/etc/machine-id'])).toBe(machineId);

    // Its memory session works like any machine's: the process started before the stop is alive after the resume.
    expect(await execOf(api, auth, 'restored', ['sh', '-c', 'setsid sleep 100000 > /dev/null 2>&1 < /dev/null & echo $! > /tmp/sleeper; echo started'])).toBe('started\n');
    const settled = (status: string) => waitUntil(`the machine to be ${status}`, async () => {
      const body = (await api().get('/v1/instances/restored').set(auth).expect(200)).body;
      return body.status === status && body;
    }, 240_000, 500);
    expect([200, 202]).toContain((await api().post('/v1/instances/restored/stop').set(auth).send({ snapshot: true }).expect(checkContract)).status);
    expect(await settled('stopped')).toMatchObject({ session_saved: true });
    expect([200, 202]).toContain((await api().post('/v1/instances/restored/resume').set(auth).expect(checkContract)).status);
    await settled('running');
    expect(await execOf(api, auth, 'restored', ['sh', '-c', 'kill -0 "$(cat /tmp/sleeper)" && echo alive'])).toBe('alive\n');

    for (const name of ['restored', 'maker']) await api().delete(`/v1/instances/${name}`).set(auth).expect(checkContract).expect(200);
    second.signal('SIGTERM');
    await second.waitExit(30_000);
    expect(listQemuProcesses().filter((p) => p.machineDir?.startsWith(fresh.dataDir))).toEqual([]);
  });
});
