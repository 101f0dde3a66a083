// Images on the real minimal image (built here) and a real guest: the component catalogue read from
// the built image's manifest, resolving (dependencies, exact versions, content hashes, errors, nothing
// saved), a private image of universal components ready at once and used by an instance (whose
// programs run), lookup by id, slug and name, deletion rules (K21 in use, K22 built-in), the
// runtime image with its release notes, and update_available.
import { readLatestImage } from '../../images';
import { ensureTestImage, TEST_IMAGE_DIR } from '../support/images';
import { guestRun } from '../support/guest';
import { apiKeyFor, bearer, createAccount, startTestService, TestService } from '../support/harness';
import { insertInstance } from '../support/instance-rows';
import type { Account } from '../../src/store/accounts';

jest.setTimeout(900_000);

const SSH_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMh0vbf5v3M0Kz1cl5q3lM1kP1nN7zQ0b3hVv0ZQk6d1 test@kiste';

describe('images', () => {
  let t: TestService;
  let account: Account;
  let key: string;
  let packages: Map<string, string>;
  let version: string;
  const auth = () => bearer(key);

  beforeAll(async () => {
    await ensureTestImage();
    t = await startTestService({ env: { KISTE_IMAGE_DIR: TEST_IMAGE_DIR, KISTE_IMAGE_PROFILE: 'minimal' }, compute: 'worker' });
    expect(await t.services.machineHost.refreshImage('minimal')).not.toBeNull();
    const latest = (await readLatestImage(TEST_IMAGE_DIR, 'minimal'))!;
    version = latest.manifest.version;
    packages = new Map(latest.manifest.packages.map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]));
    account = await createAccount(t);
    key = await apiKeyFor(t, account);
  });

  afterAll(async () => {
    if (!t) return;
    for (const id of await t.services.machineHost.knownMachineIds()) await t.services.machineHost.destroy(id);
    await t.close();
  });

  it('lists the components the served image holds, with versions and sizes read from it', async () => {
    const res = await t.api.get('/v1/image-components?limit=100').set(auth()).expect(200);
    const byId = new Map<string, any>(res.body.data.map((c: { id: string }) => [c.id, c]));
    expect(byId.get('git')).toMatchObject({ object: 'image_component', versions: [packages.get('git')], default_version: packages.get('git') });
    expect(byId.get('node')).toMatchObject({ default_version: packages.get('nodejs') });
    expect(byId.get('node').estimated_size_mib).toBeGreaterThan(10); // nodejs with libnode
    expect(byId.get('openssh-server').requires).toEqual(['openssh-client']);
    expect(byId.has('xfce-desktop')).toBe(false); // not in the minimal image
  });

  it('resolves a selection: exact versions, dependencies, content hashes, resources; nothing saved', async () => {
    const res = await t.api.post('/v1/images/resolve').set(auth())
      .send({ components: [{ id: 'openssh-server', version: packages.get('openssh-server') }], resources: { vcpu: 2, memory_mib: 2048, disk_mib: 8192 } }).expect(200);
    expect(res.body.added_dependencies).toEqual(['openssh-client']);
    expect(res.body.components).toEqual(expect.arrayContaining([
      expect.objectContaining({ id: 'openssh-server', requested: true, content_hash: expect.stringMatching(/^sha256:[0-9a-f]{64}$/) }),
      expect.objectContaining({ id: 'openssh-client', requested: false, version: packages.get('openssh-client') }),
    ]));
    expect(res.body.image).toMatchObject({ build_strategy: 'universal', base_image: 'universal', os: { distribution: 'debian', version: '12', architecture: 'amd64' } });
    expect(res.body.recommended_resources).toEqual({ vcpu: 2, memory_mib: 2048, disk_mib: 8192 });
    const universal = (await t.api.get('/v1/images/universal').set(auth()).expect(200)).body;
    expect(res.body.image.artifact_key).toBe(universal.artifact_key);

    const derived = await t.api.post('/v1/images/resolve').set(auth()).send({ components: [{ id: 'deb:cowsay', version: 'latest' }] }).expect(200);
    expect(derived.body.image.build_strategy).toBe('derived_layer');
    expect(derived.body.image.artifact_key).not.toBe(universal.artifact_key);

    const errors: [object, number, string, string][] = [
      [{ components: [{ id: 'cobol', version: '1' }] }, 422, 'K23', 'components[0].id'],
      [{ components: [{ id: 'git', version: '0.1' }] }, 422, 'K24', 'components[0].version'],
      [{ components: [{ id: 'git', version: packages.get('git')! }, { id: 'git', version: '0.1' }] }, 422, 'K25', 'components[1].version'],
      [{ components: [{ id: 'deb:--reinstall', version: 'latest' }] }, 422, 'K23', 'components[0].id'],
      [{ from: 'nope' }, 404, 'K20', 'from'],
    ];
    for (const [body, status, code, param] of errors) {
      const refused = await t.api.post('/v1/images/resolve').set(auth()).send(body).expect(status);
      expect(refused.body.error).toMatchObject({ code, param });
    }
    expect((await t.api.get('/v1/images').set(auth()).expect(200)).body.data.map((i: { id: string }) => i.id)).toEqual(['universal']);
  });

  it('a private image of universal components is ready at once, an instance uses it, and it cannot go while used', async () => {
    const created = await t.api.post('/v1/images').set(auth()).send({
      name: 'Node Tools', components: [{ id: 'node', version: packages.get('nodejs') }, { id: 'git', version: packages.get('git') }],
    }).expect(200);
    expect(created.body).toMatchObject({ name: 'Node Tools', slug: 'node-tools', builtin: false, status: 'ready', build: null, build_strategy: 'universal' });
    for (const ref of [created.body.id, 'node-tools', 'Node Tools']) {
      expect((await t.api.get(`/v1/images/${encodeURIComponent(ref)}`).set(auth()).expect(200)).body.id).toBe(created.body.id);
    }
    expect((await t.api.post('/v1/images').set(auth()).send({ name: 'node tools' }).expect(409)).body.error).toMatchObject({ code: 'K28' });
    expect((await t.api.post('/v1/images').set(auth()).send({ name: 'universal' }).expect(409)).body.error).toMatchObject({ code: 'K28' });
    // Another account sees none of it.
    const otherKey = await apiKeyFor(t, await createAccount(t));
    expect((await t.api.get('/v1/images/node-tools').set(bearer(otherKey)).expect(404)).body.error.code).toBe('K20');

    const instance = await t.api.post('/v1/instances').set(auth())
      .send({ profile: 'desktop', name: 'img-one', vcpu: 1, memory_mib: 768, disk_mib: 2048, ssh_public_key: SSH_KEY, image: 'node-tools' }).expect(200);
    expect(instance.body.image).toBe('node-tools');
    expect(instance.body.components).toEqual(expect.arrayContaining([{ id: 'git', version: packages.get('git') }, { id: 'node', version: packages.get('nodejs') }]));
    const run = await guestRun(t, instance.body.id, 'git --version && node -e "console.log(process.version)"');
    expect(run.exitCode).toBe(0);
    expect(run.stdout).toMatch(/^git version 2\.\d+.*\nv18\./);

    expect((await t.api.delete('/v1/images/node-tools').set(auth()).expect(409)).body.error.code).toBe('K21');
    expect((await t.api.delete('/v1/images/universal').set(auth()).expect(409)).body.error.code).toBe('K22');
    await t.api.delete('/v1/instances/img-one').set(auth()).expect(200);
    expect((await t.api.delete('/v1/images/node-tools').set(auth()).expect(200)).body).toEqual({ id: created.body.id, object: 'image', deleted: true });
    expect((await t.api.get('/v1/images/node-tools').set(auth()).expect(404)).body.error.code).toBe('K20');
    const events = (await t.api.get('/v1/events?after=0&limit=200').set(auth()).expect(200)).body.data.map((e: { type: string }) => e.type);
    expect(events).toEqual(expect.arrayContaining(['image.created', 'image.deleted']));
  });

  it('serves the runtime image with release notes; instances on another version show an update', async () => {
    const runtime = await t.api.get('/v1/runtime/image').set(auth()).expect(200);
    expect(runtime.body).toMatchObject({ object: 'runtime_image', image_version: version });
    expect(runtime.body.release_notes.length).toBeGreaterThan(0);
    expect(runtime.body.image_version).toMatch(/^v\d{4}\.\d{2}\.\d{2}-[0-9a-f]{8}$/);
    const current = await insertInstance(t, account, 'on-current', 'stopped', { imageVersion: version });
    const older = await insertInstance(t, account, 'on-older', 'stopped', { imageVersion: 'v2026.01.01-00000000' });
    const list = (await t.api.get('/v1/instances').set(auth()).expect(200)).body.data as { id: string; update_available: boolean; latest_image_version: string }[];
    expect(list.find((i) => i.id === current.id)).toMatchObject({ update_available: false, latest_image_version: version });
    expect(list.find((i) => i.id === older.id)).toMatchObject({ update_available: true, latest_image_version: version });
  });
});
