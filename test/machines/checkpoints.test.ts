// Automatic checkpoints on a real machine (minimal image, TCG): taken when the interval has passed
// and only when the guest wrote to its disk, last_checkpoint_at and an event each time, the chain
// of checkpoint layers stays bounded while files written between checkpoints all survive a cold
// boot, and a layer a fork shares is never merged away under the fork.
import { readdirSync } from 'node:fs';
import { basename, join } from 'node:path';
import { backingChain } from '../../src/compute/qemu';
import { MAX_FROZEN_LAYERS } from '../../src/compute/checkpoint-policy';
import { ensureTestImage, TEST_IMAGE_DIR as IMAGE_DIR } from '../support/images';
import { apiKeyFor, bearer, createAccount, startTestService, TestService } from '../support/harness';
import { ManualClock } from '../support/manual-clock';

jest.setTimeout(900_000);

const SSH_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMh0vbf5v3M0Kz1cl5q3lM1kP1nN7zQ0b3hVv0ZQk6d1 test@kiste';

describe('automatic checkpoints', () => {
  let t: TestService;
  let key: string;
  const clock = new ManualClock();

  beforeAll(async () => {
    await ensureTestImage();
    // Machines in a kiste-worker, as `npm start` runs them; no boot snapshot's template boots beside
    // the machines (its layers would be counted with theirs).
    t = await startTestService({ clock, compute: 'worker', env: { KISTE_IMAGE_DIR: IMAGE_DIR, KISTE_IMAGE_PROFILE: 'minimal', KISTE_BOOT_SNAPSHOTS: 'off' } });
    expect(await t.services.machineHost.refreshImage('minimal')).not.toBeNull();
    key = await apiKeyFor(t, await createAccount(t));
  });

  afterAll(async () => {
    if (!t) return;
    for (const id of await t.services.machineHost.knownMachineIds()) await t.services.machineHost.destroy(id);
    await t.close();
  });

  async function guest(id: string, script: string): Promise<string> {
    const result = await t.services.machineHost.agent(id).run({ argv: ['sh', '-c', script] });
    if (result.exit_code !== 0) throw new Error(`guest script failed (${result.exit_code}): ${result.stderr.toString()}`);
    return result.stdout.toString('utf8');
  }

  /** The machine's own layers (top first), read from the qcow2 headers. */
  async function layersOf(id: string): Promise<string[]> {
    const active = JSON.parse(require('node:fs').readFileSync(join(t.config.dataDir, 'machines', id, 'disk.json'), 'utf8')).active as string;
    const chain = await backingChain(join(t.config.dataDir, 'layers', active));
    return chain.map((layer) => layer.filename).filter((file) => file.includes('/layers/'));
  }

  const checkpoints = () => t.services.instances.checkpoints.runDue();

  it('checkpoints a changed disk each interval, keeps the chain bounded and the files intact', async () => {
    const created = await t.api.post('/v1/instances').set(bearer(key))
      .send({ profile: 'desktop', name: 'keeper', vcpu: 1, memory_mib: 512, disk_mib: 2048, ssh_public_key: SSH_KEY, auto_snapshot_seconds: 60 })
      .expect(200);
    expect(created.body).toMatchObject({ auto_snapshot_seconds: 60, last_checkpoint_at: null });
    const id = created.body.id as string;

    expect(await checkpoints()).toBe(0); // the interval has not passed
    clock.advanceSeconds(61);
    expect(await checkpoints()).toBe(1); // a fresh boot counts as changed
    const first = await t.api.get('/v1/instances/keeper').set(bearer(key)).expect(200);
    expect(first.body.last_checkpoint_at).toBe(clock.now().toISOString());
    expect(await layersOf(id)).toHaveLength(2); // the checkpoint layer and the new top

    // Interval passed again, nothing written in between: no checkpoint, last_checkpoint_at unchanged.
    clock.advanceSeconds(61);
    expect(await checkpoints()).toBe(0);
    expect((await t.api.get('/v1/instances/keeper').set(bearer(key)).expect(200)).body.last_checkpoint_at).toBe(first.body.last_checkpoint_at);

    // A write between checkpoints makes the next one happen; the chain never grows past the bound.
    for (let round = 1; round <= MAX_FROZEN_LAYERS + 3; round++) {
      await guest(id, `echo round-${round} > /root/round-${round} && sync`);
      clock.advanceSeconds(61);
      expect(await checkpoints()).toBe(1);
      expect((await layersOf(id)).length).toBeLessThanOrEqual(MAX_FROZEN_LAYERS + 1);
    }
    expect(readdirSync(join(t.config.dataDir, 'layers')).length).toBeLessThanOrEqual(MAX_FROZEN_LAYERS + 1); // merged layers are deleted
    // and its QEMU's view of the layers folder (hard links) holds exactly its chain, no merged layer
    expect(readdirSync(join(t.config.dataDir, 'machines', id, 'layers')).sort()).toEqual((await layersOf(id)).map((file) => basename(file)).sort());
    const got = await t.api.get('/v1/instances/keeper').set(bearer(key)).expect(200);
    expect(got.body.last_checkpoint_at).toBe(clock.now().toISOString());

    const events = await t.services.database.prisma.event.findMany({ where: { resourceId: id, type: 'instance.checkpointed' }, orderBy: { sequence: 'asc' } });
    expect(events).toHaveLength(MAX_FROZEN_LAYERS + 4);

    // A cold boot opens the compacted chain: every round's file is there.
    const restarted = await t.api.post('/v1/instances/keeper/restart').set(bearer(key));
    expect([200, 202]).toContain(restarted.status);
    await waitForRunning('keeper');
    const files = await guest(id, 'cat /root/round-*');
    expect(files.trim().split('\n')).toEqual(Array.from({ length: MAX_FROZEN_LAYERS + 3 }, (_, i) => `round-${i + 1}`).sort());
  });

  it('never merges a layer a fork shares; the fork keeps what it was forked from', async () => {
    const source = await t.api.get('/v1/instances/keeper').set(bearer(key)).expect(200);
    const sourceId = source.body.id as string;
    await guest(sourceId, 'echo before-fork > /root/before-fork && sync');
    const fork = await t.api.post('/v1/instances/keeper/fork').set(bearer(key)).send({ name: 'copy' });
    if (fork.status !== 200) throw new Error(JSON.stringify(fork.body));
    const shared = (await layersOf(fork.body.id)).filter((file) => (file.split('/').pop() ?? '').startsWith(sourceId));
    expect(shared.length).toBeGreaterThan(0);

    for (let round = 1; round <= MAX_FROZEN_LAYERS + 2; round++) {
      await guest(sourceId, `echo after-${round} > /root/after-${round} && sync`);
      clock.advanceSeconds(61);
      await checkpoints();
    }
    const sourceLayers = await layersOf(sourceId);
    for (const file of shared) expect(sourceLayers).toContain(file); // still in both chains, not merged away
    expect(sourceLayers.length).toBeLessThanOrEqual(MAX_FROZEN_LAYERS + 1 + shared.length);
    expect((await guest(fork.body.id, 'cat /root/before-fork; ls /root')).split('\n')).toEqual(expect.arrayContaining(['before-fork']));
    expect(await guest(fork.body.id, 'ls /root | grep -c after- || true')).toBe('0\n');

    // The source boots cold from its compacted chain with the shared layer in it.
    const restarted = await t.api.post('/v1/instances/keeper/restart').set(bearer(key));
    expect([200, 202]).toContain(restarted.status);
    await waitForRunning('keeper');
    expect((await guest(sourceId, 'cat /root/after-*')).trim().split('\n')).toHaveLength(MAX_FROZEN_LAYERS + 2);
    expect((await guest(fork.body.id, 'cat /root/before-fork')).trim()).toBe('before-fork');
  });

  async function waitForRunning(name: string): Promise<void> {
    for (let waited = 0; ; waited += 1000) {
      const got = await t.api.get(`/v1/instances/${name}`).set(bearer(key)).expect(200);
      if (got.body.status === 'running' && !t.services.instances.operations.pending().length) return;
      if (got.body.status === 'error' || waited > 240_000) throw new Error(`${name} did not come back: ${JSON.stringify(got.body)}`);
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  }
});
