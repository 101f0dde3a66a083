// POST /v1/instances refusals that come before any machine work: schema ranges (P01), the SSH key
// (A12), unknown image (K20) and environment (K30), the account limits (L02 machines, L03 running at
// once, L04 disk, L08 shape), a taken name (K02), and an image that is not built yet (K06). Each one
// answers the error envelope with the registry's code, type, retryable flag and hint, names the
// field where there is one, and leaves nothing behind: no instance row, no event, no machine files.
// No machine boots here: the account's footprint is raised with rows written to the database.
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { ERRORS, ErrorCode } from '../../src/generated/errors';
import type { Account } from '../../src/store/accounts';
import { ensureTestImage, TEST_IMAGE_DIR } from '../support/images';
import { apiKeyFor, bearer, createAccount, startTestService, TestService } from '../support/harness';

jest.setTimeout(600_000);

const SSH_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMh0vbf5v3M0Kz1cl5q3lM1kP1nN7zQ0b3hVv0ZQk6d1 test@kiste';
const VALID = { profile: 'desktop', vcpu: 1, memory_mib: 768, disk_mib: 2048, ssh_public_key: SSH_KEY };

interface Refusal {
  status: number;
  code: ErrorCode;
  param?: string | null;
}

/** Checks the envelope against the registry; returns the error for more specific checks. */
function expectRefusal(res: { status: number; body: any; headers: Record<string, string> }, want: Refusal) {
  if (res.status !== want.status) throw new Error(`expected ${want.status} ${want.code}, got ${res.status} ${JSON.stringify(res.body)}`);
  const entry = ERRORS[want.code];
  const { error } = res.body;
  expect(error).toMatchObject({ code: want.code, type: entry.type, retryable: entry.retryable });
  expect(error.message).toMatch(new RegExp(`\\(code: ${want.code}\\)$`));
  expect(typeof error.hint).toBe('string');
  expect(error.hint.length).toBeGreaterThan(0);
  if (want.param !== undefined) expect(error.param).toBe(want.param);
  if (entry.retryAfterSeconds !== null) expect(res.headers['retry-after']).toBe(String(entry.retryAfterSeconds));
  return error as { hint: string; message: string; param: string | null };
}

describe('create refusals before any boot', () => {
  let t: TestService;
  let account: Account;
  let key: string;

  /** Writes instance rows straight to the database: the account's footprint without machines. */
  async function insertRows(count: number, fields: { status: string; desiredState: string; diskMib?: number; name?: string }) {
    for (let i = 0; i < count; i++) {
      await t.services.database.prisma.instance.create({
        data: {
          id: randomUUID(),
          accountId: account.id,
          name: fields.name ?? `filler-${randomUUID().slice(0, 8)}`,
          image: 'universal',
          imageProfile: 'minimal',
          artifactKey: 'filler',
          status: fields.status,
          desiredState: fields.desiredState,
          vcpu: 1,
          memoryMib: 768,
          diskMib: fields.diskMib ?? 2048,
          sshPublicKey: SSH_KEY,
          guestHostname: fields.name ?? 'filler',
        },
      });
    }
  }

  async function stored() {
    const prisma = t.services.database.prisma;
    return {
      rows: (await prisma.instance.findMany({ where: { accountId: account.id }, select: { id: true } })).map((row) => row.id).sort(),
      created: await prisma.event.count({ where: { accountId: account.id, type: 'instance.created' } }),
      machines: await t.services.machineHost.knownMachineIds(),
      layers: readdirSync(join(t.config.dataDir, 'layers')),
    };
  }

  /** POSTs the create body, checks the refusal, and that the stored state is what it was before. */
  async function refuse(body: Record<string, unknown>, want: Refusal) {
    const before = await stored();
    const res = await t.api.post('/v1/instances').set(bearer(key)).send(body);
    const error = expectRefusal(res, want);
    expect(await stored()).toEqual(before);
    expect(before.machines).toEqual([]);
    expect(before.layers).toEqual([]);
    return error;
  }

  beforeAll(async () => {
    await ensureTestImage();
    t = await startTestService({ env: { KISTE_IMAGE_DIR: TEST_IMAGE_DIR, KISTE_IMAGE_PROFILE: 'minimal' } });
    expect(await t.services.machineHost.refreshImage('minimal')).not.toBeNull();
  });

  beforeEach(async () => {
    account = await createAccount(t);
    key = await apiKeyFor(t, account);
  });

  afterAll(async () => {
    await t?.close();
  });

  it('refuses out-of-range fields with P01 naming the field', async () => {
    const cases: Array<[string, number]> = [
      ['vcpu', 0],
      ['vcpu', 257],
      ['memory_mib', 255],
      ['memory_mib', 4194305],
      ['disk_mib', 1023],
      ['disk_mib', 16777217],
      ['ttl_seconds', 59],
      ['ttl_seconds', 2592001],
      ['auto_snapshot_seconds', 59],
      ['auto_snapshot_seconds', 86401],
    ];
    for (const [field, value] of cases) {
      const error = await refuse({ ...VALID, [field]: value }, { status: 400, code: 'P01', param: field });
      expect(error.message).toContain(field);
    }
    await refuse({ ...VALID, vcpu: 1.5 }, { status: 400, code: 'P01', param: 'vcpu' });
    await refuse({ ...VALID, profile: 'minimal' }, { status: 400, code: 'P01', param: 'profile' });
    await refuse({ ...VALID, colour: 'blue' }, { status: 400, code: 'P01', param: 'colour' });
    const { ssh_public_key: _, ...withoutKey } = VALID;
    await refuse(withoutKey, { status: 400, code: 'P01', param: 'ssh_public_key' });
  });

  it('refuses an SSH key it cannot read with A12', async () => {
    for (const bad of ['not a key', 'ssh-ed25519 not-base64!!', 'ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAIMh0vbf5v3M0Kz1cl5q3lM1kP1nN7zQ0b3hVv0ZQk6d1']) {
      const error = await refuse({ ...VALID, ssh_public_key: bad }, { status: 422, code: 'A12', param: 'ssh_public_key' });
      expect(error.hint).toBe(ERRORS.A12.hint);
    }
  });

  it('refuses an unknown image (K20) and an unknown environment (K30)', async () => {
    const image = await refuse({ ...VALID, image: 'no-such-image' }, { status: 404, code: 'K20', param: 'image' });
    expect(image.message).toContain('no-such-image');
    expect(image.hint).toBe(ERRORS.K20.hint);
    const environment = await refuse({ ...VALID, environment: 'no-such-env' }, { status: 404, code: 'K30', param: 'environment' });
    expect(environment.message).toContain('no-such-env');
    expect(environment.hint).toBe(ERRORS.K30.hint);
  });

  it('refuses a shape above the per-machine limits with L08', async () => {
    const limits = t.services.limits;
    const vcpu = await refuse({ ...VALID, vcpu: limits.vcpuPerMachine + 1 }, { status: 403, code: 'L08', param: 'vcpu' });
    expect(vcpu.message).toContain(String(limits.vcpuPerMachine));
    expect(vcpu.hint).toBe(ERRORS.L08.hint);
    // One MiB over the limit: the host check (L13) that runs first needs this much free memory.
    const memory = await refuse({ ...VALID, memory_mib: limits.memoryMibPerMachine + 1 }, { status: 403, code: 'L08', param: 'memory_mib' });
    expect(memory.message).toContain(String(limits.memoryMibPerMachine));
  });

  it('refuses the machine after the last allowed one with L02', async () => {
    await insertRows(t.services.limits.machines, { status: 'stopped', desiredState: 'stopped' });
    const error = await refuse(VALID, { status: 403, code: 'L02', param: null });
    expect(error.message).toContain(String(t.services.limits.machines));
    expect(error.hint).toBe(ERRORS.L02.hint);
  });

  it('refuses a machine beyond the running-at-once limit with L03 (stopped machines do not count)', async () => {
    await insertRows(t.services.limits.runningMachines, { status: 'running', desiredState: 'running' });
    await insertRows(2, { status: 'stopped', desiredState: 'stopped' });
    const error = await refuse(VALID, { status: 403, code: 'L03', param: null });
    expect(error.message).toContain(String(t.services.limits.runningMachines));
    expect(error.hint).toBe(ERRORS.L03.hint);
  });

  it('refuses a disk that would pass the account allowance with L04', async () => {
    const total = t.services.limits.diskMibTotal;
    await insertRows(3, { status: 'stopped', desiredState: 'stopped', diskMib: 100_000 });
    const error = await refuse({ ...VALID, disk_mib: total - 300_000 + 1 }, { status: 403, code: 'L04', param: 'disk_mib' });
    expect(error.message).toContain('300000 MiB are in use');
    expect(error.hint).toBe(ERRORS.L04.hint);
  });

  it('refuses a name the account already uses with K02', async () => {
    await insertRows(1, { status: 'stopped', desiredState: 'stopped', name: 'taken' });
    const error = await refuse({ ...VALID, name: 'taken' }, { status: 409, code: 'K02', param: 'name' });
    expect(error.hint).toBe(ERRORS.K02.hint);
  });
});

