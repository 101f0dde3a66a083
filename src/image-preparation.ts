// The in-process service's image at start (a worker prepares its own, src/compute/image-preparation.ts):
// the same build, then the removal of versions nobody needs, with the database's list of versions
// private images' layers sit on.
import type { Logger } from 'pino';
import { ImagePreparation } from './compute/image-preparation';
import type { Config } from './config';
import type { Services } from './services';

export async function prepareImage(services: Services, config: Config, logger: Logger): Promise<void> {
  const host = services.compute.inProcess?.machineHost;
  if (!host) return; // the worker builds where its machines run
  // The image already on disk was read by startService before it reconciled the machines.
  const preparation = new ImagePreparation(host, { profile: config.imageProfile, imagesDir: config.imagesDir, imageCacheDir: config.imageCacheDir }, logger);
  if (!(await preparation.prepare())) return;
  await services.images.layerBaseVersions().then((keep) => preparation.removeUnused(keep)).catch((error: Error) => logger.warn({ err: error }, 'old image versions could not be removed'));
  await preparation.renewed();
}
