// A guest that continues a memory image saved from another machine (a boot snapshot, a fork with
// memory) did not boot as itself: besides the files personalise rewrites, what running programs
// cached of the old identity is renewed. The kernel's RNG reseeds on the VM generation ID change
// (QEMU's vmgenid device, Linux >= 5.18); the host's random bytes are mixed in as well.
import { createHash } from 'node:crypto';
import { closeSync, openSync, promises as fs, readSync } from 'node:fs';
import { join } from 'node:path';
import { runCommand } from './commands';
import type { AgentConfig } from './config';
import { AgentError } from './errors';
import { exists } from './files';
import type { Logger } from './log';
import { int, object, str } from './validate';

/** How long the kernel may take to notice the disk grew (the host resized it just before). */
const DISK_SIZE_WAIT_MS = 10_000;
const MAX_ENTROPY_BYTES = 512;
/** systemd's own tool behind x-systemd.growfs (where usrmerge does or does not put it). */
const GROWFS = ['/usr/lib/systemd/systemd-growfs', '/lib/systemd/systemd-growfs'];

export interface RestoredGuestRequest {
  diskBytes: number | undefined;
  entropy: Buffer | undefined;
}

export function restoredGuestRequest(raw: unknown): RestoredGuestRequest | null {
  if (raw === undefined || raw === null) return null;
  const p = object(raw);
  const diskBytes = int(p, 'disk_bytes', { optional: true, min: 1, max: Number.MAX_SAFE_INTEGER });
  const encoded = str(p, 'entropy', { optional: true, max: 1024 });
  const entropy = encoded === undefined ? undefined : Buffer.from(encoded, 'base64');
  if (entropy && (entropy.length === 0 || entropy.length > MAX_ENTROPY_BYTES)) throw new AgentError('bad_request', `entropy must be 1 to ${MAX_ENTROPY_BYTES} bytes of base64`);
  return { diskBytes, entropy };
}

/**
 * Before anything random is made: the host's bytes go into the kernel's pool (mixed in, not
 * credited). Every copy of a memory image also holds the same user-space RNG state (this agent's
 * OpenSSL DRBG included), so what the agent makes for a restored guest (the machine id) is read from
 * the kernel (`kernelRandom`), which the generation ID change and these bytes made unique.
 */
export async function mixHostEntropy(request: RestoredGuestRequest, config: AgentConfig, log: Logger): Promise<void> {
  const urandom = join(config.root, 'dev/urandom');
  if (!request.entropy || !(await exists(urandom))) return;
  await fs.appendFile(urandom, request.entropy);
  if (config.root !== '/') return;
  // Kernels without the vmgenid driver (Debian's cloud kernel) reseed their output only after a
  // minute: RNDRESEEDCRNG (root) reseeds it now from the pool that holds the host's bytes. Perl is
  // the one interpreter every Debian has (perl-base is essential) that can make the ioctl.
  await runCommand('perl', ['-e', 'open(my $f, "<", "/dev/urandom") or die $!; ioctl($f, 0x5207, 0) or die "RNDRESEEDCRNG: $!"'], config.commandEnv).catch((error: Error) => {
    log.warn('could not reseed the kernel RNG', { error: error.message });
  });
}

/**
 * Random bytes for identities the agent makes: the kernel's, hashed with the host's bytes for this
 * copy, so they differ between copies even if the kernel's output did not yet.
 */
export function restoredRandom(request: RestoredGuestRequest): (size: number) => Buffer {
  return (size) => {
    const fd = openSync('/dev/urandom', 'r');
    try {
      const kernel = Buffer.alloc(32);
      readSync(fd, kernel, 0, kernel.length, null);
      return createHash('sha512').update(kernel).update(request.entropy ?? Buffer.alloc(0)).digest().subarray(0, size);
    } finally {
      closeSync(fd);
    }
  };
}

/** After the identity files are new: journald (caches machine id and host name), root file system size. */
export async function renewRestoredGuest(request: RestoredGuestRequest, config: AgentConfig, log: Logger): Promise<void> {
  const root = config.root;
  if (!(await exists(join(root, 'run/systemd/system')))) return; // no systemd: nothing running cached anything
  await runCommand('systemctl', ['restart', 'systemd-journald'], config.commandEnv).catch((error: Error) => {
    log.warn('could not restart journald', { error: error.message });
  });
  if (request.diskBytes !== undefined) await growRootFileSystem(root, request.diskBytes, config, log);
}

async function growRootFileSystem(root: string, diskBytes: number, config: AgentConfig, log: Logger): Promise<void> {
  const deadline = Date.now() + DISK_SIZE_WAIT_MS;
  while ((await diskSize(root)) < diskBytes) {
    if (Date.now() > deadline) {
      log.warn('the disk did not grow to the size the host set', { expected: diskBytes, seen: await diskSize(root) });
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  for (const tool of GROWFS) {
    if (!(await exists(join(root, tool)))) continue;
    await runCommand(tool, ['/'], config.commandEnv, 120_000);
    return;
  }
  log.warn('systemd-growfs not found: the root file system keeps its size until the next boot', {});
}

/** The root disk's size as the guest kernel knows it (the image's root is the whole of /dev/vda). */
async function diskSize(root: string): Promise<number> {
  try {
    return Number((await fs.readFile(join(root, 'sys/block/vda/size'), 'utf8')).trim()) * 512;
  } catch {
    return 0;
  }
}
