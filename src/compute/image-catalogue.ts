// The images this host starts machines from: per profile the newest built version (read from the
// image store after a build and at start) and the state of the build in progress, plus what a
// machine's command line needs of any version (kernel, command line, screen).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pruneImageVersions, readLatestImage, type ImageManifest } from '../../images';
import type { DisplaySize } from './machine-display';
import type { HostImage, ImageBuildState, ImageProfile } from './machine-host';

export interface ImageEntry {
  image: HostImage;
  dir: string;
  cmdline: string;
  /** The image's screen (manifest `display`); null: its machines have no display device. */
  display: DisplaySize | null;
}

export class ImageCatalogue {
  private readonly latest = new Map<ImageProfile, ImageEntry>();
  private readonly builds = new Map<ImageProfile, ImageBuildState>();
  /** Published versions never change: their manifests are read once. */
  private readonly manifests = new Map<string, ImageManifest>();

  constructor(readonly imagesDir: string) {}

  /** Reads the newest built image of a profile (after a build, and at start). */
  async refresh(profile: ImageProfile): Promise<HostImage | null> {
    const found = await readLatestImage(this.imagesDir, profile);
    if (!found) return null;
    const image = { profile, version: found.manifest.version, artifactKey: found.manifest.sha256['disk.qcow2'] ?? found.manifest.version };
    this.latest.set(profile, { image, dir: found.dir, cmdline: found.manifest.kernel_cmdline, display: found.manifest.display ?? null });
    this.builds.set(profile, { state: 'ready', step: null, error: null });
    return image;
  }

  setBuildState(profile: ImageProfile, state: ImageBuildState): void {
    if (this.latest.has(profile) && state.state !== 'ready') return; // an older image stays usable
    this.builds.set(profile, state);
  }

  current(profile: ImageProfile): HostImage | null {
    return this.latest.get(profile)?.image ?? null;
  }

  buildState(profile: ImageProfile): ImageBuildState {
    return this.builds.get(profile) ?? { state: 'building', step: null, error: null };
  }

  /** Any version's files (not only the newest): a machine keeps the version its session was saved on. */
  entry(image: HostImage): ImageEntry {
    const known = this.latest.get(image.profile);
    if (known && known.image.version === image.version) return known;
    const dir = this.versionDir(image.version);
    const manifest = readImageManifest(dir);
    if (!manifest) throw new Error(`image ${image.version} has no readable manifest.json`);
    return { image, dir, cmdline: manifest.kernel_cmdline, display: manifest.display ?? null };
  }

  /** A version's whole manifest (packages, sizes, release notes); null when it cannot be read. */
  manifest(image: HostImage): ImageManifest | null {
    const cached = this.manifests.get(image.version);
    if (cached) return cached;
    const manifest = readImageManifest(this.versionDir(image.version)) as ImageManifest | null;
    if (manifest?.version === image.version) this.manifests.set(image.version, manifest);
    return manifest;
  }

  versionDir(version: string): string {
    return join(this.imagesDir, version);
  }

  /** Removes versions that are nobody's latest and not in `inUse` (version folder names). */
  removeUnused(inUse: ReadonlySet<string>): Promise<string[]> {
    return pruneImageVersions(this.imagesDir, { inUse });
  }
}

/** What the host reads of an image version's manifest.json (display: absent in images made before screens). */
export function readImageManifest(dir: string): { kernel_cmdline: string; display?: DisplaySize | null } | null {
  try {
    return JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8')) as { kernel_cmdline: string; display?: DisplaySize | null };
  } catch {
    return null;
  }
}
