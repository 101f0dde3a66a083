// Wires stores and domain services together. Handlers reach the domain only through this.
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { manifestDiskMib } from '../images';
import { BuiltFiles, DistFiles } from './built-files';
import { packageRoot } from './db/migrate';
import { randomBytes } from 'node:crypto';
import type { Config } from './config';
import type { Database } from './db/database';
import { AccountDeletions, DeletionSteps, NO_EXTERNAL_STEPS } from './domain/account-deletion';
import { Accounts } from './domain/accounts';
import { AccountUsage } from './domain/account-usage';
import { ApiTokens } from './domain/api-tokens';
import { MinuteBudgets } from './domain/budgets';
import { RequestBudgetStore } from './store/request-budgets';
import { Clock, systemClock } from './domain/clock';
import { Credentials } from './domain/credentials';
import { DeviceKeys } from './domain/device-keys';
import { Limits } from './domain/limits';
import { OAuth } from './domain/oauth';
import { Platform } from './domain/platform';
import { EventStream } from './domain/events';
import { EventStore } from './store/events';
import { SignIn } from './domain/sign-in';
import { Instances } from './domain/instances';
import { Images } from './domain/images';
import { ImageBuilds } from './domain/image-builds';
import { Environments } from './domain/environments';
import { EnvironmentSetup } from './domain/environment-setup';
import { ImageStore } from './store/images';
import { EnvironmentStore } from './store/environments';
import { InstanceSetupStore } from './store/instance-setups';
import { SshTunnels, type TunnelSettings } from './domain/ssh-tunnels';
import { Terminals, type TerminalSettings } from './domain/terminals';
import { Desktops } from './domain/desktops';
import { DesktopStore } from './store/desktop';
import type { MachineDisplay } from './compute/machine-display';
import { DEFAULT_STREAM_SETTINGS } from './media/desktop-streamer';
import { WebRtcDesktopStreamer } from './media/webrtc-streamer';
import { Commands, OUTPUT_LIMIT_BYTES } from './domain/commands';
import { CommandStore } from './store/commands';
import type { Accelerator } from './compute/machine-host';
import { InProcessCompute, type ServiceCompute, type ServiceHost } from './compute/service-compute';
import { WorkerLoss } from './domain/worker-loss';
import type { JobQueue } from './domain/job-queue';
import { InProcessJobQueue } from './jobs/in-process-job-queue';
import { PgBossQueue } from './db/pg-boss-queue';
import { LocalWorkerCompute, type LocalWorkerSettings } from './compute/local-worker-compute';
import { FleetCompute } from './compute/fleet-compute';
import { HostPlacement, WorkerPlacement } from './domain/placement';
import { Workers } from './domain/workers';
import { MachineMoves } from './domain/machine-moves';
import { WorkerStore } from './store/workers';
import { SoleReplica } from './db/replica-presence';
import type { LiveReplicas } from './domain/replicas';
import { computeSettingsOf } from './compute/compute-host';
import { InstanceStore } from './store/instances';
import { AccountStore } from './store/accounts';
import { ApiTokenStore } from './store/api-tokens';
import { AccountDeletionStore } from './store/deletions';
import { DeviceKeyStore } from './store/device-keys';
import { ExportLinkStore } from './store/exports';
import { HeartbeatStore } from './store/heartbeats';
import { OAuthCodeStore } from './store/oauth-codes';
import { SessionStore } from './store/sessions';
import { PrismaTransactions } from './store/transactions';
import { WebhookStore } from './store/webhooks';
import { SecretBox } from './domain/secret-box';
import { WebhookDeliveries } from './domain/webhook-deliveries';
import { systemResolver, type Resolver } from './domain/webhook-target';
import { Webhooks } from './domain/webhooks';
import { sendWebhook } from './webhooks/sender';
import { Alerts } from './domain/alerts';
import { AlertChecks } from './domain/alert-checks';
import { AlertOutbox } from './domain/alert-outbox';
import { AlertStore } from './store/alerts';
import { type MailSender, SmtpMailSender } from './mail/mail-sender';
import { ServiceMetrics, type ComputeCounts } from './observability/metrics';
import { HostedServices } from './domain/hosted-services';
import { HostedServiceStore } from './store/hosted-services';
import { SnapshotStore } from './store/snapshots';
import { Snapshots } from './domain/snapshots';
import { ServiceAccessGate } from './domain/service-access';
import { ServiceWake } from './domain/service-wake';
import { ServiceCredentialStore } from './store/service-credentials';
import { ServiceProxy } from './http/service-proxy';

