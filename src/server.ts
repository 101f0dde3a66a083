// Starts kiste: configuration, database (migrated), first account, HTTP(S) listener, background
// jobs; on SIGTERM/SIGINT stops accepting, finishes what is running and closes the database.
import { readFileSync } from 'node:fs';
import { createServer as createHttpServer, Server } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { Logger } from 'pino';
import { serviceJobs } from './background';
import { PostgresLeaderLock, SOLE_PROCESS } from './db/leader-lock';
import { joinReplicas } from './db/replica-presence';
import { Config, ConfigError, loadConfig } from './config';
import { openDatabase } from './db/database';
import { serveWebSockets } from './http/websocket';
import { createApp } from './http/app';
import { createServices, Services } from './services';
import { probeAccelerator } from './compute/qemu';
import { cameFromUnreachableHost, HostUnreachableError } from './compute/machine-host';
import { prepareImage } from './image-preparation';
import { listenForMetrics } from './observability/metrics-listener';
import { createServiceLogger } from './service-log';

export interface RunningService {
  server: Server;
  services: Services;
  url: string;
  /** The scrape endpoint when KISTE_METRICS_LISTEN is set. */
  metricsUrl: string | null;
  stop(): Promise<void>;
}

export async function startService(config: Config, logger: Logger): Promise<RunningService> {
  const database = await openDatabase({ url: config.databaseUrl, dataDir: config.dataDir });
  const accelerator = config.accelerator === 'auto' ? await probeAccelerator() : { accelerator: config.accelerator, reason: 'configured', probeMs: 0 };
  logger.info(accelerator, 'machine accelerator');
  // Every operation names the replica that runs it; another finishes it only once that one is gone.
  const replicas = await joinReplicas(database.provider === 'postgresql' ? config.databaseUrl : undefined);
  const services = createServices(config, database, { accelerator: accelerator.accelerator, logger, replicas });
  // A worker back after it could not be reached: its machines are adopted and what it cut short
  // (operations, image builds) is finished (listened to before the start, so a worker that ends
  // during the first pass is not missed). The machines' pass is a job: every replica sees the
  // return, one runs the pass (retried if it fails, run elsewhere if its replica dies).
  services.jobs.work('reconcile-worker', async (data) => {
    const job = reconcileJobOf(data);
    // A replica that does not reach the worker now (it is starting, or cut off from that worker)
    // would skip every machine and call the job done: it fails, to be tried again, perhaps elsewhere.
    const reaches = job.workerId === undefined ? services.machineHost.reachable() : services.machineHost.reachableFor(job.workerId);
    if (!reaches) throw new Error('the worker does not answer this replica now');
    await services.instances.reconcile({ cleanUp: false, ...job });
  });
  await services.jobs.start();
  services.compute.onBack((workerId) => {
    void services.jobs.send('reconcile-worker', { worker_id: workerId ?? null }, { key: workerId ?? 'local' }).catch((error: Error) => logger.error({ err: error }, 'reconciling after the compute worker came back could not be queued'));
    void services.imageBuilds.resume().catch((error: Error) => logger.warn({ err: error }, 'image builds could not be resumed'));
  });
  // Compute first: a local worker is started and answers before machines are reconciled (the image
  // already on disk is known then, so a start cut short by the last exit can finish). A worker that
  // fails meanwhile never keeps the API from starting: its return reconciles.
  const computeUp = await services.compute.start(config.imageProfile);
  try {
    if (!computeUp) throw new HostUnreachableError('the compute worker did not start');
    await logJail(services, config, logger);
    await services.instances.reconcile();
  } catch (error) {
    if (!cameFromUnreachableHost(error)) throw error;
    logger.error({ err: error }, 'the compute worker is not up: calls that need it answer 503 N01 until it is; machines are adopted then');
  }
  await services.snapshots.failInterrupted();
  const interrupted = await services.instanceSetups.failInterrupted('The service restarted while the environment setup was running; the machine may be partly set up');
  if (interrupted > 0) logger.warn({ instances: interrupted }, 'environment setups interrupted by a restart were marked failed');
  void prepareImage(services, config, logger); // in-process only: a worker prepares its own
  void services.imageBuilds.resume().catch((error: Error) => logger.warn({ err: error }, 'interrupted image builds could not be resumed'));
  const admin = await services.accounts.bootstrap(config.adminEmail, config.adminPassword);
  if (admin) logger.info({ email: admin.email }, 'created the first account from KISTE_ADMIN_EMAIL');
  const app = await createApp(services, logger);
  const server = config.tls
    ? createHttpsServer({ cert: readFileSync(config.tls.certFile), key: readFileSync(config.tls.keyFile) }, app)
    : createHttpServer(app);
  server.keepAliveTimeout = 65_000;
  const webSockets = serveWebSockets(server, app);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(config.listenPort, config.listenHost, () => resolve());
  });
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : config.listenPort;
  const url = `${config.tls ? 'https' : 'http'}://${config.listenHost.includes(':') ? `[${config.listenHost}]` : config.listenHost}:${port}`;
  const leadership = database.provider === 'postgresql' && config.databaseUrl
    ? new PostgresLeaderLock(config.databaseUrl, (held) => logger.info({ held }, held ? 'this replica now runs the periodic jobs' : 'this replica no longer runs the periodic jobs'))
    : SOLE_PROCESS;
  if (leadership instanceof PostgresLeaderLock) {
    await leadership.start();
    if (!leadership.held()) logger.info({}, 'another replica runs the periodic jobs; this one takes over if it goes');
  }
  const jobs = serviceJobs(services, logger, leadership);
  jobs.start();
  const metricsListener = config.metrics ? await listenForMetrics(config.metrics, services.metrics, logger) : null;
  if (metricsListener) logger.info({ url: metricsListener.url, token: Boolean(config.metrics?.token) }, 'metrics endpoint listening');
  return {
    server,
    services,
    url,
    metricsUrl: metricsListener?.url ?? null,
    async stop() {
      // Upgraded connections do not end with server.close(): tunnels close first.
      services.sshTunnels.closeAll();
      services.terminals.closeAll();
      services.desktops.closeAll();
      webSockets.close();
      await services.serviceProxy.close(); // the bytes carried since the last flush are counted
      await metricsListener?.close();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
      });
      await jobs.stop();
      await services.jobs.stop();
      await leadership.close();
      await Promise.allSettled(services.instances.operations.pending());
      await services.compute.stop(); // machines keep running; the next start adopts them
      await replicas.close();
      await database.close();
    },
  };
}

