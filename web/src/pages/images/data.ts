// What the image pages read: the component catalogue, the account's images (the built-in one first)
// and how an image's figures read. Shared with the create-machine form, which offers ready images.
import { api, ok, type Schemas } from '../../api';
import { allPages } from '../../ui/paged-list';
import { formatMib } from '../../machine/format';

export type Image = Schemas['ImageResponse'];
export type Component = Schemas['ImageComponent'];
export type ComponentRef = Schemas['ComponentRef'];
export type Resources = Schemas['ImageResources'];

/** The id of the built-in image (also its slug). */
export const UNIVERSAL = 'universal';
/** Debian packages outside the universal image are components named `deb:<package>`. */
export const DEB_PREFIX = 'deb:';

export function fetchCatalogue(): Promise<Component[]> {
  return allPages((after) => ok(api.GET('/v1/image-components', { params: { query: { limit: 100, starting_after: after } } })));
}

export function fetchImages(): Promise<Image[]> {
  return allPages((after) => ok(api.GET('/v1/images', { params: { query: { limit: 100, starting_after: after } } })));
}

export function imagePath(id: string): string {
  return `/console/images/${encodeURIComponent(id)}`;
}

export function describeResources(resources: Resources): string {
  return `${resources.vcpu} vCPU${resources.vcpu === 1 ? '' : 's'}, ${formatMib(resources.memory_mib)} memory, ${formatMib(resources.disk_mib)} disk`;
}

/** `universal` — ready at once from the served image; `derived_layer` — Debian packages built into a layer of its own. */
export function describeStrategy(strategy: string): string {
  if (strategy === 'universal') return 'Universal image (no build)';
  if (strategy === 'derived_layer') return 'Derived layer (Debian packages built on the universal image)';
  return strategy;
}

export function describeOs(os: Schemas['ImageOs']): string {
  return `${os.distribution} ${os.version} (${os.architecture}, ${os.libc})`;
}

/** A package list typed by a person ("ripgrep, jq htop") as Debian package names, each once. */
export function debianPackages(text: string): string[] {
  return [...new Set(text.split(/[\s,]+/).map((name) => name.trim()).filter(Boolean))];
}

export function componentLabel(ref: ComponentRef): string {
  return `${ref.id}@${ref.version}`;
}
