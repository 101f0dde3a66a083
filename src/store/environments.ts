// Environments and their immutable versions. Every query takes the account id.
import type { Transaction } from '../domain/transactions';
import type { Environment, EnvironmentVersion, Prisma } from '../generated/prisma/sqlite/client';
import type { DeclaredService } from '../domain/environment-rules';
import type { Db } from './prisma';
import { clientFor } from './transactions';

export type { Environment, EnvironmentVersion };
export type EnvironmentWithCurrent = Environment & { current: EnvironmentVersion };

export interface NewEnvironmentVersion {
  id: string;
  repositories: { url: string; ref: string | null; path: string | null; credentials_file: string | null }[];
  variables: Record<string, string>;
  secretPaths: string[];
  sealedSecretFiles: string | null;
  setupScript: string;
  services: DeclaredService[];
  createdAt: Date;
}

export class EnvironmentStore {
  constructor(private readonly db: Db) {}

  list(accountId: string): Promise<Environment[]> {
    return this.db.environment.findMany({ where: { accountId }, orderBy: [{ createdAt: 'asc' }, { id: 'asc' }] });
  }

  async findByName(accountId: string, name: string, tx?: Transaction): Promise<EnvironmentWithCurrent | null> {
    const client = clientFor(tx, this.db);
    const environment = await client.environment.findUnique({ where: { accountId_name: { accountId, name } } });
    if (!environment) return null;
    const current = await client.environmentVersion.findUnique({ where: { environmentId_version: { environmentId: environment.id, version: environment.currentVersion } } });
    return current ? { ...environment, current } : null;
  }

  versions(accountId: string, environmentId: string, limit: number): Promise<EnvironmentVersion[]> {
    return this.db.environmentVersion.findMany({ where: { accountId, environmentId }, orderBy: { version: 'desc' }, take: limit });
  }

  findVersion(accountId: string, versionId: string): Promise<(EnvironmentVersion & { environment: { name: string } }) | null> {
    return this.db.environmentVersion.findFirst({ where: { accountId, id: versionId }, include: { environment: { select: { name: true } } } });
  }

  /** The new environment and its version 1, in the caller's transaction. */
  async create(tx: Transaction, accountId: string, environment: { id: string; name: string }, first: NewEnvironmentVersion): Promise<EnvironmentWithCurrent> {
    const client = clientFor(tx);
    const created = await client.environment.create({
      data: { id: environment.id, accountId, name: environment.name, currentVersion: 1, createdAt: first.createdAt, updatedAt: first.createdAt },
    });
    const current = await client.environmentVersion.create({ data: versionData(accountId, created.id, 1, first) });
    return { ...created, current };
  }

  /** Publishes version current+1 in the caller's transaction; the version number is the row's, so two writers never share one. */
  async publish(tx: Transaction, accountId: string, environment: Environment, next: NewEnvironmentVersion): Promise<EnvironmentWithCurrent> {
    const client = clientFor(tx);
    const version = environment.currentVersion + 1;
    const { count } = await client.environment.updateMany({
      where: { id: environment.id, accountId, currentVersion: environment.currentVersion },
      data: { currentVersion: version, updatedAt: next.createdAt },
    });
    if (count === 0) throw new EnvironmentChangedError();
    const current = await client.environmentVersion.create({ data: versionData(accountId, environment.id, version, next) });
    return { ...environment, currentVersion: version, updatedAt: next.createdAt, current };
  }
}

/** Another writer published a version between the read and this write. */
export class EnvironmentChangedError extends Error {
  constructor() {
    super('the environment changed meanwhile');
  }
}

function versionData(accountId: string, environmentId: string, version: number, v: NewEnvironmentVersion) {
  return {
    id: v.id,
    accountId,
    environmentId,
    version,
    repositories: v.repositories as Prisma.InputJsonValue,
    variables: v.variables as Prisma.InputJsonValue,
    secretPaths: v.secretPaths as Prisma.InputJsonValue,
    sealedSecretFiles: v.sealedSecretFiles,
    setupScript: v.setupScript,
    services: v.services as unknown as Prisma.InputJsonValue,
    createdAt: v.createdAt,
  };
}
