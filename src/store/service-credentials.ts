// What lets a client into a private hosted service (docs/hosted-services.md "Access account"):
// codes, cookies and tokens, kept as hashes only, each bound to one service and its account.
import type { ServiceCredential } from '../generated/prisma/sqlite/client';
import type { Db } from './prisma';

export type { ServiceCredential };
export type ServiceCredentialKind = 'code' | 'cookie' | 'token';

export interface NewServiceCredential {
  id: string;
  serviceId: string;
  accountId: string;
  kind: ServiceCredentialKind;
  tokenHash: string;
  returnTo: string;
  createdAt: Date;
  expiresAt: Date;
}

export class ServiceCredentialStore {
  constructor(private readonly db: Db) {}

  /** Stores a new one, and drops the account's expired ones on the way (they are never read again). */
  async issue(credential: NewServiceCredential): Promise<void> {
    await this.db.serviceCredential.deleteMany({ where: { accountId: credential.accountId, expiresAt: { lt: credential.createdAt } } });
    await this.db.serviceCredential.create({ data: credential });
  }

  /** A live credential of the kind for the service, by its hash; null otherwise. */
  find(serviceId: string, kind: ServiceCredentialKind, tokenHash: string, now: Date): Promise<ServiceCredential | null> {
    return this.db.serviceCredential.findFirst({ where: { tokenHash, serviceId, kind, expiresAt: { gt: now } } });
  }

  /** Takes a code once: true for the one caller that removed it. */
  async take(id: string): Promise<boolean> {
    const { count } = await this.db.serviceCredential.deleteMany({ where: { id } });
    return count === 1;
  }

  /** Ends the account's browser cookies and tokens (signing out everywhere). */
  async endForAccount(accountId: string): Promise<number> {
    const { count } = await this.db.serviceCredential.deleteMany({ where: { accountId } });
    return count;
  }
}
