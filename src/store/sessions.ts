// Browser and CLI sign-ins, and the browsers known to an account.
import type { Account, Db, Session, Tx } from './prisma';

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

  create(tx: Tx, session: NewSession): Promise<Session> {
    return tx.session.create({ data: session });
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
  revoke(tx: Tx, accountId: string, id: string, now: Date): Promise<{ count: number }> {
    return tx.session.updateMany({ where: { accountId, id, revokedAt: null, expiresAt: { gt: now } }, data: { revokedAt: now } });
  }

  revokeAll(tx: Tx, accountId: string, now: Date): Promise<{ count: number }> {
    return tx.session.updateMany({ where: { accountId, revokedAt: null, expiresAt: { gt: now } }, data: { revokedAt: now } });
  }

  isKnownBrowser(accountId: string, browserHash: string): Promise<boolean> {
    return this.db.knownBrowser
      .findUnique({ where: { accountId_browserHash: { accountId, browserHash } } })
      .then((found) => found !== null);
  }

  /** Whether the account has any known browser (none before its first browser sign-in). */
  async hasKnownBrowser(tx: Tx, accountId: string): Promise<boolean> {
    return (await tx.knownBrowser.findFirst({ where: { accountId }, select: { id: true } })) !== null;
  }

  rememberBrowser(tx: Tx, id: string, accountId: string, browserHash: string, now: Date): Promise<unknown> {
    return tx.knownBrowser.upsert({
      where: { accountId_browserHash: { accountId, browserHash } },
      create: { id, accountId, browserHash, createdAt: now, lastSeenAt: now },
      update: { lastSeenAt: now },
    });
  }
}
