// The image pipeline: Debian packages → root filesystem (mmdebstrap, cached by recipe) → ext4 file
// system (mkfs.ext4 -d, no loop mounts) → qcow2 base disk, with the kernel and initramfs copied out
// for direct kernel boot, and a manifest. See images/README.md for the layout of the output folder.
//
// Versions are content-addressed: vYYYY.MM.DD-<hash8>, hash8 = sha256 over the recipe, the sorted
// package=version list and the agent bundle. A published version folder is never changed again
// (instance disks are qcow2 overlays whose backing file is its disk.qcow2), and it only appears
// under its name once complete (built in a temporary folder, renamed at the end).
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, promises as fs } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { shellQuote } from '../src/shell-quote';
import { releaseNotes } from './components';
import { abortError, run } from './exec';
import { MmdebstrapProgress } from './mmdebstrap-progress';
import { acquireLock, type HeldLock, type LockOwner } from './lock';
import { AGENT_GUEST_PATH, AGENT_PORT_NAME, IMAGE_INFO_GUEST_PATH } from './profiles/base';
import { getProfile } from './profiles';
import type { Profile } from './profiles/types';

/**
 * Bump when the builder changes what ends up in the root filesystem or on the disk in a way the
 * profile does not show (it is part of the recipe hash, so it invalidates caches and versions).
 */
export const BUILDER_REVISION = 1;

export const DEFAULT_MIRROR = 'http://deb.debian.org/debian';
export const DEFAULT_SECURITY_MIRROR = 'http://deb.debian.org/debian-security';

/** ext4 parameters of the base disk; part of the recipe. */
const FILESYSTEM = {
  blockSize: 4096,
  bytesPerInode: 16384,
  reservedPercent: 1,
  journalMiB: 64,
  label: 'kiste-root',
  /** free space left in the base file system; it grows to the instance's disk size at boot */
  headroomMiB: 256,
  roundToMiB: 64,
};

export type BuildStepName = 'lock' | 'rootfs' | 'assemble' | 'filesystem' | 'qcow2' | 'manifest' | 'publish';

const STEPS: ReadonlyArray<{ name: BuildStepName; label: string }> = [
  { name: 'lock', label: 'waiting for other image builds' },
  { name: 'rootfs', label: 'root filesystem from Debian packages (mmdebstrap)' },
  { name: 'assemble', label: 'adding the agent' },
  { name: 'filesystem', label: 'ext4 file system (mkfs.ext4 -d)' },
  { name: 'qcow2', label: 'qcow2 base disk (qemu-img convert)' },
  { name: 'manifest', label: 'checksums and manifest' },
  { name: 'publish', label: 'publishing' },
];

export interface BuildProgress {
  profile: string;
  step: BuildStepName;
  label: string;
  /** 1-based position of the step */
  index: number;
  total: number;
  phase: 'start' | 'update' | 'end';
  /** latest detail: a line of mmdebstrap's output, "cached", "reused", … */
  detail?: string;
  /** since the build started */
  elapsedMs: number;
  /** since the step started */
  stepElapsedMs: number;
}

export interface BuildImageOptions {
  /** profile name (images/profiles) or a profile object */
  profile: string | Profile;
  /** output folder: versions, latest.json, <profile>-latest links (and cache/ by default) */
  outDir: string;
  /**
   * root filesystem tarballs and downloaded .deb files (default <outDir>/cache); several output
   * folders may share one
   */
  cacheDir?: string;
  /** the bundled guest agent (agent/dist/kiste-agent.js) */
  agentBundle: string;
  onProgress?: (progress: BuildProgress) => void;
  /** rebuild the root filesystem from the mirror even when it is cached */
  force?: boolean;
  /** Debian mirror (default http://deb.debian.org/debian, or $KISTE_DEBIAN_MIRROR) */
  mirror?: string;
  /** Debian security mirror (default http://deb.debian.org/debian-security, or $KISTE_DEBIAN_SECURITY_MIRROR) */
  securityMirror?: string;
  signal?: AbortSignal;
  /** clock for the version's date and created_at (tests) */
  now?: () => Date;
}

