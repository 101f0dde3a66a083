// Several hosts on one box (issue 22): the control plane (KISTE_COMPUTE=workers, a real service
// process) and a kiste-worker in a network namespace of its own behind a veth pair, with its own data
// folder, reached over TLS only. The operator registers the worker with `npm run admin -- worker-add`
// and starts it with the join token; the control plane pins its certificate on first contact, and a
// real guest created through the API runs on it and answers exec. The worker offers room for one
// machine: a second create answers L13 with Retry-After. Cutting the worker's link
// (`ip link set down`) makes its machine's calls answer 503 N01 while the machine runs on; when the
// link is back the machine answers again, the same boot, and no second copy was made.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
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

describe('a worker on another host', () => {
  let fresh: FreshDatabase;
  let network: PrivateNetwork;
  let workerDir: string;
  const started: ServiceProcess[] = [];
  let url: string;
  let auth: Record<string, string>;
  let env: Record<string, string>;
  const api = () => request(url);

  /** `npm run admin -- …` against the control plane's database: stdout, or the exit status and stderr. */
  const admin = (...args: string[]) =>
    execFileSync(process.execPath, ['--import', 'tsx', 'scripts/admin.ts', ...args], {
      cwd: ROOT, env: { ...process.env, ...env }, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'],
    });

  beforeAll(async () => {
    await ensureTestImage();
    fresh = await freshDatabaseUrl();
    network = privateNetwork('wk', 31);
    workerDir = mkdtempSync(join(tmpdir(), 'kiste-remote-worker-'));
    const port = await freePort();
    url = `http://127.0.0.1:${port}`;
    env = serviceEnv(fresh, port, { KISTE_COMPUTE: 'workers' });
  });
  afterAll(async () => {
    await cleanUp(fresh, started);
    for (const qemu of listQemuProcesses().filter((p) => p.machineDir?.startsWith(workerDir))) process.kill(qemu.pid, 'SIGKILL');
    network?.close();
    rmSync(workerDir, { recursive: true, force: true });
  });

  it('joins with a token, runs a real machine placed on it, answers L13 when full and N01 while its link is down', async () => {
    // The operator registers the worker; the token is printed once, on stdout.
    const token = admin('worker-add', '--name', 'far', '--address', `https://${network.address}:${WORKER_PORT}`).trim();
    expect(token).toMatch(/^kwj_[A-Za-z0-9_-]{43}$/);
    expect(() => admin('worker-add', '--name', 'far', '--address', `https://${network.address}:1`)).toThrow(/registered already/);
    expect(() => admin('worker-add', '--name', 'plain', '--address', `http://${network.address}:1`)).toThrow(/https:\/\/host:port/);

    const worker = new ServiceProcess({
      KISTE_DATA_DIR: workerDir, KISTE_IMAGE_DIR: TEST_IMAGE_DIR, KISTE_ACCELERATOR: 'tcg',
      KISTE_WORKER_LISTEN: `${network.address}:${WORKER_PORT}`, KISTE_WORKER_JOIN_TOKEN: token,
      // Room for one 512 MiB machine, not two.
      KISTE_WORKER_VCPUS: '2', KISTE_WORKER_MEMORY_MIB: '800', KISTE_WORKER_DISK_MIB: '20000',
    }, { entry: 'src/worker/main.ts', ready: 'kiste-worker is listening with TLS', netns: network.namespace });
    started.push(worker);
    await worker.listening();

    const service = new ServiceProcess(env);
    started.push(service);
    await service.listening();
    auth = await adminKey(url, 'several hosts');
    await waitUntil('the control plane to pin the worker\'s certificate', () => service.output.includes('its certificate is pinned'), 30_000);
    const listed = admin('workers');
    expect(listed).toMatch(/far\s+https:\/\/[\d.]+:7443\s+active\s+yes\s+2\/800\/20000\s+0/);

    const created = await retryWhileImageNotReady(() =>
      api().post('/v1/instances').set(auth).send({ profile: 'desktop', name: 'remote', vcpu: 1, memory_mib: 512, disk_mib: 2048, ssh_public_key: SSH_KEY }));
    expect({ status: created.status, body: created.body }).toMatchObject({ status: 200, body: { status: 'running' } });
    // Its QEMU is the worker's: it runs in the worker's data folder, and none in the control plane's.
    const onWorker = () => listQemuProcesses().filter((p) => p.machineDir?.startsWith(workerDir) && notTemplate(p.machineId));
    expect(onWorker()).toHaveLength(1);
    expect(listQemuProcesses().filter((p) => p.machineDir?.startsWith(fresh.dataDir))).toHaveLength(0);
    expect(await execOf(api, auth, 'remote', ['sh', '-c', 'echo kept > /tmp/marker && cat /tmp/marker'])).toBe('kept\n');
    const bootId = (await execOf(api, auth, 'remote', ['cat', '/proc/sys/kernel/random/boot_id']))!.trim();
    expect(admin('machines')).toMatch(/remote\s+admin@example\.com\s+running\s+far/);

    // Full: nothing else fits on the only worker.
    const full = await api().post('/v1/instances').set(auth).send({ profile: 'desktop', name: 'second', vcpu: 1, memory_mib: 512, disk_mib: 2048, ssh_public_key: SSH_KEY });
    checkContract(full);
    expect({ status: full.status, code: full.body.error?.code, retryAfter: full.headers['retry-after'] }).toEqual({ status: 503, code: 'L13', retryAfter: '30' });
    expect((await api().get('/v1/instances/second').set(auth)).status).toBe(404); // no row left behind

    // The link to the worker's host goes down: its machine's calls answer N01, the machine runs on.
    execFileSync('ip', ['link', 'set', network.hostLink, 'down']);
    const refused = await waitUntil('a call for the cut-off worker\'s machine to answer N01', async () => {
      const res = await api().post('/v1/instances/remote/exec').set(auth).buffer(true).timeout(30_000).send({ argv: ['true'] }).catch(() => null);
      return res?.status === 503 ? res : null;
    }, 90_000, 1000);
    checkContract(refused);
    expect({ code: refused.body.error.code, retryAfter: refused.headers['retry-after'] }).toEqual({ code: 'N01', retryAfter: '30' });
    expect(onWorker()).toHaveLength(1);

    // The link is back: the same machine answers again (same boot), and no copy of it was made.
    execFileSync('ip', ['link', 'set', network.hostLink, 'up']);
    const back = await waitUntil('the machine to answer again', () => execOf(api, auth, 'remote', ['cat', '/tmp/marker', '/proc/sys/kernel/random/boot_id']).catch(() => null), 120_000, 1000);
    expect(back).toBe(`kept\n${bootId}\n`);
    expect(onWorker()).toHaveLength(1);

    // Deleted: the worker removes its machine; the worker can then be forgotten.
    await api().delete('/v1/instances/remote').set(auth).expect(checkContract);
    await waitUntil('the machine to be gone from the worker', () => onWorker().length === 0, 120_000, 500);
    await waitUntil('the instance row to be gone', async () => (await api().get('/v1/instances/remote').set(auth)).status === 404, 60_000, 500);
    admin('worker-remove', '--name', 'far');
    expect(admin('workers')).not.toMatch(/far/);
  });
});
