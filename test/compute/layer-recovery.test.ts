// After the service died while putting a new top layer on a disk (checkpoint, live fork) or between
// a merge and the removal of the merged layer, the next start settles which file is the disk's top
// and removes layer files no chain uses. Real qcow2 files; no machine needs to run for this.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { testJail } from '../support/jail';
import { QemuMachineHost } from '../../src/compute/qemu-machine-host';
import { createDisk, createOverlay } from '../../src/compute/qemu';

const silent = { info: () => undefined, warn: () => undefined };

describe('disk layers after an interrupted run', () => {
  let dataDir: string;
  let host: QemuMachineHost;
  const layer = (name: string) => join(dataDir, 'layers', name);
  const state = (id: string) => JSON.parse(readFileSync(join(dataDir, 'machines', id, 'disk.json'), 'utf8'));
  const writeState = (id: string, value: object) => {
    mkdirSync(join(dataDir, 'machines', id), { recursive: true });
    writeFileSync(join(dataDir, 'machines', id, 'disk.json'), JSON.stringify(value));
  };

  beforeEach(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'kiste-layers-'));
    host = new QemuMachineHost({ dataDir, imagesDir: join(dataDir, 'images'), accelerator: 'tcg', logger: silent, jail: testJail(dataDir, join(dataDir, 'images')) });
    mkdirSync(join(dataDir, 'images'));
    await createDisk(join(dataDir, 'images', 'base.qcow2'), 16 << 20);
    await createOverlay(join(dataDir, 'images', 'base.qcow2'), layer('m-0.qcow2'));
  });
  afterEach(() => rmSync(dataDir, { recursive: true, force: true }));

  it('takes the pending layer as the top when QEMU had already switched to it', async () => {
    await createOverlay(layer('m-0.qcow2'), layer('m-1.qcow2'));
    writeState('m', { active: 'm-0.qcow2', hostKeysGenerated: true, pending: 'm-1.qcow2' });
    expect(await host.adopt('m')).toBe(false); // nothing runs
    expect(state('m')).toEqual({ active: 'm-1.qcow2', hostKeysGenerated: true });
  });

  it('keeps the old top and drops a pending layer that never became part of the chain', async () => {
    await createDisk(layer('m-1.qcow2'), 16 << 20); // a file, but not on top of m-0
    writeState('m', { active: 'm-0.qcow2', hostKeysGenerated: false, pending: 'm-1.qcow2' });
    await host.adopt('m');
    expect(state('m')).toEqual({ active: 'm-0.qcow2', hostKeysGenerated: false });
    expect(existsSync(layer('m-1.qcow2'))).toBe(false);

    writeState('m', { active: 'm-0.qcow2', hostKeysGenerated: false, pending: 'm-2.qcow2' }); // never created
    await host.adopt('m');
    expect(state('m')).toEqual({ active: 'm-0.qcow2', hostKeysGenerated: false });
  });

  it('removes layers no chain uses and keeps every layer a chain uses, shared ones included', async () => {
    await createOverlay(layer('m-0.qcow2'), layer('m-1.qcow2'));
    await createOverlay(layer('m-0.qcow2'), layer('f-0.qcow2')); // a fork sharing m-0
    await createOverlay(layer('m-0.qcow2'), layer('m-merged.qcow2')); // left behind by a merge
    writeState('m', { active: 'm-1.qcow2', hostKeysGenerated: true });
    writeState('f', { active: 'f-0.qcow2', hostKeysGenerated: true });
    await host.removeUnusedLayers();
    expect(['m-0.qcow2', 'm-1.qcow2', 'f-0.qcow2'].every((name) => existsSync(layer(name)))).toBe(true);
    expect(existsSync(layer('m-merged.qcow2'))).toBe(false);
  });

  it('removes nothing when a chain cannot be read', async () => {
    await createOverlay(layer('m-0.qcow2'), layer('stray.qcow2'));
    writeState('m', { active: 'm-0.qcow2', hostKeysGenerated: true });
    writeState('broken', { active: 'missing.qcow2', hostKeysGenerated: true });
    await host.removeUnusedLayers(); // the service still starts
    expect(existsSync(layer('stray.qcow2'))).toBe(true);
  });
});
