// The machines of a one-box install run in a local kiste-worker that the service starts and
// supervises (WorkerSupervisor): a fault in compute ends the worker, never the API, which answers
// 503 N01 until the worker is up again, adopts the machines that ran on meanwhile and finishes the
// operations the worker's end cut short. The worker gets the compute part of the service's
// configuration only: no database URL, no secret of the control plane.
import type { Config } from '../config';
import type { ComputeCounts } from '../observability/metrics';
import { QemuMachineDisplay } from './guest-display';
import type { MachineDisplay } from './machine-display';
import type { Accelerator, HostImage, ImageProfile } from './machine-host';
import type { ServiceCompute } from './service-compute';
import { SupervisedWorker } from './supervised-worker';
import { RemoteImages } from './remote-images';
import { WorkerMachineHost } from './worker-machine-host';
import { WorkerSupervisor, type WorkerState } from './worker-supervisor';
import { nextEpoch, removeWorkerStrays } from './worker-adoption';
import type { WorkerClient } from './worker-client';

/** How often the worker's image state is read while it is up (a build's step for K06, a new version). */
const IMAGE_REFRESH_MS = 5_000;

export interface LocalWorkerSettings {
  /** The service's configuration: the worker gets its compute part and none of its secrets. */
  config: Config;
  /** What the service probed: the worker runs machines with the same (and need not probe again). */
  accelerator: Accelerator;
  logger: { info(object: object, message: string): void; warn(object: object, message: string): void };
  /** The image versions the database still needs (private images' layers sit on them): the worker removes the others. */
  keepVersions(): Promise<Iterable<string>>;
  /** Every machine the records own: adopting a run of the worker removes the others. */
  ownedMachineIds(): Promise<string[]>;
  /** Tests drive a display of their own. */
  machineDisplay?: MachineDisplay;
  /** Where the worker's log lines go (default: this process's stdout). */
  output?: (line: string) => void;
}

export class LocalWorkerCompute implements ServiceCompute {
  readonly kind = 'worker';
  readonly inProcess = null;
  readonly host: WorkerMachineHost;
  readonly display: MachineDisplay;
  private readonly supervisor: WorkerSupervisor;
  private readonly backListeners: (() => void)[] = [];
  private starting = false;
  private imageTimer: NodeJS.Timeout | null = null;
  private refreshRound = 0;
  private readonly images: RemoteImages;
  /** The served version whose old ones were last collected. */
  private collectedFor: string | null = null;

  constructor(private readonly settings: LocalWorkerSettings) {
    this.supervisor = new WorkerSupervisor({
      dataDir: settings.config.dataDir,
      env: workerEnvironment(settings.config, settings.accelerator),
      logger: settings.logger,
      output: settings.output,
      onState: (state) => this.changed(state),
      adopt: (client, helloEpoch) => this.adopt(client, helloEpoch),
      removeStrays: (client) => this.removeStrays(client),
    });
    const worker = new SupervisedWorker(this.supervisor);
    this.images = new RemoteImages(worker);
    this.host = new WorkerMachineHost(worker, this.images, settings.accelerator);
    this.display = settings.machineDisplay ?? new QemuMachineDisplay(this.host);
  }

  async start(profile: ImageProfile): Promise<boolean> {
    this.starting = true;
    const state = await this.supervisor.start().finally(() => {
      this.starting = false;
    });
    if (state !== 'up') return false;
    await this.host.refreshImage(profile).catch(() => null);
    return true;
  }

  async counts(): Promise<ComputeCounts | null> {
    if (!this.host.reachable()) return null;
    return this.host.counts().catch(() => null);
  }

  onBack(listener: () => void): void {
    this.backListeners.push(listener);
  }

  async stop(): Promise<void> {
    this.stopRefreshing();
    await this.supervisor.stop(); // SIGTERM: the worker leaves its machines running
  }

  /**
   * A run of the local worker is adopted under the next epoch: on one box the worker is this
   * process's child, so nobody else adopts it and its own hello says the highest epoch so far.
   */
  private async adopt(client: WorkerClient, helloEpoch: number): Promise<void> {
    await client.fence(nextEpoch(helloEpoch, 0));
    // A removal that fails leaves the worker serving; its hello says so, and it is tried again.
    await this.removeStrays(client).catch((error: Error) => this.settings.logger.warn({ err: error.message }, 'kiste-worker\'s strays could not be removed; trying again'));
  }

