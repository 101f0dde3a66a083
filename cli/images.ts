// Image commands: the built-in and private images (list, show, create, delete, build log), the
// component catalogue, resolving a selection without saving it, and the version the service serves.
// Components are named COMPONENT[@VERSION]: a catalogue component defaults to its default_version,
// `deb:PACKAGE` (any Debian package, built into a derived layer) to `latest`. Create follows an image
// whose layer is being built (status building) until it is ready or failed, with its build steps.
import type { components } from '../src/generated/api';
import { sleep } from '../src/compute/qemu/wait';
import { allPages, apiFor, CliError, ok, requireToken } from './api';
import type { CliContext } from './context';
import { newLogText } from './log-follow';
import { table } from './machines';
import { note, type Relabel, withSpinner } from './progress';

type Schemas = components['schemas'];
type Image = Schemas['ImageResponse'];
type ComponentRef = Schemas['ComponentRef'];
type Resources = Schemas['ImageResources'];
type Output = { json: unknown; text: string };

const DEB_PREFIX = 'deb:';
const LATEST = 'latest';
const POLL_MS = 1000;
/** The list endpoints' largest page. */
const PAGE = 100;

export interface ResourceOptions {
  vcpu?: number;
  memory?: number;
  disk?: number;
}

export async function listImages(ctx: CliContext): Promise<Output> {
  requireToken(ctx);
  const images = await allPages((starting_after) => apiFor(ctx).GET('/v1/images', { params: { query: { limit: PAGE, starting_after } } }));
  const rows = images.map((i) => [i.id, i.name, statusOf(i), i.builtin ? 'builtin' : 'private', String(i.components.length), i.created_at]);
  return { json: images, text: table(['ID', 'NAME', 'STATUS', 'TYPE', 'COMPONENTS', 'CREATED'], rows) };
}

export async function listComponents(ctx: CliContext): Promise<Output> {
  requireToken(ctx);
  const catalogue = await fetchCatalogue(ctx);
  const rows = catalogue.map((c) => [c.id, c.default_version, `${c.estimated_size_mib} MiB`, c.requires.join(', ') || '-']);
  return { json: catalogue, text: table(['ID', 'VERSION', 'SIZE', 'REQUIRES'], rows) };
}

export async function resolveImage(ctx: CliContext, specs: string[], options: { from?: string } & ResourceOptions): Promise<Output> {
  requireToken(ctx);
  const selection = await componentRefs(ctx, specs);
  const resources = givenResources(options);
  const resolved = ok(await apiFor(ctx).POST('/v1/images/resolve', {
    body: { ...(options.from ? { from: options.from } : {}), components: selection, ...(resources ? { resources: fillResources(resources) } : {}) },
  }));
  const { image, recommended_resources: r } = resolved;
  const added = new Set(resolved.added_dependencies);
  const head = fields([
    ['base', image.base_image ?? '-'],
    ['build', image.build_strategy === 'derived_layer' ? 'derived_layer (Debian packages outside the universal image: built into a layer)' : image.build_strategy],
    ['artifact', image.artifact_key],
    ['os', `${image.os.distribution} ${image.os.version} ${image.os.architecture} ${image.os.libc}`],
    ['resources', `${r.vcpu} vCPU, ${r.memory_mib} MiB memory, ${r.disk_mib} MiB disk (recommended)`],
  ]);
  const rows = resolved.components.map((c) => [c.id, c.version, c.requested ? 'requested' : added.has(c.id) ? 'dependency' : 'base']);
  return { json: resolved, text: `${head}\n\n${table(['ID', 'VERSION', 'WHY'], rows)}` };
}

