import type { Transaction } from '../domain/transactions';
import type { AccountDeletion } from '../generated/prisma/sqlite/client';
import type { Db } from './prisma';
import { clientFor } from './transactions';

export type { AccountDeletion };

export class AccountDeletionStore {
  constructor(private readonly db: Db) {}

  create(tx: Transaction, deletion: { id: string; accountId: string; email: string; now: Date }): Promise<AccountDeletion> {
    return clientFor(tx).accountDeletion.create({
      data: {
        id: deletion.id,
        accountId: deletion.accountId,
        email: deletion.email,
        state: 'pending',
        step: 'workers',
        requestedAt: deletion.now,
        nextAttemptAt: deletion.now,
      },
    });
  }

  findByAccount(accountId: string): Promise<AccountDeletion | null> {
    return this.db.accountDeletion.findUnique({ where: { accountId } });
  }

  due(now: Date): Promise<AccountDeletion[]> {
    return this.db.accountDeletion.findMany({ where: { state: 'pending', nextAttemptAt: { lte: now } }, orderBy: { requestedAt: 'asc' } });
  }

  update(id: string, data: Partial<Pick<AccountDeletion, 'state' | 'step' | 'attempts' | 'lastError' | 'completedAt' | 'nextAttemptAt'>>, tx?: Transaction): Promise<AccountDeletion> {
    return clientFor(tx, this.db).accountDeletion.update({ where: { id }, data });
  }
}