  private async removeStrays(client: WorkerClient): Promise<void> {
    const removed = await removeWorkerStrays(client, () => this.settings.ownedMachineIds());
    if (removed.length) this.settings.logger.warn({ machines: removed }, 'kiste-worker removed machines no record owns');
  }

  private changed(state: WorkerState): void {
    if (state !== 'up') return this.stopRefreshing();
    this.refreshImages();
    this.collectedFor = null; // a worker that (re)started may have built a version of its own
    if (this.starting) return; // start()'s caller reconciles
    this.settings.logger.info({}, 'kiste-worker is back: adopting its machines and finishing what it cut short');
    for (const listener of this.backListeners) listener();
  }

  private refreshImages(): void {
    this.stopRefreshing();
    const round = this.refreshRound;
    const tick = () => {
      void this.host.refreshImage(this.settings.config.imageProfile).then((image) => this.collectOlderThan(image), () => null).finally(() => {
        if (round === this.refreshRound) this.imageTimer = setTimeout(tick, IMAGE_REFRESH_MS).unref();
      });
    };
    tick();
  }

  /** Once per served version (and again after a worker's start): the worker removes the versions nobody needs. */
  private collectOlderThan(image: HostImage | null): void {
    if (!image || image.version === this.collectedFor) return;
    this.collectedFor = image.version;
    void this.settings.keepVersions()
      .then((keep) => this.images.collectImages(this.settings.config.imageProfile, keep))
      .catch((error: Error) => {
        this.collectedFor = null; // asked again on the next refresh
        this.settings.logger.warn({ err: error }, 'old image versions could not be removed');
      });
  }

  /** Ends the refreshing loop (a tick in flight sees its round is over). */
  private stopRefreshing(): void {
    this.refreshRound++;
    if (this.imageTimer) clearTimeout(this.imageTimer);
    this.imageTimer = null;
  }
}

/**
 * What the worker takes from the service's own environment: the process basics, the proxy the image
 * build's downloads go through, and compute settings read where they are used (the image builder,
 * the QEMU driver), not from Config. Nothing else: an operator's environment may hold credentials
 * (PGPASSWORD, cloud keys) a worker has no use for.
 */
const PASSED_THROUGH = new Set([
  'PATH', 'HOME', 'USER', 'LOGNAME', 'SHELL', 'LANG', 'LANGUAGE', 'TZ', 'TMPDIR', 'TERM', 'NO_COLOR', 'FORCE_COLOR', 'NODE_ENV', 'npm_package_version',
  'http_proxy', 'https_proxy', 'no_proxy', 'HTTP_PROXY', 'HTTPS_PROXY', 'NO_PROXY',
  'KISTE_DEBIAN_MIRROR', 'KISTE_DEBIAN_SECURITY_MIRROR', 'KISTE_QEMU_BINARY', 'KISTE_QEMU_IMG_BINARY',
]);

/** The worker's environment: what PASSED_THROUGH names of the service's, plus the compute part of its configuration. */
export function workerEnvironment(config: Config, accelerator: Accelerator): NodeJS.ProcessEnv {
  const inherited = Object.fromEntries(Object.entries(process.env).filter(([name]) => PASSED_THROUGH.has(name) || name.startsWith('LC_')));
  const compute: Record<string, string | undefined> = {
    KISTE_DATA_DIR: config.dataDir,
    KISTE_IMAGE_DIR: config.imagesDir,
    KISTE_IMAGE_CACHE_DIR: config.imageCacheDir,
    KISTE_IMAGE_PROFILE: config.imageProfile,
    KISTE_BOOT_SNAPSHOTS: config.bootSnapshots ? 'on' : 'off',
    KISTE_ACCELERATOR: accelerator,
    KISTE_MACHINE_EGRESS: config.machineEgress.mode,
    KISTE_MACHINE_EGRESS_ALLOW: config.machineEgress.allow.map((cidr) => cidr.cidr).join(',') || undefined,
    KISTE_MACHINE_UID_BASE: String(config.machineUidBase),
    KISTE_LOG_LEVEL: config.logLevel,
    KISTE_LOG_FORMAT: config.logFormat,
  };
  return { ...inherited, ...Object.fromEntries(Object.entries(compute).filter((entry): entry is [string, string] => entry[1] !== undefined)) };
}
