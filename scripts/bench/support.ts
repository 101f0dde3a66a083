// What every benchmark script needs: progress lines on stderr and an HTTP server on a free
// loopback port that closes with its connections.
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import pino from 'pino';
import { buildAgent } from '../../agent/build';
import { buildImage } from '../../images';
import type { ImageProfile } from '../../src/compute/machine-host';
import { rmSync } from 'node:fs';
import { listQemuProcesses, probeAccelerator } from '../../src/compute/qemu';
import { loadConfig } from '../../src/config';
import { openDatabase, type Database } from '../../src/db/database';
import { createApp } from '../../src/http/app';
import { serveWebSockets } from '../../src/http/websocket';
import { createServices, type Services } from '../../src/services';
import { TEST_IMAGE_DIR } from '../../test/support/images';

export function log(message: string): void {
  process.stderr.write(`bench: ${message}\n`);
}

/** Listens on 127.0.0.1 on a free port; resolves with the base URL. */
export function listen(server: Server): Promise<string> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      if (address === null || typeof address === 'string') return reject(new Error('no TCP address'));
      resolve(`http://127.0.0.1:${address.port}`);
    });
  });
}

export function close(server: Server): Promise<void> {
  return new Promise((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  });
}

/**
 * kiste in this process for a benchmark: the image of `profile` built or refreshed in the test image
 * folder, SQLite in workDir, the accelerator probed, the app and its WebSockets on `server` (already
 * listening at `base`, which becomes the base URL). `env` overrides settings (boot snapshots are off
 * unless it turns them on).
 */
export async function startBenchService(options: { profile: ImageProfile; workDir: string; server: Server; base: string; env?: Record<string, string> }): Promise<{ services: Services; database: Database; accelerator: string }> {
  log(`image: building or refreshing the ${options.profile} image in ${TEST_IMAGE_DIR}`);
  await buildImage({ profile: options.profile, outDir: TEST_IMAGE_DIR, agentBundle: (await buildAgent()).outfile });
  const config = loadConfig({
    KISTE_BASE_URL: options.base,
    KISTE_DATA_DIR: join(options.workDir, 'data'),
    KISTE_IMAGE_DIR: TEST_IMAGE_DIR,
    KISTE_IMAGE_PROFILE: options.profile,
    KISTE_REQUESTS_PER_MINUTE: '1000000000',
    // These benches measure a running machine: no boot snapshot's template boots beside it.
    KISTE_BOOT_SNAPSHOTS: 'off',
    // Machines in this process unless `env` says `worker` (a supervised kiste-worker, as `npm start`
    // runs them): some benches reach into the in-process host (its firewall, its boot snapshots).
    KISTE_COMPUTE: 'in-process',
    ...options.env,
  });
  const choice = config.accelerator === 'auto' ? await probeAccelerator() : { accelerator: config.accelerator, reason: 'configured' };
  log(`accelerator ${choice.accelerator} (${choice.reason})`);
  const database = await openDatabase({ url: undefined, dataDir: config.dataDir });
  // A supervised worker's log lines would land in the report on stdout: dropped (its warnings reach the service's log as failures).
  const services = createServices(config, database, { accelerator: choice.accelerator, logger: pino({ level: 'warn' }, pino.destination(2)), workerOutput: () => undefined });
  if (!(await services.compute.start(options.profile))) throw new Error('the compute worker did not start');
  if (!(await services.machineHost.refreshImage(options.profile))) throw new Error(`the service does not see the ${options.profile} image`);
  const app = await createApp(services, pino({ level: 'silent' }));
  options.server.on('request', app);
  serveWebSockets(options.server, app);
  return { services, database, accelerator: choice.accelerator };
}

/**
 * kiste with its machines in a supervised kiste-worker (as `npm start` runs them), in workDir, for a
 * benchmark that sets it beside the in-process service: an account and an API key made, and what
 * stop() removes (its machines, the worker, the listener, the database).
 */
export async function startWorkerService(workDir: string, accelerator: string): Promise<{ base: string; token: string; stop(): Promise<void> }> {
  const server = createServer();
  const base = await listen(server);
  const { services, database } = await startBenchService({ profile: 'minimal', workDir, server, base, env: { KISTE_COMPUTE: 'worker', KISTE_ACCELERATOR: accelerator } });
  // A worker checks its image in the background once it listens (agent bundle, recipe, files): what a
  // long-running worker did long ago. Measured only after, as the in-process service's was checked before.
  for (const deadline = Date.now() + 300_000; ; ) {
    await services.machineHost.refreshImage('minimal');
    const build = services.machineHost.imageBuildState('minimal');
    if (build.state === 'ready' && build.step === null) break;
    if (build.state === 'failed' || Date.now() > deadline) throw new Error(`the worker's image is not ready: ${JSON.stringify(build)}`);
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  await new Promise((resolve) => setTimeout(resolve, 3000)); // and its start settled
  const account = await services.accounts.create('split@example.com', 'benchmark password', 'Split Bench');
  const { token } = await services.apiTokens.create(account.id, 'bench', 3600);
  return {
    base,
    token,
    async stop() {
      for (const id of await services.machineHost.knownMachineIds().catch(() => [])) await services.machineHost.destroy(id).catch(() => undefined);
      await close(server);
      await services.compute.stop();
      await database.close();
    },
  };
}

/** Removes the bench's folder; false (and says so) when a QEMU of it is still running. */
export function removeWorkDir(workDir: string): boolean {
  rmSync(workDir, { recursive: true, force: true });
  const left = listQemuProcesses().filter((p) => p.machineDir?.startsWith(workDir));
  if (left.length === 0) return true;
  console.error(`QEMU left behind: ${left.map((p) => p.pid).join(' ')}`);
  return false;
}
