// Crash safety: kill -9 of the service while a machine runs. The machine keeps running (QEMU is
// detached), the restarted service adopts it (QMP and agent reconnect), commands still run, and a
// delete afterwards leaves no QEMU process and no disk.
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import request from 'supertest';
import { listQemuProcesses } from '../../src/compute/qemu';
import { checkContract } from '../support/contract';
import { freshDatabaseUrl, FreshDatabase } from '../support/database';
import { ensureTestImage, TEST_IMAGE_DIR } from '../support/images';
import { freePort, ServiceProcess } from '../support/service-process';

jest.setTimeout(900_000);

const SSH_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMh0vbf5v3M0Kz1cl5q3lM1kP1nN7zQ0b3hVv0ZQk6d1 test@kiste';
const ADMIN = { email: 'admin@example.com', password: 'a long admin password 42' };

describe('kill -9 of the service with a running machine', () => {
  let fresh: FreshDatabase;
  const started: ServiceProcess[] = [];

  beforeAll(async () => {
    await ensureTestImage();
    fresh = await freshDatabaseUrl();
  });
  afterAll(async () => {
    for (const service of started) await service.ensureStopped();
    for (const qemu of listQemuProcesses().filter((p) => p.machineDir?.startsWith(fresh.dataDir))) process.kill(qemu.pid, 'SIGKILL');
    await fresh.cleanup();
  });

  it('adopts the machine after a restart and deletes it cleanly', async () => {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const env = {
      KISTE_LISTEN: `127.0.0.1:${port}`, KISTE_DATA_DIR: fresh.dataDir, KISTE_IMAGE_DIR: TEST_IMAGE_DIR, KISTE_ACCELERATOR: 'tcg',
      KISTE_ADMIN_EMAIL: ADMIN.email, KISTE_ADMIN_PASSWORD: ADMIN.password, ...(fresh.url ? { KISTE_DATABASE_URL: fresh.url } : {}),
    };
    const api = () => request(url);
    const first = new ServiceProcess(env);
    started.push(first);
    await first.listening();
    const login = await api().post('/v1/auth/login').send(ADMIN).expect(checkContract).expect(200);
    const cookie = (login.headers['set-cookie'] as unknown as string[]).find((line) => line.startsWith('kiste_session='))!.split(';')[0]!;
    const key = (await api().post('/v1/api-tokens').set('cookie', cookie).set('x-csrf-token', login.body.csrf)
      .send({ label: 'recovery', expires_in_seconds: 3600 }).expect(200)).body.token as string;
    const auth = { authorization: `Bearer ${key}` };
    let created;
    for (let attempt = 0; ; attempt++) {
      // the image may still be being published by the service's start-up build: K06 is retryable
      created = await api().post('/v1/instances').set(auth).send({ profile: 'desktop', name: 'survivor', vcpu: 1, memory_mib: 768, disk_mib: 2048, ssh_public_key: SSH_KEY });
      if (created.status !== 503 || attempt > 30) break;
      await new Promise((resolve) => setTimeout(resolve, 2000));
    }
    expect(created.status).toBe(200);
    const id = created.body.id as string;
    const qemuBefore = listQemuProcesses().filter((p) => p.machineId === id);
    expect(qemuBefore).toHaveLength(1);

    first.killHard();
    await first.waitExit(10_000);
    expect(listQemuProcesses().filter((p) => p.machineId === id).map((p) => p.pid)).toEqual(qemuBefore.map((p) => p.pid));

    const second = new ServiceProcess(env);
    started.push(second);
    await second.listening();
    const after = await api().get('/v1/instances/survivor').set(auth).expect(checkContract).expect(200);
    expect(after.body.status).toBe('running');
    const ran = await api().post('/v1/instances/survivor/exec').set(auth).buffer(true).send({ argv: ['echo', 'adopted'] }).expect(checkContract).expect(200);
    const lines = ran.text.trim().split('\n').map((line) => JSON.parse(line));
    expect(lines.at(-1)).toMatchObject({ type: 'completed', exit_code: 0 });
    expect(Buffer.from(lines.find((l) => l.type === 'output').data_base64, 'base64').toString()).toBe('adopted\n');

    await api().delete('/v1/instances/survivor').set(auth).expect(checkContract).expect(200);
    expect(listQemuProcesses().filter((p) => p.machineId === id)).toEqual([]);
    expect(readdirSync(join(fresh.dataDir, 'machines'))).toEqual([]);
    expect(readdirSync(join(fresh.dataDir, 'layers'))).toEqual([]);
  });
});
