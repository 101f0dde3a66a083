// Instant machines for real (minimal image, TCG): the first create of a configuration boots and a
// boot snapshot of it is made in the background; the next create restores a copy of it under an
// identity of its own (host name, machine id, host keys, authorized keys, clock, reseeded RNG, its
// own disk size); a fork with memory continues its source's processes and RAM as a new machine;
// a snapshot that cannot be restored costs a cold boot, never the machine.
import { statSync, truncateSync } from 'node:fs';
import { ensureTestImage, TEST_IMAGE_DIR as IMAGE_DIR } from '../support/images';
import { guestRun } from '../support/guest';
import { apiKeyFor, bearer, createAccount, startTestService, TestService } from '../support/harness';

jest.setTimeout(900_000);

const SSH_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMh0vbf5v3M0Kz1cl5q3lM1kP1nN7zQ0b3hVv0ZQk6d1 test@kiste';
/**
 * A configuration of this test's own, per database project (they may run at once on one image
 * folder): the snapshot it breaks at the end is no other run's.
 */
const SHAPE = { vcpu: 1, memory_mib: process.env.KISTE_TEST_DB === 'postgres' ? 672 : 704, disk_mib: 3072 };

describe('boot snapshots and fork with memory', () => {
  let t: TestService;
  let key: string;

  beforeAll(async () => {
    await ensureTestImage();
    t = await startTestService({ env: { KISTE_IMAGE_DIR: IMAGE_DIR, KISTE_IMAGE_PROFILE: 'minimal', KISTE_BOOT_SNAPSHOTS: 'on' } });
    expect(await t.services.machineHost.refreshImage('minimal')).not.toBeNull();
    key = await apiKeyFor(t, await createAccount(t));
  });

  afterAll(async () => {
    if (!t) return;
    for (const id of await t.services.machineHost.knownMachineIds()) await t.services.machineHost.destroy(id);
    await t.close();
  });

  const create = (name: string) => t.api.post('/v1/instances').set(bearer(key)).send({ profile: 'desktop', name, ...SHAPE, ssh_public_key: SSH_KEY }).expect(200);
  const runningEvent = async (instanceId: string) => {
    const events = await t.api.get('/v1/events').query({ tail: 200 }).set(bearer(key)).expect(200);
    return events.body.data.find((e: { type: string; resource_id: string }) => e.type === 'instance.running' && e.resource_id === instanceId);
  };
  /** Waits until a lifecycle call's operation is over and the machine is `status`. */
  const settled = async (name: string, status: string) => {
    for (const deadline = Date.now() + 300_000; Date.now() < deadline; await new Promise((resolve) => setTimeout(resolve, 500))) {
      const now = (await t.api.get(`/v1/instances/${name}`).set(bearer(key)).expect(200)).body;
      if (now.status === status && !now.operation) return now;
    }
    throw new Error(`${name} did not become ${status}`);
  };
  const sh = async (id: string, script: string) => {
    const result = await guestRun(t, id, script);
    expect(result.exitCode).toBe(0);
    return result.stdout.trim();
  };

  it('creates from a boot snapshot, forks with memory, and falls back to a boot', async () => {
    const image = t.services.machineHost.currentImage('minimal')!;
    const shape = { vcpu: SHAPE.vcpu, memoryMib: SHAPE.memory_mib };

    // First create of the configuration: a cold boot (unless an earlier run left its snapshot).
    const first = (await create('first')).body;
    const firstFrom = (await runningEvent(first.id)).data.started_from;
    expect(['boot', 'snapshot']).toContain(firstFrom);
    const snapshot = await t.services.compute.inProcess!.machineHost.makeBootSnapshot(image, shape); // the one it started, or the one there is
    expect(snapshot).not.toBeNull();

    // Second create: a copy of the snapshot with its own identity.
    const startedAt = Date.now();
    const second = (await create('second')).body;
    const createMs = Date.now() - startedAt;
    expect((await runningEvent(second.id)).data).toMatchObject({ name: 'second', resumed: false, started_from: 'snapshot' });
    expect(await sh(second.id, 'hostname')).toBe('second');
    expect(await sh(second.id, 'grep 127.0.1.1 /etc/hosts')).toContain('second');
    expect(await sh(second.id, 'cat /root/.ssh/authorized_keys')).toContain(SSH_KEY.split(' ')[1]);
    const machineIds = [await sh(first.id, 'cat /etc/machine-id'), await sh(second.id, 'cat /etc/machine-id')];
    expect(machineIds[1]).toMatch(/^[0-9a-f]{32}$/);
    expect(machineIds[1]).not.toBe(machineIds[0]);
    const hostKey = async (name: string) => (await t.api.get(`/v1/instances/${name}/ssh-host-key`).set(bearer(key)).expect(200)).body.public_key as string;
    const secondKey = await hostKey('second');
    expect(secondKey).not.toBe(await hostKey('first'));
    expect(await sh(second.id, 'cat /etc/ssh/ssh_host_*_key.pub')).toContain(secondKey.split(' ')[1]);
    // The guest clock is the host's, not the template's (saved minutes or days ago).
    expect(Math.abs(Number(await sh(second.id, 'date +%s')) * 1000 - Date.now())).toBeLessThan(30_000);
    // It has a VM generation ID device (kernels with the vmgenid driver reseed on its change; the
    // minimal image's cloud kernel has none, so the agent reseeds from the host's bytes).
    expect(await sh(second.id, 'ls /sys/bus/acpi/devices/ | grep -c QEMUVGID || true')).toBe('1');
    // The root file system grew to the machine's disk (the template's was the image's size).
    const rootBytes = Number(await sh(second.id, "df -B1 --output=size / | tail -1"));
    expect(rootBytes).toBeGreaterThan(SHAPE.disk_mib * 1048576 * 0.9);
    // journald restarted under the new identity.
    await sh(second.id, 'logger -t kiste-snapshot-test hello; sleep 1');
    const journal = await sh(second.id, 'journalctl -t kiste-snapshot-test -o json --no-pager | tail -1');
    expect(JSON.parse(journal)).toMatchObject({ _HOSTNAME: 'second', _MACHINE_ID: machineIds[1] });
    // Its console log begins with the boot it continues.
    const logs = await t.api.get('/v1/instances/second/logs').set(bearer(key)).expect(200);
    expect(JSON.stringify(logs.body)).toMatch(/Linux version|systemd/);

    // Fork with memory: a counter running in the source keeps counting in the copy; RAM-only files come along.
    await sh(second.id, 'echo only-in-ram > /dev/shm/marker; nohup sh -c \'i=0; while :; do i=$((i+1)); echo $i > /tmp/counter; sleep 0.2; done\' >/dev/null 2>&1 & echo $! > /tmp/counter.pid');
    const forked = await t.api.post('/v1/instances/second/fork').set(bearer(key)).send({ name: 'third', memory: true }).expect(200);
    expect(forked.body).toMatchObject({ name: 'third', status: 'running' });
    const forkEvent = (await runningEvent(forked.body.id)).data;
    expect(forkEvent).toMatchObject({ started_from: 'memory' });
    expect(forkEvent.source_paused_ms).toBeGreaterThanOrEqual(0);
    const third = forked.body.id as string;
    expect(await sh(third, 'cat /dev/shm/marker')).toBe('only-in-ram');
    expect(await sh(third, 'kill -0 $(cat /tmp/counter.pid) && echo alive')).toBe('alive');
    const counted = Number(await sh(third, 'cat /tmp/counter'));
    await sh(third, 'sleep 1');
    expect(Number(await sh(third, 'cat /tmp/counter'))).toBeGreaterThan(counted);
    expect(await sh(third, 'hostname')).toBe('third');
    expect(await sh(third, 'cat /etc/machine-id')).not.toBe(machineIds[1]);
    // The source ran on, and the two are separate machines now.
    expect(await sh(second.id, 'kill -0 $(cat /tmp/counter.pid) && echo alive')).toBe('alive');
    await sh(third, 'echo copy > /dev/shm/marker');
    expect(await sh(second.id, 'cat /dev/shm/marker')).toBe('only-in-ram');

    // A restored machine is like any other: stop with its memory, resume.
    await t.api.post('/v1/instances/third/stop').set(bearer(key)).send({ snapshot: true }).expect(200);
    await t.api.post('/v1/instances/third/resume').set(bearer(key)).expect(200);
    expect(await sh(third, 'cat /dev/shm/marker')).toBe('copy');

    // A broken snapshot: the create boots instead, and the snapshot is dropped (then made again).
    const firstDiskInode = statSync(snapshot!.disk).ino;
    truncateSync(snapshot!.stateFile, 100);
    const fourth = (await create('fourth')).body;
    expect((await runningEvent(fourth.id)).data.started_from).toBe('boot');
    expect(await sh(fourth.id, 'hostname')).toBe('fourth');
    expect(t.services.compute.inProcess!.machineHost.findBootSnapshot(image, shape)).toBeNull(); // dropped; a new one is being made
    // Made again under file names of its own: the disk the earlier copies back onto is left as it was.
    const remade = await t.services.compute.inProcess!.machineHost.makeBootSnapshot(image, shape);
    expect(remade!.disk).not.toBe(snapshot!.disk);
    expect(statSync(snapshot!.disk).ino).toBe(firstDiskInode);
    await sh(second.id, 'echo kept > /root/kept; sync');
    expect([200, 202]).toContain((await t.api.post('/v1/instances/second/restart').set(bearer(key))).status);
    await settled('second', 'running');
    expect(await sh(second.id, 'cat /root/kept')).toBe('kept'); // a cold boot of its disk chain, on the old snapshot disk
    console.log(`create from a boot snapshot answered in ${createMs} ms; fork with memory paused its source ${forkEvent.source_paused_ms} ms`);
  });
});
