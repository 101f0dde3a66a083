// The served image, built where machines run (a worker, or the in-process service): at start the
// host uses the newest built image at once and builds in the background. When nothing changed the
// build reuses the published version (under a second), a new agent bundle or recipe gives a new
// version (seconds with the root filesystem cached), and without any image yet creates get a
// retryable K06 naming the build's step meanwhile. A first build takes minutes (the root
// filesystem from Debian packages): the log shows each step with its duration and, within a long
// step, what it is doing (packages fetched, unpacked, set up) every PROGRESS_LOG_MS.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { buildImage, type BuildProgress } from '../../images';
import type { HostImage, ImageBuildState, ImageProfile } from './machine-host';

/** Where `npm run build:agent` puts the guest agent, seen from src/compute (tsx) and dist/src/compute (built). */
const AGENT_BUNDLES = [join(__dirname, '..', '..', 'agent', 'dist', 'kiste-agent.js'), join(__dirname, '..', '..', '..', 'agent', 'dist', 'kiste-agent.js')];
const PROGRESS_LOG_MS = 15_000;

/** What preparing the image needs of the machine host (QemuMachineHost). */
export interface PreparingHost {
  setBuildState(profile: ImageProfile, state: ImageBuildState): void;
  refreshImage(profile: ImageProfile): Promise<HostImage | null>;
  renewBootSnapshots(image: HostImage): Promise<void>;
  removeUnusedImages(keep: ReadonlySet<string>): Promise<string[]>;
}

export interface PreparationSettings {
  profile: ImageProfile;
  imagesDir: string;
  imageCacheDir?: string;
}

type Log = (object: object, message: string) => void;

export class ImagePreparation {
  /** Settles once the last build has started renewing boot snapshots, or ended without: removals wait for it. */
  private renewalStarted: Promise<void> = Promise.resolve();
  private renewing: Promise<void> = Promise.resolve();

  constructor(
    private readonly host: PreparingHost,
    private readonly settings: PreparationSettings,
    private readonly logger: { info: Log; warn: Log; error: Log },
  ) {}

  /**
   * Builds (or finds) the profile's image; its build state shows the step meanwhile. The new
   * version's boot snapshots are then renewed in the background (`renewed()`). Null when the build
   * failed (its state says why).
   */
  async prepare(): Promise<HostImage | null> {
    let started!: () => void;
    this.renewalStarted = new Promise<void>((resolve) => (started = resolve));
    const { profile } = this.settings;
    try {
      const agentBundle = AGENT_BUNDLES.find((path) => existsSync(path));
      if (!agentBundle) {
        this.host.setBuildState(profile, { state: 'failed', step: null, error: 'the guest agent is not built (npm run build:agent)' });
        return null;
      }
      this.host.setBuildState(profile, { state: 'building', step: 'starting', error: null });
      const log = buildLog((object, message) => this.logger.info(object, message), profile);
      const built = await buildImage({
        profile,
        outDir: this.settings.imagesDir,
        cacheDir: this.settings.imageCacheDir,
        agentBundle,
        onProgress: (progress) => {
          this.host.setBuildState(profile, { state: 'building', step: `${stepName(progress)}${progress.detail ? ` — ${progress.detail}` : ''}`, error: null });
          log(progress);
        },
      });
      this.logger.info({ profile, version: built.version, seconds: seconds(built.durationMs), reused: built.reused }, `image ready: ${profile} ${built.version}${built.reused ? ' (already built)' : ` built in ${seconds(built.durationMs)} s`}`);
      const image = await this.host.refreshImage(profile);
      // Started before any removal: it reads which configurations older versions have snapshots of.
      // Its failures are logged; creates boot cold meanwhile.
      if (image) this.renewing = this.host.renewBootSnapshots(image).catch((error: Error) => this.logger.warn({ err: error, profile }, 'boot snapshots could not be renewed'));
      return image;
    } catch (error) {
      this.logger.error({ err: error, profile }, 'image build failed');
      this.host.setBuildState(profile, { state: 'failed', step: null, error: error instanceof Error ? error.message : String(error) });
      return null;
    } finally {
      started();
    }
  }

  /** Removes versions nobody uses and not in `keep` (see removeUnusedImages), once the renewal the build started has read the older ones. */
  async removeUnused(keep: ReadonlySet<string>): Promise<string[]> {
    await this.renewalStarted;
    return this.host.removeUnusedImages(keep);
  }

  /** The boot snapshots' renewal the last build started (settles when it ends; never rejects). */
  renewed(): Promise<void> {
    return this.renewing;
  }
}

const stepName = (progress: BuildProgress) => `${progress.index}/${progress.total} ${progress.label}`;
const seconds = (ms: number) => Math.round(ms / 100) / 10;

/** One line when a step starts and when it ends (with its duration); within a step, its latest detail now and then. */
function buildLog(info: Log, profile: string): (progress: BuildProgress) => void {
  let lastAt = 0;
  return (progress) => {
    const fields = { profile, step: progress.step, seconds: seconds(progress.stepElapsedMs) };
    if (progress.phase === 'update') {
      if (!progress.detail || Date.now() - lastAt < PROGRESS_LOG_MS) return;
      info({ ...fields, detail: progress.detail }, `image build ${stepName(progress)}: ${progress.detail} (${fields.seconds} s so far)`);
    } else if (progress.phase === 'start') {
      info(fields, `image build ${stepName(progress)}`);
    } else {
      info({ ...fields, detail: progress.detail ?? null }, `image build ${stepName(progress)}: done in ${fields.seconds} s${progress.detail ? ` (${progress.detail})` : ''}`);
    }
    lastAt = Date.now();
  };
}
