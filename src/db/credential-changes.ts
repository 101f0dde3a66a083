// "Credentials of an account ended or changed" (a sign-out, a revoked key, a lock, a deletion): every
// process drops what it cached of that account's credentials at once, so a replica never accepts a
// credential another replica has already ended. In this process the announcement is delivered
// directly; on PostgreSQL it is also sent as a NOTIFY, which the LISTEN connection of every
// process (postgres-listener.ts) delivers there. SQLite serves one process, which needs no more.
import type { CredentialChangeFeed } from '../domain/credentials';

export const CREDENTIALS_CHANNEL = 'kiste_credentials';

export class CredentialChanges implements CredentialChangeFeed {
  private readonly listeners = new Set<(accountId: string) => void>();

  /** `notify` sends the announcement to the other processes (null: there are none). */
  constructor(private readonly notify: ((accountId: string) => Promise<unknown>) | null) {}

  async publish(accountId: string): Promise<void> {
    this.deliver(accountId);
    await this.notify?.(accountId);
  }

  subscribe(listener: (accountId: string) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** An announcement from this or another process. */
  deliver(accountId: string): void {
    for (const listener of this.listeners) listener(accountId);
  }
}
