// The component catalogue: what a user cares about in an image (languages, tools, editors, the
// desktop), named by the Debian packages the profiles install. Nothing here is declared by hand
// about a built image: which components it holds, their versions and sizes are read from its
// manifest (the dpkg database of the image), and release notes compare two manifests.
import type { ImageManifest } from './build-image';

export interface ComponentResources {
  vcpu?: number;
  memoryMib?: number;
  diskMib?: number;
}

export type ComponentCategory = 'languages' | 'tools' | 'editors' | 'desktop' | 'network' | 'system';

export interface ComponentRecipe {
  /** lower case, digits and dashes: ids with a colon (`deb:<package>`) are the API's raw packages */
  id: string;
  name: string;
  description: string;
  category: ComponentCategory;
  /**
   * Debian packages that make it, each named in some profile's package list; all must be installed
   * for an image to hold the component. packages[0] is the main one: its version is the component's.
   */
  packages: string[];
  /**
   * Further packages of the component that the main ones pull in (its own libraries and data, e.g.
   * libnode108 under nodejs, whose own Installed-Size is small): regular expressions over the whole
   * package name, so that a new Debian release's renamed libraries still match. Listed with the
   * component and counted in its size when installed; never required.
   */
  extraPackages?: string[];
  /** component ids it depends on */
  requires: string[];
  minResources?: ComponentResources;
  /**
   * Which version changes release notes call BREAKING: 'major' (default), a change of the leading
   * number of the upstream version; 'never' for packages numbered by date or by patch
   * (ca-certificates 20230311, xterm 379), whose every update changes that number.
   */
  breaking?: 'major' | 'never';
}

