// Old image versions go once nothing needs them: not a profile's latest, not under a machine's disk,
// past the grace period. Real folders; the host-level part reads real qcow2 chains.
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pruneImageVersions } from '../../images';
import { createDisk, createOverlay } from '../../src/compute/qemu';
import { testJail } from '../support/jail';
import { QemuMachineHost } from '../../src/compute/qemu-machine-host';

const HOUR = 3600_000;
const now = new Date('2026-11-21T12:00:00Z');

function addVersion(dir: string, version: string, createdAt: Date): void {
  mkdirSync(join(dir, version));
  writeFileSync(join(dir, version, 'manifest.json'), JSON.stringify({ version, profile: 'minimal', created_at: createdAt.toISOString() }));
}

describe('image version pruning', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'kiste-prune-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('keeps the latest of each profile, versions in use and recent ones; removes the rest', async () => {
    addVersion(dir, 'v2026.11.01-aaaaaaaa', new Date(now.getTime() - 480 * HOUR)); // old, unused
    addVersion(dir, 'v2026.11.02-bbbbbbbb', new Date(now.getTime() - 450 * HOUR)); // old, a disk backs onto it
    addVersion(dir, 'v2026.11.20-cccccccc', new Date(now.getTime() - 20 * HOUR)); // latest minimal
    addVersion(dir, 'v2026.11.20-dddddddd', new Date(now.getTime() - 20 * HOUR)); // latest desktop
    addVersion(dir, 'v2026.11.21-eeeeeeee', new Date(now.getTime() - 10 * 60_000)); // within the grace period
    mkdirSync(join(dir, 'cache'));
    writeFileSync(join(dir, 'latest.json'), JSON.stringify({
      minimal: { version: 'v2026.11.20-cccccccc' }, desktop: { version: 'v2026.11.20-dddddddd' },
    }));
    const removed = await pruneImageVersions(dir, { inUse: new Set(['v2026.11.02-bbbbbbbb']), now });
    expect(removed).toEqual(['v2026.11.01-aaaaaaaa']);
    for (const kept of ['v2026.11.02-bbbbbbbb', 'v2026.11.20-cccccccc', 'v2026.11.20-dddddddd', 'v2026.11.21-eeeeeeee', 'cache']) {
      expect(existsSync(join(dir, kept))).toBe(true);
    }
    expect(existsSync(join(dir, '.lock'))).toBe(false); // the build lock is released
  });

  it('the machine host keeps every version a disk chain reaches, through checkpoint layers', async () => {
    const images = join(dir, 'images');
    const dataDir = join(dir, 'data');
    mkdirSync(images);
    const old = 'v2026.10.01-11111111';
    const unused = 'v2026.10.02-22222222';
    const latest = 'v2026.11.20-33333333';
    for (const version of [old, unused, latest]) {
      addVersion(images, version, new Date(Date.now() - 100 * HOUR));
      await createDisk(join(images, version, 'disk.qcow2'), 16 << 20);
    }
    writeFileSync(join(images, 'latest.json'), JSON.stringify({ minimal: { version: latest } }));
    const host = new QemuMachineHost({ dataDir, imagesDir: images, accelerator: 'tcg', logger: { info: () => undefined, warn: () => undefined }, jail: testJail(dataDir, images) });
    // a machine made from the old image, checkpointed once: its chain reaches the old image two layers down
    await createOverlay(join(images, old, 'disk.qcow2'), join(dataDir, 'layers', 'm-0.qcow2'));
    await createOverlay(join(dataDir, 'layers', 'm-0.qcow2'), join(dataDir, 'layers', 'm-1.qcow2'));
    mkdirSync(join(dataDir, 'machines', 'm'), { recursive: true });
    writeFileSync(join(dataDir, 'machines', 'm', 'disk.json'), JSON.stringify({ active: 'm-1.qcow2', hostKeysGenerated: true }));
    await host.removeUnusedImages();
    expect(existsSync(join(images, old))).toBe(true);
    expect(existsSync(join(images, latest))).toBe(true);
    expect(existsSync(join(images, unused))).toBe(false);
  });
});
