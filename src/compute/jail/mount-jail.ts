// What a machine's QEMU sees of the host's files: a mount namespace of its own whose root is a
// read-only tmpfs holding only what that QEMU needs (the design, and what was rejected, is in
// docs/machines.md, "What a QEMU sees of the host"):
//   /usr (and /bin, /lib*, /sbin as the host has them) read-only: the binary, its libraries, firmware
//   /etc/resolv.conf, /etc/ld.so.cache read-only: slirp reads the host's resolvers there
//   /dev/null, zero, full, random, urandom, kvm (those the host has)
//   the machine's run folder, read-write (its permissions are the service's to set)
//   its layer view (hard links to exactly its chain's layers) at the layers folder's path
//   its image files (kernel, initrd, the image disks its chain ends on) read-only
//   /proc: a procfs of its own with hidepid=invisible,subset=pid (its user's processes only)
//   the serial log's path: a FIFO into a copier that appends to the real log until it is
//   SERIAL_LOG_MAX_BYTES long (RLIMIT_FSIZE on the copier alone: QEMU's own files are not capped)
// every file at the same absolute path as on the host (qcow2 headers name backing files that way).
// The start wrapper runs SCRIPT as root inside `unshare --mount --propagation private` (which execs,
// so the pid stays QEMU's), then drops to the machine's user with setpriv and execs QEMU.
import { execFile } from 'node:child_process';
import { closeSync, constants, existsSync, fstatSync, linkSync, lstatSync, mkdirSync, mkdtempSync, openSync, readdirSync, readlinkSync, readSync, renameSync, rmSync, statSync, chmodSync, chownSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, isAbsolute, join } from 'node:path';

/** A serial log never grows beyond this; past it the copier drains and drops. */
export const SERIAL_LOG_MAX_BYTES = 8 << 20;
/** A start that finds less room than this cuts the log first, to its last SERIAL_LOG_KEEP_BYTES. */
export const SERIAL_LOG_MIN_ROOM_BYTES = 256 << 10;
export const SERIAL_LOG_KEEP_BYTES = 1 << 20;

/** Where QEMU's own PATH looks (the binary is found inside the namespace). */
const QEMU_PATH_DIRS = ['/usr/local/sbin', '/usr/local/bin', '/usr/sbin', '/usr/bin', '/sbin', '/bin'];
const SYSTEM_DIRS = ['/usr', '/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32'];
const SYSTEM_FILES = ['/etc/resolv.conf', '/etc/ld.so.cache'];
const DEVICES = ['/dev/null', '/dev/zero', '/dev/full', '/dev/random', '/dev/urandom', '/dev/kvm'];

/**
 * Runs as root in the new mount namespace: `--root DIR` (an empty folder: the tmpfs goes there),
 * then `--ro|--rw|--dev PATH`, `--bind SOURCE AT`, `--link PATH TARGET`, `--serial LOG MAX_BYTES`,
 * `--user UID GID`, `--`, the command. Every step must succeed (set -e): a QEMU whose view could not
 * be built does not start.
 */
const SCRIPT = String.raw`set -eu
place() { if [ -d "$1" ]; then mkdir -p "$R$2"; else mkdir -p "$R$(dirname "$2")"; : > "$R$2"; fi; }
bind() { place "$1" "$2"; mount --bind "$1" "$R$2"; mount -o "remount,bind,$3" "$R$2"; }
drop() { exec setpriv --reuid="$U" --regid="$G" --clear-groups --no-new-privs --inh-caps=-all --bounding-set=-all -- "$@"; }
[ "$1" = --root ] || exit 125
R=$2; shift 2
mount -t tmpfs -o size=1m,mode=0755,nosuid,nodev,noexec kiste-jail "$R"
while [ "$1" != -- ]; do
  case $1 in
    --ro) bind "$2" "$2" ro,nosuid,nodev; shift 2 ;;
    --rw) bind "$2" "$2" nosuid,nodev,noexec; shift 2 ;;
    --dev) bind "$2" "$2" nosuid,noexec; shift 2 ;;
    --bind) bind "$2" "$3" nosuid,nodev,noexec; shift 3 ;;
    --link) mkdir -p "$R$(dirname "$2")"; ln -s "$3" "$R$2"; shift 3 ;;
    --serial) LOG=$2; MAX=$3; shift 3 ;;
    --user) U=$2; G=$3; shift 3 ;;
    *) echo "kiste-jail: unknown option $1" >&2; exit 125 ;;
  esac
done
shift
mkdir "$R/proc"
mount -t proc -o nosuid,nodev,noexec,hidepid=invisible,subset=pid proc "$R/proc"
mkfifo -m 0600 "$R/.serial"
chown "$U:$G" "$R/.serial"
cd "$R"; mkdir .old; pivot_root . .old; cd /; umount -l /.old; rmdir /.old
# The copier opens the real log before the FIFO, and the FIFO opens only with both ends: once the
# exec below returns, the log can be covered by the FIFO. cat writes what it reads at once (no
# buffer: the log stays live) until the file would pass MAX bytes (EFBIG), then the rest is
# drained, so QEMU never blocks; it ends when QEMU (the only writer left) exits.
( drop /bin/sh -c 'command exec >>"$2" || exec >/dev/null; exec <"$3"; trap "" XFSZ; prlimit --fsize="$1" cat || :; exec cat >/dev/null' kiste-serial "$MAX" "$LOG" /.serial ) &
exec 3>/.serial
mount --bind /.serial "$LOG"
rm /.serial
mount -o remount,bind,ro,nosuid,nodev,noexec /
drop "$@"
`;

