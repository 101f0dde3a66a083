// A kiste service for tests: fresh database (SQLite or PostgreSQL per KISTE_TEST_DB), the real
// Express app, and helpers that sign in the three credential kinds. Every request made through
// `api` is checked against the spec (see contract.ts).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import request from 'supertest';
import type { Express } from 'express';
import { Config, loadConfig } from '../../src/config';
import type { Clock } from '../../src/domain/clock';
import type { DeletionSteps } from '../../src/domain/account-deletion';
import { createApp } from '../../src/http/app';
import { servesHttps } from '../../src/http/browser-edges';
import { cookieName } from '../../src/http/cookies';
import { createServices, Services, type ServiceOptions } from '../../src/services';
import { joinReplicas } from '../../src/db/replica-presence';
import type { Account } from '../../src/store/accounts';
import { checkContract } from './contract';
import { openDatabase } from '../../src/db/database';
import { openTestDatabase } from './database';
import { testUidBase } from './jail';
import { execFile } from 'node:child_process';
import { egressTable } from '../../src/compute/jail';

type Method = 'get' | 'post' | 'put' | 'patch' | 'delete';

export interface TestService {
  app: Express;
  services: Services;
  config: Config;
  /** supertest against the app; every response is contract-checked. */
  api: Record<Method, (path: string) => request.Test>;
  /** The PostgreSQL database's URL (undefined: SQLite in the data folder). */
  databaseUrl: string | undefined;
  close(): Promise<void>;
}

export interface TestServiceOptions {
  env?: Record<string, string>;
  clock?: Clock;
  deletionSteps?: DeletionSteps;
  /** How long lifecycle calls wait before answering 202 (default 20 s, as in the spec). */
  lifecycleWaitMs?: number;
  /** Output a command may write before it is stopped (default 256 MiB). */
  commandOutputLimitBytes?: number;
  /** Webhook delivery settings: name resolver, the test receiver's CA, attempt timeout, jitter. */
  webhooks?: ServiceOptions['webhooks'];
  /** SSH tunnel rules (per-account limit, idle time). */
  tunnels?: ServiceOptions['tunnels'];
  /** The built console and CLI download (default: the package's dist/, built before the tests). */
  builtFiles?: ServiceOptions['builtFiles'];
  /** The machines' screens (fault injection: a desktop that is still starting, or none). */
  machineDisplay?: ServiceOptions['machineDisplay'];
  /** Receives every log line of the service (requests and domain, debug level and up); silent without it. */
  log?: (line: string) => void;
  /** A second control-plane replica: the PostgreSQL database of this one (which keeps and drops it). */
  replicaOf?: TestService;
  /** How long a presented credential is trusted without a database read (default 1 s). */
  credentialCacheTtlMs?: number;
  /**
   * Where machines run: `in-process` (default: most suites reach into the host) or `worker`, the
   * service's default, a local kiste-worker started (and ended at close) with the service.
   */
  compute?: 'in-process' | 'worker';
}

export async function startTestService(options: TestServiceOptions = {}): Promise<TestService> {
  const shared = options.replicaOf?.databaseUrl;
  if (options.replicaOf && !shared) throw new Error('replicas share a PostgreSQL database; SQLite is one process\'s');
  const dataDir = mkdtempSync(join(tmpdir(), 'kiste-test-'));
  const database = shared ? { ...(await openDatabase({ url: shared, dataDir })), url: shared } : await openTestDatabase();
  const config = loadConfig({
    KISTE_DATA_DIR: dataDir, KISTE_REQUESTS_PER_MINUTE: '100000', KISTE_SIGN_IN_ATTEMPTS_PER_MINUTE: '100000',
    KISTE_MACHINE_UID_BASE: String(testUidBase()), // network rules of its own (see support/jail.ts)
    KISTE_COMPUTE: options.compute ?? 'in-process',
    ...options.env,
  });
  const logger = options.log
    ? pino({ level: 'debug' }, { write: (line: string) => options.log!(line) })
    : pino({ level: 'silent' });
  // Replicas on one PostgreSQL see each other as the service's do (operations' owners).
  const replicas = await joinReplicas(database.url);
  const services = createServices(config, database, {
    replicas,
    logger: options.log ? logger : undefined,
    clock: options.clock,
    deletionSteps: options.deletionSteps,
    lifecycleWaitMs: options.lifecycleWaitMs,
    commandOutputLimitBytes: options.commandOutputLimitBytes,
    webhooks: options.webhooks,
    tunnels: options.tunnels,
    builtFiles: options.builtFiles,
    machineDisplay: options.machineDisplay,
    credentialCacheTtlMs: options.credentialCacheTtlMs,
    workerOutput: options.log ?? (() => undefined),
  });
  if (config.compute === 'worker' && !(await services.compute.start(config.imageProfile))) {
    await services.compute.stop();
    throw new Error('the local worker did not start');
  }
  const app = await createApp(services, logger);
  const api = Object.fromEntries(
    (['get', 'post', 'put', 'patch', 'delete'] as Method[]).map((method) => [
      method,
      // buffer(true): also collect bodies of media types superagent does not buffer itself (NDJSON streams).
      (path: string) => request(app)[method](path).buffer(true).expect(checkContract),
    ]),
  ) as TestService['api'];
  return {
    app,
    services,
    config,
    api,
    databaseUrl: database.url,
    async close() {
      await services.serviceProxy.close();
      await services.compute.inProcess?.machineJail.unloadFirewall();
      // Agent clients of machines this service looked at (a status probe of a row with no guest
      // behind it) would try to reconnect for ever and keep the test process alive.
      services.compute.inProcess?.machineHost.detachAll();
      if (config.compute === 'worker') {
        await services.compute.stop(); // its machines' network rules stay, as the service leaves them
        await new Promise((resolve) => execFile('nft', ['delete', 'table', 'inet', egressTable(config.machineUidBase)], resolve));
      }
      await replicas.close();
      await database.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

let counter = 0;
export const TEST_PASSWORD = 'correct horse battery staple';

export async function createAccount(t: TestService, email = `user${++counter}-${Date.now()}@example.com`): Promise<Account> {
  return t.services.accounts.create(email, TEST_PASSWORD);
}

export async function apiKeyFor(t: TestService, account: Account, lifetimeSeconds = 3600): Promise<string> {
  return (await t.services.apiTokens.create(account.id, 'test key', lifetimeSeconds)).token;
}

export async function cliTokenFor(t: TestService, account: Account): Promise<string> {
  return (await t.services.signIn.startSession(account.id, 'cli', { userAgent: 'jest', ip: '127.0.0.1' }, 'test-laptop')).token;
}

/** Signs in through POST /v1/auth/login, like a browser: returns the Cookie header and CSRF token. */
export async function browserFor(t: TestService, account: Account): Promise<{ cookie: string; csrf: string; browserCookie: string }> {
  const res = await t.api.post('/v1/auth/login').send({ email: account.email, password: TEST_PASSWORD }).expect(200);
  const setCookies = res.headers['set-cookie'] as unknown as string[];
  const pick = (name: string) => setCookies.find((line) => line.startsWith(`${cookieName(name, servesHttps(t.config))}=`))!.split(';')[0]!;
  return { cookie: pick('kiste_session'), csrf: res.body.csrf, browserCookie: pick('kiste_browser') };
}

export const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
