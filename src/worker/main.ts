// `kiste-worker`: runs this host's machines for a control plane (issue 22). Reads the service's
// configuration (data and image folders, accelerator, jail) and serves worker-api.yaml on a unix
// socket (KISTE_WORKER_SOCKET, default <data>/worker.sock), signed with the secret in
// KISTE_WORKER_SECRET_FILE (default <data>/worker.secret, made on first start). It never opens the
// database. It builds (or finds) its profile's image in the background once it listens, and
// builds derived layers when asked. SIGTERM: stops listening and leaves every machine running for
// the next start.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { ConfigError, loadConfig, type Config } from '../config';
import { computeSettingsOf, createComputeHost } from '../compute/compute-host';
import { ImagePreparation } from '../compute/image-preparation';
import { probeAccelerator } from '../compute/qemu';
import { createServiceLogger } from '../service-log';
import { WorkerServer } from './worker-server';
import type { WorkerCounts } from './worker-routes';
import { readWorkerSecret, WorkerSecretError } from './worker-secret';

async function main(): Promise<void> {
  let config: Config;
  let secret: Buffer;
  try {
    config = loadConfig();
    mkdirSync(config.dataDir, { recursive: true });
    secret = readWorkerSecret(process.env.KISTE_WORKER_SECRET_FILE || join(config.dataDir, 'worker.secret'), { create: true });
  } catch (error) {
    if (error instanceof ConfigError || error instanceof WorkerSecretError) {
      console.error(`kiste-worker: ${error.message}`);
      process.exit(2);
    }
    throw error;
  }
  const logger = createServiceLogger(config.logLevel, config.logFormat);
  const accelerator = config.accelerator === 'auto' ? (await probeAccelerator()).accelerator : config.accelerator;
  const counts: WorkerCounts = { agentLinksDropped: 0 };
  const compute = createComputeHost({ ...computeSettingsOf(config, accelerator, logger), onAgentLinkDropped: () => counts.agentLinksDropped++ });
  await compute.machineHost.refreshImage(config.imageProfile); // the image already on disk is served at once
  const images = new ImagePreparation(compute.machineHost, { profile: config.imageProfile, imagesDir: config.imagesDir, imageCacheDir: config.imageCacheDir }, logger);
  const socketPath = process.env.KISTE_WORKER_SOCKET || join(config.dataDir, 'worker.sock');
  const server = new WorkerServer({ secret, version: config.version, host: compute.machineHost, images, counts, logger });
  await server.listenOnSocket(socketPath);
  logger.info({ socket: socketPath, accelerator }, 'kiste-worker is listening');
  // In the background: GetImageState answers `building` with the step meanwhile (K06 on the control
  // plane); old versions go only when the control plane names what it keeps (CollectImages).
  void images.prepare();
  let stopping = false;
  const shutdown = (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'kiste-worker shutting down; machines keep running');
    void (async () => {
      await server.close();
      compute.machineHost.detachAll();
      await compute.jail.stopWatching();
      process.exit(0);
    })();
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
}

main().catch((error: unknown) => {
  console.error('kiste-worker failed to start:', error instanceof Error ? error.message : error);
  process.exit(1);
});
