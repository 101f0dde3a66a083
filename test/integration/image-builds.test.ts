// The build queue of derived layers, with the machine host's part stood in for (a real builder is
// booted by test/machines/image-layers.test.ts): one builder at a time, queued images show it, an
// image deleted while it waits boots no builder, and the outcome lands on the row with its event.
import { randomUUID } from 'node:crypto';
import type { BuiltLayer, LayerBuildRequest } from '../../src/compute/layer-builder';
import { systemClock } from '../../src/domain/clock';
import { ImageBuilds } from '../../src/domain/image-builds';
import { Images } from '../../src/domain/images';
import { ImageStore } from '../../src/store/images';
import type { Account } from '../../src/store/prisma';
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
    const builds = new ImageBuilds(t.services.database.prisma, new ImageStore(t.services.database.prisma), {
      profile: 'minimal',
      diskMib: () => 704,
      async buildLayer(request): Promise<BuiltLayer> {
        requests.push(request);
        request.onLog(`Setting up ${request.packages[0]}\n`);
        if (requests.length === 1) await firstMayFinish;
        return { disk: '/nowhere/disk.qcow2', packages: request.packages.map((p) => `${p}=1.0-1`), virtualBytes: 2752 * 1024 * 1024 };
      },
    }, systemClock, { warn() {} });
    const [first, second, third] = [await buildingImage('one'), await buildingImage('two'), await buildingImage('three')];
    for (const image of [first, second, third]) builds.build(image);
    await new Promise((resolve) => setTimeout(resolve, 200));
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
    const builds = new ImageBuilds(db, store, {
      profile: 'minimal',
      diskMib: () => 704,
      buildLayer(request): Promise<BuiltLayer> {
        started.push(request.key);
        if (request.key === 'key-after') return Promise.resolve({ disk: '/nowhere/disk.qcow2', packages: ['after=1'], virtualBytes: 1 });
        // runs until it is cancelled, as the layer builder does once its builder machine is removed
        return new Promise((_, reject) => request.signal!.addEventListener('abort', () => reject(new Error('the build was cancelled'))));
      },
    }, systemClock, { warn: (object) => warnings.push(object) });
    const images = new Images(db, store, { currentImage: () => null, manifest: () => null }, builds, systemClock);
    const [doomed, after] = [await buildingImage('doomed'), await buildingImage('after')];
    builds.build(doomed);
    builds.build(after);
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
});
