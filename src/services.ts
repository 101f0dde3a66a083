// Wires stores and domain services together. Handlers reach the domain only through this.
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import type { Config } from './config';
import type { Database } from './db/database';
import { AccountDeletions, DeletionSteps, NO_EXTERNAL_STEPS } from './domain/account-deletion';
import { Accounts } from './domain/accounts';
import { ApiTokens } from './domain/api-tokens';
import { MinuteBudgets } from './domain/budgets';
import { Clock, systemClock } from './domain/clock';
import { Credentials } from './domain/credentials';
import { DeviceKeys } from './domain/device-keys';
import { Limits } from './domain/limits';
import { OAuth } from './domain/oauth';
import { Platform } from './domain/platform';
import { SignIn } from './domain/sign-in';
import { Instances } from './domain/instances';
import { Commands } from './domain/commands';
import type { Accelerator } from './compute/machine-host';
import { QemuMachineHost } from './compute/qemu-machine-host';
import { InstanceStore } from './store/instances';
import { AccountStore } from './store/accounts';
import { ApiTokenStore } from './store/api-tokens';
import { AccountDeletionStore } from './store/deletions';
import { DeviceKeyStore } from './store/device-keys';
import { ExportLinkStore } from './store/exports';
import { HeartbeatStore } from './store/heartbeats';
import { OAuthCodeStore } from './store/oauth-codes';
import { SessionStore } from './store/sessions';

export interface Services {
  config: Config;
  database: Database;
  clock: Clock;
  limits: Limits;
  budgets: MinuteBudgets;
  credentials: Credentials;
  signIn: SignIn;
  accounts: Accounts;
  apiTokens: ApiTokens;
  deviceKeys: DeviceKeys;
  oauth: OAuth;
  deletions: AccountDeletions;
  platform: Platform;
  machineHost: QemuMachineHost;
  instances: Instances;
  commands: Commands;
  startedAt: Date;
}

export interface ServiceOptions {
  clock?: Clock;
  deletionSteps?: DeletionSteps;
  /** The accelerator the server probed (default tcg). */
  accelerator?: Accelerator;
  /** How long lifecycle calls wait before answering 202 (spec: 20 s). */
  lifecycleWaitMs?: number;
  logger?: { info(object: object, message: string): void; warn(object: object, message: string): void; error(object: object, message: string): void };
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
  };
  const logger = options.logger ?? { info() {}, warn() {}, error() {} };
  const machineHost = new QemuMachineHost({
    dataDir: config.dataDir,
    imagesDir: config.imagesDir,
    accelerator: options.accelerator ?? 'tcg',
    logger,
  });
  const credentials = new Credentials(stores, installationSecret(config), clock);
  const instances = new Instances(db, stores, machineHost, limits, clock, {
    imageProfile: config.imageProfile,
    lifecycleWaitMs: options.lifecycleWaitMs ?? 20_000,
    hostMemoryReserveMib: 512,
  }, logger);
  const signIn = new SignIn(db, stores, limits, clock, (accountId) => credentials.forgetAccount(accountId));
  return {
    config,
    database,
    clock,
    limits,
    budgets: new MinuteBudgets(() => clock.now().getTime()),
    credentials,
    signIn,
    accounts: new Accounts(db, stores, clock),
    apiTokens: new ApiTokens(db, stores.apiTokens, stores.accounts, limits, clock),
    deviceKeys: new DeviceKeys(db, stores.deviceKeys, stores.accounts, limits, clock),
    oauth: new OAuth(db, stores.oauthCodes, signIn, clock),
    deletions: new AccountDeletions(db, stores, options.deletionSteps ?? NO_EXTERNAL_STEPS, clock),
    platform: new Platform(new HeartbeatStore(db), clock),
    machineHost,
    instances,
    commands: new Commands(db, instances, machineHost, clock),
    startedAt: clock.now(),
  };
}
