// Smoke test of the minimal image: build it (once per machine: the rootfs cache and the published
// version are reused by later runs and by the other jest project), boot it with QEMU under TCG the
// way kiste does (direct kernel boot, qcow2 overlay of a larger size, virtio-serial agent port,
// user-mode network), and check from the serial console and from a stand-in agent that the machine
// is usable: login prompt, sshd up, root file system grown to the overlay, DHCP address, agent port.
//
// Needs root, mmdebstrap, qemu-system-x86 and qemu-utils, and Debian's mirror for the first build;
// skipped otherwise (or with KISTE_SKIP_IMAGE_TESTS=1). Images live in $KISTE_IMAGE_DIR, else
// $TMPDIR/kiste-image-cache: the root filesystem cache in cache/, this test's images (built with the
// stand-in agent) in smoke-standin/, apart from the service's images.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { promises as fs, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildImage, readLatest, type BuiltImage, type BuildProgress } from '../../images';
import { acquireLock } from '../../images/lock';
import { startSmokeVm, type AgentLink, type SmokeVm } from './smoke-vm';

const BASE_DIR = process.env.KISTE_IMAGE_DIR ?? join(tmpdir(), 'kiste-image-cache');
const OUT_DIR = join(BASE_DIR, 'smoke-standin');
const CACHE_DIR = join(BASE_DIR, 'cache');
const STANDIN_AGENT = join(__dirname, 'fixtures', 'agent-standin.js');
const OVERLAY_SIZE = 4 * 1024 ** 3;

function skipReason(): string | undefined {
  if (process.env.KISTE_SKIP_IMAGE_TESTS === '1') return 'KISTE_SKIP_IMAGE_TESTS=1';
  if (process.platform !== 'linux' || process.getuid?.() !== 0) return 'needs root on Linux';
  for (const tool of ['mmdebstrap', 'mkfs.ext4', 'qemu-img', 'qemu-system-x86_64']) {
    if (spawnSync('sh', ['-c', `command -v ${tool} || test -x /usr/sbin/${tool} || test -x /sbin/${tool}`]).status !== 0) return `${tool} not installed`;
  }
  return undefined;
}

const skip = skipReason();
if (skip) {
  console.warn(`image boot test skipped: ${skip}`);
}
const describeImage = skip ? describe.skip : describe;

// once per test file and process; across processes, buildImage's locks and content-addressed
// versions make the second caller reuse the first one's image
let imagePromise: Promise<BuiltImage> | undefined;
const progress: BuildProgress[] = [];
function minimalImage(): Promise<BuiltImage> {
  imagePromise ??= buildImage({
    profile: 'minimal',
    outDir: OUT_DIR,
    cacheDir: CACHE_DIR,
    agentBundle: STANDIN_AGENT,
    onProgress: (p) => progress.push(p),
  });
  return imagePromise;
}

const sha256 = (path: string) => createHash('sha256').update(readFileSync(path)).digest('hex');

