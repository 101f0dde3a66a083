// Crash safety, kill -9 of the service in the middle of an operation (a restart while the new QEMU
// boots, and after the old one is off; a create; a fork with memory while its source is paused; a
// stop with session once its save has begun): the next start finishes or rolls back the operation
// (a restart, a create and a fork always finish: they end running, as the caller asked), so the
// instance is running with commands working, or stopped with no QEMU, and holds no operation; and a
// machine adopted after a restart still stops with its session and resumes it.
// On one database (jest.config.js): its subject is the host side (QEMU processes, machine folders,
// adoption); the rows it reads back go through the same store as everywhere else, and recovery.test.ts
// proves the restart path on both.
import { existsSync, readdirSync, watch } from 'node:fs';
import { join } from 'node:path';
import request from 'supertest';
import { listQemuProcesses } from '../../src/compute/qemu';
import { checkContract } from '../support/contract';
import { besideTheService, freshDatabaseUrl, FreshDatabase } from '../support/database';
import { ensureTestImage } from '../support/images';
import { adminKey, cleanUp, notTemplate, retryWhileImageNotReady, serviceEnv, SSH_KEY, waitUntil } from '../support/service-recovery';
import { ServiceProcess, freePort } from '../support/service-process';

jest.setTimeout(900_000);