export async function createImage(
  ctx: CliContext,
  name: string,
  specs: string[],
  options: { from?: string; wait: boolean } & ResourceOptions,
): Promise<Output> {
  requireToken(ctx);
  const selection = await componentRefs(ctx, specs);
  const given = givenResources(options);
  let resources: Resources | undefined;
  if (given) {
    // The API takes all three: those not given are the selection's recommendation.
    const resolved = ok(await apiFor(ctx).POST('/v1/images/resolve', { body: { ...(options.from ? { from: options.from } : {}), components: selection } }));
    resources = fillResources(given, resolved.recommended_resources);
  }
  const body = { name, ...(options.from ? { from: options.from } : {}), components: selection, ...(resources ? { resources } : {}) };
  const created = await withSpinner(`creating image ${name}`, !ctx.json, async (relabel) => {
    const image = ok(await apiFor(ctx).POST('/v1/images', { body }));
    return options.wait ? followBuild(ctx, image, relabel) : image;
  });
  if (created.status === 'failed') {
    throw new CliError(`the image ${created.name} failed to build: ${created.build?.error ?? 'no reason was recorded'}`, {
      hint: `\`kiste images log ${created.id}\` shows its build log.`,
    });
  }
  const text = created.status === 'building'
    ? `${describeImage(created)}\n(building in the background: \`kiste images show ${created.id}\` tells its status, \`kiste images log ${created.id} -f\` follows its log)`
    : describeImage(created);
  return { json: created, text };
}

export async function showImage(ctx: CliContext, ref: string): Promise<Output> {
  requireToken(ctx);
  const image = ok(await apiFor(ctx).GET('/v1/images/{id}', { params: { path: { id: ref } } }));
  return { json: image, text: describeImage(image) };
}

/** The build log; with follow, new output is printed while the image is building. */
export async function imageLog(ctx: CliContext, ref: string, options: { follow: boolean }, write: (text: string) => void): Promise<void> {
  requireToken(ctx);
  const api = apiFor(ctx);
  const read = async () => ok(await api.GET('/v1/images/{id}/build-log', { params: { path: { id: ref } } }));
  let log = await read();
  if (ctx.json && !options.follow) return write(`${JSON.stringify(log, null, 2)}\n`);
  if (log.truncated && !ctx.json) note('(earlier output was dropped: the service keeps the last 256 KiB)');
  write(log.log);
  if (!options.follow) return;
  for (;;) {
    const image = ok(await api.GET('/v1/images/{id}', { params: { path: { id: ref } } }));
    const next = await read();
    write(newLogText(log.log, next.log));
    log = next;
    if (image.status !== 'building') return;
    await sleep(POLL_MS);
  }
}

export async function deleteImage(ctx: CliContext, ref: string): Promise<Output> {
  requireToken(ctx);
  const deleted = ok(await apiFor(ctx).DELETE('/v1/images/{id}', { params: { path: { id: ref } } }));
  return { json: deleted, text: `deleted ${deleted.id}` };
}

export async function runtimeImage(ctx: CliContext): Promise<Output> {
  requireToken(ctx);
  const runtime = ok(await apiFor(ctx).GET('/v1/runtime/image'));
  const notes = runtime.release_notes.map((line) => `  ${line}`).join('\n');
  return { json: runtime, text: `${fields([['version', runtime.image_version], ['released', runtime.released_at]])}\n\nrelease notes:\n${notes || '  -'}` };
}

/**
 * COMPONENT[@VERSION] → {id, version}. Without a version: `deb:` packages take `latest`, catalogue
 * components their default_version. An id the catalogue lacks goes to the service as it is, whose
 * answer (K23, with its hint) says what is wrong.
 */
export async function componentRefs(ctx: CliContext, specs: string[]): Promise<ComponentRef[]> {
  const parsed = specs.map((spec) => {
    const at = spec.indexOf('@');
    const id = at < 0 ? spec : spec.slice(0, at);
    const version = at < 0 ? undefined : spec.slice(at + 1);
    if (!id || version === '') throw new CliError(`not a component: ${JSON.stringify(spec)}`, { hint: 'Name components as ID or ID@VERSION (see `kiste images components`); any Debian package is deb:PACKAGE.' });
    return { id, version };
  });
  const needsCatalogue = parsed.some((c) => c.version === undefined && !c.id.startsWith(DEB_PREFIX));
  const defaults = needsCatalogue ? new Map((await fetchCatalogue(ctx)).map((c) => [c.id, c.default_version])) : new Map<string, string>();
  return parsed.map(({ id, version }) => ({ id, version: version ?? (id.startsWith(DEB_PREFIX) ? LATEST : (defaults.get(id) ?? LATEST)) }));
}