export const COMPONENT_RECIPES: readonly ComponentRecipe[] = [
  // languages
  {
    id: 'node',
    name: 'Node.js',
    description: "Debian's Node.js runtime (also runs the kiste agent)",
    category: 'languages',
    packages: ['nodejs'],
    extraPackages: ['libnode\\d+', 'node-.+'],
    requires: [],
  },
  {
    id: 'python',
    name: 'Python 3',
    description: 'The Python 3 interpreter and standard library',
    category: 'languages',
    packages: ['python3'],
    extraPackages: ['python3-minimal', 'python3\\.\\d+', 'python3\\.\\d+-minimal', 'libpython3-stdlib', 'libpython3\\.\\d+-(minimal|stdlib)'],
    requires: [],
  },
  {
    id: 'build-tools',
    name: 'Build tools',
    description: 'GCC (C and C++), make, binutils, libc headers and dpkg-dev (build-essential)',
    category: 'languages',
    packages: ['build-essential'],
    extraPackages: [
      'gcc',
      'g\\+\\+',
      'make',
      'dpkg-dev',
      'libdpkg-perl',
      'gcc-\\d+',
      'g\\+\\+-\\d+',
      'libgcc-\\d+-dev',
      'libstdc\\+\\+-\\d+-dev',
      'libc6-dev',
      'libc-dev-bin',
      'linux-libc-dev',
      'libcrypt-dev',
      'libnsl-dev',
      'rpcsvc-proto',
      'binutils',
      'binutils-common',
      'binutils-x86-64-linux-gnu',
      'libbinutils',
      'libctf-nobfd\\d+',
      'libctf\\d+',
      'libgprofng\\d+',
      'lib(asan|lsan|tsan|ubsan|itm|quadmath)\\d+',
      'libcc1-\\d+',
    ],
    requires: [],
  },
  // tools
  {
    id: 'git',
    name: 'Git',
    description: 'Distributed version control',
    category: 'tools',
    packages: ['git'],
    extraPackages: ['git-man', 'liberror-perl'],
    requires: [],
  },
  { id: 'jq', name: 'jq', description: 'Command-line JSON processor', category: 'tools', packages: ['jq'], extraPackages: ['libjq\\d+', 'libonig\\d+'], requires: [] },
  { id: 'htop', name: 'htop', description: 'Interactive process viewer', category: 'tools', packages: ['htop'], requires: [] },
  { id: 'less', name: 'less', description: 'Pager', category: 'tools', packages: ['less'], requires: [], breaking: 'never' },
  { id: 'unzip', name: 'unzip', description: 'Extracts ZIP archives', category: 'tools', packages: ['unzip'], requires: [] },
  { id: 'xz', name: 'XZ Utils', description: 'xz and lzma compression', category: 'tools', packages: ['xz-utils'], requires: [] },
  { id: 'zstd', name: 'Zstandard', description: 'zstd compression', category: 'tools', packages: ['zstd'], requires: [] },
  {
    id: 'man',
    name: 'Manual pages',
    description: 'man and the Linux manual pages',
    category: 'tools',
    packages: ['man-db', 'manpages'],
    extraPackages: ['groff-base', 'libpipeline\\d+'],
    requires: [],
  },
  // editors
  { id: 'vim', name: 'Vim', description: 'Vi IMproved (vim-tiny)', category: 'editors', packages: ['vim-tiny'], extraPackages: ['vim-common'], requires: [] },
  { id: 'nano', name: 'GNU nano', description: 'Small terminal text editor', category: 'editors', packages: ['nano'], requires: [] },
  {
    id: 'mousepad',
    name: 'Mousepad',
    description: 'Graphical text editor',
    category: 'editors',
    packages: ['mousepad'],
    extraPackages: ['libmousepad\\d+'],
    requires: ['x-display'],
  },
  // network
  { id: 'curl', name: 'curl', description: 'Transfers data from or to URLs', category: 'network', packages: ['curl'], extraPackages: ['libcurl4'], requires: [] },
  { id: 'wget', name: 'GNU Wget', description: 'Downloads files over HTTP(S) and FTP', category: 'network', packages: ['wget'], requires: [] },
  { id: 'rsync', name: 'rsync', description: 'Fast incremental file transfer', category: 'network', packages: ['rsync'], requires: [] },
  { id: 'openssh-client', name: 'OpenSSH client', description: 'ssh, scp and sftp', category: 'network', packages: ['openssh-client'], requires: [] },
  {
    id: 'openssh-server',
    name: 'OpenSSH server',
    description: 'sshd with keys only, and the SFTP server',
    category: 'network',
    packages: ['openssh-server', 'openssh-sftp-server'],
    requires: ['openssh-client'],
  },
  {
    id: 'ca-certificates',
    name: 'CA certificates',
    description: "Mozilla's certificate authorities, for TLS",
    category: 'network',
    packages: ['ca-certificates'],
    requires: [],
    breaking: 'never',
  },
  { id: 'iproute2', name: 'iproute2', description: 'ip and ss', category: 'network', packages: ['iproute2'], requires: [] },
  { id: 'ping', name: 'ping', description: 'ICMP echo (iputils-ping)', category: 'network', packages: ['iputils-ping'], requires: [], breaking: 'never' },
  {
    id: 'dns-tools',
    name: 'DNS tools',
    description: 'dig, host and nslookup (BIND 9)',
    category: 'network',
    packages: ['dnsutils'],
    extraPackages: ['bind9-dnsutils', 'bind9-host', 'bind9-libs'],
    requires: [],
  },
  // system
  {
    id: 'systemd',
    name: 'systemd',
    description: 'Init and service manager, udev, logind, networkd and resolved',
    category: 'system',
    packages: ['systemd-sysv', 'udev', 'dbus', 'libpam-systemd', 'systemd-resolved'],
    extraPackages: ['systemd', 'libsystemd-shared'],
    requires: [],
  },
  { id: 'procps', name: 'procps', description: 'ps, top, free, kill, …', category: 'system', packages: ['procps'], extraPackages: ['libproc2-\\d+'], requires: [] },
  { id: 'sudo', name: 'sudo', description: 'Runs commands as root (the desktop user may, without a password)', category: 'system', packages: ['sudo'], requires: [] },
  { id: 'locales', name: 'Locales', description: 'glibc locale data', category: 'system', packages: ['locales'], requires: [] },
  // desktop
  {
    id: 'x-display',
    name: 'X display',
    description: "Xorg on the machine's screen, with xdotool (scripted input), xclip (clipboard) and xrandr",
    category: 'desktop',
    packages: ['xserver-xorg-core', 'xserver-xorg-input-libinput', 'xauth', 'x11-xserver-utils', 'xdotool', 'xclip'],
    extraPackages: ['xserver-common', 'libxdo\\d+'],
    requires: [],
  },
  { id: 'xterm', name: 'xterm', description: 'X terminal emulator', category: 'desktop', packages: ['xterm'], requires: ['x-display'], breaking: 'never' },
  {
    id: 'xfce-desktop',
    name: 'Xfce desktop',
    description: 'The Xfce desktop session with its terminal, file manager and panel',
    category: 'desktop',
    packages: ['xfce4', 'xfce4-terminal', 'dbus-x11', 'at-spi2-core', 'fonts-dejavu-core', 'adwaita-icon-theme'],
    extraPackages: [
      'xfce4-.+',
      'libxfce4.+',
      'xfwm4',
      'xfdesktop4(-data)?',
      'xfconf',
      'libxfconf-.+',
      'thunar(-data)?',
      'libthunarx-.+',
      'libgarcon-.+',
      'exo-utils',
      'libexo-.+',
    ],
    requires: ['x-display'],
    // what test/images/desktop.check.ts runs the desktop image with
    minResources: { vcpu: 2, memoryMib: 2048 },
  },
  { id: 'scrot', name: 'scrot', description: 'Screenshots from inside the machine', category: 'desktop', packages: ['scrot'], requires: ['x-display'] },
];

