// One box, the default layout (KISTE_COMPUTE=worker): the service runs its machines in a local
// kiste-worker it starts and supervises. A real guest is created, answers exec and keeps what it
// wrote; kill -9 of the worker leaves the API up, which answers 503 N01 with Retry-After 30 (and
// GET /v1/status says compute_unreachable) until the supervisor has started the worker again; the
// worker adopts the machine, which ran on (the file it wrote is still there, its boot id unchanged);
// a restart cut short by kill -9 of the worker ends running, as the caller asked; and SIGTERM of
// the service ends the worker too while the machine runs on for the next start.
// On one database (jest.config.js): its subject is the process split, not the store.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import request from 'supertest';
import { listQemuProcesses } from '../../src/compute/qemu';
import { checkContract } from '../support/contract';
import { freshDatabaseUrl, FreshDatabase } from '../support/database';
import { ensureTestImage } from '../support/images';
import { adminKey, cleanUp, execOf, notTemplate, retryWhileImageNotReady, serviceEnv, SSH_KEY, waitUntil } from '../support/service-recovery';
import { ServiceProcess, freePort } from '../support/service-process';

jest.setTimeout(900_000);

describe('machines in the local worker', () => {
  let fresh: FreshDatabase;
  const started: ServiceProcess[] = [];
  let env: Record<string, string>;
  let url: string;
  let auth: Record<string, string>;
  let service: ServiceProcess;
  const api = () => request(url);

  beforeAll(async () => {
    await ensureTestImage();
    fresh = await freshDatabaseUrl();
    const port = await freePort();
    url = `http://127.0.0.1:${port}`;
    env = serviceEnv(fresh, port);
    service = await startService();
    auth = await adminKey(url, 'local worker');
  });
  afterAll(() => cleanUp(fresh, started));

  async function startService(): Promise<ServiceProcess> {
    const next = new ServiceProcess(env);
    started.push(next);
    await next.listening();
    return next;
  }

  const workerPid = () => Number(readFileSync(join(fresh.dataDir, 'worker.pid'), 'utf8').trim());
  const ours = () => listQemuProcesses().filter((p) => p.machineDir?.startsWith(fresh.dataDir) && notTemplate(p.machineId));
  const exec = (name: string, argv: string[]) => execOf(api, auth, name, argv);
  /** An exec's stdout once the machine answers again (N01 and a lost agent link meanwhile are retried). */
  const execWhenBack = (name: string, argv: string[]) =>
    waitUntil(`${name} to answer exec`, async () => {
      const res = await api().post(`/v1/instances/${name}/exec`).set(auth).buffer(true).timeout(60_000).send({ argv }).catch(() => null);
      if (res?.status !== 200) return null;
      const lines = res.text.trim().split('\n').map((line) => JSON.parse(line));
      if (lines.at(-1)?.type !== 'completed' || lines.at(-1).exit_code !== 0) return null;
      return lines.filter((l) => l.type === 'output' && l.stream === 'stdout').map((l) => Buffer.from(l.data_base64, 'base64').toString()).join('') || null;
    }, 180_000, 500);

  it('runs a machine in the worker, which a kill -9 of the worker leaves running and the next worker adopts', async () => {
    expect(service.output).toContain('kiste-worker is up');
    const created = await retryWhileImageNotReady(() =>
      api().post('/v1/instances').set(auth).send({ profile: 'desktop', name: 'split', vcpu: 1, memory_mib: 512, disk_mib: 2048, ssh_public_key: SSH_KEY }));
    expect(created.status).toBe(200);
    expect(created.body.status).toBe('running');
    // The machine's QEMU is not a child of the service: it belongs to the worker's jail.
    expect(ours()).toHaveLength(1);
    await exec('split', ['sh', '-c', 'echo kept > /tmp/marker']);
    const bootId = (await exec('split', ['cat', '/proc/sys/kernel/random/boot_id']))!.trim();
    const qemuBefore = ours()[0]!.pid;

    const first = workerPid();
    process.kill(first, 'SIGKILL');
    // Until the supervisor has a worker up again: N01 with Retry-After, and the status says why.
    const refused = await waitUntil('a call that needs the worker to answer N01', async () => {
      const res = await api().post('/v1/instances/split/exec').set(auth).buffer(true).send({ argv: ['true'] });
      return res.status === 503 ? res : null;
    }, 10_000, 20);
    checkContract(refused);
    expect(refused.body.error.code).toBe('N01');
    expect(refused.headers['retry-after']).toBe('30');

    expect(await execWhenBack('split', ['cat', '/tmp/marker'])).toBe('kept\n');
    expect(workerPid()).not.toBe(first);
    expect((await exec('split', ['cat', '/proc/sys/kernel/random/boot_id']))!.trim()).toBe(bootId);
    expect(ours().map((p) => p.pid)).toEqual([qemuBefore]);
    expect(service.running).toBe(true);
    const status = await api().get('/v1/status').set(auth).expect(checkContract).expect(200);
    expect(status.body.machines.available).toBe(true);
  });

  it('finishes a restart that a kill -9 of the worker cut short: the machine ends running', async () => {
    const bootId = (await exec('split', ['cat', '/proc/sys/kernel/random/boot_id']))!.trim();
    const oldQemu = ours().map((p) => p.pid);
    const restart = api().post('/v1/instances/split/restart').set(auth).send({}).then((res) => res);
    // Cut short once the old QEMU is gone and the new one boots.
    await waitUntil('the new QEMU to boot', () => {
      const now = ours().map((p) => p.pid);
      return (now.length === 1 && now[0] !== oldQemu[0]) || null;
    }, 120_000, 50);
    process.kill(workerPid(), 'SIGKILL');
    const answered = await restart;
    expect([200, 202]).toContain(answered.status);
    const running = await waitUntil('the restart to end running', async () => {
      const res = await api().get('/v1/instances/split').set(auth).expect(checkContract);
      if (res.body.status === 'error') throw new Error(`the restart ended in error: ${JSON.stringify(res.body)}\n${service.output.slice(-6000)}`);
      return res.body.status === 'running' ? res : null;
    }, 300_000, 500);
    expect(running.body.desired_state).toBe('running');
    const newBoot = (await execWhenBack('split', ['cat', '/proc/sys/kernel/random/boot_id'])).trim();
    expect(newBoot).not.toBe(bootId); // restarted, as asked
    expect(ours()).toHaveLength(1);
  });

  it('ends its worker on SIGTERM and leaves the machine running for the next start', async () => {
    await exec('split', ['sh', '-c', 'echo kept > /tmp/marker']); // the restart above began a new boot
    const qemu = ours().map((p) => p.pid);
    const worker = workerPid();
    service.signal('SIGTERM');
    expect((await service.waitExit(30_000)).code).toBe(0);
    await waitUntil('the worker to end with the service', () => {
      try {
        process.kill(worker, 0);
        return null;
      } catch {
        return true;
      }
    }, 20_000);
    expect(ours().map((p) => p.pid)).toEqual(qemu);
    service = await startService();
    expect(await execWhenBack('split', ['cat', '/tmp/marker'])).toBe('kept\n');
    await api().delete('/v1/instances/split').set(auth).expect(checkContract);
    await waitUntil('the machine to be gone', async () => (await api().get('/v1/instances/split').set(auth)).status === 404 || null, 120_000, 500);
    await waitUntil('its QEMU to end', () => ours().length === 0 || null, 30_000);
  });
});