export function describeImage(i: Image): string {
  const rows: [string, string][] = [
    ['id', i.id], ['name', i.name], ['slug', i.slug], ['status', statusOf(i)], ['type', i.builtin ? 'builtin' : 'private'],
    ['base', i.base_image ?? '-'], ['build', i.build_strategy], ['artifact', i.artifact_key],
    ['os', `${i.os.distribution} ${i.os.version} ${i.os.architecture} ${i.os.libc}`],
    ['resources', i.resources ? `${i.resources.vcpu} vCPU, ${i.resources.memory_mib} MiB memory, ${i.resources.disk_mib} MiB disk` : '-'],
    ['created', i.created_at],
  ];
  if (i.build) {
    rows.push(['step', i.build.step ?? '-'], ['progress', `${i.build.progress_percent} %`]);
    if (i.build.packages.length) rows.push(['packages', i.build.packages.join(' ')]);
    if (i.build.started_at) rows.push(['started', i.build.started_at]);
    if (i.build.finished_at) rows.push(['finished', i.build.finished_at]);
    if (i.build.duration_ms !== null) rows.push(['duration', seconds(i.build.duration_ms)]);
    if (i.build.error) rows.push(['error', i.build.error]);
  }
  const list = i.components.map((c) => `  ${c.id}@${c.version}`).join('\n');
  return `${fields(rows)}\ncomponents${i.components.length ? `\n${list}` : ' -'}`;
}

/** Asks again while the image is building; a new step is printed on its own line, progress in the spinner. */
async function followBuild(ctx: CliContext, image: Image, relabel: Relabel): Promise<Image> {
  let current = image;
  let shown: string | null = null;
  while (current.status === 'building') {
    const step = current.build?.step ?? 'waiting for the builder';
    const progress = `${current.build?.progress_percent ?? 0} %`;
    if (step !== shown && !ctx.json) note(`${current.name}: ${step} (${progress})`);
    shown = step;
    relabel(`building image ${current.name}: ${step} (${progress})`);
    await sleep(POLL_MS);
    current = ok(await apiFor(ctx).GET('/v1/images/{id}', { params: { path: { id: image.id } } }));
  }
  return current;
}

async function fetchCatalogue(ctx: CliContext): Promise<Schemas['ImageComponent'][]> {
  return allPages((starting_after) => apiFor(ctx).GET('/v1/image-components', { params: { query: { limit: PAGE, starting_after } } }));
}

function givenResources(options: ResourceOptions): ResourceOptions | undefined {
  return options.vcpu !== undefined || options.memory !== undefined || options.disk !== undefined ? options : undefined;
}

/** The API's resources: those given, the rest from `rest` (0 asks for nothing: the components' minimum is recommended). */
function fillResources(given: ResourceOptions, rest: Resources = { vcpu: 0, memory_mib: 0, disk_mib: 0 }): Resources {
  return { vcpu: given.vcpu ?? rest.vcpu, memory_mib: given.memory ?? rest.memory_mib, disk_mib: given.disk ?? rest.disk_mib };
}

function statusOf(i: Image): string {
  return i.status === 'building' ? `building ${i.build?.progress_percent ?? 0} %` : i.status;
}

function fields(rows: [string, string][]): string {
  const width = Math.max(...rows.map(([k]) => k.length)) + 2;
  return rows.map(([k, v]) => `${k.padEnd(width)}${v}`).join('\n');
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)} s`;
}
