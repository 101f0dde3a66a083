// The guest's machine identity. A fork boots from a copy-on-write copy of its source's disk and so
// would share its /etc/machine-id (journal, D-Bus, DHCP DUIDs and others derive from it) and
// systemd's random seed. personalise calls resetMachineId once per new disk (when the host asks
// for new SSH host keys) to give the disk an identity of its own. Paths are under config.root.
import { randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { writeAtomic } from './files';

const MACHINE_ID = /^[0-9a-f]{32}$/;

/**
 * Writes a fresh random id to /etc/machine-id, keeps a stand-alone /var/lib/dbus/machine-id equal
 * to it and drops /var/lib/systemd/random-seed. Programs that already read the old id (PID 1,
 * journald) keep it until the next boot; everything started later sees the new one.
 */
export async function resetMachineId(root: string, random: (size: number) => Buffer = randomBytes): Promise<string> {
  // Made here from the kernel's random source rather than with systemd-machine-id-setup: in a VM
  // that tool may take the hypervisor's product UUID, which need not differ between forks.
  const id = newMachineId(random);
  const etcId = join(root, 'etc/machine-id');
  // writeAtomic renames over the file: a symlink there is replaced, never written through.
  await writeAtomic(etcId, `${id}\n`, 0o444);

  const dbusId = join(root, 'var/lib/dbus/machine-id');
  const link = await readLinkOrNull(dbusId);
  // Debian links it to /etc/machine-id, which already holds the new id; anything else (a copy
  // from an older D-Bus, a link elsewhere) is replaced by a copy so both agree.
  // Absent: D-Bus reads /etc/machine-id itself.
  if (link !== undefined && (link === null || resolveLink(root, dbusId, link) !== resolve(etcId))) {
    await writeAtomic(dbusId, `${id}\n`, 0o444);
  }

  // The seed file would feed the source's entropy into this machine's pool at the next boot;
  // systemd-random-seed writes a new one from this machine's pool at shutdown.
  await fs.rm(join(root, 'var/lib/systemd/random-seed'), { force: true });
  return id;
}

/** The id in /etc/machine-id, or null when it is missing, empty or malformed (not yet committed). */
export async function readMachineId(root: string): Promise<string | null> {
  try {
    const text = (await fs.readFile(join(root, 'etc/machine-id'), 'utf8')).trim();
    return MACHINE_ID.test(text) ? text : null;
  } catch {
    return null;
  }
}

/** 128 random bits formatted the way systemd makes them (a v4 UUID without dashes). */
export function newMachineId(random: (size: number) => Buffer = randomBytes): string {
  const bytes = random(16);
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  return bytes.toString('hex');
}

/** undefined: nothing there; null: not a symlink; otherwise the link's target text. */
async function readLinkOrNull(path: string): Promise<string | null | undefined> {
  let stat;
  try {
    stat = await fs.lstat(path);
  } catch {
    return undefined;
  }
  return stat.isSymbolicLink() ? fs.readlink(path) : null;
}

/** Where a link points inside the guest's root (an absolute target is relative to the root). */
function resolveLink(root: string, path: string, target: string): string {
  return isAbsolute(target) ? resolve(root, `.${target}`) : resolve(dirname(path), target);
}
