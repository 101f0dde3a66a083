// "Credentials of an account ended or changed" (a sign-out, a revoked key, a lock, a deletion): every
// process drops what it cached of that account's credentials at once, so a replica never accepts a
// credential another replica has already ended. In this process the announcement is delivered
// directly; on PostgreSQL it is also sent as a NOTIFY, which the LISTEN connection of every
// process (postgres-listener.ts) delivers there. SQLite serves one process, which needs no more.
import type { CredentialChangeFeed } from '../domain/credentials';

export const CREDENTIALS_CHANNEL = 'kiste_credentials';
/** What an announcement may carry: an account id (a UUID). Anyone who may connect may NOTIFY. */
const ACCOUNT_ID = /^[0-9a-f-]{36}$/i;

export class CredentialChanges implements CredentialChangeFeed {
  private readonly listeners = new Set<(accountId: string | null) => void>();

  /** `notify` sends the announcement to the other processes (null: there are none). */
  constructor(private readonly notify: ((accountId: string) => Promise<unknown>) | null) {}

  async publish(accountId: string): Promise<void> {
    this.tell(accountId);
    await this.notify?.(accountId);
  }

  subscribe(listener: (accountId: string | null) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** An announcement from another process (a NOTIFY's payload): anything but an account id is ignored. */
  deliver(accountId: string): void {
    if (ACCOUNT_ID.test(accountId)) this.tell(accountId);
  }

  /**
   * Announcements may have been missed (the LISTEN connection was lost and is back): every
   * account counts as changed.
   */
  deliverEveryAccount(): void {
    this.tell(null);
  }

  private tell(accountId: string | null): void {
    for (const listener of this.listeners) listener(accountId);
  }
}
