// The component catalogue and release notes (images/components.ts): pure functions over manifests,
// no build, no QEMU.
import { parseSizes } from '../../images/build-image';
import {
  checkComponentRecipes,
  COMPONENT_RECIPES,
  componentsOfImage,
  imageOs,
  majorVersion,
  releaseNotes,
  upstreamVersion,
  type ComponentRecipe,
} from '../../images/components';
import { PROFILES } from '../../images/profiles';
import { BASE_PACKAGES } from '../../images/profiles/base';

/** A manifest's package fields from name → version (and optionally name → KiB). */
function manifest(version: string, packages: Record<string, string>, sizes?: Record<string, number>) {
  return {
    version,
    packages: Object.entries(packages)
      .map(([n, v]) => `${n}=${v}`)
      .sort(),
    ...(sizes ? { package_sizes_kib: sizes } : {}),
  };
}

const BASE: Record<string, string> = {
  'base-files': '12.4+deb12u5',
  libc6: '2.36-9+deb12u7',
  bash: '5.2.15-2+b2',
  nodejs: '18.19.0+dfsg-6~deb12u1',
  libnode108: '18.19.0+dfsg-6~deb12u1',
  git: '1:2.39.2-1.1',
  'git-man': '1:2.39.2-1.1',
  'vim-tiny': '2:9.0.1378-2',
  'vim-common': '2:9.0.1378-2',
  'openssh-client': '1:9.2p1-2+deb12u2',
  // openssh-server without openssh-sftp-server: that component is not complete
  'openssh-server': '1:9.2p1-2+deb12u2',
  'ca-certificates': '20230311',
};
const SIZES: Record<string, number> = {
  'base-files': 340,
  libc6: 12_000,
  bash: 7_000,
  nodejs: 800,
  libnode108: 46_000,
  git: 44_000,
  'git-man': 1_000,
  'vim-tiny': 1_700,
  'vim-common': 250,
  'openssh-client': 5_800,
  'openssh-server': 1_900,
  'ca-certificates': 390,
};

describe('componentsOfImage', () => {
  test('every recipe whose packages are all installed, in catalogue order, with exact versions and summed sizes', () => {
    const components = componentsOfImage(manifest('v2026.01.01-00000000', BASE, SIZES));
    expect(components.map((c) => c.id)).toEqual(['node', 'git', 'vim', 'openssh-client', 'ca-certificates']);
    const node = components[0]!;
    expect(node).toEqual({
      id: 'node',
      name: 'Node.js',
      description: expect.any(String),
      category: 'languages',
      version: '18.19.0+dfsg-6~deb12u1',
      packages: { nodejs: '18.19.0+dfsg-6~deb12u1', libnode108: '18.19.0+dfsg-6~deb12u1' },
      sizeKib: 46_800,
      requires: [],
      minResources: {},
    });
    const git = components.find((c) => c.id === 'git')!;
    expect(git.version).toBe('1:2.39.2-1.1');
    expect(git.packages).toEqual({ git: '1:2.39.2-1.1', 'git-man': '1:2.39.2-1.1' });
    expect(git.sizeKib).toBe(45_000);
    expect(components.find((c) => c.id === 'vim')!.sizeKib).toBe(1_950);
  });

  test('a recipe with a package missing is left out; no sizes in the manifest: size 0', () => {
    const components = componentsOfImage(manifest('v2026.01.01-00000000', BASE));
    expect(components.map((c) => c.id)).not.toContain('openssh-server');
    expect(components.map((c) => c.sizeKib)).toEqual([0, 0, 0, 0, 0]);
    const complete = componentsOfImage(manifest('v', { ...BASE, 'openssh-sftp-server': '1:9.2p1-2+deb12u2' }));
    const server = complete.find((c) => c.id === 'openssh-server')!;
    expect(server.packages).toEqual({ 'openssh-server': '1:9.2p1-2+deb12u2', 'openssh-sftp-server': '1:9.2p1-2+deb12u2' });
    expect(server.requires).toEqual(['openssh-client']);
    // without nodejs, libnode108 alone makes no node component
    const { nodejs: _, ...noNode } = BASE;
    expect(componentsOfImage(manifest('v', noNode)).map((c) => c.id)).not.toContain('node');
  });

  test('minimum resources come from the recipe', () => {
    const desktop = componentsOfImage(manifest('v', Object.fromEntries(PROFILES.desktop!.packages.map((p) => [p, '1.0-1']))));
    expect(desktop.find((c) => c.id === 'xfce-desktop')!.minResources).toEqual({ vcpu: 2, memoryMib: 2048 });
  });
});

