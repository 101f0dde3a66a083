// At start the service uses the newest built image at once and builds in the background: when
// nothing changed the build reuses the published version (under a second), a new agent bundle or
// recipe gives a new version (seconds with the root filesystem cached), and without any image yet
// creates get a retryable K06 naming the build's step meanwhile.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { buildImage } from '../images';
import type { Config } from './config';
import type { Services } from './services';

export const AGENT_BUNDLE = join(__dirname, '..', 'agent', 'dist', 'kiste-agent.js');

export async function prepareImage(services: Services, config: Config, logger: Logger): Promise<void> {
  const profile = config.imageProfile;
  const host = services.machineHost;
  await host.refreshImage(profile);
  const agentBundle = [AGENT_BUNDLE, join(__dirname, '..', '..', 'agent', 'dist', 'kiste-agent.js')].find((path) => existsSync(path));
  if (!agentBundle) {
    host.setBuildState(profile, { state: 'failed', step: null, error: 'the guest agent is not built (npm run build:agent)' });
    return;
  }
  try {
    host.setBuildState(profile, { state: 'building', step: 'starting', error: null });
    const built = await buildImage({
      profile,
      outDir: config.imagesDir,
      agentBundle,
      onProgress: (progress) => {
        host.setBuildState(profile, { state: 'building', step: `${progress.index}/${progress.total} ${progress.label}`, error: null });
        if (progress.phase !== 'update') logger.info({ profile, step: progress.step, phase: progress.phase }, 'image build');
      },
    });
    logger.info({ profile, version: built.version }, 'image ready');
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
