// At start the service uses the newest built image at once and builds in the background: when
// nothing changed the build reuses the published version (under a second), a new agent bundle or
// recipe gives a new version (seconds with the root filesystem cached), and without any image yet
// creates get a retryable K06 naming the build's step meanwhile. A first build takes minutes (the
// root filesystem from Debian packages): the log shows each step with its duration and, within a
// long step, what it is doing (packages fetched, unpacked, set up) every PROGRESS_LOG_MS.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { buildImage, type BuildProgress } from '../images';
import type { Config } from './config';
import type { Services } from './services';

export const AGENT_BUNDLE = join(__dirname, '..', 'agent', 'dist', 'kiste-agent.js');
const PROGRESS_LOG_MS = 15_000;

export async function prepareImage(services: Services, config: Config, logger: Logger): Promise<void> {
  const profile = config.imageProfile;
  const host = services.machineHost;
  // The image already on disk was read by startService before it reconciled the machines.
  const agentBundle = [AGENT_BUNDLE, join(__dirname, '..', '..', 'agent', 'dist', 'kiste-agent.js')].find((path) => existsSync(path));
  if (!agentBundle) {
    host.setBuildState(profile, { state: 'failed', step: null, error: 'the guest agent is not built (npm run build:agent)' });
    return;
  }
  try {
    host.setBuildState(profile, { state: 'building', step: 'starting', error: null });
    const log = buildLog(logger, profile);
    const built = await buildImage({
      profile,
      outDir: config.imagesDir,
      cacheDir: config.imageCacheDir,
      agentBundle,
      onProgress: (progress) => {
        host.setBuildState(profile, { state: 'building', step: `${stepName(progress)}${progress.detail ? ` — ${progress.detail}` : ''}`, error: null });
        log(progress);
      },
    });
    logger.info({ profile, version: built.version, seconds: seconds(built.durationMs), reused: built.reused }, `image ready: ${profile} ${built.version}${built.reused ? ' (already built)' : ` built in ${seconds(built.durationMs)} s`}`);
    const image = await host.refreshImage(profile);
    // Started first: it reads which configurations older versions have snapshots of before they may go.
    const renewing = image ? host.renewBootSnapshots(image) : Promise.resolve(); // failures are logged; creates boot cold meanwhile
    await services.images.layerBaseVersions().then((keep) => host.removeUnusedImages(keep)).catch((error: Error) => logger.warn({ err: error }, 'old image versions could not be removed'));
    await renewing;
  } catch (error) {
    logger.error({ err: error, profile }, 'image build failed');
    host.setBuildState(profile, { state: 'failed', step: null, error: error instanceof Error ? error.message : String(error) });
  }
}

const stepName = (progress: BuildProgress) => `${progress.index}/${progress.total} ${progress.label}`;
const seconds = (ms: number) => Math.round(ms / 100) / 10;

/** One line when a step starts and when it ends (with its duration); within a step, its latest detail now and then. */
function buildLog(logger: Logger, profile: string): (progress: BuildProgress) => void {
  let lastAt = 0;
  return (progress) => {
    const fields = { profile, step: progress.step, seconds: seconds(progress.stepElapsedMs) };
    if (progress.phase === 'update') {
      if (!progress.detail || Date.now() - lastAt < PROGRESS_LOG_MS) return;
      logger.info({ ...fields, detail: progress.detail }, `image build ${stepName(progress)}: ${progress.detail} (${fields.seconds} s so far)`);
    } else if (progress.phase === 'start') {
      logger.info(fields, `image build ${stepName(progress)}`);
    } else {
      logger.info({ ...fields, detail: progress.detail ?? null }, `image build ${stepName(progress)}: done in ${fields.seconds} s${progress.detail ? ` (${progress.detail})` : ''}`);
    }
    lastAt = Date.now();
  };
}
