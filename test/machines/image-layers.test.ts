// Private images with Debian packages outside the universal image, on the real minimal image: the
// derived layer is built in a builder machine (apt from Debian's mirror; `hello` on SQLite, `figlet` on PostgreSQL), its progress and log are
// readable, a machine created from it runs the package's program, an identical selection reuses the
// cached layer, and a package that does not exist fails with the reason and the log's tail.
import { rmSync } from 'node:fs';
import { lookup } from 'node:dns/promises';
import { join } from 'node:path';
import { classifyAddress } from '../../src/net/special-addresses';
import { ensureTestImage, TEST_IMAGE_DIR } from '../support/images';
import { guestRun } from '../support/guest';
import { apiKeyFor, bearer, createAccount, startTestService, TestService } from '../support/harness';

jest.setTimeout(1_800_000);

// One package per database project: each run builds its own layer (the other project's may be in use).
const PACKAGE = process.env.KISTE_TEST_DB === 'postgres'
  ? { name: 'figlet', run: 'figlet -f standard -w 200 kiste | grep -c .', out: /^[1-9]\d*$/ }
  : { name: 'hello', run: 'hello', out: /^Hello, world!$/ };
const SSH_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMh0vbf5v3M0Kz1cl5q3lM1kP1nN7zQ0b3hVv0ZQk6d1 test@kiste';

describe('derived image layers', () => {
  let t: TestService;
  let key: string;
  const auth = () => bearer(key);

  async function settled(id: string) {
    const deadline = Date.now() + 1_500_000;
    for (;;) {
      const image = (await t.api.get(`/v1/images/${id}`).set(auth()).expect(200)).body;
      if (image.status !== 'building' || Date.now() > deadline) return image;
      await new Promise((resolve) => setTimeout(resolve, 2000));
    }
  }

  beforeAll(async () => {
    // The mirror is the public host the builder installs from; where it sits at a special address
    // (this host's network), the test allows it as an operator of such a network would.
    const mirror = (await lookup('deb.debian.org', { family: 4 })).address;
    const allow = classifyAddress(mirror).public ? '' : `${mirror}/32`;
    await ensureTestImage();
    t = await startTestService({ env: { KISTE_IMAGE_DIR: TEST_IMAGE_DIR, KISTE_IMAGE_PROFILE: 'minimal', KISTE_MACHINE_EGRESS_ALLOW: allow }, compute: 'worker' });
    expect(await t.services.machineHost.refreshImage('minimal')).not.toBeNull();
    key = await apiKeyFor(t, await createAccount(t));
  });

  afterAll(async () => {
    if (!t) return;
    await t.services.imageBuilds.settled();
    for (const id of await t.services.machineHost.knownMachineIds()) await t.services.machineHost.destroy(id);
    await t.close();
  });

  it('builds a Debian package into a layer a machine starts from, and reuses it for the same selection', async () => {
    // A layer of this selection from an earlier run on this machine would be found, not built: it goes first.
    const selection = { components: [{ id: `deb:${PACKAGE.name}`, version: 'latest' }] };
    const resolved = (await t.api.post('/v1/images/resolve').set(auth()).send(selection).expect(200)).body;
    const served = (await t.api.get('/v1/runtime/image').set(auth()).expect(200)).body.image_version;
    rmSync(join(TEST_IMAGE_DIR, served, 'layers', resolved.image.artifact_key), { recursive: true, force: true });

    const started = Date.now();
    const created = await t.api.post('/v1/images').set(auth()).send({ name: 'with-hello', ...selection }).expect(200);
    expect(created.body).toMatchObject({ status: 'building', build_strategy: 'derived_layer', build: { packages: [PACKAGE.name] }, artifact_key: resolved.image.artifact_key });
    const refused = await t.api.post('/v1/instances').set(auth())
      .send({ profile: 'desktop', name: 'too-early', vcpu: 1, memory_mib: 768, disk_mib: 2048, ssh_public_key: SSH_KEY, image: 'with-hello' }).expect(409);
    expect(refused.body.error.code).toBe('K27');

    const built = await settled(created.body.id);
    const buildMs = Date.now() - started;
    expect(built).toMatchObject({ status: 'ready', build: { progress_percent: 100, error: null } });
    expect(built.build.packages).toEqual([expect.stringMatching(new RegExp(`^${PACKAGE.name}=\\d`))]);
    const log = (await t.api.get(`/v1/images/${created.body.id}/build-log`).set(auth()).expect(200)).body;
    expect(log.log).toContain('apt-get install');
    expect(log.log).toContain(`Setting up ${PACKAGE.name}`);
    // eslint-disable-next-line no-console
    console.log(`derived layer (deb:${PACKAGE.name}) built in ${buildMs} ms`);

    // The layer's file system spans the builder's disk: a smaller disk is refused, the recommended one fits.
    const small = await t.api.post('/v1/instances').set(auth())
      .send({ profile: 'desktop', name: 'hello-small', vcpu: 1, memory_mib: 768, disk_mib: 2048, ssh_public_key: SSH_KEY, image: 'with-hello' }).expect(422);
    expect(small.body.error).toMatchObject({ code: 'K29', param: 'disk_mib' });
    const diskMib = resolved.recommended_resources.disk_mib as number;
    expect(diskMib).toBeGreaterThan(2048);
    const instance = await t.api.post('/v1/instances').set(auth())
      .send({ profile: 'desktop', name: 'hello-one', vcpu: 1, memory_mib: 768, disk_mib: diskMib, ssh_public_key: SSH_KEY, image: 'with-hello' }).expect(200);
    expect(instance.body).toMatchObject({ image: 'with-hello', artifact_key: created.body.artifact_key });
    const run = await guestRun(t, instance.body.id, `${PACKAGE.run}; cat /etc/hostname; test -s /etc/ssh/ssh_host_ed25519_key && echo host-key`);
    const [output, hostname, hostKey] = run.stdout.trim().split('\n');
    expect(output).toMatch(PACKAGE.out);
    expect([hostname, hostKey]).toEqual(['hello-one', 'host-key']);

    const again = await t.api.post('/v1/images').set(auth()).send({ name: 'hello-again', ...selection }).expect(200);
    expect(again.body.artifact_key).toBe(created.body.artifact_key);
    const reused = await settled(again.body.id);
    expect(reused.status).toBe('ready');
    expect((await t.api.get(`/v1/images/${again.body.id}/build-log`).set(auth()).expect(200)).body.log).toContain('built before');
    const events = (await t.api.get('/v1/events?after=0&limit=200').set(auth()).expect(200)).body.data as { type: string; data: { status: string } }[];
    expect(events.filter((e) => e.type === 'image.built').map((e) => e.data.status)).toEqual(['ready', 'ready']);
  });

  it('reports a package that cannot be installed', async () => {
    const created = await t.api.post('/v1/images').set(auth()).send({ name: 'broken', components: [{ id: 'deb:kiste-no-such-package', version: 'latest' }] }).expect(200);
    const failed = await settled(created.body.id);
    expect(failed.status).toBe('failed');
    expect(failed.build.error).toContain('apt-get failed');
    expect(failed.build.error).toContain('Unable to locate package kiste-no-such-package');
    const refused = await t.api.post('/v1/instances').set(auth())
      .send({ profile: 'desktop', name: 'from-broken', vcpu: 1, memory_mib: 768, disk_mib: 2048, ssh_public_key: SSH_KEY, image: 'broken' }).expect(409);
    expect(refused.body.error).toMatchObject({ code: 'K27' });
    expect(refused.body.error.message).toContain('failed to build');
  });
});
