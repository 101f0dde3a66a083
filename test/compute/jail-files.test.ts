// The jail's file rules on a real file system, as root (no QEMU): a machine's QEMU may rewrite the
// headers of its own layers and, while it starts, plant anything in its run folder. The service
// must follow no backing name outside kiste's layers and images, share with a fork only what the
// source could read, and seal the run folder to exactly what QEMU was to make.
import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LayerStore } from '../../src/compute/layers';
import { createDisk, createOverlay } from '../../src/compute/qemu';
import { machineHostFolders } from '../../src/compute/qemu-machine-host';
import { testJail } from '../support/jail';

jest.setTimeout(60_000);

describe('the jail and the files a machine could have written', () => {
  let root: string;
  let dataDir: string;
  let imagesDir: string;
  let layers: LayerStore;

  beforeEach(async () => {
    root = mkdtempSync(join(tmpdir(), 'kiste-jail-files-'));
    dataDir = join(root, 'data');
    imagesDir = join(root, 'images');
    mkdirSync(join(imagesDir, 'v1'), { recursive: true });
    await createDisk(join(imagesDir, 'v1', 'disk.qcow2'), 16 << 20);
    const folders = machineHostFolders(dataDir);
    mkdirSync(folders.layers, { recursive: true });
    layers = new LayerStore(folders.layers, imagesDir);
  });
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  it('walks a chain of kiste layers down to the image disk', async () => {
    await createOverlay(join(imagesDir, 'v1', 'disk.qcow2'), layers.path('m-0.qcow2'));
    await createOverlay(layers.path('m-0.qcow2'), layers.path('m-1.qcow2'));
    expect(await layers.filesOf('m-1.qcow2')).toEqual([layers.path('m-1.qcow2'), layers.path('m-0.qcow2'), join(imagesDir, 'v1', 'disk.qcow2')]);
  });

  it.each([
    ['a file outside kiste', (r: string) => join(r, 'secret.key')],
    ['a path out of the layers folder', (r: string) => join(r, 'data', 'layers', '..', 'kiste.db')],
    ['a link in the layers folder', (r: string) => join(r, 'data', 'layers', 'x-9.qcow2')],
    ['a name that is not a layer', (r: string) => join(r, 'data', 'layers', 'notes.txt')],
  ])('refuses a header that names %s, before opening it', async (_what, target) => {
    const named = target(root);
    writeFileSync(join(root, 'secret.key'), 'secret');
    writeFileSync(join(dataDir, 'kiste.db'), 'db');
    writeFileSync(join(dataDir, 'layers', 'notes.txt'), 'notes');
    symlinkSync(join(root, 'secret.key'), join(dataDir, 'layers', 'x-9.qcow2'));
    // what a taken-over QEMU does to its own layer: rewrite the backing name (unsafe rebase)
    await createOverlay(join(imagesDir, 'v1', 'disk.qcow2'), layers.path('m-0.qcow2'));
    execFileSync('qemu-img', ['rebase', '-u', '-f', 'qcow2', '-F', 'raw', '-b', named, layers.path('m-0.qcow2')]);
    await expect(layers.filesOf('m-0.qcow2')).rejects.toThrow(/not a kiste layer or image disk/);
    expect(await layers.release('m-0.qcow2', [])).toBe(true);
    for (const survivor of [join(root, 'secret.key'), join(dataDir, 'kiste.db'), join(dataDir, 'layers', 'notes.txt')]) expect(lstatSync(survivor).isFile()).toBe(true);
  });

  it('tells a machine\'s own layers from others by name and place', () => {
    expect(layers.isOwnLayer('m', layers.path('m-3.qcow2'))).toBe(true);
    expect(layers.isOwnLayer('m', layers.path('other-3.qcow2'))).toBe(false);
    expect(layers.isOwnLayer('m', join(root, 'm-3.qcow2'))).toBe(false);
  });

  it('shares with a fork only layers its source can read, and withdraws them at delete', async () => {
    const jail = testJail(dataDir, imagesDir);
    expect(await jail.problem()).toBeNull();
    const source = await jail.admit('src');
    const fork = await jail.admit('copy');
    const stranger = await jail.admit('stranger');
    await createOverlay(join(imagesDir, 'v1', 'disk.qcow2'), layers.path('src-0.qcow2'));
    await createOverlay(join(imagesDir, 'v1', 'disk.qcow2'), layers.path('stranger-0.qcow2'));
    jail.ownLayer('src', layers.path('src-0.qcow2'));
    jail.ownLayer('stranger', layers.path('stranger-0.qcow2'));
    expect(lstatSync(layers.path('src-0.qcow2'))).toMatchObject({ uid: source.uid });
    expect(lstatSync(layers.path('src-0.qcow2')).mode & 0o777).toBe(0o600);

    await expect(jail.shareLayers('copy', 'src', [layers.path('stranger-0.qcow2')])).rejects.toThrow(/not its own to share/);
    await jail.shareLayers('copy', 'src', [layers.path('src-0.qcow2')]);
    const acl = () => execFileSync('getfacl', ['-n', '--omit-header', layers.path('src-0.qcow2')], { encoding: 'utf8' });
    expect(acl()).toContain(`user:${fork.uid}:r--`);
    expect(acl()).not.toContain(`user:${stranger.uid}`);

    await jail.releaseLayers('copy', [layers.path('src-0.qcow2')]);
    expect(acl()).not.toContain(`user:${fork.uid}`);
    await jail.releaseLayers('src', [layers.path('src-0.qcow2')]);
    expect(lstatSync(layers.path('src-0.qcow2')).uid).toBe(0);
    await jail.unloadFirewall();
  });

  it('seals the run folder: root\'s, its ACL reset, only what QEMU was to make', async () => {
    const jail = testJail(dataDir, imagesDir);
    expect(await jail.problem()).toBeNull();
    const user = await jail.admit('m');
    const launch = await jail.beforeStart('m', { vcpu: 1, memoryMib: 64 }, { layers: [], readOnly: [] });
    const argv = launch('qemu-system-x86_64', ['-name', 'kiste-m']).args;
    expect(argv).toEqual(expect.arrayContaining(['unshare', '--mount', '--user', String(user.uid), String(user.gid)]));
    expect(argv.slice(-3)).toEqual(['qemu-system-x86_64', '-name', 'kiste-m']);
    const run = join(dataDir, 'machines', 'm', 'run');
    expect(lstatSync(run).uid).toBe(user.uid);
    // what QEMU makes, and what a taken-over one could plant meanwhile
    const socket = createServer();
    await new Promise<void>((resolve) => socket.listen(join(run, 'qmp.sock'), resolve));
    writeFileSync(join(run, 'serial.log'), 'boot\n');
    symlinkSync(join(root, 'secret.key'), join(run, 'qemu.pid'));
    execFileSync('mkfifo', [join(run, 'memory.ram')]);
    writeFileSync(join(run, 'extra'), 'x');
    chmodSync(run, 0o777);
    execFileSync('setfacl', ['-m', 'u:4242:rwx', run]);
    chownSync(join(run, 'serial.log'), user.uid, user.gid);

    await jail.seal('m');
    expect(lstatSync(run).uid).toBe(0);
    expect(readdirSync(run).sort()).toEqual(['qmp.sock', 'serial.log']);
    const acl = execFileSync('getfacl', ['-n', '--omit-header', run], { encoding: 'utf8' });
    expect(acl).toContain(`user:${user.uid}:--x`);
    expect(acl).not.toContain('4242');
    expect(acl).toMatch(/other::---/);
    socket.close();
    jail.afterStop('m');
    await jail.unloadFirewall();
  });
});
