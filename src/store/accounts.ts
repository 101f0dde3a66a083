import type { Transaction } from '../domain/transactions';
import type { Account } from '../generated/prisma/sqlite/client';
import type { Db } from './prisma';
import { clientFor } from './transactions';

export type { Account };

export class AccountStore {
  constructor(private readonly db: Db) {}

  count(): Promise<number> {
    return this.db.account.count();
  }

  findById(id: string): Promise<Account | null> {
    return this.db.account.findUnique({ where: { id } });
  }

  findByEmail(email: string): Promise<Account | null> {
    return this.db.account.findUnique({ where: { email } });
  }

  create(tx: Transaction, data: { id: string; email: string; name: string | null; passwordHash: string }): Promise<Account> {
    return clientFor(tx).account.create({ data });
  }

  /** Counts a failure from an unknown browser; locks when `threshold` is reached inside `windowMs`. */
  async recordUnknownBrowserFailure(id: string, now: Date, windowMs: number, threshold: number): Promise<Account> {
    return this.db.$transaction(async (tx) => {
      const account = await tx.account.findUniqueOrThrow({ where: { id } });
      const windowOpen = account.failedSignInsSince && now.getTime() - account.failedSignInsSince.getTime() < windowMs;
      const failures = windowOpen ? account.failedSignIns + 1 : 1;
      return tx.account.update({
        where: { id },
        data: {
          failedSignIns: failures,
          failedSignInsSince: windowOpen ? account.failedSignInsSince : now,
          signInLockedAt: account.signInLockedAt ?? (failures >= threshold ? now : null),
        },
      });
    });
  }

  clearFailures(id: string): Promise<Account> {
    return this.db.account.update({ where: { id }, data: { failedSignIns: 0, failedSignInsSince: null } });
  }

  /**
   * Serialises per-account limit checks: on PostgreSQL the update takes the account row's lock until
   * the transaction ends; SQLite has one writer at a time anyway.
   */
  async lockForUpdate(tx: Transaction, id: string): Promise<void> {
    await clientFor(tx).account.update({ where: { id }, data: { updatedAt: new Date() } });
  }

  /** Lifts the password sign-in lock and forgets the failures; true when a lock was lifted. */
  async unlock(tx: Transaction, id: string): Promise<boolean> {
    const client = clientFor(tx);
    const account = await client.account.findUniqueOrThrow({ where: { id } });
    await client.account.update({ where: { id }, data: { signInLockedAt: null, failedSignIns: 0, failedSignInsSince: null } });
    return account.signInLockedAt !== null;
  }

  /** Marks the account; false when a deletion was already requested (a concurrent request won). */
  async markDeletionRequested(tx: Transaction, id: string, now: Date): Promise<boolean> {
    const { count } = await clientFor(tx).account.updateMany({ where: { id, deletionRequestedAt: null }, data: { deletionRequestedAt: now } });
    return count === 1;
  }

  delete(tx: Transaction, id: string): Promise<unknown> {
    return clientFor(tx).account.deleteMany({ where: { id } });
  }
}
