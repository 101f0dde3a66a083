// Resolving an image selection: exact versions, dependencies added, conflicts and cycles refused,
// Debian packages outside the image set apart for a derived layer with a content key of their own.
import { KisteError } from '../../src/errors';
import { layerKey, resolveSelection, type CatalogueComponent } from '../../src/domain/image-selection';

const catalogue: CatalogueComponent[] = [
  { id: 'node', version: '18.19.0+dfsg-6~deb12u2', packages: { nodejs: '18.19.0+dfsg-6~deb12u2' }, requires: [], sizeKib: 2048 },
  { id: 'npm', version: '9.2.0~ds1-1', packages: { npm: '9.2.0~ds1-1' }, requires: ['node'], sizeKib: 1024 },
  { id: 'xfce', version: '4.18', packages: { xfce4: '4.18' }, requires: ['x'], sizeKib: 100, minResources: { vcpu: 2, memoryMib: 2048 } },
  { id: 'x', version: '21.1', packages: { xorg: '21.1' }, requires: [], sizeKib: 50 },
];
const installed = new Map([['nodejs', '18.19.0+dfsg-6~deb12u2'], ['git', '1:2.39.5-0+deb12u2']]);

function code(run: () => unknown): { code: string; param?: string | null; message: string } {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(KisteError);
    return { code: (error as KisteError).code, param: (error as KisteError).details.param, message: (error as Error).message };
  }
  throw new Error('expected a refusal');
}

describe('image selection', () => {
  it('adds dependencies at their version and sums sizes and resources', () => {
    const s = resolveSelection(catalogue, installed, [{ id: 'npm', version: '9.2.0~ds1-1' }, { id: 'xfce', version: '4.18' }]);
    expect(s.addedDependencies).toEqual(['node', 'x']);
    expect(s.components.map((c) => [c.id, c.version, c.requested])).toEqual([
      ['node', '18.19.0+dfsg-6~deb12u2', false], ['npm', '9.2.0~ds1-1', true], ['x', '21.1', false], ['xfce', '4.18', true],
    ]);
    expect(s.components.every((c) => /^sha256:[0-9a-f]{64}$/.test(c.content_hash))).toBe(true);
    expect(s.sizeKib).toBe(2048 + 1024 + 100 + 50);
    expect(s.minResources).toEqual({ vcpu: 2, memoryMib: 2048, diskMib: 0 });
    expect(s.debPackages).toEqual([]);
  });

  it('refuses unknown components and versions, and one component at two versions', () => {
    expect(code(() => resolveSelection(catalogue, installed, [{ id: 'cobol', version: '1' }]))).toMatchObject({ code: 'K23', param: 'components[0].id' });
    expect(code(() => resolveSelection(catalogue, installed, [{ id: 'node', version: '20' }]))).toMatchObject({ code: 'K24', param: 'components[0].version' });
    expect(code(() => resolveSelection(catalogue, installed, [{ id: 'x', version: '21.1' }, { id: 'x', version: '22' }]))).toMatchObject({ code: 'K25', param: 'components[1].version' });
  });

  it('refuses a dependency cycle and names it', () => {
    const cyclic: CatalogueComponent[] = [
      { id: 'a', version: '1', packages: { a: '1' }, requires: ['b'], sizeKib: 1 },
      { id: 'b', version: '1', packages: { b: '1' }, requires: ['c'], sizeKib: 1 },
      { id: 'c', version: '1', packages: { c: '1' }, requires: ['a'], sizeKib: 1 },
    ];
    const r = code(() => resolveSelection(cyclic, installed, [{ id: 'a', version: '1' }]));
    expect(r.code).toBe('K26');
    expect(r.message).toContain('a → b → c → a');
  });

  it('sets Debian packages outside the image apart, and takes those inside it as they are', () => {
    const s = resolveSelection(catalogue, installed, [{ id: 'deb:cowsay', version: 'latest' }, { id: 'deb:sl', version: '5.02-1' }, { id: 'deb:git', version: 'latest' }]);
    expect(s.debPackages).toEqual(['cowsay', 'sl=5.02-1']);
    expect(s.components.find((c) => c.id === 'deb:git')?.version).toBe('1:2.39.5-0+deb12u2');
    expect(code(() => resolveSelection(catalogue, installed, [{ id: 'deb:--force-yes', version: 'latest' }]))).toMatchObject({ code: 'K23' });
    expect(code(() => resolveSelection(catalogue, installed, [{ id: 'deb:openssh-server-', version: 'latest' }]))).toMatchObject({ code: 'K23' }); // apt: "remove"
    expect(resolveSelection(catalogue, installed, [{ id: 'deb:g++', version: 'latest' }]).debPackages).toEqual(['g++']);
    expect(code(() => resolveSelection(catalogue, installed, [{ id: 'deb:sl', version: '-o=APT::x' }]))).toMatchObject({ code: 'K24' });
    expect(code(() => resolveSelection(catalogue, installed, [{ id: 'deb:git', version: '2.0-1' }]))).toMatchObject({ code: 'K25' });
  });

  it('keys a derived layer by its base and its packages, in any order', () => {
    expect(layerKey('base1', ['b', 'a'])).toBe(layerKey('base1', ['a', 'b']));
    expect(layerKey('base1', ['a'])).not.toBe(layerKey('base2', ['a']));
    expect(layerKey('base1', ['a'])).toMatch(/^[0-9a-f]{64}$/);
  });
});