describe('create while the image is not built yet', () => {
  let t: TestService;
  let key: string;
  let emptyImages: string;

  beforeAll(async () => {
    emptyImages = mkdtempSync(join(tmpdir(), 'kiste-no-images-'));
    t = await startTestService({ env: { KISTE_IMAGE_DIR: emptyImages, KISTE_IMAGE_PROFILE: 'minimal' } });
    expect(await t.services.machineHost.refreshImage('minimal')).toBeNull();
    key = await apiKeyFor(t, await createAccount(t));
  });

  afterAll(async () => {
    await t?.close();
    rmSync(emptyImages, { recursive: true, force: true });
  });

  it('answers a retryable 503 K06 with a hint, and stores nothing', async () => {
    const res = await t.api.post('/v1/instances').set(bearer(key)).send(VALID);
    const error = expectRefusal(res, { status: 503, code: 'K06', param: null });
    expect(error.hint).toBe(ERRORS.K06.hint);
    expect(res.headers['retry-after']).toBe('30');

    // While the start-up build runs it reports its step (as src/image-preparation.ts does): the message names it.
    t.services.compute.inProcess!.machineHost.setBuildState('minimal', { state: 'building', step: '2/7 root filesystem', error: null });
    const building = expectRefusal(await t.api.post('/v1/instances').set(bearer(key)).send(VALID), { status: 503, code: 'K06' });
    expect(building.message).toContain('still being built (step 2/7 root filesystem)');
    expect(building.hint).toBe(ERRORS.K06.hint);

    // A failed build says why; a later build may still succeed, so it stays retryable.
    t.services.compute.inProcess!.machineHost.setBuildState('minimal', { state: 'failed', step: null, error: 'mmdebstrap exited with status 1' });
    const failed = expectRefusal(await t.api.post('/v1/instances').set(bearer(key)).send(VALID), { status: 503, code: 'K06' });
    expect(failed.message).toContain('mmdebstrap exited with status 1');

    expect(await t.services.database.prisma.instance.count()).toBe(0);
    expect(await t.services.database.prisma.event.count({ where: { type: 'instance.created' } })).toBe(0);
    expect(await t.services.machineHost.knownMachineIds()).toEqual([]);
  });
});
