// A tiny guest for the QEMU driver tests, made here from Debian packages so the tests depend
// neither on the image pipeline nor on the guest agent:
// - kernel: Debian's cloud kernel (`linux-image-cloud-amd64`), fetched with `apt-get download`
//   and unpacked with `dpkg-deb -x` (never installed), plus the few virtio modules it needs;
// - initramfs: a static busybox (Debian `busybox-static`, installed with apt-get when missing) and
//   the shell script below as /init, packed by our own newc cpio writer (no `cpio` on these hosts).
// Everything is cached under KISTE_TEST_CACHE (default <tmpdir>/kiste-test-cache), built into a
// temporary directory and renamed into place, so parallel jest workers never see half a cache.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';

export interface TinyGuest {
  kernel: string;
  initrd: string;
  /** Kernel command line the init script expects (serial console, quiet boot). */
  append: string;
}

/** Printed on the serial console once /init runs. */
export const READY_MARKER = 'KISTE-TINY-GUEST-READY';

// Load order matters: insmod does not resolve dependencies (virtio needs virtio_ring, virtio_pci
// needs the other four).
const MODULES = [
  'drivers/virtio/virtio_ring.ko',
  'drivers/virtio/virtio.ko',
  'drivers/virtio/virtio_pci_legacy_dev.ko',
  'drivers/virtio/virtio_pci_modern_dev.ko',
  'drivers/virtio/virtio_pci.ko',
  'drivers/block/virtio_blk.ko',
  'drivers/char/virtio_console.ko',
  'drivers/acpi/button.ko',
];

// The guest's whole userland. It
// - prints the ready marker, then a counter every 200 ms (memory-session tests check that the
//   counter continues after a restore instead of starting again from 0);
// - powers off when the ACPI power button is pressed (system_powerdown), unless the kernel command
//   line has `kiste.ignore_powerdown` (tests of the forced stop path). No acpid: once the ACPI button
//   driver is loaded (without it the fixed event is disabled as "invalid"), each press is counted in
//   sysfs, and polling that counter is enough;
// - serves a line protocol on the virtio-serial port named org.kiste.agent: `write` writes 64 KiB
//   to /dev/vda and answers `wrote`, `ping` answers `pong`, `run CMD` runs CMD with sh and answers
//   its output then `done STATUS`.
const INIT_SCRIPT = `#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
while read m; do insmod /lib/modules/$m; done < /lib/modules/order
echo ${READY_MARKER}
( i=0; while :; do echo "kiste-tick $i"; i=$((i+1)); sleep 0.2; done ) &
if ! grep -q kiste.ignore_powerdown /proc/cmdline; then
  ( f=/sys/firmware/acpi/interrupts/ff_pwr_btn
    first=$(cat $f 2>/dev/null)
    while sleep 0.2; do
      if [ "$(cat $f 2>/dev/null)" != "$first" ]; then echo kiste-powerdown; poweroff -f; fi
    done ) &
fi
port=
for n in /sys/class/virtio-ports/*/name; do
  [ "$(cat $n 2>/dev/null)" = org.kiste.agent ] && port=/dev/$(basename $(dirname $n))
done
echo "kiste-agent-port $port"
# A virtio-serial port reads as end-of-file while no host client is connected: keep it open and
# read again later. Never close it: closing discards what the host sent in the meantime.
[ -n "$port" ] && exec 3<>$port
while [ -n "$port" ]; do
  while read -r cmd <&3; do
    case "$cmd" in
      ping) echo pong >&3 ;;
      "run "*) sh -c "\${cmd#run }" >&3 2>&1; echo "done $?" >&3 ;;
      write) dd if=/dev/urandom of=/dev/vda bs=4096 count=16 conv=fsync 2>/dev/null; echo wrote >&3 ;;
    esac
  done
  sleep 0.1
done
while :; do sleep 3600; done
`;

export function cacheDir(): string {
  return process.env.KISTE_TEST_CACHE ?? join(tmpdir(), 'kiste-test-cache');
}

/** Builds (or finds in the cache) the kernel and initramfs of the tiny guest. */
export function tinyGuest(): TinyGuest {
  const root = cacheDir();
  mkdirSync(root, { recursive: true });
  const kernelDir = ensureKernel(root);
  const busybox = ensureStaticBusybox();
  const busyboxBytes = readFileSync(busybox);
  const key = createHash('sha256').update(INIT_SCRIPT).update(MODULES.join(',')).update(busyboxBytes).update(kernelDir).digest('hex').slice(0, 16);
  const initrd = join(root, `tiny-initrd-${key}.cpio.gz`);
  if (!existsSync(initrd)) {
    const entries: CpioEntry[] = [
      { name: 'bin', mode: 0o040755 },
      { name: 'dev', mode: 0o040755 },
      { name: 'proc', mode: 0o040755 },
      { name: 'sys', mode: 0o040755 },
      { name: 'lib', mode: 0o040755 },
      { name: 'lib/modules', mode: 0o040755 },
      { name: 'bin/busybox', mode: 0o100755, data: busyboxBytes },
      { name: 'init', mode: 0o100755, data: Buffer.from(INIT_SCRIPT) },
      { name: 'lib/modules/order', mode: 0o100644, data: Buffer.from(MODULES.map((m) => baseName(m)).join('\n') + '\n') },
      ...MODULES.map((m) => ({ name: `lib/modules/${baseName(m)}`, mode: 0o100644, data: readFileSync(join(kernelDir, 'modules', baseName(m))) })),
    ];
    const tmp = `${initrd}.${process.pid}.tmp`;
    writeFileSync(tmp, gzipSync(cpioNewc(entries), { level: 1 }));
    renameSync(tmp, initrd);
  }
  return { kernel: join(kernelDir, 'vmlinuz'), initrd, append: 'console=ttyS0 quiet panic=-1' };
}