export interface QemuView {
  /** An empty folder of the machine's: the namespace's root is mounted there (in the namespace only). */
  root: string;
  run: string;
  /** The machine's layer view and the layers folder's path it appears at. */
  layers: { view: string; at: string };
  /** Image files (kernel, initrd, image disks), each at its own path. */
  readOnly: string[];
  /** Ready for the run (see prepareSerialLog). */
  serialLog: string;
  user: { uid: number; gid: number };
}

/** argv that runs `command args` as the machine's user in its own view; no fork, so the pid stays. */
export function inMountJail(view: QemuView, command: string, args: string[]): string[] {
  const options = [
    '--root', view.root,
    ...systemOptions(),
    ...binaryOption(command),
    '--rw', view.run,
    '--bind', view.layers.view, view.layers.at,
    ...[...new Set(view.readOnly)].flatMap((file) => ['--ro', file]),
    '--serial', view.serialLog, String(SERIAL_LOG_MAX_BYTES),
    '--user', String(view.user.uid), String(view.user.gid),
  ];
  return ['unshare', '--mount', '--propagation', 'private', '--', '/bin/sh', '-c', SCRIPT, 'kiste-mount-jail', ...options, '--', command, ...args];
}

let system: string[] | undefined;

/** The host's system folders (links where it has links), resolver files and devices, read once. */
function systemOptions(): string[] {
  system ??= [
    ...SYSTEM_DIRS.flatMap((dir) => {
      const stat = lstatSync(dir, { throwIfNoEntry: false });
      if (stat?.isSymbolicLink()) return ['--link', dir, readlinkSync(dir)];
      return stat?.isDirectory() ? ['--ro', dir] : [];
    }),
    ...SYSTEM_FILES.filter((file) => existsSync(file)).flatMap((file) => ['--ro', file]),
    ...DEVICES.filter((device) => existsSync(device)).flatMap((device) => ['--dev', device]),
  ];
  return system;
}

/** A QEMU binary outside the system folders (KISTE_QEMU_BINARY) is made visible too. */
function binaryOption(command: string): string[] {
  const path = isAbsolute(command) ? command : QEMU_PATH_DIRS.map((dir) => join(dir, command)).find((file) => existsSync(file));
  if (!path || SYSTEM_DIRS.some((dir) => path.startsWith(`${dir}/`))) return [];
  return ['--ro', path];
}

/** The machine's own folders the view needs: the root's mount point and the layer view. */
export function viewFolders(machineDir: string): { root: string; layers: string } {
  return { root: join(machineDir, 'jail-root'), layers: join(machineDir, 'layers') };
}

/**
 * The machine's layer view holds a hard link to exactly these layers (files of `layersDir`), and
 * nothing else: links appear inside a running QEMU's namespace at once (its view is bind-mounted).
 */
export function showLayers(view: string, layersDir: string, files: string[]): void {
  mkdirSync(view, { recursive: true, mode: 0o711 });
  chmodSync(view, 0o711); // root's; the machine's folder above lets only its user through
  const wanted = new Map(files.map((file) => [basename(file), file]));
  for (const name of readdirSync(view)) {
    const file = wanted.get(name);
    if (!file || !sameFile(join(view, name), file)) rmSync(join(view, name), { recursive: true, force: true });
  }
  for (const file of files) linkLayer(view, layersDir, file);
}