/** Memory a one-box host keeps for itself beside its machines. */
const HOST_MEMORY_RESERVE_MIB = 512;

export interface Services {
  config: Config;
  metrics: ServiceMetrics;
  database: Database;
  clock: Clock;
  limits: Limits;
  budgets: MinuteBudgets;
  credentials: Credentials;
  signIn: SignIn;
  accounts: Accounts;
  /** What the account uses of its limits (GET /v1/status). */
  accountUsage: AccountUsage;
  apiTokens: ApiTokens;
  deviceKeys: DeviceKeys;
  hostedServices: HostedServices;
  snapshots: Snapshots;
  serviceAccess: ServiceAccessGate;
  serviceWake: ServiceWake;
  /** Requests for published services, before anything of kiste's (src/http/service-proxy.ts). */
  serviceProxy: ServiceProxy;
  oauth: OAuth;
  deletions: AccountDeletions;
  platform: Platform;
  events: EventStream;
  /** The host of the machines, as the domain holds it (a local worker's, or this process's own). */
  machineHost: ServiceHost;
  /** Where machines run: started and stopped with the service (in-process: its QemuMachineHost and jail). */
  compute: ServiceCompute;
  /** The workers registered for several hosts (npm run admin -- worker …). */
  workers: Workers;
  /** Stopped machines moved between workers (drain). */
  moves: MachineMoves;
  workerLoss: WorkerLoss;
  /** Background jobs any replica may run (started by the service; the admin only sends). */
  jobs: JobQueue;
  instances: Instances;
  /** The universal image, private images and the component catalogue. */
  images: Images;
  /** Derived layers of private images being built (resumed at start). */
  imageBuilds: ImageBuilds;
  environments: Environments;
  /** What applying environments to instances did (GET /v1/instances/{name}/setup). */
  instanceSetups: InstanceSetupStore;
  commands: Commands;
  sshTunnels: SshTunnels;
  terminals: Terminals;
  /** Desktop links, viewer sessions and their streams. */
  desktops: Desktops;
  alerts: Alerts;
  webhooks: Webhooks;
  webhookDeliveries: WebhookDeliveries;
  /** The built console and CLI download (dist/). */
  builtFiles: BuiltFiles;
  startedAt: Date;
}

export interface ServiceOptions {
  clock?: Clock;
  deletionSteps?: DeletionSteps;
  /** The accelerator the server probed (default tcg). */
  accelerator?: Accelerator;
  /** How long lifecycle calls wait before answering 202 (spec: 20 s). */
  lifecycleWaitMs?: number;
  /** Output a command may write before it is stopped (default OUTPUT_LIMIT_BYTES, 256 MiB). */
  commandOutputLimitBytes?: number;
  /** SSH tunnel rules (default: 32 per account, one hour idle). */
  tunnels?: TunnelSettings;
  /** Browser terminal timings (connect and reattach windows, replay size). */
  terminals?: TerminalSettings;
  /** The machines' screens (default: QEMU's display of each machine); tests inject faults here. */
  machineDisplay?: MachineDisplay;
  logger?: { info(object: object, message: string): void; warn(object: object, message: string): void; error(object: object, message: string): void };
  /** Webhook deliveries, for tests and benchmarks: name resolver, extra trusted CAs (never needed in production), attempt timeout, jitter source. */
  webhooks?: { resolve?: Resolver; ca?: string | Buffer | (string | Buffer)[]; timeoutMs?: number; random?: () => number };
  /** Sends alert e-mail instead of the SMTP relay of config.smtp. */
  mailSender?: MailSender;
  /** Where the built console and CLI download are read from (default: dist/ of the package). */
  builtFiles?: BuiltFiles;
  /** How long a presented credential is trusted without a database read (default 1 s); tests lengthen it. */
  credentialCacheTtlMs?: number;
  /** Where machines run instead of the one config.compute names (tests). */
  compute?: ServiceCompute;
  /** Where a local worker's log lines go (default: this process's stdout); tests keep them out of their output. */
  workerOutput?: (line: string) => void;
  /** The control-plane replicas alive (PostgreSQL: src/db/replica-presence.ts); default: this process alone. */
  replicas?: LiveReplicas;
}

