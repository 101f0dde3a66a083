// Private images. Every query takes the account id, except the build worker's, which works on rows
// it found by status and says so.
import type { Transaction } from '../domain/transactions';
import type { Image, Prisma } from '../generated/prisma/sqlite/client';
import type { Db } from './prisma';
import { clientFor } from './transactions';

export type { Image };

export interface NewImage {
  id: string;
  accountId: string;
  name: string;
  slug: string;
  baseImage: string;
  components: { id: string; version: string }[];
  resources: { vcpu: number; memory_mib: number; disk_mib: number } | null;
  buildStrategy: 'universal' | 'derived_layer';
  status: 'ready' | 'building' | 'failed';
  artifactKey: string;
  baseVersion: string | null;
  buildPackages: string[] | null;
  createdAt: Date;
}

export interface BuildProgress {
  status?: 'ready' | 'building' | 'failed';
  buildStep?: string | null;
  buildProgress?: number;
  buildPackages?: string[];
  buildStartedAt?: Date | null;
  buildFinishedAt?: Date | null;
  buildError?: string | null;
  buildLog?: string;
  buildLogTruncated?: boolean;
}

export class ImageStore {
  constructor(private readonly db: Db) {}

  list(accountId: string): Promise<Image[]> {
    return this.db.image.findMany({ where: { accountId }, orderBy: [{ createdAt: 'asc' }, { id: 'asc' }] });
  }

  /** By ID, slug or name, in that order of preference. */
  async findByRef(accountId: string, ref: string): Promise<Image | null> {
    const matches = await this.db.image.findMany({ where: { accountId, OR: [{ id: ref }, { slug: ref }, { name: ref }] } });
    return matches.find((m) => m.id === ref) ?? matches.find((m) => m.slug === ref) ?? matches.find((m) => m.name === ref) ?? null;
  }

  async nameOrSlugTaken(accountId: string, name: string, slug: string, tx?: Transaction): Promise<boolean> {
    return (await clientFor(tx, this.db).image.count({ where: { accountId, OR: [{ name }, { slug }] } })) > 0;
  }

  create(tx: Transaction, image: NewImage): Promise<Image> {
    return clientFor(tx).image.create({
      data: {
        ...image,
        components: image.components as Prisma.InputJsonValue,
        resources: image.resources ?? undefined,
        buildPackages: image.buildPackages ?? undefined,
        updatedAt: image.createdAt,
      },
    });
  }

  /** Deletes it unless an instance of the account still uses it, in the caller's transaction. */
  async deleteUnlessUsed(tx: Transaction, accountId: string, id: string): Promise<'deleted' | 'in_use' | 'missing'> {
    const client = clientFor(tx);
    if ((await client.instance.count({ where: { accountId, imageId: id } })) > 0) return 'in_use';
    const { count } = await client.image.deleteMany({ where: { accountId, id } });
    return count > 0 ? 'deleted' : 'missing';
  }

  /** Build worker: rows still building (after a restart, their builds start again). Host-wide. */
  building(): Promise<Image[]> {
    return this.db.image.findMany({ where: { status: 'building' }, orderBy: { createdAt: 'asc' } });
  }

  /** Build worker: progress of a row it holds; false when the row was deleted meanwhile (it stays deleted). */
  async recordBuild(id: string, progress: BuildProgress, tx?: Transaction): Promise<boolean> {
    const { count } = await clientFor(tx, this.db).image.updateMany({ where: { id }, data: { ...progress, buildPackages: progress.buildPackages as Prisma.InputJsonValue | undefined } });
    return count > 0;
  }

  /** Image versions ready or building derived layers sit on: their folders must stay. Host-wide. */
  async layerBaseVersions(): Promise<Set<string>> {
    const rows = await this.db.image.findMany({ where: { buildStrategy: 'derived_layer', status: { in: ['ready', 'building'] } }, select: { baseVersion: true } });
    return new Set(rows.map((r) => r.baseVersion).filter((v): v is string => v !== null));
  }

}