/** One more layer in the view (a new top the running QEMU is about to open). */
export function linkLayer(view: string, layersDir: string, file: string): void {
  if (dirname(file) !== layersDir) throw new Error(`${file} is not a layer of ${layersDir}`);
  mkdirSync(view, { recursive: true, mode: 0o711 });
  const link = join(view, basename(file));
  if (!sameFile(link, file)) {
    rmSync(link, { force: true });
    linkSync(file, link);
  }
}

function sameFile(a: string, b: string): boolean {
  const [x, y] = [lstatSync(a, { throwIfNoEntry: false }), lstatSync(b, { throwIfNoEntry: false })];
  return Boolean(x?.isFile() && y && x.ino === y.ino && x.dev === y.dev);
}

/**
 * Before a start (no QEMU runs, the run folder is root's): the serial log is a regular file of the
 * machine's user, cut to its last lines (SERIAL_LOG_KEEP_BYTES) when it had less than
 * SERIAL_LOG_MIN_ROOM_BYTES left before SERIAL_LOG_MAX_BYTES.
 */
export function prepareSerialLog(file: string, user: { uid: number; gid: number }): void {
  const stat = lstatSync(file, { throwIfNoEntry: false });
  if (stat && !stat.isFile()) rmSync(file, { recursive: true, force: true });
  if (stat?.isFile() && stat.size > SERIAL_LOG_MAX_BYTES - SERIAL_LOG_MIN_ROOM_BYTES) {
    const tail = readTail(file, SERIAL_LOG_KEEP_BYTES);
    const fromLine = tail.indexOf(0x0a) + 1; // start on a whole line
    rmSync(`${file}.new`, { force: true });
    writeFileSync(`${file}.new`, tail.subarray(fromLine), { mode: 0o600, flag: 'wx' });
    renameSync(`${file}.new`, file);
  } else if (!stat?.isFile()) {
    writeFileSync(file, '', { mode: 0o600, flag: 'wx' });
  }
  chownSync(file, user.uid, user.gid);
  chmodSync(file, 0o600);
}

function readTail(file: string, bytes: number): Buffer {
  const fd = openSync(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  try {
    const size = fstatSync(fd).size;
    const tail = Buffer.alloc(Math.min(size, bytes));
    readSync(fd, tail, 0, tail.length, size - tail.length);
    return tail;
  } finally {
    closeSync(fd);
  }
}

/**
 * Null when machines' views can be built here: the tools are there, the layer views can link to
 * layers (one file system), and a view with a private /proc builds and runs a command (as `uid`).
 */
export async function mountJailProblem(folders: { machines: string; layers: string }, uid: number): Promise<{ reason: string; hint: string } | null> {
  if (statSync(folders.machines).dev !== statSync(folders.layers).dev) {
    return { reason: `${folders.machines} and ${folders.layers} are on different file systems (a machine's view of its layers is made of hard links)`, hint: 'Keep machines/ and layers/ of KISTE_DATA_DIR on one file system.' };
  }
  const probe = mkdtempSync(join(tmpdir(), 'kiste-mount-jail-'));
  try {
    for (const dir of ['root', 'run', 'layers']) mkdirSync(join(probe, dir));
    writeFileSync(join(probe, 'run', 'serial.log'), '');
    chownSync(join(probe, 'run', 'serial.log'), uid, uid);
    const argv = inMountJail({
      root: join(probe, 'root'), run: join(probe, 'run'), layers: { view: join(probe, 'layers'), at: folders.layers },
      readOnly: [], serialLog: join(probe, 'run', 'serial.log'), user: { uid, gid: uid },
    }, 'true', []);
    await new Promise<void>((resolve, reject) =>
      execFile(argv[0]!, argv.slice(1), { timeout: 10_000, env: { PATH: QEMU_PATH_DIRS.join(':') } }, (error, _stdout, stderr) =>
        error ? reject(new Error((String(stderr).trim() || error.message).split('\n').at(-1))) : resolve(),
      ),
    );
    return null;
  } catch (error) {
    return { reason: `a machine's own file view cannot be built here: ${(error as Error).message}`, hint: 'kiste needs mount namespaces, pivot_root and procfs with hidepid=invisible,subset=pid (Linux 5.8 or later; util-linux): run it as root on the host, not in an unprivileged container.' };
  } finally {
    rmSync(probe, { recursive: true, force: true });
  }
}