/** A reconcile-worker job's data, as the records hold it: a worker's id, or none (the local worker). */
function reconcileJobOf(data: unknown): { workerId?: string } {
  const workerId = (data as { worker_id?: unknown } | null)?.worker_id;
  if (workerId === null || workerId === undefined) return {};
  if (typeof workerId !== 'string' || !/^[A-Za-z0-9-]{1,80}$/.test(workerId)) throw new Error('a reconcile-worker job without a worker id');
  return { workerId };
}

/**
 * The host must jail machines (own users, network rules, limits) before any starts; without it the
 * service still serves the API and machines that run, but starts none (K09) until a later check
 * passes (the jail checks again when a start or GET /v1/status asks).
 */
async function logJail(services: Services, config: Config, logger: Logger): Promise<void> {
  const jailProblem = await services.machineHost.isolationProblem();
  if (jailProblem) logger.error(jailProblem, 'machines cannot be isolated from this host: none starts until this is mended (checked again when one is to start)');
  else logger.info({ uids: `${config.machineUidBase + 1}-${config.machineUidBase + 65_535}`, egress: config.machineEgress.mode, allow: config.machineEgress.allow.map((c) => c.cidr) }, 'machine jail ready');
}

async function main(): Promise<void> {
  let config: Config;
  try {
    config = loadConfig();
  } catch (error) {
    if (error instanceof ConfigError) {
      console.error(`kiste: ${error.message}`);
      process.exit(2);
    }
    throw error;
  }
  const logger = createServiceLogger(config.logLevel, config.logFormat);
  const running = await startService(config, logger);
  logger.info({ url: running.url, console: `${config.consoleUrl}/`, dataDir: config.dataDir, database: running.services.database.provider }, 'kiste is listening; open the console in a browser');
  let stopping = false;
  const shutdown = (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'shutting down');
    const force = setTimeout(() => {
      logger.error('shutdown took longer than 20 s; exiting');
      process.exit(1);
    }, 20_000);
    force.unref();
    running.stop().then(
      () => process.exit(0),
      (error) => {
        logger.error({ err: error }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
}

if (require.main === module) {
  main().catch((error) => {
    console.error('kiste failed to start:', error instanceof Error ? error.message : error);
    process.exit(1);
  });
}
