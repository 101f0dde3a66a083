import type { ExportLink } from '../generated/prisma/sqlite/client';
import type { Db } from './prisma';

export type { ExportLink };

export class ExportLinkStore {
  constructor(private readonly db: Db) {}

  create(link: { id: string; accountId: string; tokenHash: string; createdAt: Date; expiresAt: Date }): Promise<ExportLink> {
    return this.db.exportLink.create({ data: link });
  }

  findByHash(accountId: string, tokenHash: string): Promise<ExportLink | null> {
    return this.db.exportLink.findFirst({ where: { accountId, tokenHash } });
  }
}
