// Browser and CLI sign-ins, and the browsers known to an account.
import type { Transaction } from '../domain/transactions';
import type { Session } from '../generated/prisma/sqlite/client';
import type { Account } from './accounts';
import type { Db } from './prisma';
import { clientFor } from './transactions';

export type { Session };

export type SessionKind = 'browser' | 'cli';

export interface NewSession {
  id: string;
  accountId: string;
  kind: SessionKind;
  tokenHash: string;
  /** From the service clock, like expiresAt (not the database default). */
  createdAt: Date;
  expiresAt: Date;
  userAgent: string | null;
  ip: string | null;
  device: string | null;
}

export class SessionStore {
  constructor(private readonly db: Db) {}

  create(tx: Transaction, session: NewSession): Promise<Session> {
    return clientFor(tx).session.create({ data: session });
  }

  /** The sign-in, when it is live and its account is not being deleted. */
  findActiveByHash(tokenHash: string, kind: SessionKind, now: Date): Promise<(Session & { account: Account }) | null> {
    return this.db.session.findFirst({
      where: { tokenHash, kind, revokedAt: null, expiresAt: { gt: now }, account: { deletionRequestedAt: null } },
      include: { account: true },
    });
  }

  touch(id: string, now: Date): Promise<unknown> {
    return this.db.session.updateMany({ where: { id }, data: { lastUsedAt: now } });
  }

  /** Newest first, keyset-paginated by (createdAt, id). */
  listActive(accountId: string, now: Date): Promise<Session[]> {
    return this.db.session.findMany({
      where: { accountId, revokedAt: null, expiresAt: { gt: now } },
      orderBy: [{ createdAt: 'desc' }, { id: 'desc' }],
    });
  }

  findActive(accountId: string, id: string, now: Date): Promise<Session | null> {
    return this.db.session.findFirst({ where: { accountId, id, revokedAt: null, expiresAt: { gt: now } } });
  }

  /** Ends a live sign-in; an expired one counts as gone already. */
  revoke(tx: Transaction, accountId: string, id: string, now: Date): Promise<{ count: number }> {
    return clientFor(tx).session.updateMany({ where: { accountId, id, revokedAt: null, expiresAt: { gt: now } }, data: { revokedAt: now } });
  }

  revokeAll(tx: Transaction, accountId: string, now: Date): Promise<{ count: number }> {
    return clientFor(tx).session.updateMany({ where: { accountId, revokedAt: null, expiresAt: { gt: now } }, data: { revokedAt: now } });
  }

  isKnownBrowser(accountId: string, browserHash: string): Promise<boolean> {
    return this.db.knownBrowser
      .findUnique({ where: { accountId_browserHash: { accountId, browserHash } } })
      .then((found) => found !== null);
  }

  /** Whether the account has any known browser (none before its first browser sign-in). */
  async hasKnownBrowser(tx: Transaction, accountId: string): Promise<boolean> {
    return (await clientFor(tx).knownBrowser.findFirst({ where: { accountId }, select: { id: true } })) !== null;
  }

  rememberBrowser(tx: Transaction, id: string, accountId: string, browserHash: string, now: Date): Promise<unknown> {
    return clientFor(tx).knownBrowser.upsert({
      where: { accountId_browserHash: { accountId, browserHash } },
      create: { id, accountId, browserHash, createdAt: now, lastSeenAt: now },
      update: { lastSeenAt: now },
    });
  }
}