describe('kill -9 of the service in the middle of an operation', () => {
  let fresh: FreshDatabase;
  const started: ServiceProcess[] = [];
  let env: Record<string, string>;
  let url: string;
  const api = () => request(url);

  beforeAll(async () => {
    await ensureTestImage();
    fresh = await freshDatabaseUrl();
    const port = await freePort();
    url = `http://127.0.0.1:${port}`;
    env = serviceEnv(fresh, port);
  });
  afterAll(() => cleanUp(fresh, started));

  async function startService(): Promise<ServiceProcess> {
    const service = new ServiceProcess(env);
    started.push(service);
    await service.listening(); // reconciliation runs before the service listens
    return service;
  }

  /** The instance row as the database holds it (read beside the service, or while none runs). */
  const row = (id: string) => besideTheService(fresh, (database) => database.prisma.instance.findUnique({ where: { id } }));
  /** The instance row of a name, once it exists. */
  const rowNamed = (name: string) => besideTheService(fresh, (database) => database.prisma.instance.findFirst({ where: { name } }));

  const qemuOf = (id: string) => listQemuProcesses().filter((p) => p.machineId === id).map((p) => p.pid);
  const ours = () => listQemuProcesses().filter((p) => p.machineDir?.startsWith(fresh.dataDir) && notTemplate(p.machineId));

  /** One exec over HTTP, bounded: the stdout of a clean exit, or null (machine not answering yet). */
  async function execOnce(name: string, argv: string[]): Promise<string | null> {
    try {
      const res = await api().post(`/v1/instances/${name}/exec`).set(auth).buffer(true).timeout(30_000).send({ argv, timeout_ms: 20_000 });
      if (res.status !== 200) return null;
      const lines = res.text.trim().split('\n').map((line) => JSON.parse(line));
      if (lines.at(-1)?.type !== 'completed' || lines.at(-1).exit_code !== 0) return null;
      return lines.filter((l) => l.type === 'output' && l.stream === 'stdout').map((l) => Buffer.from(l.data_base64, 'base64').toString()).join('');
    } catch {
      return null;
    }
  }


  /** The row after a restart of the service: no operation, and a state the host agrees with. */
  async function expectConsistent(name: string, id: string, execWithinMs: number): Promise<'running' | 'stopped'> {
    const after = await api().get(`/v1/instances/${name}`).set(auth).expect(checkContract).expect(200);
    const held = (await row(id))!;
    expect(held.operation).toBeNull();
    // a state outside these says why (the row's error and the service's log), not only which
    if (!['running', 'stopped'].includes(after.body.status)) {
      throw new Error(`${name} ended ${after.body.status}: ${held.errorMessage}\n${service.output.slice(-6000)}`);
    }
    if (after.body.status === 'running') {
      expect(after.body.desired_state).toBe('running');
      expect(qemuOf(id)).toHaveLength(1);
      const hostname = await waitUntil('exec to work in the machine the row calls running', () => execOnce(name, ['hostname']), execWithinMs, 1000);
      expect(hostname.trim()).toBe(name);
      return 'running';
    }
    expect(after.body.desired_state).toBe('stopped');
    expect(qemuOf(id)).toEqual([]);
    expect(existsSync(join(fresh.dataDir, 'machines', id, 'memory.state'))).toBe(after.body.session_saved);
    return 'stopped';
  }

  /** kill -9 of the service; the row must still hold `operation` (the kill really cut it short). */
  async function killMidway(id: string, operation: string): Promise<void> {
    service.killHard();
    await service.waitExit(10_000);
    expect((await row(id))!.operation).toBe(operation);
  }

  let service: ServiceProcess;
  let auth: Record<string, string>;
  let id: string;

  it('adopts the new machine when a restart is cut short while it boots', async () => {
    service = await startService();
    auth = await adminKey(url, 'midway');
    const created = await retryWhileImageNotReady(() => api().post('/v1/instances').set(auth)
      .send({ profile: 'desktop', name: 'midway', vcpu: 1, memory_mib: 768, disk_mib: 2048, ssh_public_key: SSH_KEY }));
    expect(created.status).toBe(200);
    id = created.body.id as string;
    const [firstPid] = qemuOf(id);
    expect(firstPid).toBeDefined();

    // The restart powers the machine off, then boots a new QEMU: kill the service once that one exists.
    const restart = api().post('/v1/instances/midway/restart').set(auth).then((res) => res, (error: Error) => error);
    const [bootingPid] = await waitUntil('the restart to start a new QEMU', () => {
      const pids = qemuOf(id);
      return pids.length === 1 && pids[0] !== firstPid && pids;
    }, 120_000, 50);
    expect((await api().get('/v1/instances/midway').set(auth).expect(200)).body.status).toBe('starting');
    await killMidway(id, 'restart');
    await restart;
    service = await startService();
    expect(await expectConsistent('midway', id, 240_000)).toBe('running'); // the guest finishes booting on its own
    expect(qemuOf(id)).toEqual([bootingPid]);
    expect(ours()).toHaveLength(1); // no orphan: the old QEMU is gone
  });

  it('finishes a restart cut short after the power-off: the machine ends running, as asked', async () => {
    expect(id).toBeDefined();
    const [oldPid] = qemuOf(id);
    expect(oldPid).toBeDefined();
    const restart = api().post('/v1/instances/midway/restart').set(auth).then((res) => res, (error: Error) => error);
    await waitUntil('the restart to be claimed', async () => (await row(id))?.operation === 'restart', 60_000, 20);
    // The service dies after the old machine is off and before a new one runs (killing the old
    // QEMU here stands in for the power-off having finished).
    await killMidway(id, 'restart');
    for (const pid of qemuOf(id)) process.kill(pid, 'SIGKILL');
    await waitUntil('the old QEMU to be gone', () => qemuOf(id).length === 0, 10_000, 50);
    await restart;
    service = await startService();
    await waitUntil('the interrupted restart to finish', async () => (await row(id))?.operation === null, 240_000, 500);
    expect(await expectConsistent('midway', id, 240_000)).toBe('running');
    expect(qemuOf(id)).toHaveLength(1);
    expect(qemuOf(id)[0]).not.toBe(oldPid);
  });

  it('finishes a create cut short: the machine is made again and runs, as asked', async () => {
    const create = api().post('/v1/instances').set(auth)
      .send({ profile: 'desktop', name: 'halfway', vcpu: 1, memory_mib: 768, disk_mib: 2048, ssh_public_key: SSH_KEY })
      .then((res) => res, (error: Error) => error);
    const halfway = await waitUntil('the create to be recorded', () => rowNamed('halfway'), 60_000, 20);
    await killMidway(halfway.id, 'create');
    for (const pid of qemuOf(halfway.id)) process.kill(pid, 'SIGKILL'); // whatever the create had started goes too
    await create;
    service = await startService();
    await waitUntil('the interrupted create to finish', async () => (await row(halfway.id))?.operation === null, 240_000, 500);
    expect(await expectConsistent('halfway', halfway.id, 240_000)).toBe('running');
    expect((await row(halfway.id))!.errorMessage).toBeNull();
    await api().delete('/v1/instances/halfway').set(auth).expect(checkContract).expect(200);
    expect(qemuOf(halfway.id)).toEqual([]);
  });

  /** Waits for the operation a lifecycle call started (200 or 202) to end; returns the answer then. */
  async function settle(answer: request.Response) {
    expect([200, 202]).toContain(answer.status);
    await waitUntil('the operation to finish', async () => (await row(id))?.operation === null, 240_000, 500);
    return (await api().get('/v1/instances/midway').set(auth).expect(checkContract).expect(200)).body;
  }

  it('stops an adopted machine with its session and resumes it', async () => {
    expect(id).toBeDefined();
    await waitUntil('the sleeper to start', () => execOnce('midway', ['sh', '-c', 'setsid sleep 100000 > /dev/null 2>&1 < /dev/null & echo $! > /tmp/sleeper; echo started']), 60_000, 1000);
    const stopped = await settle(await api().post('/v1/instances/midway/stop').set(auth).send({ snapshot: true }).expect(checkContract));
    expect(stopped).toMatchObject({ status: 'stopped', session_saved: true });
    expect(qemuOf(id)).toEqual([]);
    const resumed = await settle(await retryWhileImageNotReady(() => api().post('/v1/instances/midway/resume').set(auth).expect(checkContract)));
    const current = await row(id);
    expect({ status: resumed.status, error: current?.errorMessage ?? null }).toEqual({ status: 'running', error: null });
    expect(await execOnce('midway', ['sh', '-c', 'kill -0 "$(cat /tmp/sleeper)" && echo alive'])).toBe('alive\n'); // resumed, not booted
  });

  it('finishes a fork with memory cut short while its source is paused: the source runs on, the copy is made again', async () => {
    expect(id).toBeDefined();
    expect(await execOnce('midway', ['sh', '-c', 'setsid sleep 300000 > /dev/null 2>&1 < /dev/null & echo $! > /tmp/sleeper3; echo started'])).toBe('started\n');
    const fork = api().post('/v1/instances/midway/fork').set(auth).send({ name: 'twin', memory: true }).then((res) => res, (error: Error) => error);
    const twin = await waitUntil('the fork to be recorded', () => rowNamed('twin'), 60_000, 20);
    // The source stands paused while its device state goes to the copy's memory.state.part: kill the service then.
    const part = join(fresh.dataDir, 'machines', twin.id, 'memory.state.part');
    await waitUntil("the fork to save its source's state", () => existsSync(part), 120_000, 2);
    await killMidway(twin.id, 'fork');
    await fork;
    expect(qemuOf(id)).toHaveLength(1); // the source outlives the service
    service = await startService();
    await waitUntil('the interrupted fork to finish', async () => (await row(twin.id))?.operation === null, 240_000, 500);
    expect(await expectConsistent('twin', twin.id, 240_000)).toBe('running');
    expect(await expectConsistent('midway', id, 60_000)).toBe('running');
    // The source ran on where it was (not booted again), and the copy continues its memory.
    expect(await execOnce('midway', ['sh', '-c', 'kill -0 "$(cat /tmp/sleeper3)" && echo alive'])).toBe('alive\n');
    expect(await execOnce('twin', ['sh', '-c', 'kill -0 "$(cat /tmp/sleeper3)" && echo alive'])).toBe('alive\n');
    expect((await row(twin.id))!.operationInput).toBeNull(); // the fork's input went with the operation
    await api().delete('/v1/instances/twin').set(auth).expect(checkContract).expect(200);
    expect(qemuOf(twin.id)).toEqual([]);
  });

  it('finishes or rolls back a stop with session cut short during the save', async () => {
    expect(id).toBeDefined();
    if ((await row(id))!.status !== 'running') {
      // an earlier step left it stopped or in error: start it afresh, so this step stands on its own
      const restarted = await settle(await retryWhileImageNotReady(() => api().post('/v1/instances/midway/restart').set(auth).expect(checkContract)));
      expect({ status: restarted.status, error: (await row(id))?.errorMessage ?? null }).toEqual({ status: 'running', error: null });
      await waitUntil('exec to work after the restart', () => execOnce('midway', ['echo', 'up']), 240_000, 1000);
    }
    expect(await execOnce('midway', ['sh', '-c', 'setsid sleep 200000 > /dev/null 2>&1 < /dev/null & echo $! > /tmp/sleeper2; echo started'])).toBe('started\n');
    // The save pauses the guest and migrates its device state to memory.state.part (then renamed),
    // and only then quits QEMU: kill the service as soon as the migration has begun.
    const machineDir = join(fresh.dataDir, 'machines', id);
    const migrating = new Promise<void>((resolve) => {
      const watcher = watch(machineDir, (_event, file) => {
        if (file === 'memory.state.part' || file === 'memory.state') {
          watcher.close();
          resolve();
        }
      });
    });
    const stop = api().post('/v1/instances/midway/stop').set(auth).send({ snapshot: true }).then((res) => res, (error: Error) => error);
    await migrating;
    await killMidway(id, 'stop');
    await stop;
    expect(qemuOf(id)).toHaveLength(1); // QEMU outlives the service, paused by the save
    service = await startService();
    // Running means the guest answers (it was fully up before the stop); stopped means no QEMU is left.
    if ((await expectConsistent('midway', id, 60_000)) === 'stopped') {
      const sessionKept = (await row(id))!.sessionSaved;
      await settle(await retryWhileImageNotReady(() => api().post('/v1/instances/midway/resume').set(auth).expect(checkContract)));
      expect(await expectConsistent('midway', id, 240_000)).toBe('running');
      // a kept session is a usable one: the guest continues where it was
      if (sessionKept) expect(await execOnce('midway', ['sh', '-c', 'kill -0 "$(cat /tmp/sleeper2)" && echo alive'])).toBe('alive\n');
    }
    expect(ours()).toHaveLength(1);

    await api().delete('/v1/instances/midway').set(auth).expect(checkContract).expect(200);
    expect(ours()).toEqual([]);
    expect(readdirSync(join(fresh.dataDir, 'machines')).filter(notTemplate)).toEqual([]);
    service.signal('SIGTERM');
    await service.waitExit(30_000);
  });
});
