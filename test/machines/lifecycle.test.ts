// Machines for real: the minimal image booted under QEMU (TCG here) in the local worker the service
// runs by default, driven through the HTTP API.
// create → stop with session → resume (a process started before the stop still runs) → fork
// (independent disk) → rename → logs, metrics → K05 → delete (no process, no disk left).
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { listQemuProcesses } from '../../src/compute/qemu';
import { ensureTestImage, TEST_IMAGE_DIR as IMAGE_DIR } from '../support/images';
import { guestRun } from '../support/guest';
import { apiKeyFor, bearer, createAccount, startTestService, TestService } from '../support/harness';

jest.setTimeout(900_000);

const SSH_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMh0vbf5v3M0Kz1cl5q3lM1kP1nN7zQ0b3hVv0ZQk6d1 test@kiste';

describe('machine lifecycle on the minimal image', () => {
  let t: TestService;
  let key: string;

  beforeAll(async () => {
    await ensureTestImage();
    t = await startTestService({ env: { KISTE_IMAGE_DIR: IMAGE_DIR, KISTE_IMAGE_PROFILE: 'minimal' }, compute: 'worker' });
    expect(await t.services.machineHost.refreshImage('minimal')).not.toBeNull();
    key = await apiKeyFor(t, await createAccount(t));
  });

  afterAll(async () => {
    if (!t) return;
    for (const id of await t.services.machineHost.knownMachineIds()) await t.services.machineHost.destroy(id);
    await t.close();
  });

  it('runs the whole state table', async () => {
    const created = await t.api.post('/v1/instances').set(bearer(key))
      .send({ profile: 'desktop', name: 'alpha', vcpu: 1, memory_mib: 768, disk_mib: 2048, ssh_public_key: SSH_KEY })
      .expect(200);
    expect(created.body).toMatchObject({ name: 'alpha', status: 'running', session_saved: false, update_available: false });
    const id = created.body.id as string;
    expect((await t.services.metrics.text()).body).toMatch(/^kiste_machines\{status="running"\} 1$/m);
    expect((await guestRun(t, id, 'hostname')).stdout.trim()).toBe('alpha');
    expect((await guestRun(t, id, 'cat /root/.ssh/authorized_keys')).stdout).toContain(SSH_KEY.split(' ')[1]);

    const list = await t.api.get('/v1/instances').set(bearer(key)).expect(200);
    expect(list.body.data.map((i: { name: string }) => i.name)).toEqual(['alpha']);
    const duplicate = await t.api.post('/v1/instances').set(bearer(key))
      .send({ profile: 'desktop', name: 'alpha', vcpu: 1, memory_mib: 768, disk_mib: 2048, ssh_public_key: SSH_KEY }).expect(409);
    expect(duplicate.body.error.code).toBe('K02');

    // exec over HTTP: ordered NDJSON, exit codes, timeouts, idempotent ids, command records.
    const execLines = (res: { text: string }) => res.text.trim().split('\n').map((line) => JSON.parse(line));
    const commandId = '0f0e0d0c-0b0a-4908-8706-050403020100';
    const ran = await t.api.post('/v1/instances/alpha/exec').set(bearer(key))
      .send({ id: commandId, argv: ['sh', '-c', 'echo out; echo err >&2; exit 3'] }).expect(200);
    const streamed = execLines(ran);
    expect(streamed[0]).toEqual({ type: 'started', id: commandId, instance: 'alpha' });
    const output = streamed.filter((e) => e.type === 'output');
    expect(output.map((e) => e.sequence)).toEqual(output.map((_, i) => i));
    expect(output.filter((e) => e.stream === 'stdout').map((e) => Buffer.from(e.data_base64, 'base64').toString()).join('')).toBe('out\n');
    expect(output.filter((e) => e.stream === 'stderr').map((e) => Buffer.from(e.data_base64, 'base64').toString()).join('')).toBe('err\n');
    expect(streamed.at(-1)).toMatchObject({ type: 'completed', exit_code: 3, status: 'exited', stdout_bytes: 4, stderr_bytes: 4, signal: null });
    const again = execLines(await t.api.post('/v1/instances/alpha/exec').set(bearer(key))
      .send({ id: commandId, argv: ['sh', '-c', 'echo out; echo err >&2; exit 3'] }).expect(200));
    expect(again.map((e) => e.type)).toEqual(['started', 'completed']); // recorded, not run again
    expect(again[1]).toMatchObject({ exit_code: 3, status: 'exited' });
    const conflict = await t.api.post('/v1/instances/alpha/exec').set(bearer(key)).send({ id: commandId, argv: ['true'] }).expect(409);
    expect(conflict.body.error.code).toBe('P11');
    const slow = execLines(await t.api.post('/v1/instances/alpha/exec').set(bearer(key)).send({ argv: ['sleep', '30'], timeout_ms: 500 }).expect(200));
    expect(slow.at(-1)).toMatchObject({ type: 'completed', status: 'timed_out' });
    const missing = execLines(await t.api.post('/v1/instances/alpha/exec').set(bearer(key)).send({ argv: ['/no/such/program'] }).expect(200));
    expect(missing.at(-1)).toMatchObject({ type: 'failed' });
    const commands = await t.api.get('/v1/instances/alpha/commands').set(bearer(key)).expect(200);
    expect(commands.body.data.length).toBe(3);
    const record = await t.api.get(`/v1/instances/alpha/commands/${commandId}`).set(bearer(key)).expect(200);
    expect(record.body).toMatchObject({ status: 'finished', completion_status: 'exited', exit_code: 3, stdout_bytes: 4 });
    const late = await t.api.post(`/v1/instances/alpha/commands/${commandId}/interrupt`).set(bearer(key)).send({}).expect(200);
    expect(late.body.accepted).toBe(false);

    const metrics = await t.api.get('/v1/instances/alpha/metrics').set(bearer(key)).expect(200);
    expect(metrics.body.cpu.cores).toBe(1);
    expect(metrics.body.memory.total_mib).toBeGreaterThan(500);
    const logs = await t.api.get('/v1/instances/alpha/logs?tail=50').set(bearer(key)).expect(200);
    expect(logs.body.logs.split('\n').length).toBeLessThanOrEqual(51);
    expect(logs.body.logs.length).toBeGreaterThan(0);

    // A process started before a stop with session still runs after resume.
    await guestRun(t, id, 'setsid sleep 100000 > /dev/null 2>&1 < /dev/null & echo $! > /tmp/sleeper');
    const stopped = await t.api.post('/v1/instances/alpha/stop').set(bearer(key)).send({ snapshot: true }).expect(200);
    expect(stopped.body).toMatchObject({ status: 'stopped', session_saved: true });
    await t.api.get('/v1/instances/alpha/metrics').set(bearer(key)).expect(409);
    const resumed = await t.api.post('/v1/instances/alpha/resume').set(bearer(key)).expect(200);
    expect(resumed.body).toMatchObject({ status: 'running', session_saved: false });
    expect((await guestRun(t, id, 'kill -0 "$(cat /tmp/sleeper)" && echo alive')).stdout.trim()).toBe('alive');

    // Fork: the copy boots fresh on a copy-on-write disk; what it writes stays its own.
    const fork = await t.api.post('/v1/instances/alpha/fork').set(bearer(key)).send({ name: 'beta' });
    if (fork.status !== 200) throw new Error(JSON.stringify(fork.body));
    expect(fork.body).toMatchObject({ name: 'beta', status: 'running', expires_at: null });
    await guestRun(t, fork.body.id, 'echo from-fork > /root/fork-only && sync');
    expect((await guestRun(t, id, 'test -e /root/fork-only; echo $?')).stdout.trim()).toBe('1');
    expect((await guestRun(t, fork.body.id, 'cat /root/fork-only')).stdout.trim()).toBe('from-fork');

    // A second lifecycle request while one runs: 409 K05.
    const first = t.api.post('/v1/instances/beta/restart').set(bearer(key)).then((res) => res);
    await new Promise((resolve) => setTimeout(resolve, 300));
    const busy = await t.api.post('/v1/instances/beta/stop').set(bearer(key)).expect(409);
    expect(busy.body.error.code).toBe('K05');
    // A restart is a cold boot: past 20 s the answer is 202 and the work goes on; instance.running marks the end.
    const restarted = await first;
    expect([200, 202]).toContain(restarted.status);
    for (let waited = 0; restarted.status === 202; waited += 1000) {
      if (waited > 180_000) throw new Error('restart did not finish');
      await new Promise((resolve) => setTimeout(resolve, 1000));
      if ((await t.api.get('/v1/instances/beta').set(bearer(key)).expect(200)).body.status === 'running') break;
    }

    const renamed = await t.api.post('/v1/instances/beta/rename').set(bearer(key)).send({ name: 'gamma' }).expect(200);
    expect(renamed.body.name).toBe('gamma');
    const extended = await t.api.post('/v1/instances/gamma/extend').set(bearer(key)).send({ ttl_seconds: 3600 }).expect(200);
    expect(Date.parse(extended.body.expires_at) - Date.now()).toBeGreaterThan(3500_000);

    // Lifetime end: the expiry job stops the machine cleanly with its session; the deadline is spent.
    await t.services.database.prisma.instance.update({ where: { id: fork.body.id }, data: { expiresAt: new Date(Date.now() - 1000) } });
    expect(await t.services.instances.expireDue()).toBe(1);
    await t.services.instances.operations.pending()[0];
    const expired = await t.api.get('/v1/instances/gamma').set(bearer(key)).expect(200);
    expect(expired.body).toMatchObject({ status: 'stopped', session_saved: true, expires_at: null });

    for (const name of ['alpha', 'gamma']) {
      const deleted = await t.api.delete(`/v1/instances/${name}`).set(bearer(key)).expect(200);
      expect(deleted.body.name).toBe(name);
    }
    await t.api.get('/v1/instances/alpha').set(bearer(key)).expect(404);
    expect(listQemuProcesses().filter((p) => p.machineId === id || p.machineId === fork.body.id)).toEqual([]);
    const machinesDir = join(t.config.dataDir, 'machines');
    expect(existsSync(machinesDir) ? readdirSync(machinesDir) : []).toEqual([]);
    expect(readdirSync(join(t.config.dataDir, 'layers'))).toEqual([]);
    const events = await t.services.database.prisma.event.findMany({ where: { resourceId: id }, orderBy: { sequence: 'asc' } });
    expect(events.map((event) => event.type)).toEqual(['instance.created', 'instance.running', 'instance.stopped', 'instance.running', 'instance.deleted']);
    // The operations are in the scrape, each with its outcome.
    const scrape = (await t.services.metrics.text()).body;
    for (const operation of ['create', 'fork', 'stop', 'resume', 'expire', 'delete']) {
      expect(scrape).toMatch(new RegExp(`^kiste_operation_duration_seconds_count\\{operation="${operation}",outcome="ok"\\} [1-9]\\d*$`, 'm'));
    }
  });
});
