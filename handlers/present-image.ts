// Images, components and resolutions → API shapes.
import type { BuiltComponent } from '../images';
import type { Resolution, Served } from '../src/domain/images';
import { imageOs } from '../images';
import { universalName, UNIVERSAL_IMAGE } from '../src/domain/images';
import type { components } from '../src/generated/api';
import type { Image } from '../src/store/images';
import { iso } from './present';

type Schemas = components['schemas'];
type ComponentRef = Schemas['ComponentRef'];
const MIB_KIB = 1024;

export function presentComponent(component: BuiltComponent): Schemas['ImageComponent'] {
  return {
    id: component.id,
    object: 'image_component',
    name: component.name,
    description: component.description,
    category: component.category,
    versions: [component.version],
    default_version: component.version,
    estimated_size_mib: Math.ceil(component.sizeKib / MIB_KIB),
    requires: component.requires,
  };
}

/** The built-in image: what this server serves now. */
export function presentUniversalImage(served: Served): Schemas['ImageResponse'] {
  return {
    id: UNIVERSAL_IMAGE,
    object: 'image',
    name: universalName(),
    slug: UNIVERSAL_IMAGE,
    builtin: true,
    artifact_key: served.image.artifactKey,
    base_image: null,
    build_strategy: 'universal',
    components: served.components.map(({ id, version }) => ({ id, version })),
    os: imageOs(served.manifest),
    resources: null,
    status: 'ready',
    build: null,
    created_at: served.manifest.created_at,
  };
}

export function presentImage(image: Image, served: Served): Schemas['ImageResponse'] {
  const derived = image.buildStrategy === 'derived_layer';
  return {
    id: image.id,
    object: 'image',
    name: image.name,
    slug: image.slug,
    builtin: false,
    artifact_key: image.artifactKey,
    base_image: image.baseImage,
    build_strategy: image.buildStrategy,
    components: image.components as unknown as ComponentRef[],
    os: imageOs(served.manifest),
    resources: (image.resources as unknown as Schemas['ImageResources'] | null) ?? null,
    status: image.status as 'ready' | 'building' | 'failed',
    build: derived
      ? {
        progress_percent: image.buildProgress,
        step: image.buildStep,
        packages: (image.buildPackages as unknown as string[] | null) ?? [],
        started_at: iso(image.buildStartedAt),
        finished_at: iso(image.buildFinishedAt),
        duration_ms: image.buildStartedAt && image.buildFinishedAt ? image.buildFinishedAt.getTime() - image.buildStartedAt.getTime() : null,
        error: image.buildError,
      }
      : null,
    created_at: iso(image.createdAt),
  };
}

export function presentResolution(resolution: Resolution): Schemas['ResolvedImageResponse'] {
  return {
    object: 'image_resolution',
    image: {
      artifact_key: resolution.artifactKey,
      base_image: resolution.base.ref,
      build_strategy: resolution.buildStrategy,
      components: resolution.selection.components.map(({ id, version }) => ({ id, version })),
      os: imageOs(resolution.served.manifest),
    },
    components: resolution.selection.components,
    added_dependencies: resolution.selection.addedDependencies,
    recommended_resources: resolution.recommended,
  };
}
