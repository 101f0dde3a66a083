// `kiste-worker`: runs this host's machines for a control plane (issue 22). Reads the service's
// configuration (data and image folders, accelerator, jail) and serves worker-api.yaml on a unix
// socket (KISTE_WORKER_SOCKET, default <data>/worker.sock) and, between hosts, with TLS on
// KISTE_WORKER_LISTEN, signed with the secret in KISTE_WORKER_SECRET_FILE (default
// <data>/worker.secret: made on first start, from KISTE_WORKER_JOIN_TOKEN when the worker joins a
// control plane on another host; see worker-config.ts). It never opens the database. It builds (or finds) its profile's image in the background once it listens, and
// builds derived layers when asked. SIGTERM: stops listening and leaves every machine running for
// the next start.
import { mkdirSync } from 'node:fs';
import { ConfigError, loadConfig, type Config } from '../config';
import { computeSettingsOf, createComputeHost } from '../compute/compute-host';
import { ImagePreparation } from '../compute/image-preparation';
import { probeAccelerator } from '../compute/qemu';
import { createServiceLogger } from '../service-log';
import { WorkerServer } from './worker-server';
import type { WorkerCounts } from './worker-routes';
import { readWorkerSecret, WorkerSecretError } from './worker-secret';
import { workerSettingsOf, type WorkerSettings } from './worker-config';
import { workerCertificate } from './worker-tls';

async function main(): Promise<void> {
  let config: Config;
  let settings: WorkerSettings;
  let secret: Buffer;
  try {
    config = loadConfig();
    settings = workerSettingsOf(config);
    // The token gives the secret: no child process (nft, qemu-img, the image builder) inherits it.
    delete process.env.KISTE_WORKER_JOIN_TOKEN;
    mkdirSync(config.dataDir, { recursive: true });
    secret = readWorkerSecret(settings.secretFile, { create: true, ...(settings.joinedSecret ? { joined: settings.joinedSecret } : {}) });
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
  const server = new WorkerServer({ secret, version: config.version, host: compute.machineHost, images, counts, logger, offer: settings.offer });
  await server.listenOnSocket(settings.socketPath);
  logger.info({ socket: settings.socketPath, accelerator }, 'kiste-worker is listening');
  if (settings.tcp) {
    const certificate = workerCertificate(settings.tcp);
    const { port } = await server.listenWithTls(settings.tcp.host, settings.tcp.port, certificate, settings.tcp.allowFrom);
    const allowFrom = settings.tcp.allowFrom.length ? settings.tcp.allowFrom.map((range) => range.cidr) : 'any address';
    logger.info({ host: settings.tcp.host, port, fingerprint: certificate.fingerprint, offer: settings.offer, allowFrom }, 'kiste-worker is listening with TLS');
  }
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
