// The build queue of derived layers, with the machine host's part stood in for (a real builder is
// booted by test/machines/image-layers.test.ts): one builder at a time, queued images show it, an
// image deleted while it waits boots no builder, and the outcome lands on the row with its event;
// accounts take turns in the queue, and an account's builds queued or running are capped (409 L11)
// also when its creates arrive at once.
import { randomUUID } from 'node:crypto';
import type { BuiltLayer, LayerBuildRequest } from '../../src/compute/layer-builder';
import { systemClock } from '../../src/domain/clock';
import { IMAGE_BUILDS_PER_ACCOUNT, ImageBuilds, WAITING_FOR_COMPUTE } from '../../src/domain/image-builds';
import { HostUnreachableError } from '../../src/compute/machine-host';
import { KisteError } from '../../src/errors';
import { Images } from '../../src/domain/images';
import { ImageStore } from '../../src/store/images';
import { PrismaTransactions } from '../../src/store/transactions';
import type { Account } from '../../src/store/accounts';
import { createAccount, startTestService, TestService } from '../support/harness';

describe('derived layer build queue', () => {
  let t: TestService;
  let account: Account;

  beforeAll(async () => {
    t = await startTestService();
    account = await createAccount(t);
  });
  afterAll(() => t.close());

  async function buildingImage(name: string) {
    return t.services.database.prisma.image.create({
      data: {
        id: randomUUID(), accountId: account.id, name, slug: name, baseImage: 'universal', components: [{ id: `deb:${name}`, version: 'latest' }],
        buildStrategy: 'derived_layer', status: 'building', artifactKey: `key-${name}`, baseVersion: 'v2026.01.01-00000000', buildPackages: [name],
      },
    });
  }

  it('builds one layer at a time, skips an image deleted while it waited, and records the outcome', async () => {
    const requests: LayerBuildRequest[] = [];
    let release!: () => void;
    const firstMayFinish = new Promise<void>((resolve) => (release = resolve));
    const builds = new ImageBuilds(new PrismaTransactions(t.services.database.prisma), new ImageStore(t.services.database.prisma), {
      profile: 'minimal',
      diskMib: async () => 704,
      async buildLayer(request): Promise<BuiltLayer> {
        requests.push(request);
        request.onLog(`Setting up ${request.packages[0]}\n`);
        if (requests.length === 1) await firstMayFinish;
        return { packages: request.packages.map((p) => `${p}=1.0-1`), virtualBytes: 2752 * 1024 * 1024 };
      },
    }, systemClock, { warn() {} });
    const [first, second, third] = [await buildingImage('one'), await buildingImage('two'), await buildingImage('three')];
    for (const image of [first, second, third]) builds.build(image);
    // By the clock, not a fixed pause: the first build reaches the host after two database writes.
    for (const until = Date.now() + 10_000; requests.length === 0 && Date.now() < until;) await new Promise((resolve) => setTimeout(resolve, 20));
    await new Promise((resolve) => setTimeout(resolve, 200)); // time for a second build to start, were it let
    expect(requests.map((r) => r.key)).toEqual(['key-one']); // the others wait their turn
    expect((await t.services.database.prisma.image.findUnique({ where: { id: third.id } }))?.buildStep).toBe('queued');
    await t.services.database.prisma.image.delete({ where: { id: second.id } });
    release();
    await builds.settled();
    await builds.settled(); // the queued ones ran after the first
    expect(requests.map((r) => [r.key, r.diskMib])).toEqual([['key-one', 2752], ['key-three', 2752]]);
    const done = await t.services.database.prisma.image.findUnique({ where: { id: first.id } });
    expect(done).toMatchObject({ status: 'ready', buildProgress: 100, buildPackages: ['one=1.0-1'], buildError: null });
    expect(done?.buildLog).toContain('Setting up one');
    const events = await t.services.database.prisma.event.findMany({ where: { accountId: account.id, type: 'image.built' }, orderBy: { sequence: 'asc' } });
    expect(events.map((e) => [e.resourceId, (e.data as { status: string }).status])).toEqual([[first.id, 'ready'], [third.id, 'ready']]);
  });

  it('stops the running build of an image that is deleted, and the next one in the queue starts', async () => {
    const started: string[] = [];
    const warnings: object[] = [];
    const db = t.services.database.prisma;
    const store = new ImageStore(db);
    const builds = new ImageBuilds(new PrismaTransactions(db), store, {
      profile: 'minimal',
      diskMib: async () => 704,
      buildLayer(request): Promise<BuiltLayer> {
        started.push(request.key);
        if (request.key === 'key-after') return Promise.resolve({ packages: ['after=1'], virtualBytes: 1 });
        // runs until it is cancelled, as the layer builder does once its builder machine is removed
        return new Promise((_, reject) => request.signal!.addEventListener('abort', () => reject(new Error('the build was cancelled'))));
      },
    }, systemClock, { warn: (object) => warnings.push(object) });
    const images = new Images(new PrismaTransactions(db), store, { currentImage: () => null, manifest: async () => null }, builds, systemClock);
    const [doomed, after] = [await buildingImage('doomed'), await buildingImage('after')];
    builds.build(doomed);
    builds.build(after);
    for (const until = Date.now() + 10_000; started.length === 0 && Date.now() < until;) await new Promise((resolve) => setTimeout(resolve, 20));
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(started).toEqual(['key-doomed']);

    await images.delete(account.id, 'doomed');
    await builds.settled();
    await builds.settled();
    expect(started).toEqual(['key-doomed', 'key-after']); // the queue moved on
    expect(await db.image.findUnique({ where: { id: doomed.id } })).toBeNull();
    expect((await db.image.findUnique({ where: { id: after.id } }))?.status).toBe('ready');
    const events = await db.event.findMany({ where: { accountId: account.id, resourceId: { in: [doomed.id, after.id] } }, orderBy: { sequence: 'asc' } });
    expect(events.map((e) => [e.type, e.resourceId])).toEqual([['image.deleted', doomed.id], ['image.built', after.id]]);
    expect(warnings).toEqual([]); // a cancel is no failure
  });

  /** A layer host whose builds finish only when the test lets them (`finish(key)`); builds started in order. */
  function gatedHost() {
    const started: string[] = [];
    const gates = new Map<string, () => void>();
    const host = {
      profile: 'minimal' as const,
      diskMib: async () => 704,
      async buildLayer(request: LayerBuildRequest): Promise<BuiltLayer> {
        started.push(request.key);
        await new Promise<void>((resolve) => gates.set(request.key, resolve));
        return { packages: request.packages, virtualBytes: 1 };
      },
    };
    const finish = async (key: string) => {
      while (!gates.has(key)) await new Promise((resolve) => setTimeout(resolve, 10));
      gates.get(key)!();
    };
    return { host, started, finish };
  }

  it('takes accounts in turn: one account\'s queued builds hold back another\'s by at most one of theirs', async () => {
    const db = t.services.database.prisma;
    const other = await createAccount(t);
    const { host, started, finish } = gatedHost();
    const builds = new ImageBuilds(new PrismaTransactions(db), new ImageStore(db), host, systemClock, { warn() {} }, 10);
    const mine = await Promise.all(['f1', 'f2', 'f3', 'f4', 'f5'].map((name) => buildingImage(name)));
    for (const image of mine) builds.build(image, builds.reserve(account.id));
    const theirs = { ...(await buildingImage('g1')), accountId: other.id };
    builds.build(theirs, builds.reserve(other.id));
    for (const key of ['key-f1', 'key-f2', 'key-g1', 'key-f3', 'key-f4', 'key-f5']) await finish(key);
    await builds.settled();
    expect(started).toEqual(['key-f1', 'key-f2', 'key-g1', 'key-f3', 'key-f4', 'key-f5']);
    expect(builds.count(account.id)).toBe(0);
  });

  it(`caps an account at ${IMAGE_BUILDS_PER_ACCOUNT} builds queued or running, also for creates at once; a cancelled or finished build frees its place`, async () => {
    const db = t.services.database.prisma;
    const store = new ImageStore(db);
    const { host, started, finish } = gatedHost();
    const builds = new ImageBuilds(new PrismaTransactions(db), store, host, systemClock, { warn() {} });
    const served = { profile: 'minimal' as const, version: 'v2026.01.01-00000000', artifactKey: 'base-key' };
    const manifest = { packages: [], package_sizes_kib: {}, sizes: { disk_virtual: 704 * 1048576, rootfs_used: 300 * 1048576 } };
    const images = new Images(new PrismaTransactions(db), store, { currentImage: () => served, manifest: async () => manifest as never }, builds, systemClock);
    const capped = await createAccount(t);
    const create = (name: string) => images.create(capped.id, name, { components: [{ id: `deb:${name}`, version: 'latest' }] });

    const outcomes = await Promise.allSettled(Array.from({ length: 10 }, (_, n) => create(`pkg${n}`)));
    const made = outcomes.flatMap((o) => (o.status === 'fulfilled' ? [o.value] : []));
    const refused = outcomes.flatMap((o) => (o.status === 'rejected' ? [o.reason as KisteError] : []));
    expect(made).toHaveLength(IMAGE_BUILDS_PER_ACCOUNT);
    expect(refused.map((e) => e.code)).toEqual(Array(10 - IMAGE_BUILDS_PER_ACCOUNT).fill('L11'));
    expect(await db.image.count({ where: { accountId: capped.id } })).toBe(IMAGE_BUILDS_PER_ACCOUNT); // refused ones made no image
    // Ready-at-once images (no packages outside the served image) are no builds and not capped.
    await expect(images.create(capped.id, 'plain', { components: [] })).resolves.toMatchObject({ status: 'ready' });

    // A queued build that is deleted leaves the queue and frees its place at once. Which of the
    // creates made at once runs (one build at a time) is whichever reached the queue first.
    while (started.length === 0) await new Promise((resolve) => setTimeout(resolve, 10));
    const running = made.find((image) => image.artifactKey === started[0])!;
    expect(running).toBeDefined();
    const queued = made.find((image) => image.id !== running.id)!;
    await images.delete(capped.id, queued.id);
    expect(builds.count(capped.id)).toBe(IMAGE_BUILDS_PER_ACCOUNT - 1);
    await create('pkg-next');
    await expect(create('pkg-over')).rejects.toMatchObject({ code: 'L11' });
    // A name taken gives its place back too.
    await finish(running.artifactKey);
    await new Promise((resolve) => setTimeout(resolve, 100));
    await expect(create('pkg-next')).rejects.toMatchObject({ code: 'K28' });
    await expect(create('pkg-after')).resolves.toMatchObject({ status: 'building' });
    // The rest, in the order the builder takes them (one at a time; the creates at once reached the
    // queue in no set order), until none is left.
    for (let taken = 1; builds.count(capped.id) > 0; taken++) {
      while (started.length <= taken && builds.count(capped.id) > 0) await new Promise((resolve) => setTimeout(resolve, 10));
      if (started.length > taken) await finish(started[taken]!);
    }
    expect(started).not.toContain(queued.artifactKey);
    expect(started).toHaveLength(IMAGE_BUILDS_PER_ACCOUNT + 1); // made less the deleted one, next and pkg-after
    await builds.settled();
    expect(builds.count(capped.id)).toBe(0);
  });

  it('leaves a build the compute worker went away from building, and builds it again when asked once the worker is back', async () => {
    const db = t.services.database.prisma;
    let workerUp = false;
    const builds = new ImageBuilds(new PrismaTransactions(db), new ImageStore(db), {
      profile: 'minimal',
      diskMib: async () => 704,
      async buildLayer(request): Promise<BuiltLayer> {
        if (!workerUp) throw new HostUnreachableError('BuildLayer: the compute worker is not running now');
        return { packages: request.packages.map((p) => `${p}=2.0-1`), virtualBytes: 1 };
      },
    }, systemClock, { warn() {} });
    const image = await buildingImage('while-away');
    builds.build(image);
    await builds.settled();
    const waiting = await db.image.findUnique({ where: { id: image.id } });
    expect(waiting).toMatchObject({ status: 'building', buildStep: WAITING_FOR_COMPUTE, buildError: null });
    expect(await db.event.count({ where: { resourceId: image.id, type: 'image.built' } })).toBe(0);
    workerUp = true;
    await builds.resume();
    await builds.settled();
    expect(await db.image.findUnique({ where: { id: image.id } })).toMatchObject({ status: 'ready', buildPackages: ['while-away=2.0-1'] });
  });
});