export interface ImageManifest {
  version: string;
  profile: string;
  description: string;
  created_at: string;
  /** kernel release, e.g. 6.1.0-50-cloud-amd64 */
  kernel: string;
  /** the command line to boot vmlinuz/initrd.img with */
  kernel_cmdline: string;
  /** name=version of every installed Debian package, sorted */
  packages: string[];
  /**
   * name → Installed-Size (KiB, as the package declares it) of every installed Debian package.
   * Absent in images built before the builder recorded it.
   */
  package_sizes_kib?: Record<string, number>;
  /** file name → bytes; disk_virtual and rootfs_used are the disk's virtual size and the files in it */
  sizes: Record<string, number>;
  /** file name → sha256 hex */
  sha256: Record<string, string>;
  recipe_hash: string;
  agent: { guest_path: string; port: string; sha256: string };
  disk: { format: 'qcow2'; filesystem: 'ext4'; device: '/dev/vda'; grows_on_boot: true };
  suite: string;
  /**
   * The image's screen: machines get a display device of this initial size. null (or absent, in
   * images built before the field existed): no display device.
   */
  display?: { width: number; height: number } | null;
  /**
   * The profile's latest version when this one was built (null: the first). Absent in images built
   * before the builder wrote release notes.
   */
  previous_version?: string | null;
  /** What changed since previous_version (images/components.ts releaseNotes). */
  release_notes?: string[];
}

/** The size of a version's disk in MiB (what its file system spans). */
export function manifestDiskMib(manifest: Pick<ImageManifest, 'sizes'>): number {
  return Math.ceil((manifest.sizes.disk_virtual ?? 0) / (1024 * 1024));
}

export interface BuiltImage {
  version: string;
  profile: string;
  /** the version's folder: vmlinuz, initrd.img, disk.qcow2, manifest.json */
  dir: string;
  kernel: string;
  initrd: string;
  disk: string;
  manifest: ImageManifest;
  /** the root filesystem came from the cache */
  rootfsCached: boolean;
  /** the version was already published; nothing was built */
  reused: boolean;
  durationMs: number;
}

export interface LatestEntry {
  version: string;
  created_at: string;
  dir: string;
}

export const IMAGE_FILES = { kernel: 'vmlinuz', initrd: 'initrd.img', disk: 'disk.qcow2', manifest: 'manifest.json' } as const;

export const VERSION_RE = /^v\d{4}\.\d{2}\.\d{2}-[0-9a-f]{8}$/;

// ---------------------------------------------------------------------------------------------
// Hashing

/** JSON with object keys sorted, so that the same recipe always hashes the same. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

const sha256 = (data: string | Buffer) => createHash('sha256').update(data).digest('hex');

/**
 * Everything that decides the root filesystem: the profile, the customize script generated from it,
 * the file system parameters and the builder's own revision.
 */
export function recipeOf(profile: Profile): string {
  return canonicalJson({ builder: BUILDER_REVISION, filesystem: FILESYSTEM, profile, customize: customizeScript(profile) });
}

export function recipeHash(profile: Profile): string {
  return sha256(recipeOf(profile));
}

/** hash8 of the version: the recipe, the sorted package=version list and the agent bundle bytes. */
export function contentHash(profile: Profile, packages: string[], agent: Buffer): string {
  const h = createHash('sha256');
  h.update(recipeOf(profile));
  h.update('\0');
  h.update([...packages].sort().join('\n'));
  h.update('\0');
  h.update(agent);
  return h.digest('hex').slice(0, 8);
}

export function imageVersion(date: Date, hash8: string): string {
  const p = (n: number) => String(n).padStart(2, '0');
  return `v${date.getUTCFullYear()}.${p(date.getUTCMonth() + 1)}.${p(date.getUTCDate())}-${hash8}`;
}

async function sha256File(path: string): Promise<string> {
  const h = createHash('sha256');
  for await (const chunk of createReadStream(path)) h.update(chunk as Buffer);
  return h.digest('hex');
}

// ---------------------------------------------------------------------------------------------
// Output folder

/** Reads `<outDir>/latest.json`: the newest version of each profile. */
export async function readLatest(outDir: string): Promise<Record<string, LatestEntry>> {
  try {
    return JSON.parse(await fs.readFile(join(outDir, 'latest.json'), 'utf8')) as Record<string, LatestEntry>;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return {};
    throw err;
  }
}