/**
 * Throws unless every recipe has a unique, well-formed id and at least one package, its extra
 * package patterns compile, and `requires` names existing ids without a cycle. Run at module load on
 * COMPONENT_RECIPES: a broken catalogue fails the service and the builder at start, not a user later.
 */
export function checkComponentRecipes(recipes: readonly ComponentRecipe[]): void {
  const byId = new Map<string, ComponentRecipe>();
  for (const r of recipes) {
    if (!/^[a-z0-9][a-z0-9-]*$/.test(r.id)) throw new Error(`component id "${r.id}": lower case letters, digits and dashes only`);
    if (byId.has(r.id)) throw new Error(`component id "${r.id}" appears twice`);
    if (!r.packages.length) throw new Error(`component "${r.id}" has no packages`);
    for (const p of r.extraPackages ?? []) new RegExp(`^(?:${p})$`);
    byId.set(r.id, r);
  }
  for (const r of recipes) {
    for (const dep of r.requires) if (!byId.has(dep)) throw new Error(`component "${r.id}" requires unknown component "${dep}"`);
  }
  // depth-first search; a component met again while on the current path closes a cycle
  const state = new Map<string, 'visiting' | 'done'>();
  const visit = (id: string, path: string[]) => {
    if (state.get(id) === 'done') return;
    if (state.get(id) === 'visiting') throw new Error(`component requires form a cycle: ${[...path.slice(path.indexOf(id)), id].join(' → ')}`);
    state.set(id, 'visiting');
    for (const dep of byId.get(id)!.requires) visit(dep, [...path, id]);
    state.set(id, 'done');
  };
  for (const r of recipes) visit(r.id, []);
}

checkComponentRecipes(COMPONENT_RECIPES);

const EXTRA_PATTERNS = new Map(COMPONENT_RECIPES.map((r) => [r.id, (r.extraPackages ?? []).map((p) => new RegExp(`^(?:${p})$`))]));

export interface BuiltComponent {
  id: string;
  name: string;
  description: string;
  category: ComponentCategory;
  /** the main package's exact Debian version, e.g. '18.19.0+dfsg-6~deb12u2' */
  version: string;
  /** its installed packages (the recipe's and the extra ones found): name → exact Debian version */
  packages: Record<string, string>;
  /** sum of the Installed-Size (KiB) of those packages; 0 when the manifest has no sizes */
  sizeKib: number;
  requires: string[];
  /** {} when the recipe names none */
  minResources: ComponentResources;
}

