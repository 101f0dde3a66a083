// Images: the built-in universal image (what this server serves, described from its manifest) and
// the account's private images. A private image whose components are all in the universal image is
// ready at once; one with Debian packages outside it gets a derived layer from the image builder.
import { componentsOfImage, manifestDiskMib, packageMap, type BuiltComponent, type ImageManifest } from '../../images';
import type { HostImage } from '../compute/machine-host';
import { KisteError } from '../errors';
import { appendEvent } from '../store/events';
import type { Image, ImageStore } from '../store/images';
import type { Slot } from './account-slots';
import type { Clock } from './clock';
import { layerDiskMib } from './image-builds';
import { layerKey, resolveSelection, type ComponentRef, type Selection } from './image-selection';
import { newId } from './secrets';
import type { Transactions } from './transactions';

export const UNIVERSAL_IMAGE = 'universal';
const UNIVERSAL_NAME = 'Universal';
const MIB = 1024 * 1024;

export interface ImageResources {
  vcpu: number;
  memory_mib: number;
  disk_mib: number;
}

export interface ImageSelectionRequest {
  from?: string;
  components?: ComponentRef[];
  resources?: ImageResources | null;
}

/** What the image endpoints need of the machine host: the served image and its manifest. */
export interface ServedImages {
  currentImage(): HostImage | null;
  manifest(image: HostImage): Promise<ImageManifest | null>;
}

/** Builds the derived layers of private images in the background (a builder machine). */
export interface ImageBuildQueue {
  /** A place for one more build of the account's; 409 L11 when it has the most queued or running. */
  reserve(accountId: string): Slot;
  /** Starts (or joins) the build of this image's layer, in the place reserved for it; progress and outcome go to its row. */
  build(image: Image, slot: Slot): void;
  /** The image is gone: its build stops (a builder it booted is removed) or never starts. */
  cancel(imageId: string): void;
}

export interface Served {
  image: HostImage;
  manifest: ImageManifest;
  components: BuiltComponent[];
}

export interface Resolution {
  selection: Selection;
  base: { ref: string; image: Image | null };
  served: Served;
  artifactKey: string;
  buildStrategy: 'universal' | 'derived_layer';
  recommended: ImageResources;
}

/** What an instance records of its image at create, and the derived layer its disk starts from. */
export interface InstanceImage {
  label: string;
  imageId: string | null;
  components: ComponentRef[];
  artifactKey: string | null;
  layer: { version: string; key: string } | null;
  /** The least disk a machine of it can have (a derived layer's size); null: no minimum beyond the schema's. */
  minDiskMib: number | null;
}

export class Images {
  constructor(
    private readonly transactions: Transactions,
    private readonly store: ImageStore,
    private readonly served: ServedImages,
    private readonly builder: ImageBuildQueue,
    private readonly clock: Clock,
  ) {}

  /** The served universal image with its components; K06 while none is built yet. */
  async servedImage(): Promise<Served> {
    const image = this.served.currentImage();
    const manifest = image ? await this.served.manifest(image) : null;
    if (!image || !manifest) throw new KisteError('K06', { message: 'The machine image is still being built' });
    return { image, manifest, components: componentsOfImage(manifest) };
  }

  async catalogue(): Promise<BuiltComponent[]> {
    return (await this.servedImage()).components;
  }

  list(accountId: string): Promise<Image[]> {
    return this.store.list(accountId);
  }

  /** A private image by ID, slug or name; null for the built-in one. */
  async get(accountId: string, ref: string): Promise<Image | null> {
    if (isUniversal(ref)) return null;
    const image = await this.store.findByRef(accountId, ref);
    if (!image) throw new KisteError('K20', { message: `No image ${ref}`, param: 'id' });
    return image;
  }

  async resolve(accountId: string, request: ImageSelectionRequest): Promise<Resolution> {
    const served = await this.servedImage();
    const from = request.from ?? UNIVERSAL_IMAGE;
    const base = isUniversal(from) ? null : await this.store.findByRef(accountId, from);
    if (!isUniversal(from) && !base) throw new KisteError('K20', { message: `No image ${from}`, param: 'from' });
    // A private base contributes its own selection: the new image holds both.
    const wanted = [...((base?.components ?? []) as unknown as ComponentRef[]), ...(request.components ?? [])];
    const selection = resolveSelection(served.components, packageMap(served.manifest.packages), wanted);
    const derived = selection.debPackages.length > 0;
    const usedMib = Math.ceil((served.manifest.sizes.rootfs_used ?? 0) / MIB);
    const asked = request.resources ?? (base?.resources as unknown as ImageResources | null) ?? null;
    const recommended = {
      vcpu: Math.max(asked?.vcpu ?? 0, selection.minResources.vcpu, 1),
      memory_mib: Math.max(asked?.memory_mib ?? 0, selection.minResources.memoryMib, 1024),
      disk_mib: Math.max(asked?.disk_mib ?? 0, selection.minResources.diskMib, roundUp(usedMib + 1024, 1024),
        derived ? layerDiskMib(manifestDiskMib(served.manifest)) : 0),
    };
    return {
      selection,
      base: { ref: base ? base.id : UNIVERSAL_IMAGE, image: base },
      served,
      artifactKey: derived ? layerKey(served.image.artifactKey, selection.debPackages) : served.image.artifactKey,
      buildStrategy: derived ? 'derived_layer' : 'universal',
      recommended,
    };
  }

