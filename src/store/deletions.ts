import type { AccountDeletion, Db, Tx } from './prisma';

export class AccountDeletionStore {
  constructor(private readonly db: Db) {}

  create(tx: Tx, deletion: { id: string; accountId: string; email: string; now: Date }): Promise<AccountDeletion> {
    return tx.accountDeletion.create({
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

  update(tx: Tx | Db, id: string, data: Partial<Pick<AccountDeletion, 'state' | 'step' | 'attempts' | 'lastError' | 'completedAt' | 'nextAttemptAt'>>): Promise<AccountDeletion> {
    return tx.accountDeletion.update({ where: { id }, data });
  }
}