function baseName(path: string): string {
  return path.slice(path.lastIndexOf('/') + 1);
}

/** Debian's cloud kernel and the modules we load, cached per kernel package and module list. */
function ensureKernel(root: string): string {
  const modulesKey = createHash('sha256').update(MODULES.join(',')).digest('hex').slice(0, 8);
  const existing = readdirSync(root).find((n) => n.startsWith('kernel-') && n.endsWith(`-${modulesKey}`) && existsSync(join(root, n, 'vmlinuz')));
  if (existing) return join(root, existing);
  const pkg = resolveKernelPackage();
  const dir = join(root, `kernel-${pkg}-${modulesKey}`);
  const work = mkdtempSync(join(root, 'download-'));
  try {
    execFileSync('apt-get', ['download', '-q', pkg], { cwd: work, stdio: 'pipe' });
    const deb = readdirSync(work).find((n) => n.endsWith('.deb'));
    if (!deb) throw new Error(`apt-get download ${pkg} produced no .deb`);
    execFileSync('dpkg-deb', ['-x', join(work, deb), join(work, 'x')], { stdio: 'pipe' });
    const boot = join(work, 'x', 'boot');
    const vmlinuz = readdirSync(boot).find((n) => n.startsWith('vmlinuz-'));
    if (!vmlinuz) throw new Error(`${pkg} has no /boot/vmlinuz-*`);
    const release = vmlinuz.slice('vmlinuz-'.length);
    const staged = join(work, 'staged');
    mkdirSync(join(staged, 'modules'), { recursive: true });
    copyFileSync(join(boot, vmlinuz), join(staged, 'vmlinuz'));
    for (const m of MODULES) copyFileSync(join(work, 'x', 'lib', 'modules', release, 'kernel', m), join(staged, 'modules', baseName(m)));
    try {
      renameSync(staged, dir);
    } catch (error) {
      if (!existsSync(join(dir, 'vmlinuz'))) throw error; // another worker won the race
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  return dir;
}

/** `linux-image-cloud-amd64` is a metapackage: download the versioned image it depends on. */
function resolveKernelPackage(): string {
  const depends = (): string => execFileSync('apt-cache', ['depends', 'linux-image-cloud-amd64'], { encoding: 'utf8', stdio: 'pipe' });
  let out: string;
  try {
    out = depends();
  } catch {
    // No package lists yet (fresh machine). Another worker may hold the lists lock: retry a while.
    for (let attempt = 0; ; attempt++) {
      try {
        execFileSync('apt-get', ['update', '-q'], { stdio: 'pipe' });
        break;
      } catch (error) {
        if (attempt >= 60) throw error;
        sleepSync(2000);
      }
    }
    out = depends();
  }
  const match = /Depends:\s*(linux-image-[^\s]+-cloud-amd64)/.exec(out);
  if (!match) throw new Error(`cannot resolve linux-image-cloud-amd64: ${out}`);
  return match[1];
}

/** A statically linked busybox; installs Debian's busybox-static when none is there. */
function ensureStaticBusybox(): string {
  const candidates = ['/bin/busybox', '/usr/bin/busybox'];
  const found = candidates.find((p) => existsSync(p) && isStaticElf(p));
  if (found) return found;
  // Parallel jest workers may all get here; dpkg's lock lets one install at a time: retry a while.
  for (let attempt = 0; ; attempt++) {
    try {
      execFileSync('apt-get', ['install', '-y', '-q', 'busybox-static'], { stdio: 'pipe', env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
    } catch (error) {
      if (attempt >= 60) throw error;
    }
    const installed = candidates.find((p) => existsSync(p) && isStaticElf(p));
    if (installed) return installed;
    if (attempt >= 60) throw new Error('busybox-static installed but no static busybox found');
    sleepSync(2000);
  }
}

function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** True for a 64-bit ELF without a PT_INTERP program header (no dynamic loader needed). */
function isStaticElf(path: string): boolean {
  const b = readFileSync(path);
  if (b.length < 64 || b.readUInt32BE(0) !== 0x7f454c46 || b[4] !== 2) return false;
  const phoff = Number(b.readBigUInt64LE(0x20));
  const phentsize = b.readUInt16LE(0x36);
  const phnum = b.readUInt16LE(0x38);
  for (let i = 0; i < phnum; i++) if (b.readUInt32LE(phoff + i * phentsize) === 3) return false;
  return true;
}

interface CpioEntry {
  name: string;
  mode: number;
  data?: Buffer;
}

/** The "newc" cpio format the kernel unpacks: 110-byte ASCII header, name, data, 4-byte aligned. */
export function cpioNewc(entries: CpioEntry[]): Buffer {
  const parts: Buffer[] = [];
  const pad = (n: number): Buffer => Buffer.alloc((4 - (n % 4)) % 4);
  const all = [...entries, { name: 'TRAILER!!!', mode: 0 }];
  all.forEach((e, i) => {
    const data = e.data ?? Buffer.alloc(0);
    const name = Buffer.from(`${e.name}\0`);
    const fields = [i + 1, e.mode, 0, 0, 1, 0, data.length, 0, 0, 0, 0, name.length, 0];
    const header = Buffer.from('070701' + fields.map((f) => f.toString(16).padStart(8, '0')).join(''));
    parts.push(header, name, pad(header.length + name.length), data, pad(data.length));
  });
  return Buffer.concat(parts);
}
