// Several hosts on one box (issue 22): two control-plane replicas (real service processes,
// KISTE_COMPUTE=workers) on one PostgreSQL, and two kiste-workers, each in a network namespace of its
// own behind a veth pair with its own data folder, reached over TLS only. The operator registers each
// worker with `npm run admin -- worker-add` and starts it with its join token; the control plane pins
// its certificate on first contact. Real guests created through the API are placed one per worker
// (each offers room for one), answer exec through either replica, and a third create answers L13.
// Cutting one worker's link (`ip link set down`) makes its machine's calls answer 503 N01 while the
// other worker's machine answers on; when the link is back the machine answers again, the same boot.
// kill -9 of a worker in the middle of a restart and of a create: N01 meanwhile, and once the worker
// runs again each operation ends as asked, with one QEMU per machine. kill -9 of a control-plane
// replica in the middle of a stop, a resume, a delete and a fork with memory (its source paused, on
// a worker started again with room for two): the other replica finishes each as asked.
// A worker that stops answering
// (SIGSTOP) is declared lost: its machine errs with an event and an alert, and is deleted as a record;
// when the process runs on (SIGCONT) under its old epoch, it is fenced and adopted anew and ends the
// deleted machine's QEMU.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import request from 'supertest';
import { listQemuProcesses } from '../../src/compute/qemu';
import { checkContract } from '../support/contract';
import { freshDatabaseUrl, type FreshDatabase } from '../support/database';
import { ensureTestImage, TEST_IMAGE_DIR } from '../support/images';
import { privateNetwork, type PrivateNetwork } from '../support/netns';
import { adminKey, cleanUp, execOf, notTemplate, retryWhileImageNotReady, serviceEnv, SSH_KEY, waitUntil } from '../support/service-recovery';
import { freePort, ServiceProcess } from '../support/service-process';

jest.setTimeout(900_000);

const ROOT = join(__dirname, '..', '..');
const WORKER_PORT = 7443;
const MACHINE = { profile: 'desktop', vcpu: 1, memory_mib: 512, disk_mib: 2048, ssh_public_key: SSH_KEY };

/** A worker host: its namespace, data folder, join token and the process running now. */
interface Host {
  name: string;
  network: PrivateNetwork;
  dir: string;
  token: string;
  process: ServiceProcess | null;
}