type PackagesOf = Pick<ImageManifest, 'packages' | 'package_sizes_kib'>;

/** 'name=version' lines → name → version (names hold no '=', versions hold none either). */
export function packageMap(packages: readonly string[]): Map<string, string> {
  const map = new Map<string, string>();
  for (const line of packages) {
    const i = line.indexOf('=');
    if (i > 0) map.set(line.slice(0, i), line.slice(i + 1));
  }
  return map;
}

/** Code point order: the same in every locale. */
const byCodePoint = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/**
 * The upstream part of a Debian version: without the epoch ("2:") and without the Debian revision
 * (after the last "-"). '1:2.39.5-0+deb12u3' → '2.39.5'.
 */
export function upstreamVersion(version: string): string {
  const noEpoch = version.replace(/^\d+:/, '');
  const dash = noEpoch.lastIndexOf('-');
  return dash > 0 ? noEpoch.slice(0, dash) : noEpoch;
}

/** The leading number of the upstream version ('2:9.0.1378-2' → '9'), or undefined when there is none. */
export function majorVersion(version: string): string | undefined {
  const m = /^\d+/.exec(upstreamVersion(version));
  return m ? String(Number(m[0])) : undefined;
}

/** The components an image holds: every recipe whose packages are all installed in it, with versions and sizes read from its manifest. In catalogue order. */
export function componentsOfImage(manifest: PackagesOf): BuiltComponent[] {
  const installed = packageMap(manifest.packages);
  const names = [...installed.keys()].sort(byCodePoint);
  const sizes = manifest.package_sizes_kib;
  const out: BuiltComponent[] = [];
  for (const recipe of COMPONENT_RECIPES) {
    if (!recipe.packages.every((p) => installed.has(p))) continue;
    const patterns = EXTRA_PATTERNS.get(recipe.id)!;
    const own = new Set(recipe.packages);
    const extra = names.filter((n) => !own.has(n) && patterns.some((re) => re.test(n)));
    const packages: Record<string, string> = {};
    for (const name of [...recipe.packages, ...extra]) packages[name] = installed.get(name)!;
    out.push({
      id: recipe.id,
      name: recipe.name,
      description: recipe.description,
      category: recipe.category,
      version: installed.get(recipe.packages[0]!)!,
      packages,
      sizeKib: sizes ? Object.keys(packages).reduce((sum, name) => sum + (sizes[name] ?? 0), 0) : 0,
      requires: [...recipe.requires],
      minResources: { ...recipe.minResources },
    });
  }
  return out;
}

/** At most this many packages are named on one release-notes line; the rest are counted. */
const LIST_CAP = 10;

function capped(items: string[]): string {
  const shown = items.slice(0, LIST_CAP).join(', ');
  return items.length > LIST_CAP ? `${shown}, … and ${items.length - LIST_CAP} more` : shown;
}

/** Changes between two name → version maps, each list sorted by name. */
function diff(before: Map<string, string> | Record<string, string>, after: Map<string, string> | Record<string, string>) {
  const a = before instanceof Map ? before : new Map(Object.entries(before));
  const b = after instanceof Map ? after : new Map(Object.entries(after));
  const updated: string[] = [];
  const added: string[] = [];
  const removed: string[] = [];
  for (const name of [...new Set([...a.keys(), ...b.keys()])].sort(byCodePoint)) {
    const from = a.get(name);
    const to = b.get(name);
    if (from === undefined) added.push(`${name} ${to}`);
    else if (to === undefined) removed.push(`${name} ${from}`);
    else if (from !== to) updated.push(`${name} ${from} → ${to}`);
  }
  return { updated, added, removed };
}

function mib(kib: number): string {
  return `${(kib / 1024).toFixed(1)} MiB`;
}

type Release = Pick<ImageManifest, 'version' | 'packages' | 'package_sizes_kib'>;