describe('Debian versions', () => {
  test('upstream version without epoch and revision; its leading number is the major version', () => {
    expect(upstreamVersion('1:2.39.5-0+deb12u3')).toBe('2.39.5');
    expect(upstreamVersion('2:21.1.7-3+deb12u13')).toBe('21.1.7');
    expect(upstreamVersion('12.9')).toBe('12.9'); // native package: no revision
    expect(upstreamVersion('1.0-rc1-2')).toBe('1.0-rc1'); // the revision is after the last dash
    expect(majorVersion('18.19.0+dfsg-6~deb12u2')).toBe('18');
    expect(majorVersion('2:9.0.1378-2')).toBe('9');
    expect(majorVersion('4:12.2.0-3')).toBe('12');
    expect(majorVersion('20230311')).toBe('20230311');
    expect(majorVersion('v1.0-1')).toBeUndefined();
  });
});

describe('releaseNotes', () => {
  const v1 = 'v2026.01.01-11111111';
  const v2 = 'v2026.02.01-22222222';

  test('a component update, and the Debian packages behind it', () => {
    const next = { ...BASE, nodejs: '18.19.0+dfsg-6~deb12u2', libnode108: '18.19.0+dfsg-6~deb12u2' };
    expect(releaseNotes(manifest(v1, BASE), manifest(v2, next))).toEqual([
      'node 18.19.0+dfsg-6~deb12u1 → 18.19.0+dfsg-6~deb12u2',
      '2 Debian packages updated: libnode108 18.19.0+dfsg-6~deb12u1 → 18.19.0+dfsg-6~deb12u2, nodejs 18.19.0+dfsg-6~deb12u1 → 18.19.0+dfsg-6~deb12u2',
    ]);
  });

  test('an added component', () => {
    const next = { ...BASE, jq: '1.6-2.1', libjq1: '1.6-2.1', libonig5: '6.9.8-1' };
    expect(releaseNotes(manifest(v1, BASE), manifest(v2, next))).toEqual([
      'Added component jq 1.6-2.1',
      '3 Debian packages added: jq 1.6-2.1, libjq1 1.6-2.1, libonig5 6.9.8-1',
    ]);
  });

  test('a removed component is BREAKING', () => {
    const { 'vim-tiny': _, ...next } = BASE;
    const notes = releaseNotes(manifest(v1, BASE), manifest(v2, next));
    expect(notes).toEqual(['BREAKING: Removed component vim 2:9.0.1378-2', '1 Debian package removed: vim-tiny 2:9.0.1378-2']);
  });

  test('a change of the major upstream version is BREAKING; a minor one is not', () => {
    const major = releaseNotes(manifest(v1, BASE), manifest(v2, { ...BASE, nodejs: '20.11.0+dfsg-1', libnode108: '20.11.0+dfsg-1' }));
    expect(major[0]).toBe('BREAKING: node 18.19.0+dfsg-6~deb12u1 → 20.11.0+dfsg-1 (major version 18 → 20)');
    expect(major.filter((l) => l.startsWith('BREAKING:'))).toHaveLength(1);
    const minor = releaseNotes(manifest(v1, BASE), manifest(v2, { ...BASE, nodejs: '18.20.4+dfsg-1~deb12u1' }));
    expect(minor[0]).toBe('node 18.19.0+dfsg-6~deb12u1 → 18.20.4+dfsg-1~deb12u1');
    expect(minor.some((l) => l.startsWith('BREAKING:'))).toBe(false);
  });

  test('the epoch is not the major version', () => {
    // a new epoch, same upstream major: not breaking
    const epoch = releaseNotes(manifest(v1, BASE), manifest(v2, { ...BASE, 'vim-tiny': '3:9.1.0016-1' }));
    expect(epoch).toContain('vim 2:9.0.1378-2 → 3:9.1.0016-1');
    expect(epoch.some((l) => l.startsWith('BREAKING:'))).toBe(false);
    // the epoch dropped, the upstream major up: breaking, reported without the epoch
    const major = releaseNotes(manifest(v1, BASE), manifest(v2, { ...BASE, 'openssh-client': '10.0p1-1' }));
    expect(major).toContain('BREAKING: openssh-client 1:9.2p1-2+deb12u2 → 10.0p1-1 (major version 9 → 10)');
    // git 1:2.x → 1:3.x: the 1 of the epoch stays, the major changes
    expect(releaseNotes(manifest(v1, BASE), manifest(v2, { ...BASE, git: '1:3.0.0-1' }))[0]).toBe('BREAKING: git 1:2.39.2-1.1 → 1:3.0.0-1 (major version 2 → 3)');
  });

  test('date-numbered packages (breaking: never) update without BREAKING', () => {
    const notes = releaseNotes(manifest(v1, BASE), manifest(v2, { ...BASE, 'ca-certificates': '20240203' }));
    expect(notes[0]).toBe('ca-certificates 20230311 → 20240203');
    expect(notes.some((l) => l.startsWith('BREAKING:'))).toBe(false);
  });

  test('a library of a component changes while its main package stays', () => {
    const notes = releaseNotes(manifest(v1, BASE), manifest(v2, { ...BASE, libnode108: '18.19.0+dfsg-6~deb12u9' }));
    expect(notes[0]).toBe('node 18.19.0+dfsg-6~deb12u1: libnode108 18.19.0+dfsg-6~deb12u1 → 18.19.0+dfsg-6~deb12u9');
  });

  test('order: BREAKING, updates, additions, packages, installed size; the same for any package order', () => {
    const { 'vim-tiny': _, ...rest } = BASE;
    const next = { ...rest, nodejs: '20.0.0-1', git: '1:2.39.5-0+deb12u1', jq: '1.6-2.1', bash: '5.2.15-2+b7' };
    const sizesNext = { ...SIZES, nodejs: 900, jq: 100 };
    const notes = releaseNotes(manifest(v1, BASE, SIZES), manifest(v2, next, sizesNext));
    expect(notes).toEqual([
      'BREAKING: node 18.19.0+dfsg-6~deb12u1 → 20.0.0-1 (major version 18 → 20)',
      'BREAKING: Removed component vim 2:9.0.1378-2',
      'git 1:2.39.2-1.1 → 1:2.39.5-0+deb12u1',
      'Added component jq 1.6-2.1',
      '3 Debian packages updated: bash 5.2.15-2+b2 → 5.2.15-2+b7, git 1:2.39.2-1.1 → 1:2.39.5-0+deb12u1, nodejs 18.19.0+dfsg-6~deb12u1 → 20.0.0-1',
      '1 Debian package added: jq 1.6-2.1',
      '1 Debian package removed: vim-tiny 2:9.0.1378-2',
      // 121 180 KiB → 121 180 - 1 700 (vim-tiny) + 100 (nodejs) + 100 (jq) = 119 680 KiB
      'Installed size 118.3 MiB → 116.9 MiB (-1.5 MiB)',
    ]);
    const shuffled = manifest(v2, next, sizesNext);
    shuffled.packages.reverse();
    expect(releaseNotes(manifest(v1, BASE, SIZES), shuffled)).toEqual(notes);
  });

  test('long package lists are capped', () => {
    const many = Object.fromEntries(Array.from({ length: 30 }, (_, i) => [`lib${String(i).padStart(2, '0')}`, '1.0-1']));
    const newer = Object.fromEntries(Object.keys(many).map((n) => [n, '1.0-2']));
    const [line] = releaseNotes(manifest(v1, { ...BASE, ...many }), manifest(v2, { ...BASE, ...newer }));
    expect(line).toMatch(/^30 Debian packages updated: lib00 1\.0-1 → 1\.0-2, .*lib09 1\.0-1 → 1\.0-2, … and 20 more$/);
    expect(line).not.toContain('lib10');
  });

  test('first release: one line with the components; nothing changed: one line saying so', () => {
    expect(releaseNotes(null, manifest(v1, BASE, SIZES))).toEqual([
      `First release ${v1}: 12 Debian packages; components: ca-certificates 20230311, git 1:2.39.2-1.1, node 18.19.0+dfsg-6~deb12u1, openssh-client 1:9.2p1-2+deb12u2, vim 2:9.0.1378-2`,
    ]);
    expect(releaseNotes(manifest(v1, BASE), manifest(v2, BASE))).toEqual([`No package changes since ${v1}`]);
  });
});

