// Environments: every change publishes a new immutable version; an instance keeps the version it was
// created with. Secret file contents are sealed with the installation key, bound to their version's
// row, and opened only to be written into a machine.
import { KisteError } from '../errors';
import type { AccountStore } from '../store/accounts';
import type { EnvironmentStore, EnvironmentVersion, EnvironmentWithCurrent, NewEnvironmentVersion } from '../store/environments';
import { appendEvent } from '../store/events';
import type { Clock } from './clock';
import { checkEnvironment, type DeclaredService, type EnvironmentContent, type EnvironmentInput } from './environment-rules';
import type { SecretBox } from './secret-box';
import { newId } from './secrets';
import type { Transactions } from './transactions';

export interface AppliedEnvironment {
  versionId: string;
  name: string;
  version: number;
  content: EnvironmentContent;
}

/** Versions never change, so their variables are kept once read (every exec asks). */
const VARIABLES_CACHE_MAX = 1000;

export class Environments {
  private readonly variablesCache = new Map<string, Record<string, string>>();

  constructor(
    private readonly transactions: Transactions,
    private readonly store: EnvironmentStore,
    private readonly accounts: AccountStore,
    private readonly secrets: SecretBox,
    private readonly clock: Clock,
  ) {}

  list(accountId: string) {
    return this.store.list(accountId);
  }

  async get(accountId: string, name: string): Promise<EnvironmentWithCurrent> {
    const environment = await this.store.findByName(accountId, name);
    if (!environment) throw new KisteError('K30', { message: `No environment named ${name}`, param: 'name' });
    return environment;
  }

  async versions(accountId: string, name: string, limit: number): Promise<EnvironmentVersion[]> {
    const environment = await this.get(accountId, name);
    return this.store.versions(accountId, environment.id, limit);
  }

  async create(accountId: string, name: string, input: EnvironmentInput): Promise<EnvironmentWithCurrent> {
    const content = checkEnvironment(input);
    return this.transactions.run(async (tx) => {
      await this.accounts.lockForUpdate(tx, accountId); // two creates of one name: the second sees the first
      if (await this.store.findByName(accountId, name, tx)) throw new KisteError('K31', { message: `An environment named ${name} already exists`, param: 'name' });
      const created = await this.store.create(tx, accountId, { id: newId(), name }, this.newVersion(content));
      await appendEvent(tx, accountId, { type: 'environment.created', resourceType: 'environment', resourceId: created.id, data: { name, version: 1 } });
      return created;
    });
  }

  /** Publishes the next version: fields left out keep the current version's values. */
  async update(accountId: string, name: string, input: EnvironmentInput): Promise<EnvironmentWithCurrent> {
    return this.transactions.run(async (tx) => {
      await this.accounts.lockForUpdate(tx, accountId); // versions are numbered in order, one writer at a time
      const current = await this.store.findByName(accountId, name, tx);
      if (!current) throw new KisteError('K30', { message: `No environment named ${name}`, param: 'name' });
      const content = checkEnvironment(input, this.open(current.current));
      const published = await this.store.publish(tx, accountId, current, this.newVersion(content));
      await appendEvent(tx, accountId, {
        type: 'environment.updated', resourceType: 'environment', resourceId: current.id, data: { name, version: published.currentVersion },
      });
      return published;
    });
  }

  /** What a create applies: the environment's current version, secrets opened. */
  async forInstance(accountId: string, name: string): Promise<AppliedEnvironment> {
    const environment = await this.store.findByName(accountId, name);
    if (!environment) throw new KisteError('K30', { message: `No environment named ${name}`, param: 'environment' });
    return { versionId: environment.current.id, name, version: environment.currentVersion, content: this.open(environment.current) };
  }

  /** A version by id (an instance's), secrets opened; null when it is gone with its account. */
  async version(accountId: string, versionId: string): Promise<AppliedEnvironment | null> {
    const version = await this.store.findVersion(accountId, versionId);
    if (!version) return null;
    return { versionId, name: version.environment.name, version: version.version, content: this.open(version) };
  }

  /** Which environment and number a version is (no secrets opened); null when it is gone. */
  async describeVersion(accountId: string, versionId: string | null): Promise<{ name: string; version: number } | null> {
    if (!versionId) return null;
    const version = await this.store.findVersion(accountId, versionId);
    return version ? { name: version.environment.name, version: version.version } : null;
  }

  /** The hosted services a version declares (no secrets opened); none when it is gone. */
  async declaredServices(accountId: string, versionId: string | null): Promise<DeclaredService[]> {
    if (!versionId) return [];
    const version = await this.store.findVersion(accountId, versionId);
    return version ? servicesOf(version) : [];
  }

  /** The variables of a version, for every exec in an instance created with it. */
  async variables(accountId: string, versionId: string | null): Promise<Record<string, string>> {
    if (!versionId) return {};
    const cached = this.variablesCache.get(versionId);
    if (cached) return cached;
    const version = await this.store.findVersion(accountId, versionId);
    const variables = (version?.variables ?? {}) as unknown as Record<string, string>;
    if (this.variablesCache.size >= VARIABLES_CACHE_MAX) this.variablesCache.clear();
    if (version) this.variablesCache.set(versionId, variables);
    return variables;
  }

  private newVersion(content: EnvironmentContent): NewEnvironmentVersion {
    const id = newId();
    const files = content.secretFiles.map((file) => ({ path: file.path, content_base64: file.content.toString('base64') }));
    return {
      id,
      repositories: content.repositories,
      variables: content.variables,
      secretPaths: content.secretFiles.map((file) => file.path),
      sealedSecretFiles: files.length > 0 ? this.secrets.seal(JSON.stringify(files), id) : null,
      setupScript: content.setupScript,
      services: content.services,
      createdAt: this.clock.now(),
    };
  }

  private open(version: EnvironmentVersion): EnvironmentContent {
    const files = version.sealedSecretFiles
      ? (JSON.parse(this.secrets.open(version.sealedSecretFiles, version.id)) as { path: string; content_base64: string }[])
      : [];
    return {
      repositories: version.repositories as unknown as EnvironmentContent['repositories'],
      variables: version.variables as unknown as Record<string, string>,
      secretFiles: files.map((file) => ({ path: file.path, content: Buffer.from(file.content_base64, 'base64') })),
      setupScript: version.setupScript,
      services: servicesOf(version),
    };
  }
}

/** A version's declared services (versions from before services were declared have none). */
export function servicesOf(version: EnvironmentVersion): DeclaredService[] {
  return Array.isArray(version.services) ? (version.services as unknown as DeclaredService[]) : [];
}