/** The newest complete image of a profile, or undefined when none has been built. */
export async function readLatestImage(outDir: string, profile: string): Promise<{ dir: string; manifest: ImageManifest } | undefined> {
  const entry = (await readLatest(outDir))[profile];
  if (!entry) return undefined;
  const dir = join(outDir, entry.version);
  const manifest = await readManifest(dir);
  return manifest ? { dir, manifest } : undefined;
}

export async function readManifest(versionDir: string): Promise<ImageManifest | undefined> {
  try {
    return JSON.parse(await fs.readFile(join(versionDir, IMAGE_FILES.manifest), 'utf8')) as ImageManifest;
  } catch {
    return undefined;
  }
}

async function findPublished(outDir: string, profile: string, hash8: string): Promise<string | undefined> {
  const names = await fs.readdir(outDir).catch(() => [] as string[]);
  for (const name of names.sort().reverse()) {
    if (!VERSION_RE.test(name) || !name.endsWith(`-${hash8}`)) continue;
    const manifest = await readManifest(join(outDir, name));
    if (manifest?.profile === profile) return name;
  }
  return undefined;
}

async function writeAtomic(path: string, data: string): Promise<void> {
  const tmp = `${path}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
  await fs.writeFile(tmp, data);
  await fs.rename(tmp, path);
}

async function publishLatest(outDir: string, profile: string, entry: LatestEntry): Promise<void> {
  const latest = await readLatest(outDir);
  latest[profile] = entry;
  await writeAtomic(join(outDir, 'latest.json'), `${JSON.stringify(latest, null, 2)}\n`);
  // <profile>-latest → version folder, for people and scripts
  const link = join(outDir, `${profile}-latest`);
  const tmp = `${link}.tmp-${process.pid}`;
  await fs.rm(tmp, { force: true });
  await fs.symlink(entry.version, tmp);
  await fs.rename(tmp, link);
}

/**
 * Removes a build folder left by a killed build. mmdebstrap mounts /proc, /sys and /dev inside its
 * chroot; a build killed with SIGKILL leaves them mounted, and `rm -rf` must never walk into them.
 */
async function removeBuildTree(dir: string): Promise<void> {
  const real = await fs.realpath(dir).catch(() => undefined);
  if (!real) return;
  const mountinfo = await fs.readFile('/proc/self/mountinfo', 'utf8').catch(() => '');
  const unescape = (s: string) => s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
  const mounts = mountinfo
    .split('\n')
    .map((line) => line.split(' ')[4])
    .filter((m): m is string => !!m)
    .map(unescape)
    .filter((m) => m === real || m.startsWith(`${real}/`))
    .sort((a, b) => b.length - a.length);
  for (const m of mounts) await run('umount', ['--lazy', m]).catch(() => undefined);
  await run('rm', ['-rf', '--one-file-system', real]);
}

async function cleanStale(outDir: string, cache: string): Promise<void> {
  for (const name of await fs.readdir(outDir)) {
    if (name.startsWith('.build-')) await removeBuildTree(join(outDir, name));
    else if (name.includes('.tmp-')) await fs.rm(join(outDir, name), { force: true, recursive: true });
  }
  for (const name of await fs.readdir(cache).catch(() => [] as string[])) {
    if (name.includes('.tmp')) await removeBuildTree(join(cache, name));
  }
}

// ---------------------------------------------------------------------------------------------
// Checks

async function onPath(tool: string): Promise<boolean> {
  for (const dir of (process.env.PATH ?? '').split(':').concat(['/usr/sbin', '/sbin'])) {
    if (!dir) continue;
    try {
      await fs.access(join(dir, tool), fs.constants.X_OK);
      return true;
    } catch {
      /* next */
    }
  }
  return false;
}

const TOOLS: Record<string, string> = { mmdebstrap: 'mmdebstrap', 'mkfs.ext4': 'e2fsprogs', 'qemu-img': 'qemu-utils', tar: 'tar' };

/** Why this machine cannot build images, or undefined when it can. */
export async function buildPrerequisitesMissing(): Promise<string | undefined> {
  if (process.platform !== 'linux') return 'images are built on Linux';
  if (process.getuid?.() !== 0) return 'building images needs root (mmdebstrap --mode=root creates device nodes and root-owned files)';
  const missing: string[] = [];
  for (const [tool, pkg] of Object.entries(TOOLS)) if (!(await onPath(tool))) missing.push(`${tool} (apt install ${pkg})`);
  return missing.length ? `missing tools: ${missing.join(', ')}` : undefined;
}

// ---------------------------------------------------------------------------------------------
// Root filesystem (mmdebstrap), cached by recipe hash

interface RootfsCache {
  recipe_hash: string;
  profile: string;
  kernel: string;
  packages: string[];
  /** absent in cache entries written before the builder recorded sizes */
  package_sizes_kib?: Record<string, number>;
  created_at: string;
  seconds: number;
}

function customizeScript(profile: Profile): string {
  const q = shellQuote;
  const lines = [
    '#!/bin/sh',
    '# Generated by images/build-image.ts: runs as an mmdebstrap customize hook on the build host.',
    'set -eu',
    'ROOT="$1"; STAGE="$2"; INFO="$3"',
    'cp -a "$STAGE"/. "$ROOT"/',
    ...(profile.enableUnits.length ? [`chroot "$ROOT" systemctl enable --quiet ${profile.enableUnits.map(q).join(' ')}`] : []),
    ...(profile.maskUnits.length ? [`chroot "$ROOT" systemctl mask --quiet ${profile.maskUnits.map(q).join(' ')}`] : []),
    ...profile.customize,
    // the host boots the kernel copied out of the image: an upgraded kernel package in the guest
    // would replace /lib/modules of the running kernel with those of another build
    `chroot "$ROOT" sh -c ${q(`apt-mark hold ${profile.kernelPackage} $(dpkg-query -W -f '\${db:Status-Abbrev}\${Package}\\n' 'linux-image-[0-9]*' | sed -n 's/^ii //p') >/dev/null`)}`,
    'chroot "$ROOT" update-initramfs -u -k all',
    'ls "$ROOT"/boot | sed -n "s/^vmlinuz-//p" > "$INFO/kernel"',
    // installed packages ("ii"; "hi" for the held kernel)
    `chroot "$ROOT" dpkg-query -W -f '\${db:Status-Abbrev}|\${Package}=\${Version}\\n' | awk -F'|' '$1 ~ /^[ih]i/ { print $2 }' | LC_ALL=C sort > "$INFO/packages"`,
    // and their Installed-Size in KiB (name<TAB>kib), for the component catalogue's sizes
    `chroot "$ROOT" dpkg-query -W -f '\${db:Status-Abbrev}|\${Package}|\${Installed-Size}\\n' | awk -F'|' '$1 ~ /^[ih]i/ { print $2 "\\t" $3 }' | LC_ALL=C sort > "$INFO/sizes"`,
    '',
  ];
  return lines.join('\n');
}

async function writeStage(stageDir: string, profile: Profile): Promise<void> {
  for (const file of profile.files) {
    if (!file.path.startsWith('/') || file.path.split('/').includes('..')) throw new Error(`bad file path in profile ${profile.name}: ${file.path}`);
    const target = join(stageDir, file.path);
    await fs.mkdir(resolve(target, '..'), { recursive: true, mode: 0o755 });
    await fs.writeFile(target, file.content);
    await fs.chmod(target, file.mode ?? 0o644);
  }
}

async function buildRootfs(args: {
  profile: Profile;
  /** the cached root filesystem: a directory */
  rootPath: string;
  infoPath: string;
  logPath: string;
  debsDir: string;
  workDir: string;
  mirror: string;
  securityMirror: string;
  signal?: AbortSignal;
  detail: (line: string) => void;
}): Promise<RootfsCache> {
  const { profile, workDir } = args;
  const started = Date.now();
  const stage = join(workDir, 'stage');
  const info = join(workDir, 'info');
  const script = join(workDir, 'customize.sh');
  await fs.mkdir(stage, { recursive: true });
  await fs.mkdir(info, { recursive: true });
  await fs.mkdir(args.debsDir, { recursive: true });
  await writeStage(stage, profile);
  await fs.writeFile(script, customizeScript(profile), { mode: 0o755 });

  const components = profile.components.join(' ');
  const sources = [
    `deb ${args.mirror} ${profile.suite} ${components}`,
    `deb ${args.mirror} ${profile.suite}-updates ${components}`,
    `deb ${args.securityMirror} ${profile.suite}-security ${components}`,
  ];
  const q = shellQuote;
  const debs = q(args.debsDir);
  const tmpRoot = `${args.rootPath}.tmp`;
  const argv = [
    '--mode=root',
    '--verbose', // apt's and dpkg's own lines: the progress counts packages in them (mmdebstrap-progress.ts)
    `--variant=${profile.variant}`,
    '--format=directory',
    `--components=${profile.components.join(',')}`,
    `--include=${[...profile.packages, profile.kernelPackage].join(',')}`,
    ...profile.dpkgOptions.map((o) => `--dpkgopt=${o}`),
    // keep downloaded .deb files between builds (hard links into <out>/cache/debs): a changed recipe
    // downloads only what is new
    '--skip=essential/unlink',
    `--setup-hook=mkdir -p "$1/var/cache/apt/archives" && { cp -al ${debs}/. "$1/var/cache/apt/archives/" 2>/dev/null || cp -a ${debs}/. "$1/var/cache/apt/archives/"; }`,
    `--customize-hook=/bin/sh ${q(script)} "$1" ${q(stage)} ${q(info)}`,
    `--customize-hook=for f in "$1"/var/cache/apt/archives/*.deb; do [ -e "$f" ] || continue; t=${debs}/$(basename "$f"); [ -e "$t" ] || ln "$f" "$t" 2>/dev/null || cp "$f" "$t"; done`,
    profile.suite,
    tmpRoot,
    ...sources,
  ];
  const log = await fs.open(args.logPath, 'w');
  const progress = new MmdebstrapProgress();
  try {
    await log.write(`mmdebstrap ${argv.map(q).join(' ')}\n`);
    await run('mmdebstrap', argv, {
      // mmdebstrap's chroot lives in the build folder (same file system as the debs cache, and
      // cleaned up with the build folder if the build is killed)
      env: { ...process.env, TMPDIR: workDir, LC_ALL: 'C.UTF-8' },
      signal: args.signal,
      onLine: (line) => {
        void log.write(`${line}\n`);
        const detail = progress.line(line);
        if (detail !== null) args.detail(detail);
      },
    });
  } catch (err) {
    // mmdebstrap unmounts what it mounted when it fails or is stopped; what is left is files
    await removeBuildTree(tmpRoot).catch(() => undefined);
    throw err;
  } finally {
    await log.close();
  }
  const kernel = (await fs.readFile(join(info, 'kernel'), 'utf8')).trim().split('\n');
  if (kernel.length !== 1 || !kernel[0]) throw new Error(`expected exactly one kernel in /boot of the rootfs, found: ${kernel.join(', ') || 'none'}`);
  const packages = (await fs.readFile(join(info, 'packages'), 'utf8')).split('\n').filter(Boolean);
  const meta: RootfsCache = {
    recipe_hash: recipeHash(profile),
    profile: profile.name,
    kernel: kernel[0],
    packages,
    package_sizes_kib: parseSizes(await fs.readFile(join(info, 'sizes'), 'utf8')),
    created_at: new Date().toISOString(),
    seconds: Math.round((Date.now() - started) / 100) / 10,
  };
  // --force over an existing cache entry: replace it (metadata first, so it never describes the wrong tree)
  await fs.rm(args.infoPath, { force: true });
  await removeBuildTree(args.rootPath);
  await fs.rename(tmpRoot, args.rootPath);
  // the metadata is written last: a cache entry counts only when both files exist
  await writeAtomic(args.infoPath, `${JSON.stringify(meta, null, 2)}\n`);
  // older root filesystems of this profile (another recipe) are not needed again
  const cacheDir = resolve(args.rootPath, '..');
  const keep = new Set([basename(args.rootPath), basename(args.infoPath), basename(args.logPath)]);
  for (const name of await fs.readdir(cacheDir)) {
    if (name.startsWith(`rootfs-${profile.name}-`) && !keep.has(name)) await removeBuildTree(join(cacheDir, name));
  }
  return meta;
}

/**
 * `name<TAB>kib` lines → {name: kib}. An empty Installed-Size (some metapackages declare none)
 * counts 0; a line that is not a size is left out (sizes inform, they never fail a build).
 */
export function parseSizes(text: string): Record<string, number> {
  const sizes: Record<string, number> = {};
  for (const line of text.split('\n')) {
    const [name, kib = ''] = line.split('\t');
    if (!name || !/^\d*$/.test(kib.trim())) continue;
    sizes[name] = Number(kib.trim() || 0);
  }
  return sizes;
}

async function readRootfsCache(rootPath: string, infoPath: string): Promise<RootfsCache | undefined> {
  try {
    await fs.access(join(rootPath, 'etc', 'os-release'));
    return JSON.parse(await fs.readFile(infoPath, 'utf8')) as RootfsCache;
  } catch {
    return undefined;
  }
}

// ---------------------------------------------------------------------------------------------
// Disk

function uuidFrom(hex: string): string {
  const h = hex.padEnd(32, '0').slice(0, 32).split('');
  h[12] = '4';
  h[16] = ((parseInt(h[16]!, 16) & 0x3) | 0x8).toString(16);
  const s = h.join('');
  return `${s.slice(0, 8)}-${s.slice(8, 12)}-${s.slice(12, 16)}-${s.slice(16, 20)}-${s.slice(20, 32)}`;
}

async function duBytes(dir: string, signal?: AbortSignal): Promise<{ bytes: number; inodes: number }> {
  const bytes = Number((await run('du', ['-s', '--block-size=1', dir], { captureStdout: true, signal })).split('\t')[0]);
  const inodes = Number((await run('du', ['-s', '--inodes', dir], { captureStdout: true, signal })).split('\t')[0]);
  return { bytes, inodes };
}

/** Takes the files a build adds out of the cached root filesystem again. */
async function removeAdded(rootDir: string): Promise<void> {
  await fs.rm(join(rootDir, AGENT_GUEST_PATH), { force: true });
  await fs.rm(join(rootDir, IMAGE_INFO_GUEST_PATH), { force: true });
}

// ---------------------------------------------------------------------------------------------
// The build

/**
 * Builds (or finds) the image of a profile and publishes it as the profile's latest version.
 * Safe to call from several processes at once: builds of one output folder take turns.
 */
export async function buildImage(options: BuildImageOptions): Promise<BuiltImage> {
  const profile = typeof options.profile === 'string' ? getProfile(options.profile) : options.profile;
  const outDir = resolve(options.outDir);
  const now = options.now ?? (() => new Date());
  const { signal } = options;
  const mirror = options.mirror ?? process.env.KISTE_DEBIAN_MIRROR ?? DEFAULT_MIRROR;
  const securityMirror = options.securityMirror ?? process.env.KISTE_DEBIAN_SECURITY_MIRROR ?? DEFAULT_SECURITY_MIRROR;
  const started = Date.now();

  let current: { index: number; started: number; detail?: string } | undefined;
  const report = (phase: BuildProgress['phase'], detail?: string) => {
    if (!current || !options.onProgress) return;
    const step = STEPS[current.index]!;
    if (detail !== undefined) current.detail = detail;
    try {
      options.onProgress({
        profile: profile.name,
        step: step.name,
        label: step.label,
        index: current.index + 1,
        total: STEPS.length,
        phase,
        detail: current.detail,
        elapsedMs: Date.now() - started,
        stepElapsedMs: Date.now() - current.started,
      });
    } catch {
      // a progress display must never break the build
    }
  };
  const step = (name: BuildStepName, detail?: string) => {
    if (current) report('end');
    current = { index: STEPS.findIndex((s) => s.name === name), started: Date.now(), detail };
    report('start');
  };
  const checkAbort = () => {
    if (signal?.aborted) throw abortError();
  };

  const missing = await buildPrerequisitesMissing();
  if (missing) throw new Error(`cannot build the ${profile.name} image: ${missing}`);
  let agent: Buffer;
  try {
    agent = await fs.readFile(options.agentBundle);
  } catch (err) {
    throw new Error(
      `agent bundle not readable at ${options.agentBundle} (${(err as NodeJS.ErrnoException).code ?? String(err)}): ` +
        'build it with `npx tsx agent/build.ts` or pass another path',
    );
  }

  const cacheDir = resolve(options.cacheDir ?? join(outDir, 'cache'));
  await fs.mkdir(outDir, { recursive: true });
  await fs.mkdir(cacheDir, { recursive: true });
  step('lock');
  // the output folder's lock, then the cache's (always in this order: no deadlock between builds
  // that share one of them)
  const locks: HeldLock[] = [];
  let addedTo: string | undefined;
  const workDir = join(outDir, `.build-${profile.name}-${process.pid}-${randomBytes(4).toString('hex')}`);
  try {
    for (const dir of new Set([outDir, cacheDir])) {
      locks.push(
        await acquireLock(join(dir, '.lock'), `build of ${profile.name} into ${outDir}`, {
          signal,
          onWait: (owner: LockOwner | undefined) => report('update', owner ? `waiting: ${owner.what} (pid ${owner.pid})` : 'waiting for another build'),
        }),
      );
    }
    await cleanStale(outDir, cacheDir);
    await fs.mkdir(workDir);

    // -- root filesystem
    step('rootfs');
    const rHash = recipeHash(profile);
    const cacheBase = join(cacheDir, `rootfs-${profile.name}-${rHash.slice(0, 16)}`);
    // a directory, not a tarball: mkfs.ext4 -d reads it as it is, nothing to unpack per build
    const rootDir = cacheBase;
    const infoPath = `${cacheBase}.json`;
    let rootfs = options.force ? undefined : await readRootfsCache(rootDir, infoPath);
    const rootfsCached = !!rootfs;
    if (rootfs) report('update', `cached (${basename(rootDir)})`);
    else {
      rootfs = await buildRootfs({
        profile,
        rootPath: rootDir,
        infoPath,
        logPath: `${cacheBase}.log`,
        debsDir: join(cacheDir, 'debs'),
        workDir,
        mirror,
        securityMirror,
        signal,
        detail: (line) => report('update', line),
      });
    }
    checkAbort();

    // -- version
    const hash8 = contentHash(profile, rootfs.packages, agent);
    const existing = await findPublished(outDir, profile.name, hash8);
    let version: string;
    let reused = false;
    if (existing) {
      version = existing;
      reused = true;
    } else {
      version = imageVersion(now(), hash8);
      const createdAt = now().toISOString();
      const imageDir = join(workDir, 'image');
      await fs.mkdir(imageDir);

      // -- agent: written into the cached root filesystem for mkfs.ext4 -d, removed again after
      // (builds take turns on the cache, and every build writes both files before using them)
      step('assemble');
      addedTo = rootDir;
      const agentDir = join(rootDir, resolve(AGENT_GUEST_PATH, '..'));
      await fs.mkdir(agentDir, { recursive: true, mode: 0o755 });
      await fs.writeFile(join(rootDir, AGENT_GUEST_PATH), agent);
      await fs.chmod(join(rootDir, AGENT_GUEST_PATH), 0o644);
      await fs.mkdir(join(rootDir, resolve(IMAGE_INFO_GUEST_PATH, '..')), { recursive: true, mode: 0o755 });
      await fs.writeFile(join(rootDir, IMAGE_INFO_GUEST_PATH), `${JSON.stringify({ version, profile: profile.name, created_at: createdAt })}\n`);
      await fs.chmod(join(rootDir, IMAGE_INFO_GUEST_PATH), 0o644);
      await fs.copyFile(join(rootDir, 'boot', `vmlinuz-${rootfs.kernel}`), join(imageDir, IMAGE_FILES.kernel));
      await fs.copyFile(join(rootDir, 'boot', `initrd.img-${rootfs.kernel}`), join(imageDir, IMAGE_FILES.initrd));
      checkAbort();

      // -- ext4
      step('filesystem');
      const used = await duBytes(rootDir, signal);
      const mib = 1024 * 1024;
      const minForInodes = Math.ceil(used.inodes * 1.5) * FILESYSTEM.bytesPerInode;
      const wanted = Math.max(used.bytes * 1.1 + FILESYSTEM.headroomMiB * mib, minForInodes);
      const fsMiB = Math.ceil(wanted / mib / FILESYSTEM.roundToMiB) * FILESYSTEM.roundToMiB;
      const raw = join(workDir, 'disk.raw');
      const fsUuid = uuidFrom(sha256(`${version}/${profile.name}`));
      report('update', `${fsMiB} MiB for ${Math.round(used.bytes / mib)} MiB in ${used.inodes} files`);
      await run(
        'mkfs.ext4',
        [
          '-q',
          '-F',
          '-t',
          'ext4',
          '-d',
          rootDir,
          '-L',
          FILESYSTEM.label,
          '-U',
          fsUuid,
          '-b',
          String(FILESYSTEM.blockSize),
          '-i',
          String(FILESYSTEM.bytesPerInode),
          '-m',
          String(FILESYSTEM.reservedPercent),
          '-J',
          `size=${FILESYSTEM.journalMiB}`,
          // initialise inode tables and journal now, not lazily in every booted instance
          '-E',
          `lazy_itable_init=0,lazy_journal_init=0,hash_seed=${fsUuid}`,
          raw,
          `${fsMiB}M`,
        ],
        { signal },
      );
      await removeAdded(rootDir);
      addedTo = undefined;
      checkAbort();

      // -- qcow2
      step('qcow2');
      const disk = join(imageDir, IMAGE_FILES.disk);
      await run('qemu-img', ['convert', '-q', '-f', 'raw', '-O', 'qcow2', '-o', 'cluster_size=65536', raw, disk], { signal });
      await fs.rm(raw);
      checkAbort();

      // -- manifest
      step('manifest');
      // release notes against the profile's latest version (unreadable: notes as for a first release;
      // they must never fail a build)
      const previous = (await readLatestImage(outDir, profile.name).catch(() => undefined))?.manifest ?? null;
      const notes = releaseNotes(previous, { version, packages: rootfs.packages, package_sizes_kib: rootfs.package_sizes_kib });
      const sizes: Record<string, number> = {};
      const sums: Record<string, string> = {};
      for (const name of [IMAGE_FILES.kernel, IMAGE_FILES.initrd, IMAGE_FILES.disk]) {
        sizes[name] = (await fs.stat(join(imageDir, name))).size;
        sums[name] = await sha256File(join(imageDir, name));
      }
      sizes.disk_virtual = fsMiB * mib;
      sizes.rootfs_used = used.bytes;
      const manifest: ImageManifest = {
        version,
        profile: profile.name,
        description: profile.description,
        created_at: createdAt,
        kernel: rootfs.kernel,
        kernel_cmdline: profile.kernelCmdline,
        packages: rootfs.packages,
        ...(rootfs.package_sizes_kib ? { package_sizes_kib: rootfs.package_sizes_kib } : {}),
        sizes,
        sha256: sums,
        recipe_hash: rHash,
        agent: { guest_path: AGENT_GUEST_PATH, port: AGENT_PORT_NAME, sha256: sha256(agent) },
        disk: { format: 'qcow2', filesystem: 'ext4', device: '/dev/vda', grows_on_boot: true },
        suite: profile.suite,
        display: profile.display ?? null,
        previous_version: previous?.version ?? null,
        release_notes: notes,
      };
      await fs.writeFile(join(imageDir, IMAGE_FILES.manifest), `${JSON.stringify(manifest, null, 2)}\n`);
      await fs.chmod(imageDir, 0o755);
      checkAbort();

      // -- publish: one rename makes the version appear complete
      step('publish');
      await fs.rename(imageDir, join(outDir, version));
    }
    if (reused) step('publish', `reused ${version}`);
    const dir = join(outDir, version);
    const manifest = (await readManifest(dir))!;
    await publishLatest(outDir, profile.name, { version, created_at: manifest.created_at, dir: version });
    report('end');
    return {
      version,
      profile: profile.name,
      dir,
      kernel: join(dir, IMAGE_FILES.kernel),
      initrd: join(dir, IMAGE_FILES.initrd),
      disk: join(dir, IMAGE_FILES.disk),
      manifest,
      rootfsCached,
      reused,
      durationMs: Date.now() - started,
    };
  } finally {
    if (addedTo) await removeAdded(addedTo).catch(() => undefined);
    await removeBuildTree(workDir).catch(() => undefined);
    for (const lock of locks.reverse()) await lock.release();
  }
}
