import type { Transaction } from '../domain/transactions';
import type { ApiToken } from '../generated/prisma/sqlite/client';
import type { Account } from './accounts';
import type { Db } from './prisma';
import { clientFor } from './transactions';

export type { ApiToken };

export interface NewApiToken {
  id: string;
  accountId: string;
  label: string;
  tokenHash: string;
  tokenHint: string;
  createdAt: Date;
  expiresAt: Date;
}

export class ApiTokenStore {
  constructor(private readonly db: Db) {}

  countActive(accountId: string, now: Date, tx?: Transaction): Promise<number> {
    return clientFor(tx, this.db).apiToken.count({ where: { accountId, revokedAt: null, expiresAt: { gt: now } } });
  }

  create(tx: Transaction, token: NewApiToken): Promise<ApiToken> {
    return clientFor(tx).apiToken.create({ data: token });
  }

  /** Every key of the account, revoked and expired ones included, newest first. */
  list(accountId: string): Promise<ApiToken[]> {
    return this.db.apiToken.findMany({ where: { accountId }, orderBy: [{ createdAt: 'desc' }, { id: 'desc' }] });
  }

  find(accountId: string, id: string): Promise<ApiToken | null> {
    return this.db.apiToken.findFirst({ where: { accountId, id } });
  }

  /** The key, when it is live and its account is not being deleted. */
  findActiveByHash(tokenHash: string, now: Date): Promise<(ApiToken & { account: Account }) | null> {
    return this.db.apiToken.findFirst({
      where: { tokenHash, revokedAt: null, expiresAt: { gt: now }, account: { deletionRequestedAt: null } },
      include: { account: true },
    });
  }

  touch(id: string, now: Date): Promise<unknown> {
    return this.db.apiToken.updateMany({ where: { id }, data: { lastUsedAt: now } });
  }

  revoke(tx: Transaction, accountId: string, id: string, now: Date): Promise<{ count: number }> {
    return clientFor(tx).apiToken.updateMany({ where: { accountId, id, revokedAt: null }, data: { revokedAt: now } });
  }

  /** Host-wide: live keys expiring after `now` and by `until` (accounts being deleted left out); for the expiry alerts. */
  expiringBy(now: Date, until: Date): Promise<ApiToken[]> {
    return this.db.apiToken.findMany({
      where: { revokedAt: null, expiresAt: { gt: now, lte: until }, account: { deletionRequestedAt: null } },
      orderBy: { expiresAt: 'asc' },
    });
  }

  revokeAll(tx: Transaction, accountId: string, now: Date): Promise<{ count: number }> {
    return clientFor(tx).apiToken.updateMany({ where: { accountId, revokedAt: null }, data: { revokedAt: now } });
  }
}
