// Named snapshots of real machines (issue 24, docs/snapshots.md), through the API and the local
// worker: a memory snapshot of a running machine continued by two new machines (a file written and
// a process started before it are there, each with its own host name, machine id and SSH host
// keys), a disk-only snapshot booted with a bigger disk after its source was deleted, a stopped
// machine's disk, the refusals (S01–S06, K01, L15, L16), and deletion: a snapshot's disk that machines
// still back onto stays (marked) until they are gone, and an account's deletion removes its
// snapshots' files. On both databases.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { ensureTestImage, TEST_IMAGE_DIR as IMAGE_DIR } from '../support/images';
import { guestRun } from '../support/guest';
import { apiKeyFor, bearer, createAccount, startTestService, TEST_PASSWORD, TestService } from '../support/harness';

jest.setTimeout(900_000);

const SSH_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMh0vbf5v3M0Kz1cl5q3lM1kP1nN7zQ0b3hVv0ZQk6d1 test@kiste';
const SHAPE = { vcpu: 1, memory_mib: 768, disk_mib: 2048 };

describe('named snapshots of real machines', () => {
  let t: TestService;
  let key: string;
  let accountId: string;
  let sourceId: string;
  let grownId: string;
  const snapshotIds: Record<string, string> = {};

  const api = () => t.api;
  const auth = () => bearer(key);
  const create = (body: Record<string, unknown>) => api().post('/v1/instances').set(auth()).send({ profile: 'desktop', ...SHAPE, ssh_public_key: SSH_KEY, ...body });
  const folderOf = (snapshotId: string) => join(t.config.dataDir, 'snapshots', snapshotId);

  async function take(machine: string, body: Record<string, unknown>) {
    const res = await api().post(`/v1/instances/${machine}/snapshots`).set(auth()).send(body);
    if (res.status !== 200) throw new Error(`snapshot of ${machine}: ${res.status} ${JSON.stringify(res.body)}`);
    expect(res.body).toMatchObject({ object: 'snapshot', name: body.name, status: 'pending', instance_name: machine, size_mib: null, ready_at: null });
    snapshotIds[body.name as string] = res.body.id;
    return ready(res.body.id);
  }

  /** The snapshot once it is no longer pending (it must end ready). */
  async function ready(idOrName: string) {
    const deadline = Date.now() + 300_000;
    for (;;) {
      const res = await api().get(`/v1/snapshots/${idOrName}`).set(auth()).expect(200);
      if (res.body.status === 'ready') return res.body;
      if (res.body.status === 'failed') throw new Error(`snapshot ${idOrName} failed: ${res.body.error}`);
      expect(res.body.progress).not.toBeNull();
      if (Date.now() > deadline) throw new Error(`snapshot ${idOrName} still pending`);
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
  }

  function expectError(res: { status: number; body: any }, status: number, code: string) {
    if (res.status !== status || res.body?.error?.code !== code) throw new Error(`expected ${status} ${code}, got ${res.status} ${JSON.stringify(res.body)}`);
  }

  beforeAll(async () => {
    await ensureTestImage();
    t = await startTestService({ env: { KISTE_IMAGE_DIR: IMAGE_DIR, KISTE_IMAGE_PROFILE: 'minimal' }, compute: 'worker' });
    expect(await t.services.machineHost.refreshImage('minimal')).not.toBeNull();
    const account = await createAccount(t);
    accountId = account.id;
    key = await apiKeyFor(t, account);
  });

  afterAll(async () => {
    if (!t) return;
    for (const id of await t.services.machineHost.knownMachineIds()) await t.services.machineHost.destroy(id);
    await t.close();
  });

  it('refuses what names nothing, or asks for two sources', async () => {
    expectError(await api().get('/v1/snapshots/nothing-here').set(auth()), 404, 'S01');
    expectError(await api().delete(`/v1/snapshots/${randomUUID()}`).set(auth()), 404, 'S01');
    expectError(await api().post('/v1/instances/nobody/snapshots').set(auth()).send({ name: 'x' }), 404, 'K01');
    expectError(await create({ name: 'from-nothing', snapshot: 'nothing-here' }), 404, 'S01');
    expectError(await create({ name: 'two-sources', snapshot: 'nothing-here', image: 'universal' }), 422, 'S05');
    expectError(await api().post('/v1/instances/nobody/snapshots').set(auth()).send({ name: '-bad name' }), 400, 'P01');
    const empty = await api().get('/v1/snapshots').set(auth()).expect(200);
    expect(empty.body).toEqual({ object: 'list', data: [], first_id: null, last_id: null, has_more: false });
  });

  it('keeps a running machine\'s memory: two machines continue it, each with its own identity', async () => {
    const source = await create({ name: 'source' });
    if (source.status !== 200) throw new Error(JSON.stringify(source.body));
    sourceId = source.body.id;
    expect(['boot', 'snapshot']).toContain(source.body.started_from); // cold, or from its image's boot snapshot once one is made
    const prepared = await guestRun(t, sourceId, 'echo prepared-state > /root/marker && sync && (setsid sleep 300000 > /dev/null 2>&1 < /dev/null & echo $! > /root/sleeper) && cat /etc/machine-id');
    expect(prepared.exitCode).toBe(0);
    const sourceMachineId = prepared.stdout.trim();

    const snapshot = await take('source', { name: 'prepared' });
    expect(snapshot).toMatchObject({ memory: true, instance_id: sourceId, source: { vcpu: 1, memory_mib: 768, disk_mib: 2048 }, progress: null, error: null });
    expect(snapshot.size_mib).toBeGreaterThan(0);
    expect(snapshot.image_version).toMatch(/^v\d{4}\.\d{2}\.\d{2}-[0-9a-f]{8}$/);
    expectError(await api().post('/v1/instances/source/snapshots').set(auth()).send({ name: 'prepared' }), 409, 'S02');
    // The source runs on where it was.
    expect((await guestRun(t, sourceId, 'kill -0 "$(cat /root/sleeper)" && echo alive')).stdout).toBe('alive\n');

    const copies = [];
    for (const [name, ref] of [['copy-a', 'prepared'], ['copy-b', snapshot.id]] as const) {
      const res = await create({ name, snapshot: ref });
      if (res.status !== 200) throw new Error(`${name}: ${JSON.stringify(res.body)}`);
      expect(res.body).toMatchObject({ name, status: 'running', started_from: 'snapshot_memory', snapshot_id: snapshot.id });
      copies.push(res.body);
    }
    const machineIds = new Set([sourceMachineId]);
    const hostKeys = new Set((source.body.ssh_host_keys ?? []).map((k: { public_key: string }) => k.public_key));
    for (const copy of copies) {
      const inside = await guestRun(t, copy.id, 'hostname; cat /root/marker; kill -0 "$(cat /root/sleeper)" && echo alive; cat /etc/machine-id');
      const [hostname, marker, alive, machineId] = inside.stdout.trim().split('\n');
      expect({ hostname, marker, alive }).toEqual({ hostname: copy.name, marker: 'prepared-state', alive: 'alive' });
      machineIds.add(machineId!);
      const instance = await api().get(`/v1/instances/${copy.name}`).set(auth()).expect(200);
      for (const hostKey of instance.body.ssh_host_keys ?? []) hostKeys.add(hostKey.public_key);
    }
    expect(machineIds.size).toBe(3);
    const keysPerMachine = (source.body.ssh_host_keys ?? []).length;
    if (keysPerMachine > 0) expect(hostKeys.size).toBe(3 * keysPerMachine);

    // A different shape boots the disk instead of failing.
    const bigger = await create({ name: 'copy-bigger', snapshot: 'prepared', vcpu: 2 });
    if (bigger.status !== 200) throw new Error(JSON.stringify(bigger.body));
    expect(bigger.body).toMatchObject({ started_from: 'snapshot_disk', vcpu: 2 });
    const booted = await guestRun(t, bigger.body.id, 'cat /root/marker; nproc; kill -0 "$(cat /root/sleeper)" 2>/dev/null && echo alive || echo fresh');
    expect(booted.stdout.trim().split('\n')).toEqual(['prepared-state', '2', 'fresh']);
    await api().delete('/v1/instances/copy-bigger').set(auth()).expect(200);
  });

  it('keeps a disk alone: a stopped machine\'s, and one booted bigger after its source is gone', async () => {
    const diskOnly = await take('source', { name: 'disk-only', memory: false });
    expect(diskOnly.memory).toBe(false);
    await api().post('/v1/instances/source/stop').set(auth()).send({ snapshot: false }).expect(200);
    expectError(await api().post('/v1/instances/source/snapshots').set(auth()).send({ name: 'no-memory', memory: true }), 409, 'S04');
    const stoppedDisk = await take('source', { name: 'stopped-disk' });
    expect(stoppedDisk.memory).toBe(false);

    await api().delete('/v1/instances/source').set(auth()).expect(200);
    const orphaned = await api().get('/v1/snapshots').set(auth()).expect(200);
    expect(orphaned.body.data.map((s: { name: string }) => s.name)).toEqual(['stopped-disk', 'disk-only', 'prepared']);
    expect(orphaned.body.data.every((s: { instance_id: string | null; instance_name: string }) => s.instance_id === null && s.instance_name === 'source')).toBe(true);

    expectError(await create({ name: 'too-small', snapshot: 'disk-only', disk_mib: 1024 }), 422, 'S06');
    const grown = await create({ name: 'grown', snapshot: 'disk-only', disk_mib: 3072 });
    if (grown.status !== 200) throw new Error(JSON.stringify(grown.body));
    grownId = grown.body.id;
    expect(grown.body).toMatchObject({ started_from: 'snapshot_disk', disk_mib: 3072 });
    const inside = await guestRun(t, grown.body.id, 'cat /root/marker; df -Pk / | tail -1 | tr -s " " | cut -d" " -f2');
    const [marker, rootKib] = inside.stdout.trim().split('\n');
    expect(marker).toBe('prepared-state');
    expect(Number(rootKib)).toBeGreaterThan(2.5 * 1024 * 1024);

    const fromStopped = await create({ name: 'from-stopped', snapshot: 'stopped-disk' });
    if (fromStopped.status !== 200) throw new Error(JSON.stringify(fromStopped.body));
    expect((await guestRun(t, fromStopped.body.id, 'cat /root/marker')).stdout.trim()).toBe('prepared-state');
  });

  it('deletes snapshots: a disk machines back onto stays until they are gone', async () => {
    const prepared = snapshotIds.prepared!;
    await api().delete('/v1/snapshots/prepared').set(auth()).expect(200, { id: prepared, object: 'snapshot', deleted: true });
    expectError(await api().get(`/v1/snapshots/${prepared}`).set(auth()), 404, 'S01');
    expectError(await create({ name: 'too-late', snapshot: prepared }), 404, 'S01');
    expect(existsSync(join(folderOf(prepared), 'disk.qcow2'))).toBe(true); // copy-a and copy-b run on it
    expect(existsSync(join(folderOf(prepared), 'memory.ram'))).toBe(false);
    expect((await guestRun(t, (await api().get('/v1/instances/copy-a').set(auth())).body.id, 'cat /root/marker && sync')).stdout.trim()).toBe('prepared-state');
    await api().delete('/v1/instances/copy-a').set(auth()).expect(200);
    expect(existsSync(folderOf(prepared))).toBe(true);
    await api().delete('/v1/instances/copy-b').set(auth()).expect(200);
    expect(existsSync(folderOf(prepared))).toBe(false);

    // Unused: its files go at once.
    const stopped = snapshotIds['stopped-disk']!;
    await api().delete('/v1/instances/from-stopped').set(auth()).expect(200);
    await api().delete(`/v1/snapshots/${stopped}`).set(auth()).expect(200);
    expect(existsSync(folderOf(stopped))).toBe(false);

    const events = await t.services.database.prisma.event.findMany({ where: { accountId, resourceType: 'snapshot' }, orderBy: { sequence: 'asc' } });
    const of = (name: string) => events.filter((e) => (e.data as { name: string }).name === name).map((e) => e.type);
    expect(of('prepared')).toEqual(['snapshot.created', 'snapshot.ready', 'snapshot.deleted']);
    expect(of('stopped-disk')).toEqual(['snapshot.created', 'snapshot.ready', 'snapshot.deleted']);
  });

  it('snapshots a machine made from a snapshot: the copy holds both generations\' files', async () => {
    expect((await guestRun(t, grownId, 'echo second > /root/second && sync')).exitCode).toBe(0);
    await take('grown', { name: 'second-generation', memory: false });
    const next = await create({ name: 'third', snapshot: 'second-generation', disk_mib: 3072 });
    if (next.status !== 200) throw new Error(JSON.stringify(next.body));
    expect((await guestRun(t, next.body.id, 'cat /root/marker /root/second')).stdout).toBe('prepared-state\nsecond\n');
    await api().delete('/v1/instances/third').set(auth()).expect(200);
    await api().delete('/v1/snapshots/second-generation').set(auth()).expect(200);
    expect(existsSync(folderOf(snapshotIds['second-generation']!))).toBe(false);
  });

  it('holds each account to its snapshot count (L15) and size (L16)', async () => {
    const now = new Date();
    const filler = (name: string, fields: { status: string; sizeBytes?: bigint }) => ({
      id: randomUUID(), accountId, name, instanceName: 'gone', image: 'universal', memory: false,
      vcpu: 1, memoryMib: 768, diskMib: 2048, imageProfile: 'minimal', artifactKey: 'x', createdAt: now, ...fields,
    });
    // What the account holds, and the most the next one may hold (grown's 3 GiB disk), past 50 GiB: refused.
    const big = await t.services.database.prisma.snapshot.create({ data: filler('big', { status: 'ready', sizeBytes: BigInt(48 * 1024) * 1048576n }) });
    const refused = await api().post('/v1/instances/grown/snapshots').set(auth()).send({ name: 'too-big', memory: false });
    expectError(refused, 409, 'L16');
    expect(refused.body.error.message).toMatch(/3072 MiB/);
    await t.services.database.prisma.snapshot.delete({ where: { id: big.id } });
    const have = await t.services.database.prisma.snapshot.count({ where: { accountId } });
    for (let i = have; i < t.services.limits.snapshotsPerAccount; i++) {
      await t.services.database.prisma.snapshot.create({ data: filler(`filler-${i}`, { status: 'failed' }) });
    }
    expectError(await api().post('/v1/instances/grown/snapshots').set(auth()).send({ name: 'one-too-many' }), 409, 'L15');
    expect(await t.services.database.prisma.snapshot.count({ where: { accountId, name: 'one-too-many' } })).toBe(0);
  });

  it('removes the account\'s snapshots\' files when the account is deleted', async () => {
    const diskOnly = snapshotIds['disk-only']!;
    expect(existsSync(join(folderOf(diskOnly), 'disk.qcow2'))).toBe(true);
    const account = (await t.services.database.prisma.account.findUnique({ where: { id: accountId } }))!;
    await t.services.deletions.request(accountId, account.email, TEST_PASSWORD);
    expect(await t.services.deletions.runDue()).toBe(1);
    expect(await t.services.database.prisma.snapshot.count({ where: { accountId } })).toBe(0);
    // 'grown' still backs onto it (its machine goes as a stray at the next start): marked, its memory gone, then swept with it.
    expect(existsSync(join(folderOf(diskOnly), 'deleted'))).toBe(true);
    await t.services.machineHost.destroy(grownId);
    expect(existsSync(folderOf(diskOnly))).toBe(false);
  });
});