describeImage('minimal image', () => {
  let image: BuiltImage;
  let vm: SmokeVm | undefined;
  let agent: AgentLink | undefined;
  let releaseBootLock: (() => Promise<void>) | undefined;
  const workDir = join(BASE_DIR, `smoke-vm-${process.pid}`);
  // QEMU runs under `timeout` (see smoke-vm.ts), which passes SIGTERM on
  const killOnExit = () => vm?.process.kill('SIGTERM');

  beforeAll(async () => {
    image = await minimalImage();
  }, 20 * 60_000);

  afterAll(async () => {
    agent?.close();
    await vm?.kill();
    process.removeListener('exit', killOnExit);
    await releaseBootLock?.();
    await fs.rm(workDir, { recursive: true, force: true });
  }, 60_000);

  test('build publishes a complete, content-addressed version', async () => {
    expect(image.version).toMatch(/^v\d{4}\.\d{2}\.\d{2}-[0-9a-f]{8}$/);
    expect(image.dir).toBe(join(OUT_DIR, image.version));
    const m = image.manifest;
    expect(m).toMatchObject({ version: image.version, profile: 'minimal', disk: { format: 'qcow2', filesystem: 'ext4' } });
    expect(m.kernel).toMatch(/-cloud-amd64$/);
    expect(m.kernel_cmdline).toContain('root=/dev/vda');
    expect(m.kernel_cmdline).toContain('console=ttyS0');
    const names = m.packages.map((p) => p.split('=')[0]);
    for (const pkg of ['systemd-sysv', 'openssh-server', 'nodejs', 'linux-image-cloud-amd64', 'systemd-resolved', 'udev']) expect(names).toContain(pkg);
    for (const desktopOnly of ['xfce4', 'xserver-xorg-core', 'lightdm']) expect(names).not.toContain(desktopOnly);
    expect(m.packages).toEqual([...m.packages].sort());
    for (const file of ['vmlinuz', 'initrd.img']) expect(sha256(join(image.dir, file))).toBe(m.sha256[file]);
    expect((await fs.stat(image.disk)).size).toBe(m.sizes['disk.qcow2']);
    expect(m.agent.sha256).toBe(sha256(STANDIN_AGENT));
    expect((await readLatest(OUT_DIR)).minimal?.version).toBe(image.version);
    expect(await fs.readlink(join(OUT_DIR, 'minimal-latest'))).toBe(image.version);
    expect(progress.map((p) => p.step)).toEqual(expect.arrayContaining(['lock', 'rootfs', 'publish']));
    // nothing half-built is left behind
    expect((await fs.readdir(OUT_DIR)).filter((n) => n.startsWith('.build-'))).toEqual([]);

    // the same inputs give the same version, from the caches, in seconds
    const again = await buildImage({ profile: 'minimal', outDir: OUT_DIR, cacheDir: CACHE_DIR, agentBundle: STANDIN_AGENT });
    expect(again.version).toBe(image.version);
    expect(again.reused).toBe(true);
    expect(again.rootfsCached).toBe(true);
  }, 5 * 60_000);

  test('boots under TCG: login prompt, sshd, grown root fs, network, agent port', async () => {
    // one VM at a time per machine (both jest projects run this file; boot times mean more alone)
    const lock = await acquireLock(join(BASE_DIR, '.boot-lock'), `image boot test (pid ${process.pid})`);
    releaseBootLock = () => lock.release();

    vm = await startSmokeVm({
      kernel: image.kernel,
      initrd: image.initrd,
      disk: image.disk,
      cmdline: image.manifest.kernel_cmdline,
      workDir,
      diskSize: String(OVERLAY_SIZE),
      memoryMiB: 1024,
      cpus: 2,
    });
    process.once('exit', killOnExit);
    agent = await vm.connectAgent(30_000);

    const loginMs = await vm.waitForConsole(/^\S+ login: /m, 5 * 60_000);
    const bootLine = /kiste-boot: up ([\d.]+)s, ssh\.service (\w+), \/ ext4 (\S+)/;
    await vm.waitForConsole(bootLine, 2 * 60_000);
    const [, upSeconds, sshState] = bootLine.exec(vm.console())!;
    expect(sshState).toBe('active');

    const report = await agent.next('report', 3 * 60_000);
    const reportMs = Date.now() - vm.startedAt;
    console.info(
      `minimal image ${image.version}: login prompt ${(loginMs / 1000).toFixed(1)} s after QEMU started (TCG), ` +
        `boot report at guest uptime ${upSeconds} s, agent report at ${(reportMs / 1000).toFixed(1)} s; ${String(report.analyze).split('\n')[0]}`,
    );

    expect(report.system_state).toBe('running');
    expect(report.failed_units).toBe('');
    expect(report.ssh_active).toBe('active');
    expect(report.ssh_listening).toMatch(/:22\b/);
    // systemd-growfs grew the 704 MiB base file system to the 4 GiB overlay
    const rootFs = report.root_fs as { size_bytes: number };
    expect(rootFs.size_bytes).toBeGreaterThan(0.9 * OVERLAY_SIZE);
    expect(rootFs.size_bytes).toBeLessThanOrEqual(OVERLAY_SIZE);
    // a machine id of its own, host keys of its own (made at boot, none baked into the image)
    expect(report.machine_id).toMatch(/^[0-9a-f]{32}$/);
    expect(report.host_keys).toEqual(expect.arrayContaining(['ssh_host_ed25519_key', 'ssh_host_ed25519_key.pub']));
    expect(report.ipv4).toMatch(/inet 10\.0\.2\.15\//);
    expect(report.routes).toMatch(/^default via 10\.0\.2\.2/m);
    expect(report.resolv_conf).toMatch(/nameserver 127\.0\.0\.53/);
    expect(report.node).toMatch(/^v18\./);
    expect(report.kernel).toBe(image.manifest.kernel);
    expect(report.image).toMatchObject({ version: image.version, profile: 'minimal' });

    // host → guest on the agent port
    agent.send('ping 42');
    expect(await agent.next('pong', 60_000)).toMatchObject({ data: '42' });

    // the boot wrote little to the overlay (no lazy inode table zeroing after the resize, volatile journal)
    const info = spawnSync('qemu-img', ['info', '-U', '--output=json', vm.overlayPath], { encoding: 'utf8' });
    const actualSize = (JSON.parse(info.stdout) as { 'actual-size': number })['actual-size'];
    expect(actualSize).toBeLessThan(64 * 1024 ** 2);

    expect(vm.console()).not.toMatch(/\[FAILED\]|Kernel panic|emergency mode/);
  }, 10 * 60_000);
});