/** The installation's secret (CSRF tokens): from KISTE_SECRET_KEY, or a file made once in the data dir. */
export function installationSecret(config: Config): Buffer {
  const fromEnv = process.env.KISTE_SECRET_KEY;
  if (fromEnv) return Buffer.from(fromEnv, 'utf8');
  const file = join(config.dataDir, 'secret.key');
  if (!existsSync(file)) {
    mkdirSync(config.dataDir, { recursive: true, mode: 0o700 });
    writeFileSync(file, randomBytes(32).toString('base64'), { mode: 0o600, flag: 'wx' });
  }
  chmodSync(file, 0o600);
  return Buffer.from(readFileSync(file, 'utf8').trim(), 'base64');
}

export function createServices(config: Config, database: Database, options: ServiceOptions = {}): Services {
  const db = database.prisma;
  const transactions = new PrismaTransactions(db);
  const clock = options.clock ?? systemClock;
  const limits = new Limits(config);
  const stores = {
    accounts: new AccountStore(db),
    sessions: new SessionStore(db),
    apiTokens: new ApiTokenStore(db),
    deviceKeys: new DeviceKeyStore(db),
    oauthCodes: new OAuthCodeStore(db),
    exportLinks: new ExportLinkStore(db),
    deletions: new AccountDeletionStore(db),
    instances: new InstanceStore(db),
    serviceCredentials: new ServiceCredentialStore(db),
  };
  const logger = options.logger ?? { info() {}, warn() {}, error() {} };
  // `compute` is made below; the scrape asks it only later.
  const metrics = new ServiceMetrics({
    machinesByStatus: () => stores.instances.countByStatus(),
    computeCounts: (): Promise<ComputeCounts | null> => compute.counts(),
    workers: () => workers.figures(),
  });
  // Old image versions go unless a private image's layer sits on them (`images` is made below; asked only later).
  const keepVersions = (): Promise<Iterable<string>> => images.layerBaseVersions();
  const ownedMachineIds = async (): Promise<string[]> => (await stores.instances.all()).map((row) => row.id);
  const secretKey = installationSecret(config);
  const workerStore = new WorkerStore(db, database.provider);
  const workers = new Workers(workerStore, new SecretBox(secretKey, 'worker signing secrets'), clock);
  const compute = options.compute ?? serviceCompute(config, options.accelerator ?? 'tcg', logger, metrics, { keepVersions, ownedMachineIds }, workers, options);
  const machineHost = compute.host;
  const machineDisplay = compute.display;
  const credentials = new Credentials(stores, secretKey, clock, database.credentialChanges, options.credentialCacheTtlMs);
  const imageStore = new ImageStore(db);
  const currentImage = () => machineHost.currentImage(config.imageProfile);
  const imageBuilds = new ImageBuilds(transactions, imageStore, {
    profile: config.imageProfile,
    diskMib: async (version) => {
      const manifest = await machineHost.imageManifest({ profile: config.imageProfile, version, artifactKey: '' });
      return manifest ? manifestDiskMib(manifest) : null;
    },
    buildLayer: (request) => machineHost.buildLayer(request),
  }, clock, logger);
  const images = new Images(transactions, imageStore, { currentImage, manifest: (image) => machineHost.imageManifest(image) }, imageBuilds, clock);
  const environments = new Environments(transactions, new EnvironmentStore(db), stores.accounts, new SecretBox(secretKey, 'environment secret files'), clock);
  const setups = new InstanceSetupStore(db);
  const environmentSetup = new EnvironmentSetup(transactions, { instances: stores.instances, setups }, (id) => machineHost.agent(id), clock, logger);
  // Several hosts: a registered worker with room, chosen in the create's transaction; one box: this host's free memory.
  const placement = compute.kind === 'workers' ? new WorkerPlacement(workerStore, () => clock.now()) : new HostPlacement(machineHost, HOST_MEMORY_RESERVE_MIB);
  // Snapshots ask instances for the owner's machine; instances ask snapshots for a create's source.
  const replicas = options.replicas ?? new SoleReplica();
  const snapshots: Snapshots = new Snapshots(transactions, new SnapshotStore(db), stores.accounts, { get: (accountId, name) => instances.get(accountId, name) }, machineHost, limits, clock, replicas, logger);
  const instances = new Instances(transactions, stores, machineHost, limits, clock, {
    imageProfile: config.imageProfile,
    lifecycleWaitMs: options.lifecycleWaitMs ?? 20_000,
  }, { images, environments, setup: environmentSetup, placement, snapshots }, replicas, logger, metrics);
  const webhookTarget = { rules: { allowPrivate: config.webhooksAllowPrivateTargetsUnsafe }, resolve: options.webhooks?.resolve ?? systemResolver };
  if (webhookTarget.rules.allowPrivate) logger.warn({}, 'KISTE_WEBHOOKS_ALLOW_PRIVATE_TARGETS_UNSAFE is set: webhooks may target private addresses and plain http');
  const webhookStore = new WebhookStore(db);
  const sshTunnels = new SshTunnels(instances, machineHost, options.tunnels);
  const terminals = new Terminals(instances, machineHost, clock, options.terminals);
  const desktops = new Desktops(new DesktopStore(db), stores.instances, instances,
    machineDisplay,
    new WebRtcDesktopStreamer({ ...DEFAULT_STREAM_SETTINGS, hostAddress: iceHostAddress(config.listenHost) }),
    config.turn, clock);
  const webhookSecrets = new SecretBox(secretKey, 'webhook signing secrets');
  const webhookDeliveries = new WebhookDeliveries(transactions, webhookStore, webhookSecrets, clock, database.commits, {
    ...webhookTarget,
    send: sendWebhook,
    ca: options.webhooks?.ca,
    timeoutMs: options.webhooks?.timeoutMs,
    random: options.webhooks?.random,
    userAgent: `kiste-webhooks/${config.version}`,
    logger,
  });
  const signIn = new SignIn(transactions, stores, limits, clock, (accountId) => credentials.forgetAccount(accountId));
  const alertStore = new AlertStore(db);
  const mailSender = options.mailSender ?? (config.smtp ? new SmtpMailSender(config.smtp) : null);
  const alerts = new Alerts(transactions, alertStore, stores.accounts, clock, mailSender !== null,
    new AlertOutbox(alertStore, mailSender, clock, { baseUrl: config.baseUrl }, logger),
    new AlertChecks(transactions, { alerts: alertStore, instances: stores.instances, apiTokens: stores.apiTokens }, machineHost, clock, logger));
  const hostedServiceStore = new HostedServiceStore(db);
  const hostedServices = new HostedServices(transactions, hostedServiceStore, stores.accounts, instances,
    { answers: (id, port) => portAnswers(machineHost, id, port) }, config.services, limits, clock, stores.serviceCredentials);
  const serviceWake = new ServiceWake({ resume: (accountId, name) => instances.resume(accountId, name), findById: (id) => stores.instances.findById(id) });
  const serviceAccess = new ServiceAccessGate(stores.serviceCredentials, hostedServiceStore, config.services, (token) => credentials.authenticateBearer(token), secretKey, clock);
  return {
    config,
    metrics,
    database,
    clock,
    limits,
    // Replicas share a PostgreSQL database and add up their counts there; one SQLite process counts alone.
    budgets: new MinuteBudgets(() => clock.now().getTime(), database.provider === 'postgresql' ? new RequestBudgetStore(db) : null),
    credentials,
    signIn,
    accounts: new Accounts(transactions, stores, clock),
    accountUsage: new AccountUsage({ ...stores, webhooks: webhookStore }, sshTunnels, clock),
    apiTokens: new ApiTokens(transactions, stores.apiTokens, stores.accounts, limits, clock),
    deviceKeys: new DeviceKeys(transactions, stores.deviceKeys, stores.accounts, limits, clock),
    hostedServices,
    snapshots,
    serviceAccess,
    serviceWake,
    serviceProxy: new ServiceProxy({
      services: hostedServices, access: serviceAccess, wake: serviceWake,
      reach: { openPort: (id, port) => machineHost.agent(id).openTcp(port, undefined, { timeoutMs: PORT_OPEN_MS }) },
      logger, baseUrl: config.baseUrl, consoleUrl: config.consoleUrl,
      machinesInUse: () => [...sshTunnels.machinesInUse(), ...terminals.machinesInUse(), ...desktops.machinesInUse()],
    }),
    oauth: new OAuth(transactions, stores.oauthCodes, signIn, clock),
    // The account's snapshots' files go before its records (machines are removed as strays once their records are gone).
    deletions: new AccountDeletions(transactions, stores, options.deletionSteps ?? { ...NO_EXTERNAL_STEPS, workers: (accountId) => snapshots.removeAllOf(accountId) }, clock),
    platform: new Platform(new HeartbeatStore(db), clock, () => instances.availability.now()),
    events: new EventStream(new EventStore(db), database.commits, clock),
    machineHost,
    compute,
    workers,
    workerLoss: new WorkerLoss(workers, stores.instances, instances.operations),
    jobs: database.provider === 'postgresql' && config.databaseUrl ? new PgBossQueue(config.databaseUrl, logger) : new InProcessJobQueue(logger),
    moves: new MachineMoves(transactions, stores.instances, instances.operations, workerStore, compute instanceof FleetCompute ? compute.host : null, clock),
    instances,
    images,
    imageBuilds,
    environments,
    instanceSetups: setups,
    commands: new Commands(transactions, new CommandStore(db), instances, machineHost, environments, clock, { outputLimitBytes: options.commandOutputLimitBytes ?? OUTPUT_LIMIT_BYTES }),
    sshTunnels,
    terminals,
    desktops,
    alerts,
    webhooks: new Webhooks(transactions, webhookStore, stores.accounts, limits, webhookSecrets, webhookDeliveries, clock, webhookTarget),
    webhookDeliveries,
    builtFiles: options.builtFiles ?? new DistFiles(join(packageRoot(), 'dist')),
    startedAt: clock.now(),
  };
}