  async create(accountId: string, name: string, request: ImageSelectionRequest): Promise<Image> {
    const slug = slugOf(name);
    if (/[\x00-\x1f\x7f]/.test(name)) throw new KisteError('P01', { message: 'The image name must not contain control characters', param: 'name' });
    if (isUniversal(name) || isUniversal(slug)) throw new KisteError('K28', { message: `${name} is the built-in image's name`, param: 'name' });
    const resolution = await this.resolve(accountId, request);
    const derived = resolution.buildStrategy === 'derived_layer';
    const now = this.clock.now();
    const taken = () => new KisteError('K28', { message: `An image named ${name} (or with the slug ${slug}) already exists`, param: 'name' });
    // Reserved before the image is made (and before anything is awaited): creates at once cannot pass the account's build cap together.
    const slot = derived ? this.builder.reserve(accountId) : null;
    const image = await this.transactions.run(async (tx) => {
      if (await this.store.nameOrSlugTaken(accountId, name, slug, tx)) {
        throw taken();
      }
      const created = await this.store.create(tx, {
        id: newId(),
        accountId,
        name,
        slug,
        baseImage: resolution.base.ref,
        components: resolution.selection.components.map(({ id, version }) => ({ id, version })),
        resources: request.resources ?? null,
        buildStrategy: resolution.buildStrategy,
        status: derived ? 'building' : 'ready',
        artifactKey: resolution.artifactKey,
        baseVersion: derived ? resolution.served.image.version : null,
        buildPackages: derived ? resolution.selection.debPackages : null,
        createdAt: now,
      });
      await appendEvent(tx, accountId, { type: 'image.created', resourceType: 'image', resourceId: created.id, data: { name, status: created.status } });
      return created;
    }).catch((error: unknown) => {
      slot?.release();
      // Two creates of one name at once: the unique index stops the second.
      if ((error as { code?: string }).code === 'P2002') throw taken();
      throw error;
    });
    if (slot) this.builder.build(image, slot);
    return image;
  }

  async delete(accountId: string, ref: string): Promise<Image> {
    if (isUniversal(ref)) throw new KisteError('K22', { param: 'id' });
    const image = await this.get(accountId, ref);
    const outcome = await this.transactions.run(async (tx) => {
      const result = await this.store.deleteUnlessUsed(tx, accountId, image!.id);
      if (result === 'deleted') {
        await appendEvent(tx, accountId, { type: 'image.deleted', resourceType: 'image', resourceId: image!.id, data: { name: image!.name, status: image!.status } });
      }
      return result;
    });
    if (outcome === 'deleted') this.builder.cancel(image!.id);
    if (outcome === 'in_use') throw new KisteError('K21', { message: `The image ${image!.name} is used by at least one machine`, param: 'id' });
    if (outcome === 'missing') throw new KisteError('K20', { message: `No image ${ref}`, param: 'id' });
    return image!;
  }

  /** What a create records: the image asked for (universal when null); K20, K27 when it cannot start. */
  async forInstance(accountId: string, ref: string | null | undefined): Promise<InstanceImage> {
    if (!ref || isUniversal(ref)) {
      const served = this.served.currentImage();
      const manifest = served ? await this.served.manifest(served) : null;
      const components = manifest ? componentsOfImage(manifest).map(({ id, version }: BuiltComponent) => ({ id, version })) : [];
      return { label: UNIVERSAL_IMAGE, imageId: null, components, artifactKey: null, layer: null, minDiskMib: null };
    }
    const image = await this.store.findByRef(accountId, ref);
    if (!image) throw new KisteError('K20', { message: `No image ${ref}`, param: 'image' });
    if (image.status !== 'ready') {
      throw new KisteError('K27', {
        message: image.status === 'failed' ? `The image ${image.name} failed to build: ${image.buildError ?? 'see its build log'}` : `The image ${image.name} is still being built`,
        param: 'image',
      });
    }
    const layer = image.buildStrategy === 'derived_layer' && image.baseVersion ? { version: image.baseVersion, key: image.artifactKey } : null;
    const minDiskMib = layer ? await this.layerDiskMibOn(layer.version) : null;
    return { label: ref, imageId: image.id, components: image.components as unknown as ComponentRef[], artifactKey: image.artifactKey, layer, minDiskMib };
  }

  /** The disk of a derived layer on `version`, from that version's manifest. */
  private async layerDiskMibOn(version: string): Promise<number | null> {
    const current = this.served.currentImage();
    const manifest = current ? await this.served.manifest({ ...current, version, layer: null }) : null;
    return manifest ? layerDiskMib(manifestDiskMib(manifest)) : null;
  }

  /** Image versions that private images' derived layers sit on (their folders must stay). */
  layerBaseVersions(): Promise<Set<string>> {
    return this.store.layerBaseVersions();
  }

  /** GET /v1/runtime/image: the served version and its release notes (written when it was built). */
  async runtime(): Promise<{ version: string; releasedAt: string; notes: string[] }> {
    const { manifest } = await this.servedImage();
    const notes = manifest.release_notes ?? [`${manifest.version}: no release notes were recorded for this version (built before kiste wrote them).`];
    return { version: manifest.version, releasedAt: manifest.created_at, notes };
  }

}

export function isUniversal(ref: string): boolean {
  return ref === UNIVERSAL_IMAGE || ref === UNIVERSAL_NAME;
}

export function universalName(): string {
  return UNIVERSAL_NAME;
}

/** Lowercase letters, digits and single dashes: `My Image 2` → `my-image-2`. */
export function slugOf(name: string): string {
  return name.toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-+|-+$/g, '').slice(0, 63) || 'image';
}

function roundUp(value: number, step: number): number {
  return Math.ceil(value / step) * step;
}