describe('imageOs', () => {
  test('Debian release from base-files, glibc from libc6', () => {
    expect(imageOs(manifest('v', BASE))).toEqual({ distribution: 'debian', version: '12', architecture: 'amd64', libc: 'glibc 2.36' });
    expect(imageOs(manifest('v', { bash: '5.2.15-2+b2' }))).toEqual({ distribution: 'debian', version: 'unknown', architecture: 'amd64', libc: 'unknown' });
  });
});

describe('the catalogue', () => {
  const recipe = (id: string, requires: string[] = []): ComponentRecipe => ({ id, name: id, description: id, category: 'tools', packages: [id], requires });

  test('requires name existing components and form no cycle', () => {
    expect(() => checkComponentRecipes(COMPONENT_RECIPES)).not.toThrow();
    const ids = new Set(COMPONENT_RECIPES.map((r) => r.id));
    expect(ids.size).toBe(COMPONENT_RECIPES.length);
    for (const r of COMPONENT_RECIPES) for (const dep of r.requires) expect(ids).toContain(dep);
    // the check catches what it should
    expect(() => checkComponentRecipes([recipe('a', ['b']), recipe('b', ['c']), recipe('c', ['a'])])).toThrow(/cycle: a → b → c → a/);
    expect(() => checkComponentRecipes([recipe('a', ['a'])])).toThrow(/cycle/);
    expect(() => checkComponentRecipes([recipe('a', ['nope'])])).toThrow(/unknown component "nope"/);
    expect(() => checkComponentRecipes([recipe('a'), recipe('a')])).toThrow(/twice/);
    expect(() => checkComponentRecipes([recipe('deb:a')])).toThrow(/id/);
    expect(() => checkComponentRecipes([recipe('a', []), recipe('b', ['a']), recipe('c', ['a', 'b'])])).not.toThrow();
  });

  test('every recipe derives from the image recipe: all its packages are in one profile\'s package list', () => {
    for (const r of COMPONENT_RECIPES) {
      const holders = Object.values(PROFILES).filter((p) => r.packages.every((pkg) => p.packages.includes(pkg)));
      expect({ id: r.id, profiles: holders.map((p) => p.name) }).toEqual({ id: r.id, profiles: expect.arrayContaining([expect.any(String)]) });
    }
  });

  test('the universal image holds the desktop, the languages and the tools, each with what it requires', () => {
    const desktop = PROFILES.desktop!;
    const ids = componentsOfImage(manifest('v', Object.fromEntries(desktop.packages.map((p) => [p, '1.0-1'])))).map((c) => c.id);
    expect(ids).toEqual(expect.arrayContaining(['node', 'python', 'build-tools', 'git', 'vim', 'nano', 'xfce-desktop', 'x-display', 'openssh-server', 'openssh-client']));
    const byId = new Map(COMPONENT_RECIPES.map((r) => [r.id, r]));
    for (const id of ids) for (const dep of byId.get(id)!.requires) expect(ids).toContain(dep);
  });

  test('git is in every profile; desktop-lite is the minimal set plus a screen', () => {
    for (const p of Object.values(PROFILES)) expect(p.packages).toContain('git');
    const minimal = PROFILES.minimal!.packages;
    expect(minimal).toEqual([...BASE_PACKAGES, 'git']);
    expect(PROFILES['desktop-lite']!.packages).toEqual(expect.arrayContaining(minimal));
    expect(PROFILES.desktop!.packages).toEqual(expect.arrayContaining(minimal));
    const lite = componentsOfImage(manifest('v', Object.fromEntries(PROFILES['desktop-lite']!.packages.map((p) => [p, '1.0-1'])))).map((c) => c.id);
    expect(lite).toEqual(expect.arrayContaining(['node', 'git', 'x-display', 'xterm']));
    expect(lite).not.toContain('xfce-desktop');
  });
});

describe('installed sizes from the rootfs info', () => {
  test('name<TAB>KiB lines; an empty size counts 0, a line without a size is left out', () => {
    expect(parseSizes('bash\t7000\nlibnode108\t46435\nempty-meta\t\nodd\tx12\n\n')).toEqual({ bash: 7000, libnode108: 46435, 'empty-meta': 0 });
  });
});