describe('workers on other hosts', () => {
  let fresh: FreshDatabase;
  const hosts: Host[] = [];
  const started: ServiceProcess[] = [];
  let urls: string[];
  let auth: Record<string, string>;
  let env: Record<string, string>;
  const api = (replica = 0) => request(urls[replica]!);

  /** `npm run admin -- …` against the control plane's database: its stdout (a refusal throws with its stderr). */
  const admin = (...args: string[]) =>
    execFileSync(process.execPath, ['--import', 'tsx', 'scripts/admin.ts', ...args], {
      cwd: ROOT, env: { ...process.env, ...env }, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'],
    });

  const replicaEnvs: Record<string, string>[] = [];
  const replicas: ServiceProcess[] = [];
  async function startReplica(index: number): Promise<void> {
    const replica = new ServiceProcess(replicaEnvs[index]!);
    replicas[index] = replica;
    started.push(replica);
    await replica.listening();
  }

  async function startWorker(host: Host, overrides: Record<string, string> = {}): Promise<void> {
    host.process = new ServiceProcess({
      KISTE_DATA_DIR: host.dir, KISTE_IMAGE_DIR: TEST_IMAGE_DIR, KISTE_ACCELERATOR: 'tcg', KISTE_BOOT_SNAPSHOTS: 'off',
      KISTE_WORKER_LISTEN: `${host.network.address}:${WORKER_PORT}`, KISTE_WORKER_JOIN_TOKEN: host.token,
      // Room for one 512 MiB machine, not two.
      KISTE_WORKER_VCPUS: '2', KISTE_WORKER_MEMORY_MIB: '800', KISTE_WORKER_DISK_MIB: '20000',
      ...overrides,
    }, { entry: 'src/worker/main.ts', ready: 'kiste-worker is listening with TLS', netns: host.network.namespace });
    started.push(host.process);
    await host.process.listening();
  }

  /** kill -9 of the worker process alone (its machines' QEMUs are not its children to take along). */
  function killWorker(host: Host): void {
    host.process!.child.kill('SIGKILL');
  }

  const qemusOn = (host: Host) => listQemuProcesses().filter((p) => p.machineDir?.startsWith(host.dir) && notTemplate(p.machineId));
  const exec = (name: string, argv: string[], replica = 0) => execOf(() => api(replica), auth, name, argv);
  /** An exec's stdout once the machine answers again (N01 and lost links meanwhile are retried). */
  const execWhenBack = (name: string, argv: string[]) => waitUntil(`${name} to answer exec`, () => exec(name, argv).catch(() => null), 180_000, 1000);
  const bootOf = async (name: string) => (await exec(name, ['cat', '/proc/sys/kernel/random/boot_id']))!.trim();
  const workerOf = (name: string) => hosts.find((host) => new RegExp(`${name}\\s+admin@example\\.com\\s+\\S+\\s+${host.name}\\b`).test(admin('machines')));

  beforeAll(async () => {
    await ensureTestImage();
    fresh = await freshDatabaseUrl();
    const ports = [await freePort(), await freePort()];
    urls = ports.map((port) => `http://127.0.0.1:${port}`);
    // Replicas share the installation secret (the workers' signing secrets are sealed with it).
    env = serviceEnv(fresh, ports[0]!, { KISTE_COMPUTE: 'workers', KISTE_SECRET_KEY: randomBytes(32).toString('base64'), KISTE_IMAGE_PROFILE: 'minimal' });
    for (const [index, name] of ['far', 'wide'].entries()) {
      const network = privateNetwork(`w${index}`, 31 + index);
      const token = admin('worker-add', '--name', name, '--address', `https://${network.address}:${WORKER_PORT}`).trim();
      hosts.push({ name, network, dir: mkdtempSync(join(tmpdir(), `kiste-${name}-worker-`)), token, process: null });
    }
    await Promise.all(hosts.map((host) => startWorker(host)));
    for (const [index, port] of ports.entries()) {
      // The second replica: its own process and data folder, the same database and secret.
      replicaEnvs.push(index === 0 ? env : { ...env, KISTE_LISTEN: `127.0.0.1:${port}`, KISTE_DATA_DIR: mkdtempSync(join(fresh.dataDir, 'replica-')) });
      await startReplica(index);
    }
    auth = await adminKey(urls[0]!, 'several hosts');
  });
  afterAll(async () => {
    // What each process said, for a failure's reader.
    for (const [index, process] of started.entries()) writeFileSync(join(tmpdir(), `kiste-several-hosts-${index}.log`), process.output);
    await cleanUp(fresh, started);
    for (const host of hosts) {
      for (const qemu of listQemuProcesses().filter((p) => p.machineDir?.startsWith(host.dir))) process.kill(qemu.pid, 'SIGKILL');
      host.network.close();
      rmSync(host.dir, { recursive: true, force: true });
    }
  });

  it('registers workers with a join token printed once, and refuses a name taken or an address that is not https', () => {
    expect(hosts.map((host) => host.token)).toEqual([expect.stringMatching(/^kwj_[A-Za-z0-9_-]{43}$/), expect.stringMatching(/^kwj_[A-Za-z0-9_-]{43}$/)]);
    expect(() => admin('worker-add', '--name', 'far', '--address', 'https://192.0.2.1:1')).toThrow(/registered already/);
    expect(() => admin('worker-add', '--name', 'plain', '--address', 'http://192.0.2.1:1')).toThrow(/https:\/\/host:port/);
  });

  it('pins each worker on first contact and places one machine on each, then answers L13', async () => {
    await waitUntil('both workers to answer', () => /far .* yes .*\n.*wide .* yes /s.test(admin('workers')), 60_000, 1000);
    expect(admin('workers')).toMatch(/far\s+https:\/\/[\d.]+:7443\s+active\s+yes\s+2\/800\/20000\s+0/);

    for (const name of ['one', 'two']) {
      const created = await retryWhileImageNotReady(() => api().post('/v1/instances').set(auth).send({ ...MACHINE, name }));
      expect({ status: created.status, body: created.body }).toMatchObject({ status: 200, body: { status: 'running' } });
    }
    // Least loaded first: one machine on each worker, each QEMU in its own worker's data folder.
    expect(hosts.map((host) => qemusOn(host).length)).toEqual([1, 1]);
    expect(listQemuProcesses().filter((p) => p.machineDir?.startsWith(fresh.dataDir))).toHaveLength(0);
    expect(new Set([workerOf('one')?.name, workerOf('two')?.name])).toEqual(new Set(['far', 'wide']));

    const full = await api().post('/v1/instances').set(auth).send({ ...MACHINE, name: 'three' });
    checkContract(full);
    expect({ status: full.status, code: full.body.error?.code, retryAfter: full.headers['retry-after'] }).toEqual({ status: 503, code: 'L13', retryAfter: '30' });
    expect((await api().get('/v1/instances/three').set(auth)).status).toBe(404); // no row left behind
  });

  it('reaches every machine from either replica', async () => {
    for (const name of ['one', 'two']) {
      expect(await exec(name, ['sh', '-c', `echo ${name} > /tmp/marker && cat /tmp/marker`], 1)).toBe(`${name}\n`);
      expect(await exec(name, ['cat', '/tmp/marker'], 0)).toBe(`${name}\n`);
    }
  });

  it('answers N01 for the machine of a worker whose link is down, serves the other, and finds the machine unchanged when the link is back', async () => {
    const far = hosts.find((host) => host.name === 'far')!;
    const [cut, other] = workerOf('one') === far ? ['one', 'two'] : ['two', 'one'];
    const bootId = await bootOf(cut);
    execFileSync('ip', ['link', 'set', far.network.hostLink, 'down']);
    try {
      const refused = await waitUntil('a call for the cut-off worker\'s machine to answer N01', async () => {
        const res = await api(1).post(`/v1/instances/${cut}/exec`).set(auth).buffer(true).timeout(30_000).send({ argv: ['true'] }).catch(() => null);
        return res?.status === 503 ? res : null;
      }, 90_000, 1000);
      checkContract(refused);
      expect({ code: refused.body.error.code, retryAfter: refused.headers['retry-after'] }).toEqual({ code: 'N01', retryAfter: '30' });
      expect(await exec(other, ['cat', '/tmp/marker'])).toBe(`${other}\n`); // the other host is not affected
      await waitUntil('the workers list to say far does not answer', () => /far .* no /.test(admin('workers')), 60_000, 1000);
    } finally {
      execFileSync('ip', ['link', 'set', far.network.hostLink, 'up']);
    }
    expect(await execWhenBack(cut, ['cat', '/tmp/marker', '/proc/sys/kernel/random/boot_id'])).toBe(`${cut}\n${bootId}\n`);
    expect(qemusOn(far)).toHaveLength(1); // no second copy
  });

  it('finishes a stop, a resume and a delete that a kill -9 of their control-plane replica cut short: the other replica takes each over', async () => {
    const status = async (name: string) => (await api(1).get(`/v1/instances/${name}`).set(auth)).body as { status?: string; session_saved?: boolean };
    /** Asks replica 0 for the operation, kills it with -9 once replica 1 sees the operation under way (or over: it may be quick), and starts it again. */
    const cutShort = async (name: string, ask: () => Promise<unknown>, underWay: string, over: string | undefined) => {
      const answered = ask().catch(() => null);
      await waitUntil(`${name} to be ${underWay}`, async () => [underWay, over].includes((await status(name)).status) || null, 60_000, 20);
      replicas[0]!.child.kill('SIGKILL');
      await answered;
      await startReplica(0);
    };
    const bootId = await bootOf('one');
    await exec('one', ['sh', '-c', '(while true; do sleep 1; done) & echo $! > /tmp/sleeper']);
    const sleeper = (await exec('one', ['cat', '/tmp/sleeper']))!.trim();

    await cutShort('one', () => api(0).post('/v1/instances/one/stop').set(auth).send({ snapshot: true }), 'stopping', 'stopped');
    const stopped = await waitUntil('the stop to end', async () => ((await status('one')).status === 'stopped' ? status('one') : null), 180_000, 500);
    expect(stopped.session_saved).toBe(true);

    await cutShort('one', () => api(0).post('/v1/instances/one/resume').set(auth).send({}), 'starting', 'running');
    await waitUntil('the resume to end running', async () => {
      const now = await status('one');
      if (now.status === 'error') throw new Error(`the resume ended in error: ${JSON.stringify(now)}`);
      return now.status === 'running' || null;
    }, 180_000, 500);
    // Resumed where it was: the same boot, its processes running on.
    expect(await execWhenBack('one', ['sh', '-c', `cat /proc/sys/kernel/random/boot_id; kill -0 ${sleeper} && echo alive`])).toBe(`${bootId}\nalive\n`);

    const host = workerOf('two')!;
    await cutShort('two', () => api(0).delete('/v1/instances/two').set(auth), 'deleting', undefined);
    await waitUntil('the delete to end', async () => (await api(1).get('/v1/instances/two').set(auth)).status === 404 || null, 120_000, 500);
    await waitUntil('its QEMU to be gone', () => qemusOn(host).length === 0 || null, 30_000, 200);
  });

  it('finishes a fork with memory that a kill -9 of its control-plane replica cut short: the copy runs on from its source\'s memory, on its source\'s worker', async () => {
    const host = workerOf('one')!;
    // Room for the copy beside its source (a fork with memory stays on its source's worker): the
    // worker started again with a larger offer; its machine runs on and is adopted again.
    killWorker(host);
    await startWorker(host, { KISTE_WORKER_MEMORY_MIB: '1400' });
    await waitUntil('the roomier worker to be adopted', () => new RegExp(`${host.name}\\s+\\S+\\s+active\\s+yes\\s+2/1400/`).test(admin('workers')) || null, 90_000, 1000);
    const sleeper = (await execWhenBack('one', ['sh', '-c', 'setsid sleep 300000 > /dev/null 2>&1 < /dev/null & echo $!'])).trim();

    const fork = api(0).post('/v1/instances/one/fork').set(auth).send({ name: 'copy', memory: true }).then((res) => res, (error: Error) => error);
    const copyId = await waitUntil('the fork to be recorded', async () => {
      const res = await api(1).get('/v1/instances/copy').set(auth);
      return res.status === 200 ? (res.body.id as string) : null;
    }, 60_000, 20);
    // The source stands paused while its device state goes to the copy's memory.state.part on the worker: kill the replica then.
    await waitUntil("the fork to save its source's state", () => existsSync(join(host.dir, 'machines', copyId, 'memory.state.part')) || null, 120_000, 2);
    replicas[0]!.child.kill('SIGKILL');
    await fork;
    await startReplica(0);
    await waitUntil('the fork to end running', async () => {
      const now = (await api(1).get('/v1/instances/copy').set(auth).expect(checkContract).expect(200)).body as { status: string };
      if (now.status === 'error') throw new Error(`the fork ended in error: ${JSON.stringify(now)}`);
      return now.status === 'running' || null;
    }, 300_000, 500);
    // The copy continues its source's memory (the process started before the fork runs in both), and the source ran on.
    expect(await execWhenBack('copy', ['sh', '-c', `kill -0 ${sleeper} && cat /tmp/marker`])).toBe('one\n');
    expect(await exec('one', ['sh', '-c', `kill -0 ${sleeper} && echo alive`])).toBe('alive\n');
    expect(workerOf('copy')).toBe(host);
    expect(qemusOn(host)).toHaveLength(2);
    await api().delete('/v1/instances/copy').set(auth).expect(checkContract);
    await waitUntil('the copy to be gone', async () => (await api().get('/v1/instances/copy').set(auth)).status === 404 || null, 120_000, 500);
    await waitUntil('its QEMU to be gone', () => qemusOn(host).length === 1 || null, 30_000, 200);
  });

  it('finishes a restart that a kill -9 of its worker cut short: the machine ends running, booted anew', async () => {
    const host = workerOf('one')!;
    const bootId = await bootOf('one');
    const [oldQemu] = qemusOn(host).map((p) => p.pid);
    const restart = api().post('/v1/instances/one/restart').set(auth).send({}).then((res) => res);
    await waitUntil('the new QEMU to boot', () => {
      const now = qemusOn(host); // read once: the list changes between two reads while the old QEMU ends
      return (now.length === 1 && now[0]!.pid !== oldQemu) || null;
    }, 120_000, 50);
    killWorker(host);
    expect([200, 202, 503]).toContain((await restart).status);
    await startWorker(host);
    await waitUntil('the restart to end running', async () => {
      const res = await api().get('/v1/instances/one').set(auth).expect(checkContract);
      if (res.body.status === 'error') throw new Error(`the restart ended in error: ${JSON.stringify(res.body)}`);
      return res.body.status === 'running' ? res : null;
    }, 300_000, 500);
    expect((await execWhenBack('one', ['cat', '/proc/sys/kernel/random/boot_id'])).trim()).not.toBe(bootId);
    expect(qemusOn(host)).toHaveLength(1);
  });

  it('finishes a create that a kill -9 of its worker cut short: N01 meanwhile, then running', async () => {
    // The worker without a machine (its machine was deleted above).
    const host = hosts.find((candidate) => candidate !== workerOf('one'))!;
    expect(qemusOn(host)).toHaveLength(0);
    // The only worker with room is the one just emptied.
    const create = api().post('/v1/instances').set(auth).send({ ...MACHINE, name: 'again' }).then((res) => res);
    await waitUntil('its QEMU to start', () => qemusOn(host).length === 1 || null, 120_000, 50);
    killWorker(host);
    const answered = await create;
    checkContract(answered);
    expect({ status: answered.status, code: answered.body.error?.code }).toEqual({ status: 503, code: 'N01' });
    await startWorker(host);
    await waitUntil('the create to end running', async () => {
      const res = await api().get('/v1/instances/again').set(auth).expect(checkContract).expect(200);
      if (res.body.status === 'error') throw new Error(`the create ended in error: ${JSON.stringify(res.body)}`);
      return res.body.status === 'running' ? res : null;
    }, 300_000, 500);
    expect(await execWhenBack('again', ['echo', 'made'])).toBe('made\n');
    expect(workerOf('again')).toBe(host);
    expect(qemusOn(host)).toHaveLength(1);
  });

  it('declares a silent worker lost: its machine errs (event, alert) and its delete removes the record; revived, the worker is fenced anew and ends the deleted machine\'s QEMU', async () => {
    const host = workerOf('again')!;
    const id = (await api().get('/v1/instances/again').set(auth).expect(200)).body.id as string;
    // A stale worker: the process is stopped, not ended (it comes back as it was, under its old epoch).
    host.process!.child.kill('SIGSTOP');
    try {
      expect(() => admin('worker-lost', '--name', host.name)).toThrow(/still answers/);
      const lost = await waitUntil('the worker\'s lease to run out', () => {
        try {
          return admin('worker-lost', '--name', host.name);
        } catch {
          return null;
        }
      }, 90_000, 2000);
      expect(lost.trim()).toBe('again');
      const errored = await api().get('/v1/instances/again').set(auth).expect(checkContract).expect(200);
      expect(errored.body).toMatchObject({ status: 'error', session_saved: false });
      const events = (await api().get(`/v1/events?resource_type=instance&resource_id=${id}`).set(auth).expect(200)).body.data as { type: string; data: { message?: string } }[];
      expect(events.at(-1)).toMatchObject({ type: 'instance.error', data: { message: expect.stringContaining(`worker ${host.name}`) } });
      const alerts = (await api().get('/v1/alerts').set(auth).expect(200)).body as { kind: string; resource_id: string }[];
      expect(alerts.some((alert) => alert.kind === 'instance_error' && alert.resource_id === id)).toBe(true);
      expect(admin('workers')).toMatch(new RegExp(`${host.name}\\s+\\S+\\s+lost\\s+no`));
      // Its files went with the host: the delete removes the record without the worker.
      await api().delete('/v1/instances/again').set(auth).expect(checkContract);
      await waitUntil('the record to be gone', async () => (await api().get('/v1/instances/again').set(auth)).status === 404, 60_000, 500);
      expect(qemusOn(host)).toHaveLength(1); // still running on the silent host
    } finally {
      host.process!.child.kill('SIGCONT');
    }
    // Back, under an epoch older than its row's: adopted anew, it ends the QEMU no record owns.
    await waitUntil('the revived worker to end the deleted machine', () => qemusOn(host).length === 0 || null, 60_000, 500);
    // Back: it drains (no new machine goes to it until it is activated).
    await waitUntil('the worker to answer again', () => new RegExp(`${host.name}\\s+\\S+\\s+draining\\s+yes`).test(admin('workers')) || null, 60_000, 1000);
    // The replica's log line travels through a pipe that the blocking admin calls above leave unread: wait for it.
    await waitUntil('the adoption to say it removed the stray', () => started.some((process) => process.output.includes('worker adopted: machines no record owns were removed')) || null, 10_000, 100);
    admin('worker-activate', '--name', host.name);
  });

  it('drains a worker: its running machine is stopped with its memory, moved to the other worker and resumed where it was', async () => {
    const from = workerOf('one')!;
    const to = hosts.find((host) => host !== from)!;
    await exec('one', ['sh', '-c', 'echo before-the-move > /tmp/marker; (while true; do date +%s%N > /tmp/ticks; sleep 0.2; done) & echo $! > /tmp/ticker']);
    const bootId = await bootOf('one');
    const ticker = (await exec('one', ['cat', '/tmp/ticker']))!.trim();
    expect(admin('worker-drain', '--name', from.name, '--move').trim()).toBe('one');
    // On the other worker now, running the same boot: the process it ran before the move runs on.
    expect(workerOf('one')).toBe(to);
    const after = await api().get('/v1/instances/one').set(auth).expect(checkContract).expect(200);
    expect(after.body.status).toBe('running');
    expect(await exec('one', ['sh', '-c', `cat /tmp/marker /proc/sys/kernel/random/boot_id; kill -0 ${ticker} && echo ticking`])).toBe(`before-the-move\n${bootId}\nticking\n`);
    expect(qemusOn(to)).toHaveLength(1);
    expect(qemusOn(from)).toHaveLength(0);
    expect(admin('machines')).toMatch(new RegExp(`one\\s+admin@example\\.com\\s+running\\s+${to.name}`));
  });

  it('removes a worker only once it is drained and no machine lives on it', async () => {
    const [empty, holding] = [hosts.find((host) => workerOf('one') !== host)!, workerOf('one')!];
    admin('worker-remove', '--name', empty.name); // drained above, and emptied by the move
    expect(admin('workers')).not.toMatch(new RegExp(`^${empty.name} `, 'm'));
    expect(() => admin('worker-remove', '--name', holding.name)).toThrow(/drain .* first/);
    admin('worker-drain', '--name', holding.name);
    expect(() => admin('worker-remove', '--name', holding.name)).toThrow(/machines still live/);
    await api().delete('/v1/instances/one').set(auth).expect(checkContract);
    await waitUntil('the machine to be gone', async () => (await api().get('/v1/instances/one').set(auth)).status === 404, 120_000, 500);
    admin('worker-remove', '--name', holding.name);
    expect(admin('workers')).not.toMatch(new RegExp(`^${holding.name} `, 'm'));
  });
});
