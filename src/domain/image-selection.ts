// Resolving an image selection against the catalogue of the served universal image: exact versions,
// dependencies added at their default version, conflicts and cycles refused, and `deb:<package>`
// components (any Debian package) set apart for a derived layer. Pure: the catalogue comes in.
import { createHash } from 'node:crypto';
import { KisteError } from '../errors';

export interface CatalogueComponent {
  id: string;
  version: string;
  /** name → exact Debian version of the packages that make it. */
  packages: Record<string, string>;
  requires: string[];
  sizeKib: number;
  minResources?: { vcpu?: number; memoryMib?: number; diskMib?: number };
}

export interface ComponentRef {
  id: string;
  version: string;
}

export interface ResolvedComponent {
  id: string;
  version: string;
  requested: boolean;
  content_hash: string;
}

export interface Selection {
  components: ResolvedComponent[];
  /** Ids added to satisfy dependencies, in the order they were added. */
  addedDependencies: string[];
  /** Debian packages outside the universal image, `name` or `name=version`, sorted. */
  debPackages: string[];
  /** Sum of the selected catalogue components' sizes. */
  sizeKib: number;
  minResources: { vcpu: number; memoryMib: number; diskMib: number };
}

export const DEB_PREFIX = 'deb:';
/** Debian policy's package name, not ending in "-" (apt reads `name-` as "remove name"). */
const DEB_NAME = /^[a-z0-9][a-z0-9+.-]{0,98}[a-z0-9+.]$/;
/** A Debian version (epoch, upstream, revision characters); never starts with "-". */
const DEB_VERSION = /^[0-9][A-Za-z0-9.+~:-]{0,99}$/;
export const LATEST = 'latest';

function contentHash(lines: string[]): string {
  return `sha256:${createHash('sha256').update([...lines].sort().join('\n')).digest('hex')}`;
}

/**
 * `installed` maps the universal image's packages to their versions: a `deb:` component already in
 * it needs no layer. Errors name the request field (`components[i].id` / `.version`).
 */
export function resolveSelection(catalogue: readonly CatalogueComponent[], installed: ReadonlyMap<string, string>, requested: readonly ComponentRef[]): Selection {
  const byId = new Map(catalogue.map((c) => [c.id, c]));
  const chosen = new Map<string, { version: string; requested: boolean; index: number }>();
  const debPackages = new Set<string>();
  const components: ResolvedComponent[] = [];

  requested.forEach((ref, index) => {
    const param = `components[${index}]`;
    const earlier = chosen.get(ref.id);
    if (earlier) {
      if (earlier.version !== ref.version) {
        throw new KisteError('K25', { message: `${ref.id} is selected twice, at ${earlier.version} and ${ref.version}`, param: `${param}.version` });
      }
      return;
    }
    if (ref.id.startsWith(DEB_PREFIX)) {
      const name = ref.id.slice(DEB_PREFIX.length);
      if (!DEB_NAME.test(name)) throw new KisteError('K23', { message: `${ref.id} is not a Debian package name`, param: `${param}.id` });
      if (ref.version !== LATEST && !DEB_VERSION.test(ref.version)) {
        throw new KisteError('K24', { message: `${ref.version} is not a Debian version (or "latest")`, param: `${param}.version` });
      }
      const present = installed.get(name);
      if (present !== undefined && ref.version !== LATEST && ref.version !== present) {
        throw new KisteError('K25', { message: `${name} is in the universal image at ${present}, not ${ref.version}`, param: `${param}.version` });
      }
      const version = present ?? ref.version;
      if (present === undefined) debPackages.add(ref.version === LATEST ? name : `${name}=${ref.version}`);
      chosen.set(ref.id, { version, requested: true, index });
      components.push({ id: ref.id, version, requested: true, content_hash: contentHash([`${name}=${version}`]) });
      return;
    }
    const component = byId.get(ref.id);
    if (!component) throw new KisteError('K23', { message: `No image component ${ref.id}`, param: `${param}.id` });
    if (ref.version !== component.version) {
      throw new KisteError('K24', { message: `${ref.id} is available at ${component.version}, not ${ref.version}`, param: `${param}.version` });
    }
    chosen.set(ref.id, { version: component.version, requested: true, index });
  });

  // Dependencies, depth first; a component met again on its own path is a cycle.
  const added: string[] = [];
  const done = new Set<string>();
  const visit = (id: string, path: string[], index: number): void => {
    if (done.has(id)) return;
    if (path.includes(id)) {
      throw new KisteError('K26', { message: `The components depend on each other in a cycle: ${[...path.slice(path.indexOf(id)), id].join(' → ')}`, param: `components[${index}].id` });
    }
    const component = byId.get(id);
    if (!component) throw new KisteError('K23', { message: `${path[path.length - 1]} requires ${id}, which this server's image does not have`, param: `components[${index}].id` });
    for (const dependency of component.requires) {
      if (!chosen.has(dependency)) {
        chosen.set(dependency, { version: byId.get(dependency)?.version ?? '', requested: false, index });
        added.push(dependency);
      }
      visit(dependency, [...path, id], index);
    }
    done.add(id);
  };
  for (const [id, choice] of [...chosen]) if (!id.startsWith(DEB_PREFIX)) visit(id, [], choice.index);

  const min = { vcpu: 1, memoryMib: 0, diskMib: 0 };
  let sizeKib = 0;
  for (const [id, choice] of chosen) {
    const component = byId.get(id);
    if (!component) continue; // deb: components are listed already
    sizeKib += component.sizeKib;
    min.vcpu = Math.max(min.vcpu, component.minResources?.vcpu ?? 0);
    min.memoryMib = Math.max(min.memoryMib, component.minResources?.memoryMib ?? 0);
    min.diskMib = Math.max(min.diskMib, component.minResources?.diskMib ?? 0);
    components.push({
      id, version: choice.version, requested: choice.requested,
      content_hash: contentHash(Object.entries(component.packages).map(([name, version]) => `${name}=${version}`)),
    });
  }
  components.sort((a, b) => a.id.localeCompare(b.id));
  return { components, addedDependencies: added, debPackages: [...debPackages].sort(), sizeKib, minResources: min };
}

/** The content key of a derived layer: its base image's key and the packages installed on it. */
export function layerKey(baseArtifactKey: string, debPackages: readonly string[]): string {
  return createHash('sha256').update(`kiste derived layer 1\n${baseArtifactKey}\n${[...debPackages].sort().join('\n')}`).digest('hex');
}
