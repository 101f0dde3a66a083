// The first start, the README's way: the service process on an empty data folder (SQLite in it, no
// images folder yet) with the defaults an operator gets, machines in a local worker included. The host's jail check at start must not
// depend on folders a later step makes (the images folder appears with the first image build): the
// service builds its image, and a create succeeds once it is ready, without a restart. Meanwhile
// GET /v1/status says machines are unavailable and why, /status.json shows the machines component
// degraded, and the log (JSON lines: stdout is not a terminal) names each build step with its time
// and each refused create with its code.
// The root filesystem comes from the shared test image cache (KISTE_IMAGE_CACHE_DIR, as an operator
// who resets a data folder can keep it): the build takes seconds, not the first download's minutes.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import request from 'supertest';
import { listQemuProcesses } from '../../src/compute/qemu';
import { egressTable } from '../../src/compute/jail';
import { checkContract } from '../support/contract';
import { ensureTestImage, TEST_IMAGE_DIR } from '../support/images';
import { testUidBase } from '../support/jail';
import { freePort, ServiceProcess } from '../support/service-process';

jest.setTimeout(600_000);

const SSH_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMh0vbf5v3M0Kz1cl5q3lM1kP1nN7zQ0b3hVv0ZQk6d1 test@kiste';
const ADMIN = { email: 'admin@example.com', password: 'a long admin password 42' };

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('first start on an empty data folder', () => {
  let root: string;
  let service: ServiceProcess | undefined;
  const uidBase = testUidBase();

  beforeAll(async () => {
    await ensureTestImage(); // the root filesystem cache the service's build uses
    root = mkdtempSync(join(tmpdir(), 'kiste-first-start-'));
  });
  afterAll(async () => {
    await service?.ensureStopped();
    for (const qemu of listQemuProcesses().filter((p) => p.machineDir?.startsWith(root))) process.kill(qemu.pid, 'SIGKILL');
    try {
      execFileSync('nft', ['delete', 'table', 'inet', egressTable(uidBase)], { stdio: 'ignore' }); // the service leaves its rules in place at exit
    } catch {
      // not loaded
    }
    rmSync(root, { recursive: true, force: true });
  });

  it('builds its image and creates a machine without a restart; status tells why not meanwhile', async () => {
    const dataDir = join(root, 'data');
    expect(existsSync(dataDir)).toBe(false);
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    service = new ServiceProcess({
      KISTE_LISTEN: `127.0.0.1:${port}`,
      KISTE_DATA_DIR: dataDir,
      KISTE_IMAGE_CACHE_DIR: join(TEST_IMAGE_DIR, 'cache'),
      KISTE_ADMIN_EMAIL: ADMIN.email,
      KISTE_ADMIN_PASSWORD: ADMIN.password,
      KISTE_MACHINE_UID_BASE: String(uidBase), // network rules of its own beside other test files
      KISTE_ACCELERATOR: 'tcg',
      KISTE_BOOT_SNAPSHOTS: 'off', // the create boots cold: one guest, not a second for the snapshot
      KISTE_COMPUTE: 'worker', // the default (the harness's is in-process): the worker builds the image and runs the machine
    });
    await service.listening();

    const login = await request(url).post('/v1/auth/login').send(ADMIN).expect(checkContract).expect(200);
    const cookie = (login.headers['set-cookie'] as unknown as string[]).find((line) => line.startsWith('kiste_session='))!.split(';')[0]!;
    const key = (await request(url).post('/v1/api-tokens').set('cookie', cookie).set('x-csrf-token', login.body.csrf)
      .send({ label: 'first start', expires_in_seconds: 3600 }).expect(200)).body.token as string;
    const auth = { authorization: `Bearer ${key}` };

    // The image build takes a while (mkfs.ext4 of the root filesystem alone is seconds): not ready yet,
    // and that is all that stands in the way (K06, retryable), not the host (K09).
    const body = { profile: 'desktop', name: 'first', vcpu: 1, memory_mib: 768, disk_mib: 2048, ssh_public_key: SSH_KEY };
    const first = await request(url).post('/v1/instances').set(auth).send(body).expect(checkContract);
    expect({ status: first.status, code: first.body.error?.code, message: first.body.error?.message }).toMatchObject({ status: 503, code: 'K06' });
    const early = (await request(url).get('/v1/status').set(auth).expect(checkContract).expect(200)).body;
    expect(early.status).toBe('degraded');
    expect(early.machines).toMatchObject({ available: false, cause: 'image_building' });
    expect(early.machines.reason).toContain('still being built');
    const earlyPublic = (await request(url).get('/status.json').expect(checkContract).expect(200)).body;
    expect(earlyPublic.components).toContainEqual({ name: 'machines', status: 'degraded' });

    // Asked the way the CLI asks: again after each 503 K06, never a K09.
    const refusals: string[] = [];
    let created: request.Response | undefined;
    for (const deadline = Date.now() + 300_000; Date.now() < deadline; await sleep(2000)) {
      const res = await request(url).post('/v1/instances').set(auth).send(body).expect(checkContract);
      if (res.status === 503 && res.body.error.code === 'K06') {
        refusals.push(res.body.error.message);
        continue;
      }
      created = res;
      break;
    }
    if (created?.status !== 200) throw new Error(`create answered ${created?.status} ${JSON.stringify(created?.body)} after ${refusals.length} K06 refusals:\n${service.output}`);
    expect(created.body.status).toBe('running');

    const ran = await request(url).post('/v1/instances/first/exec').set(auth).buffer(true).send({ argv: ['echo', 'first start'] }).expect(checkContract).expect(200);
    const lines = ran.text.trim().split('\n').map((line) => JSON.parse(line));
    expect(lines.at(-1)).toMatchObject({ type: 'completed', exit_code: 0 });

    const after = (await request(url).get('/v1/status').set(auth).expect(checkContract).expect(200)).body;
    expect(after).toMatchObject({ status: 'ok', machines: { available: true, cause: null, reason: null, hint: null } });
    expect((await request(url).get('/status.json').expect(200)).body.components).toContainEqual({ name: 'machines', status: 'operational' });

    expect(service.output).toContain('"msg":"machine jail ready"');
    expect(service.output).not.toContain('cannot be isolated');
    // The log names every build step with its duration (a JSON line each: stdout is not a terminal).
    expect(service.output).toMatch(/"msg":"image build 2\/7 root filesystem from Debian packages \(mmdebstrap\): done in [\d.]+ s \(cached/);
    expect(service.output).toMatch(/"msg":"image build 4\/7 ext4 file system \(mkfs.ext4 -d\): done in [\d.]+ s/);
    expect(service.output).toMatch(/"msg":"image ready: minimal v[\d.]+-[0-9a-f]{8} built in [\d.]+ s"/);
    // A refusal the service means is one line naming its code, without pino-http's stand-in error.
    expect(service.output).toMatch(/"res":\{"statusCode":503,"code":"K06"\}[^\n]*"msg":"request refused"/);
    expect(service.output).not.toContain('failed with status code');

    await request(url).delete('/v1/instances/first').set(auth).expect(checkContract).expect(200);
    service.signal('SIGTERM');
    expect(await service.waitExit(20_000)).toMatchObject({ code: 0, signal: null });
  });
});
