// What lets a client into a private hosted service (docs/hosted-services.md "Access account"):
// codes, cookies and tokens, kept as hashes only, each bound to one service and its account, and a
// browser's to the console sign-in it came from.
import type { Transaction } from '../domain/transactions';
import type { ServiceCredential } from '../generated/prisma/sqlite/client';
import type { Db } from './prisma';
import { clientFor } from './transactions';

export type { ServiceCredential };
export type ServiceCredentialKind = 'code' | 'cookie' | 'token';

export interface NewServiceCredential {
  id: string;
  serviceId: string;
  accountId: string;
  kind: ServiceCredentialKind;
  tokenHash: string;
  returnTo: string;
  sessionId: string | null;
  createdAt: Date;
  expiresAt: Date;
}

export class ServiceCredentialStore {
  constructor(private readonly db: Db) {}

  /**
   * Stores a new one. The account's expired ones go on the way, and of its live ones of that kind
   * for the service only the newest `keep` stay (a loop of sign-ins cannot pile them up).
   */
  async issue(credential: NewServiceCredential, keep: number): Promise<void> {
    const { accountId, serviceId, kind } = credential;
    await this.db.serviceCredential.deleteMany({ where: { accountId, expiresAt: { lt: credential.createdAt } } });
    const older = await this.db.serviceCredential.findMany({ where: { accountId, serviceId, kind }, orderBy: [{ createdAt: 'desc' }, { id: 'desc' }], skip: keep - 1, select: { id: true } });
    if (older.length) await this.db.serviceCredential.deleteMany({ where: { id: { in: older.map((row) => row.id) } } });
    await this.db.serviceCredential.create({ data: credential });
  }

  /** A live credential of the kind for the service, by its hash; null otherwise. */
  find(serviceId: string, kind: ServiceCredentialKind, tokenHash: string, now: Date): Promise<ServiceCredential | null> {
    return this.findAny(serviceId, kind, [tokenHash], now);
  }

  /** A live credential of the kind for the service among several hashes (one query); null when none is. */
  findAny(serviceId: string, kind: ServiceCredentialKind, tokenHashes: string[], now: Date): Promise<ServiceCredential | null> {
    if (tokenHashes.length === 0) return Promise.resolve(null);
    return this.db.serviceCredential.findFirst({ where: { tokenHash: { in: tokenHashes }, serviceId, kind, expiresAt: { gt: now } } });
  }

  /** Takes a code once: true for the one caller that removed it. */
  async take(id: string): Promise<boolean> {
    const { count } = await this.db.serviceCredential.deleteMany({ where: { id } });
    return count === 1;
  }

  /** Ends the account's cookies and tokens (signing out everywhere, a deletion requested). */
  async endForAccount(accountId: string, tx?: Transaction): Promise<number> {
    const { count } = await clientFor(tx, this.db).serviceCredential.deleteMany({ where: { accountId } });
    return count;
  }

  /** Ends what one console sign-in let in (it signed out, or was ended). */
  async endForSession(accountId: string, sessionId: string): Promise<number> {
    const { count } = await this.db.serviceCredential.deleteMany({ where: { accountId, sessionId } });
    return count;
  }

  /** Ends everything that let clients into the service (its access changed). */
  async endForService(serviceId: string, tx?: Transaction): Promise<number> {
    const { count } = await clientFor(tx, this.db).serviceCredential.deleteMany({ where: { serviceId } });
    return count;
  }

  /** Drops every expired one. */
  async removeExpired(now: Date): Promise<number> {
    const { count } = await this.db.serviceCredential.deleteMany({ where: { expiresAt: { lt: now } } });
    return count;
  }
}