/** Machines in a supervised local kiste-worker (the default), on registered workers (several hosts), or in this process. */
function serviceCompute(config: Config, accelerator: Accelerator, logger: Required<ServiceOptions>['logger'], metrics: ServiceMetrics, records: Pick<LocalWorkerSettings, 'keepVersions' | 'ownedMachineIds'>, workers: Workers, options: Pick<ServiceOptions, 'machineDisplay' | 'workerOutput'>): ServiceCompute {
  if (config.compute === 'workers') {
    return new FleetCompute({ registry: workers, profile: config.imageProfile, accelerator, logger, machineDisplay: options.machineDisplay });
  }
  if (config.compute === 'worker') {
    return new LocalWorkerCompute({ config, accelerator, logger, machineDisplay: options.machineDisplay, ...records, output: options.workerOutput });
  }
  return new InProcessCompute({
    ...computeSettingsOf(config, accelerator, logger),
    machineDisplay: options.machineDisplay,
    onAgentLinkDropped: () => metrics.linkDropped('agent'),
  });
}

/**
 * Where desktop streams gather ICE host candidates: the service's own listen address, so a service on
 * loopback streams only to this computer; on a wildcard address, every interface.
 */
function iceHostAddress(listenHost: string): string | null {
  return listenHost === '0.0.0.0' || listenHost === '::' || listenHost.includes(':') ? null : listenHost;
}

/** How long a look at a service's port may take (a TCP open through the machine's agent). */
const PORT_LOOK_MS = 1500;
/** How long the proxy waits for a TCP stream to a service's port. */
const PORT_OPEN_MS = 10_000;

/** Whether something listens on a running machine's port: a TCP open through its agent, closed at once. */
async function portAnswers(host: Pick<ServiceHost, 'agent'>, id: string, port: number): Promise<boolean> {
  try {
    const stream = await host.agent(id).openTcp(port, undefined, { timeoutMs: PORT_LOOK_MS });
    stream.destroy();
    return true;
  } catch {
    return false;
  }
}