/**
 * Release notes between two versions of one profile, in this order: `BREAKING:` lines (a removed
 * component, or a component whose major upstream version changed), component updates, added
 * components (each group by component id), then the Debian packages updated, added and removed
 * (counted, the first few named) and the change of the installed size. previous null: one line, the
 * first release with its components.
 */
export function releaseNotes(previous: Release | null, next: Release): string[] {
  const nextComponents = componentsOfImage(next);
  if (!previous) {
    const list = [...nextComponents].sort((x, y) => byCodePoint(x.id, y.id)).map((c) => `${c.id} ${c.version}`);
    return [`First release ${next.version}: ${next.packages.length} Debian packages; components: ${list.length ? list.join(', ') : 'none'}`];
  }
  const before = new Map(componentsOfImage(previous).map((c) => [c.id, c]));
  const after = new Map(nextComponents.map((c) => [c.id, c]));
  const recipes = new Map(COMPONENT_RECIPES.map((r) => [r.id, r]));
  const breaking: string[] = [];
  const updates: string[] = [];
  const additions: string[] = [];
  for (const id of [...new Set([...before.keys(), ...after.keys()])].sort(byCodePoint)) {
    const old = before.get(id);
    const now = after.get(id);
    if (!old) additions.push(`Added component ${id} ${now!.version}`);
    else if (!now) breaking.push(`BREAKING: Removed component ${id} ${old.version}`);
    else if (old.version !== now.version) {
      const [m0, m1] = [majorVersion(old.version), majorVersion(now.version)];
      if (recipes.get(id)!.breaking !== 'never' && m0 !== m1) breaking.push(`BREAKING: ${id} ${old.version} → ${now.version} (major version ${m0 ?? '?'} → ${m1 ?? '?'})`);
      else updates.push(`${id} ${old.version} → ${now.version}`);
    } else {
      // the main package is the same, its libraries are not (python3 stays, python3.11 gets a fix)
      const d = diff(old.packages, now.packages);
      const changes = [...d.updated, ...d.added.map((s) => `+${s}`), ...d.removed.map((s) => `-${s}`)];
      if (changes.length) updates.push(`${id} ${now.version}: ${capped(changes)}`);
    }
  }
  const d = diff(packageMap(previous.packages), packageMap(next.packages));
  const lines = [...breaking, ...updates, ...additions];
  if (d.updated.length) lines.push(`${d.updated.length} Debian package${d.updated.length === 1 ? '' : 's'} updated: ${capped(d.updated)}`);
  if (d.added.length) lines.push(`${d.added.length} Debian package${d.added.length === 1 ? '' : 's'} added: ${capped(d.added)}`);
  if (d.removed.length) lines.push(`${d.removed.length} Debian package${d.removed.length === 1 ? '' : 's'} removed: ${capped(d.removed)}`);
  if (previous.package_sizes_kib && next.package_sizes_kib) {
    const total = (m: Release) => [...packageMap(m.packages).keys()].reduce((sum, name) => sum + (m.package_sizes_kib![name] ?? 0), 0);
    const [k0, k1] = [total(previous), total(next)];
    if (k0 !== k1) lines.push(`Installed size ${mib(k0)} → ${mib(k1)} (${k1 > k0 ? '+' : '-'}${mib(Math.abs(k1 - k0))})`);
  }
  if (!lines.length) lines.push(`No package changes since ${previous.version}`);
  return lines;
}

/** The image's OS facts for the API, read from its packages ('unknown' where a package is missing). */
export function imageOs(manifest: Pick<ImageManifest, 'packages'>): { distribution: string; version: string; architecture: string; libc: string } {
  const installed = packageMap(manifest.packages);
  const baseFiles = installed.get('base-files');
  const libc = installed.get('libc6');
  return {
    distribution: 'debian',
    // base-files carries the release: 12.4+deb12u5 on bookworm (Debian 12)
    version: (baseFiles ? majorVersion(baseFiles) : undefined) ?? 'unknown',
    // the builder makes amd64 images only (amd64 kernels, x86_64 paths in the profiles)
    architecture: 'amd64',
    libc: libc ? `glibc ${upstreamVersion(libc)}` : 'unknown',
  };
}
